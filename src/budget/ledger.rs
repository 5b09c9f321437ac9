//! The live budget: which account a request draws on, and the table of
//! hosts behind [`BudgetScope::PerHost`].

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use reqwest::Url;

use super::account::{Account, Paid, RETRY_COST, SLOTS};
use super::{BudgetScope, RetryBudget};
use crate::hosts::{HostState, Hosts};

/// Hosts tracked before the least recently used calm ones are forgotten.
const MAX_HOSTS: usize = 1024;
/// Shards of the table of hosts, 64 hosts each: callers on different
/// threads seldom meet on one lock.
const SHARDS: usize = 16;

/// The live budget shared by every clone of one middleware: its books.
pub(crate) struct Ledger {
    /// Earned per final answer, in thousandths of a retry.
    earn: u64,
    /// The reserve's capacity, in thousandths.
    reserve: u64,
    /// Width of a slot in milliseconds: at least 10, as the window is at
    /// least 100 ms.
    slot_ms: u64,
    origin: OnceLock<Instant>,
    accounts: Accounts,
}

enum Accounts {
    Global(Arc<Account>),
    /// An account per scheme, host and port; hosts whose hashes collide
    /// are told apart by their exact keys, so two hosts never share an
    /// account by accident.
    PerHost(Hosts<Arc<Account>>),
}

impl HostState for Arc<Account> {
    fn last_used(&self) -> u64 {
        Account::last_used(self)
    }

    /// Calm (no retryable outcome within a window), and no call holds the
    /// account. A host failing now is kept, even past the limit: forgetting
    /// it would hand it a fresh reserve.
    fn may_forget(&self, now: u64) -> bool {
        Arc::strong_count(self) == 1 && self.is_calm(now)
    }
}

impl Ledger {
    /// The live budget for `config`, whose calls may each retry up to
    /// `per_call` times: the reserve's default size follows from it.
    pub(crate) fn new(config: &RetryBudget, per_call: u32) -> Self {
        let window_ms = config.window.as_millis() as u64;
        let reserve = u64::from(config.reserve_for(per_call)) * RETRY_COST;
        let scope = match config.scope {
            BudgetScope::Global => Accounts::Global(Arc::new(Account::new(reserve))),
            // Hosts past the bound share an account that starts empty: a
            // failing host never gets a fresh reserve by being new, or
            // forgotten (it is not forgotten while it fails).
            BudgetScope::PerHost => Accounts::PerHost(Hosts::sharded(
                MAX_HOSTS,
                SHARDS,
                SLOTS,
                Arc::new(Account::new(0)),
            )),
        };
        Self {
            earn: (config.ratio * RETRY_COST as f64).round() as u64,
            reserve,
            slot_ms: window_ms / SLOTS,
            origin: OnceLock::new(),
            accounts: scope,
        }
    }

    /// The account that a request to `url`, sent at `now`, draws on.
    pub(super) fn account(&self, url: &Url, now: Instant) -> Arc<Account> {
        let seen = self.slot_number(now);
        let account = match &self.accounts {
            Accounts::Global(account) => account.clone(),
            Accounts::PerHost(hosts) => {
                hosts.with(url, Arc::clone).unwrap_or_else(|| self.insert(hosts, url, seen))
            }
        };
        account.touch(seen);
        account
    }

    /// The account of `url`'s host for a call that will send its request
    /// once, if the host is known or its shard has room: past the bound, a
    /// host that has not failed is not let in, as for its answers.
    pub(super) fn admitted(&self, url: &Url, now: Instant) -> Option<Arc<Account>> {
        if let Accounts::PerHost(hosts) = &self.accounts {
            match hosts.with_or_full(url, Arc::clone) {
                Ok(account) => return Some(account),
                Err(true) => return None,
                Err(false) => {}
            }
        }
        Some(self.account(url, now))
    }

    /// Records a final answer from `url`'s host, with no reference to its
    /// account kept: the happy path's whole cost of the budget. The time
    /// (`now`) is read only to book a retry's worth of answers, or for a
    /// host that is new.
    pub(super) fn earn_for(&self, url: &Url, now: impl FnOnce() -> Instant) {
        let earn = |account: &Arc<Account>| {
            let batch = account.earn_unbooked(self.earn, self.reserve)?;
            Some((account.clone(), batch))
        };
        let due = match &self.accounts {
            Accounts::Global(account) => earn(account),
            Accounts::PerHost(hosts) => match hosts.with_or_full(url, earn) {
                Ok(due) => due,
                // Past the bound, a host's answers alone do not let it in:
                // a new account's reserve is full, so all they would add
                // is less than a retry, unbooked. A host enters once it
                // fails, and does not push out a calm one before.
                Err(true) => return,
                Err(false) => {
                    let seen = self.slot_number(now());
                    let account = self.insert(hosts, url, seen);
                    account.touch(seen);
                    if let Some(batch) = account.earn_unbooked(self.earn, self.reserve) {
                        account.book(seen, batch);
                    }
                    return;
                }
            },
        };
        if let Some((account, batch)) = due {
            account.book(self.slot_number(now()), batch);
        }
    }

    /// The account of `url`'s host, fresh if it is new: its reserve full,
    /// unless the table turned a host away within a window, when the new
    /// one may be a failing host that shared the overflow account until
    /// now.
    fn insert(&self, hosts: &Hosts<Arc<Account>>, url: &Url, now: u64) -> Arc<Account> {
        let reserve = |crowded: bool| if crowded { 0 } else { self.reserve };
        hosts
            .get_or_insert(url, now, |crowded| Arc::new(Account::new(reserve(crowded))))
            .value
            .clone()
    }

    /// Records a final answer, which earns a share of a retry.
    pub(super) fn earn(&self, account: &Account, now: Instant) {
        account.earn(self.slot_number(now), self.earn, self.reserve);
    }

    /// Records a retryable outcome: the host is failing now.
    pub(super) fn note_failure(&self, account: &Account, now: Instant) {
        account.note_failure(self.slot_number(now));
    }

    /// Takes one retry from the account, if the budget allows it, and says
    /// how it was paid.
    pub(super) fn try_spend(&self, account: &Account, now: Instant) -> Option<Paid> {
        account.try_spend(self.slot_number(now))
    }

    /// Gives back what a retry cost: it succeeded, or it was never sent.
    pub(super) fn refund(&self, account: &Account, paid: Paid, now: Instant) {
        account.refund(self.slot_number(now), paid, self.reserve);
    }

    fn slot_number(&self, now: Instant) -> u64 {
        let origin = *self.origin.get_or_init(|| now);
        let elapsed = now.saturating_duration_since(origin);
        let ms =
            elapsed.as_secs().saturating_mul(1000).saturating_add(elapsed.subsec_millis().into());
        // `slot_ms` is at least 1 (a window is at least 100 ms).
        ms.checked_div(self.slot_ms).unwrap_or(u64::MAX)
    }
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
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

    fn budget(scope: BudgetScope) -> Ledger {
        Ledger::new(&RetryBudget::default().with_scope(scope).with_reserve(1), 3)
    }

    fn len(b: &Ledger) -> usize {
        let Accounts::PerHost(hosts) = &b.accounts else { unreachable!() };
        hosts.len()
    }

    #[test]
    fn hosts_are_isolated_and_paths_are_not() {
        let b = budget(BudgetScope::PerHost);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/x"), t0);
        assert!(b.try_spend(&a, t0).is_some());
        let same = b.account(&url("http://a.test/other?q=1"), t0);
        assert!(b.try_spend(&same, t0).is_none(), "one host, one reserve");
        for other in ["http://b.test/", "https://a.test/", "http://a.test:8080/"] {
            let account = b.account(&url(other), t0);
            assert!(b.try_spend(&account, t0).is_some(), "{other}");
        }
    }

    #[test]
    fn answers_earn_for_their_own_host_and_budget() {
        let (b, other) = (budget(BudgetScope::PerHost), budget(BudgetScope::PerHost));
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/"), t0);
        let c = b.account(&url("http://c.test/"), t0);
        assert!(b.try_spend(&a, t0).is_some() && b.try_spend(&c, t0).is_some(), "reserves spent");
        // The same thread records answers for one host in two budgets.
        for _ in 0..10 {
            b.earn_for(&url("http://a.test/p"), || t0);
            other.earn_for(&url("http://a.test/p"), || t0);
        }
        // Ten tenths: the reserve is full again, the window empty.
        assert_eq!(a.available(0), 1, "ten answers from a.test");
        assert_eq!(c.available(0), 0, "c.test earned nothing");
        // Hosts taking turns, and a URL naming a user.
        for _ in 0..10 {
            b.earn_for(&url("http://c.test/"), || t0);
            b.earn_for(&url("http://user@a.test/"), || t0);
        }
        assert_eq!((a.available(0), c.available(0)), (2, 1));
        // One host over and over, after a first URL that named a user.
        b.earn_for(&url("http://user@d.test/"), || t0);
        let d = b.account(&url("http://d.test/"), t0);
        assert!(b.try_spend(&d, t0).is_some(), "the reserve");
        for _ in 0..19 {
            b.earn_for(&url("http://d.test/q"), || t0);
        }
        // The first answer went to the window (the reserve was full); the
        // retry took that 0.1 and 0.9 of the reserve; nine answers refilled
        // the reserve and ten earned a retry in the window: 1.0 + 1.0.
        assert_eq!(d.available(0), 2);
        let fresh = other.account(&url("http://a.test/"), t0);
        assert_eq!(fresh.available(0), 2, "the other budget's own account");
    }

    #[test]
    fn past_the_bound_answers_alone_let_no_host_in() {
        let b = budget(BudgetScope::PerHost);
        let t0 = Instant::now();
        for n in 0..MAX_HOSTS * 4 {
            b.earn_for(&url(&format!("http://h{n}.test/")), || t0);
        }
        assert_eq!(len(&b), MAX_HOSTS, "answers fill every shard up to its bound, and no further");
        let Accounts::PerHost(hosts) = &b.accounts else { unreachable!() };
        let new = url("http://new.test/");
        b.earn_for(&new, || t0);
        assert!(hosts.with(&new, |_| ()).is_none(), "an answer alone does not let it in");
        // A failure lets a host in, making room among the calm ones.
        let failing = b.account(&new, t0);
        b.note_failure(&failing, t0);
        assert!(hosts.with(&new, |_| ()).is_some());
        assert!(len(&b) <= MAX_HOSTS);
    }

    #[test]
    fn global_scope_shares_one_account() {
        let b = budget(BudgetScope::Global);
        let t0 = Instant::now();
        let a = b.account(&url("http://a.test/"), t0);
        assert!(b.try_spend(&a, t0).is_some());
        assert!(b.try_spend(&b.account(&url("http://b.test/"), t0), t0).is_none());
    }

    #[test]
    fn the_table_forgets_the_least_recently_used_calm_hosts() {
        let b = budget(BudgetScope::PerHost);
        let Accounts::PerHost(hosts) = &b.accounts else { unreachable!() };
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Fill the shard of new.test, each host used at a time of its own.
        let new = url("http://new.test/");
        let mut shard = Vec::new();
        for n in 0u64.. {
            let (len, limit) = hosts.shard_len(&new);
            if len == limit {
                break;
            }
            let host = url(&format!("http://h{n}.test/"));
            let before = hosts.shard_len(&new).0;
            drop(b.account(&host, at(n)));
            if hosts.shard_len(&new).0 > before {
                shard.push(host);
            }
        }
        drop(b.account(&new, at(100_000)));
        let (len, limit) = hosts.shard_len(&new);
        assert_eq!(len, limit - limit / 8, "an eighth of the shard went, and new.test came in");
        // The least recently used went, the most recent stayed.
        let kept = |u: &Url| hosts.with(u, |_| ()).is_some();
        let gone = limit / 8 + 1;
        assert!(shard[..gone].iter().all(|u| !kept(u)), "the oldest went");
        assert!(shard[gone..].iter().all(kept), "the rest stayed");
        assert!(kept(&new));
    }

    #[test]
    fn a_failing_host_is_never_forgotten() {
        let b = budget(BudgetScope::PerHost);
        let t0 = Instant::now();
        let failing = b.account(&url("http://down.test/"), t0);
        b.note_failure(&failing, t0);
        assert!(b.try_spend(&failing, t0).is_some());
        drop(failing);
        for n in 0..(MAX_HOSTS * 3) {
            drop(b.account(&url(&format!("http://h{n}.test/")), t0));
        }
        assert!(len(&b) <= MAX_HOSTS);
        // Still the same account: its spent reserve was not handed back.
        let again = b.account(&url("http://down.test/"), t0);
        assert!(b.try_spend(&again, t0).is_none());
    }

    #[test]
    fn a_host_that_only_failed_is_not_forgotten_either() {
        let b = budget(BudgetScope::PerHost);
        let t0 = Instant::now();
        b.note_failure(&b.account(&url("http://down.test/"), t0), t0);
        for n in 0..(MAX_HOSTS * 3) {
            drop(b.account(&url(&format!("http://h{n}.test/")), t0));
        }
        let Accounts::PerHost(hosts) = &b.accounts else { unreachable!() };
        assert!(hosts.with(&url("http://down.test/"), |_| ()).is_some());
    }

    #[test]
    fn a_host_past_a_table_of_failing_hosts_never_gets_a_fresh_reserve() {
        // A budget whose shard for new.test is full of failing hosts.
        let b = budget(BudgetScope::PerHost);
        let Accounts::PerHost(hosts) = &b.accounts else { unreachable!() };
        let t0 = Instant::now();
        let new = url("http://new.test/");
        for n in 0.. {
            let (len, limit) = hosts.shard_len(&new);
            if len == limit {
                break;
            }
            let account = b.account(&url(&format!("http://f{n}.test/")), t0);
            b.note_failure(&account, t0);
        }
        // It shares the overflow account, whose reserve starts empty.
        let shared = b.account(&new, t0);
        assert!(b.try_spend(&shared, t0).is_none(), "no fresh reserve for a new host");
        let (len, limit) = hosts.shard_len(&new);
        assert_eq!(len, limit, "the shard stays at its bound");
        drop(shared);
        // A window later the old hosts are calm and may go: the new host
        // gets an account of its own, still with an empty reserve, as it
        // may have been failing all along.
        let later = t0 + Duration::from_secs(10);
        let own = b.account(&new, later);
        assert!(hosts.with(&new, |_| ()).is_some());
        assert!(b.try_spend(&own, later).is_none());
        // Its own answers earn it retries, as for any host.
        for _ in 0..10 {
            b.earn(&own, later);
        }
        assert!(b.try_spend(&own, later).is_some());
    }

    #[test]
    fn a_budget_prints_its_rates_in_thousandths() {
        let printed = format!("{:?}", budget(BudgetScope::Global));
        assert!(printed.starts_with("Ledger { earn: 100, reserve: "), "{printed}");
        assert!(printed.contains("slot_ms: 1000"), "{printed}");
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
