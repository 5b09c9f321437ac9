//! What the caller gets back and can control.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_safe_retry::{
    Decision, ManualClock, MaxRetries, ReportSlot, RetryDeadline, RetryMiddleware, RetryReason,
    RetryReport, SafeToRetry, StopReason,
};
use support::*;
use wiremock::{MockServer, ResponseTemplate};

#[tokio::test]
async fn response_carries_attempts_and_total_wait() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 502, 200]).await;
    let (client, _) = client(policy().build().unwrap());
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!(report.attempts, 3);
    assert_eq!(report.resend_count(), 2);
    assert_eq!(report.total_wait, 300 * MS);
    assert_eq!(report.stop, StopReason::NothingToRetry);
}

#[tokio::test]
async fn report_slot_works_through_execute_with_extensions() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, _) = client(policy().build().unwrap());
    let request = client.get(format!("{}/r", server.uri())).build().unwrap();
    let slot = ReportSlot::new();
    let mut extensions = http::Extensions::new();
    extensions.insert(slot.clone());
    client.execute_with_extensions(request, &mut extensions).await.unwrap();
    assert_eq!(slot.get().unwrap().attempts, 2);
}

/// Sends a GET to `url` through a client without middleware and through ours, and
/// returns both errors.
async fn both_errors(
    url: &str,
    timeout: Option<Duration>,
) -> (reqwest_middleware::Error, reqwest_middleware::Error, RetryReport) {
    let plain = reqwest_middleware::ClientBuilder::new(bare_reqwest()).build();
    let (ours, _) = client(policy().build().unwrap());
    let slot = ReportSlot::new();
    let mut a = plain.get(url);
    let mut b = ours.get(url).with_extension(slot.clone());
    if let Some(t) = timeout {
        a = a.timeout(t);
        b = b.timeout(t);
    }
    let plain_error = a.send().await.unwrap_err();
    let our_error = b.send().await.unwrap_err();
    (plain_error, our_error, slot.get().unwrap())
}

#[tokio::test]
async fn connect_error_answers_as_without_the_middleware() {
    let url = refused_address().await;
    let (plain, ours, report) = both_errors(&url, None).await;
    assert!(matches!(ours, reqwest_middleware::Error::Reqwest(_)));
    for (name, a, b) in [
        ("is_connect", plain.is_connect(), ours.is_connect()),
        ("is_timeout", plain.is_timeout(), ours.is_timeout()),
        ("is_request", plain.is_request(), ours.is_request()),
    ] {
        assert_eq!(a, b, "{name}");
    }
    assert_eq!(plain.status(), ours.status());
    assert_eq!(plain.url(), ours.url());
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
}

#[tokio::test]
async fn timeout_error_answers_as_without_the_middleware() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![ResponseTemplate::new(200).set_delay(Duration::from_secs(60))])
        .await;
    let (plain, ours, report) = both_errors(&format!("{}/r", server.uri()), Some(30 * MS)).await;
    assert!(plain.is_timeout() && ours.is_timeout());
    assert_eq!(plain.is_connect(), ours.is_connect());
    assert_eq!(plain.status(), ours.status());
    assert_eq!(report.attempts, 4);
}

#[tokio::test]
async fn max_retries_of_zero_sends_once() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, _) = client(policy().build().unwrap());
    let request = client.get(format!("{}/r", server.uri())).with_extension(MaxRetries::new(0));
    let response = request.send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 1));
    let report = RetryReport::from_response(&response);
    assert_eq!(report.stop, StopReason::RetriesExhausted);
}

#[tokio::test]
async fn safe_to_retry_makes_one_post_repeatable() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, _) = client(policy().build().unwrap());
    let url = format!("{}/r", server.uri());
    let response = client.post(&url).with_extension(SafeToRetry).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (200, 2));
}

#[tokio::test]
async fn max_retries_override_changes_the_count() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let (client, clock) = client(policy().build().unwrap());
    let url = format!("{}/r", server.uri());
    client.get(&url).with_extension(MaxRetries::new(1)).send().await.unwrap();
    assert_eq!(hits(&server).await, 2);
    client.get(&url).with_extension(MaxRetries::new(6)).send().await.unwrap();
    assert_eq!(hits(&server).await, 2 + 7);
    assert_eq!(clock.sleeps().len(), 1 + 6);
}

#[tokio::test]
async fn deadline_override_applies_to_one_request() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let (client, clock) = client(policy().build().unwrap());
    let url = format!("{}/r", server.uri());
    client.get(&url).with_extension(RetryDeadline::new(150 * MS)).send().await.unwrap();
    assert_eq!(clock.sleeps(), [100 * MS]);
}

#[tokio::test]
async fn hook_sees_every_decision() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let middleware = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(ManualClock::new())
        .with_jitter_source(reqwest_safe_retry::FixedJitter::TOP)
        .on_decision(move |event| log.lock().unwrap().push((event.attempt, event.decision)));
    wrap(middleware).get(format!("{}/r", server.uri())).send().await.unwrap();
    let retry = Decision::Retry {
        after: 100 * MS,
        reason: RetryReason::Status(http::StatusCode::SERVICE_UNAVAILABLE),
    };
    assert_eq!(
        *seen.lock().unwrap(),
        [(1, retry), (2, Decision::Stop(StopReason::NothingToRetry))]
    );
}

#[tokio::test]
async fn an_initialiser_makes_every_request_of_a_client_safe_to_retry() {
    let server = MockServer::start().await;
    script_statuses(&server, "/orders", &[503, 201]).await;
    let middleware = RetryMiddleware::new(policy().build().unwrap()).with_clock(ManualClock::new());
    let orders = reqwest_middleware::ClientBuilder::new(bare_reqwest())
        .with_init(reqwest_middleware::Extension(SafeToRetry))
        .with(middleware)
        .build();
    let response =
        orders.post(format!("{}/orders", server.uri())).body("order 7").send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (201, 2));
    // Without the initialiser the same POST is sent once.
    let server = MockServer::start().await;
    script_statuses(&server, "/orders", &[503, 201]).await;
    let (plain, _) = client(policy().build().unwrap());
    let response =
        plain.post(format!("{}/orders", server.uri())).body("order 7").send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 1));
}

/// What a caller logs of a report (`{}`): each stop reason reads
/// differently, and an over-long `Retry-After` says what was asked.
#[test]
fn every_stop_reason_reads_differently() {
    let texts: Vec<String> = [
        StopReason::NothingToRetry,
        StopReason::NotSafe,
        StopReason::RetriesExhausted,
        StopReason::NotReplayable,
        StopReason::RetryAfterTooLong(Duration::from_secs(90)),
        StopReason::DeadlineExceeded,
        StopReason::BudgetExhausted,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert!(texts[4].contains("90s"), "{}", texts[4]);
    let mut unique = texts.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), texts.len(), "{texts:?}");
    assert!(texts.iter().all(|text| !text.is_empty()), "{texts:?}");
}
