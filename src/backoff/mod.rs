//! Exponential backoff and the jitter that spreads it: the settings, and
//! (in `curve`) the arithmetic of each wait. No clock is read and nothing
//! sleeps, so the arithmetic is easy to check exhaustively and cannot panic
//! for any input.

use std::time::Duration;

use crate::error::ConfigError;

mod curve;

pub(crate) use curve::{backoff, ceiling, scale};

/// How the wait before a retry grows: from `initial` (the first retry's
/// ceiling), doubling per retry up to `max`, with [`Jitter`] picking the
/// wait below each ceiling.
///
/// | setting | default | why |
/// |---|---|---|
/// | `initial` | 500 ms | the first wait's ceiling; long enough for a connection pool or a pod to turn over |
/// | `max` | 30 s | no single wait longer than a user would sit through |
/// | `jitter` | [`Jitter::Full`] | spreads clients the most, so a recovering server is not hit in waves |
///
/// ```
/// use std::time::Duration;
/// use reqwest_safe_retry::{Backoff, Jitter, RetryConfig};
///
/// let backoff = Backoff::default()
///     .with_initial(Duration::from_millis(100))
///     .with_max(Duration::from_secs(5))
///     .with_jitter(Jitter::Equal);
/// let config = RetryConfig::builder().with_backoff(backoff).build()?;
/// assert_eq!(config.backoff().initial(), Duration::from_millis(100));
/// # Ok::<(), reqwest_safe_retry::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
            jitter: Jitter::Full,
        }
    }
}

impl Backoff {
    /// The ceiling of the first retry's wait; no greater than
    /// [`max`](Self::with_max).
    pub fn with_initial(mut self, initial: Duration) -> Self {
        self.initial = initial;
        self
    }

    /// The longest wait, whatever the retry.
    pub fn with_max(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }

    /// How the wait is picked below each ceiling.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The ceiling of the first retry's wait.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The longest wait.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// How the wait is picked below each ceiling.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The wait before retry `retry` (0 for the first), from `previous`
    /// (the last one picked, or `initial`) and a random `unit` in `[0, 1]`.
    pub(crate) fn wait(&self, retry: u32, previous: Duration, unit: f64) -> Duration {
        backoff(self.jitter, self.initial, self.max, retry, previous, unit)
    }

    /// The ceiling of retry `retry`'s wait (0 for the first).
    pub(crate) fn ceiling(&self, retry: u32) -> Duration {
        ceiling(self.initial, self.max, retry)
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.initial > self.max {
            return Err(ConfigError::new(
                "backoff.initial",
                format!(
                    "{:?} ({:?} unless set) is greater than `backoff.max` ({:?}): lower \
                     the initial wait with `with_initial`, or raise the maximum",
                    self.initial,
                    Self::default().initial,
                    self.max
                ),
            ));
        }
        Ok(())
    }
}

/// How the wait before a retry is picked below the exponential ceiling.
///
/// The ceiling for retry `n` (counting from zero) is
/// `min(max, initial × 2ⁿ)` of the [`Backoff`]. Jitter spreads the clients that
/// failed together so that they do not come back together: without it, a
/// thousand clients that saw the same outage retry in lock-step and knock the
/// recovering server over again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// Uniform in `[0, ceiling]`. The default: in AWS's simulations it does the
    /// least total work of the common schemes and finishes soonest.
    #[default]
    Full,
    /// Half the ceiling fixed, half random: uniform in `[ceiling / 2, ceiling]`.
    /// Always waits a real amount, at the cost of more clustering than `Full`.
    Equal,
    /// AWS's "decorrelated" jitter: uniform in
    /// `[initial, min(max, 3 × previous wait)]`, so each wait
    /// grows from the one before rather than from the retry number.
    Decorrelated,
    /// No randomness: always the ceiling. Predictable, and the worst choice
    /// for a fleet of clients; useful for tests and comparisons.
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn ceiling_doubles_then_caps() {
        let got: Vec<_> = (0..6).map(|n| ceiling(100 * MS, 1000 * MS, n)).collect();
        let want = [100, 200, 400, 800, 1000, 1000].map(|ms| ms * MS);
        assert_eq!(got, want);
    }

    #[test]
    fn ceiling_survives_huge_retry_numbers() {
        assert_eq!(ceiling(MS, Duration::from_secs(30), 31), Duration::from_secs(30));
        assert_eq!(ceiling(MS, Duration::from_secs(30), 32), Duration::from_secs(30));
        assert_eq!(ceiling(MS, Duration::from_secs(30), u32::MAX), Duration::from_secs(30));
        assert_eq!(ceiling(Duration::MAX, Duration::MAX, 5), Duration::MAX);
        assert_eq!(ceiling(Duration::ZERO, Duration::MAX, u32::MAX), Duration::ZERO);
    }

    #[test]
    fn scale_hits_both_ends_exactly() {
        let d = Duration::from_millis(400);
        assert_eq!(scale(d, 0.0), Duration::ZERO);
        assert_eq!(scale(d, 1.0), d);
        assert_eq!(scale(d, 0.5), Duration::from_millis(200));
        assert_eq!(scale(Duration::MAX, 1.0), Duration::MAX);
    }

    #[test]
    fn scale_clamps_out_of_range_units() {
        let d = Duration::from_secs(1);
        assert_eq!(scale(d, -3.0), Duration::ZERO);
        assert_eq!(scale(d, 7.5), d);
        assert_eq!(scale(d, f64::NAN), Duration::ZERO);
        assert_eq!(scale(d, f64::INFINITY), d);
    }

    #[test]
    fn full_jitter_spans_zero_to_ceiling() {
        let b = |unit| backoff(Jitter::Full, 100 * MS, 30_000 * MS, 2, MS, unit);
        assert_eq!(b(0.0), Duration::ZERO);
        assert_eq!(b(1.0), 400 * MS);
        assert_eq!(b(0.25), 100 * MS);
    }

    #[test]
    fn equal_jitter_keeps_half_fixed() {
        let b = |unit| backoff(Jitter::Equal, 100 * MS, 30_000 * MS, 2, MS, unit);
        assert_eq!(b(0.0), 200 * MS);
        assert_eq!(b(1.0), 400 * MS);
    }

    #[test]
    fn no_jitter_is_the_ceiling() {
        let b = |retry| backoff(Jitter::None, 100 * MS, 300 * MS, retry, MS, 0.3);
        assert_eq!([b(0), b(1), b(2)], [100 * MS, 200 * MS, 300 * MS]);
    }

    #[test]
    fn decorrelated_grows_from_the_previous_wait() {
        let b = |prev, unit| backoff(Jitter::Decorrelated, 100 * MS, 1000 * MS, 0, prev, unit);
        assert_eq!(b(100 * MS, 0.0), 100 * MS);
        assert_eq!(b(100 * MS, 1.0), 300 * MS);
        assert_eq!(b(300 * MS, 1.0), 900 * MS);
        assert_eq!(b(900 * MS, 1.0), 1000 * MS);
        // A previous wait below the floor still yields at least the floor.
        assert_eq!(b(Duration::ZERO, 1.0), 100 * MS);
    }

    #[test]
    fn every_kind_stays_under_the_cap_at_the_extremes() {
        let kinds = [Jitter::Full, Jitter::Equal, Jitter::Decorrelated, Jitter::None];
        let durations = [Duration::ZERO, MS, Duration::from_secs(30), Duration::MAX];
        for jitter in kinds {
            for initial in durations {
                for max in durations.into_iter().filter(|max| *max >= initial) {
                    for retry in [0, 1, 31, 32, 63, 64, u32::MAX] {
                        for unit in [0.0, 0.5, 1.0] {
                            let wait = backoff(jitter, initial, max, retry, Duration::MAX, unit);
                            assert!(wait <= max, "{jitter:?} {initial:?} {max:?} {retry}");
                        }
                    }
                }
            }
        }
    }

    fn any_duration() -> impl proptest::strategy::Strategy<Value = Duration> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::MAX),
            (0u64..100_000).prop_map(Duration::from_millis),
            (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        ]
    }

    proptest::proptest! {
        #[test]
        fn backoff_stays_under_the_cap_for_any_input(
            a in any_duration(),
            b in any_duration(),
            kind in 0usize..4,
            retry in proptest::prelude::any::<u32>(),
            previous in any_duration(),
            unit in proptest::prelude::any::<f64>(),
        ) {
            let jitter = [Jitter::Full, Jitter::Equal, Jitter::Decorrelated, Jitter::None][kind];
            let (initial, max) = if a <= b { (a, b) } else { (b, a) };
            let wait = backoff(jitter, initial, max, retry, previous, unit);
            proptest::prop_assert!(wait <= max);
            if jitter == Jitter::None || jitter == Jitter::Equal {
                // Both keep at least half the ceiling, which grows with the retry.
                let floor = backoff(jitter, initial, max, retry, previous, 0.0);
                proptest::prop_assert!(floor <= wait);
            }
        }
    }
}
