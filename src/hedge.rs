//! Hedged requests: a second copy of a slow request, the first answer
//! taken, the rest cancelled.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use http::{Extensions, StatusCode};
use reqwest::{Request, Response, Url};
use reqwest_middleware::{Middleware, Next, Result};

use crate::budget::Budget;
use crate::classify;
use crate::clock::{Clock, Sleep, TokioClock};
use crate::extensions::SafeToRetry;
use crate::hedge_config::{HedgeConfig, HedgeDelay, HedgeReport, HedgeSlot};
use crate::latency::Latencies;

/// The statuses that stop further hedges: the retry middleware's defaults.
const STOPPING: [StatusCode; 4] = [
    StatusCode::TOO_MANY_REQUESTS,
    StatusCode::BAD_GATEWAY,
    StatusCode::SERVICE_UNAVAILABLE,
    StatusCode::GATEWAY_TIMEOUT,
];

/// Sends another copy of a request that is safe to repeat when the first
/// has not answered within a delay, returns the first final answer, and
/// cancels the other copies.
///
/// See [`HedgeConfig`] for the delay, the number of copies and the budget
/// that bounds them. The rules:
///
/// - Only a request safe to repeat is hedged: an idempotent method, a
///   non-blank `Idempotency-Key`, or [`SafeToRetry`]. Others, and a request
///   whose body cannot be copied, are sent once, untouched.
/// - A final answer (any status but 429, 502, 503, 504) from any copy is
///   returned at once; the other copies' futures are dropped, which closes
///   their HTTP/1 connections (or resets their HTTP/2 streams).
/// - A 429, 502, 503 or 504 says the server is struggling: no further hedge
///   is sent. Copies already out keep running, and a final answer from one
///   of them is still returned; when none is left, the first such answer is
///   returned, so a [`RetryMiddleware`](crate::RetryMiddleware) outside can
///   honour its `Retry-After`.
/// - An error (a reset, a refused connection) is returned only when no copy
///   is left running and no answer came; a failure is never hedged, that is
///   the retry middleware's business.
/// - Each hedge is paid from a per-host [`RetryBudget`](crate::RetryBudget)
///   of the middleware's own, earned by final answers, so hedging cannot
///   multiply the load of an outage.
///
/// Each copy gets a copy of the caller's extensions; the returned outcome's
/// copy replaces the caller's, with a [`HedgeReport`] added to a response
/// and to a [`HedgeSlot`] if one was attached.
///
/// # With `RetryMiddleware`
///
/// Put the hedge middleware *inside* the retry middleware (added after it):
/// every attempt is hedged, and the retry middleware sees one outcome per
/// attempt and keeps its backoff, its `Retry-After` handling and its budget.
/// Outside, each copy would run its own retry loop, and a struggling server
/// would see retries times copies.
///
/// ```
/// use reqwest_safe_retry::{HedgeMiddleware, RetryMiddleware};
///
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::default())
///     .with(HedgeMiddleware::default())
///     .build();
/// # let _ = client;
/// ```
#[derive(Clone)]
pub struct HedgeMiddleware {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    config: HedgeConfig,
    clock: Arc<dyn Clock>,
    budget: Option<Arc<Budget>>,
    latencies: Arc<Latencies>,
}

impl Default for HedgeMiddleware {
    fn default() -> Self {
        Self::new(HedgeConfig::default())
    }
}

impl HedgeMiddleware {
    /// A middleware with these settings and the [`TokioClock`].
    pub fn new(config: HedgeConfig) -> Self {
        let budget = config.budget.as_ref().map(|budget| Arc::new(Budget::new(budget)));
        let inner =
            Inner { config, clock: Arc::new(TokioClock), budget, latencies: Arc::default() };
        Self { inner: Arc::new(inner) }
    }

    /// Uses `clock` for the delays and for measuring latencies.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        Arc::make_mut(&mut self.inner).clock = Arc::new(clock);
        self
    }

    /// The settings in force.
    pub fn config(&self) -> &HedgeConfig {
        &self.inner.config
    }

    /// The delay after which a request to `url` would be hedged now: the
    /// fixed delay, or the configured quantile of the host's recent
    /// latencies (the fallback while it has too few).
    pub fn delay_for(&self, url: &Url) -> Duration {
        match self.inner.config.delay {
            HedgeDelay::Fixed(delay) => delay,
            HedgeDelay::Quantile { quantile, fallback } => {
                self.inner.latencies.quantile(url, quantile).unwrap_or(fallback)
            }
        }
    }
}

impl fmt::Debug for HedgeMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgeMiddleware")
            .field("config", &self.inner.config)
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

/// The trait's signature as `async_trait` would write it.
impl Middleware for HedgeMiddleware {
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
        Box::pin(self.send(req, extensions, next))
    }
}

/// One copy in flight: its number, when it was sent, and its future.
type InFlight<'a> = (u32, Instant, Pin<Box<dyn Future<Output = Sent> + Send + 'a>>);
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
        Ok(response) if classify::classify_status(response.status(), &STOPPING, true).is_some() => {
            Kind::Stopping
        }
        Ok(_) => Kind::Final,
        Err(_) => Kind::Failed,
    }
}

impl HedgeMiddleware {
    async fn send(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let inner = &*self.inner;
        let start = inner.clock.now();
        let max = inner.config.max_copies;
        let safe = extensions.get::<SafeToRetry>().is_some() || is_safe(&request);
        if max < 2 || !safe || request.try_clone().is_none() {
            let outcome = next.run(request, extensions).await;
            return finish(extensions, outcome, HedgeReport { copies: 1, winner: 1 });
        }
        let url = request.url().clone();
        let delay = self.delay_for(&url);
        let account = inner.budget.as_ref().map(|budget| budget.account(&url, start));
        let caller = extensions.clone();
        let launch = |number: u32, request: Request| -> InFlight<'_> {
            let (next, mut extensions) = (next.clone(), caller.clone());
            let sent = async move {
                let outcome = next.run(request, &mut extensions).await;
                (outcome, extensions)
            };
            (number, inner.clock.now(), Box::pin(sent))
        };

        let mut pending = Some(request);
        let first = pending.as_ref().and_then(Request::try_clone).expect("checked above");
        let mut running = vec![launch(1, first)];
        let mut sent = 1;
        let mut timer: Option<Sleep> = Some(inner.clock.sleep(delay));
        // The first answer that stopped hedging, else the last failure.
        let mut held: Option<(u32, Sent, bool)> = None;
        let (number, (outcome, copy_extensions)) = poll_fn(|cx| {
            loop {
                let mut moved = false;
                if let Some(wait) = timer.as_mut() {
                    if wait.as_mut().poll(cx).is_ready() {
                        moved = true;
                        timer = None;
                        let paid = match (&inner.budget, &account) {
                            (Some(budget), Some(account)) => {
                                budget.try_spend(account, inner.clock.now())
                            }
                            _ => true,
                        };
                        let copy = match sent + 1 == max {
                            true => pending.take(),
                            false => pending.as_ref().and_then(Request::try_clone),
                        };
                        if let (true, Some(copy)) = (paid, copy) {
                            sent += 1;
                            running.push(launch(sent, copy));
                            if sent < max {
                                timer = Some(inner.clock.sleep(delay));
                            }
                        }
                    }
                }
                let mut i = 0;
                while i < running.len() {
                    let Poll::Ready(done) = running[i].2.as_mut().poll(cx) else {
                        i += 1;
                        continue;
                    };
                    moved = true;
                    let (number, sent_at, _) = running.swap_remove(i);
                    match kind(&done.0) {
                        Kind::Final => {
                            // The losers are dropped here, before the winner
                            // is handed back: their connections close now.
                            running.clear();
                            timer = None;
                            let now = inner.clock.now();
                            let latency = match number {
                                1 => now.saturating_duration_since(sent_at),
                                // A lower bound of what the first copy takes.
                                _ => now.saturating_duration_since(start),
                            };
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
                if running.is_empty() {
                    timer = None;
                    let (number, done, _) = held.take().expect("a finished copy");
                    return Poll::Ready((number, done));
                }
                if !moved {
                    return Poll::Pending;
                }
            }
        })
        .await;
        drop(running);
        if let (Some(budget), Some(account)) = (&inner.budget, &account) {
            match kind(&outcome) {
                Kind::Final => budget.earn(account, start),
                _ => budget.note_failure(account, inner.clock.now()),
            }
        }
        *extensions = copy_extensions;
        finish(extensions, outcome, HedgeReport { copies: sent, winner: number })
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

/// An idempotent method, or an `Idempotency-Key` that is not blank.
fn is_safe(request: &Request) -> bool {
    request.method().is_idempotent()
        || request
            .headers()
            .get("idempotency-key")
            .is_some_and(|key| key.as_bytes().iter().any(|b| !b.is_ascii_whitespace()))
}
