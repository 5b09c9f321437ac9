//! One call through the middleware: copy, send, decide, wait while
//! discarding the old body, repeat.

use std::future::Future;
use std::pin::{Pin, pin};
use std::time::{Duration, Instant};

use http::{Extensions, Method};
use reqwest::{Request, Response};
use reqwest_middleware::{Error, Next, Result};

use crate::body::{self, RequestBuffer};
use crate::events;
use crate::exchange::{Exchange, Reqwest};
use crate::future::first;
use crate::keys;
use crate::policy::{HeldBack, Policy};
use crate::reason::{Decision, StopReason};
use crate::redirect::{self, Seen};
use crate::report::{AttemptNumber, deliver};
use crate::shared::Shared;

/// An attempt's outcome: whether it is the error its response's body
/// failed with while the middleware read it, and whether that body is all
/// in memory.
struct Sent {
    outcome: Result<Response>,
    body_failed: bool,
    whole: bool,
}

/// What a call's events name: its method, and its server's host if the
/// events are logged.
type What<'a> = (&'a Method, Option<&'a str>);

impl Shared {
    /// One call: copy, send, decide, wait while discarding the old body,
    /// repeat. reqwest follows the redirects of each attempt; the
    /// middleware records them (see [`crate::redirect`]).
    ///
    /// The request lives once, in `pending`, until the last attempt takes
    /// it.
    pub(crate) fn send<'a>(
        &'a self,
        request: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> impl Future<Output = Result<Response>> + Send + 'a {
        let mut request = request;
        let header = &self.config.idempotency_header;
        let method = request.method().clone();
        let headers = (&method, request.headers_mut());
        let minted = keys::mint(self.config.mint_keys, headers, extensions, header);
        let server = events::server(self, || Reqwest::origin(&request).host());
        let mut pending = Some(request);
        async move {
            let request = pending.as_ref().expect("the request");
            let mut policy = Policy::<Reqwest>::new(self, request, extensions);
            policy.minted(minted);
            self.buffer_request_body(&mut pending, &policy).await;
            let reading = self.reading(&policy, pending.as_ref());
            let what = (&method, server.as_deref());
            // What the caller attached: every attempt starts from it, so
            // nothing an attempt added below this middleware leaks into the
            // next one.
            let caller = extensions.clone();
            loop {
                if let Err(held) = policy.pass(pending.as_ref(), extensions).await {
                    return self.held_back(&policy, what, extensions, &caller, held);
                }
                let send = sender(&next, extensions);
                let Ok((sent, cut_at)) = policy.start(&mut pending, send) else {
                    let url = pending.as_ref().map(Request::url);
                    return self.expired(&policy, what, extensions, &caller, url);
                };
                // The slot lives in this statement alone, not in the state
                // kept through the wait before a retry (see BENCHMARKS.md).
                #[allow(clippy::blocks_in_conditions)]
                let (outcome, body_failed, whole, seen) = match {
                    let mut ended = None;
                    let seen = self.attempt(sent, reading, cut_at, &mut ended).await;
                    (seen, ended)
                } {
                    (seen, Some(Sent { outcome, body_failed, whole })) => {
                        (outcome, body_failed, whole, seen)
                    }
                    (seen, None) => {
                        policy.cut(seen);
                        let url = pending.as_ref().map(Request::url);
                        return self.expired(&policy, what, extensions, &caller, url);
                    }
                };
                let decision =
                    policy.decide(pending.as_ref(), &outcome, body_failed, seen, extensions);
                events::notify(self, policy.attempts(), policy.resend_count(), what, decision);
                // `decide` retries only while a copy is kept in `pending`.
                let after = match decision {
                    Decision::Retry { after, .. } => after,
                    Decision::Stop(stop) => {
                        let mut outcome = match cut_at.filter(|_| !whole) {
                            None => outcome,
                            Some(at) => self.bound_body(outcome, at, &policy),
                        };
                        deliver(extensions, &caller, &mut outcome, policy.report(stop));
                        return outcome;
                    }
                };
                self.pause(outcome, after).await;
                next_attempt(&policy, extensions, &caller);
            }
        }
    }

    /// Reads a streamed request body into memory, if body buffering asks
    /// for it and a retry may follow, so that the request can be sent
    /// again.
    async fn buffer_request_body(
        &self,
        pending: &mut Option<Request>,
        policy: &Policy<'_, Reqwest>,
    ) {
        let Some(limit) = self.config.body_buffering.request() else { return };
        if let Some(buffer) = RequestBuffer::new(
            pending,
            Some(limit),
            policy.may_retry(),
            policy.deadline_at(),
            self.config.attempt_timeout,
            &*self.clock,
        ) {
            Box::pin(buffer.run()).await;
        }
    }

    /// One attempt: the request `sent`, the body of its response read if
    /// `reading` says so, and both cut at `cut_at` if it is set. The body
    /// is read inside the attempt, so that the cut bounds it too. Leaves
    /// the outcome in `ended`, unless the cut came first, and returns the
    /// redirects the client met.
    async fn attempt(
        &self,
        sent: impl Future<Output = Result<Response>>,
        reading: Option<usize>,
        cut_at: Option<Instant>,
        ended: &mut Option<Sent>,
    ) -> Seen {
        let config = &self.config;
        let work = async move {
            let outcome = sent.await;
            *ended = Some(match reading {
                None => Sent { outcome, body_failed: false, whole: false },
                Some(limit) => {
                    let (outcome, body_failed, whole) =
                        Box::pin(body::read_whole(config, outcome, limit)).await;
                    Sent { outcome, body_failed, whole }
                }
            });
        };
        let mut seen = Seen::NONE;
        let mut work = pin!(work);
        match cut_at {
            None => redirect::recorded(work.as_mut(), &mut seen).await,
            Some(at) => {
                let race = first(work.as_mut(), self.clock.sleep_until(at));
                // Cut or not, `ended` says.
                let _ = Box::pin(redirect::recorded(race, &mut seen)).await;
            }
        }
        seen
    }

    /// The outcome to hand back where no timeout of reqwest's carries the
    /// deadline, `at`, and the body is not all in memory already: the body
    /// the caller reads is bounded by it here.
    fn bound_body(
        &self,
        outcome: Result<Response>,
        at: Instant,
        policy: &Policy<'_, Reqwest>,
    ) -> Result<Response> {
        outcome.map(|response| {
            let expiry = self.clock.sleep_until(at);
            body::bounded(response, expiry, policy.deadline_exceeded())
        })
    }

    /// Waits `after` before the next attempt, discarding the retried
    /// response's body meanwhile so that its connection can be reused.
    async fn pause(&self, outcome: Result<Response>, after: Duration) {
        let wait = self.clock.sleep(after);
        Box::pin(body::discard(outcome, wait, self.config.drain_limit)).await;
    }

    /// How much of a final response's body to read inside the attempt, if
    /// any: only where its failure could be retried (the request is safe to
    /// repeat, retries are allowed, and its body can be sent again).
    fn reading(&self, policy: &Policy<'_, Reqwest>, request: Option<&Request>) -> Option<usize> {
        self.config.body_buffering.response().filter(|_| {
            policy.may_retry_body_failures()
                && request.is_some_and(|request| {
                    request.body().is_none_or(|body| body.as_bytes().is_some())
                })
        })
    }

    /// Stops because the deadline passed with no outcome to return: before
    /// an attempt to `url` could be sent, or while one was in flight. A
    /// deadline that is the request's own timeout is reported as reqwest
    /// reports one.
    fn expired(
        &self,
        policy: &Policy<'_, Reqwest>,
        what: What<'_>,
        extensions: &mut Extensions,
        caller: &Extensions,
        url: Option<&reqwest::Url>,
    ) -> Result<Response> {
        let passed = policy.deadline_exceeded();
        let error = match url.filter(|_| policy.timeout_bound()) {
            Some(url) => passed.as_reqwest_timeout(url),
            None => Error::middleware(passed),
        };
        self.end(policy, what, extensions, caller, StopReason::DeadlineExceeded, error)
    }

    /// Stops because the request did not go to its host: the host is
    /// paused and the call did not wait, or its throttle kept the call
    /// back.
    fn held_back(
        &self,
        policy: &Policy<'_, Reqwest>,
        what: What<'_>,
        extensions: &mut Extensions,
        caller: &Extensions,
        held: HeldBack,
    ) -> Result<Response> {
        match held {
            HeldBack::Paused(paused) => {
                let error = Error::middleware(paused);
                self.end(policy, what, extensions, caller, StopReason::HostPaused, error)
            }
            HeldBack::Throttled(throttled) => {
                let error = Error::middleware(throttled);
                self.end(policy, what, extensions, caller, StopReason::Throttled, error)
            }
        }
    }

    /// Stops because of `stop` with no outcome to return: `error` instead.
    fn end(
        &self,
        policy: &Policy<'_, Reqwest>,
        what: What<'_>,
        extensions: &mut Extensions,
        caller: &Extensions,
        stop: StopReason,
        error: Error,
    ) -> Result<Response> {
        events::notify(self, policy.attempts(), policy.resend_count(), what, Decision::Stop(stop));
        let mut outcome = Err(error);
        deliver(extensions, caller, &mut outcome, policy.report(stop));
        outcome
    }
}

/// An attempt on its way down the rest of the chain, as `Next::run` makes
/// it.
#[cfg(not(target_arch = "wasm32"))]
type Sending<'a> = Pin<Box<dyn Future<Output = Result<Response>> + Send + 'a>>;
#[cfg(target_arch = "wasm32")]
type Sending<'a> = Pin<Box<dyn Future<Output = Result<Response>> + 'a>>;

/// Sends an attempt down the rest of the chain, with `extensions`.
fn sender<'a>(
    next: &Next<'a>,
    extensions: &'a mut Extensions,
) -> impl FnOnce(Request) -> Sending<'a> {
    let next = next.clone();
    move |attempt| next.run(attempt, extensions)
}

/// Sets the extensions up for the next attempt: the caller's again, and
/// the attempt's number.
fn next_attempt(policy: &Policy<'_, Reqwest>, extensions: &mut Extensions, caller: &Extensions) {
    extensions.clone_from(caller);
    let attempt = policy.attempts().saturating_add(1);
    let resend_count = policy.resend_count().saturating_add(1);
    extensions.insert(AttemptNumber::new(attempt, resend_count));
}
