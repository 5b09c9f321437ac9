//! Time, as the middleware sees it.
//!
//! Every reading of the time and every wait in the crate goes through a
//! [`Clock`]. The default, [`TokioClock`], is built on `tokio::time`, so tests
//! under `#[tokio::test(start_paused = true)]` run in virtual time; the
//! `ManualClock` (feature `test-util`) goes further and returns from every
//! sleep at once while recording how long it was asked to wait.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

/// The future a [`Clock`] returns from [`Clock::sleep`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of time and of waiting.
///
/// Implement it to run the middleware on another timer, or to observe and
/// control its waits in tests.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current monotonic time; deadlines and budgets are measured on it.
    fn now(&self) -> Instant;

    /// The current wall-clock time, used only to turn a `Retry-After` date
    /// into a wait. Defaults to [`SystemTime::now`].
    fn wall_time(&self) -> SystemTime {
        SystemTime::now()
    }

    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> Sleep;

    /// A future that completes once [`now`](Self::now) reaches `deadline`,
    /// without moving the time itself. The middleware races against it what
    /// must end by then and has nothing else to bound it: an attempt in
    /// flight, the body of the response it returns (the future then lives
    /// as long as that body), a hedge's delay.
    ///
    /// It has no default because the right one depends on how the clock's
    /// time moves:
    ///
    /// - A clock on a real timer sleeps for the time left:
    ///   `self.sleep(deadline.saturating_duration_since(self.now()))`, as
    ///   [`TokioClock`] does with tokio's own `sleep_until`.
    /// - A clock whose time moves only when it is told to (a test clock
    ///   whose `sleep` records the wait and moves its time on, as
    ///   `ManualClock` does) must not call its `sleep`: that would move its
    ///   time to the deadline, so every attempt would be cut at once and the
    ///   whole deadline recorded as a wait. It completes once its time has
    ///   been moved to `deadline`, and is woken when that happens
    ///   (`ManualClock` keeps the wakers of its pending futures). One whose
    ///   time never moves while an attempt is in flight may return a future
    ///   that is ready if the deadline has passed and pending otherwise: then
    ///   no deadline cuts an attempt or a body in flight, and no hedge is
    ///   sent while a copy is in flight, as no time passes meanwhile.
    ///
    /// ```compile_fail
    /// use std::time::{Duration, Instant};
    /// use reqwest_safe_retry::{clock::Clock, clock::Sleep};
    ///
    /// // `now` and `sleep` alone are not a clock: `sleep_until` is required.
    /// #[derive(Debug)]
    /// struct Incomplete;
    ///
    /// impl Clock for Incomplete {
    ///     fn now(&self) -> Instant {
    ///         Instant::now()
    ///     }
    ///
    ///     fn sleep(&self, _: Duration) -> Sleep {
    ///         Box::pin(std::future::ready(()))
    ///     }
    /// }
    /// ```
    fn sleep_until(&self, deadline: Instant) -> Sleep;
}

/// The default clock: `tokio::time`, so paused-time tests work.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        if duration.is_zero() {
            // No timer for nothing: a zero-sized future, so not even a box.
            return Box::pin(std::future::ready(()));
        }
        Box::pin(tokio::time::sleep(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline.into()))
    }
}

#[cfg(feature = "test-util")]
pub use manual::ManualClock;

#[cfg(feature = "test-util")]
mod manual;

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_records_and_advances() {
        let clock = ManualClock::new();
        let start = clock.now();
        let wall = clock.wall_time();
        clock.sleep(Duration::from_secs(2)).await;
        clock.advance(Duration::from_secs(1));
        clock.sleep(Duration::from_millis(5)).await;
        assert_eq!(clock.sleeps(), [Duration::from_secs(2), Duration::from_millis(5)]);
        assert_eq!(clock.now() - start, Duration::from_millis(3005));
        assert_eq!(clock.wall_time().duration_since(wall).unwrap(), Duration::from_millis(3005));
        assert_eq!(clock.take_sleeps().len(), 2);
        assert!(clock.sleeps().is_empty());
    }

    #[tokio::test]
    async fn manual_clock_survives_absurd_sleeps() {
        let clock = ManualClock::new();
        let start = clock.now();
        clock.sleep(Duration::MAX).await;
        clock.sleep(Duration::MAX).await;
        assert!(clock.now() >= start);
        assert_eq!(clock.total_slept(), Duration::MAX);
        let _ = clock.wall_time();
    }

    #[tokio::test]
    async fn manual_sleep_until_waits_for_virtual_time() {
        let clock = ManualClock::new();
        let deadline = clock.now() + Duration::from_secs(5);
        let mut until = clock.sleep_until(deadline);
        let poll = |until: &mut Sleep| {
            let waker = std::task::Waker::noop();
            until.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_ready()
        };
        assert!(!poll(&mut until), "no virtual time has passed");
        clock.advance(Duration::from_secs(4));
        assert!(!poll(&mut until), "a second short");
        clock.sleep(Duration::from_secs(1)).await;
        assert!(poll(&mut until), "the deadline is reached");
        assert_eq!(clock.sleeps(), [Duration::from_secs(1)], "waiting is not a sleep");
    }

    #[test]
    fn a_waiting_future_dropped_before_its_time_leaves_nothing_in_the_clock() {
        let clock = ManualClock::new();
        let deadline = clock.now() + Duration::from_secs(5);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut kept = clock.sleep_until(deadline);
        assert!(kept.as_mut().poll(&mut cx).is_pending());
        for _ in 0..3000 {
            let mut raced = clock.sleep_until(deadline);
            assert!(raced.as_mut().poll(&mut cx).is_pending());
            assert!(raced.as_mut().poll(&mut cx).is_pending(), "polled again: one entry");
        }
        assert_eq!(clock.waiting(), 1, "only the future still alive waits");
        // Woken and forgotten when time moves; it waits again when polled.
        clock.advance(Duration::from_secs(1));
        assert!(clock.waiting() == 0);
        assert!(kept.as_mut().poll(&mut cx).is_pending());
        assert_eq!(clock.waiting(), 1);
        clock.advance(Duration::from_secs(4));
        assert!(kept.as_mut().poll(&mut cx).is_ready());
        drop(kept);
        assert!(clock.waiting() == 0);
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_sleeps_until_an_instant() {
        let start = TokioClock.now();
        TokioClock.sleep_until(start + Duration::from_secs(90)).await;
        assert_eq!(TokioClock.now() - start, Duration::from_secs(90));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let start = TokioClock.now();
        TokioClock.sleep(Duration::from_secs(3600)).await;
        assert_eq!(TokioClock.now() - start, Duration::from_secs(3600));
    }
}
