//! One hedged call: copies sent on a timer, raced, the losers dropped.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Extensions;
use reqwest::{Request, Response, Url};
use reqwest_middleware::{Next, Result};

use super::{HedgeMiddleware, HedgeReport, HedgeSlot, Inner};
use crate::budget::Lease;
use crate::classify;
use crate::clock::Sleep;
use crate::config::DEFAULT_RETRYABLE_STATUSES;
use crate::redirect;
use crate::safety::{Safety, safety};

/// One copy in flight: its number and its future.
type InFlight<'a> = (u32, Pin<Box<dyn Future<Output = Sent> + Send + 'a>>);
/// A copy's outcome and its extensions.
type Sent = (Result<Response>, Extensions);

/// What a finished copy's outcome means for the call.
enum Kind {
    Final,
    Stopping,
    Failed,
}

fn kind(outcome: &Result<Response>) -> Kind {
    match outcome {
        // The statuses that stop further hedges: the retry middleware's
        // defaults.
        Ok(response)
            if classify::classify_status(response.status(), &DEFAULT_RETRYABLE_STATUSES, true)
                .is_some() =>
        {
            Kind::Stopping
        }
        Ok(_) => Kind::Final,
        Err(_) => Kind::Failed,
    }
}

/// One hedged call in progress: the copies in flight, the timer for the
/// next, and the answer held while others may still beat it.
struct Race<'a, 'l, 'n> {
    inner: &'a Inner,
    request: &'a Request,
    url: &'a Url,
    safety: Safety,
    start: Instant,
    delay: Duration,
    lease: Lease<'a>,
    launch: &'l (dyn Fn(u32, Request) -> InFlight<'n> + Sync),
    running: Vec<InFlight<'n>>,
    /// Copies sent so far.
    sent: u32,
    timer: Option<Sleep>,
    /// The first answer that stopped hedging, else the last failure.
    held: Option<(u32, Sent, bool)>,
}

impl HedgeMiddleware {
    pub(super) async fn send<'n>(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'n>,
    ) -> Result<Response> {
        let inner = &*self.inner;
        let start = inner.clock.now();
        let safety = safety(
            (request.method(), request.headers()),
            extensions,
            &inner.config.idempotency_header,
        );
        let url = request.url().clone();
        let mut lease = Lease::new(inner.budget.as_deref(), &*inner.clock);
        lease.hold_to_pay(&url);
        // Hedged only if safe, allowed a second copy, and copyable; the
        // request itself stays here to copy each hedge from.
        let hedged = inner.config.max_copies >= 2 && safety != Safety::Unsafe;
        let Some(first) = hedged.then(|| request.try_clone()).flatten() else {
            let outcome = next.run(request, extensions).await;
            book(&mut lease, &outcome);
            return deliver(extensions, outcome, HedgeReport { copies: 1, winner: 1 });
        };
        let caller = extensions.clone();
        let launch = |number: u32, request: Request| -> InFlight<'n> {
            let (next, mut extensions) = (next.clone(), caller.clone());
            let sent = async move {
                let outcome = next.run(request, &mut extensions).await;
                (outcome, extensions)
            };
            (number, Box::pin(sent))
        };
        let delay = self.delay_for(&url);
        let mut race = Race {
            inner,
            request: &request,
            url: &url,
            safety,
            start,
            delay,
            lease,
            launch: &launch,
            running: Vec::new(),
            sent: 1,
            timer: None,
            held: None,
        };
        race.running.push(launch(1, first));
        race.timer = Some(race.hedge_timer());
        let mut seen = redirect::Seen::NONE;
        let won = redirect::recorded(poll_fn(|cx| race.poll(cx)), &mut seen).await;
        let (number, (outcome, copy_extensions)) = won;
        let copies = race.sent;
        race.running.clear();
        book(&mut race.lease, &outcome);
        *extensions = copy_extensions;
        deliver(extensions, outcome, HedgeReport { copies, winner: number })
    }
}

impl Race<'_, '_, '_> {
    /// Polls the copies, then the timer, until a copy's answer is the
    /// call's, or nothing moves.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<(u32, Sent)> {
        loop {
            let mut moved = false;
            let mut i = 0;
            while i < self.running.len() {
                let Poll::Ready(done) = self.running[i].1.as_mut().poll(cx) else {
                    i = i.saturating_add(1);
                    continue;
                };
                moved = true;
                let (number, _) = self.running.swap_remove(i);
                if let Some(won) = self.finished(number, done) {
                    return Poll::Ready(won);
                }
            }
            // Nothing left running: no hedge follows a failure.
            if self.running.is_empty() {
                self.timer = None;
                let (number, done, _) = self.held.take().expect("a finished copy");
                return Poll::Ready((number, done));
            }
            // After the copies: one that answered as the delay ran out
            // needs no hedge.
            if let Some(wait) = self.timer.as_mut() {
                if wait.as_mut().poll(cx).is_ready() {
                    moved = true;
                    self.timer = None;
                    self.hedge();
                }
            }
            if !moved {
                return Poll::Pending;
            }
        }
    }

    /// Takes in a copy that finished: a final answer wins at once; the
    /// first answer that stops hedging, else the last failure, is held.
    fn finished(&mut self, number: u32, done: Sent) -> Option<(u32, Sent)> {
        let answer = match kind(&done.0) {
            Kind::Final => {
                // The losers are dropped here, before the winner is handed
                // back: their connections close now.
                self.running.clear();
                self.timer = None;
                // From the call's start: the first copy's latency when it
                // won (it went out then), and a lower bound of it when a
                // hedge did.
                let latency = self.inner.clock.now().saturating_duration_since(self.start);
                self.inner.latencies.record(self.url, latency);
                return Some((number, done));
            }
            Kind::Stopping => {
                self.timer = None;
                true
            }
            Kind::Failed => false,
        };
        if !self.held.as_ref().is_some_and(|(.., answer)| *answer) {
            self.held = Some((number, done, answer));
        }
        None
    }

    /// The delay ran out: sends the next copy, if the budget pays for it
    /// and no redirect took the request's key away (see
    /// `crate::redirect`: once a copy took a request safe only by its key
    /// to another origin, method and body, no further copy is sent).
    fn hedge(&mut self) {
        let post = self.request.method() == http::Method::POST;
        if self.safety == Safety::ByKey && redirect::so_far().took_away(post) {
            return;
        }
        let number = self.sent.saturating_add(1);
        let copy = self.lease.spend().then(|| self.request.try_clone()).flatten();
        #[cfg(feature = "tracing")]
        trace_hedge(self.url, number, self.delay, copy.is_some());
        let Some(copy) = copy else { return };
        self.lease.keep();
        self.sent = number;
        self.running.push((self.launch)(number, copy));
        if self.sent < self.inner.config.max_copies {
            self.timer = Some(self.hedge_timer());
        }
    }

    /// A timer the copies race, which moves no time itself: under a clock
    /// whose sleeps move its time, a copy's wait must not.
    fn hedge_timer(&self) -> Sleep {
        let clock = &self.inner.clock;
        match clock.now().checked_add(self.delay) {
            Some(at) => clock.sleep_until(at),
            None => Box::pin(std::future::pending()),
        }
    }
}

/// Books the call's outcome in the budget: a final answer earns a share of
/// a hedge, as it earns a share of a retry.
fn book(lease: &mut Lease<'_>, outcome: &Result<Response>) {
    match kind(outcome) {
        Kind::Final => {
            lease.answered(None, false);
        }
        _ => lease.failed(None),
    }
}

/// Leaves the report in the slot and the response.
fn deliver(
    extensions: &mut Extensions,
    mut outcome: Result<Response>,
    report: HedgeReport,
) -> Result<Response> {
    if let Some(slot) = extensions.get::<HedgeSlot>() {
        slot.set(report);
    }
    if let Ok(response) = &mut outcome {
        response.extensions_mut().insert(report);
    }
    outcome
}

/// A debug event for each hedge sent, or refused by the budget. Only the
/// host of the URL is named.
#[cfg(feature = "tracing")]
fn trace_hedge(url: &Url, copy: u32, delay: Duration, sent: bool) {
    let server = url.host_str().unwrap_or_default();
    let delay_ms = delay.as_millis() as u64;
    match sent {
        true => tracing::debug!(copy, server.address = server, delay_ms, "sending hedged copy"),
        false => tracing::debug!(
            copy,
            server.address = server,
            delay_ms,
            "not hedging request: budget exhausted"
        ),
    }
}
