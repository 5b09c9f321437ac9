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
//! per request and no floating point is involved after construction.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use reqwest::Url;
use rustc_hash::FxBuildHasher;

use crate::config::ConfigError;

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

/// How many slots the window is cut into.
const SLOTS: u32 = 10;
/// Thousandths of a retry: the cost of one retry.
const RETRY_COST: u64 = 1000;
/// Hosts tracked at once before idle ones are forgotten.
const MAX_HOSTS: usize = 1024;

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

/// The live budget shared by every clone of one middleware.
pub(crate) struct Budget {
    deposit: u64,
    floor: u64,
    /// Width of a slot in milliseconds: at least 10, as the window is at
    /// least 100 ms.
    slot_ms: u64,
    origin: OnceLock<Instant>,
    scope: Scope,
}

enum Scope {
    Global(Arc<Account>),
    /// Keyed by a hash of scheme, host and port. A collision only makes two
    /// hosts share a budget, so a fast hash is enough.
    PerHost {
        hasher: FxBuildHasher,
        hosts: RwLock<HashMap<u64, Arc<Account>, FxBuildHasher>>,
    },
}

/// One budget's counts.
#[derive(Debug)]
pub(crate) struct Account {
    window: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    slots: [Slot; SLOTS as usize],
}

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    /// Which slot of the timeline this is; stale when older than the window.
    number: u64,
    deposited: u64,
    withdrawn: u64,
}

impl Budget {
    pub(crate) fn new(config: &RetryBudget) -> Self {
        let window_ms = config.window.as_millis() as u64;
        let scope = match config.scope {
            BudgetScope::Global => Scope::Global(Arc::new(Account::new())),
            BudgetScope::PerHost => {
                Scope::PerHost { hasher: FxBuildHasher, hosts: RwLock::new(HashMap::default()) }
            }
        };
        Self {
            deposit: (config.ratio * RETRY_COST as f64).round() as u64,
            // min_per_sec × window, in thousandths: at most about 1.5e16.
            floor: u64::from(config.min_per_sec) * window_ms,
            slot_ms: window_ms / u64::from(SLOTS),
            origin: OnceLock::new(),
            scope,
        }
    }

    /// The account that `url` draws on.
    pub(crate) fn account(&self, url: &Url) -> Arc<Account> {
        match &self.scope {
            Scope::Global(account) => account.clone(),
            Scope::PerHost { hasher, hosts } => {
                let key = host_key(hasher, url);
                if let Some(account) = read(hosts).get(&key) {
                    return account.clone();
                }
                let mut hosts = hosts.write().unwrap_or_else(|poisoned| poisoned.into_inner());
                if hosts.len() >= MAX_HOSTS && !hosts.contains_key(&key) {
                    // Forget hosts that were not used by anyone else lately.
                    hosts.retain(|_, account| Arc::strong_count(account) > 1);
                    if hosts.len() >= MAX_HOSTS {
                        hosts.clear();
                    }
                }
                hosts.entry(key).or_insert_with(|| Arc::new(Account::new())).clone()
            }
        }
    }

    /// Records one request.
    pub(crate) fn deposit(&self, account: &Account, now: Instant) {
        let slot = self.slot_number(now);
        account.lock().slot(slot).deposited += self.deposit;
    }

    /// Takes one retry from the account, if the budget allows it.
    pub(crate) fn try_withdraw(&self, account: &Account, now: Instant) -> bool {
        let slot = self.slot_number(now);
        let mut window = account.lock();
        let (deposited, withdrawn) = window.totals(slot);
        if withdrawn + RETRY_COST > deposited.saturating_add(self.floor) {
            return false;
        }
        window.slot(slot).withdrawn += RETRY_COST;
        true
    }

    /// Retries the account could make now, for tests and diagnostics.
    #[cfg(test)]
    fn available(&self, account: &Account, now: Instant) -> u64 {
        let (deposited, withdrawn) = account.lock().totals(self.slot_number(now));
        deposited.saturating_add(self.floor).saturating_sub(withdrawn) / RETRY_COST
    }

    fn slot_number(&self, now: Instant) -> u64 {
        let origin = *self.origin.get_or_init(|| now);
        let elapsed = now.saturating_duration_since(origin);
        let ms = elapsed.as_secs().saturating_mul(1000) + u64::from(elapsed.subsec_millis());
        ms / self.slot_ms
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn host_key(hasher: &FxBuildHasher, url: &Url) -> u64 {
    let mut state = hasher.build_hasher();
    url.scheme().hash(&mut state);
    url.host_str().hash(&mut state);
    url.port_or_known_default().hash(&mut state);
    std::hash::Hasher::finish(&state)
}

impl Account {
    fn new() -> Self {
        Self { window: Mutex::new(Window::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        // Every update is a plain addition; a panic elsewhere leaves valid counts.
        self.window.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Window {
    /// The slot for timeline slot `number`, cleared if it held an older one.
    fn slot(&mut self, number: u64) -> &mut Slot {
        let slot = &mut self.slots[(number % u64::from(SLOTS)) as usize];
        if slot.number != number {
            *slot = Slot { number, deposited: 0, withdrawn: 0 };
        }
        slot
    }

    /// Deposits and withdrawals in the window ending at slot `now`.
    fn totals(&self, now: u64) -> (u64, u64) {
        self.slots
            .iter()
            .filter(|slot| slot.number <= now && now - slot.number < u64::from(SLOTS))
            .fold((0, 0), |(d, w), slot| (d + slot.deposited, w + slot.withdrawn))
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("deposit", &self.deposit)
            .field("floor", &self.floor)
            .field("slot_ms", &self.slot_ms)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn budget(ratio: f64, min_per_sec: u32, scope: BudgetScope) -> Budget {
        let config = RetryBudget::default()
            .with_ratio(ratio)
            .with_min_per_sec(min_per_sec)
            .with_scope(scope);
        config.validate().unwrap();
        Budget::new(&config)
    }

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn floor_alone_allows_min_per_sec_times_window() {
        let b = budget(0.1, 2, BudgetScope::PerHost);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/"));
        let allowed = (0..100).filter(|_| b.try_withdraw(&a, t0)).count();
        assert_eq!(allowed, 2 * 10);
    }

    #[test]
    fn deposits_add_the_ratio_of_traffic() {
        let b = budget(0.1, 0, BudgetScope::PerHost);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/"));
        assert!(!b.try_withdraw(&a, t0));
        for _ in 0..95 {
            b.deposit(&a, t0);
        }
        assert_eq!(b.available(&a, t0), 9);
        let allowed = (0..100).filter(|_| b.try_withdraw(&a, t0)).count();
        assert_eq!(allowed, 9);
    }

    #[test]
    fn window_expiry_refills_the_budget() {
        let b = budget(0.0, 1, BudgetScope::PerHost);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/"));
        assert_eq!((0..100).filter(|_| b.try_withdraw(&a, t0)).count(), 10);
        // Half a window later, the withdrawals still count.
        assert!(!b.try_withdraw(&a, t0 + 5 * SEC));
        // A full window later they have expired.
        assert_eq!(b.available(&a, t0 + 10 * SEC), 10);
        assert!(b.try_withdraw(&a, t0 + 10 * SEC));
    }

    #[test]
    fn deposits_expire_too() {
        let b = budget(1.0, 0, BudgetScope::Global);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/"));
        for _ in 0..5 {
            b.deposit(&a, t0);
        }
        assert_eq!(b.available(&a, t0 + 9 * SEC), 5);
        assert_eq!(b.available(&a, t0 + 10 * SEC), 0);
    }

    #[test]
    fn hosts_are_isolated() {
        let b = budget(0.0, 1, BudgetScope::PerHost);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/x"));
        while b.try_withdraw(&a, t0) {}
        let same = b.account(&url("http://a.test/other?q=1"));
        assert!(!b.try_withdraw(&same, t0));
        for other in ["http://b.test/", "https://a.test/", "http://a.test:8080/"] {
            let account = b.account(&url(other));
            assert!(b.try_withdraw(&account, t0), "{other}");
        }
    }

    #[test]
    fn global_scope_shares_one_account() {
        let b = budget(0.0, 1, BudgetScope::Global);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/"));
        while b.try_withdraw(&a, t0) {}
        assert!(!b.try_withdraw(&b.account(&url("http://b.test/")), t0));
    }

    #[test]
    fn host_table_stays_bounded() {
        let b = budget(0.1, 1, BudgetScope::PerHost);
        for n in 0..(MAX_HOSTS * 3) {
            drop(b.account(&url(&format!("http://h{n}.test/"))));
        }
        let Scope::PerHost { hosts, .. } = &b.scope else { unreachable!() };
        assert!(read(hosts).len() <= MAX_HOSTS);
    }

    #[test]
    fn concurrent_use_keeps_the_books_exact() {
        let b = Arc::new(budget(0.5, 0, BudgetScope::PerHost));
        let t0 = Instant::now();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let a = b.account(&url("http://a.test/"));
                    let mut granted = 0;
                    for _ in 0..1000 {
                        b.deposit(&a, t0);
                        granted += usize::from(b.try_withdraw(&a, t0));
                    }
                    granted
                })
            })
            .collect();
        let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        // 8000 requests at a ratio of 0.5 pay for 4000 retries: every one is
        // either granted or still available, none lost or granted twice.
        let a = b.account(&url("http://a.test/"));
        assert!(granted > 3000, "{granted}");
        assert_eq!(granted as u64 + b.available(&a, t0), 4000);
    }

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
