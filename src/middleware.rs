//! The middleware: one loop of attempt, decide, wait.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Extensions, Method};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next, Result};

use crate::budget::{Account, Budget};
use crate::classify::{self, Attempt, Outcome, Retryability, Verdict};
use crate::clock::{Clock, TokioClock};
use crate::config::RetryConfig;
use crate::decision::{Decision, StopReason};
use crate::overrides::{MaxRetries, NoRetry, RetryDeadline, SafeToRetry};
use crate::random::{JitterSource, ThreadRngJitter};
use crate::report::{AttemptNumber, ReportSlot, RetryReport};
use crate::retry_after::parse_retry_after;

type Hook = Arc<dyn Fn(&RetryEvent<'_>) + Send + Sync>;

/// The retry middleware for `reqwest_middleware`.
///
/// Cheap to clone: clones share the configuration, clock, jitter source,
/// hook and retry budget.
///
/// ```
/// use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
///
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(RetryConfig::default()))
///     .build();
/// # let _ = client;
/// ```
#[derive(Clone)]
pub struct RetryMiddleware {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    config: RetryConfig,
    clock: Arc<dyn Clock>,
    jitter: Arc<dyn JitterSource>,
    hook: Option<Hook>,
    budget: Option<Arc<Budget>>,
}

/// What the middleware decided after one attempt, as a hook sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RetryEvent<'a> {
    /// The attempt just made, starting at 1.
    pub attempt: u32,
    /// The request's method.
    pub method: &'a Method,
    /// What happens next.
    pub decision: Decision,
}

impl Default for RetryMiddleware {
    fn default() -> Self {
        Self::new(RetryConfig::default())
    }
}

impl RetryMiddleware {
    /// A middleware with this policy, the [`TokioClock`] and thread-local
    /// randomness.
    pub fn new(config: RetryConfig) -> Self {
        let budget = config.budget().map(|budget| Arc::new(Budget::new(budget)));
        let inner = Inner {
            config,
            clock: Arc::new(TokioClock),
            jitter: Arc::new(ThreadRngJitter),
            hook: None,
            budget,
        };
        Self { inner: Arc::new(inner) }
    }

    /// Uses `clock` for every reading of the time and every wait.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        Arc::make_mut(&mut self.inner).clock = Arc::new(clock);
        self
    }

    /// Uses `source` for the randomness behind jitter.
    pub fn with_jitter_source(mut self, source: impl JitterSource + 'static) -> Self {
        Arc::make_mut(&mut self.inner).jitter = Arc::new(source);
        self
    }

    /// Calls `hook` after every attempt with the decision taken, e.g. to
    /// count retries for metrics. It runs inline: keep it quick.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use reqwest_safe_retry::{Decision, RetryMiddleware};
    ///
    /// let retries = Arc::new(AtomicU64::new(0));
    /// let counter = retries.clone();
    /// let middleware = RetryMiddleware::default().on_decision(move |event| {
    ///     if let Decision::Retry { .. } = event.decision {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// });
    /// # let _ = middleware;
    /// ```
    pub fn on_decision<F>(mut self, hook: F) -> Self
    where
        F: Fn(&RetryEvent<'_>) + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.inner).hook = Some(Arc::new(hook));
        self
    }

    /// The policy in force.
    pub fn config(&self) -> &RetryConfig {
        &self.inner.config
    }
}

impl fmt::Debug for RetryMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryMiddleware")
            .field("config", &self.inner.config)
            .field("clock", &self.inner.clock)
            .field("hook", &self.inner.hook.as_ref().map(|_| "<fn>"))
            .field("budget", &self.inner.budget)
            .finish_non_exhaustive()
    }
}

/// Written out rather than through `async_trait`, whose extra async block
/// would hold a second copy of the request in every request's future.
impl Middleware for RetryMiddleware {
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        req: Request,
        extensions: &'life1 mut Extensions,
        next: Next<'life2>,
    ) -> Pin<Box<dyn Future<Output = Result<Response>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.execute(req, extensions, next)
    }
}

type BoxFuture<'a> = Pin<Box<dyn Future<Output = Result<Response>> + Send + 'a>>;

/// Per-request settings, after the overrides in the extensions.
struct Plan {
    safe: bool,
    max_retries: u32,
    deadline: Option<(Instant, Duration)>,
    /// The budget account this request draws its retries from.
    account: Option<Arc<Account>>,
}

/// Per-request progress.
struct Progress {
    attempts: u32,
    total_wait: Duration,
    previous_wait: Duration,
}

/// One logical request: its settings, its progress, its method for the logs.
struct Call {
    plan: Plan,
    progress: Progress,
    method: Method,
}

/// After an attempt: the wait and the request to send next, or why to stop.
type Following = std::result::Result<(Duration, Request), StopReason>;

impl Inner {
    /// Reads the overrides and copies the request before anything is
    /// awaited, then sends the first attempt inline and hands any retries to
    /// a boxed loop, so the common case (no retry) carries neither the loop's
    /// state nor a second copy of the request in its future.
    fn execute<'a>(
        &'a self,
        req: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> BoxFuture<'a> {
        if extensions.get::<NoRetry>().is_some() {
            let method = req.method().clone();
            return Box::pin(async move {
                let outcome = next.run(req, extensions).await;
                self.notify(1, &method, Decision::Stop(StopReason::Disabled));
                let report = RetryReport {
                    attempts: 1,
                    total_wait: Duration::ZERO,
                    stop: StopReason::Disabled,
                };
                finish(extensions, outcome, report)
            });
        }
        let mut call = self.call(&req, extensions);
        let (attempt, kept) = split(req);
        call.progress.attempts = 1;
        Box::pin(async move {
            let outcome = next.clone().run(attempt, extensions).await;
            match self.conclude(&mut call, kept, &outcome) {
                Err(stop) => finish(extensions, outcome, call.report(stop)),
                Ok((after, template)) => {
                    Box::pin(self.retries(call, outcome, after, template, extensions, next)).await
                }
            }
        })
    }

    /// Waits and attempts again until an attempt says stop.
    async fn retries(
        &self,
        mut call: Call,
        mut outcome: Result<Response>,
        mut after: Duration,
        mut template: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        loop {
            if let Ok(response) = outcome {
                drain(response, self.config.drain_limit()).await;
            }
            self.clock.sleep(after).await;
            call.progress.total_wait = call.progress.total_wait.saturating_add(after);
            call.progress.attempts += 1;
            extensions.insert(AttemptNumber(call.progress.attempts));
            let (attempt, kept) = split(template);
            outcome = next.clone().run(attempt, extensions).await;
            match self.conclude(&mut call, kept, &outcome) {
                Err(stop) => return finish(extensions, outcome, call.report(stop)),
                Ok((wait, request)) => (after, template) = (wait, request),
            }
        }
    }

    /// Decides what follows an attempt, and tells the hook and the logs.
    fn conclude(
        &self,
        call: &mut Call,
        kept: Option<Request>,
        outcome: &Result<Response>,
    ) -> Following {
        let decision = self.decide(kept.as_ref(), outcome, &call.plan, &mut call.progress);
        self.notify(call.progress.attempts, &call.method, decision);
        match (decision, kept) {
            (Decision::Retry { after, .. }, Some(request)) => Ok((after, request)),
            (Decision::Stop(stop), _) => Err(stop),
            // `decide` never retries without a kept request.
            (Decision::Retry { .. }, None) => Err(StopReason::NotReplayable),
        }
    }

    /// Reads the per-request overrides and opens the budget account.
    fn call(&self, req: &Request, extensions: &Extensions) -> Call {
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
        Call { plan, progress, method: req.method().clone() }
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
                return Verdict { retryability, reason: crate::decision::RetryReason::Custom };
            }
        }
        match outcome {
            Ok(response) => classify::classify_status(&self.config, response.status()),
            Err(error) => classify::classify_error(error),
        }
    }

    fn decide(
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

    fn notify(&self, attempt: u32, method: &Method, decision: Decision) {
        #[cfg(feature = "tracing")]
        match decision {
            Decision::Retry { after, reason } => tracing::debug!(
                attempt,
                method = %method,
                reason = %reason,
                wait_ms = after.as_millis() as u64,
                "retrying request"
            ),
            Decision::Stop(StopReason::Final) if attempt == 1 => {}
            Decision::Stop(reason) => tracing::debug!(
                attempt,
                method = %method,
                reason = %reason,
                "not retrying request"
            ),
        }
        if let Some(hook) = &self.hook {
            hook(&RetryEvent { attempt, method, decision });
        }
    }
}

impl Call {
    fn report(&self, stop: StopReason) -> RetryReport {
        RetryReport { attempts: self.progress.attempts, total_wait: self.progress.total_wait, stop }
    }
}

/// The copy to send and the original to keep for the next attempt; a body
/// that cannot be copied is sent as it is, once.
fn split(template: Request) -> (Request, Option<Request>) {
    match template.try_clone() {
        Some(copy) => (copy, Some(template)),
        None => (template, None),
    }
}

/// Records the report where the caller can find it and returns the outcome.
fn finish(
    extensions: &mut Extensions,
    mut outcome: Result<Response>,
    report: RetryReport,
) -> Result<Response> {
    if let Some(slot) = extensions.get::<ReportSlot>() {
        slot.set(report);
    }
    if let Ok(response) = &mut outcome {
        response.extensions_mut().insert(report);
    }
    outcome
}

/// Reads and discards up to `limit` bytes of a response that is being
/// retried, so its connection can go back to the pool; a longer body is
/// dropped, which closes the connection instead of reading it all.
async fn drain(mut response: Response, limit: usize) {
    if response.content_length().is_some_and(|len| len > limit as u64) {
        return;
    }
    let mut read = 0usize;
    while read < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => read = read.saturating_add(chunk.len()),
            Ok(None) | Err(_) => break,
        }
    }
}
