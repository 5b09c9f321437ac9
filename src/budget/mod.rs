//! The retry budget: retries as a bounded share of recent traffic.
//!
//! # Why a budget and not only a retry count?
//!
//! A retry count bounds what one request can cost; it does nothing for what a
//! fleet costs. With 3 retries, a total outage turns every request into four,
//! and the server that is trying to recover receives four times its normal
//! load — the retries themselves keep it down. A budget bounds the sum: retries
//! may add at most a fixed share of the requests recently sent, so in an outage
//! the extra load is that share (10% by default), while the occasional failure
//! in healthy traffic is still retried. This is the design of Finagle's and
//! tower's `RetryBudget`, gRPC's retry throttling and the AWS SDKs' retry quota.
//!
//! # The algorithm
//!
//! A sliding window (10 s by default, kept as ten slots) counts, per host,
//! the requests sent (deposits) and the retries made (withdrawals). A retry is
//! allowed while
//!
//! ```text
//! retries in window + 1  ≤  ratio × requests in window  +  min_per_sec × window
//! ```
//!
//! The second term is a floor so that a client sending one request a minute can
//! still retry it. Slots older than the window are forgotten, so a spent budget
//! refills as traffic continues. Time is read only through the middleware's
//! [`Clock`](crate::Clock).
//!
//! Counts are kept in thousandths of a retry, so a ratio of 0.1 adds exactly 100
//! per request and no floating point is involved after construction. Recording
//! a request, which every request does, is an atomic addition; only starting a
//! new slot and taking a retry, which are rare, take a lock.

use std::time::Duration;

use crate::error::ConfigError;

mod window;

pub(crate) use window::{Account, Budget};

/// Whether one budget is shared by every host or each host has its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BudgetScope {
    /// One budget per scheme, host and port: a failing host does not stop
    /// retries to a healthy one. The default.
    #[default]
    PerHost,
    /// One budget for everything the middleware sends.
    Global,
}

/// Settings of the retry budget.
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | `ratio` | 0.1 | retries add at most 10% to the load in an outage, Google SRE's usual figure |
/// | `min_per_sec` | 10 | a quiet client can still retry its occasional failure |
/// | `window` | 10 s | long enough to smooth bursts, short enough to refill soon after recovery |
/// | `scope` | [`BudgetScope::PerHost`] | one failing dependency must not silence retries to others |
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudget {
    ratio: f64,
    min_per_sec: u32,
    window: Duration,
    scope: BudgetScope,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self {
            ratio: 0.1,
            min_per_sec: 10,
            window: Duration::from_secs(10),
            scope: BudgetScope::PerHost,
        }
    }
}

impl RetryBudget {
    /// Retries may add at most this share of the requests in the window
    /// (from 0 to 1).
    pub fn with_ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// Retries allowed per second whatever the traffic.
    pub fn with_min_per_sec(mut self, min_per_sec: u32) -> Self {
        self.min_per_sec = min_per_sec;
        self
    }

    /// How far back requests and retries are counted (100 ms to 1 hour).
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Per host or global.
    pub fn with_scope(mut self, scope: BudgetScope) -> Self {
        self.scope = scope;
        self
    }

    /// The share of traffic retries may add.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Retries allowed per second whatever the traffic.
    pub fn min_per_sec(&self) -> u32 {
        self.min_per_sec
    }

    /// How far back requests and retries are counted.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Per host or global.
    pub fn scope(&self) -> BudgetScope {
        self.scope
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.ratio) {
            return Err(ConfigError::new(
                "budget.ratio",
                format!("{} is not a share from 0 to 1", self.ratio),
            ));
        }
        let window = Duration::from_millis(100)..=Duration::from_secs(3600);
        if !window.contains(&self.window) {
            return Err(ConfigError::new(
                "budget.window",
                format!("{:?} is not from 100 ms to 1 hour", self.window),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_settings_are_rejected() {
        for (config, field) in [
            (RetryBudget::default().with_ratio(-0.1), "budget.ratio"),
            (RetryBudget::default().with_ratio(1.5), "budget.ratio"),
            (RetryBudget::default().with_ratio(f64::NAN), "budget.ratio"),
            (RetryBudget::default().with_window(Duration::ZERO), "budget.window"),
            (RetryBudget::default().with_window(Duration::from_secs(7200)), "budget.window"),
        ] {
            assert_eq!(config.validate().unwrap_err().field(), field);
        }
    }
}
