//! The live counts behind a [`RetryBudget`]: one account per host (or one
//! for all), each a ring of time slots.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Instant;

use reqwest::Url;
use rustc_hash::FxBuildHasher;

use super::{BudgetScope, RetryBudget};

/// How many slots the window is cut into.
const SLOTS: u32 = 10;
/// Thousandths of a retry: the cost of one retry.
const RETRY_COST: u64 = 1000;
/// Hosts tracked at once before idle ones are forgotten.
const MAX_HOSTS: usize = 1024;

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
#[derive(Debug, Default)]
pub(crate) struct Account {
    slots: [Slot; SLOTS as usize],
    /// Held to start a new slot and to take a retry. Recording a request in
    /// the current slot, which every request does, needs only an atomic add.
    turn: Mutex<()>,
}

#[derive(Debug, Default)]
struct Slot {
    /// Which slot of the timeline this is; stale when older than the window.
    number: AtomicU64,
    deposited: AtomicU64,
    withdrawn: AtomicU64,
}

impl Budget {
    pub(crate) fn new(config: &RetryBudget) -> Self {
        let window_ms = config.window.as_millis() as u64;
        let scope = match config.scope {
            BudgetScope::Global => Scope::Global(Arc::new(Account::default())),
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
                hosts.entry(key).or_insert_with(|| Arc::new(Account::default())).clone()
            }
        }
    }

    /// Records one request.
    pub(crate) fn deposit(&self, account: &Account, now: Instant) {
        let slot = account.current(self.slot_number(now));
        slot.deposited.fetch_add(self.deposit, Ordering::Relaxed);
    }

    /// Takes one retry from the account, if the budget allows it.
    pub(crate) fn try_withdraw(&self, account: &Account, now: Instant) -> bool {
        let number = self.slot_number(now);
        let _turn = account.lock();
        let (deposited, withdrawn) = account.totals(number);
        if withdrawn + RETRY_COST > deposited.saturating_add(self.floor) {
            return false;
        }
        account.current_locked(number).withdrawn.fetch_add(RETRY_COST, Ordering::Relaxed);
        true
    }

    /// Retries the account could make now, for tests and diagnostics.
    #[cfg(test)]
    fn available(&self, account: &Account, now: Instant) -> u64 {
        let (deposited, withdrawn) = account.totals(self.slot_number(now));
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
    fn lock(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data, only turns; a panic elsewhere leaves it usable.
        self.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The slot for timeline slot `number`, started afresh if it held an
    /// older one.
    fn current(&self, number: u64) -> &Slot {
        let slot = self.slot(number);
        if slot.number.load(Ordering::Acquire) == number {
            return slot;
        }
        let _turn = self.lock();
        self.current_locked(number)
    }

    /// As [`current`](Self::current), with the turn already held.
    fn current_locked(&self, number: u64) -> &Slot {
        let slot = self.slot(number);
        // Only a slot from an older turn of the ring is cleared: with a clock
        // that stepped back, a newer slot keeps its counts.
        if slot.number.load(Ordering::Acquire) < number {
            slot.deposited.store(0, Ordering::Relaxed);
            slot.withdrawn.store(0, Ordering::Relaxed);
            slot.number.store(number, Ordering::Release);
        }
        slot
    }

    fn slot(&self, number: u64) -> &Slot {
        &self.slots[(number % u64::from(SLOTS)) as usize]
    }

    /// Deposits and withdrawals in the window ending at slot `now`.
    fn totals(&self, now: u64) -> (u64, u64) {
        self.slots
            .iter()
            .filter(|slot| {
                let number = slot.number.load(Ordering::Acquire);
                number <= now && now - number < u64::from(SLOTS)
            })
            .fold((0, 0), |(d, w), slot| {
                (
                    d + slot.deposited.load(Ordering::Relaxed),
                    w + slot.withdrawn.load(Ordering::Relaxed),
                )
            })
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
    use std::time::Duration;

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
}
