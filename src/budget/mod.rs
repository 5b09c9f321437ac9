//! The retry budget: retries are earned by answers, so the extra load of an
//! outage stays bounded whatever the number of clients. The design and its
//! reasons are documented on [`RetryBudget`], where users read them.

use std::time::Duration;

use crate::error::ConfigError;

mod account;
mod hosts;

pub(crate) use account::{Account, Paid};
pub(crate) use hosts::Budget;

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
/// # Why a budget and not only a retry count?
///
/// A retry count bounds what one request can cost; it does nothing for what a
/// fleet costs. With 3 retries, a total outage turns every request into four,
/// and the server that is trying to recover receives four times its normal
/// load — the retries themselves keep it down. A budget bounds the sum.
///
/// # Why earned, and not granted?
///
/// Finagle's `RetryBudget` and tower's `TpsBudget` let retries add a share of
/// the requests sent, plus a floor of retries per second so that a quiet
/// client can still retry. The floor is granted to every process afresh, so a
/// fleet of many small processes adds one floor each: a hundred processes
/// sending five requests a second triple the load of a total outage. gRPC's
/// retry throttling and the AWS SDKs' retry quota bound the total instead with
/// a token bucket, but one that starts full and refills slowly, which lets a
/// fleet of fresh (or restarting) processes spend their buckets together.
///
/// This budget grants nothing for the passing of time. A retry must be paid
/// for by answers the host gave:
///
/// - Every *final* answer (one that is not retried: a 200, a 404, ...) earns
///   `ratio` of a retry (0.1: a tenth). Earnings stay for one `window` (10 s,
///   kept as ten slots), so a host that stops answering stops paying for
///   retries within a window.
/// - A small `reserve` (1 retry) stands in for the floor: it is where a quiet
///   client finds the retry for its occasional failure. It starts full, is
///   drawn on only when the window's earnings are spent, and is refilled by
///   final answers, at the same `ratio`, never by time. The price: a fresh
///   process whose first request meets two failures in a row retries once,
///   not twice. A short-lived client that cares more about that than about
///   the fleet can raise the reserve.
///
/// A retry is allowed while the window's earnings not yet spent, plus the
/// reserve, cover one retry. So in any total outage of length `T` that follows
/// healthy traffic at `r` requests a second, one process sends at most
/// `ratio × r × window + reserve` retries, and the amplification is at most
/// `1 + ratio × window / T + reserve / (r × T)`; it tends to 1 as the outage
/// goes on, and it does not grow with the number of processes, because no
/// process is given anything it did not earn. Nothing expires into new
/// retries, so the load of a long outage has no periodic bursts.
///
/// # No coordination
///
/// Each process keeps its own budget: no network call sits on the failure
/// path, and a fleet needs no shared store. Bounding each process by what its
/// own traffic earned is what bounds the fleet: the `herd` example measures
/// processes from 1 to 1000 and rates from 0.1 to 1000 requests a second.
///
/// Time is read only through the middleware's [`Clock`](crate::Clock), and a
/// clock that steps back cannot move an account's time back: each account
/// keeps the newest slot it has seen. Counts are kept in thousandths of a
/// retry, so no floating point is involved after construction. Recording an
/// answer, which every request does, is an atomic addition; only taking a
/// retry and starting a new slot take a lock.
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | `ratio` | 0.1 | each final answer earns a tenth of a retry: retries stay near a tenth of the traffic a host answers, Google SRE's usual figure |
/// | `reserve` | 1 | a quiet client can still retry its occasional failure, and a fleet of them adds one retry per process at most |
/// | `window` | 10 s | earnings outlive a burst of failures, and lapse soon after a host stops answering |
/// | `scope` | [`BudgetScope::PerHost`] | one failing dependency must not silence retries to others |
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudget {
    ratio: f64,
    /// `None`: sized to one call's retries, with [`SPARE`] more.
    reserve: Option<u32>,
    window: Duration,
    scope: BudgetScope,
}

/// Retries the default reserve holds beyond one call's: a quiet client can
/// ride out one call that exhausts its retries and still retry the next
/// blip before its answers have refilled anything.
const SPARE: u32 = 2;

impl Default for RetryBudget {
    fn default() -> Self {
        Self {
            ratio: 0.1,
            reserve: None,
            window: Duration::from_secs(10),
            scope: BudgetScope::PerHost,
        }
    }
}

/// The largest reserve accepted: more would be a floor again.
const MAX_RESERVE: u32 = 1000;

impl RetryBudget {
    /// The share of a retry each final answer earns (from 0 to 1).
    pub fn with_ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// Retries a host's account holds on credit (0 to 1000): full at the
    /// start, drawn on when the window's earnings are spent, and earned back
    /// by final answers only. `0` means every retry must be earned first.
    /// By default the reserve follows the retry count: `max_retries + 2`.
    pub fn with_reserve(mut self, retries: u32) -> Self {
        self.reserve = Some(retries);
        self
    }

    /// How long earnings and retries are counted (100 ms to 1 hour).
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Per host or global.
    pub fn with_scope(mut self, scope: BudgetScope) -> Self {
        self.scope = scope;
        self
    }

    /// The share of a retry each final answer earns.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Retries held on credit, if set; `None` for the default, which
    /// follows the retry count (see [`reserve_for`](Self::reserve_for)).
    pub fn reserve(&self) -> Option<u32> {
        self.reserve
    }

    /// The reserve a budget holds for calls that may each retry
    /// `retries_per_call` times: the one set, or by default enough for one
    /// call's retries and two more, at most 1000.
    pub fn reserve_for(&self, retries_per_call: u32) -> u32 {
        self.reserve.unwrap_or_else(|| retries_per_call.saturating_add(SPARE).min(MAX_RESERVE))
    }

    /// How long earnings and retries are counted.
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
        if let Some(reserve) = self.reserve.filter(|reserve| *reserve > MAX_RESERVE) {
            return Err(ConfigError::new(
                "budget.reserve",
                format!("{reserve} is more than {MAX_RESERVE} retries"),
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
            (RetryBudget::default().with_reserve(1001), "budget.reserve"),
            (RetryBudget::default().with_window(Duration::ZERO), "budget.window"),
            (RetryBudget::default().with_window(Duration::from_secs(7200)), "budget.window"),
        ] {
            assert_eq!(config.validate().unwrap_err().field(), field);
        }
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let budget = RetryBudget::default();
        assert_eq!(budget.ratio(), 0.1);
        assert_eq!(budget.reserve(), None);
        assert_eq!(budget.reserve_for(3), 5, "one call's retries and two more");
        assert_eq!(budget.reserve_for(u32::MAX), 1000);
        assert_eq!(budget.with_reserve(0).reserve_for(3), 0);
        assert_eq!(budget.window(), Duration::from_secs(10));
        assert_eq!(budget.scope(), BudgetScope::PerHost);
        let edges = RetryBudget::default().with_ratio(0.0).with_reserve(0).with_reserve(1000);
        assert!(edges.validate().is_ok());
    }
}
