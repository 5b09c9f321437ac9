//! Clocks of the user's own, written as the `Clock` docs say, with only the
//! required methods: one on a real timer (tokio's, paused here, so its
//! sleeps advance virtual time only), and one whose time moves only when it
//! is told to, as a test clock's does. (`ManualClock` and `TokioClock`
//! override the provided `wall_time`, so the other test files never reach
//! it.)

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use reqwest_safe_retry::{
    Clock, DeadlineExceeded, FixedJitter, ReportSlot, RetryMiddleware, RetryReport, Sleep,
    StopReason,
};
use support::*;

/// Tokio's paused time, through the required methods alone; records each
/// sleep.
#[derive(Debug, Clone, Default)]
struct Minimal {
    sleeps: Arc<Mutex<Vec<Duration>>>,
}

impl Minimal {
    fn sleeps(&self) -> Vec<Duration> {
        self.sleeps.lock().unwrap().clone()
    }
}

impl Clock for Minimal {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        self.sleeps.lock().unwrap().push(duration);
        Box::pin(tokio::time::sleep(duration))
    }

    // A real timer: sleep for the time left.
    fn sleep_until(&self, deadline: Instant) -> Sleep {
        self.sleep(deadline.saturating_duration_since(self.now()))
    }
}

/// A test clock as a user writes one: each sleep is recorded and moves the
/// time on at once; nothing else moves it.
#[derive(Debug, Clone)]
struct Stepping {
    start: Instant,
    state: Arc<Mutex<(Duration, Vec<Duration>)>>,
}

impl Stepping {
    fn new() -> Self {
        Self { start: Instant::now(), state: Arc::default() }
    }

    fn sleeps(&self) -> Vec<Duration> {
        self.state.lock().unwrap().1.clone()
    }
}

impl Clock for Stepping {
    fn now(&self) -> Instant {
        self.start + self.state.lock().unwrap().0
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let mut state = self.state.lock().unwrap();
        state.0 += duration;
        state.1.push(duration);
        Box::pin(std::future::ready(()))
    }

    // Time never moves while an attempt is in flight: the deadline cuts an
    // attempt only if it has already passed.
    fn sleep_until(&self, deadline: Instant) -> Sleep {
        if self.now() >= deadline {
            return Box::pin(std::future::ready(()));
        }
        Box::pin(std::future::pending())
    }
}

/// A last middleware that never answers.
struct Silent;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Silent {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        std::future::pending().await
    }
}

/// A last middleware that answers 503 with `Retry-After: <date>` and no
/// `Date` header, then 200.
struct RetryAfterDate {
    date: String,
    calls: Counter,
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for RetryAfterDate {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.calls.bump();
        let response = match self.calls.get() {
            1 => http::Response::builder().status(503).header("Retry-After", &self.date),
            _ => http::Response::builder().status(200),
        };
        Ok(response.body("").unwrap().into())
    }
}

/// The provided `sleep_until` (a `sleep` for the time left) bounds an
/// attempt in flight by the deadline when the attempt has no timeout of its
/// own.
#[tokio::test(start_paused = true)]
async fn a_deadline_cuts_an_attempt_in_flight_through_a_real_timers_sleep_until() {
    let clock = Minimal::default();
    let config = policy().with_deadline(Duration::from_secs(2)).build().unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(config).with_clock(clock.clone()))
        .with(Silent)
        .build();
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client.get("http://127.0.0.1:9/r").with_extension(slot.clone()).send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the deadline ends the call")
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    match &error {
        reqwest_middleware::Error::Middleware(e) => assert!(e.is::<DeadlineExceeded>(), "{e}"),
        other => panic!("{other}"),
    }
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::DeadlineExceeded));
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)], "one sleep, for the time left");
}

/// The provided `wall_time` (the system clock) is what a `Retry-After` date
/// is measured against when the response has no `Date`.
#[tokio::test(start_paused = true)]
async fn a_retry_after_date_is_measured_against_the_provided_wall_time() {
    let clock = Minimal::default();
    let config = policy().with_retry_after_spread(false).build().unwrap();
    let calls = Counter::default();
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(10));
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(config).with_clock(clock.clone()))
        .with(RetryAfterDate { date, calls: calls.clone() })
        .build();
    let response = client.get("http://127.0.0.1:9/r").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(RetryReport::from_response(&response).attempts, 2);
    let sleeps = clock.sleeps();
    assert_eq!(sleeps.len(), 1, "{sleeps:?}");
    // The date has whole seconds: the wait is what is left of 10 s after
    // rounding down, and the moments between making the date and reading it.
    assert!((Duration::from_secs(8)..=Duration::from_secs(10)).contains(&sleeps[0]), "{sleeps:?}");
}

/// A test clock whose `sleep` moves its time keeps every deadline: its waits
/// are the backoff's alone, and a call well within its deadline succeeds.
#[tokio::test]
async fn a_stepping_test_clock_waits_the_backoff_and_keeps_the_deadline() {
    let server = wiremock::MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let clock = Stepping::new();
    let config = policy().with_deadline(Duration::from_secs(10)).build().unwrap();
    let middleware =
        RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    let client = wrap(middleware);
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (3, StopReason::NothingToRetry));
    assert_eq!(clock.sleeps(), [100 * MS, 200 * MS], "the backoff, and no deadline wait");

    // And the deadline still ends the call: the next wait would pass it.
    let server = wiremock::MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let clock = Stepping::new();
    let config = policy().with_deadline(250 * MS).build().unwrap();
    let middleware =
        RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    let response = wrap(middleware).get(format!("{}/r", server.uri())).send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (2, StopReason::DeadlineExceeded));
    assert_eq!(clock.sleeps(), [100 * MS]);
}

/// Forwards wakes to a task's own waker, and says by its reference count
/// whether anything still holds it.
struct Tracked(std::task::Waker);

impl std::task::Wake for Tracked {
    fn wake(self: Arc<Self>) {
        self.0.wake_by_ref();
    }
}

/// `call` polled with a [`Tracked`] waker of its own; returns its output and
/// the tracker, to be read once the call is over.
async fn tracked<F: std::future::Future>(call: F) -> (F::Output, Arc<Tracked>) {
    let mut call = std::pin::pin!(call);
    let mut tracker = None;
    let output = std::future::poll_fn(|cx| {
        let tracker = tracker.get_or_insert_with(|| Arc::new(Tracked(cx.waker().clone())));
        let waker = std::task::Waker::from(tracker.clone());
        call.as_mut().poll(&mut std::task::Context::from_waker(&waker))
    })
    .await;
    (output, tracker.expect("polled at least once"))
}

/// Calls with a deadline race a `ManualClock`'s `sleep_until`; once each is
/// over, nothing of it is left in the clock, whose time never moved.
#[tokio::test]
async fn a_manual_clock_keeps_nothing_of_finished_calls() {
    let server = wiremock::MockServer::start().await;
    script_statuses(&server, "/r", &[200]).await;
    let clock = reqwest_safe_retry::ManualClock::new();
    let config = policy().with_deadline(Duration::from_secs(10)).build().unwrap();
    let client = wrap(RetryMiddleware::new(config).with_clock(clock.clone()));
    let url = format!("{}/r", server.uri());
    for n in 0..300 {
        let (result, tracker) = tracked(client.get(&url).send()).await;
        assert_eq!(result.unwrap().status(), 200);
        assert_eq!(Arc::strong_count(&tracker), 1, "call {n}: its waker is still held");
    }
    assert_eq!(clock.elapsed(), Duration::ZERO);
}
