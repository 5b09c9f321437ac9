//! The answers a fleet pools: each member's running totals for a host, as
//! the store holds them, and what two readings of them tell one member of
//! the others' answers in between.
//!
//! Each member adds to totals of its own, under its own name, so a reading
//! says how much each member added since the last: a member is trusted no
//! further than one process's plausible word. What one member added in a
//! pooling counts for at most [`most_from_one`] answers (twice this
//! member's own and two more), so a writer in the store that inflates a
//! member's totals, or makes one up, moves the pooled share no further
//! than one more member answered at this member's rate could. A writer who
//! makes up many members counts as many; [`MOST_MEMBERS`] are read at most.

use std::collections::HashMap;

/// Answers from one host, as the throttles of a fleet pool them:
/// accepted, and rejected (see [`RetryConfig`](crate::RetryConfig)'s
/// throttling for which are which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// Answers the host accepted.
    pub accepted: u64,
    /// Answers that turned the attempt away: `429`, `502`, `503`, `504`,
    /// refused connections and timeouts.
    pub rejected: u64,
}

impl Tally {
    /// Both kinds of answer together.
    fn total(self) -> u64 {
        self.accepted.saturating_add(self.rejected)
    }

    /// What `self`, a running total read back, grew by since `was`; `None`
    /// when it went back on either kind (the totals were lost and started
    /// again, or something else wrote them).
    fn since(self, was: Tally) -> Option<Tally> {
        Some(Tally {
            accepted: self.accepted.checked_sub(was.accepted)?,
            rejected: self.rejected.checked_sub(was.rejected)?,
        })
    }

    /// `self`, scaled down to `most` answers in all if it holds more, each
    /// kind in proportion (rounded down).
    fn clipped(self, most: u64) -> Tally {
        let total = u128::from(self.accepted).saturating_add(u128::from(self.rejected));
        if total <= u128::from(most) {
            return self;
        }
        // Two numbers below 2^64 multiply below 2^128; `total` is not zero.
        let part = |n: u64| {
            let scaled = u128::from(n).saturating_mul(u128::from(most)).checked_div(total);
            scaled.map_or(0, |scaled| u64::try_from(scaled).unwrap_or(u64::MAX))
        };
        Tally { accepted: part(self.accepted), rejected: part(self.rejected) }
    }

    pub(super) fn plus(self, other: Tally) -> Tally {
        Tally {
            accepted: self.accepted.saturating_add(other.accepted),
            rejected: self.rejected.saturating_add(other.rejected),
        }
    }
}

/// One member's running totals for a host, as a store reads them back
/// ([`FleetStore::share_tallies`](super::FleetStore::share_tallies)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberTally {
    /// The member's name, as it was given to the store.
    pub member: String,
    /// What the member has added to the host's totals so far.
    pub tally: Tally,
}

/// The members of a host's totals one reading takes in at most, in the
/// order of their names; the rest are ignored (and counted).
pub(super) const MOST_MEMBERS: usize = 256;

/// The most answers one other member may be believed to have added in a
/// pooling, given `own`, what this member added in it: twice as many, and
/// two more, so that a member as busy as this one, or a little busier, is
/// heard in full, and a quiet one's first answers count.
pub(super) fn most_from_one(own: Tally) -> u64 {
    own.total().saturating_mul(2).saturating_add(2)
}

/// What one reading of a host's totals tells a member.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Reading {
    /// The members' totals as read, this member's own left out: where the
    /// next reading counts from.
    pub(super) totals: HashMap<String, Tally>,
    /// The other members' answers since the last reading, each member's
    /// clipped to one member's plausible word.
    pub(super) others: Tally,
    /// Members left out: beyond [`MOST_MEMBERS`], or whose totals went
    /// back (they count from this reading on).
    pub(super) ignored: u64,
}

/// Reads `members`, a host's totals just after this member, `own`, wrote
/// its own, `added` more than the last, against `before`, the last reading's (`None` for a
/// first reading, which only sets where the next counts from). A member
/// that is new since the last reading counts from this one too.
pub(super) fn read(
    before: Option<&HashMap<String, Tally>>,
    mut members: Vec<MemberTally>,
    own: &str,
    added: Tally,
) -> Reading {
    members.retain(|member| member.member != own);
    members.sort_unstable_by(|a, b| a.member.cmp(&b.member));
    let mut reading = Reading::default();
    if members.len() > MOST_MEMBERS {
        reading.ignored = u64::try_from(members.len().saturating_sub(MOST_MEMBERS)).unwrap_or(0);
        members.truncate(MOST_MEMBERS);
    }
    let most = most_from_one(added);
    for MemberTally { member, tally } in members {
        if let Some(was) = before.and_then(|before| before.get(&member)) {
            match tally.since(*was) {
                Some(grew) => reading.others = reading.others.plus(grew.clipped(most)),
                None => reading.ignored = reading.ignored.saturating_add(1),
            }
        }
        reading.totals.insert(member, tally);
    }
    reading
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, accepted: u64, rejected: u64) -> MemberTally {
        MemberTally { member: name.to_owned(), tally: Tally { accepted, rejected } }
    }

    fn tally(accepted: u64, rejected: u64) -> Tally {
        Tally { accepted, rejected }
    }

    #[test]
    fn a_first_reading_only_sets_where_the_next_counts_from() {
        let first = read(None, vec![member("b", 5, 1), member("a", 0, 0)], "a", tally(0, 0));
        assert_eq!(first.others, Tally::default());
        assert_eq!(first.totals.len(), 1, "its own left out: {:?}", first.totals);
        let next = read(Some(&first.totals), vec![member("b", 7, 2)], "a", tally(1, 0));
        assert_eq!(next.others, tally(2, 1));
    }

    #[test]
    fn a_member_is_believed_no_further_than_twice_this_one_and_two() {
        let before = read(None, vec![member("b", 0, 0), member("c", 0, 0)], "a", tally(0, 0));
        // This member added 3: another may have added 8 at most.
        let members = vec![member("b", 2, 4), member("c", 0, 500_000)];
        let next = read(Some(&before.totals), members, "a", tally(3, 0));
        assert_eq!(most_from_one(tally(3, 0)), 8);
        assert_eq!(next.others, tally(2, 4 + 8), "b in full, c clipped to 8");
        let both = tally(100, 300).clipped(8);
        assert_eq!(both, tally(2, 6), "each kind in proportion");
        assert_eq!(tally(u64::MAX, u64::MAX).clipped(8).total(), 8, "no overflow");
    }

    #[test]
    fn totals_that_went_back_are_ignored_and_counted_from_again() {
        let before = read(None, vec![member("b", 10, 10)], "a", tally(0, 0));
        let back = read(Some(&before.totals), vec![member("b", 3, 12)], "a", tally(1, 0));
        assert_eq!((back.others, back.ignored), (Tally::default(), 1));
        let after = read(Some(&back.totals), vec![member("b", 4, 12)], "a", tally(1, 0));
        assert_eq!(after.others, tally(1, 0));
    }

    #[test]
    fn members_past_the_most_read_are_ignored_in_the_order_of_their_names() {
        let names: Vec<String> = (0..MOST_MEMBERS + 10).map(|n| format!("m{n:04}")).collect();
        let all = |n: u64| names.iter().map(|name| member(name, n, 0)).collect::<Vec<_>>();
        let before = read(None, all(0), "own", tally(0, 0));
        assert_eq!((before.totals.len(), before.ignored), (MOST_MEMBERS, 10));
        let next = read(Some(&before.totals), all(1), "own", tally(1, 0));
        assert_eq!(next.others, tally(MOST_MEMBERS as u64, 0));
        assert!(
            next.totals.contains_key("m0000") && !next.totals.contains_key(&names[MOST_MEMBERS])
        );
    }
}
