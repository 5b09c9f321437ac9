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
mod tests;
