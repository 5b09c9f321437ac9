//! One budget account: a ring of time slots of earnings and retries, and a
//! reserve on credit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::stripes::note_shared_write;

/// How many slots the window is cut into.
pub(super) const SLOTS: u64 = 10;
/// Thousandths of a retry: the cost of one retry.
pub(super) const RETRY_COST: u64 = 1000;

/// One budget's counts, in thousandths of a retry.
#[derive(Debug)]
pub(crate) struct Account {
    slots: [Slot; SLOTS as usize],
    /// Retries on credit: drawn on when the window's earnings are spent,
    /// refilled by earnings only.
    reserve: AtomicU64,
    /// The newest slot seen: the account's time never goes back.
    latest: AtomicU64,
    /// One past the slot of the last retryable outcome; 0 for none. A host
    /// failing now is never forgotten.
    troubled: AtomicU64,
    /// The slot of the last request booked, to forget the least recently
    /// used.
    used: AtomicU64,
    /// What final answers earned for the window and no slot holds yet:
    /// less than a retry, booked once it is worth one (see
    /// [`earn_unbooked`](Self::earn_unbooked)).
    unbooked: AtomicU64,
    /// Held to take a retry and to start a slot. A final answer's earning
    /// is an atomic add, and so is booking a retry's worth of them.
    turn: Mutex<()>,
}

/// How one retry was paid: the part the reserve paid, in thousandths; the
/// window paid the rest of [`RETRY_COST`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Paid {
    from_reserve: u64,
}

#[derive(Debug, Default)]
struct Slot {
    /// Which slot of the timeline this is; stale when older than the window.
    number: AtomicU64,
    earned: AtomicU64,
    spent: AtomicU64,
}

impl Account {
    /// An account whose reserve holds `reserve` thousandths, full.
    pub(super) fn new(reserve: u64) -> Self {
        Self {
            slots: Default::default(),
            reserve: AtomicU64::new(reserve),
            latest: AtomicU64::new(0),
            troubled: AtomicU64::new(0),
            used: AtomicU64::new(0),
            unbooked: AtomicU64::new(0),
            turn: Mutex::new(()),
        }
    }

    /// Timeline slot `seen` as this account counts it: never before the
    /// newest slot it has seen, whatever the clock says.
    fn now(&self, seen: u64) -> u64 {
        let latest = self.latest.load(Ordering::Relaxed);
        // Read before writing: time mostly stands within a slot, so most
        // calls change nothing.
        if seen > latest {
            note_shared_write();
            self.latest.fetch_max(seen, Ordering::Relaxed);
            return seen;
        }
        latest
    }

    /// Records a final answer at slot `seen`: `amount` into the reserve
    /// while it is below `cap`, the rest into the window. Each answer earns
    /// once.
    pub(super) fn earn(&self, seen: u64, amount: u64, cap: u64) {
        note_shared_write();
        let rest = self.refill(amount, cap);
        self.current(self.now(seen)).earned.fetch_add(rest, Ordering::Relaxed);
    }

    /// Records a final answer whose time is not read: `amount` into the
    /// reserve while it is below `cap`; the rest is kept unbooked until the
    /// answers not yet booked are worth a retry. Returns that worth once
    /// they are, for the caller to [`book`](Self::book) at the time of the
    /// answer that made it up. So the window's earnings are booked a retry
    /// at a time, each at the time of the last of its answers: an answer
    /// never earns twice, and what is unbooked when a host stops answering
    /// (less than a retry) is never booked.
    pub(super) fn earn_unbooked(&self, amount: u64, cap: u64) -> Option<u64> {
        let rest = self.refill(amount, cap);
        if rest == 0 {
            return None;
        }
        note_shared_write();
        let before = self.unbooked.fetch_add(rest, Ordering::Relaxed);
        if before.saturating_add(rest) < RETRY_COST {
            return None;
        }
        // Another answer may have taken the batch first: then this books
        // what came since, maybe nothing.
        Some(self.unbooked.swap(0, Ordering::Relaxed))
    }

    /// Books `batch`, earned by answers up to slot `seen`, into that slot.
    pub(super) fn book(&self, seen: u64, batch: u64) {
        note_shared_write();
        self.touch(seen);
        self.current(self.now(seen)).earned.fetch_add(batch, Ordering::Relaxed);
    }

    /// Whether the reserve holds `cap`: full, as it is for almost every
    /// answer.
    #[inline]
    pub(super) fn reserve_full(&self, cap: u64) -> bool {
        self.reserve.load(Ordering::Relaxed) >= cap
    }

    /// Puts `amount` into the reserve while it is below `cap`; returns the
    /// rest.
    fn refill(&self, amount: u64, cap: u64) -> u64 {
        // Read before writing: the reserve is full for almost every answer.
        if self.reserve_full(cap) {
            return amount;
        }
        note_shared_write();
        let refill = |r: u64| Some(r.saturating_add(amount).min(cap));
        let before = self
            .reserve
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, refill)
            .unwrap_or_else(|never| never);
        amount.saturating_sub(cap.saturating_sub(before).min(amount))
    }

    /// Takes one retry if the window's unspent earnings and the reserve
    /// cover it: from the earnings first, the rest from the reserve.
    /// Returns how it was paid, for a refund; `None` when refused.
    pub(super) fn try_spend(&self, seen: u64) -> Option<Paid> {
        note_shared_write();
        let _turn = self.lock();
        let now = self.now(seen);
        self.note_trouble(now);
        let (earned, spent) = self.totals(now);
        let unspent = earned.saturating_sub(spent);
        let reserve = self.reserve.load(Ordering::Relaxed);
        if unspent.saturating_add(reserve) < RETRY_COST {
            return None;
        }
        let from_window = unspent.min(RETRY_COST);
        self.current_locked(now).spent.fetch_add(from_window, Ordering::Relaxed);
        // The check above, under the turn, leaves the reserve enough.
        let from_reserve = RETRY_COST.saturating_sub(from_window);
        self.reserve.fetch_sub(from_reserve, Ordering::Relaxed);
        Some(Paid { from_reserve })
    }

    /// Gives a retry's cost back: what the reserve paid to the reserve (up
    /// to `cap`), what the window paid as earnings of the current slot.
    pub(super) fn refund(&self, seen: u64, paid: Paid, cap: u64) {
        note_shared_write();
        let from_window = RETRY_COST.saturating_sub(paid.from_reserve);
        self.current(self.now(seen)).earned.fetch_add(from_window, Ordering::Relaxed);
        let refill = |r: u64| Some(r.saturating_add(paid.from_reserve).min(cap));
        let _ = self.reserve.fetch_update(Ordering::Relaxed, Ordering::Relaxed, refill);
    }

    /// Records a retryable outcome, so the host counts as failing now.
    pub(super) fn note_failure(&self, seen: u64) {
        self.note_trouble(self.now(seen));
    }

    fn note_trouble(&self, now: u64) {
        note_shared_write();
        self.troubled.fetch_max(now.saturating_add(1), Ordering::Relaxed);
    }

    /// Records a request, for forgetting the least recently used host.
    pub(super) fn touch(&self, seen: u64) {
        // Read before writing: most requests fall in a slot already
        // recorded.
        if seen > self.used.load(Ordering::Relaxed) {
            note_shared_write();
            self.used.fetch_max(seen, Ordering::Relaxed);
        }
    }

    /// The slot of the last request.
    pub(super) fn last_used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// No retryable outcome within the window ending at slot `now`.
    pub(super) fn is_calm(&self, now: u64) -> bool {
        match self.troubled.load(Ordering::Relaxed) {
            0 => true,
            after => now.saturating_sub(after.saturating_sub(1)) >= SLOTS,
        }
    }

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
        if slot.number.load(Ordering::Acquire) < number {
            slot.earned.store(0, Ordering::Relaxed);
            slot.spent.store(0, Ordering::Relaxed);
            slot.number.store(number, Ordering::Release);
        }
        slot
    }

    fn slot(&self, number: u64) -> &Slot {
        &self.slots[(number % SLOTS) as usize]
    }

    /// Earnings and retries in the window ending at slot `now`.
    fn totals(&self, now: u64) -> (u64, u64) {
        self.slots
            .iter()
            .filter(|slot| {
                let number = slot.number.load(Ordering::Acquire);
                now.checked_sub(number).is_some_and(|age| age < SLOTS)
            })
            .fold((0, 0), |(e, s), slot| {
                (
                    e.saturating_add(slot.earned.load(Ordering::Relaxed)),
                    s.saturating_add(slot.spent.load(Ordering::Relaxed)),
                )
            })
    }

    /// [`try_spend`](Self::try_spend), as a yes or no, for tests.
    #[cfg(test)]
    pub(super) fn try_spend_ok(&self, seen: u64) -> bool {
        self.try_spend(seen).is_some()
    }

    /// Retries the account could take at slot `now`, for tests.
    #[cfg(test)]
    pub(super) fn available(&self, now: u64) -> u64 {
        let (earned, spent) = self.totals(now);
        earned.saturating_sub(spent).saturating_add(self.reserve.load(Ordering::Relaxed))
            / RETRY_COST
    }
}

#[cfg(test)]
mod tests;
