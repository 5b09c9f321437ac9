//! Runs of answers of one kind in a row, and when a run is long enough to
//! say the host changed: a run of rejections that it went down, a run of
//! accepted answers that it stopped turning attempts away.

use super::{LONGEST_RUN, RUN_FACTOR};

/// A run of answers of one kind in a row, and how long it must be to say
/// something new: set as the run begins, from the books then, so that the
/// run's own answers do not move its goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Streak {
    /// Answers in the run so far.
    pub(super) length: u32,
    /// The length at which it says the host changed.
    pub(super) needed: u32,
}

impl Streak {
    /// No run yet; one that began now would need `needed`.
    pub(super) const fn new(needed: u32) -> Self {
        Self { length: 0, needed }
    }

    /// Adds `answers` to the run. A run that begins with them needs
    /// `needed`, the books' figure before them.
    pub(super) fn extend(&mut self, answers: u32, needed: u32) {
        if answers == 0 {
            return;
        }
        if self.length == 0 {
            self.needed = needed;
        }
        self.length = self.length.saturating_add(answers);
    }

    /// Ends the run: an answer of the other kind came.
    pub(super) fn end(&mut self) {
        self.length = 0;
    }

    /// Whether the run is long enough to say the host changed.
    pub(super) fn long(&self) -> bool {
        self.length >= self.needed
    }

    /// Answers in the run from the one that made it long, that one
    /// included; 0 while it is not.
    pub(super) fn past(&self) -> u32 {
        if self.long() { self.length.saturating_sub(self.needed).saturating_add(1) } else { 0 }
    }
}

/// How long a run of answers of one kind must be to say the host changed,
/// when the books hold `answered` answers of which `other` were of the
/// other kind: [`RUN_FACTOR`] times the answers per answer of the other
/// kind, so that such a run comes by chance about once in e⁴ (a run of `n`
/// where the other kind is a share `q` of the answers comes with odds
/// `(1 − q)ⁿ`, and `(1 − q)^(4 / q)` is at most e⁻⁴). At least `least`, at
/// most [`LONGEST_RUN`].
pub(super) fn needed(answered: f64, other: f64, least: u32) -> u32 {
    let run = (RUN_FACTOR * answered / other.max(f64::MIN_POSITIVE)).ceil();
    // In range, so the cast loses nothing.
    run.clamp(f64::from(least), f64::from(LONGEST_RUN)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_takes_its_goal_as_it_begins_and_keeps_it() {
        let mut run = Streak::new(10);
        run.extend(1, 12);
        assert_eq!(run.needed, 12);
        run.extend(3, 50);
        assert_eq!((run.length, run.needed), (4, 12), "the goal is the one it began with");
        run.extend(0, 99);
        assert_eq!(run.length, 4, "no answers add nothing");
        run.end();
        run.extend(2, 7);
        assert_eq!((run.length, run.needed), (2, 7));
    }

    #[test]
    fn a_run_is_long_from_its_goal_on() {
        let mut run = Streak::new(3);
        run.extend(2, 3);
        assert!(!run.long());
        assert_eq!(run.past(), 0);
        run.extend(1, 3);
        assert!(run.long());
        assert_eq!(run.past(), 1);
        run.extend(2, 3);
        assert_eq!(run.past(), 3);
    }

    #[test]
    fn the_run_needed_is_four_times_the_answers_per_other_one() {
        // One in four of the other kind: 16, as 4 × 40 / 10.
        assert_eq!(needed(40.0, 10.0, 1), 16);
        // Rounded up, and held between the least and the longest.
        assert_eq!(needed(40.0, 30.0, 1), 6);
        assert_eq!(needed(40.0, 39.0, 10), 10);
        assert_eq!(needed(40.0, 0.0, 1), LONGEST_RUN);
    }
}
