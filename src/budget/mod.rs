//! The retry budget: retries are earned by answers, so the extra load of an
//! outage stays bounded whatever the number of clients. The design and its
//! reasons are documented on [`RetryBudget`], where users read them.

use std::time::Duration;

use crate::error::ConfigError;

mod account;
mod lease;
mod ledger;

pub(crate) use lease::Lease;
#[cfg(feature = "fleet")]
pub(crate) use ledger::{Fleetward, HostInUse};
pub(crate) use ledger::{HostHandle, Ledger, Passage, Turn};

/// Whether one budget is shared by every host or each host has its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BudgetScope {
    /// One budget per scheme, host and port: a failing host does not stop
    /// retries to a healthy one. The default.
    ///
    /// Accounts are kept for at most 1,024 hosts (about 570 KB, and 1 KB
    /// more for each busy host, whose threads count apart, as the retry
    /// budget's docs say: a cache line, 128 bytes on x86-64 and aarch64,
    /// for each of its stripes, eight at least), in 16 shards of 64
    /// picked by the host's hash, each with a lock of its own.
    /// Past a shard's bound, a host that only answers is not let in: its
    /// answers go uncounted until it first fails, so that a crowd of hosts
    /// called once each does not churn the table. At that failure it is let
    /// in, with a fresh reserve and no earnings (as a new host always
    /// starts), and the least recently used calm hosts of the shard (no
    /// retryable outcome within a window) are forgotten to make room; a
    /// host counts as used when it books a retry's worth of answers or
    /// fails. When
    /// all of a shard's are failing or in use, further hosts share one
    /// account whose reserve starts empty, as does a host let in soon
    /// after: a failing host never gets a fresh reserve by being new,
    /// or by being forgotten. A host calm for a window and forgotten starts
    /// afresh, as it would in a new process.
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
/// - Every *final* answer (one that is not retried: a 200, a 404, ...; not a
///   503 the middleware gave up on) earns `ratio` of a retry (0.1: a tenth).
///   It goes into the reserve while that is below its cap, otherwise into a
///   `window` (10 s, kept as ten slots), so a host that stops answering
///   stops paying for retries within a window. Each answer earns once. The
///   window's earnings are booked a retry's worth at a time (ten answers, at
///   the default ratio), in the slot of the answer that completes it, so
///   the time is read once a retry's worth of answers, not on every answer:
///   a booking can hold answers from before its slot (the window may then
///   hold one retry more than its own answers earned), and what is not yet
///   booked when a host stops answering, less than a retry, never is. A
///   host busy enough that a retry's worth of its answers is booked twice
///   within a tenth of the window (some ten answers within a second, at
///   the defaults) has each thread count its own answers and book its own
///   retry's worth, while its reserve is full, so that calls on different
///   threads write no shared memory: each thread's booking may then hold
///   older answers, one retry more per thread at most, and what the
///   threads hold unbooked when the host stops answering never is.
/// - A `reserve` stands in for the floor: it is where a quiet client finds
///   the retries for its occasional failure. By default it holds one call's
///   retries and two more (5 with the default 3 retries, see
///   [`reserve_for`](Self::reserve_for)), so the first call of a fresh
///   process rides out an isolated failure in full, and the next blip soon
///   after too. It starts full, is drawn on only when the window's earnings
///   are spent, and is refilled by final answers, never by time.
/// - A retry whose attempt ends in a final answer is given back: the retry
///   that worked costs nothing, only those that failed again are spent (the
///   AWS SDKs' quota does the same). So are retries paid for and never sent,
///   when the caller gives up during the wait or the deadline comes first.
/// - A retry that waits out its host's pause is not paid for. A `429` or
///   `503` whose `Retry-After` is within the cap and above zero (or a wait
///   a predicate hands on as the server's,
///   [`Verdict::server_asked`](crate::Verdict::server_asked)) pauses the
///   host for every call of the middleware, and when the pause ends one
///   request goes first (see [`RetryAfter::with_pause`](crate::RetryAfter::with_pause)):
///   the pause bounds these retries to one request a pause per host, so the
///   budget stays whole for the failures it is for. Never after an error.
/// - With the pause off, the first retry of a call refused with 429 and a
///   `Retry-After` within the cap and above zero, spread (the default), is
///   not paid for: the server asked for it and chose its time, so a burst
///   that a rate limiter turns away comes back, spread, without the budget
///   refusing it. So is a wait a predicate hands on as the server's on a
///   429, or on another answer it calls
///   [`AnyMethod`](crate::Retryability::AnyMethod) (a refusal before any
///   work): never for an error. A call refused again is paid for like any
///   other retry: the server is shedding load.
///
/// These free retries are outside the bound below: each is at a time the
/// server chose, and with the pause, one a pause per host.
///
/// A retry is allowed while the window's earnings not yet spent, plus the
/// reserve, cover one retry. So in any total outage of length `T` that follows
/// healthy traffic at `r` requests a second, one process sends at most
/// `ratio × r × window + reserve + 1 + s` retries (the one for a booking that
/// straddles the window; `s` is 0 for a host that was never busy as above,
/// and for one that was, at most the threads that counted its answers, and
/// never more than its stripes: the cores rounded up to a power of two,
/// from 8 to 64), and the amplification is at
/// most `1 + ratio × window / T + (reserve + 1 + s) / (r × T)`, and never
/// more than `1 + max_retries`. With the defaults that is 1.12 at one request a second
/// over a minute, 1.01 over ten minutes; it tends to 1 as the outage goes on,
/// and it does not grow with the number of processes, because no process is
/// given anything it did not earn. Nothing expires into new retries, so the
/// load of a long outage has no periodic bursts.
///
/// The price is paid by processes that send a few calls and exit: each has
/// its full reserve, so a fleet of command-line tools that each send one
/// call into an outage sends `1 + max_retries` requests per call, as with no
/// budget at all. Cap that with a smaller reserve (`with_reserve(1)`: at
/// most two requests per call) or fewer retries.
///
/// In partial failures the budget lets the retries that work through and
/// stops those that pile up: with independent failures of 5% or 20% of
/// attempts, 100% and 99.6% of calls still succeed, and at 50% the extra
/// load stays at an eighth (the table of the `herd` simulator in `sim/`, beside models of the
/// AWS, gRPC and Finagle budgets).
///
/// # No coordination
///
/// Each process keeps its own budget: no network call sits on the failure
/// path, and a fleet needs no shared store. Bounding each process by what its
/// own traffic earned is what bounds the fleet: the `herd` simulator measures
/// processes from 1 to 1000 and rates from 0.1 to 1000 requests a second.
///
/// Time is read only through the middleware's [`Clock`](crate::clock::Clock), and a
/// clock that steps back cannot move an account's time back: each account
/// keeps the newest slot it has seen. Counts are kept in thousandths of a
/// retry, so no floating point is involved after construction. Recording an
/// answer, which every request does, is an atomic addition, on a line of
/// the thread's own once the host is busy, and reads no clock; only taking
/// a retry and starting a new slot take a lock.
///
/// # Default
///
/// | setting | default | why |
/// |---|---|---|
/// | `ratio` | 0.1 | each final answer earns a tenth of a retry: failed retries stay near a tenth of the traffic a host answers, Google SRE's usual figure |
/// | `reserve` | `max_retries + 2` (5) | a fresh or quiet client gets every retry of an isolated failure, and the next one's; a fleet of them adds five retries per process at most |
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
    fn each_setting_reads_back_as_set() {
        let budget = RetryBudget::default()
            .with_ratio(0.25)
            .with_reserve(7)
            .with_window(Duration::from_secs(30))
            .with_scope(BudgetScope::Global);
        assert_eq!(budget.ratio(), 0.25);
        assert_eq!(budget.reserve(), Some(7));
        assert_eq!(budget.reserve_for(3), 7);
        assert_eq!(budget.window(), Duration::from_secs(30));
        assert_eq!(budget.scope(), BudgetScope::Global);
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
