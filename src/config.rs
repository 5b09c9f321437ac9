//! The retry policy as plain, validated configuration.

use std::fmt;
use std::time::Duration;

use http::{HeaderName, StatusCode};

use crate::backoff::Backoff;
use crate::body::BodyBuffering;
use crate::budget::RetryBudget;
use crate::error::ConfigError;
use crate::predicate::Predicate;
use crate::retry_after::RetryAfter;

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
/// | `backoff` | [`Backoff::default`]: from 500 ms, doubling up to 30 s, full jitter | long enough for a connection pool or a pod to turn over; spreads clients the most |
/// | `retryable_statuses` | 429, 502, 503, 504 | the statuses that say "not now" rather than "no"; 500 usually means a bug a retry repeats |
/// | `retry_429_any_method` | yes | the server refused before doing anything |
/// | `idempotency_header` | `Idempotency-Key` | the de-facto header for deduplicated POSTs |
/// | `retry_after` | [`RetryAfter::default`]: honoured up to 30 s, longer asks returned, spread | a server may ask us to wait, not to hang; clients told the same thing come back spread |
/// | `deadline` | none | the caller owns the deadline: a request's own timeout bounds its whole call, as in reqwest alone; set one to bound every call's attempts and waits together |
/// | `attempt_timeout` | none | the client's own timeout bounds each attempt |
/// | `drain_limit` | 64 KiB | enough to finish a typical error body so the connection is reused, small enough to bound memory |
/// | `budget` | [`RetryBudget::default`]: a tenth of a retry earned per final answer, a reserve of one call's retries and two more, per host | the extra load of an outage stays bounded for any number of processes, and a fresh client still gets every retry of an isolated failure |
/// | `body_buffering` | [`BodyBuffering::default`]: off | a streamed request body is sent once, never held in memory; a response is returned once its headers arrive |
/// | `throttling` | on | a host that turns most requests away is sent a share of new calls, settling where it accepts one attempt in 2.7; a quiet caller (under 0.75 calls a second) or a host failing half of its answers independently of load is left alone (see [`rate_limit`](crate::rate_limit)) |
/// | `mint_keys` | off | a key makes a repeat safe only where the server deduplicates by it, which the middleware cannot know: the caller says so, for a client or a request |
/// | `predicate` | none | the built-in rules above |
#[doc(alias = "DefaultRetryConfig")]
#[derive(Clone, Debug)]
pub struct RetryConfig {
    pub(crate) max_retries: u32,
    pub(crate) backoff: Backoff,
    pub(crate) retryable_statuses: Vec<StatusCode>,
    pub(crate) retry_429_any_method: bool,
    pub(crate) idempotency_header: HeaderName,
    pub(crate) retry_after: RetryAfter,
    pub(crate) deadline: Option<Duration>,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) drain_limit: usize,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) body_buffering: BodyBuffering,
    pub(crate) throttling: bool,
    pub(crate) mint_keys: bool,
    pub(crate) predicate: Option<Predicate>,
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
            backoff: Backoff::default(),
            retryable_statuses: DEFAULT_RETRYABLE_STATUSES.to_vec(),
            retry_429_any_method: true,
            idempotency_header: default_idempotency_header(),
            retry_after: RetryAfter::default(),
            deadline: None,
            attempt_timeout: None,
            drain_limit: 64 * 1024,
            budget: Some(RetryBudget::default()),
            body_buffering: BodyBuffering::default(),
            throttling: true,
            mint_keys: false,
            predicate: None,
        }
    }
}

impl RetryConfig {
    /// Retries after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// How the wait before a retry grows.
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// The statuses retried, sorted.
    pub fn retryable_statuses(&self) -> &[StatusCode] {
        &self.retryable_statuses
    }

    /// Whether a 429 (if retryable) is retried whatever the method.
    pub fn retry_429_any_method(&self) -> bool {
        self.retry_429_any_method
    }

    /// The header whose non-blank value makes a request safe to repeat.
    pub fn idempotency_header(&self) -> &HeaderName {
        &self.idempotency_header
    }

    /// How a wait the server asks for is honoured.
    pub fn retry_after(&self) -> RetryAfter {
        self.retry_after
    }

    /// Whether first attempts to a host that turns most requests away are
    /// throttled: see [`rate_limit`](crate::rate_limit).
    pub fn throttling(&self) -> bool {
        self.throttling
    }

    /// Whether an idempotency key is minted for every request that has
    /// none and is not already safe to repeat.
    pub fn minted_keys(&self) -> bool {
        self.mint_keys
    }

    /// The total time for a call, if bounded.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The longest one attempt may take, if bounded by the middleware.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    /// How much of a retried response's body is read to reuse its
    /// connection.
    pub fn drain_limit(&self) -> usize {
        self.drain_limit
    }

    /// The retry budget, if on.
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.budget.as_ref()
    }

    /// Which bodies are read into memory, and up to how many bytes.
    pub fn body_buffering(&self) -> BodyBuffering {
        self.body_buffering
    }

    pub(crate) fn predicate(&self) -> Option<&Predicate> {
        self.predicate.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Jitter;
    use crate::retry_after::RetryAfterOverCap;

    #[test]
    fn default_matches_the_documented_table() {
        let config = RetryConfig::default();
        assert_eq!(config.max_retries(), 3);
        assert_eq!(config.backoff().initial(), Duration::from_millis(500));
        assert_eq!(config.backoff().max(), Duration::from_secs(30));
        assert_eq!(config.backoff().jitter(), Jitter::Full);
        let codes: Vec<u16> = config.retryable_statuses().iter().map(|s| s.as_u16()).collect();
        assert_eq!(codes, [429, 502, 503, 504]);
        assert!(config.retry_429_any_method());
        assert_eq!(config.idempotency_header(), "idempotency-key");
        assert_eq!(config.retry_after().cap(), Duration::from_secs(30));
        assert!(config.retry_after().spread());
        assert_eq!(config.retry_after().over_cap(), RetryAfterOverCap::ReturnResponse);
        assert_eq!(config.deadline(), None);
        assert_eq!(config.attempt_timeout(), None);
        assert_eq!(config.drain_limit(), 64 * 1024);
        assert_eq!(config.budget(), Some(&RetryBudget::default()));
        assert!(config.predicate().is_none());
        assert_eq!(config.body_buffering(), BodyBuffering::default());
        assert_eq!(
            (config.body_buffering().request(), config.body_buffering().response()),
            (None, None)
        );
        let strict = RetryConfig::builder().with_retry_429_any_method(false).build().unwrap();
        assert!(!strict.retry_429_any_method());
    }

    #[test]
    fn each_setting_reads_back_as_set() {
        let s = Duration::from_secs;
        let backoff =
            Backoff::default().with_initial(s(1)).with_max(s(20)).with_jitter(Jitter::Equal);
        let retry_after = RetryAfter::default()
            .with_cap(s(10))
            .with_over_cap(RetryAfterOverCap::WaitTheCap)
            .with_spread(false);
        let buffering = BodyBuffering::default().with_request(2048).with_response(4096);
        let config = RetryConfig::builder()
            .with_max_retries(5)
            .with_backoff(backoff)
            .with_retryable_statuses([StatusCode::SERVICE_UNAVAILABLE])
            .with_idempotency_header("x-request-id")
            .with_retry_after(retry_after)
            .with_deadline(s(60))
            .with_attempt_timeout(s(5))
            .with_drain_limit(1024)
            .with_budget(None)
            .with_body_buffering(buffering)
            .build()
            .unwrap();
        assert_eq!(config.max_retries(), 5);
        assert_eq!(config.backoff(), backoff);
        assert_eq!(config.retryable_statuses(), [StatusCode::SERVICE_UNAVAILABLE]);
        assert_eq!(config.idempotency_header(), "x-request-id");
        assert_eq!(config.retry_after(), retry_after);
        assert_eq!((config.deadline(), config.attempt_timeout()), (Some(s(60)), Some(s(5))));
        assert_eq!(config.drain_limit(), 1024);
        assert_eq!(config.budget(), None);
        assert_eq!(config.body_buffering(), buffering);
        assert!(format!("{config:?}").contains("predicate: None"));
    }
}
