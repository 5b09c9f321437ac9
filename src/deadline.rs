//! The time a call and its attempts may take: the call's deadline, and the
//! timeout an attempt carries. Pure arithmetic on instants and durations;
//! the clock is read by the caller.

use std::time::{Duration, Instant};

/// When a call with a deadline started, and how long it may take.
#[derive(Clone, Copy)]
pub(crate) struct Deadline {
    pub(crate) start: Instant,
    pub(crate) limit: Duration,
}

impl Deadline {
    /// The time left at `now`: zero once the deadline has passed.
    pub(crate) fn left(self, now: Instant) -> Duration {
        self.limit.saturating_sub(now.saturating_duration_since(self.start))
    }

    /// When the deadline passes; `None` when too far off for an `Instant`.
    pub(crate) fn at(self) -> Option<Instant> {
        self.start.checked_add(self.limit)
    }
}

/// The least time a retry must have left before the deadline.
pub(crate) const MIN_ATTEMPT: Duration = Duration::from_millis(10);

/// The timeout of an attempt that the middleware can see: the shorter of
/// the request's own and the configured attempt timeout. (The client's own
/// default is not visible from a middleware.)
pub(crate) fn visible_timeout(
    own: Option<Duration>,
    attempt: Option<Duration>,
) -> Option<Duration> {
    tightest(own, attempt)
}

/// How an attempt is bounded, from its `visible` timeout and, with a
/// deadline, the time `left` before it at `now`: the timeout to put on the
/// request (the shorter of the two), or, when the attempt has no timeout
/// the middleware can see, the instant to cut it at. A deadline too far off
/// for an `Instant` never cuts.
pub(crate) fn attempt_bounds(
    visible: Option<Duration>,
    left: Option<(Instant, Duration)>,
) -> (Option<Duration>, Option<Instant>) {
    match (visible, left) {
        (visible, None) => (visible, None),
        (Some(visible), Some((_, left))) => (Some(visible.min(left)), None),
        (None, Some((now, left))) => (None, now.checked_add(left)),
    }
}

/// The tighter of two optional bounds, or whichever is set: the shorter
/// timeout, the earlier instant.
pub(crate) fn tightest<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tightest_bound_is_the_one_set_or_the_smaller() {
        let (one, two) = (Some(Duration::from_secs(1)), Some(Duration::from_secs(2)));
        assert_eq!(tightest(one, two), one);
        assert_eq!(tightest(two, one), one);
        assert_eq!(tightest(None, two), two);
        assert_eq!(tightest(two, None), two);
        assert_eq!(tightest::<Duration>(None, None), None);
    }

    #[test]
    fn an_attempt_is_cut_on_the_clock_only_without_a_visible_timeout() {
        let (now, second) = (Instant::now(), Duration::from_secs(1));
        assert_eq!(attempt_bounds(Some(second), None), (Some(second), None));
        assert_eq!(attempt_bounds(None, None), (None, None));
        assert_eq!(attempt_bounds(Some(second), Some((now, 2 * second))), (Some(second), None));
        assert_eq!(attempt_bounds(Some(2 * second), Some((now, second))), (Some(second), None));
        assert_eq!(attempt_bounds(None, Some((now, second))), (None, Some(now + second)));
        assert_eq!(attempt_bounds(None, Some((now, Duration::MAX))), (None, None));
    }

    #[test]
    fn the_time_left_never_goes_below_zero() {
        let start = Instant::now();
        let deadline = Deadline { start, limit: Duration::from_secs(1) };
        assert_eq!(deadline.left(start), Duration::from_secs(1));
        assert_eq!(deadline.left(start + Duration::from_secs(5)), Duration::ZERO);
        assert_eq!(deadline.at(), Some(start + Duration::from_secs(1)));
        assert_eq!(Deadline { start, limit: Duration::MAX }.at(), None);
    }
}
