//! The live budget: which account a request draws on, and the table of
//! hosts behind [`BudgetScope::PerHost`].

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard};
use std::time::Instant;

use reqwest::Url;
use rustc_hash::FxBuildHasher;

use super::account::{Account, RETRY_COST, SLOTS};
use super::{BudgetScope, RetryBudget};

/// Hosts tracked before the least recently used calm ones are forgotten.
const MAX_HOSTS: usize = 1024;

/// The live budget shared by every clone of one middleware.
pub(crate) struct Budget {
    /// Earned per final answer, in thousandths of a retry.
    earn: u64,
    /// The reserve's capacity, in thousandths.
    reserve: u64,
    /// Width of a slot in milliseconds: at least 10, as the window is at
    /// least 100 ms.
    slot_ms: u64,
    origin: OnceLock<Instant>,
    scope: Scope,
}

enum Scope {
    Global(Arc<Account>),
    PerHost { hasher: FxBuildHasher, table: RwLock<Table> },
}

/// Hosts by a hash of scheme, host and port; entries whose hashes collide
/// share a bucket and are told apart by their exact key, so two hosts never
/// share an account by accident.
#[derive(Default)]
struct Table {
    buckets: HashMap<u64, Vec<Host>, FxBuildHasher>,
    len: usize,
}

struct Host {
    scheme: Box<str>,
    host: Box<str>,
    port: Option<u16>,
    account: Arc<Account>,
}

impl Host {
    fn new(url: &Url, account: Arc<Account>) -> Self {
        Self {
            scheme: url.scheme().into(),
            host: url.host_str().unwrap_or_default().into(),
            port: url.port_or_known_default(),
            account,
        }
    }

    fn is(&self, url: &Url) -> bool {
        *self.scheme == *url.scheme()
            && *self.host == *url.host_str().unwrap_or_default()
            && self.port == url.port_or_known_default()
    }
}

impl Budget {
    pub(crate) fn new(config: &RetryBudget) -> Self {
        let window_ms = config.window.as_millis() as u64;
        let reserve = u64::from(config.reserve) * RETRY_COST;
        let scope = match config.scope {
            BudgetScope::Global => Scope::Global(Arc::new(Account::new(reserve))),
            BudgetScope::PerHost => {
                Scope::PerHost { hasher: FxBuildHasher, table: RwLock::new(Table::default()) }
            }
        };
        Self {
            earn: (config.ratio * RETRY_COST as f64).round() as u64,
            reserve,
            slot_ms: window_ms / SLOTS,
            origin: OnceLock::new(),
            scope,
        }
    }

    /// The account that a request to `url`, sent at `now`, draws on.
    pub(crate) fn account(&self, url: &Url, now: Instant) -> Arc<Account> {
        let seen = self.slot_number(now);
        let account = match &self.scope {
            Scope::Global(account) => account.clone(),
            Scope::PerHost { hasher, table } => {
                let key = host_key(hasher, url);
                let found = read(table).find(key, url);
                found.unwrap_or_else(|| self.insert(table, key, url, seen))
            }
        };
        account.touch(seen);
        account
    }

    fn insert(&self, table: &RwLock<Table>, key: u64, url: &Url, now: u64) -> Arc<Account> {
        let mut table = table.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(account) = table.find(key, url) {
            return account;
        }
        if table.len >= MAX_HOSTS {
            table.forget_calm(now);
        }
        let account = Arc::new(Account::new(self.reserve));
        table.buckets.entry(key).or_default().push(Host::new(url, account.clone()));
        table.len += 1;
        account
    }

    /// Records a final answer, which earns a share of a retry.
    pub(crate) fn earn(&self, account: &Account, now: Instant) {
        account.earn(self.slot_number(now), self.earn, self.reserve);
    }

    /// Records a retryable outcome: the host is failing now.
    pub(crate) fn note_failure(&self, account: &Account, now: Instant) {
        account.note_failure(self.slot_number(now));
    }

    /// Takes one retry from the account, if the budget allows it.
    pub(crate) fn try_spend(&self, account: &Account, now: Instant) -> bool {
        account.try_spend(self.slot_number(now))
    }

    fn slot_number(&self, now: Instant) -> u64 {
        let origin = *self.origin.get_or_init(|| now);
        let elapsed = now.saturating_duration_since(origin);
        let ms = elapsed.as_secs().saturating_mul(1000) + u64::from(elapsed.subsec_millis());
        ms / self.slot_ms
    }
}

impl Table {
    fn find(&self, key: u64, url: &Url) -> Option<Arc<Account>> {
        let bucket = self.buckets.get(&key)?;
        bucket.iter().find(|host| host.is(url)).map(|host| host.account.clone())
    }

    /// Forgets the least recently used hosts that are calm (no retryable
    /// outcome within a window) and not in use, an eighth of the table at a
    /// time. A host failing now is kept, even past the limit: forgetting it
    /// would hand it a fresh reserve.
    fn forget_calm(&mut self, now: u64) {
        let mut calm: Vec<(u64, u64)> = Vec::new();
        for (key, bucket) in &self.buckets {
            for host in bucket {
                let idle = Arc::strong_count(&host.account) == 1;
                if idle && host.account.is_calm(now) {
                    calm.push((host.account.last_used(), *key));
                }
            }
        }
        calm.sort_unstable();
        let excess = self.len + 1 - MAX_HOSTS + MAX_HOSTS / 8;
        for (used, key) in calm.into_iter().take(excess) {
            let Some(bucket) = self.buckets.get_mut(&key) else { continue };
            let before = bucket.len();
            bucket.retain(|host| {
                !(host.account.last_used() == used
                    && Arc::strong_count(&host.account) == 1
                    && host.account.is_calm(now))
            });
            self.len -= before - bucket.len();
            if bucket.is_empty() {
                self.buckets.remove(&key);
            }
        }
    }
}

fn read(table: &RwLock<Table>) -> RwLockReadGuard<'_, Table> {
    table.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn host_key(hasher: &FxBuildHasher, url: &Url) -> u64 {
    let mut state = hasher.build_hasher();
    url.scheme().hash(&mut state);
    url.host_str().hash(&mut state);
    url.port_or_known_default().hash(&mut state);
    std::hash::Hasher::finish(&state)
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("earn", &self.earn)
            .field("reserve", &self.reserve)
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

    fn budget(scope: BudgetScope) -> Budget {
        Budget::new(&RetryBudget::default().with_scope(scope))
    }

    fn len(b: &Budget) -> usize {
        let Scope::PerHost { table, .. } = &b.scope else { unreachable!() };
        read(table).len
    }

    #[test]
    fn hosts_are_isolated_and_paths_are_not() {
        let b = budget(BudgetScope::PerHost);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/x"), t0);
        assert!(b.try_spend(&a, t0));
        let same = b.account(&url("http://a.test/other?q=1"), t0);
        assert!(!b.try_spend(&same, t0), "one host, one reserve");
        for other in ["http://b.test/", "https://a.test/", "http://a.test:8080/"] {
            let account = b.account(&url(other), t0);
            assert!(b.try_spend(&account, t0), "{other}");
        }
    }

    #[test]
    fn hosts_whose_hashes_collide_keep_their_own_accounts() {
        let b = budget(BudgetScope::PerHost);
        let Scope::PerHost { table, .. } = &b.scope else { unreachable!() };
        let t0 = Instant::now();
        // Force a collision: file both hosts under one key.
        let first = b.insert(table, 7, &url("http://a.test/"), 0);
        let second = b.insert(table, 7, &url("http://b.test/"), 0);
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(b.try_spend(&first, t0));
        assert!(b.try_spend(&second, t0), "b.test's reserve is its own");
        assert!(Arc::ptr_eq(&read(table).find(7, &url("http://b.test/y")).unwrap(), &second));
    }

    #[test]
    fn global_scope_shares_one_account() {
        let b = budget(BudgetScope::Global);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/"), t0);
        assert!(b.try_spend(&a, t0));
        assert!(!b.try_spend(&b.account(&url("http://b.test/"), t0), t0));
    }

    #[test]
    fn the_table_forgets_the_least_recently_used_calm_hosts() {
        let b = budget(BudgetScope::PerHost);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        for n in 0..MAX_HOSTS {
            drop(b.account(&url(&format!("http://h{n}.test/")), at(n as u64 % 100)));
        }
        assert_eq!(len(&b), MAX_HOSTS);
        drop(b.account(&url("http://new.test/"), at(200)));
        assert!(len(&b) <= MAX_HOSTS - MAX_HOSTS / 8 + 1, "{}", len(&b));
        // The most recently used survived; the least recently used went.
        let Scope::PerHost { hasher, table } = &b.scope else { unreachable!() };
        let kept = |u: &str| read(table).find(host_key(hasher, &url(u)), &url(u)).is_some();
        assert!(kept("http://h99.test/"));
        assert!(!kept("http://h0.test/"));
    }

    #[test]
    fn a_failing_host_is_never_forgotten() {
        let b = budget(BudgetScope::PerHost);
        let t0 = Instant::now();
        let failing = b.account(&url("http://down.test/"), t0);
        b.note_failure(&failing, t0);
        assert!(b.try_spend(&failing, t0));
        drop(failing);
        for n in 0..(MAX_HOSTS * 3) {
            drop(b.account(&url(&format!("http://h{n}.test/")), t0));
        }
        assert!(len(&b) <= MAX_HOSTS + 1);
        // Still the same account: its spent reserve was not handed back.
        let again = b.account(&url("http://down.test/"), t0);
        assert!(!b.try_spend(&again, t0));
    }

    #[test]
    fn a_host_in_use_is_never_forgotten() {
        let b = budget(BudgetScope::PerHost);
        let t0 = Instant::now();
        let held = b.account(&url("http://busy.test/"), t0);
        for n in 0..(MAX_HOSTS * 2) {
            drop(b.account(&url(&format!("http://h{n}.test/")), t0));
        }
        assert!(Arc::ptr_eq(&held, &b.account(&url("http://busy.test/"), t0)));
    }
}
