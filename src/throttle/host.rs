//! A host's throttle as the ledger keeps it: its books behind a lock, and
//! what lets a calm host's answers be counted without it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::{Answer, Books, FOLD};
use crate::rate_limit::Throttled;
use crate::stripes::note_shared_write;

/// A host's throttle: its books, and what lets a calm host skip them.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    /// Whether the host needs watching: set by a rejection, cleared once
    /// the books are calm.
    watched: AtomicBool,
    /// Accepted answers tallied and not yet in the books.
    tallied: AtomicU32,
    books: Mutex<Books>,
}

impl Throttle {
    pub(super) fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        // The books are plain numbers, valid whatever a panicking holder
        // left.
        self.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the host needs watching now.
    pub(crate) fn watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed)
    }

    /// Counts `answers` accepted answers with no time read, booked by one
    /// thread's batch ([`crate::stripes`]). Returns whether to bring them
    /// into the books now ([`fold`](Self::fold)): every [`FOLD`] of them,
    /// or at once if the host became watched since they were counted.
    pub(crate) fn tally(&self, answers: u32) -> bool {
        note_shared_write();
        let tallied = self.tallied.fetch_add(answers, Ordering::Relaxed).wrapping_add(answers);
        tallied >= FOLD || self.watched()
    }

    /// Brings the tallied answers into the books at `now`.
    pub(crate) fn fold(&self, now: u64) {
        note_shared_write();
        let answers = self.tallied.swap(0, Ordering::Relaxed);
        if answers > 0 {
            self.books().fold(now, answers);
        }
    }

    /// A first attempt asks to go at `now` (see [`Books::ask`]); a host
    /// that is not watched lets it go untouched. A call kept back is told
    /// what the books held then.
    pub(crate) fn ask(&self, now: u64) -> Result<(), Throttled> {
        if !self.watched() {
            return Ok(());
        }
        note_shared_write();
        let mut books = self.books();
        let goes = books.ask(now);
        if books.calm(now) {
            self.watched.store(false, Ordering::Relaxed);
        }
        if goes { Ok(()) } else { Err(books.kept_back()) }
    }

    /// Takes in an answer at `now`. Returns whether the host is watched
    /// after it.
    pub(crate) fn observe(&self, now: u64, answer: Answer) -> bool {
        note_shared_write();
        let answers = self.tallied.swap(0, Ordering::Relaxed);
        let mut books = self.books();
        if answers > 0 {
            books.fold(now, answers);
        }
        books.observe(now, answer);
        let watched = !books.calm(now);
        self.watched.store(watched, Ordering::Relaxed);
        watched
    }

    /// Takes in, at `now`, the answers the other processes of a fleet got
    /// from the host (see [`Books::pool`]). Returns whether the host is
    /// watched after it: when the fleet's evidence cut its share.
    #[cfg(feature = "fleet")]
    pub(crate) fn pool(&self, now: u64, accepted: u32, rejected: u32) -> bool {
        let mut books = self.books();
        books.pool(now, accepted, rejected);
        let watched = self.watched() || !books.calm(now);
        self.watched.store(watched, Ordering::Relaxed);
        watched
    }

    /// This process's answers since a fleet last took them, accepted and
    /// rejected, with the tally brought into the books at `now` first.
    #[cfg(feature = "fleet")]
    pub(crate) fn take_unshared(&self, now: u64) -> (u32, u32) {
        let answers = self.tallied.swap(0, Ordering::Relaxed);
        let mut books = self.books();
        if answers > 0 {
            books.fold(now, answers);
        }
        books.take_unshared()
    }

    /// Accepted answers in the books (decayed) and tallied, not yet in
    /// them.
    #[cfg(test)]
    pub(crate) fn accepted(&self) -> (f64, u32) {
        (self.books().accepted, self.tallied.load(Ordering::Relaxed))
    }

    /// Whether the host may be forgotten at `now`: nothing is being
    /// watched, or what is has gone stale ([`Books::stale`]).
    pub(crate) fn idle(&self, now: u64) -> bool {
        !self.watched() || self.books().stale(now)
    }
}
