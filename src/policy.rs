//! The policy applied to one attempt's outcome: safe to repeat? retryable?
//! how long to wait? within the count, the deadline and the budget?
//!
//! Everything here is synchronous; the middleware does the sending and the
//! waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::Result;

use crate::budget::{Account, Budget};
use crate::classify::{self, Attempt, Outcome, Retryability, Verdict};
use crate::clock::Clock;
use crate::config::RetryConfig;
use crate::decision::{Decision, RetryReason, StopReason};
use crate::overrides::{MaxRetries, RetryDeadline, SafeToRetry};
use crate::random::JitterSource;
use crate::retry_after::parse_retry_after;

/// The configuration with the clock, randomness and budget it runs on.
#[derive(Clone)]
pub(crate) struct Policy {
    pub(crate) config: RetryConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) jitter: Arc<dyn JitterSource>,
    pub(crate) budget: Option<Arc<Budget>>,
}

/// Per-request settings, after the overrides in the extensions.
pub(crate) struct Plan {
    pub(crate) safe: bool,
    pub(crate) max_retries: u32,
    pub(crate) deadline: Option<(Instant, Duration)>,
    /// The budget account this request draws its retries from.
    pub(crate) account: Option<Arc<Account>>,
}

/// Per-request progress.
pub(crate) struct Progress {
    pub(crate) attempts: u32,
    pub(crate) total_wait: Duration,
    pub(crate) previous_wait: Duration,
}

impl Policy {
    /// Reads the per-request overrides and opens the budget account.
    pub(crate) fn plan(&self, req: &Request, extensions: &Extensions) -> (Plan, Progress) {
        let start = self.clock.now();
        let account = self.budget.as_ref().map(|budget| {
            let account = budget.account(req.url());
            budget.deposit(&account, start);
            account
        });
        let plan = Plan {
            safe: extensions.get::<SafeToRetry>().is_some() || self.is_safe(req),
            max_retries: extensions.get::<MaxRetries>().map_or(self.config.max_retries(), |m| m.0),
            deadline: extensions
                .get::<RetryDeadline>()
                .map(|d| d.0)
                .or(self.config.deadline())
                .map(|limit| (start, limit)),
            account,
        };
        let progress = Progress {
            attempts: 0,
            total_wait: Duration::ZERO,
            previous_wait: self.config.initial_backoff(),
        };
        (plan, progress)
    }

    fn is_safe(&self, req: &Request) -> bool {
        req.method().is_idempotent()
            || req
                .headers()
                .get(self.config.idempotency_header())
                .is_some_and(|key| !key.is_empty())
    }

    fn verdict(
        &self,
        request: Option<&Request>,
        outcome: &Result<Response>,
        number: u32,
    ) -> Verdict {
        if let (Some(predicate), Some(request)) = (self.config.predicate(), request) {
            let outcome_view = match outcome {
                Ok(response) => Outcome::Response(response),
                Err(error) => Outcome::Error(error),
            };
            let attempt = Attempt { request, number, outcome: outcome_view };
            if let Some(retryability) = predicate(&attempt) {
                return Verdict { retryability, reason: RetryReason::Custom };
            }
        }
        match outcome {
            Ok(response) => classify::classify_status(&self.config, response.status()),
            Err(error) => classify::classify_error(error),
        }
    }

    /// What follows an attempt: retry after a wait, or stop, and why.
    pub(crate) fn decide(
        &self,
        request: Option<&Request>,
        outcome: &Result<Response>,
        plan: &Plan,
        progress: &mut Progress,
    ) -> Decision {
        let verdict = self.verdict(request, outcome, progress.attempts);
        match verdict.retryability {
            Retryability::Never => return Decision::Stop(StopReason::Final),
            Retryability::WhenSafe if !plan.safe => return Decision::Stop(StopReason::NotSafe),
            Retryability::WhenSafe | Retryability::AnyMethod => {}
        }
        if progress.attempts > plan.max_retries {
            return Decision::Stop(StopReason::RetriesExhausted);
        }
        if request.is_none() {
            return Decision::Stop(StopReason::NotReplayable);
        }
        let asked = match outcome {
            Ok(response) => response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|value| parse_retry_after(value, self.clock.wall_time())),
            Err(_) => None,
        };
        let after = match asked {
            Some(asked) if asked > self.config.max_retry_after() => {
                return Decision::Stop(StopReason::RetryAfterTooLong(asked));
            }
            Some(asked) => asked,
            None => {
                let wait = self.config.backoff(
                    progress.attempts - 1,
                    progress.previous_wait,
                    self.jitter.unit(),
                );
                progress.previous_wait = wait;
                wait
            }
        };
        let now = self.clock.now();
        if let Some((start, limit)) = plan.deadline {
            let spent = now.saturating_duration_since(start);
            if spent.saturating_add(after) > limit {
                return Decision::Stop(StopReason::DeadlineExceeded);
            }
        }
        // Last, so that only a retry that will happen is paid for.
        if let (Some(budget), Some(account)) = (&self.budget, &plan.account) {
            if !budget.try_withdraw(account, now) {
                return Decision::Stop(StopReason::BudgetExhausted);
            }
        }
        Decision::Retry { after, reason: verdict.reason }
    }
}
