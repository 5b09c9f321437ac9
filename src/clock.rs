//! Time, as the middleware sees it.
//!
//! Every reading of the time and every wait in the crate goes through a
//! [`Clock`]. The default, [`TokioClock`], is built on `tokio::time`, so tests
//! under `#[tokio::test(start_paused = true)]` run in virtual time; the
//! [`ManualClock`] (feature `test-util`) goes further and returns from every
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
mod manual {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex, MutexGuard};
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant, SystemTime};

    use super::{Clock, Sleep};

    /// A clock for tests: a `sleep` returns as soon as it is awaited, moves
    /// `now` forward by the requested duration, and records it; a sleep that
    /// is made but never awaited moves nothing and is not recorded. The
    /// middleware sleeps only for the wait before a retry. Its timers that
    /// race something else (the deadline against an attempt in flight or a
    /// body being read, a hedge's delay against the copies in flight) wait
    /// for the clock's time with [`sleep_until`](Clock::sleep_until): they
    /// end only when the test moves the time past them, with
    /// [`advance`](Self::advance) or through another call's sleeps on the
    /// same clock.
    ///
    /// Virtual time passes only through `sleep` and
    /// [`advance`](Self::advance), so an attempt in flight takes no virtual
    /// time: a deadline cuts one short, or ends the read of a body it
    /// returned, only when the time moves past it meanwhile — by the test's
    /// `advance`, or by the sleeps of other calls on the same clock.
    ///
    /// Clones share one timeline, so a test keeps a clone and reads
    /// [`sleeps`](Self::sleeps) after the request:
    ///
    /// ```
    /// use std::time::Duration;
    /// use reqwest_safe_retry::{clock::Clock, clock::ManualClock};
    ///
    /// # tokio_test_block_on(async {
    /// let clock = ManualClock::new();
    /// let start = clock.now();
    /// clock.sleep(Duration::from_millis(250)).await;
    /// assert_eq!(clock.sleeps(), [Duration::from_millis(250)]);
    /// assert_eq!(clock.now() - start, Duration::from_millis(250));
    /// # });
    /// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    /// # }
    /// ```
    ///
    /// Its wall clock starts at 2026-01-01T00:00:00Z unless set with
    /// [`with_wall_time`](Self::with_wall_time), so `Retry-After` dates are
    /// exact in tests.
    #[derive(Debug, Clone)]
    pub struct ManualClock {
        state: Arc<Mutex<State>>,
    }

    #[derive(Debug)]
    struct State {
        start: Instant,
        wall_start: SystemTime,
        elapsed: Duration,
        sleeps: Vec<Duration>,
        /// The futures of `sleep_until` that are waiting, by number, with
        /// their tasks' wakers: woken (and forgotten) whenever time moves. A
        /// future dropped first takes its entry out.
        waiting: Vec<(u64, Waker)>,
        /// The number of the next future to wait.
        next_waiter: u64,
    }

    /// 2026-01-01T00:00:00Z.
    const DEFAULT_WALL_START: Duration = Duration::from_secs(1_767_225_600);

    impl Default for ManualClock {
        fn default() -> Self {
            Self::new()
        }
    }

    impl ManualClock {
        /// A clock at virtual time zero with no recorded sleeps.
        pub fn new() -> Self {
            let state = State {
                start: Instant::now(),
                wall_start: SystemTime::UNIX_EPOCH
                    .checked_add(DEFAULT_WALL_START)
                    .unwrap_or(SystemTime::UNIX_EPOCH),
                elapsed: Duration::ZERO,
                sleeps: Vec::new(),
                waiting: Vec::new(),
                next_waiter: 0,
            };
            Self { state: Arc::new(Mutex::new(state)) }
        }

        /// Sets the wall-clock time at virtual time zero.
        pub fn with_wall_time(self, at: SystemTime) -> Self {
            self.lock().wall_start = at;
            self
        }

        /// Moves time forward without recording a sleep.
        pub fn advance(&self, by: Duration) {
            let mut state = self.lock();
            state.elapsed = state.elapsed.saturating_add(by);
            state.wake_all();
        }

        /// Virtual time since the clock was made.
        pub fn elapsed(&self) -> Duration {
            self.lock().elapsed
        }

        /// Every sleep asked for so far, in order.
        pub fn sleeps(&self) -> Vec<Duration> {
            self.lock().sleeps.clone()
        }

        /// Returns the recorded sleeps and forgets them.
        pub fn take_sleeps(&self) -> Vec<Duration> {
            std::mem::take(&mut self.lock().sleeps)
        }

        /// The sum of every recorded sleep (saturating).
        pub fn total_slept(&self) -> Duration {
            self.lock().sleeps.iter().fold(Duration::ZERO, |sum, d| sum.saturating_add(*d))
        }

        /// How many futures of `sleep_until` are waiting.
        #[cfg(test)]
        pub(super) fn waiting(&self) -> usize {
            self.lock().waiting.len()
        }

        fn lock(&self) -> MutexGuard<'_, State> {
            // The state stays consistent across a panic: every update is one
            // assignment or push.
            self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            self.lock().now()
        }

        fn wall_time(&self) -> SystemTime {
            let state = self.lock();
            state.wall_start.checked_add(state.elapsed).unwrap_or(state.wall_start)
        }

        fn sleep(&self, duration: Duration) -> Sleep {
            let clock = self.clone();
            let mut waited = false;
            // Time moves when the sleep is first polled, not when it is
            // made: a timer dropped unpolled (a hedge's, once the first copy
            // answered) takes no time and is not recorded.
            Box::pin(std::future::poll_fn(move |_| {
                if !waited {
                    waited = true;
                    let mut state = clock.lock();
                    state.sleeps.push(duration);
                    state.elapsed = state.elapsed.saturating_add(duration);
                    state.wake_all();
                }
                Poll::Ready(())
            }))
        }

        fn sleep_until(&self, deadline: Instant) -> Sleep {
            Box::pin(Until { clock: self.clone(), deadline, waiter: None })
        }
    }

    impl State {
        fn now(&self) -> Instant {
            // An `Instant` cannot hold every `Duration`; past about a century the
            // clock stops moving rather than panicking.
            let mut elapsed = self.elapsed;
            loop {
                if let Some(now) = self.start.checked_add(elapsed) {
                    return now;
                }
                elapsed = elapsed.checked_div(2).unwrap_or_default();
            }
        }

        /// Time moved: every waiting future is polled again, and waits anew
        /// if its deadline is still ahead.
        fn wake_all(&mut self) {
            self.waiting.drain(..).for_each(|(_, waker)| waker.wake());
        }
    }

    /// The future of [`ManualClock::sleep_until`].
    struct Until {
        clock: ManualClock,
        deadline: Instant,
        /// Its number among the clock's waiting futures, once it has waited.
        waiter: Option<u64>,
    }

    impl Future for Until {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            // The time is read and the waker left under one lock, so time
            // moved from another thread in between cannot go unnoticed.
            let clock = self.clock.clone();
            let mut state = clock.lock();
            if state.now() >= self.deadline {
                // Time has moved since it waited, if it did, and moving it
                // woke and forgot every waiting future: nothing to take out.
                self.waiter = None;
                return Poll::Ready(());
            }
            let entry = self.waiter.and_then(|n| state.waiting.iter_mut().find(|(m, _)| *m == n));
            match entry {
                Some((_, waker)) => waker.clone_from(cx.waker()),
                None => {
                    let n = state.next_waiter;
                    state.next_waiter = n.wrapping_add(1);
                    state.waiting.push((n, cx.waker().clone()));
                    self.waiter = Some(n);
                }
            }
            Poll::Pending
        }
    }

    impl Drop for Until {
        /// A future dropped before its time (the attempt it raced ended
        /// first) leaves nothing behind in the clock.
        fn drop(&mut self) {
            if let Some(n) = self.waiter.take() {
                self.clock.lock().waiting.retain(|(m, _)| *m != n);
            }
        }
    }
}

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
