//! One budget account: a ring of time slots of earnings and retries, and a
//! reserve on credit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

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
            self.latest.fetch_max(seen, Ordering::Relaxed);
            return seen;
        }
        latest
    }

    /// Records a final answer at slot `seen`: `amount` into the reserve
    /// while it is below `cap`, the rest into the window. Each answer earns
    /// once.
    pub(super) fn earn(&self, seen: u64, amount: u64, cap: u64) {
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
        self.touch(seen);
        self.current(self.now(seen)).earned.fetch_add(batch, Ordering::Relaxed);
    }

    /// Puts `amount` into the reserve while it is below `cap`; returns the
    /// rest.
    fn refill(&self, amount: u64, cap: u64) -> u64 {
        // Read before writing: the reserve is full for almost every answer.
        if self.reserve.load(Ordering::Relaxed) >= cap {
            return amount;
        }
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
        self.troubled.fetch_max(now.saturating_add(1), Ordering::Relaxed);
    }

    /// Records a request, for forgetting the least recently used host.
    pub(super) fn touch(&self, seen: u64) {
        // Read before writing: most requests fall in a slot already
        // recorded.
        if seen > self.used.load(Ordering::Relaxed) {
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
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A tenth of a retry per answer, a reserve of one retry.
    const EARN: u64 = 100;
    const CAP: u64 = 1000;

    #[test]
    fn unbooked_answers_are_booked_a_retry_at_a_time() {
        let a = Account::new(0);
        // The reserve refills first, at once, whatever the time.
        for n in 1..10 {
            assert_eq!(a.earn_unbooked(EARN, CAP), None, "answer {n}: into the reserve");
        }
        assert_eq!(a.earn_unbooked(EARN, CAP), None, "the tenth fills the reserve");
        assert!(a.try_spend_ok(0), "the reserve holds a retry");
        assert_eq!(a.earn_unbooked(EARN, CAP), None, "a tenth into the emptied reserve");
        // With the reserve full again, answers wait unbooked; the one that
        // makes up a retry hands it over.
        for _ in 0..9 {
            a.earn_unbooked(EARN, CAP);
        }
        assert_eq!(a.available(5), 1, "the reserve, refilled");
        for n in 1..10 {
            assert_eq!(a.earn_unbooked(EARN, CAP), None, "answer {n}: unbooked");
        }
        assert_eq!(a.available(5), 1, "nothing booked yet");
        let batch = a.earn_unbooked(EARN, CAP).expect("ten answers, one retry");
        assert_eq!(batch, RETRY_COST);
        a.book(5, batch);
        assert_eq!(a.available(5), 2);
        assert_eq!(a.last_used(), 5, "booking records the use");
        // Booked at slot 5, it lapses a window later, as any earning.
        assert_eq!(a.available(5 + SLOTS), 1);
    }

    #[test]
    fn concurrent_unbooked_answers_are_all_booked_once() {
        let a = Arc::new(Account::new(0));
        // Fill the reserve, so every later answer goes to the window.
        while a.earn_unbooked(EARN, CAP).is_none() && a.available(0) == 0 {}
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        if let Some(batch) = a.earn_unbooked(EARN, CAP) {
                            a.book(0, batch);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        // 4,000 answers: 400 retries earned, all booked but less than one,
        // and the reserve's one.
        let rest = a.unbooked.load(Ordering::Relaxed);
        assert!(rest < RETRY_COST, "{rest} left unbooked");
        assert_eq!(a.available(0), 1 + (400 * RETRY_COST - rest) / RETRY_COST);
    }

    #[test]
    fn a_fresh_account_holds_its_reserve_and_no_more() {
        let a = Account::new(CAP);
        assert!(a.try_spend_ok(0));
        assert!(!a.try_spend_ok(0), "the reserve is spent and nothing was earned");
    }

    #[test]
    fn ten_final_answers_pay_for_one_retry() {
        let a = Account::new(0);
        for _ in 0..9 {
            a.earn(0, EARN, 0);
        }
        assert!(!a.try_spend_ok(0), "nine tenths are not a retry");
        a.earn(0, EARN, 0);
        assert!(a.try_spend_ok(0));
        assert!(!a.try_spend_ok(0));
    }

    #[test]
    fn earnings_lapse_after_the_window_and_grant_nothing_back() {
        let a = Account::new(0);
        for _ in 0..30 {
            a.earn(0, EARN, 0);
        }
        assert_eq!(a.available(9), 3);
        assert_eq!(a.available(10), 0, "a window later the earnings have lapsed");
        // Retries spent early do not come back when they leave the window:
        // no burst a window after an outage began.
        let b = Account::new(0);
        for _ in 0..30 {
            b.earn(0, EARN, 0);
        }
        while b.try_spend_ok(5) {}
        for later in 6..40 {
            assert!(!b.try_spend_ok(later), "slot {later}");
        }
    }

    #[test]
    fn the_reserve_is_used_last_and_refilled_only_by_answers() {
        let a = Account::new(CAP);
        for _ in 0..10 {
            a.earn(0, EARN, CAP);
        }
        assert!(a.try_spend_ok(0), "paid from the window");
        assert!(a.try_spend_ok(0), "paid from the reserve");
        assert!(!a.try_spend_ok(0));
        // Time alone refills nothing.
        assert!(!a.try_spend_ok(1000));
        // Answers do: the reserve first, up to its cap, then the window.
        for _ in 0..25 {
            a.earn(2000, EARN, CAP);
        }
        assert_eq!(a.reserve.load(Ordering::Relaxed), CAP);
        assert_eq!(a.available(2000), 2, "1 in the reserve, 1.5 in the window");
        // Each answer earns once: a full reserve takes nothing more.
        let b = Account::new(CAP);
        b.earn(0, EARN, CAP);
        assert_eq!((b.reserve.load(Ordering::Relaxed), b.totals(0).0), (CAP, EARN));
        // One that tops the reserve up puts only the rest in the window.
        let c = Account::new(CAP);
        assert!(c.try_spend_ok(0));
        c.reserve.store(CAP - 30, Ordering::Relaxed);
        c.earn(0, EARN, CAP);
        assert_eq!((c.reserve.load(Ordering::Relaxed), c.totals(0).0), (CAP, 70));
    }

    #[test]
    fn a_refund_returns_the_cost_where_it_was_taken_from() {
        let a = Account::new(CAP);
        for _ in 0..5 {
            a.earn(0, EARN, CAP);
        }
        // Half from the window's earnings, half from the reserve.
        let paid = a.try_spend(0).expect("half earned, half on credit");
        assert_eq!(paid, Paid { from_reserve: 500 });
        assert_eq!(a.available(0), 0);
        a.refund(1, paid, CAP);
        assert_eq!(a.reserve.load(Ordering::Relaxed), CAP);
        assert_eq!(a.totals(1), (5 * EARN + 500, 500), "the window's half is earned again");
        // A refund never fills the reserve past its cap.
        let full = Account::new(CAP);
        full.refund(0, Paid { from_reserve: RETRY_COST }, CAP);
        assert_eq!(full.reserve.load(Ordering::Relaxed), CAP);
    }

    #[test]
    fn a_clock_that_steps_back_does_not_move_the_account_back() {
        let a = Account::new(0);
        for _ in 0..10 {
            a.earn(50, EARN, 0);
        }
        // The clock jumps back 40 slots: still slot 50 for the account,
        // so the earnings are neither lost nor counted twice.
        assert!(a.try_spend_ok(10));
        assert!(!a.try_spend_ok(10));
        for _ in 0..10 {
            a.earn(10, EARN, 0);
        }
        assert_eq!(a.available(50), 1);
        assert!(a.try_spend_ok(3));
        assert_eq!(a.available(59), 0);
    }

    #[test]
    fn a_host_is_calm_a_window_after_its_last_failure() {
        let a = Account::new(CAP);
        assert!(a.is_calm(0));
        a.note_failure(20);
        assert!(!a.is_calm(20));
        assert!(!a.is_calm(29));
        assert!(a.is_calm(30));
        assert!(a.try_spend_ok(40));
        assert!(!a.is_calm(45), "a retry is trouble too");
    }

    #[test]
    fn concurrent_use_keeps_the_books_exact() {
        let a = Arc::new(Account::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || {
                    let mut granted = 0u64;
                    for _ in 0..1000 {
                        a.earn(3, 500, 0);
                        granted += u64::from(a.try_spend_ok(3));
                    }
                    granted
                })
            })
            .collect();
        let granted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        // 8000 answers at half a retry each pay for 4000 retries: every one
        // is either granted or still available, none lost or granted twice.
        assert!(granted > 3000, "{granted}");
        assert_eq!(granted + a.available(3), 4000);
    }
}
