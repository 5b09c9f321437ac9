//! Per-request switches, carried as request extensions.
//!
//! Attach them with `reqwest_middleware::RequestBuilder::with_extension`:
//!
//! ```
//! use reqwest_safe_retry::{MaxRetries, SafeToRetry};
//!
//! # fn build(client: &reqwest_middleware::ClientWithMiddleware) {
//! // Never retry this one.
//! let _ = client.get("http://example.test/health").with_extension(MaxRetries::new(0));
//! // This POST is safe to repeat: the server deduplicates on the order id in the body.
//! let _ = client.post("http://example.test/orders").with_extension(SafeToRetry);
//! // At most one retry for this call.
//! let _ = client.get("http://example.test/slow").with_extension(MaxRetries::new(1));
//! # }
//! ```

use std::time::Duration;

/// Declares one request safe to repeat whatever its method, as an
/// idempotency key would.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SafeToRetry;

/// Replaces the configured retry count for one request; `MaxRetries::new(0)`
/// sends it once, within the deadline and the attempt timeout, and returns
/// its outcome as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxRetries(u32);

impl MaxRetries {
    /// At most `retries` retries after the first attempt; `0` for none.
    pub fn new(retries: u32) -> Self {
        Self(retries)
    }

    /// The retry count.
    pub fn get(&self) -> u32 {
        self.0
    }
}

/// Replaces the configured deadline for one request: the total time for the
/// whole call, every attempt and wait, measured from when the middleware
/// first sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryDeadline(Duration);

impl RetryDeadline {
    /// A deadline of `limit` from when the middleware first sees the
    /// request. A zero deadline sends nothing: the call ends at once with
    /// [`DeadlineExceeded`](crate::DeadlineExceeded).
    pub fn new(limit: Duration) -> Self {
        Self(limit)
    }

    /// The time allowed.
    pub fn get(&self) -> Duration {
        self.0
    }
}
