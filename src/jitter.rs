//! Where the randomness behind jitter comes from.
//!
//! The middleware asks a [`JitterSource`] for one number in `[0, 1]` per
//! retry and scales it under the backoff ceiling. Swapping the source is how a
//! test pins every wait, and how a simulation becomes reproducible.

use std::fmt;
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// A source of random numbers in `[0, 1]` for jitter.
///
/// Values outside the range are clamped and NaN counts as `0`, so a faulty
/// source can skew waits but never push one past its ceiling.
///
/// Any `Fn() -> f64 + Send + Sync` closure is a source too:
///
/// ```
/// use reqwest_safe_retry::RetryMiddleware;
///
/// // Always wait half the ceiling.
/// let middleware = RetryMiddleware::default().with_jitter_source(|| 0.5);
/// # let _ = middleware;
/// ```
pub trait JitterSource: Send + Sync {
    /// Returns a number in `[0, 1]`.
    fn unit(&self) -> f64;
}

impl<F> JitterSource for F
where
    F: Fn() -> f64 + Send + Sync,
{
    fn unit(&self) -> f64 {
        self()
    }
}

/// The default source: the thread-local generator of the `rand` crate.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRngJitter;

impl JitterSource for ThreadRngJitter {
    fn unit(&self) -> f64 {
        rand::rng().random::<f64>()
    }
}

/// A seeded, reproducible source: the same seed and the same order of calls
/// give the same numbers. Meant for simulations and tests; shared callers take
/// turns on one lock.
pub struct SeededJitter {
    rng: Mutex<StdRng>,
}

impl SeededJitter {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self { rng: Mutex::new(StdRng::seed_from_u64(seed)) }
    }
}

impl fmt::Debug for SeededJitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeededJitter").finish_non_exhaustive()
    }
}

impl JitterSource for SeededJitter {
    fn unit(&self) -> f64 {
        // A poisoned lock only means another caller panicked mid-draw; the
        // generator state is still a valid generator state.
        let mut rng = self.rng.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        rng.random::<f64>()
    }
}

/// A source that always answers the same number, so every wait is exact.
///
/// `FixedJitter::TOP` picks the top of each range (the ceiling for
/// [`Jitter::Full`](crate::Jitter::Full)), `FixedJitter::BOTTOM` the bottom.
#[cfg(feature = "test-util")]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedJitter(f64);

#[cfg(feature = "test-util")]
impl FixedJitter {
    /// Always the top of the range.
    pub const TOP: Self = Self(1.0);
    /// Always the bottom of the range.
    pub const BOTTOM: Self = Self(0.0);

    /// Always `unit`, clamped to `[0, 1]` (NaN becomes `0`).
    pub fn new(unit: f64) -> Self {
        Self(if unit.is_nan() { 0.0 } else { unit.clamp(0.0, 1.0) })
    }
}

#[cfg(feature = "test-util")]
impl JitterSource for FixedJitter {
    fn unit(&self) -> f64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_sources_repeat_themselves() {
        let a = SeededJitter::new(7);
        let b = SeededJitter::new(7);
        let xs: Vec<f64> = (0..5).map(|_| a.unit()).collect();
        let ys: Vec<f64> = (0..5).map(|_| b.unit()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (0.0..=1.0).contains(x)));
        assert_ne!(xs[0], xs[1]);
    }

    #[test]
    fn thread_rng_stays_in_range_and_spreads_over_it() {
        let xs: Vec<f64> = (0..1000).map(|_| ThreadRngJitter.unit()).collect();
        assert!(xs.iter().all(|x| (0.0..=1.0).contains(x)));
        // A uniform source misses either tenth 1000 times running with
        // odds of about 1 in 10^45.
        assert!(xs.iter().any(|&x| x < 0.1) && xs.iter().any(|&x| x > 0.9));
    }

    #[test]
    fn a_seeded_source_prints_its_name_not_its_state() {
        assert_eq!(format!("{:?}", SeededJitter::new(7)), "SeededJitter { .. }");
    }
}
