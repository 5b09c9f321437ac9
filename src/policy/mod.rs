//! The policy of one request: after each attempt, retry after a wait, or
//! stop, and why.
//!
//! Everything here is synchronous but the wait for a paused host
//! ([`Policy::pass`]); the adapter's loop does the sending and the other
//! waits. A [`Policy`] is made per request from the [`Shared`] parts every
//! request uses, and it alone answers "what happens after this attempt?".

use std::time::{Duration, Instant};

use std::marker::PhantomData;

use http::{Extensions, Method};

use crate::budget::{HostHandle, Lease, Turn};
use crate::deadline::{Deadline, attempt_bounds, tightest, visible_timeout};
use crate::error::DeadlineExceeded;
use crate::exchange::{Ended, Exchange};
use crate::extensions::{MaxRetries, RetryDeadline};
use crate::hosts::Origin;
use crate::keys::MintedKey;
use crate::rate_limit::ReturnIfPaused;
use crate::reason::{Decision, RetryReason, StopReason};
use crate::redirect::Seen;
use crate::report::RetryReport;
use crate::safety::{Safety, safety};
use crate::shared::Shared;
use crate::throttle::{self, Answer};

mod pause;
mod steps;
#[cfg(test)]
mod tests;

use pause::Held;
pub(crate) use pause::HeldBack;
use steps::{Admission, Pacing};

/// One request's policy and progress, for a client's requests and answers
/// as `E` reads them.
pub(crate) struct Policy<'a, E> {
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
    /// The deadline is the request's own timeout: its passing is reported
    /// as reqwest reports a timeout.
    timeout_bound: bool,
    /// The idempotency key minted for the call, if one was.
    minted: Option<MintedKey>,
    /// The call's dealings with the retry budget.
    lease: Lease<'a>,
    /// The turn to probe a paused host, while the attempt that took it is
    /// in flight.
    turn: Option<Turn<'a>>,
    /// The host of a request that went out with no copy left to name it
    /// by, for its throttle to hear the answer.
    host: Option<HostHandle>,
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
    /// The part of `total_wait` spent on host pauses, the ones the call's
    /// own answers set and the ones it found, which the `Retry-After` cap
    /// bounds (with one spread).
    paused_wait: Duration,
    /// The client's requests and answers, a type only.
    exchange: PhantomData<fn() -> E>,
}

impl<'a, E: Exchange> Policy<'a, E> {
    /// Reads the per-request overrides. The clock is read only for a
    /// deadline: the request's [`RetryDeadline`] (or the configured one),
    /// or its own timeout, whichever is shorter. As reqwest alone, the
    /// request's timeout bounds the whole call.
    pub(crate) fn new(shared: &'a Shared, request: &E::Request, extensions: &Extensions) -> Self {
        let config = &shared.config;
        let deadline =
            extensions.get::<RetryDeadline>().map(RetryDeadline::get).or(config.deadline);
        let own = E::timeout(request);
        let limit = tightest(deadline, own);
        let method = E::method(request);
        Self {
            shared,
            safety: safety((method, E::headers(request)), extensions, &config.idempotency_header),
            post: method == Method::POST,
            max_retries: extensions.get::<MaxRetries>().map_or(config.max_retries, MaxRetries::get),
            deadline: limit.map(|limit| Deadline { start: shared.clock.now(), limit }),
            timeout_bound: own.is_some() && limit == own,
            minted: None,
            lease: Lease::new(shared.ledger.as_deref(), &*shared.clock),
            turn: None,
            host: None,
            attempts: 0,
            redirects: 0,
            redirected: false,
            previous_wait: config.backoff.initial(),
            total_wait: Duration::ZERO,
            paused_wait: Duration::ZERO,
            exchange: PhantomData,
        }
    }

    /// Starts an attempt: hands the request to send to `send`, and returns
    /// what `send` made of it with the instant to cut the attempt at, if it
    /// must be cut other than by its own timeout.
    ///
    /// The request to send is a copy of `pending`, which stays for the next
    /// attempt; or, when no retry can follow and no predicate needs to see
    /// it, or its body cannot be copied, `pending` itself, taken: it is sent
    /// once.
    ///
    /// The attempt is bounded by the attempt timeout and the deadline. Where
    /// it has a timeout the policy can see (its own, or the configured
    /// attempt timeout), the shortest of them goes on the request, so the
    /// client reports it as a timeout (reqwest does); a client that reads
    /// none there is cut at that instant instead. Otherwise setting one
    /// would replace the client's own default, which may be shorter, so the
    /// instant to cut the attempt at is returned instead.
    ///
    /// # Errors
    ///
    /// When the deadline has already passed: nothing is sent.
    pub(crate) fn start<F>(
        &mut self,
        pending: &mut Option<E::Request>,
        send: impl FnOnce(E::Request) -> F,
    ) -> Result<(F, Option<Instant>), DeadlineExceeded> {
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
        self.lease.sent();
        // A copy is kept while another attempt may follow, or for the
        // predicate to be shown.
        let keep = self.attempts <= self.max_retries || self.shared.config.predicate().is_some();
        let copy = keep.then(|| pending.as_ref().and_then(E::try_clone)).flatten();
        let mut attempt = match copy {
            Some(copy) => copy,
            None => {
                // The loop stops once the request went out without a copy
                // kept, so `pending` is always there to copy or take. No
                // copy will be there for `decide` to name the host by.
                let request = pending.take().expect("a request to send");
                let origin = E::origin(&request);
                self.lease.hold(&origin);
                let ledger = self.shared.ledger.as_deref();
                self.host = ledger.and_then(|l| l.handle(&origin, self.shared.clock.now()));
                request
            }
        };
        let visible = visible_timeout(E::timeout(&attempt), self.shared.config.attempt_timeout);
        let (timeout, cut_at) = attempt_bounds(visible, left);
        let carried = E::carry_timeout(&mut attempt, timeout);
        let cut_at = match timeout.filter(|_| !carried) {
            None => cut_at,
            Some(timeout) => {
                let now = left.map_or_else(|| self.shared.clock.now(), |(now, _)| now);
                tightest(cut_at, now.checked_add(timeout))
            }
        };
        Ok((send(attempt), cut_at))
    }

    /// Takes note of the key minted for the call, for its report.
    pub(crate) fn minted(&mut self, key: Option<MintedKey>) {
        self.minted = key;
    }

    /// Whether the deadline is the request's own timeout.
    pub(crate) fn timeout_bound(&self) -> bool {
        self.timeout_bound
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
        request: Option<&E::Request>,
        outcome: &Ended<E>,
        body_failed: bool,
        seen: Seen,
        extensions: &Extensions,
    ) -> Decision {
        self.note_origin(request, outcome);
        self.note(seen, outcome);
        match self.retry(request, outcome, body_failed, seen, extensions) {
            Ok((after, reason)) => {
                self.total_wait = self.total_wait.saturating_add(after);
                Decision::Retry { after, reason }
            }
            Err(stop) => Decision::Stop(stop),
        }
    }

    /// The steps of [`decide`](Self::decide), each a reason to stop: the
    /// outcome is final, the request may not be repeated now, the server
    /// asked for too long a wait, the wait outlasts the deadline, or the
    /// budget refuses. The budget is last, so that only a retry that will
    /// happen is paid for.
    fn retry(
        &mut self,
        request: Option<&E::Request>,
        outcome: &Ended<E>,
        body_failed: bool,
        seen: Seen,
        extensions: &Extensions,
    ) -> Result<(Duration, RetryReason), StopReason> {
        let config = &self.shared.config;
        let origin = request.map(E::origin);
        let came = steps::came::<E>(outcome, request, body_failed);
        let classified = steps::classify::<E>(config, request, self.attempts, outcome, came);
        let held = self.pause_host(classified.as_ref(), came.ok(), (outcome, origin));
        let paused = held == Held::Paused;
        let answer = if body_failed { None } else { throttle::answer(config, came) };
        let Some(retryable) = classified else {
            // A final answer pays towards later retries, and a retry that
            // reached one costs nothing. The host's throttle counts an
            // accepted one in the same lookup, where it can; a rejection,
            // on its own.
            let accepted = answer == Some(Answer::Accepted);
            if !(self.lease.answered(origin, accepted) && accepted) {
                self.observe(origin, outcome, answer);
            }
            return Err(StopReason::NothingToRetry);
        };
        self.lease.failed(origin);
        self.observe(origin, outcome, answer);
        let spent = self.spent();
        steps::admissible(Admission {
            expired: spent.is_some_and(|(elapsed, limit)| elapsed >= limit),
            reach: retryable.reach,
            safe: self.safety != Safety::Unsafe,
            own_outcome: self.own_outcome(seen),
            attempts: self.attempts,
            max_retries: self.max_retries,
            replayable: request.is_some(),
        })?;
        if paused && extensions.get::<ReturnIfPaused>().is_some() {
            return Err(StopReason::HostPaused);
        }
        let pacing = Pacing {
            config,
            jitter: &*self.shared.jitter,
            retry: self.attempts.saturating_sub(1),
            previous: self.previous_wait,
            paused,
        };
        let chosen = steps::wait(&pacing, retryable, came.ok(), || self.shared.clock.wall_time())?;
        if let Some(backoff) = chosen.backoff {
            self.previous_wait = backoff;
        }
        let after = chosen.after.max(held.floor());
        steps::fits_deadline(spent, after)?;
        // A wait the call's own answer paused its host for counts towards
        // the most a call waits on pauses; past it, the answer is final.
        let paused_wait = match paused {
            true => self.paused_for(after).ok_or(StopReason::HostPaused)?,
            false => self.paused_wait,
        };
        if !chosen.paced && !self.lease.spend() {
            return Err(StopReason::BudgetExhausted);
        }
        self.paused_wait = paused_wait;
        Ok((after, retryable.reason))
    }

    /// Tells the throttle of the host the attempt went to how it answered,
    /// if the answer counts: the host of the request (its `origin`), or
    /// else the one held, or else the one the outcome names (a request sent
    /// with no copy kept, to a host the table did not know).
    fn observe(&self, origin: Option<Origin<'_>>, outcome: &Ended<E>, answer: Option<Answer>) {
        let (Some(ledger), Some(answer)) = (self.shared.ledger.as_deref(), answer) else { return };
        let clock = &*self.shared.clock;
        match (origin, &self.host) {
            (Some(origin), _) => ledger.observe(&origin, answer, || clock.now()),
            (None, Some(host)) => ledger.observe_held(host, answer, clock.now()),
            (None, None) => {
                if let Some(named) = E::answered(outcome) {
                    ledger.observe(&named, answer, || clock.now());
                }
            }
        }
    }

    /// How long the call has taken, and may take, if it has a deadline.
    fn spent(&self) -> Option<(Duration, Duration)> {
        let Deadline { start, limit } = self.deadline?;
        Some((self.shared.clock.now().saturating_duration_since(start), limit))
    }

    /// Where the client records no redirects (a client the middleware did
    /// not build), an outcome named by a URL of another origin than the
    /// request's came through a redirect the middleware could not see: it
    /// takes away the safety of a key, which was set for the request's
    /// origin, for the rest of the call, as the record does for a 307 or
    /// 308 to another origin. Without the record a 303 cannot be told from
    /// a 307, so any such redirect counts.
    fn note_origin(&mut self, request: Option<&E::Request>, outcome: &Ended<E>) {
        if self.safety != Safety::ByKey || self.shared.bound {
            return;
        }
        if let (Some(request), Some(answered)) = (request, E::answered(outcome)) {
            if E::origin(request) != answered {
                self.safety = Safety::Unsafe;
            }
        }
    }

    /// Takes in the redirects an attempt met: they count towards the
    /// report, prove the request processed, and take away the safety of a
    /// key that went on to another origin, for the rest of the call.
    fn note(&mut self, seen: Seen, outcome: &Ended<E>) {
        // Nearly every attempt met none.
        if seen.asked == 0 {
            return;
        }
        self.redirects =
            self.redirects.saturating_add(seen.followed(E::stopped_at_redirect(outcome)));
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
            minted_key: self.minted,
        }
    }
}
