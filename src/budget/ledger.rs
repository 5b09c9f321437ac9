//! The live books of one middleware: which budget account a request draws
//! on, the pauses servers asked for, each host's throttle, and the one
//! table of hosts that keeps all three per scheme, host and port.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::account::{Account, Paid, RETRY_COST, SLOTS};
use super::{BudgetScope, RetryBudget};
use crate::hosts::{Host, HostState, Hosts, Located};
use crate::pause::Pause;
use crate::stripes::{Batch, Tallies, Word};
use crate::throttle::{Answer, Throttle};

/// Hosts tracked before the least recently used calm ones are forgotten.
const MAX_HOSTS: usize = 1024;
/// Shards of the table of hosts, 64 hosts each: callers on different
/// threads seldom meet on one lock.
const SHARDS: usize = 16;
/// The window of the books when there is no budget to set it: how long a
/// pause that ended is kept for a probe, and a host's table slot for it.
const NO_BUDGET_WINDOW_MS: u64 = 10_000;

/// What the books tell a fleet of processes (see `crate::fleet`): the
/// pauses this process takes on. Told only when a host is paused, never on
/// a call's way out.
#[cfg(feature = "fleet")]
pub(crate) trait Fleetward: Send + Sync {
    /// The process paused the host of `scheme`, `host` and `port` for
    /// `asked` from `at` (the middleware's clock), as its server asked.
    fn paused(
        &self,
        scheme: &str,
        host: &str,
        port: Option<u16>,
        asked: std::time::Duration,
        at: Instant,
    );
}

/// The live books shared by every clone of one middleware.
pub(crate) struct Ledger {
    /// Whether there is a budget.
    budgeted: bool,
    /// Earned per final answer, in thousandths of a retry (0 without a
    /// budget).
    earn: u64,
    /// Final answers that earn a retry: how many a thread counts before it
    /// books them ([`crate::stripes`]).
    per_retry: u32,
    /// The reserve's capacity, in thousandths (0 without a budget).
    reserve: u64,
    /// Width of a slot in milliseconds: at least 10, as the window is at
    /// least 100 ms.
    slot_ms: u64,
    origin: OnceLock<Instant>,
    /// The account of a global budget.
    global: Option<Arc<Account>>,
    /// What final answers earn for the global account, counted per thread.
    tallies: Tallies,
    /// What is kept per host: a per-host budget's accounts, and pauses.
    hosts: Hosts<Record>,
    /// Whether a server's pause is shared by the host's calls.
    pauses: bool,
    /// Whether first attempts are throttled per host (see
    /// [`crate::throttle`]).
    throttling: bool,
    /// Until when (milliseconds on the books' timeline, plus one) a pause
    /// may be in force or a throttle watched for some host; `0` for never.
    /// Until then, a call looks its host up before it sends; after, no host
    /// is paused or throttled, and it does not.
    watch_until: AtomicU64,
    /// Probes in flight: while there are any, calls keep looking their
    /// hosts up, however long a probe takes.
    probes: AtomicUsize,
    /// The fleet the pauses this process takes on are told to, once the
    /// middleware joins one.
    #[cfg(feature = "fleet")]
    fleet: OnceLock<Arc<dyn Fleetward>>,
}

/// What the books keep for one host.
pub(crate) struct Record {
    /// Its budget account, with a per-host budget.
    account: Option<Arc<Account>>,
    /// The pause its server asked for, if any.
    pause: Pause,
    /// How many of its first attempts go (see [`crate::throttle`]).
    pub(super) throttle: Throttle,
    /// Its final answers, counted per thread while it is calm, for its
    /// account and its throttle.
    tallies: Tallies,
    /// The books' slot width, to read the table's clock in milliseconds.
    slot_ms: u64,
}

impl Record {
    fn new(account: Option<Account>, slot_ms: u64) -> Self {
        Self {
            account: account.map(Arc::new),
            pause: Pause::default(),
            throttle: Throttle::default(),
            tallies: Tallies::default(),
            slot_ms,
        }
    }
}

impl HostState for Record {
    fn last_used(&self) -> u64 {
        self.account.as_deref().map_or(0, Account::last_used)
    }

    /// Calm (no retryable outcome within a window), no call holds the
    /// account, no pause is in force or its probe in flight, and its
    /// throttle is not watched. A host failing now is kept, even past the
    /// limit: forgetting it would hand it a fresh reserve, or lift its
    /// pause or its throttle.
    fn may_forget(&self, now: u64) -> bool {
        let account = self
            .account
            .as_ref()
            .is_none_or(|account| Arc::strong_count(account) == 1 && account.is_calm(now));
        let (grace, ms) = (self.slot_ms.saturating_mul(SLOTS), now.saturating_mul(self.slot_ms));
        account && self.pause.may_forget(ms, grace) && self.throttle.idle(ms)
    }
}

impl Ledger {
    /// The live books for `budget`, if any, whose calls may each retry up
    /// to `per_call` times (the reserve's default size follows from it),
    /// sharing a server's pause among the host's calls if `pauses`, and
    /// throttling first attempts per host if `throttling`. `None` when
    /// there is nothing to keep.
    pub(crate) fn new(
        budget: Option<&RetryBudget>,
        per_call: u32,
        pauses: bool,
        throttling: bool,
    ) -> Option<Self> {
        if budget.is_none() && !pauses && !throttling {
            return None;
        }
        let window_ms =
            budget.map_or(NO_BUDGET_WINDOW_MS, |budget| budget.window.as_millis() as u64);
        let slot_ms = window_ms / SLOTS;
        let earn = budget.map_or(0, |budget| (budget.ratio * RETRY_COST as f64).round() as u64);
        let reserve =
            budget.map_or(0, |budget| u64::from(budget.reserve_for(per_call)) * RETRY_COST);
        let per_host = budget.is_some_and(|budget| budget.scope == BudgetScope::PerHost);
        let global = budget
            .filter(|budget| budget.scope == BudgetScope::Global)
            .map(|_| Arc::new(Account::new(reserve)));
        // Hosts past the bound share an account that starts empty: a
        // failing host never gets a fresh reserve by being new, or
        // forgotten (it is not forgotten while it fails). No pause is
        // kept for them.
        let overflow = Record::new(per_host.then(|| Account::new(0)), slot_ms);
        let per_retry = match earn {
            0 => u32::MAX,
            earn => u32::try_from(RETRY_COST.div_ceil(earn)).unwrap_or(u32::MAX),
        };
        Some(Self {
            budgeted: budget.is_some(),
            earn,
            per_retry,
            reserve,
            slot_ms,
            origin: OnceLock::new(),
            global,
            tallies: Tallies::default(),
            hosts: Hosts::sharded(MAX_HOSTS, SHARDS, SLOTS, overflow),
            pauses,
            throttling,
            watch_until: AtomicU64::new(0),
            probes: AtomicUsize::new(0),
            #[cfg(feature = "fleet")]
            fleet: OnceLock::new(),
        })
    }

    /// Whether some host may be paused or throttled now: until then, no
    /// call looks its host up before it sends.
    #[inline]
    pub(crate) fn may_hold(&self) -> bool {
        self.watch_until.load(Ordering::Relaxed) != 0
    }

    /// Whether there is a budget: without one, every retry is allowed and
    /// nothing is counted.
    pub(crate) fn budgeted(&self) -> bool {
        self.budgeted
    }

    /// Whether accounts are kept per host.
    fn per_host(&self) -> bool {
        self.budgeted && self.global.is_none()
    }

    /// The account that a request to `url`, sent at `now`, draws on.
    pub(super) fn account(&self, url: &(impl Located + ?Sized), now: Instant) -> Arc<Account> {
        let seen = self.slot_number(now);
        let account = match &self.global {
            Some(account) => account.clone(),
            None => self
                .hosts
                .with(url, |record| record.account.clone())
                .flatten()
                .unwrap_or_else(|| self.insert(url, seen)),
        };
        account.touch(seen);
        account
    }

    /// The account of `url`'s host for a call that will send its request
    /// once, if the host is known or its shard has room: past the bound, a
    /// host that has not failed is not let in, as for its answers.
    pub(super) fn admitted(
        &self,
        url: &(impl Located + ?Sized),
        now: Instant,
    ) -> Option<Arc<Account>> {
        if self.per_host() {
            match self.hosts.with_or_full(url, |record| record.account.clone()) {
                Ok(Some(account)) => return Some(account),
                Err(true) => return None,
                Ok(None) | Err(false) => {}
            }
        }
        Some(self.account(url, now))
    }

    /// Records a final answer from `url`'s host, with no reference to its
    /// account kept: the happy path's whole cost of the budget, and, when
    /// `accepted` (see [`crate::throttle`]), of the host's throttle too,
    /// in the same lookup. A busy host's answer, while the host is calm
    /// (its reserve full, its throttle not watched), is counted by this
    /// thread alone and booked with its thread's batch
    /// ([`crate::stripes`]). The time (`now`) is read only to book a
    /// retry's worth of answers or a throttle's tally, for a host that is
    /// recovering, or for a host that is new.
    pub(super) fn earn_for(
        &self,
        url: &(impl Located + ?Sized),
        accepted: bool,
        now: impl FnOnce() -> Instant,
    ) {
        let tally = accepted && self.throttling;
        let mut now = Lazy::new(now);
        if let Some(account) = &self.global {
            match self.tallies.striped() {
                None => self.earn_now(&self.tallies, account, &mut now),
                Some(stripes) => {
                    if self.earns_in_batch(&self.tallies, account, &mut now) {
                        if let Some(batch) = stripes.count(true, false, self.per_retry) {
                            self.book_batch((Some(account), None), batch, &mut now);
                        }
                    }
                }
            }
            if tally {
                self.observe(url, Answer::Accepted, || now.get());
            }
            return;
        }
        let known =
            self.hosts.with_or_full(url, |record| self.count(record, true, tally, &mut now));
        match known {
            Ok(()) => {}
            // Past the bound, a host's answers alone do not let it in:
            // a new account's reserve is full, so all they would add
            // is less than a retry, unbooked. A host enters once it
            // fails, and does not push out a calm one before.
            Err(true) => {}
            Err(false) => self.earn_new(url, now.get()),
        }
    }

    /// Counts a final answer of `record`'s host: for its account if it
    /// `earns` (and the host has one), in its throttle if it was
    /// `accepted`. A host that is not busy books it now, in the words its
    /// calls share; a busy one in this thread's batch, while it is calm.
    pub(super) fn count(
        &self,
        record: &Record,
        earns: bool,
        accepted: bool,
        now: &mut Lazy<impl FnOnce() -> Instant>,
    ) {
        let account = record.account.as_deref().filter(|_| earns);
        let Some(stripes) = record.tallies.striped() else {
            if let Some(account) = account {
                self.earn_now(&record.tallies, account, now);
            }
            if accepted {
                self.tally_now(record, now);
            }
            return;
        };
        let earns =
            account.is_some_and(|account| self.earns_in_batch(&record.tallies, account, now));
        let accepted = accepted && self.tallies_in_batch(record, now);
        if !(earns || accepted) {
            return;
        }
        if let Some(batch) = stripes.count(earns, accepted, self.per_retry) {
            self.book_batch((account, Some(&record.throttle)), batch, now);
        }
    }

    /// Books a final answer's earning into `account` now: into the
    /// reserve while it is below its cap, else unbooked until a retry's
    /// worth is booked in the slot of the answer that completes it, which
    /// `tallies` is told of.
    fn earn_now(
        &self,
        tallies: &Tallies,
        account: &Account,
        now: &mut Lazy<impl FnOnce() -> Instant>,
    ) {
        if let Some(batch) = account.earn_unbooked(self.earn, self.reserve) {
            let slot = self.slot_number(now.get());
            account.book(slot, batch);
            tallies.filled(Word::Earnings, slot);
        }
    }

    /// Whether a busy host's answer waits for its thread's batch to earn
    /// for `account`: while the reserve is full. Below it, the answer is
    /// booked now, so that the reserve a failure drew on is refilled answer
    /// by answer.
    fn earns_in_batch(
        &self,
        tallies: &Tallies,
        account: &Account,
        now: &mut Lazy<impl FnOnce() -> Instant>,
    ) -> bool {
        if account.reserve_full(self.reserve) {
            return self.earn > 0;
        }
        self.earn_now(tallies, account, now);
        false
    }

    /// Books what one thread counted for a host: its earnings into
    /// `account` (which counts as used), its accepted answers into
    /// `throttle`.
    #[cold]
    pub(super) fn book_batch(
        &self,
        (account, throttle): (Option<&Account>, Option<&Throttle>),
        batch: Batch,
        now: &mut Lazy<impl FnOnce() -> Instant>,
    ) {
        if let (Some(account), earned @ 1..) = (account, batch.earned) {
            let slot = self.slot_number(now.get());
            account.touch(slot);
            account.earn(slot, self.earn.saturating_mul(earned.into()), self.reserve);
        }
        if let (Some(throttle), accepted @ 1..) = (throttle, batch.accepted) {
            if throttle.tally(accepted) {
                throttle.fold(self.ms(now.get()));
            }
        }
    }

    /// [`earn_for`](Self::earn_for) for a host the table does not know
    /// and has room for.
    fn earn_new(&self, url: &(impl Located + ?Sized), now: Instant) {
        if !self.per_host() {
            return;
        }
        let seen = self.slot_number(now);
        let host = self.record(url, seen);
        if let Some(account) = &host.value.account {
            account.touch(seen);
        }
        // A host new to the table has no throttle to count in yet.
        self.count(&host.value, true, false, &mut Lazy::new(|| now));
    }

    /// The account of `url`'s host, fresh if it is new: its reserve full,
    /// unless the table turned a host away within a window, when the new
    /// one may be a failing host that shared the overflow account until
    /// now.
    fn insert(&self, url: &(impl Located + ?Sized), now: u64) -> Arc<Account> {
        let record = self.record(url, now);
        // A per-host budget's records all have accounts; a record made for
        // a pause before would have one too.
        record.value.account.clone().unwrap_or_else(|| Arc::new(Account::new(0)))
    }

    /// The record of `url`'s host, made if it is new (with a fresh account,
    /// as [`insert`](Self::insert) says, under a per-host budget).
    fn record(&self, url: &(impl Located + ?Sized), now: u64) -> Arc<Host<Record>> {
        let reserve = |crowded: bool| if crowded { 0 } else { self.reserve };
        let per_host = self.per_host();
        self.hosts.get_or_insert(url, now, |crowded| {
            Record::new(per_host.then(|| Account::new(reserve(crowded))), self.slot_ms)
        })
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

    /// Milliseconds on the books' timeline: since the first time read.
    fn ms(&self, now: Instant) -> u64 {
        let origin = *self.origin.get_or_init(|| now);
        let elapsed = now.saturating_duration_since(origin);
        elapsed.as_secs().saturating_mul(1000).saturating_add(elapsed.subsec_millis().into())
    }

    fn slot_number(&self, now: Instant) -> u64 {
        // `slot_ms` is at least 1 (a window is at least 100 ms).
        self.ms(now).checked_div(self.slot_ms).unwrap_or(u64::MAX)
    }
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
            .field("earn", &self.earn)
            .field("reserve", &self.reserve)
            .field("slot_ms", &self.slot_ms)
            .field("pauses", &self.pauses)
            .finish_non_exhaustive()
    }
}

mod watch;

#[cfg(feature = "fleet")]
pub(crate) use watch::HostInUse;
pub(crate) use watch::{HostHandle, Passage, Turn};

#[cfg(test)]
mod tests;

/// A time read at most once, when first needed.
pub(super) struct Lazy<F> {
    read: Option<F>,
    at: Option<Instant>,
}

impl<F: FnOnce() -> Instant> Lazy<F> {
    pub(super) fn new(read: F) -> Self {
        Self { read: Some(read), at: None }
    }

    pub(super) fn get(&mut self) -> Instant {
        if let Some(read) = self.read.take() {
            self.at = Some(read());
        }
        self.at.expect("read once")
    }
}
