//! The deadline over a whole call: it cuts the retries short, counts the
//! waits and the attempts, and can be set or removed per policy and per
//! request.

mod attempts;
mod bodies;

use crate::support;
use reqwest_safe_retry::RetryAfter;
use reqwest_safe_retry::{
    DeadlineExceeded, RetryDeadline, RetryMiddleware, clock::ManualClock, report::ReportSlot,
    report::RetryReport, report::StopReason,
};
use std::time::Duration;
use support::*;
use wiremock::{MockServer, ResponseTemplate};

#[tokio::test]
async fn deadline_override_applies_to_one_request() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let (client, clock) = client(policy().build().unwrap());
    let url = format!("{}/r", server.uri());
    client.get(&url).with_extension(RetryDeadline::new(150 * MS)).send().await.unwrap();
    assert_eq!(clock.sleeps(), [100 * MS]);
}

fn unavailable_with_retry_after(value: &str) -> ResponseTemplate {
    ResponseTemplate::new(503).insert_header("Retry-After", value)
}

async fn get(
    client: &reqwest_middleware::ClientWithMiddleware,
    server: &MockServer,
) -> reqwest::Response {
    client.get(format!("{}/r", server.uri())).send().await.unwrap()
}

#[tokio::test]
async fn deadline_cuts_the_retries_short() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let (client, clock) = client(policy().with_deadline(350 * MS).build().unwrap());
    let response = get(&client, &server).await;
    // 100 ms and 200 ms fit in 350 ms; the next 400 ms would not.
    assert_eq!(clock.sleeps(), [100 * MS, 200 * MS]);
    assert_eq!(hits(&server).await, 3);
    let report = RetryReport::from_response(&response);
    assert_eq!(report.stop, StopReason::DeadlineExceeded);
}

#[tokio::test]
async fn deadline_shorter_than_the_first_wait_sends_one_attempt() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let (client, clock) = client(policy().with_deadline(50 * MS).build().unwrap());
    assert_eq!(get(&client, &server).await.status(), 503);
    assert_eq!(hits(&server).await, 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn a_deadline_can_be_removed_from_a_copy_of_the_policy() {
    let bounded = policy().with_deadline(Duration::from_secs(1)).build().unwrap();
    let unbounded = bounded.to_builder().with_deadline(None).build().unwrap();
    assert_eq!(RetryMiddleware::new(unbounded.clone()).config().deadline(), None);
    // The wait that `deadline_counts_retry_after_waits` refuses is made.
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(unbounded);
    assert_eq!(get(&client, &server).await.status(), 200);
    assert_eq!(clock.sleeps(), [2100 * MS]);
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

#[tokio::test]
async fn slow_attempts_count_against_the_deadline() {
    // Each attempt takes 100 ms of the clock (the server answers at once; the
    // test moves the clock to stand for a slow network).
    let server = MockServer::start().await;
    script(&server, "/r", vec![ResponseTemplate::new(503).insert_header("Retry-After", "0")]).await;
    let clock = ManualClock::new();
    let ticking = clock.clone();
    let config = policy()
        .with_max_retries(50)
        .with_retry_after(RetryAfter::default().with_spread(false))
        .with_deadline(Duration::from_millis(450))
        .build()
        .unwrap();
    let middleware = RetryMiddleware::new(config)
        .with_clock(clock.clone())
        .on_decision(move |_| ticking.advance(Duration::from_millis(100)));
    let slot = ReportSlot::new();
    let url = format!("{}/r", server.uri());
    let error = wrap(middleware).get(url).with_extension(slot.clone()).send().await.unwrap_err();
    // The deadline is checked when deciding, before the hook moves the clock:
    // decisions at 0, 100, 200, 300 and 400 ms retry, and the hook then moves
    // the clock to 500 ms, past the deadline, before the sixth attempt. The
    // fifth 503 was discarded during the wait, so the caller learns of the
    // deadline from the crate's error.
    let reqwest_middleware::Error::Middleware(error) = error else { panic!("{error:?}") };
    let error = error.downcast_ref::<DeadlineExceeded>().expect("the deadline's error");
    assert_eq!((error.deadline(), error.attempts()), (Duration::from_millis(450), 5));
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (5, StopReason::DeadlineExceeded));
    assert_eq!(hits(&server).await, 5);
}
