//! The waits between attempts: exponential backoff up to its cap, jitter
//! within its range, and the clock seam (tokio's timer, a manual clock, a
//! clock of the user's own) that every wait goes through.

use crate::support;
use reqwest_safe_retry::{
    Jitter, RetryMiddleware, clock::Clock, clock::ManualClock, clock::Sleep, jitter::FixedJitter,
    report::RetryReport, report::StopReason,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;
use tokio::sync::Notify;
use wiremock::MockServer;

async fn get(
    client: &reqwest_middleware::ClientWithMiddleware,
    server: &MockServer,
) -> reqwest::Response {
    client.get(format!("{}/r", server.uri())).send().await.unwrap()
}

#[tokio::test]
async fn waits_double_up_to_the_cap() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let config = policy()
        .with_max_retries(5)
        .with_backoff(support::backoff().with_max(300 * MS))
        .build()
        .unwrap();
    let (client, clock) = client(config);
    let response = get(&client, &server).await;
    assert_eq!(response.status(), 503);
    assert_eq!(clock.sleeps(), [100, 200, 300, 300, 300].map(|ms| ms * MS));
}

#[tokio::test]
async fn no_sleep_after_the_last_attempt() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let (client, clock) = client(policy().build().unwrap());
    let response = get(&client, &server).await;
    let report = RetryReport::from_response(&response);
    assert_eq!(hits(&server).await, 4);
    assert_eq!(clock.sleeps().len(), 3);
    assert_eq!(report.stop, StopReason::RetriesExhausted);
    assert_eq!(report.total_wait, 700 * MS);
}

#[tokio::test]
async fn jitter_kinds_pick_inside_their_range() {
    let cases = [
        (Jitter::Full, FixedJitter::new(0.5), [50, 100, 200]),
        (Jitter::Equal, FixedJitter::BOTTOM, [50, 100, 200]),
        (Jitter::Equal, FixedJitter::TOP, [100, 200, 400]),
        (Jitter::None, FixedJitter::BOTTOM, [100, 200, 400]),
        (Jitter::Decorrelated, FixedJitter::TOP, [300, 900, 2700]),
    ];
    for (jitter, source, want) in cases {
        let server = MockServer::start().await;
        script_statuses(&server, "/r", &[503]).await;
        let clock = ManualClock::new();
        let config = policy().with_backoff(support::backoff().with_jitter(jitter)).build().unwrap();
        let middleware =
            RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(source);
        get(&wrap(middleware), &server).await;
        assert_eq!(clock.sleeps(), want.map(|ms| ms * MS), "{jitter:?} {source:?}");
    }
}

/// A clock whose sleeps never end, and which says when one starts.
#[derive(Debug, Clone, Default)]
struct StuckClock {
    sleeping: Arc<Notify>,
}

impl Clock for StuckClock {
    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }

    fn sleep(&self, _: Duration) -> Sleep {
        self.sleeping.notify_one();
        Box::pin(std::future::pending())
    }

    fn sleep_until(&self, _: std::time::Instant) -> Sleep {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn dropping_the_request_during_a_wait_sends_nothing_more() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let clock = StuckClock::default();
    let client = wrap(RetryMiddleware::default().with_clock(clock.clone()));
    let url = format!("{}/r", server.uri());
    let task = tokio::spawn(async move { client.get(url).send().await });
    clock.sleeping.notified().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(hits(&server).await, 1);
}

#[tokio::test(start_paused = true)]
async fn default_clock_waits_in_tokio_time() {
    let config =
        policy().with_backoff(support::backoff().with_jitter(Jitter::None)).build().unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(config))
        .with(Answers::new(&[503, 503, 200]))
        .build();
    let start = tokio::time::Instant::now();
    let response = client.get("http://127.0.0.1:9/r").send().await.unwrap();
    assert_eq!(response.status(), 200);
    // No network, and paused time moves only for timers: the elapsed time is
    // the waits exactly.
    assert_eq!(start.elapsed(), 300 * MS);
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
    let clock = reqwest_safe_retry::clock::ManualClock::new();
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
