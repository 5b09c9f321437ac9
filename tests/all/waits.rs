//! How long the middleware waits, and when it stops waiting.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest_safe_retry::{
    Clock, FixedJitter, Jitter, ManualClock, RetryAfterOverCap, RetryMiddleware, RetryReport,
    Sleep, StopReason,
};
use support::*;
use tokio::sync::Notify;
use wiremock::{MockServer, ResponseTemplate};

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
async fn waits_double_up_to_the_cap() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let config = policy().with_max_retries(5).with_max_backoff(300 * MS).build().unwrap();
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
        let config = policy().with_jitter(jitter).build().unwrap();
        let middleware =
            RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(source);
        get(&wrap(middleware), &server).await;
        assert_eq!(clock.sleeps(), want.map(|ms| ms * MS), "{jitter:?} {source:?}");
    }
}

#[tokio::test]
async fn retry_after_seconds_replaces_the_backoff() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(policy().with_retry_after_spread(false).build().unwrap());
    assert_eq!(get(&client, &server).await.status(), 200);
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
}

#[tokio::test]
async fn retry_after_is_a_floor_spread_by_the_retrys_ceiling() {
    // The jitter source picks where in [2 s, 2 s + 100 ms] the retry lands.
    for (unit, want) in [(0.0, 2000), (0.5, 2050), (1.0, 2100)] {
        let server = MockServer::start().await;
        script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
            .await;
        let clock = ManualClock::new();
        let middleware = RetryMiddleware::new(policy().build().unwrap())
            .with_clock(clock.clone())
            .with_jitter_source(FixedJitter::new(unit));
        assert_eq!(get(&wrap(middleware), &server).await.status(), 200);
        assert_eq!(clock.sleeps(), [want * MS], "{unit}");
    }
    // Without jitter there is no spread.
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(policy().with_jitter(Jitter::None).build().unwrap());
    get(&client, &server).await;
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
}

/// A 503 whose `Retry-After` is the RFC's example date, with `Date` if given,
/// then a 200; on a raw server, which adds no headers of its own.
async fn dated(date: Option<&str>) -> String {
    let date = date.map_or(String::new(), |d| format!("Date: {d}\r\n"));
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\n{date}Retry-After: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let (url, _) =
        raw_server(vec![Raw::Reply(Box::leak(head.into_boxed_str())), Raw::Reply(OK_CLOSE)]).await;
    url
}

/// The RFC's example date, shifted by `secs`.
fn rfc_date(secs: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777u64.saturating_add_signed(secs))
}

async fn wait_for_date(date: Option<&str>, wall: SystemTime) -> Vec<Duration> {
    let url = dated(date).await;
    let clock = ManualClock::new().with_wall_time(wall);
    let config = policy().with_retry_after_spread(false).build().unwrap();
    let middleware = RetryMiddleware::new(config).with_clock(clock.clone());
    let response = wrap(middleware).get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    clock.sleeps()
}

#[tokio::test]
async fn retry_after_date_is_measured_against_the_responses_date() {
    // The server says it is 08:49:32 and asks for 08:49:37: five seconds,
    // whether the client's clock is right, 40 s slow or 40 s fast.
    let server_now = "Sun, 06 Nov 1994 08:49:32 GMT";
    for skew in [0, -40, 40] {
        let sleeps = wait_for_date(Some(server_now), rfc_date(-5 + skew)).await;
        assert_eq!(sleeps, [Duration::from_secs(5)], "clock off by {skew} s");
    }
}

#[tokio::test]
async fn without_a_date_header_retry_after_is_measured_from_the_clock() {
    assert_eq!(wait_for_date(None, rfc_date(-5)).await, [Duration::from_secs(5)]);
    // A garbage `Date` is ignored the same way.
    assert_eq!(wait_for_date(Some("yesterday"), rfc_date(-5)).await, [Duration::from_secs(5)]);
}

#[tokio::test]
async fn retry_after_date_in_the_past_means_no_wait() {
    assert_eq!(wait_for_date(None, rfc_date(3600)).await, [Duration::ZERO]);
    let server_now = "Sun, 06 Nov 1994 09:49:37 GMT";
    assert_eq!(wait_for_date(Some(server_now), rfc_date(-5)).await, [Duration::ZERO]);
}

#[tokio::test]
async fn retry_after_over_the_cap_returns_the_response_at_once() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("3600"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(policy().build().unwrap());
    let response = get(&client, &server).await;
    assert_eq!(response.status(), 503);
    let report = RetryReport::from_response(&response);
    assert_eq!(report.stop, StopReason::RetryAfterTooLong(Duration::from_secs(3600)));
    assert_eq!(hits(&server).await, 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn retry_after_over_the_cap_can_wait_the_cap_and_retry() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("3600"), ResponseTemplate::new(200)])
        .await;
    let config = policy()
        .with_max_retry_after(Duration::from_secs(5))
        .with_retry_after_over_cap(RetryAfterOverCap::WaitTheCap)
        .with_retry_after_spread(false);
    let (client, clock) = client(config.build().unwrap());
    let response = get(&client, &server).await;
    assert_eq!(response.status(), 200);
    assert_eq!(clock.sleeps(), [Duration::from_secs(5)]);
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn retry_after_up_to_a_raised_cap_is_honoured() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("3600"), ResponseTemplate::new(200)])
        .await;
    let config = policy().with_max_retry_after(Duration::from_secs(3600));
    let (client, clock) = client(config.with_retry_after_spread(false).build().unwrap());
    assert_eq!(get(&client, &server).await.status(), 200);
    assert_eq!(clock.sleeps(), [Duration::from_secs(3600)]);
}

#[tokio::test]
async fn garbage_retry_after_falls_back_to_the_backoff() {
    for value in ["soon", "-3", "1.5", "", "Sun, 99 Nov 1994 08:49:37 GMT"] {
        let server = MockServer::start().await;
        script(
            &server,
            "/r",
            vec![unavailable_with_retry_after(value), ResponseTemplate::new(200)],
        )
        .await;
        let (client, clock) = client(policy().build().unwrap());
        assert_eq!(get(&client, &server).await.status(), 200, "{value:?}");
        assert_eq!(clock.sleeps(), [100 * MS], "{value:?}");
    }
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
async fn deadline_counts_retry_after_waits() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(policy().with_deadline(Duration::from_secs(1)).build().unwrap());
    assert_eq!(get(&client, &server).await.status(), 503);
    assert!(clock.sleeps().is_empty());
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
    let config = policy().with_jitter(Jitter::None).build().unwrap();
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

#[tokio::test]
async fn a_deadline_can_be_removed_from_a_copy_of_the_policy() {
    let bounded = policy().with_deadline(Duration::from_secs(1)).build().unwrap();
    let unbounded = bounded.to_builder().without_deadline().build().unwrap();
    assert_eq!(RetryMiddleware::new(unbounded.clone()).config().deadline(), None);
    // The wait that `deadline_counts_retry_after_waits` refuses is made.
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(unbounded);
    assert_eq!(get(&client, &server).await.status(), 200);
    assert_eq!(clock.sleeps(), [2100 * MS]);
}
