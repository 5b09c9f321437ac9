//! The policy of one request: after each attempt, retry after a wait, or
//! stop, and why.
//!
//! Everything here is synchronous; the middleware does the sending and the
//! waiting. A [`Policy`] is made per request from the [`Shared`] parts every
//! request uses, and it alone answers "what happens after this attempt?".

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Extensions, Method, StatusCode};
use reqwest::{Request, Response};
use reqwest_middleware::Result;

use crate::backoff::{Jitter, backoff, ceiling, scale};
use crate::budget::{Account, Paid};
use crate::classify::{self, Class, Scope};
use crate::config::RetryAfterOverCap;
use crate::deadline::{Deadline, MIN_ATTEMPT, attempt_bounds, visible_timeout};
use crate::error::DeadlineExceeded;
use crate::extensions::{MaxRetries, RetryDeadline};
use crate::predicate::{Attempt, Outcome, Wait};
use crate::reason::{Decision, RetryReason, StopReason};
use crate::redirect::Seen;
use crate::report::RetryReport;
use crate::retry_after::{asked, until};
use crate::safety::{Safety, safety};
use crate::shared::Shared;

/// One request's policy and progress.
pub(crate) struct Policy<'a> {
    shared: &'a Shared,
    /// Why the request may be repeated, if it may: its method or
    /// [`SafeToRetry`](crate::SafeToRetry), or only its idempotency key,
    /// which a redirect to another origin takes away.
    safety: Safety,
    /// The request is a POST, which a 301 or 302 turns into a GET: what a
    /// redirect carries on depends on it.
    post: bool,
    /// The retry count: the configured one, or the request's [`MaxRetries`].
    max_retries: u32,
    /// When the call started and how long it may take, if it has a deadline.
    deadline: Option<Deadline>,
    /// The budget account retries are drawn from, held once a retry is in
    /// question: a call whose first answer is final only pays into it.
    account: Option<Arc<Account>>,
    /// What the last retry cost, until its outcome is known, and whether
    /// it has been sent: a retry that ends in a final answer, or is never
    /// sent, is given back.
    paid: Option<(Paid, bool)>,
    /// Attempts started so far.
    attempts: u32,
    /// Redirects the client followed within them.
    redirects: u32,
    /// Whether a server answered an attempt with a redirect: the request
    /// was processed.
    redirected: bool,
    /// The last backoff picked, which decorrelated jitter grows from.
    previous_wait: Duration,
    total_wait: Duration,
}

impl<'a> Policy<'a> {
    /// Reads the per-request overrides. The clock is read only for a
    /// deadline.
    pub(crate) fn new(shared: &'a Shared, request: &Request, extensions: &Extensions) -> Self {
        let config = &shared.config;
        let limit = extensions.get::<RetryDeadline>().map(RetryDeadline::get).or(config.deadline);
        Self {
            shared,
            safety: safety(request, extensions, &config.idempotency_header),
            post: request.method() == Method::POST,
            max_retries: extensions.get::<MaxRetries>().map_or(config.max_retries, MaxRetries::get),
            deadline: limit.map(|limit| Deadline { start: shared.clock.now(), limit }),
            account: None,
            paid: None,
            attempts: 0,
            redirects: 0,
            redirected: false,
            previous_wait: config.initial_backoff,
            total_wait: Duration::ZERO,
        }
    }

    /// Starts an attempt: returns the request to send, and the instant to cut
    /// the attempt at, if it must be cut other than by its own timeout.
    ///
    /// The request to send is a copy of `pending`, which stays for the next
    /// attempt; or, when no retry can follow and no predicate needs to see
    /// it, or its body cannot be copied, `pending` itself, taken: it is sent
    /// once.
    ///
    /// The attempt is bounded by the attempt timeout and the deadline. Where
    /// it has a timeout the middleware can see (its own, or the configured
    /// attempt timeout), the shortest of them goes on the request, so reqwest
    /// reports it as a timeout. Otherwise setting one would replace the
    /// client's own default, which may be shorter, so the instant to cut the
    /// attempt at is returned instead.
    ///
    /// # Errors
    ///
    /// When the deadline has already passed: nothing is sent.
    pub(crate) fn start(
        &mut self,
        pending: &mut Option<Request>,
    ) -> std::result::Result<(Request, Option<Instant>), DeadlineExceeded> {
        let left = match self.deadline {
            Some(deadline) => {
                let now = self.shared.clock.now();
                let left = deadline.left(now);
                if left.is_zero() {
                    return Err(self.deadline_exceeded());
                }
                Some((now, left))
            }
            None => None,
        };
        self.attempts = self.attempts.saturating_add(1);
        if let Some((_, sent)) = &mut self.paid {
            *sent = true;
        }
        // A copy is kept while another attempt may follow, or for the
        // predicate to be shown.
        let keep = self.attempts <= self.max_retries || self.shared.config.predicate().is_some();
        let copy = if keep { pending.as_ref().and_then(Request::try_clone) } else { None };
        if copy.is_none() {
            // No copy will be there for `decide` to name the host by.
            if let Some(request) = pending.as_ref() {
                self.hold_account(request, || self.shared.clock.now());
            }
        }
        // The loop stops once the request went out without a copy kept, so
        // `pending` is always there to copy or take.
        let mut attempt = copy.or_else(|| pending.take()).expect("a request to send");
        let own = attempt.timeout().copied();
        let visible = visible_timeout(own, self.shared.config.attempt_timeout);
        let (timeout, cut_at) = attempt_bounds(visible, left);
        // Only when it changes: reqwest keeps the timeout in the request's
        // extensions, and writing one there allocates their map.
        if timeout != own {
            *attempt.timeout_mut() = timeout;
        }
        Ok((attempt, cut_at))
    }

    /// The error for a deadline that passed where reqwest could not say so.
    pub(crate) fn deadline_exceeded(&self) -> DeadlineExceeded {
        let limit = self.deadline.map(|deadline| deadline.limit).unwrap_or_default();
        DeadlineExceeded::new(limit, self.attempts, self.redirected)
    }

    /// What follows an attempt: retry after a wait, or stop, and why.
    /// `request` is the copy kept for another attempt, if one was made;
    /// `body_failed` when the outcome is the error a response's body failed
    /// with while the middleware read it; `seen`, the redirects the client
    /// met on the way to it.
    pub(crate) fn decide(
        &mut self,
        request: Option<&Request>,
        outcome: &Result<Response>,
        body_failed: bool,
        seen: Seen,
    ) -> Decision {
        self.note(seen, outcome);
        let (class, chosen) = self.verdict(request, outcome, body_failed);
        // The retry that led here, if one was paid for: its cost stands
        // unless this answer is final.
        let paid = self.paid.take().map(|(paid, _)| paid);
        let (scope, reason) = match class {
            None => {
                // A final answer pays towards later retries, and a retry
                // that reached one costs nothing.
                if let Some(budget) = &self.shared.budget {
                    let now = self.shared.clock.now();
                    match (&self.account, request) {
                        (Some(account), _) => {
                            if let Some(paid) = paid {
                                budget.refund(account, paid, now);
                            }
                            budget.earn(account, now)
                        }
                        // The common case: no account held, no reference
                        // counted.
                        (None, Some(request)) => budget.earn_for(request.url(), now),
                        // `start` holds the account when it sends the last
                        // request there is.
                        (None, None) => {}
                    }
                }
                return Decision::Stop(StopReason::NothingToRetry);
            }
            Some(verdict) => verdict,
        };
        let now = self.shared.clock.now();
        if let Some(request) = request {
            self.hold_account(request, || now);
        }
        if let (Some(budget), Some(account)) = (&self.shared.budget, &self.account) {
            budget.note_failure(account, now);
        }
        // How long the call has taken, and may take, if it has a deadline.
        let spent = self
            .deadline
            .map(|Deadline { start, limit }| (now.saturating_duration_since(start), limit));
        if spent.is_some_and(|(elapsed, limit)| elapsed >= limit) {
            // Whatever else is true, the deadline is why this is the end.
            return Decision::Stop(StopReason::DeadlineExceeded);
        }
        let safe = self.safety != Safety::Unsafe;
        let safe_to_repeat = match scope {
            Scope::WhenSafe => safe,
            // The server did not act on the last request of the attempt;
            // that proves the attempt unprocessed only if no redirect
            // answered it first. A predicate's `AnyMethod` is held to the
            // same proof.
            Scope::AnyMethod => safe || self.own_outcome(seen),
        };
        if !safe_to_repeat {
            return Decision::Stop(StopReason::NotSafe);
        }
        if self.attempts > self.max_retries {
            return Decision::Stop(StopReason::RetriesExhausted);
        }
        if request.is_none() {
            return Decision::Stop(StopReason::NotReplayable);
        }
        let (after, paced) = match self.wait(chosen, scope, outcome) {
            Ok(wait) => wait,
            Err(stop) => return Decision::Stop(stop),
        };
        if let Some((elapsed, limit)) = spent {
            // A wait must leave time to send: one that ends within
            // `MIN_ATTEMPT` of the deadline would trade the answer in hand
            // for a certain timeout (timers fire a little late).
            if elapsed.saturating_add(after).saturating_add(MIN_ATTEMPT) > limit {
                return Decision::Stop(StopReason::DeadlineExceeded);
            }
        }
        // Last, so that only a retry that will happen is paid for.
        if let (Some(budget), Some(account), false) = (&self.shared.budget, &self.account, paced) {
            match budget.try_spend(account, now) {
                Some(paid) => self.paid = Some((paid, false)),
                None => return Decision::Stop(StopReason::BudgetExhausted),
            }
        }
        self.total_wait = self.total_wait.saturating_add(after);
        Decision::Retry { after, reason }
    }

    /// The wait before the retry that follows `outcome`, and whether the
    /// server asked for the retry and set its time, so the budget does not
    /// pay for it; or why there is no retry: the server asked for more than
    /// the cap.
    ///
    /// A wait the predicate chose is taken as it is. A wait the server asked
    /// for (its `Retry-After`, or the one a predicate read from another
    /// header) is capped, then spread upwards: clients told the same thing
    /// come back spread over this retry's backoff ceiling. Otherwise, the
    /// backoff.
    fn wait(
        &mut self,
        chosen: Wait,
        scope: Scope,
        outcome: &Result<Response>,
    ) -> std::result::Result<(Duration, bool), StopReason> {
        let config = &self.shared.config;
        let (initial, max) = (config.initial_backoff, config.max_backoff);
        let retry = self.attempts.saturating_sub(1);
        let headers = outcome.as_ref().ok().map(Response::headers);
        let wall_time = || self.shared.clock.wall_time();
        let asked = match chosen {
            Wait::Exactly(wait) => return Ok((wait, false)),
            Wait::Policy => headers.and_then(|headers| asked(headers, wall_time)),
            Wait::Asked(wait) => Some(wait),
            Wait::AskedUntil(at) => Some(until(at, headers, wall_time)),
        };
        let Some(asked) = asked else {
            let unit = self.shared.jitter.unit();
            self.previous_wait =
                backoff(config.jitter, initial, max, retry, self.previous_wait, unit);
            return Ok((self.previous_wait, false));
        };
        let within_cap = asked <= config.max_retry_after;
        let asked = match config.retry_after_over_cap {
            _ if within_cap => asked,
            RetryAfterOverCap::ReturnResponse => return Err(StopReason::RetryAfterTooLong(asked)),
            RetryAfterOverCap::WaitTheCap => config.max_retry_after,
        };
        let spread = config.retry_after_spread && config.jitter != Jitter::None;
        // The first attempt of a call, answered before the server acted (a
        // 429, or what a predicate says is one) with a wait the server set,
        // within the cap, and spread: the server asked for this retry and
        // set its time, so the budget does not pay for it.
        // - Only with an answer: a predicate cannot exempt a refused
        //   connection or an error.
        // - Not over the cap, where the server asked for more than it gets;
        //   not for an ask of zero, which sets no time (a limiter answering
        //   every request so would get twice its load).
        // - Only the first: a server that refuses the same call again is
        //   shedding load, and further retries are paid for like any other.
        let refused = outcome.as_ref().is_ok_and(|response| {
            response.status() == StatusCode::TOO_MANY_REQUESTS
                || (chosen != Wait::Policy && scope == Scope::AnyMethod)
        });
        let paced = spread && retry == 0 && within_cap && !asked.is_zero() && refused;
        if !spread {
            return Ok((asked, paced));
        }
        // The server's word is a floor, not an appointment.
        let spread = scale(ceiling(initial, max, retry), self.shared.jitter.unit());
        Ok((asked.saturating_add(spread), paced))
    }

    /// Takes in the redirects an attempt met: they count towards the
    /// report, prove the request processed, and take away the safety of a
    /// key that went on to another origin, for the rest of the call.
    fn note(&mut self, seen: Seen, outcome: &Result<Response>) {
        // Nearly every attempt met none.
        if seen.asked == 0 {
            return;
        }
        self.redirects = self.redirects.saturating_add(seen.followed(outcome));
        self.redirected = true;
        if self.safety == Safety::ByKey && seen.took_away(self.post) {
            self.safety = Safety::Unsafe;
        }
    }

    /// Takes in the redirects an attempt met before the deadline cut it.
    pub(crate) fn cut(&mut self, seen: Seen) {
        self.redirects = self.redirects.saturating_add(seen.asked);
        self.redirected |= seen.asked > 0;
    }

    /// Whether the attempt's outcome is provably the answer to the request
    /// it sent, and not to a later hop: only through the client the
    /// middleware built, whose redirect policy records every redirect, when
    /// it recorded none.
    fn own_outcome(&self, seen: Seen) -> bool {
        self.shared.bound && seen.asked == 0
    }

    /// The predicate's verdict if it gives one, else the built-in rules'.
    fn verdict(
        &self,
        request: Option<&Request>,
        outcome: &Result<Response>,
        body_failed: bool,
    ) -> (Class, Wait) {
        if let (Some(predicate), Some(request)) = (self.shared.config.predicate(), request) {
            let attempt = Attempt { request, number: self.attempts, outcome: Outcome::of(outcome) };
            if let Some(verdict) = predicate(&attempt) {
                return match Scope::of(verdict.retryability()) {
                    None => (None, Wait::Policy),
                    Some(scope) => (Some((scope, RetryReason::Custom)), verdict.source()),
                };
            }
        }
        let config = &self.shared.config;
        let class = match outcome {
            Ok(response) => classify::classify_status(
                response.status(),
                &config.retryable_statuses,
                config.retry_429_any_method,
            ),
            Err(error) if body_failed => classify::classify_body_error(error),
            Err(error) => classify::classify_error(error, request.map(Request::url)),
        };
        (class, Wait::Policy)
    }

    /// Whether a retry may follow the first attempt: retries are allowed.
    pub(crate) fn may_retry(&self) -> bool {
        self.max_retries > 0
    }

    /// Whether a body that fails while it is read could be retried: the
    /// request is safe to repeat and retries are allowed. (Whether its body
    /// can be sent again is the caller's to check.)
    pub(crate) fn may_retry_body_failures(&self) -> bool {
        self.may_retry() && self.safety != Safety::Unsafe
    }

    /// When the call's deadline passes, if it has one.
    pub(crate) fn deadline_at(&self) -> Option<Instant> {
        self.deadline.and_then(Deadline::at)
    }

    /// Holds the budget account of `request`'s host, if there is a budget
    /// and none is held yet.
    fn hold_account(&mut self, request: &Request, now: impl FnOnce() -> Instant) {
        if let (Some(budget), None) = (&self.shared.budget, &self.account) {
            self.account = Some(budget.account(request.url(), now()));
        }
    }

    /// Attempts started so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Requests sent before the last one: attempts and the redirects
    /// followed within them. OpenTelemetry's `http.request.resend_count` of
    /// the request whose outcome the last decision was about.
    pub(crate) fn resend_count(&self) -> u32 {
        self.attempts.saturating_sub(1).saturating_add(self.redirects)
    }

    /// The report of the call, stopping because of `stop`.
    pub(crate) fn report(&self, stop: StopReason) -> RetryReport {
        RetryReport {
            attempts: self.attempts,
            total_wait: self.total_wait,
            stop,
            redirects: self.redirects,
        }
    }
}

impl Drop for Policy<'_> {
    /// A retry paid for but never sent (the call was cancelled during the
    /// wait, or its deadline passed first) is given back.
    fn drop(&mut self) {
        if let (Some((paid, false)), Some(budget), Some(account)) =
            (self.paid, &self.shared.budget, &self.account)
        {
            budget.refund(account, paid, self.shared.clock.now());
        }
    }
}
