//! A clock that tests move by hand.

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
///
/// The retry budget and the throttle of first attempts act on this clock
/// as on any: the waits a failing call asks for move its time on, so a
/// test that calls an always-failing server over and over soon has its
/// later calls sent once (the budget spent) and some kept back unsent with
/// [`Throttled`](crate::rate_limit::Throttled). A test that wants every
/// call sent turns the throttle off with
/// [`with_throttling(false)`](crate::RetryConfigBuilder::with_throttling),
/// and one that wants each retried as configured turns the budget off with
/// [`with_budget(None)`](crate::RetryConfigBuilder::with_budget).
///
/// ```
/// use reqwest_safe_retry::clock::ManualClock;
/// use reqwest_safe_retry::report::{ReportSlot, StopReason};
/// use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let server = wiremock::MockServer::start().await;
/// # wiremock::Mock::given(wiremock::matchers::any())
/// #     .respond_with(wiremock::ResponseTemplate::new(503)).mount(&server).await;
/// // A server that always answers 503, called 50 times: every call is sent
/// // and retried three times, as configured.
/// let config = RetryConfig::builder().with_throttling(false).with_budget(None).build().unwrap();
/// let client = RetryMiddleware::new(config)
///     .with_clock(ManualClock::new())
///     .client(reqwest::Client::builder())
///     .unwrap()
///     .build();
/// for _ in 0..50 {
///     let slot = ReportSlot::new();
///     client.get(server.uri()).with_extension(slot.clone()).send().await.unwrap();
///     let report = slot.get().unwrap();
///     assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
/// }
/// # }
/// ```
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
