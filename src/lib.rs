//! Retries for [`reqwest_middleware`] that only repeat what is safe to repeat.
//!
//! # Quick start
//!
//! ```no_run
//! use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
//!
//! # async fn run() -> Result<(), reqwest_middleware::Error> {
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::new(RetryConfig::default()))
//!     .build();
//! let response = client.get("http://127.0.0.1:8080/orders/1").send().await?;
//! # let _ = response;
//! # Ok(())
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod classify;
mod clock;
mod config;
mod decision;
mod middleware;
mod overrides;
mod random;
mod report;
mod retry_after;

pub use backoff::Jitter;
pub use classify::{Attempt, Outcome, Retryability};
#[cfg(feature = "test-util")]
pub use clock::ManualClock;
pub use clock::{Clock, Sleep, TokioClock};
pub use config::{ConfigError, RetryConfig, RetryConfigBuilder};
pub use decision::{Decision, RetryReason, StopReason};
pub use middleware::{RetryEvent, RetryMiddleware};
pub use overrides::{MaxRetries, NoRetry, RetryDeadline, SafeToRetry};
#[cfg(feature = "test-util")]
pub use random::FixedJitter;
pub use random::{JitterSource, SeededJitter, ThreadRngJitter};
pub use report::{ReportSlot, RetryReport};
