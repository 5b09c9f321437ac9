//! Building a [`RetryConfig`]: `with_*` setters, checked once by `build`.
//!
//! Longer than the crate's other files, and one concept still: each setter
//! carries the reference its setting needs, where docs.rs users read it (the
//! stream and response buffering contracts are stated here and nowhere
//! else), and `build` checks them all in one place.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, StatusCode};

use crate::backoff::Jitter;
use crate::budget::RetryBudget;
use crate::config::{RetryAfterOverCap, RetryConfig, idempotency_header};
use crate::error::ConfigError;
use crate::predicate::{Attempt, Verdict};

/// Builds a [`RetryConfig`]; nothing is checked until [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct RetryConfigBuilder {
    config: RetryConfig,
    statuses: Option<Vec<StatusCode>>,
    /// The header name, or why it is not one.
    header: Option<Result<HeaderName, ConfigError>>,
}

impl RetryConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> RetryConfigBuilder {
        Self::default().to_builder()
    }

    /// A builder starting from this configuration.
    pub fn to_builder(&self) -> RetryConfigBuilder {
        RetryConfigBuilder { config: self.clone(), statuses: None, header: None }
    }
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
    pub fn with_retryable_statuses(
        mut self,
        statuses: impl IntoIterator<Item = StatusCode>,
    ) -> Self {
        self.statuses = Some(statuses.into_iter().collect());
        self
    }

    /// Whether 429 (if in the status set) is retried for any method. With
    /// `false`, a 429 is retried only when the request is safe to repeat.
    pub fn with_429_for_any_method(mut self, any_method: bool) -> Self {
        self.config.retry_429_any_method = any_method;
        self
    }

    /// The header whose presence (with a non-blank value) makes a request
    /// safe to repeat.
    ///
    /// Takes what `reqwest::RequestBuilder::header` takes: a `HeaderName`, a
    /// `&str` or a `String`; a name that is not valid is reported by
    /// [`build`](Self::build).
    pub fn with_idempotency_header<K>(mut self, name: K) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: fmt::Display,
    {
        self.header = Some(idempotency_header(name));
        self
    }

    /// The longest `Retry-After` honoured. A server asking for more gets its
    /// response handed to the caller at once, rather than retried early.
    pub fn with_max_retry_after(mut self, cap: Duration) -> Self {
        self.config.max_retry_after = cap;
        self
    }

    /// What to do when `Retry-After` asks for more than `max_retry_after`:
    /// return the response at once (the default) or wait the cap and retry.
    pub fn with_retry_after_over_cap(mut self, over_cap: RetryAfterOverCap) -> Self {
        self.config.retry_after_over_cap = over_cap;
        self
    }

    /// Whether to spread a wait the server asked for (on by default).
    ///
    /// `Retry-After` says "not before", and a fleet told "5 seconds", or the
    /// same date, would otherwise come back in the same instant. With the
    /// spread on, the wait is the server's value plus a random part of this
    /// retry's backoff ceiling (`initial_backoff × 2ⁿ`, at most
    /// `max_backoff`), drawn from the jitter source: up to 500 ms more before
    /// the first retry, by default. With [`Jitter::None`] there is no spread.
    /// Off, the wait is exactly the server's value, as many clients do.
    pub fn with_retry_after_spread(mut self, spread: bool) -> Self {
        self.config.retry_after_spread = spread;
        self
    }

    /// A total time for the whole call: every attempt, the one in flight
    /// included, and every wait. A wait that would leave no time for another
    /// attempt is not started, and the last outcome is returned instead; an
    /// attempt still in flight when it passes is cut short with a timeout
    /// error (see [`DeadlineExceeded`](crate::DeadlineExceeded)).
    ///
    /// It bounds the body of the response returned too: a read still going
    /// when it passes fails with a `reqwest::Error` whose `is_timeout()` is
    /// true. Where the attempt has a timeout the middleware can see (the
    /// request's, or [`with_attempt_timeout`](Self::with_attempt_timeout)),
    /// the deadline goes on the request as a shorter timeout, and the error
    /// is reqwest's own. Otherwise the middleware bounds the body itself,
    /// and the error's source is an `io::Error` of kind `TimedOut` holding
    /// the `DeadlineExceeded` (`io::Error::get_ref`). A client's own timeout
    /// (`ClientBuilder::timeout`) is never replaced: the earlier of the two
    /// ends the read.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.config.deadline = Some(deadline);
        self
    }

    /// The longest one attempt may take, from sending the request to the
    /// end of its response's body, as reqwest's request timeout does. An
    /// attempt that times out is retried like any timeout: when the request
    /// is safe to repeat. A timeout set on the request itself that is shorter
    /// still wins.
    ///
    /// It is applied as the request's timeout, so the caller sees a
    /// `reqwest::Error` whose `is_timeout()` is true. reqwest lets a request's
    /// timeout replace the client's default (`ClientBuilder::timeout`), which
    /// the middleware cannot see: keep this no longer than the client's.
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.config.attempt_timeout = Some(timeout);
        self
    }

    /// Removes the attempt timeout.
    pub fn without_attempt_timeout(mut self) -> Self {
        self.config.attempt_timeout = None;
        self
    }

    /// Removes the deadline.
    pub fn without_deadline(mut self) -> Self {
        self.config.deadline = None;
        self
    }

    /// How much of a retried response's body to read (and discard) so that
    /// its connection can be reused. A body declared longer is dropped
    /// unread; one of unknown length is read until it passes the limit (with
    /// `0`, until its first bytes arrive), then dropped.
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

    /// Reads a streamed request body into memory, up to `max_bytes`, before
    /// the first attempt, so that it can be sent again. Off by default.
    ///
    /// A body given as bytes is shared by every attempt. One given as a
    /// stream (`reqwest::Body::wrap_stream`, `reqwest::Body::wrap`) cannot be
    /// copied: by default it is sent once and its outcome returned, with
    /// [`StopReason::NotReplayable`](crate::StopReason::NotReplayable) when it
    /// would have been retried. With this on:
    ///
    /// - a stream that ends within `max_bytes` is replaced by the bytes read,
    ///   and the request is retried like any other;
    /// - a longer stream is still sent whole, once: the bytes read, then the
    ///   rest of the stream as it comes. It is not retried (`NotReplayable`).
    ///   At most `max_bytes` plus the one chunk that went over are held;
    /// - a stream that fails while it is read is sent as far as it got, then
    ///   fails the same way, so reqwest reports the body error as it would
    ///   without the middleware. It is not retried;
    /// - a stream with trailers is sent once, as it came, trailers included.
    ///
    /// Reading waits on whatever produces the stream, before the first
    /// attempt. That time counts against the deadline, measured from when
    /// the middleware gets the request: if it passes while the stream is
    /// read, nothing is sent and the caller gets
    /// [`DeadlineExceeded`](crate::DeadlineExceeded). Reading also waits no
    /// longer than the attempt's timeout, if the middleware can see one (the
    /// request's own or the attempt timeout): then it stops, and the body is
    /// sent once as it is, the attempt timed from when it is sent. The
    /// client's timeout cannot be seen, and starts only then.
    ///
    /// Nothing is read for a request that cannot be retried anyway
    /// (no retries allowed, for the config or by [`MaxRetries`](crate::MaxRetries)), nor for a body that
    /// says it is longer than `max_bytes`. A body read whole is an ordinary
    /// bytes body to reqwest too, which then also follows a 307 or 308
    /// redirect with it.
    ///
    /// ```
    /// use reqwest_safe_retry::RetryConfig;
    ///
    /// // Streams of up to 256 KiB can be retried.
    /// let config = RetryConfig::builder().with_request_body_buffering(256 * 1024).build()?;
    /// assert_eq!(config.request_body_buffering(), Some(256 * 1024));
    /// # Ok::<(), reqwest_safe_retry::ConfigError>(())
    /// ```
    pub fn with_request_body_buffering(mut self, max_bytes: usize) -> Self {
        self.config.request_body_buffering = Some(max_bytes);
        self
    }

    /// Turns stream buffering off: a streamed body is sent once.
    pub fn without_request_body_buffering(mut self) -> Self {
        self.config.request_body_buffering = None;
        self
    }

    /// Reads the body of a final response into memory, up to `max_bytes`,
    /// inside the attempt, so that a body that breaks while it is read is
    /// retried like any other failed attempt. Off by default.
    ///
    /// Without it, the middleware returns a response as soon as its headers
    /// arrive: a connection reset, a timeout or a message cut short while
    /// the caller reads the body reaches the caller, and is never retried.
    /// With it, for a request a body failure could be retried for (safe to
    /// repeat, retries allowed, a body that can be sent again), the
    /// middleware reads the body of a response whose status the built-in
    /// rules would not retry, before it decides (a predicate is asked after
    /// the read, about the response in memory or the body's error):
    ///
    /// - a body that ends within `max_bytes` comes back in memory: the same
    ///   status, headers, extensions and URL, with the bytes read as its
    ///   body. Reading it cannot fail any more;
    /// - a body that breaks while it is read makes the attempt a failure:
    ///   a reset or a message cut short as
    ///   [`RetryReason::ConnectionLost`](crate::RetryReason::ConnectionLost),
    ///   a timeout as [`RetryReason::Timeout`](crate::RetryReason::Timeout).
    ///   It is retried as those are before the headers, with the same
    ///   backoff, and counts against the retry budget as a failure (a body
    ///   read whole counts as a final answer). When it is not retried (the
    ///   last attempt, the deadline too close, the budget spent), the call
    ///   fails with the very `reqwest::Error` the caller's own
    ///   `response.bytes()` would have met, in
    ///   `reqwest_middleware::Error::Reqwest`: `is_decode()`, `is_timeout()`
    ///   and the source chain answer as they would, and `url()` is the
    ///   response's. A predicate sees it as the attempt's error. A body that
    ///   fails for another reason (a malformed chunk) is final, returned the
    ///   same way;
    /// - a body longer than `max_bytes` (by its `Content-Length`, or once
    ///   read past it) is returned as it streams: the bytes read, then the
    ///   rest as it comes. Its answer is final, and an error later in the
    ///   body is the caller's, as without this option. At most `max_bytes`
    ///   plus one chunk is held.
    ///
    /// The read is part of the attempt: the attempt's timeout (the
    /// request's own, the attempt timeout, or the client's, which reqwest
    /// applies to the body too) and the deadline bound it. When the
    /// deadline is raced on the middleware's clock, the read is inside the
    /// race, and the caller gets
    /// [`DeadlineExceeded`](crate::DeadlineExceeded) if it passes.
    ///
    /// Nothing changes for a request that cannot be retried after a body
    /// failure: one not safe to repeat (a POST without an idempotency key),
    /// one allowed no retries, or a streamed body
    /// sent once. Nor for a response the rules would retry (a 503, say)
    /// that is returned because no retry may follow: it comes back as it
    /// streams.
    ///
    /// ```
    /// use reqwest_safe_retry::RetryConfig;
    ///
    /// // Bodies of up to 1 MiB come back in memory, and are retried when
    /// // they break.
    /// let config = RetryConfig::builder().with_response_body_buffering(1024 * 1024).build()?;
    /// assert_eq!(config.response_body_buffering(), Some(1024 * 1024));
    /// # Ok::<(), reqwest_safe_retry::ConfigError>(())
    /// ```
    pub fn with_response_body_buffering(mut self, max_bytes: usize) -> Self {
        self.config.response_body_buffering = Some(max_bytes);
        self
    }

    /// Turns response buffering off: a response is returned once its
    /// headers arrive.
    pub fn without_response_body_buffering(mut self) -> Self {
        self.config.response_body_buffering = None;
        self
    }

    /// A custom predicate, consulted after every attempt before the built-in
    /// rules. Return `Some` to decide, `None` to fall back to the built-in
    /// rules. Whatever it says, a [`Retryability::WhenSafe`](crate::Retryability::WhenSafe) outcome is still
    /// retried only for requests that are safe to repeat, and an
    /// [`Retryability::AnyMethod`](crate::Retryability::AnyMethod) one is held to the same proof as the
    /// built-in rules: through a client the middleware did not build (see
    /// [`RetryMiddleware::client`](crate::RetryMiddleware::client)), or
    /// after a redirect, a request that is not safe to repeat is not
    /// retried, since the outcome may belong to a later hop. To repeat such a request
    /// anyway, mark it [`SafeToRetry`](crate::SafeToRetry). The predicate is
    /// not consulted for a request whose body cannot be copied, which is
    /// never retried.
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
    ///
    /// It may also set the wait before the retry it asks for, with a
    /// [`Verdict`](crate::Verdict) instead of a bare `Retryability`: a wait
    /// of its own ([`Verdict::after`](crate::Verdict::after)), or one the
    /// server asked for in a header the crate does not read
    /// ([`Verdict::server_asked`](crate::Verdict::server_asked)), which is
    /// capped, spread and priced like `Retry-After`.
    pub fn with_predicate<F, V>(mut self, predicate: F) -> Self
    where
        F: Fn(&Attempt<'_>) -> Option<V> + Send + Sync + 'static,
        V: Into<Verdict>,
    {
        self.config.predicate = Some(Arc::new(move |attempt| predicate(attempt).map(Into::into)));
        self
    }

    /// Checks the settings and returns the configuration.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid setting (its
    /// [`field`](ConfigError::field) is the setter's name without `with_`):
    /// `initial_backoff` greater than `max_backoff`, a retryable status
    /// outside 400–599, an idempotency header that is not a valid header
    /// name, a zero `deadline` or `attempt_timeout`, a zero
    /// `request_body_buffering` or `response_body_buffering` limit, or a
    /// budget whose ratio is outside 0–1 (`budget.ratio`), whose reserve is
    /// more than 1000 retries (`budget.reserve`), or whose window is outside
    /// 100 ms–1 h (`budget.window`).
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
        if let Some(mut statuses) = self.statuses {
            if let Some(status) =
                statuses.iter().find(|s| !s.is_client_error() && !s.is_server_error())
            {
                return Err(ConfigError::new(
                    "retryable_statuses",
                    format!("{} is not an error status (400 to 599)", status.as_u16()),
                ));
            }
            statuses.sort_unstable();
            statuses.dedup();
            config.retryable_statuses = statuses;
        }
        if let Some(header) = self.header {
            config.idempotency_header = header?;
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
        if config.attempt_timeout == Some(Duration::ZERO) {
            return Err(ConfigError::new(
                "attempt_timeout",
                "must be greater than zero; use `without_attempt_timeout` for none".to_owned(),
            ));
        }
        if config.request_body_buffering == Some(0) {
            return Err(ConfigError::new(
                "request_body_buffering",
                "must be greater than zero; use `without_request_body_buffering` for none"
                    .to_owned(),
            ));
        }
        if config.response_body_buffering == Some(0) {
            return Err(ConfigError::new(
                "response_body_buffering",
                "must be greater than zero; use `without_response_body_buffering` for none"
                    .to_owned(),
            ));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_settings_name_their_field() {
        let cases: Vec<(RetryConfigBuilder, &str)> = vec![
            (
                RetryConfig::builder()
                    .with_initial_backoff(Duration::from_secs(2))
                    .with_max_backoff(Duration::from_secs(1)),
                "initial_backoff",
            ),
            (
                RetryConfig::builder()
                    .with_retryable_statuses([StatusCode::SERVICE_UNAVAILABLE, StatusCode::OK]),
                "retryable_statuses",
            ),
            (
                RetryConfig::builder().with_retryable_statuses([StatusCode::CONTINUE]),
                "retryable_statuses",
            ),
            (RetryConfig::builder().with_idempotency_header("bad header"), "idempotency_header"),
            (RetryConfig::builder().with_idempotency_header(""), "idempotency_header"),
            (RetryConfig::builder().with_deadline(Duration::ZERO), "deadline"),
            (RetryConfig::builder().with_attempt_timeout(Duration::ZERO), "attempt_timeout"),
            (RetryConfig::builder().with_request_body_buffering(0), "request_body_buffering"),
            (RetryConfig::builder().with_response_body_buffering(0), "response_body_buffering"),
            (
                RetryConfig::builder().with_budget(RetryBudget::default().with_ratio(2.0)),
                "budget.ratio",
            ),
            (
                RetryConfig::builder()
                    .with_budget(RetryBudget::default().with_window(Duration::ZERO)),
                "budget.window",
            ),
            (
                RetryConfig::builder().with_budget(RetryBudget::default().with_reserve(1001)),
                "budget.reserve",
            ),
        ];
        for (builder, field) in cases {
            let error = builder.build().expect_err(field);
            assert_eq!(error.field(), field);
            assert!(error.to_string().contains(field), "{error}");
            // The name is one the user typed: a setter's, without `with_`.
            let (source, setter) = match field.strip_prefix("budget.") {
                Some(budget) => (include_str!("budget/mod.rs"), budget),
                None => (include_str!("builder.rs"), field),
            };
            let declared = |after: char| source.contains(&format!("pub fn with_{setter}{after}"));
            assert!(declared('(') || declared('<'), "`{field}`: no `with_{setter}` setter");
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
            .with_retryable_statuses([500, 503, 503, 429].map(|c| StatusCode::from_u16(c).unwrap()))
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
        let timed =
            again.to_builder().with_attempt_timeout(Duration::from_secs(2)).build().unwrap();
        assert_eq!(timed.attempt_timeout(), Some(Duration::from_secs(2)));
        assert_eq!(
            timed.to_builder().without_attempt_timeout().build().unwrap().attempt_timeout(),
            None
        );
        let buffering = timed.to_builder().with_request_body_buffering(1).build().unwrap();
        assert_eq!(buffering.to_builder().build().unwrap().request_body_buffering(), Some(1));
        let off = buffering.to_builder().without_request_body_buffering().build().unwrap();
        assert_eq!(off.request_body_buffering(), None);
        let reading = off.to_builder().with_response_body_buffering(1).build().unwrap();
        assert_eq!(reading.to_builder().build().unwrap().response_body_buffering(), Some(1));
        let off = reading.to_builder().without_response_body_buffering().build().unwrap();
        assert_eq!(off.response_body_buffering(), None);
    }
}
