//! Counts that each thread keeps on a cache line of its own, booked a
//! batch at a time: how a busy host's final answers are counted without
//! every call writing a line that calls on other threads write too.
//!
//! A host's answers are booked as they come, in words its calls share
//! (its account's unbooked earnings, its throttle's tally), until the
//! host is busy: one of these words filled twice within one slot of the
//! books' timeline (a second, at the budget's default window). That is a
//! retry's worth of earnings booked twice, from some ten answers within
//! the second at the default ratio, or the tally folded twice, from 256.
//! Then the host gets a stripe per thread slot, each padded to its own
//! cache line, and from then on a thread counts into its own stripe and
//! books its own batches. A host called now and then holds no stripes,
//! and its answers are counted as before.
//!
//! Threads take the lowest free slot when they first count, and give it
//! back when they end, so the threads alive at once hold distinct slots: a
//! stripe is written by one thread as long as no more threads count at
//! once than there are stripes ([`stripes`]: one per core, rounded up to
//! a power of two, at least eight). Past that, threads share stripes,
//! which stays correct (the counts are atomic), only no longer free of
//! contention.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crossbeam_utils::CachePadded;

/// Accepted answers a thread counts for a host's throttle before it books
/// them; answers that earn are booked a retry's worth at a time (ten at
/// the budget's default ratio).
pub(crate) const BATCH: u32 = 10;
/// The fewest stripes a busy host gets, whatever the cores.
const MIN_STRIPES: usize = 8;
/// The most, whatever the cores.
const MAX_STRIPES: usize = 64;

/// One host's answers, counted per thread once it is busy.
#[derive(Debug, Default)]
pub(crate) struct Tallies {
    /// For each of the host's shared words ([`Word`]), one past the slot
    /// in which it last filled; 0 for never.
    filled: [AtomicU64; 2],
    stripes: OnceLock<Stripes>,
}

/// A host's words that its calls share until it is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Word {
    /// Its account's unbooked earnings, filled by a retry's worth.
    Earnings,
    /// Its throttle's tally, filled by a fold into the books.
    Tally,
}

/// A busy host's counts, one per thread slot, each on its own cache line;
/// a power of two of them.
#[derive(Debug)]
pub(crate) struct Stripes(Box<[CachePadded<AtomicU64>]>);

/// What one thread counted for a host: answers that earn for the budget,
/// and answers the host accepted, for its throttle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Batch {
    pub(crate) earned: u32,
    pub(crate) accepted: u32,
}

impl Batch {
    /// The two counts, as a stripe holds them: earned in the low half.
    fn of(word: u64) -> Self {
        Self { earned: word as u32, accepted: (word >> 32) as u32 }
    }

    fn word(earns: bool, accepted: bool) -> u64 {
        u64::from(earns) | (u64::from(accepted) << 32)
    }

    /// Whether a thread books what it counted: a retry's worth of
    /// earnings, `per_retry` answers, or a [`BATCH`] of accepted ones.
    fn full(self, per_retry: u32) -> bool {
        self.earned >= per_retry || self.accepted >= BATCH
    }

    /// Whether the batch holds nothing.
    pub(crate) fn is_empty(self) -> bool {
        self == Self::default()
    }
}

impl Tallies {
    /// The host's stripes, once it is busy.
    #[inline]
    pub(crate) fn striped(&self) -> Option<&Stripes> {
        self.stripes.get()
    }

    /// Notes that one of the host's shared words filled at `slot` of the
    /// books' timeline: a host one of whose words filled twice within one
    /// slot gets its stripes. Each word apart: one answer may fill both,
    /// and the two may fill in one slot at any pace.
    pub(crate) fn filled(&self, word: Word, slot: u64) {
        let filled = slot.saturating_add(1);
        if self.filled[word as usize].swap(filled, Ordering::Relaxed) == filled {
            self.stripes
                .get_or_init(|| Stripes((0..stripes()).map(|_| Default::default()).collect()));
        }
    }
}

impl Stripes {
    /// Counts one answer: one that `earns` for the budget (`per_retry` of
    /// them earn a retry), one the host `accepted`, or both. Returns the
    /// batch for the caller to book once this thread's counts are full
    /// ([`Batch::full`]); until then, nothing.
    #[inline]
    pub(crate) fn count(&self, earns: bool, accepted: bool, per_retry: u32) -> Option<Batch> {
        self.count_at(slot(), earns, accepted, per_retry)
    }

    /// [`count`](Self::count) for the thread in `slot`.
    #[inline]
    fn count_at(&self, slot: usize, earns: bool, accepted: bool, per_retry: u32) -> Option<Batch> {
        let one = Batch::word(earns, accepted);
        // A power of two of stripes.
        let stripe = &self.0[slot & self.0.len().wrapping_sub(1)];
        let after = stripe.fetch_add(one, Ordering::Relaxed).wrapping_add(one);
        if !Batch::of(after).full(per_retry) {
            return None;
        }
        take(stripe)
    }

    /// Takes what every thread counted and has not booked: for a
    /// rejection, which brings the throttle's books up to date first.
    pub(crate) fn sweep(&self) -> Batch {
        note_shared_write();
        self.0.iter().map(|stripe| Batch::of(stripe.swap(0, Ordering::Relaxed))).fold(
            Batch::default(),
            |sum, batch| Batch {
                earned: sum.earned.saturating_add(batch.earned),
                accepted: sum.accepted.saturating_add(batch.accepted),
            },
        )
    }

    /// How many there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Takes a full batch from `stripe`.
#[cold]
fn take(stripe: &AtomicU64) -> Option<Batch> {
    // Another thread sharing the stripe, or a sweep, may have taken it
    // first: then this takes what came since, maybe nothing.
    let batch = Batch::of(stripe.swap(0, Ordering::Relaxed));
    (!batch.is_empty()).then_some(batch)
}

/// Stripes a busy host gets: one per core the process may run on, rounded
/// up to a power of two, from [`MIN_STRIPES`] to [`MAX_STRIPES`].
fn stripes() -> usize {
    static STRIPES: OnceLock<usize> = OnceLock::new();
    *STRIPES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        cores.next_power_of_two().clamp(MIN_STRIPES, MAX_STRIPES)
    })
}

/// Thread slots: the lowest free one is taken, and given back when its
/// thread ends.
#[derive(Debug, Default)]
struct Slots {
    next: usize,
    free: BinaryHeap<Reverse<usize>>,
}

impl Slots {
    fn take(&mut self) -> usize {
        match self.free.pop() {
            Some(Reverse(slot)) => slot,
            None => {
                self.next = self.next.saturating_add(1);
                self.next.saturating_sub(1)
            }
        }
    }

    fn give_back(&mut self, slot: usize) {
        self.free.push(Reverse(slot));
    }
}

/// The process's thread slots.
static SLOTS: Mutex<Slots> = Mutex::new(Slots { next: 0, free: BinaryHeap::new() });

fn lock(slots: &Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
    // Plain numbers, whole whatever a panicking holder left.
    slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A thread's slot, given back to `from` when the thread ends.
struct Slot {
    at: usize,
    from: &'static Mutex<Slots>,
}

impl Slot {
    fn take(from: &'static Mutex<Slots>) -> Self {
        Self { at: lock(from).take(), from }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(self.from).give_back(self.at);
    }
}

thread_local! {
    static SLOT: Slot = Slot::take(&SLOTS);
}

/// This thread's slot; 0 while the thread is ending.
#[inline]
fn slot() -> usize {
    SLOT.try_with(|slot| slot.at).unwrap_or(0)
}

#[cfg(test)]
thread_local! {
    static SHARED_WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Notes a write to memory that calls on other threads may write too.
/// Counted per thread in tests, for the test that the happy path makes
/// none but its batch bookings; nothing otherwise.
#[inline(always)]
pub(crate) fn note_shared_write() {
    #[cfg(test)]
    SHARED_WRITES.with(|writes| writes.set(writes.get().wrapping_add(1)));
}

/// The shared writes this thread has noted so far.
#[cfg(test)]
pub(crate) fn shared_writes() -> u64 {
    SHARED_WRITES.with(std::cell::Cell::get)
}

#[cfg(test)]
mod tests;
