//! Building a [`RetryConfig`]: `with_*` setters, checked once by `build`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, StatusCode};

use crate::backoff::Backoff;
use crate::body::BodyBuffering;
use crate::budget::RetryBudget;
use crate::config::{RetryConfig, idempotency_header};
use crate::error::ConfigError;
use crate::predicate::{Attempt, Predicate, Verdict};
use crate::retry_after::RetryAfter;

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

    /// How the wait before a retry grows: see [`Backoff`].
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.config.backoff = backoff;
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
    pub fn with_retry_429_any_method(mut self, any_method: bool) -> Self {
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

    /// How a wait the server asks for is honoured: see [`RetryAfter`].
    pub fn with_retry_after(mut self, retry_after: RetryAfter) -> Self {
        self.config.retry_after = retry_after;
        self
    }

    /// A total time for the whole call: every attempt, the one in flight
    /// included, and every wait. A wait that would leave no time for another
    /// attempt is not started, and the last outcome is returned instead; an
    /// attempt still in flight when it passes is cut short with a timeout
    /// error (see [`DeadlineExceeded`](crate::DeadlineExceeded)).
    /// A request's own timeout (`RequestBuilder::timeout`) is a deadline
    /// too, as in reqwest alone: the shorter of the two bounds the call.
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
    ///
    /// `None` removes the deadline (there is none by default).
    pub fn with_deadline(mut self, deadline: impl Into<Option<Duration>>) -> Self {
        self.config.deadline = deadline.into();
        self
    }

    /// The longest one attempt may take, from sending the request to the
    /// end of its response's body, as reqwest's request timeout does. An
    /// attempt that times out is retried like any timeout: when the request
    /// is safe to repeat. A timeout set on the request itself
    /// (`RequestBuilder::timeout`) bounds the whole call instead, as a
    /// deadline: each attempt gets the shorter of this and what remains of
    /// it.
    ///
    /// It is applied as the request's timeout, so the caller sees a
    /// `reqwest::Error` whose `is_timeout()` is true. reqwest lets a request's
    /// timeout replace the client's default (`ClientBuilder::timeout`), which
    /// the middleware cannot see: keep this no longer than the client's.
    ///
    /// `None` removes the attempt timeout (there is none by default).
    pub fn with_attempt_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.config.attempt_timeout = timeout.into();
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
    /// `None` turns the budget off: only the retry count bounds retries.
    pub fn with_budget(mut self, budget: impl Into<Option<RetryBudget>>) -> Self {
        self.config.budget = budget.into();
        self
    }

    /// Whether first attempts to a host that turns most of them away are
    /// throttled, in this middleware and its clones: on by default. Each
    /// host's calls are let through in the share its recent answers
    /// support, and the rest end at once with
    /// [`Throttled`](crate::rate_limit::Throttled), unsent. See
    /// [`rate_limit`](crate::rate_limit) for the rules;
    /// [`SkipThrottling`](crate::rate_limit::SkipThrottling) exempts one
    /// request.
    pub fn with_throttling(mut self, throttling: bool) -> Self {
        self.config.throttling = throttling;
        self
    }

    /// Mints an idempotency key (off by default) for every request that
    /// has none (under [`with_idempotency_header`](Self::with_idempotency_header)'s
    /// name) and is not already safe to repeat: a random UUID, one per
    /// call, sent on every attempt of it (and carried by reqwest on a 307
    /// or 308), so that such a request is retried as a keyed one is. A
    /// caller's key is never replaced. The call's
    /// [`RetryReport`](crate::report::RetryReport) holds the key, also when
    /// the call ends in an error (through a
    /// [`ReportSlot`](crate::report::ReportSlot)), for reconciling with the
    /// server. [`MintKey`](crate::MintKey) asks for one on a single request.
    ///
    /// Turn it on only for servers that deduplicate by the key (Stripe,
    /// OpenAI, Adyen, PayPal do): the middleware cannot tell whether a
    /// server does, and a server that ignores the key does the work of a
    /// repeated POST again. A keyed request is also one a
    /// [`HedgeMiddleware`](crate::hedge::HedgeMiddleware) may hedge: two
    /// copies with one key in flight at once, which some servers answer
    /// with a conflict (Stripe's 409) rather than the first's result. A key
    /// among the client's `default_headers` is added by reqwest below the
    /// middleware, which cannot see it: the minted one replaces it. reqwest
    /// carries the key on a 307 or 308, to another origin too.
    ///
    /// ```
    /// use reqwest_safe_retry::RetryConfig;
    ///
    /// let config = RetryConfig::builder().with_minted_keys(true).build()?;
    /// assert!(config.minted_keys());
    /// # Ok::<(), reqwest_safe_retry::ConfigError>(())
    /// ```
    pub fn with_minted_keys(mut self, mint: bool) -> Self {
        self.config.mint_keys = mint;
        self
    }

    /// Which bodies are read into memory so that the request can be sent
    /// again, or a response whose body breaks retried: see
    /// [`BodyBuffering`]. Off by default.
    pub fn with_body_buffering(mut self, buffering: BodyBuffering) -> Self {
        self.config.body_buffering = buffering;
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
        let predicate = Arc::new(move |attempt: &Attempt<'_>| predicate(attempt).map(Into::into));
        self.config.predicate = Some(Predicate(predicate));
        self
    }

    /// Checks the settings and returns the configuration.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid setting by the setter
    /// that set it (its [`field`](ConfigError::field): the setter's name
    /// without `with_`, then the value type's, such as `backoff.initial`):
    /// a backoff whose initial wait is greater than its maximum
    /// (`backoff.initial`), a retryable status outside 400–599, an
    /// idempotency header that is not a valid header name, a zero
    /// `deadline` or `attempt_timeout`, a zero body buffering limit
    /// (`body_buffering.request`, `body_buffering.response`), or a budget
    /// whose ratio is outside 0–1 (`budget.ratio`), whose reserve is more
    /// than 1000 retries (`budget.reserve`), or whose window is outside
    /// 100 ms–1 h (`budget.window`).
    pub fn build(self) -> Result<RetryConfig, ConfigError> {
        let mut config = self.config;
        config.backoff.validate()?;
        if let Some(statuses) = self.statuses {
            config.retryable_statuses = statuses_checked(statuses)?;
        }
        if let Some(header) = self.header {
            config.idempotency_header = header?;
        }
        if let Some(budget) = &config.budget {
            budget.validate()?;
        }
        for (limit, field) in
            [(config.deadline, "deadline"), (config.attempt_timeout, "attempt_timeout")]
        {
            if limit == Some(Duration::ZERO) {
                return Err(ConfigError::new(
                    field,
                    "must be greater than zero; `None` for none".to_owned(),
                ));
            }
        }
        config.body_buffering.validate()?;
        Ok(config)
    }
}

/// The statuses, each from 400 to 599, sorted and each once.
fn statuses_checked(mut statuses: Vec<StatusCode>) -> Result<Vec<StatusCode>, ConfigError> {
    if let Some(status) = statuses.iter().find(|s| !s.is_client_error() && !s.is_server_error()) {
        return Err(ConfigError::new(
            "retryable_statuses",
            format!("{} is not an error status (400 to 599)", status.as_u16()),
        ));
    }
    statuses.sort_unstable();
    statuses.dedup();
    Ok(statuses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Jitter;

    #[test]
    fn a_maximum_below_the_default_initial_wait_names_both() {
        let backoff = Backoff::default().with_max(Duration::from_millis(100));
        let error = RetryConfig::builder().with_backoff(backoff).build().unwrap_err();
        let message = error.to_string();
        for part in ["`backoff.initial` 500ms (500ms unless set)", "`backoff.max` (100ms)"] {
            assert!(message.contains(part), "{part} in {message}");
        }
    }

    #[test]
    fn invalid_settings_name_their_field() {
        let s = Duration::from_secs;
        let cases: Vec<(RetryConfigBuilder, &str)> = vec![
            (
                RetryConfig::builder()
                    .with_backoff(Backoff::default().with_initial(s(2)).with_max(s(1))),
                "backoff.initial",
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
            (
                RetryConfig::builder()
                    .with_body_buffering(BodyBuffering::default().with_request(0)),
                "body_buffering.request",
            ),
            (
                RetryConfig::builder()
                    .with_body_buffering(BodyBuffering::default().with_response(0)),
                "body_buffering.response",
            ),
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
            // The name is one the user typed: the builder's setter, without
            // `with_`, then the value type's.
            let (outer, inner) = field.split_once('.').unwrap_or((field, ""));
            let declared = |source: &str, setter: &str| {
                source.contains(&format!("pub fn with_{setter}("))
                    || source.contains(&format!("pub fn with_{setter}<"))
            };
            assert!(declared(include_str!("builder.rs"), outer), "`{field}`: no `with_{outer}`");
            let inner_source = match outer {
                "backoff" => include_str!("backoff/mod.rs"),
                "budget" => include_str!("budget/mod.rs"),
                "body_buffering" => include_str!("body/buffering.rs"),
                _ => "",
            };
            assert!(
                inner.is_empty() || declared(inner_source, inner),
                "`{field}`: no `with_{inner}`"
            );
        }
    }

    #[test]
    fn extremes_that_are_valid_build() {
        let config = RetryConfig::builder()
            .with_max_retries(u32::MAX)
            .with_backoff(Backoff::default().with_initial(Duration::ZERO).with_max(Duration::MAX))
            .with_retry_after(RetryAfter::default().with_cap(Duration::ZERO))
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
        let equal = Backoff::default().with_jitter(Jitter::Equal);
        let again = config.to_builder().with_backoff(equal).build().unwrap();
        assert_eq!(again.max_retries(), 7);
        assert_eq!(again.backoff().jitter(), Jitter::Equal);
        let timed =
            again.to_builder().with_attempt_timeout(Duration::from_secs(2)).build().unwrap();
        assert_eq!(timed.attempt_timeout(), Some(Duration::from_secs(2)));
        assert_eq!(
            timed.to_builder().with_attempt_timeout(None).build().unwrap().attempt_timeout(),
            None
        );
        let buffering = BodyBuffering::default().with_request(1).with_response(2);
        let buffered = timed.to_builder().with_body_buffering(buffering).build().unwrap();
        assert_eq!(buffered.to_builder().build().unwrap().body_buffering(), buffering);
        let off =
            buffered.to_builder().with_body_buffering(BodyBuffering::default()).build().unwrap();
        assert_eq!(off.body_buffering().request(), None);
        assert_eq!(off.to_builder().with_budget(None).build().unwrap().budget(), None);
    }
}
