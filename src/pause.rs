//! A host's pause: the time a server asked every client to keep away until,
//! shared by every call to that host, and the one probe let through when it
//! ends.
//!
//! # Why one probe, and not everyone at the end of the pause
//!
//! A server that answers `429` with `Retry-After: 2` to one call has told
//! the whole process to keep away for two seconds; the calls that meet the
//! pause wait for it instead of each asking again. When it ends, one
//! request goes first, the *probe*: it alone learns whether the server
//! serves again. If it is told to wait again, the host is paused again and
//! the others never sent a request; if it is answered, the host is open and
//! the waiting calls go, each after a spread of its own. So a host that
//! keeps asking for pauses gets one request per pause from the process,
//! whatever the number of calls waiting, and a fleet of processes one each.
//!
//! Times are milliseconds on the owner's timeline.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where a host stands for a call about to send to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// No pause: send.
    Open,
    /// The pause is over and this call is its probe: send, and settle the
    /// pause with the outcome (or give the probe back).
    Probe,
    /// Paused until this time: wait.
    Until(u64),
    /// The pause is over and another call's probe is in flight: wait a
    /// little and look again.
    Probing,
}

/// The state of one host's pause, in one word: `0` for none, else twice
/// (the end of the pause plus one), plus one while a probe is in flight.
#[derive(Debug, Default)]
pub(crate) struct Pause {
    word: AtomicU64,
}

/// The flag of a probe in flight.
const PROBING: u64 = 1;

fn encode(until: u64) -> u64 {
    // Plus one, so that a pause until 0 is not "no pause"; a time of half
    // the range saturates, some 146 million years on.
    until.saturating_add(1).min(u64::MAX / 2).saturating_mul(2)
}

fn decode(word: u64) -> u64 {
    (word / 2).saturating_sub(1)
}

impl Pause {
    /// Where the host stands at `now`; claims the probe when the pause is
    /// over and no probe is in flight.
    pub(crate) fn check(&self, now: u64) -> Gate {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word == 0 {
                return Gate::Open;
            }
            if word & PROBING != 0 {
                return Gate::Probing;
            }
            let until = decode(word);
            if now < until {
                return Gate::Until(until);
            }
            // The flag is clear here.
            match self.word.compare_exchange_weak(
                word,
                word | PROBING,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Gate::Probe,
                Err(seen) => word = seen,
            }
        }
    }

    /// Pauses the host until `until`, or keeps a later pause already set:
    /// an answer sent before another may arrive after it. A probe in
    /// flight stays claimed. Returns whether the pause now ends later than
    /// it did.
    pub(crate) fn pause(&self, until: u64) -> bool {
        let before = self.word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
            let later = if word == 0 { until } else { decode(word).max(until) };
            // `encode` leaves the flag's bit clear: the old flag goes on as it was.
            Some(encode(later) | (word & PROBING))
        });
        // The closure never refuses: `before` is the word it replaced.
        let before = before.unwrap_or_else(|word| word);
        before == 0 || decode(before) < until
    }

    /// The probe's outcome: the server asked for a new pause, until
    /// `until` (or a later one set meanwhile holds), or it did not and the
    /// host is open again.
    pub(crate) fn settle(&self, until: Option<u64>) {
        let _ = self.word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
            // A word of 0 decodes to 0: a new pause is simply `until`.
            Some(until.map_or(0, |until| encode(decode(word).max(until))))
        });
    }

    /// A probe that ended with no outcome (cancelled, or cut by its
    /// deadline) gives its turn back: the next call to look sends one.
    pub(crate) fn give_back(&self) {
        self.word.fetch_and(!PROBING, Ordering::AcqRel);
    }

    /// When the last pause set ends (or ended), its probe in flight or
    /// not: none if none was set, or its probe settled it.
    #[cfg(feature = "fleet")]
    pub(crate) fn end(&self) -> Option<u64> {
        let word = self.word.load(Ordering::Acquire);
        (word != 0).then(|| decode(word))
    }

    /// When the pause in force at `now` ends: none if there is none, it
    /// has ended, or its probe is in flight.
    #[cfg(feature = "fleet")]
    pub(crate) fn ends(&self, now: u64) -> Option<u64> {
        let word = self.word.load(Ordering::Acquire);
        if word == 0 || word & PROBING != 0 {
            return None;
        }
        let until = decode(word);
        (now < until).then_some(until)
    }

    /// No pause, and none in flight: the host may be forgotten as far as
    /// its pause goes. A pause over at `now` whose probe no call has sent
    /// may go too, once `grace` has passed since it ended: the host has not
    /// been called since, and if it is again it starts open.
    pub(crate) fn may_forget(&self, now: u64, grace: u64) -> bool {
        let word = self.word.load(Ordering::Acquire);
        word == 0 || (word & PROBING == 0 && now >= decode(word).saturating_add(grace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_starts_open_and_a_pause_holds_it_until_its_end() {
        let pause = Pause::default();
        assert_eq!(pause.check(0), Gate::Open);
        pause.pause(2000);
        for now in [0, 1999] {
            assert_eq!(pause.check(now), Gate::Until(2000), "at {now}");
        }
    }

    #[test]
    fn the_first_call_after_the_end_is_the_probe_and_the_rest_wait_for_it() {
        let pause = Pause::default();
        pause.pause(2000);
        assert_eq!(pause.check(2000), Gate::Probe);
        assert_eq!(pause.check(2001), Gate::Probing);
        assert_eq!(pause.check(9000), Gate::Probing, "however late");
    }

    #[test]
    fn a_probe_answered_opens_the_host() {
        let pause = Pause::default();
        pause.pause(2000);
        assert_eq!(pause.check(2000), Gate::Probe);
        pause.settle(None);
        assert_eq!(pause.check(2001), Gate::Open);
        assert_eq!(pause.check(0), Gate::Open, "for good");
    }

    #[test]
    fn a_probe_told_to_wait_pauses_the_host_again() {
        let pause = Pause::default();
        pause.pause(2000);
        assert_eq!(pause.check(2000), Gate::Probe);
        pause.settle(Some(4000));
        assert_eq!(pause.check(3000), Gate::Until(4000));
        assert_eq!(pause.check(4000), Gate::Probe, "one probe for the next window too");
        // A longer pause set while the probe was in flight holds.
        pause.pause(9000);
        pause.settle(Some(5000));
        assert_eq!(pause.check(6000), Gate::Until(9000));
    }

    #[test]
    fn a_probe_given_back_lets_the_next_call_probe() {
        let pause = Pause::default();
        pause.pause(2000);
        assert_eq!(pause.check(2000), Gate::Probe);
        pause.give_back();
        assert_eq!(pause.check(2100), Gate::Probe);
        assert_eq!(pause.check(2100), Gate::Probing);
    }

    #[test]
    fn the_later_of_two_pauses_holds_and_a_probe_stays_claimed() {
        let pause = Pause::default();
        assert!(pause.pause(5000), "a new pause");
        assert!(!pause.pause(3000), "an earlier end changes nothing");
        assert!(!pause.pause(5000), "nor the same one");
        assert_eq!(pause.check(4000), Gate::Until(5000), "an earlier end does not shorten it");
        assert!(pause.pause(6000), "a later end");
        assert_eq!(pause.check(5500), Gate::Until(6000));
        assert_eq!(pause.check(6000), Gate::Probe);
        // An answer to a request sent before the pause arrives during the
        // probe: the probe is still the one in flight.
        pause.pause(7000);
        assert_eq!(pause.check(8000), Gate::Probing);
    }

    #[test]
    fn a_pause_at_time_zero_and_at_the_end_of_time_are_pauses() {
        let pause = Pause::default();
        pause.pause(0);
        assert_eq!(pause.check(0), Gate::Probe);
        let late = Pause::default();
        late.pause(u64::MAX);
        // Saturated at half the range: still a pause, for aeons.
        assert_eq!(late.check(1 << 40), Gate::Until(u64::MAX / 2 - 1));
    }

    #[cfg(feature = "fleet")]
    #[test]
    fn a_pause_tells_its_end_while_it_holds() {
        let pause = Pause::default();
        assert_eq!(pause.ends(0), None);
        pause.pause(2000);
        assert_eq!(pause.ends(1999), Some(2000));
        assert_eq!(pause.ends(2000), None, "over");
        assert_eq!(pause.check(2000), Gate::Probe);
        pause.pause(3000);
        assert_eq!(pause.ends(2500), None, "its probe in flight");
        assert_eq!(pause.end(), Some(3000), "the end, the probe in flight or not");
        pause.settle(None);
        assert_eq!(pause.end(), None);
    }

    #[test]
    fn only_a_host_with_no_pause_in_force_or_in_flight_may_be_forgotten() {
        let pause = Pause::default();
        assert!(pause.may_forget(0, 100));
        pause.pause(2000);
        assert!(!pause.may_forget(1999, 100), "paused");
        assert!(!pause.may_forget(2099, 100), "within the grace");
        assert!(pause.may_forget(2100, 100), "over, and no one came");
        assert_eq!(pause.check(2100), Gate::Probe);
        assert!(!pause.may_forget(9000, 100), "a probe in flight");
        pause.settle(None);
        assert!(pause.may_forget(9000, 100));
    }
}
