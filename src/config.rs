//! The retry policy as plain, validated configuration.

use std::fmt;
use std::time::Duration;

use http::{HeaderName, StatusCode};

use crate::backoff::Jitter;
use crate::budget::RetryBudget;
use crate::error::ConfigError;
use crate::predicate::Predicate;

/// The retry policy: how many times, on what, how long to wait.
///
/// Only valid configurations exist: build one with [`RetryConfig::builder`],
/// whose [`build`](crate::RetryConfigBuilder::build) rejects invalid
/// settings, or take the default.
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | `max_retries` | 3 (4 attempts in all) | rides out a blip of a second or two without multiplying load much |
/// | `initial_backoff` | 500 ms | the first wait's ceiling; long enough for a connection pool or a pod to turn over |
/// | `max_backoff` | 30 s | no single wait longer than a user would sit through |
/// | `jitter` | [`Jitter::Full`] | spreads clients the most, so a recovering server is not hit in waves |
/// | `retryable_statuses` | 429, 502, 503, 504 | the statuses that say "not now" rather than "no"; 500 usually means a bug a retry repeats |
/// | `429 for any method` | yes | the server refused before doing anything |
/// | `idempotency_header` | `Idempotency-Key` | the de-facto header for deduplicated POSTs |
/// | `max_retry_after` | 30 s | a server may ask us to wait, not to hang; longer asks are returned to the caller |
/// | `retry_after_over_cap` | [`RetryAfterOverCap::ReturnResponse`] | the caller, not the middleware, decides whether to wait longer than the cap |
/// | `retry_after_spread` | on | `Retry-After` is a floor: clients told the same thing come back spread over the retry's backoff ceiling, not in one instant |
/// | `deadline` | none | the caller owns the deadline; set one to bound attempts and waits together |
/// | `attempt_timeout` | none | the request's or the client's own timeout bounds each attempt |
/// | `drain_limit` | 64 KiB | enough to finish a typical error body so the connection is reused, small enough to bound memory |
/// | `budget` | [`RetryBudget::default`]: a tenth of a retry earned per final answer, a reserve of one call's retries and two more, per host | the extra load of an outage stays bounded for any number of processes, and a fresh client still gets every retry of an isolated failure |
/// | `predicate` | none | the built-in rules above |
/// | `request_body_buffering` | off | a streamed request body is sent once, never held in memory; see [`with_request_body_buffering`](crate::RetryConfigBuilder::with_request_body_buffering) |
/// | `response_body_buffering` | off | a response is returned once its headers arrive, its body the caller's to read; see [`with_response_body_buffering`](crate::RetryConfigBuilder::with_response_body_buffering) |
#[derive(Clone)]
pub struct RetryConfig {
    pub(crate) max_retries: u32,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) jitter: Jitter,
    pub(crate) retryable_statuses: Vec<StatusCode>,
    pub(crate) retry_429_any_method: bool,
    pub(crate) idempotency_header: HeaderName,
    pub(crate) max_retry_after: Duration,
    pub(crate) retry_after_spread: bool,
    pub(crate) retry_after_over_cap: RetryAfterOverCap,
    pub(crate) deadline: Option<Duration>,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) drain_limit: usize,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) predicate: Option<Predicate>,
    pub(crate) request_body_buffering: Option<usize>,
    pub(crate) response_body_buffering: Option<usize>,
}

/// The statuses that say "not now" rather than "no": retried by default,
/// and the answers that stop further hedges.
pub(crate) const DEFAULT_RETRYABLE_STATUSES: [StatusCode; 4] = [
    StatusCode::TOO_MANY_REQUESTS,
    StatusCode::BAD_GATEWAY,
    StatusCode::SERVICE_UNAVAILABLE,
    StatusCode::GATEWAY_TIMEOUT,
];

/// The header that makes a request safe to repeat unless another is set:
/// `Idempotency-Key`, the de-facto header for deduplicated POSTs. The retry
/// and hedge configurations both start from it.
pub(crate) fn default_idempotency_header() -> HeaderName {
    HeaderName::from_static("idempotency-key")
}

/// An idempotency header as both builders take one: whatever
/// `reqwest::RequestBuilder::header` takes, or the error their `build`
/// reports for a name that is not valid.
pub(crate) fn idempotency_header<K>(name: K) -> Result<HeaderName, ConfigError>
where
    HeaderName: TryFrom<K>,
    <HeaderName as TryFrom<K>>::Error: fmt::Display,
{
    HeaderName::try_from(name)
        .map_err(|error| ConfigError::new("idempotency_header", format!("is not valid: {error}")))
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            jitter: Jitter::Full,
            retryable_statuses: DEFAULT_RETRYABLE_STATUSES.to_vec(),
            retry_429_any_method: true,
            idempotency_header: default_idempotency_header(),
            max_retry_after: Duration::from_secs(30),
            retry_after_spread: true,
            retry_after_over_cap: RetryAfterOverCap::ReturnResponse,
            deadline: None,
            attempt_timeout: None,
            drain_limit: 64 * 1024,
            budget: Some(RetryBudget::default()),
            predicate: None,
            request_body_buffering: None,
            response_body_buffering: None,
        }
    }
}

impl RetryConfig {
    /// Retries after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The ceiling of the first wait.
    pub fn initial_backoff(&self) -> Duration {
        self.initial_backoff
    }

    /// The longest wait the backoff picks.
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    /// How waits are spread under the ceiling.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// Response statuses that may be retried.
    pub fn retryable_statuses(&self) -> &[StatusCode] {
        &self.retryable_statuses
    }

    /// Whether 429 is retried for any method (otherwise only when safe).
    pub fn retries_429_for_any_method(&self) -> bool {
        self.retry_429_any_method
    }

    /// The header whose presence makes a request safe to repeat.
    pub fn idempotency_header(&self) -> &HeaderName {
        &self.idempotency_header
    }

    /// The longest `Retry-After` honoured.
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// The total time allowed for all attempts and waits, if any.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// What happens when `Retry-After` asks for more than `max_retry_after`.
    pub fn retry_after_over_cap(&self) -> RetryAfterOverCap {
        self.retry_after_over_cap
    }

    /// Whether a wait the server asked for is spread upwards by a random
    /// part of the retry's backoff ceiling.
    pub fn retry_after_spread(&self) -> bool {
        self.retry_after_spread
    }

    /// The longest one attempt may take, if set.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    /// How much of a retried response's body is read before it is dropped.
    pub fn drain_limit(&self) -> usize {
        self.drain_limit
    }

    /// The retry budget, if one is on.
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.budget.as_ref()
    }

    /// How much of a streamed request body is read into memory so that it
    /// can be sent again, if that is on.
    pub fn request_body_buffering(&self) -> Option<usize> {
        self.request_body_buffering
    }

    /// How much of a final response's body the middleware reads into
    /// memory, inside the attempt, so that a body that breaks while it is
    /// read can be retried, if that is on.
    pub fn response_body_buffering(&self) -> Option<usize> {
        self.response_body_buffering
    }

    pub(crate) fn predicate(&self) -> Option<&Predicate> {
        self.predicate.as_ref()
    }
}

impl fmt::Debug for RetryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryConfig")
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("jitter", &self.jitter)
            .field("retryable_statuses", &self.retryable_statuses)
            .field("retry_429_any_method", &self.retry_429_any_method)
            .field("idempotency_header", &self.idempotency_header)
            .field("max_retry_after", &self.max_retry_after)
            .field("retry_after_spread", &self.retry_after_spread)
            .field("retry_after_over_cap", &self.retry_after_over_cap)
            .field("deadline", &self.deadline)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("drain_limit", &self.drain_limit)
            .field("budget", &self.budget)
            .field("predicate", &self.predicate.as_ref().map(|_| "<fn>"))
            .field("request_body_buffering", &self.request_body_buffering)
            .field("response_body_buffering", &self.response_body_buffering)
            .finish()
    }
}

/// What the middleware does when a server's `Retry-After` asks for longer than
/// [`max_retry_after`](RetryConfig::max_retry_after).
///
/// ```
/// use std::time::Duration;
/// use reqwest_safe_retry::{RetryAfterOverCap, RetryConfig};
///
/// // As the Go round-tripper and the orders client in the design notes do:
/// // wait at most 5 s, then try again.
/// let config = RetryConfig::builder()
///     .with_max_retry_after(Duration::from_secs(5))
///     .with_retry_after_over_cap(RetryAfterOverCap::WaitTheCap)
///     .build()?;
/// # Ok::<(), reqwest_safe_retry::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RetryAfterOverCap {
    /// Hand the response to the caller at once, with
    /// [`StopReason::RetryAfterTooLong`](crate::StopReason::RetryAfterTooLong)
    /// saying how long the server asked for. The default: retrying before
    /// the server said it would be ready is likely wasted, and whether to
    /// wait an hour is the caller's call.
    #[default]
    ReturnResponse,
    /// Wait the cap, then retry, as if the server had asked for exactly the
    /// cap (spread as any `Retry-After` wait is). The retry may well meet the
    /// same answer; the retry count and the budget still bound how often.
    WaitTheCap,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_matches_the_documented_table() {
        let config = RetryConfig::default();
        assert_eq!(config.max_retries(), 3);
        assert_eq!(config.initial_backoff(), Duration::from_millis(500));
        assert_eq!(config.max_backoff(), Duration::from_secs(30));
        assert_eq!(config.jitter(), Jitter::Full);
        let codes: Vec<u16> = config.retryable_statuses().iter().map(|s| s.as_u16()).collect();
        assert_eq!(codes, [429, 502, 503, 504]);
        assert!(config.retries_429_for_any_method());
        assert_eq!(config.idempotency_header(), "idempotency-key");
        assert_eq!(config.max_retry_after(), Duration::from_secs(30));
        assert!(config.retry_after_spread());
        assert_eq!(config.retry_after_over_cap(), RetryAfterOverCap::ReturnResponse);
        assert_eq!(config.deadline(), None);
        assert_eq!(config.attempt_timeout(), None);
        assert_eq!(config.drain_limit(), 64 * 1024);
        assert_eq!(config.budget(), Some(&RetryBudget::default()));
        assert!(config.predicate().is_none());
        assert_eq!(config.request_body_buffering(), None);
        assert_eq!(config.response_body_buffering(), None);
        let strict = RetryConfig::builder().with_429_for_any_method(false).build().unwrap();
        assert!(!strict.retries_429_for_any_method());
    }

    #[test]
    fn each_setting_reads_back_as_set() {
        let s = Duration::from_secs;
        let config = RetryConfig::builder()
            .with_max_retries(5)
            .with_initial_backoff(s(1))
            .with_max_backoff(s(20))
            .with_jitter(Jitter::Equal)
            .with_retryable_statuses([StatusCode::SERVICE_UNAVAILABLE])
            .with_idempotency_header("x-request-id")
            .with_max_retry_after(s(10))
            .with_retry_after_over_cap(RetryAfterOverCap::WaitTheCap)
            .with_retry_after_spread(false)
            .with_deadline(s(60))
            .with_attempt_timeout(s(5))
            .with_drain_limit(1024)
            .without_budget()
            .with_request_body_buffering(2048)
            .with_response_body_buffering(4096)
            .build()
            .unwrap();
        assert_eq!(
            (config.max_retries(), config.initial_backoff(), config.max_backoff()),
            (5, s(1), s(20))
        );
        assert_eq!(config.jitter(), Jitter::Equal);
        assert_eq!(config.retryable_statuses(), [StatusCode::SERVICE_UNAVAILABLE]);
        assert_eq!(config.idempotency_header(), "x-request-id");
        assert_eq!(config.max_retry_after(), s(10));
        assert_eq!(config.retry_after_over_cap(), RetryAfterOverCap::WaitTheCap);
        assert!(!config.retry_after_spread());
        assert_eq!((config.deadline(), config.attempt_timeout()), (Some(s(60)), Some(s(5))));
        assert_eq!(config.drain_limit(), 1024);
        assert_eq!(config.budget(), None);
        assert_eq!(config.request_body_buffering(), Some(2048));
        assert_eq!(config.response_body_buffering(), Some(4096));
    }
}
