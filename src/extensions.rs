//! Per-request switches, carried as request extensions.
//!
//! Attach them with `reqwest_middleware::RequestBuilder::with_extension`:
//!
//! ```
//! use reqwest_safe_retry::{MaxRetries, NoRetry, SafeToRetry};
//!
//! # fn build(client: &reqwest_middleware::ClientWithMiddleware) {
//! // Never retry this one.
//! let _ = client.get("http://example.test/health").with_extension(NoRetry);
//! // This POST is safe to repeat: the server deduplicates on the order id in the body.
//! let _ = client.post("http://example.test/orders").with_extension(SafeToRetry);
//! // At most one retry for this call.
//! let _ = client.get("http://example.test/slow").with_extension(MaxRetries(1));
//! # }
//! ```

use std::time::Duration;

/// Turns retries off for one request: it is sent once and its outcome
/// returned as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoRetry;

/// Declares one request safe to repeat whatever its method, as an
/// idempotency key would.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SafeToRetry;

/// Replaces the configured retry count for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxRetries(pub u32);

/// Replaces the configured deadline for one request: the total time for all
/// attempts and waits, measured from when the middleware first sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryDeadline(pub Duration);
