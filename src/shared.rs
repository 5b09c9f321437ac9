//! What every request of one middleware shares: the configuration, the
//! clock, the randomness, the ledger (budget and pauses), the hook, the redirect policy and
//! whether the middleware built its client with it, and the level of its
//! events.
//!
//! [`RetryMiddleware`](crate::RetryMiddleware) holds one behind an `Arc`;
//! each request's policy borrows it.

use std::sync::Arc;

use crate::budget::Ledger;
use crate::clock::{Clock, TokioClock};
use crate::config::RetryConfig;
use crate::jitter::{JitterSource, ThreadRngJitter};
use crate::report::RetryEvent;

/// The hook the middleware calls after every attempt.
pub(crate) type Hook = Arc<dyn Fn(&RetryEvent<'_>) + Send + Sync>;

/// Makes the retry policy of reqwest's own that the client the middleware
/// builds gets (see [`RetryMiddleware::with_reqwest_retry`](crate::RetryMiddleware::with_reqwest_retry)).
pub(crate) type ReqwestRetry = Arc<dyn Fn() -> reqwest::retry::Builder + Send + Sync>;

/// What every request of one middleware shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) config: RetryConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) jitter: Arc<dyn JitterSource>,
    /// The retry budget's accounts, the pauses servers asked for and the
    /// hosts' throttles, if any is on.
    pub(crate) ledger: Option<Arc<Ledger>>,
    pub(crate) hook: Option<Hook>,
    /// The user's redirect policy, which the client the middleware builds
    /// follows, each redirect recorded (see [`crate::redirect`]).
    pub(crate) redirect: Arc<reqwest::redirect::Policy>,
    /// The user's retry policy for reqwest itself, which the client the
    /// middleware builds gets in place of its own choice.
    pub(crate) reqwest_retry: Option<ReqwestRetry>,
    /// Every redirect an attempt meets is seen: the middleware built the
    /// client it sends through, with the redirect policy that records them
    /// (set by [`RetryMiddleware::client`](crate::RetryMiddleware::client)
    /// on the middleware it puts in that client alone), or the attempts go
    /// through the tower layer, whose service follows none.
    pub(crate) bound: bool,
    /// The fleet the middleware's books are in, and their number there.
    #[cfg(feature = "fleet")]
    pub(crate) fleet: Option<(crate::fleet::Fleet, usize)>,
    #[cfg(feature = "tracing")]
    pub(crate) log_level: tracing::Level,
}

impl Shared {
    /// The parts of a middleware with this policy, the [`TokioClock`](crate::clock::TokioClock),
    /// thread-local randomness, no hook, and debug-level events.
    pub(crate) fn new(config: RetryConfig) -> Self {
        let pauses = config.retry_after().pause();
        let throttling = config.throttling();
        let ledger =
            Ledger::new(config.budget(), config.max_retries(), pauses, throttling).map(Arc::new);
        Self {
            config,
            clock: Arc::new(TokioClock),
            jitter: Arc::new(ThreadRngJitter),
            ledger,
            hook: None,
            redirect: Arc::new(reqwest::redirect::Policy::default()),
            reqwest_retry: None,
            bound: false,
            #[cfg(feature = "fleet")]
            fleet: None,
            #[cfg(feature = "tracing")]
            log_level: tracing::Level::DEBUG,
        }
    }
}
