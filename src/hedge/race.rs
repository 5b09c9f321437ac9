//! One hedged call: copies sent on a timer, raced, the losers dropped.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Next, Result};

use super::{HedgeMiddleware, HedgeReport, HedgeSlot};
use crate::budget::Account;
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

impl HedgeMiddleware {
    pub(super) async fn send(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let inner = &*self.inner;
        let start = inner.clock.now();
        let max = inner.config.max_copies;
        let safety = safety(&request, extensions, &inner.config.idempotency_header);
        let safe = safety != Safety::Unsafe;
        let url = request.url().clone();
        let account = inner.budget.as_ref().map(|budget| budget.account(&url, start));
        // Hedged only if safe, allowed a second copy, and copyable; the
        // request itself stays here to copy each hedge from.
        let Some(first) = (max >= 2 && safe).then(|| request.try_clone()).flatten() else {
            let outcome = next.run(request, extensions).await;
            self.settle(account.as_deref(), start, &outcome);
            return finish(extensions, outcome, HedgeReport { copies: 1, winner: 1 });
        };
        let delay = self.delay_for(&url);
        let caller = extensions.clone();
        let launch = |number: u32, request: Request| -> InFlight<'_> {
            let (next, mut extensions) = (next.clone(), caller.clone());
            let sent = async move {
                let outcome = next.run(request, &mut extensions).await;
                (outcome, extensions)
            };
            (number, Box::pin(sent))
        };

        let mut running = vec![launch(1, first)];
        let mut sent: u32 = 1;
        // A timer the copies race, which moves no time itself: under a
        // clock whose sleeps move its time, a copy's wait must not.
        let hedge_timer = || -> Sleep {
            match inner.clock.now().checked_add(delay) {
                Some(at) => inner.clock.sleep_until(at),
                None => Box::pin(std::future::pending()),
            }
        };
        let mut timer: Option<Sleep> = Some(hedge_timer());
        // The first answer that stopped hedging, else the last failure.
        let mut held: Option<(u32, Sent, bool)> = None;
        // The redirects the copies meet (see `crate::redirect`): once one
        // took a request safe only by its key to another origin, method and
        // body, no further copy is sent.
        let key_taken_away = || {
            safety == Safety::ByKey
                && redirect::so_far().took_away(request.method() == http::Method::POST)
        };
        let race = poll_fn(|cx| {
            loop {
                let mut moved = false;
                let mut i = 0;
                while i < running.len() {
                    let Poll::Ready(done) = running[i].1.as_mut().poll(cx) else {
                        i = i.saturating_add(1);
                        continue;
                    };
                    moved = true;
                    let (number, _) = running.swap_remove(i);
                    match kind(&done.0) {
                        Kind::Final => {
                            // The losers are dropped here, before the winner
                            // is handed back: their connections close now.
                            running.clear();
                            timer = None;
                            // From the call's start: the first copy's
                            // latency when it won (it went out then), and a
                            // lower bound of it when a hedge did.
                            let latency = inner.clock.now().saturating_duration_since(start);
                            inner.latencies.record(&url, latency);
                            return Poll::Ready((number, done));
                        }
                        Kind::Stopping => {
                            timer = None;
                            if !held.as_ref().is_some_and(|(.., answer)| *answer) {
                                held = Some((number, done, true));
                            }
                        }
                        Kind::Failed => {
                            if !held.as_ref().is_some_and(|(.., answer)| *answer) {
                                held = Some((number, done, false));
                            }
                        }
                    }
                }
                // Nothing left running: no hedge follows a failure.
                if running.is_empty() {
                    timer = None;
                    let (number, done, _) = held.take().expect("a finished copy");
                    return Poll::Ready((number, done));
                }
                // After the copies: one that answered as the delay ran out
                // needs no hedge.
                if let Some(wait) = timer.as_mut() {
                    if wait.as_mut().poll(cx).is_ready() {
                        moved = true;
                        timer = None;
                        if key_taken_away() {
                            continue;
                        }
                        let paid = match (&inner.budget, &account) {
                            (Some(budget), Some(account)) => {
                                budget.try_spend(account, inner.clock.now()).is_some()
                            }
                            _ => true,
                        };
                        let number = sent.saturating_add(1);
                        let copy = paid.then(|| request.try_clone()).flatten();
                        #[cfg(feature = "tracing")]
                        trace_hedge(&url, number, delay, copy.is_some());
                        if let Some(copy) = copy {
                            sent = number;
                            running.push(launch(number, copy));
                            if sent < max {
                                timer = Some(hedge_timer());
                            }
                        }
                    }
                }
                if !moved {
                    return Poll::Pending;
                }
            }
        });
        let mut seen = redirect::Seen::NONE;
        let (number, (outcome, copy_extensions)) = redirect::recorded(race, &mut seen).await;
        drop(running);
        self.settle(account.as_deref(), start, &outcome);
        *extensions = copy_extensions;
        finish(extensions, outcome, HedgeReport { copies: sent, winner: number })
    }
}

impl HedgeMiddleware {
    /// Books the call's outcome in the budget: a final answer earns a share
    /// of a hedge, as it earns a share of a retry.
    fn settle(&self, account: Option<&Account>, start: Instant, outcome: &Result<Response>) {
        if let (Some(budget), Some(account)) = (&self.inner.budget, account) {
            match kind(outcome) {
                Kind::Final => budget.earn(account, start),
                _ => budget.note_failure(account, self.inner.clock.now()),
            }
        }
    }
}

/// Leaves the report in the slot and the response.
fn finish(
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
fn trace_hedge(url: &reqwest::Url, copy: u32, delay: std::time::Duration, sent: bool) {
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
