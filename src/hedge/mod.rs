//! Hedged requests: a second copy of a slow request, the first answer
//! taken, the rest cancelled.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response, Url};
use reqwest_middleware::{Middleware, Next, Result};

use crate::budget::Ledger;
use crate::clock::{Clock, TokioClock};

mod config;
mod latency;
mod race;
mod report;

pub use config::{HedgeConfig, HedgeConfigBuilder, HedgeDelay};
use latency::Latencies;
pub use report::{HedgeReport, HedgeSlot};

/// Sends another copy of a request that is safe to repeat when the first
/// has not answered within a delay, returns the first final answer, and
/// cancels the other copies.
///
/// See [`HedgeConfig`] for the delay, the number of copies and the budget
/// that bounds them. The rules:
///
/// - Only a request safe to repeat is hedged, by the retry middleware's
///   rule: an idempotent method, a non-blank value of the idempotency header
///   (`Idempotency-Key` unless
///   [set otherwise](HedgeConfigBuilder::with_idempotency_header)), or
///   [`SafeToRetry`](crate::SafeToRetry). Others, and a request whose body
///   cannot be copied, are sent once, untouched.
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
/// With the `tracing` feature, each hedge sent, or refused by the budget,
/// is a debug event naming the copy, the host and the delay.
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
/// use reqwest_safe_retry::RetryMiddleware;
/// use reqwest_safe_retry::hedge::HedgeMiddleware;
///
/// let client = RetryMiddleware::default()
///     .client(reqwest::Client::builder())?
///     .with(HedgeMiddleware::default())
///     .build();
/// # let _ = client;
/// # Ok::<(), reqwest_safe_retry::ClientError>(())
/// ```
///
/// Through that client the hedge also sees the redirects its copies meet:
/// once a 307 or 308 took a request that is safe only by its
/// `Idempotency-Key` to another origin, method and body, no further copy is
/// sent, since the key was set for the first origin. (A copy already out
/// goes on; through a client the retry middleware did not build, the hedge
/// cannot see redirects at all.)
#[derive(Clone)]
pub struct HedgeMiddleware {
    pub(super) inner: Arc<Inner>,
}

#[derive(Clone)]
pub(super) struct Inner {
    pub(super) config: HedgeConfig,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) budget: Option<Arc<Ledger>>,
    pub(super) latencies: Arc<Latencies>,
}

impl Default for HedgeMiddleware {
    fn default() -> Self {
        Self::new(HedgeConfig::default())
    }
}

impl HedgeMiddleware {
    /// A middleware with these settings and the [`TokioClock`].
    pub fn new(config: HedgeConfig) -> Self {
        let budget = config
            .budget
            .as_ref()
            .and_then(|budget| {
                Ledger::new(Some(budget), config.max_copies.saturating_sub(1), false, false)
            })
            .map(Arc::new);
        let inner =
            Inner { config, clock: Arc::new(TokioClock), budget, latencies: Arc::default() };
        Self { inner: Arc::new(inner) }
    }

    /// Uses `clock` for the delays and for measuring latencies.
    ///
    /// A hedge's delay is a wait for the clock's time
    /// ([`Clock::sleep_until`]): under `ManualClock` (feature `test-util`) a
    /// copy is hedged only once the test moves the clock past the delay, and
    /// hedging moves no time itself.
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
