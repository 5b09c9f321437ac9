//! The retry policy as plain, validated configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, StatusCode};

use crate::backoff::{self, Jitter};
use crate::budget::RetryBudget;
use crate::classify::{Attempt, Retryability};

/// A custom retry predicate; see [`RetryConfigBuilder::with_predicate`].
pub(crate) type Predicate = Arc<dyn Fn(&Attempt<'_>) -> Option<Retryability> + Send + Sync>;

/// The retry policy: how many times, on what, how long to wait.
///
/// Only valid configurations exist: build one with [`RetryConfig::builder`],
/// whose [`build`](RetryConfigBuilder::build) rejects invalid settings, or
/// take the default.
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
/// | `deadline` | none | the caller owns the deadline; set one to bound attempts and waits together |
/// | `drain_limit` | 64 KiB | enough to finish a typical error body so the connection is reused, small enough to bound memory |
/// | `budget` | [`RetryBudget::default`]: 10% of traffic plus 10 per second, per host | in an outage, retries add a tenth to the load, not three times it |
/// | `predicate` | none | the built-in rules above |
#[derive(Clone)]
pub struct RetryConfig {
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    jitter: Jitter,
    retryable_statuses: Vec<StatusCode>,
    retry_429_any_method: bool,
    idempotency_header: HeaderName,
    max_retry_after: Duration,
    deadline: Option<Duration>,
    drain_limit: usize,
    budget: Option<RetryBudget>,
    predicate: Option<Predicate>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            jitter: Jitter::Full,
            retryable_statuses: vec![
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::BAD_GATEWAY,
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::GATEWAY_TIMEOUT,
            ],
            retry_429_any_method: true,
            idempotency_header: HeaderName::from_static("idempotency-key"),
            max_retry_after: Duration::from_secs(30),
            deadline: None,
            drain_limit: 64 * 1024,
            budget: Some(RetryBudget::default()),
            predicate: None,
        }
    }
}

impl RetryConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> RetryConfigBuilder {
        RetryConfigBuilder { config: Self::default(), statuses: None, header: None }
    }

    /// A builder starting from this configuration.
    pub fn to_builder(&self) -> RetryConfigBuilder {
        RetryConfigBuilder { config: self.clone(), statuses: None, header: None }
    }

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
    pub fn retry_429_any_method(&self) -> bool {
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

    /// How much of a retried response's body is read before it is dropped.
    pub fn drain_limit(&self) -> usize {
        self.drain_limit
    }

    /// The wait this policy picks before retry `retry` (0 for the first
    /// retry), given the previous wait (only [`Jitter::Decorrelated`] reads
    /// it; pass `initial_backoff` before the first retry) and a random `unit`
    /// in `[0, 1]` (clamped; NaN counts as 0). Never more than `max_backoff`,
    /// never panics.
    ///
    /// ```
    /// use std::time::Duration;
    /// use reqwest_safe_retry::RetryConfig;
    ///
    /// let config = RetryConfig::default();
    /// let top = |retry| config.backoff(retry, config.initial_backoff(), 1.0);
    /// assert_eq!(top(0), Duration::from_millis(500));
    /// assert_eq!(top(2), Duration::from_secs(2));
    /// assert_eq!(top(u32::MAX), Duration::from_secs(30));
    /// ```
    pub fn backoff(&self, retry: u32, previous: Duration, unit: f64) -> Duration {
        backoff::backoff(self.jitter, self.initial_backoff, self.max_backoff, retry, previous, unit)
    }

    /// The retry budget, if one is on.
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.budget.as_ref()
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
            .field("deadline", &self.deadline)
            .field("drain_limit", &self.drain_limit)
            .field("budget", &self.budget)
            .field("predicate", &self.predicate.as_ref().map(|_| "<fn>"))
            .finish()
    }
}

/// Builds a [`RetryConfig`]; nothing is checked until [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct RetryConfigBuilder {
    config: RetryConfig,
    statuses: Option<Vec<u16>>,
    header: Option<String>,
}

impl RetryConfigBuilder {
    /// Retries after the first attempt; `0` turns retrying off.
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.config.max_retries = retries;
        self
    }

    /// The ceiling of the first wait; each retry doubles it up to `max_backoff`.
    pub fn with_initial_backoff(mut self, initial: Duration) -> Self {
        self.config.initial_backoff = initial;
        self
    }

    /// The longest wait the backoff picks.
    pub fn with_max_backoff(mut self, max: Duration) -> Self {
        self.config.max_backoff = max;
        self
    }

    /// How waits are spread under the ceiling.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.config.jitter = jitter;
        self
    }

    /// Replaces the set of retryable statuses. Each must be from 400 to 599.
    pub fn with_retryable_statuses(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        self.statuses = Some(statuses.into_iter().collect());
        self
    }

    /// Whether 429 (if in the status set) is retried for any method. With
    /// `false`, a 429 is retried only when the request is safe to repeat.
    pub fn with_429_for_any_method(mut self, any_method: bool) -> Self {
        self.config.retry_429_any_method = any_method;
        self
    }

    /// The header whose presence (with a non-empty value) makes a request
    /// safe to repeat.
    pub fn with_idempotency_header(mut self, name: impl Into<String>) -> Self {
        self.header = Some(name.into());
        self
    }

    /// The longest `Retry-After` honoured. A server asking for more gets its
    /// response handed to the caller at once, rather than retried early.
    pub fn with_max_retry_after(mut self, cap: Duration) -> Self {
        self.config.max_retry_after = cap;
        self
    }

    /// A total time budget for all attempts and waits. A wait that would end
    /// past it is not started; the last outcome is returned instead.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.config.deadline = Some(deadline);
        self
    }

    /// Removes the deadline.
    pub fn without_deadline(mut self) -> Self {
        self.config.deadline = None;
        self
    }

    /// How much of a retried response's body to read (and discard) so that
    /// its connection can be reused. `0` drops it unread.
    pub fn with_drain_limit(mut self, bytes: usize) -> Self {
        self.config.drain_limit = bytes;
        self
    }

    /// Replaces the retry budget: the share of recent traffic that retries
    /// may add. See [`RetryBudget`] for the algorithm and its defaults.
    pub fn with_budget(mut self, budget: RetryBudget) -> Self {
        self.config.budget = Some(budget);
        self
    }

    /// Turns the retry budget off: only the retry count bounds retries.
    pub fn without_budget(mut self) -> Self {
        self.config.budget = None;
        self
    }

    /// A custom predicate, consulted after every attempt before the built-in
    /// rules. Return `Some` to decide, `None` to fall back to the built-in
    /// rules. Whatever it says, a [`Retryability::WhenSafe`] outcome is still
    /// retried only for requests that are safe to repeat. It is not consulted
    /// for a request whose body cannot be copied, which is never retried.
    ///
    /// ```
    /// use reqwest_safe_retry::{Outcome, RetryConfig, Retryability};
    ///
    /// // Also retry a 500, but only for requests that are safe to repeat.
    /// let config = RetryConfig::builder()
    ///     .with_predicate(|attempt| match attempt.outcome {
    ///         Outcome::Response(r) if r.status() == 500 => Some(Retryability::WhenSafe),
    ///         _ => None,
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # let _ = config;
    /// ```
    pub fn with_predicate<F>(mut self, predicate: F) -> Self
    where
        F: Fn(&Attempt<'_>) -> Option<Retryability> + Send + Sync + 'static,
    {
        self.config.predicate = Some(Arc::new(predicate));
        self
    }

    /// Checks the settings and returns the configuration.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid field: `initial_backoff`
    /// greater than `max_backoff`, a retryable status outside 400–599, an
    /// idempotency header that is not a valid header name, a zero `deadline`,
    /// or a budget ratio outside 0–1 or window outside 100 ms–1 h.
    pub fn build(self) -> Result<RetryConfig, ConfigError> {
        let mut config = self.config;
        if config.initial_backoff > config.max_backoff {
            return Err(ConfigError::new(
                "initial_backoff",
                format!(
                    "{:?} is greater than max_backoff ({:?})",
                    config.initial_backoff, config.max_backoff
                ),
            ));
        }
        if let Some(codes) = self.statuses {
            let mut statuses = Vec::with_capacity(codes.len());
            for code in codes {
                match StatusCode::from_u16(code) {
                    Ok(status) if status.is_client_error() || status.is_server_error() => {
                        statuses.push(status)
                    }
                    _ => {
                        return Err(ConfigError::new(
                            "retryable_statuses",
                            format!("{code} is not an error status (400 to 599)"),
                        ));
                    }
                }
            }
            statuses.sort_unstable();
            statuses.dedup();
            config.retryable_statuses = statuses;
        }
        if let Some(name) = self.header {
            config.idempotency_header = HeaderName::try_from(name.as_str()).map_err(|_| {
                ConfigError::new(
                    "idempotency_header",
                    format!("{name:?} is not a valid header name"),
                )
            })?;
        }
        if let Some(budget) = &config.budget {
            budget.validate()?;
        }
        if config.deadline == Some(Duration::ZERO) {
            return Err(ConfigError::new(
                "deadline",
                "must be greater than zero; use `without_deadline` for none".to_owned(),
            ));
        }
        Ok(config)
    }
}

/// An invalid setting, rejected when the configuration is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid retry configuration: `{field}` {message}")]
pub struct ConfigError {
    field: &'static str,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(field: &'static str, message: String) -> Self {
        Self { field, message }
    }

    /// The name of the offending setting.
    pub fn field(&self) -> &'static str {
        self.field
    }
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
        assert!(config.retry_429_any_method());
        assert_eq!(config.idempotency_header(), "idempotency-key");
        assert_eq!(config.max_retry_after(), Duration::from_secs(30));
        assert_eq!(config.deadline(), None);
        assert_eq!(config.drain_limit(), 64 * 1024);
        assert_eq!(config.budget(), Some(&RetryBudget::default()));
        assert!(config.predicate().is_none());
    }

    #[test]
    fn invalid_settings_name_their_field() {
        let cases: Vec<(RetryConfigBuilder, &str)> = vec![
            (
                RetryConfig::builder()
                    .with_initial_backoff(Duration::from_secs(2))
                    .with_max_backoff(Duration::from_secs(1)),
                "initial_backoff",
            ),
            (RetryConfig::builder().with_retryable_statuses([503, 200]), "retryable_statuses"),
            (RetryConfig::builder().with_retryable_statuses([1000]), "retryable_statuses"),
            (RetryConfig::builder().with_retryable_statuses([99]), "retryable_statuses"),
            (RetryConfig::builder().with_idempotency_header("bad header"), "idempotency_header"),
            (RetryConfig::builder().with_idempotency_header(""), "idempotency_header"),
            (RetryConfig::builder().with_deadline(Duration::ZERO), "deadline"),
            (
                RetryConfig::builder().with_budget(RetryBudget::default().with_ratio(2.0)),
                "budget.ratio",
            ),
            (
                RetryConfig::builder()
                    .with_budget(RetryBudget::default().with_window(Duration::ZERO)),
                "budget.window",
            ),
        ];
        for (builder, field) in cases {
            let error = builder.build().expect_err(field);
            assert_eq!(error.field(), field);
            assert!(error.to_string().contains(field), "{error}");
        }
    }

    #[test]
    fn extremes_that_are_valid_build() {
        let config = RetryConfig::builder()
            .with_max_retries(u32::MAX)
            .with_initial_backoff(Duration::ZERO)
            .with_max_backoff(Duration::MAX)
            .with_max_retry_after(Duration::ZERO)
            .with_deadline(Duration::MAX)
            .with_drain_limit(0)
            .with_retryable_statuses([500, 503, 503, 429])
            .with_idempotency_header("X-Request-Key")
            .build()
            .unwrap();
        let codes: Vec<u16> = config.retryable_statuses().iter().map(|s| s.as_u16()).collect();
        assert_eq!(codes, [429, 500, 503]);
        assert_eq!(config.idempotency_header(), "x-request-key");
    }

    #[test]
    fn to_builder_keeps_settings() {
        let config = RetryConfig::builder().with_max_retries(7).build().unwrap();
        let again = config.to_builder().with_jitter(Jitter::Equal).build().unwrap();
        assert_eq!(again.max_retries(), 7);
        assert_eq!(again.jitter(), Jitter::Equal);
    }
}
