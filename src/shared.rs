//! What every request of one middleware shares: the configuration, the
//! clock, the randomness, the budget, the hook, whether the middleware
//! follows redirects itself, and the level of its events.
//!
//! [`RetryMiddleware`](crate::RetryMiddleware) holds one behind an `Arc`;
//! each request's policy borrows it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::budget::Budget;
use crate::clock::{Clock, TokioClock};
use crate::config::RetryConfig;
use crate::jitter::{JitterSource, ThreadRngJitter};
use crate::report::RetryEvent;

/// The hook the middleware calls after every attempt.
pub(crate) type Hook = Arc<dyn Fn(&RetryEvent<'_>) + Send + Sync>;

/// What every request of one middleware shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) config: RetryConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) jitter: Arc<dyn JitterSource>,
    pub(crate) budget: Option<Arc<Budget>>,
    pub(crate) hook: Option<Hook>,
    /// The inner client hands every redirect up and the middleware follows
    /// them: set once [`redirect_policy`](crate::RetryMiddleware::redirect_policy)
    /// was taken, for this middleware and its clones.
    pub(crate) follows: Arc<AtomicBool>,
    #[cfg(feature = "tracing")]
    pub(crate) log_level: tracing::Level,
}

impl Shared {
    /// The parts of a middleware with this policy, the [`TokioClock`],
    /// thread-local randomness, no hook, and debug-level events.
    pub(crate) fn new(config: RetryConfig) -> Self {
        let budget =
            config.budget().map(|budget| Arc::new(Budget::new(budget, config.max_retries())));
        Self {
            config,
            clock: Arc::new(TokioClock),
            jitter: Arc::new(ThreadRngJitter),
            budget,
            hook: None,
            follows: Arc::default(),
            #[cfg(feature = "tracing")]
            log_level: tracing::Level::DEBUG,
        }
    }

    /// Whether the middleware follows redirects itself.
    pub(crate) fn follows(&self) -> bool {
        self.follows.load(Ordering::Relaxed)
    }
}
