//! One call through the layer: copy, wait for the service, send, decide,
//! wait, repeat.

use std::future::poll_fn;
use std::sync::Arc;

use ::tower::Service;
use ::tower::timeout::error::Elapsed;
use http::{Extensions, Method, Request, Response};

use super::Replay;
use super::exchange::{BoxError, Pending, Tower};
use crate::events;
use crate::exchange::Exchange;
use crate::future::first;
use crate::keys::{self, MintedKey};
use crate::policy::{HeldBack, Policy};
use crate::reason::{Decision, StopReason};
use crate::redirect::Seen;
use crate::report::{AttemptNumber, ReportSlot, RetryReport};
use crate::shared::Shared;

/// What a call's events name: its method, and its server's host if the
/// events are logged.
type What<'a> = (&'a Method, Option<&'a str>);

/// A call as it starts: the request (its key minted, if one is), and
/// what every decision reads of it. Made before the call's future, so that
/// the future holds the request once.
pub(super) struct Start<B> {
    pending: Option<Pending<B>>,
    /// What the caller attached: the overrides every decision reads, and
    /// where its report goes, whichever attempt the request ends with.
    caller: Extensions,
    minted: Option<MintedKey>,
    method: Method,
}

impl<B> Start<B> {
    /// Mints the request's key, if one is to be.
    pub(super) fn new(shared: &Shared, mut request: Request<B>) -> Self {
        let method = request.method().clone();
        let caller = request.extensions().clone();
        let header = &shared.config.idempotency_header;
        let headers = (&method, request.headers_mut());
        let minted = keys::mint(shared.config.mint_keys, headers, &caller, header);
        Self { pending: Some(Pending::new(request)), caller, minted, method }
    }
}

/// One call through `inner`, which the caller has made ready for the first
/// attempt; before each retry the layer waits for it again.
pub(super) async fn run<S, B, R>(
    shared: Arc<Shared>,
    mut inner: S,
    mut start: Start<B>,
) -> Result<Response<R>, BoxError>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Error: Into<BoxError>,
    B: Replay,
{
    let shared: &Shared = &shared;
    // No reference to the request is held across a wait: a body need not
    // be `Sync`.
    let (server, mut policy) = {
        let request = start.pending.as_ref().expect("the request");
        let server = events::server(shared, || Tower::<B, R>::origin(request).host());
        (server, Policy::<Tower<B, R>>::new(shared, request, &start.caller))
    };
    policy.minted(start.minted);
    let what = (&start.method, server.as_deref());
    let caller = &start.caller;
    let pending = &mut start.pending;
    loop {
        if let Err(held) = policy.pass(pending.as_ref(), caller).await {
            let (stop, error): (_, BoxError) = match held {
                HeldBack::Paused(paused) => (StopReason::HostPaused, Box::new(paused)),
                HeldBack::Throttled(throttled) => (StopReason::Throttled, Box::new(throttled)),
            };
            return end(shared, &policy, (what, caller), stop, error);
        }
        if policy.attempts() > 0 {
            if let Some(request) = pending.as_mut() {
                let number = policy.attempts().saturating_add(1);
                let resend_count = policy.resend_count().saturating_add(1);
                request.head.extensions.insert(AttemptNumber::new(number, resend_count));
            }
            // Readiness is waited for no later than the deadline.
            let ready = poll_fn(|cx| inner.poll_ready(cx));
            let ready = match policy.deadline_at() {
                None => Some(ready.await),
                Some(at) => first(ready, shared.clock.sleep_until(at)).await,
            };
            match ready {
                Some(Ok(())) => {}
                None => return expired(shared, &policy, (what, caller)),
                // The service that would take the retry failed: its error
                // is the call's.
                Some(Err(error)) => {
                    let stop = StopReason::ServiceFailed;
                    return end(shared, &policy, (what, caller), stop, error.into());
                }
            }
        }
        let Ok((sent, cut_at)) =
            policy.start(pending, |attempt| inner.call(attempt.into_request()))
        else {
            return expired(shared, &policy, (what, caller));
        };
        let ended = match cut_at {
            None => Some(sent.await.map_err(Into::into)),
            Some(at) => {
                first(sent, shared.clock.sleep_until(at)).await.map(|o| o.map_err(Into::into))
            }
        };
        let outcome = match ended {
            Some(outcome) => outcome,
            // The deadline passed: the call is over.
            None if reached(&policy, shared) => return expired(shared, &policy, (what, caller)),
            // The attempt's own timeout passed, as tower's `Timeout` says.
            None => Err(Box::new(Elapsed::new()) as BoxError),
        };
        let decision = policy.decide(pending.as_ref(), &outcome, false, Seen::NONE, caller);
        events::notify(shared, policy.attempts(), policy.resend_count(), what, decision);
        let after = match decision {
            Decision::Retry { after, .. } => after,
            Decision::Stop(stop) => {
                let mut outcome = outcome;
                deliver(caller, &mut outcome, policy.report(stop));
                return outcome;
            }
        };
        // The retried answer goes, and with it its connection's claim.
        drop(outcome);
        shared.clock.sleep(after).await;
    }
}

/// Whether the call's deadline has passed.
fn reached<B: Replay, R>(policy: &Policy<'_, Tower<B, R>>, shared: &Shared) -> bool {
    policy.deadline_at().is_some_and(|at| shared.clock.now() >= at)
}

/// Stops because the deadline passed with no answer to return.
fn expired<B: Replay, R>(
    shared: &Shared,
    policy: &Policy<'_, Tower<B, R>>,
    call: (What<'_>, &Extensions),
) -> Result<Response<R>, BoxError> {
    let error = Box::new(policy.deadline_exceeded());
    end(shared, policy, call, StopReason::DeadlineExceeded, error)
}

/// Stops because of `stop` with no answer to return: `error` instead.
fn end<B: Replay, R>(
    shared: &Shared,
    policy: &Policy<'_, Tower<B, R>>,
    (what, caller): (What<'_>, &Extensions),
    stop: StopReason,
    error: BoxError,
) -> Result<Response<R>, BoxError> {
    let stopped = Decision::Stop(stop);
    events::notify(shared, policy.attempts(), policy.resend_count(), what, stopped);
    let mut outcome = Err(error);
    deliver(caller, &mut outcome, policy.report(stop));
    outcome
}

/// Hands the call's report to the caller: in the [`ReportSlot`] it
/// attached, and in the answer's extensions when there is something to say
/// (absence reads as one attempt, final: [`RetryReport::from_extensions`]).
fn deliver<R>(
    caller: &Extensions,
    outcome: &mut Result<Response<R>, BoxError>,
    report: RetryReport,
) {
    if let Some(slot) = caller.get::<ReportSlot>() {
        slot.set(report);
    }
    if report != RetryReport::FIRST_AND_FINAL {
        if let Ok(response) = outcome {
            response.extensions_mut().insert(report);
        }
    }
}
