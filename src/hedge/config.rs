//! The settings of [`HedgeMiddleware`](crate::hedge::HedgeMiddleware).

use std::fmt;
use std::time::Duration;

use http::HeaderName;

use crate::budget::RetryBudget;
use crate::config::{default_idempotency_header, idempotency_header};
use crate::error::ConfigError;

/// When a hedge is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum HedgeDelay {
    /// After this long without an answer.
    Fixed(Duration),
    /// After the `quantile` of the host's recent latencies: the last 128
    /// final answers to requests it could hedge, each measured from the
    /// call's start (for a call a hedge won, a lower bound of what the first
    /// copy would have taken). `fallback` until the host has 20 of them.
    Quantile {
        /// From 0 (exclusive) to 1.
        quantile: f64,
        /// The delay while too few latencies are known.
        fallback: Duration,
    },
}

/// Settings of [`HedgeMiddleware`](crate::hedge::HedgeMiddleware), made with
/// [`HedgeConfig::builder`].
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | delay | p95 of the host's last 128 latencies | "The Tail at Scale": hedging after the 95th percentile costs about 5% more requests and cuts the tail that the slowest 5% make |
/// | fallback delay | 100 ms | used until a host has 20 latencies on record |
/// | `max_copies` | 2 | the first copy and one hedge: a third copy rarely helps once the second has gone out |
/// | `budget` | [`RetryBudget::default()`] | each hedge is paid for by final answers, a tenth of one each: hedges stay near 10% of the traffic a host answers, and stop when it stops answering |
/// | `idempotency_header` | `Idempotency-Key` | the retry middleware's default, so that both take the same requests for safe to repeat |
///
/// A request is hedged only if it is safe to repeat, by the retry
/// middleware's rule: an idempotent method, a non-blank value of the
/// idempotency header, or [`SafeToRetry`](crate::SafeToRetry).
/// Statuses 429, 502, 503 and 504 (the retry middleware's default set) are
/// answers that stop further hedges.
#[derive(Debug, Clone, PartialEq)]
pub struct HedgeConfig {
    pub(crate) delay: HedgeDelay,
    pub(crate) max_copies: u32,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) idempotency_header: HeaderName,
}

impl Default for HedgeConfig {
    fn default() -> Self {
        Self {
            delay: HedgeDelay::Quantile { quantile: 0.95, fallback: Duration::from_millis(100) },
            max_copies: 2,
            budget: Some(RetryBudget::default()),
            idempotency_header: default_idempotency_header(),
        }
    }
}

impl HedgeConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> HedgeConfigBuilder {
        HedgeConfigBuilder { config: Self::default(), header: None }
    }

    /// When a hedge is sent.
    pub fn delay(&self) -> HedgeDelay {
        self.delay
    }

    /// Copies sent at most, counting the first.
    pub fn max_copies(&self) -> u32 {
        self.max_copies
    }

    /// The budget hedges are paid from; `None` when unbudgeted.
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.budget.as_ref()
    }

    /// The header whose presence makes a request safe to repeat.
    pub fn idempotency_header(&self) -> &HeaderName {
        &self.idempotency_header
    }
}

/// Builds a [`HedgeConfig`], checking it in [`build`](Self::build).
///
/// ```
/// use std::time::Duration;
/// use reqwest_safe_retry::hedge::HedgeConfig;
///
/// let config = HedgeConfig::builder()
///     .with_latency_quantile(0.99)
///     .with_fallback_delay(Duration::from_millis(50))
///     .with_max_copies(3)
///     .build()?;
/// # let _ = config;
/// # Ok::<(), reqwest_safe_retry::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct HedgeConfigBuilder {
    config: HedgeConfig,
    /// The header name, or why it is not one.
    header: Option<Result<HeaderName, ConfigError>>,
}

impl HedgeConfigBuilder {
    /// Hedges after a fixed delay (more than zero, at most an hour).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.config.delay = HedgeDelay::Fixed(delay);
        self
    }

    /// Hedges after the `quantile` (more than 0, at most 1) of the host's
    /// recent latencies, keeping the fallback delay already set (100 ms by
    /// default).
    pub fn with_latency_quantile(mut self, quantile: f64) -> Self {
        let fallback = match self.config.delay {
            HedgeDelay::Quantile { fallback, .. } => fallback,
            HedgeDelay::Fixed(_) => Duration::from_millis(100),
        };
        self.config.delay = HedgeDelay::Quantile { quantile, fallback };
        self
    }

    /// The delay used while a host has too few latencies on record (more
    /// than zero, at most an hour). Switches to a quantile delay (p95) if a
    /// fixed one was set.
    pub fn with_fallback_delay(mut self, fallback: Duration) -> Self {
        let quantile = match self.config.delay {
            HedgeDelay::Quantile { quantile, .. } => quantile,
            HedgeDelay::Fixed(_) => 0.95,
        };
        self.config.delay = HedgeDelay::Quantile { quantile, fallback };
        self
    }

    /// Copies sent at most, counting the first (1 to 10; 1 turns hedging
    /// off).
    pub fn with_max_copies(mut self, copies: u32) -> Self {
        self.config.max_copies = copies;
        self
    }

    /// Pays for hedges from `budget`, one budget per host by default.
    /// `None` sends hedges without a budget: only the delay and
    /// `max_copies` bound them, and an outage can then multiply the load by
    /// `max_copies`.
    pub fn with_budget(mut self, budget: impl Into<Option<RetryBudget>>) -> Self {
        self.config.budget = budget.into();
        self
    }

    /// The header whose presence (with a non-blank value) makes a request
    /// safe to repeat, and so hedged. When both middlewares are used, give
    /// it the header given to the retry configuration's
    /// [`with_idempotency_header`](crate::RetryConfigBuilder::with_idempotency_header).
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

    /// The configuration, or the first invalid setting.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the setting out of range: `delay`,
    /// `latency_quantile`, `fallback_delay`, `max_copies`,
    /// `idempotency_header`, or `budget.*`.
    pub fn build(self) -> Result<HedgeConfig, ConfigError> {
        let mut config = self.config;
        let check_delay = |field, delay: Duration| {
            if delay.is_zero() || delay > Duration::from_secs(3600) {
                return Err(ConfigError::new(
                    field,
                    format!("{delay:?} is not more than zero and at most an hour"),
                ));
            }
            Ok(())
        };
        match config.delay {
            HedgeDelay::Fixed(delay) => check_delay("delay", delay)?,
            HedgeDelay::Quantile { quantile, fallback } => {
                if !(quantile > 0.0 && quantile <= 1.0) {
                    return Err(ConfigError::new(
                        "latency_quantile",
                        format!("{quantile} is not more than 0 and at most 1"),
                    ));
                }
                check_delay("fallback_delay", fallback)?;
            }
        }
        if !(1..=10).contains(&config.max_copies) {
            return Err(ConfigError::new(
                "max_copies",
                format!("{} is not from 1 to 10", config.max_copies),
            ));
        }
        if let Some(header) = self.header {
            config.idempotency_header = header?;
        }
        if let Some(budget) = &config.budget {
            budget.validate()?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let config = HedgeConfig::builder().build().unwrap();
        assert_eq!(
            config.delay(),
            HedgeDelay::Quantile { quantile: 0.95, fallback: Duration::from_millis(100) }
        );
        assert_eq!(config.max_copies(), 2);
        assert_eq!(config.budget(), Some(&RetryBudget::default()));
        assert_eq!(config.idempotency_header(), "idempotency-key");
    }

    #[test]
    fn invalid_settings_name_their_field() {
        let ms = Duration::from_millis(1);
        for (builder, field) in [
            (HedgeConfig::builder().with_delay(Duration::ZERO), "delay"),
            (HedgeConfig::builder().with_delay(Duration::from_secs(3601)), "delay"),
            (HedgeConfig::builder().with_latency_quantile(0.0), "latency_quantile"),
            (HedgeConfig::builder().with_latency_quantile(1.5), "latency_quantile"),
            (HedgeConfig::builder().with_latency_quantile(f64::NAN), "latency_quantile"),
            (HedgeConfig::builder().with_fallback_delay(Duration::ZERO), "fallback_delay"),
            (HedgeConfig::builder().with_max_copies(0), "max_copies"),
            (HedgeConfig::builder().with_max_copies(11), "max_copies"),
            (HedgeConfig::builder().with_idempotency_header("bad header"), "idempotency_header"),
            (
                HedgeConfig::builder().with_budget(RetryBudget::default().with_ratio(2.0)),
                "budget.ratio",
            ),
        ] {
            assert_eq!(builder.build().unwrap_err().field(), field);
        }
        let fixed = HedgeConfig::builder().with_delay(5 * ms).build().unwrap();
        assert_eq!(fixed.delay(), HedgeDelay::Fixed(5 * ms));
        let quantile = HedgeConfig::builder()
            .with_delay(5 * ms)
            .with_latency_quantile(0.5)
            .with_fallback_delay(7 * ms)
            .build()
            .unwrap();
        assert_eq!(quantile.delay(), HedgeDelay::Quantile { quantile: 0.5, fallback: 7 * ms });
        let unbudgeted = HedgeConfig::builder().with_max_copies(1).with_budget(None).build();
        assert_eq!(unbudgeted.unwrap().budget(), None);
        let budget = RetryBudget::default().with_reserve(3);
        let budgeted = HedgeConfig::builder().with_budget(budget).build().unwrap();
        assert_eq!(budgeted.budget(), Some(&budget));
        // The bounds themselves are accepted.
        let hour = Duration::from_secs(3600);
        assert_eq!(
            HedgeConfig::builder().with_delay(hour).build().unwrap().delay(),
            HedgeDelay::Fixed(hour)
        );
        assert!(
            HedgeConfig::builder()
                .with_latency_quantile(1.0)
                .with_fallback_delay(hour)
                .build()
                .is_ok()
        );
        assert_eq!(HedgeConfig::builder().with_max_copies(10).build().unwrap().max_copies(), 10);
    }
}
