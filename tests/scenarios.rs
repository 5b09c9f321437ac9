//! The source tables, row by row, through the same code the demo prints.

#[path = "../examples/scenarios/mod.rs"]
mod scenarios;

use std::time::Duration;

use reqwest_safe_retry::{FixedJitter, StopReason};
use scenarios::{Row, Scenario, api_client_table, roundtripper_table, run};

const MS: Duration = Duration::from_millis(1);

async fn row(
    table: fn() -> (reqwest_safe_retry::RetryConfig, Vec<Scenario>),
    jitter: FixedJitter,
    label: &str,
) -> Row {
    let (config, scenarios) = table();
    let scenario = scenarios.iter().find(|s| s.label == label).expect(label);
    run(&config, jitter, scenario).await
}

/// Checks a row: result, attempts made, attempts that reached the server,
/// waits in milliseconds, stop reason.
fn check(
    row: &Row,
    result: &str,
    attempts: u32,
    reached: usize,
    waits: &[u64],
    stop: Option<StopReason>,
) {
    assert_eq!(row.result, result, "{row}");
    assert_eq!((row.attempts, row.reached), (attempts, reached), "{row}");
    assert_eq!(row.waits, waits.iter().map(|ms| *ms as u32 * MS).collect::<Vec<_>>(), "{row}");
    assert_eq!(row.stop, stop, "{row}");
}

async fn transport(label: &str) -> Row {
    row(roundtripper_table, FixedJitter::TOP, label).await
}

async fn api(label: &str) -> Row {
    row(api_client_table, FixedJitter::new(0.5), label).await
}

#[tokio::test]
async fn transport_get_two_503s_then_success() {
    let row = transport("GET, two 503s then success").await;
    check(&row, "status=200", 3, 3, &[100, 200], Some(StopReason::Final));
}

#[tokio::test]
async fn transport_get_429_with_retry_after() {
    let row = transport("GET, 429 with Retry-After: 2").await;
    check(&row, "status=200", 2, 2, &[2000], Some(StopReason::Final));
}

#[tokio::test]
async fn transport_post_without_a_key() {
    let row = transport("POST without a key").await;
    check(&row, "status=503", 1, 1, &[], Some(StopReason::NotSafe));
}

#[tokio::test]
async fn transport_post_with_idempotency_key_replays_the_body() {
    let row = transport("POST with Idempotency-Key").await;
    check(&row, "status=200", 2, 2, &[100], Some(StopReason::Final));
    assert_eq!(row.last_body.as_deref(), Some("order=1"));
}

#[tokio::test]
async fn transport_get_a_missing_page() {
    let row = transport("GET a missing page").await;
    check(&row, "status=404", 1, 1, &[], Some(StopReason::Final));
}

#[tokio::test]
async fn transport_get_server_stays_down() {
    let row = transport("GET, server stays down").await;
    check(&row, "status=503", 4, 4, &[100, 200, 400], Some(StopReason::RetriesExhausted));
}

#[tokio::test]
async fn transport_cancelled_during_the_wait_returns_at_once_and_sends_nothing_more() {
    let row = transport("GET, cancelled during the wait").await;
    check(&row, "cancelled", 1, 1, &[100], None);
}

#[tokio::test]
async fn transport_get_connection_refused() {
    let row = transport("GET, connection refused").await;
    check(&row, "error: connect", 4, 0, &[100, 200, 400], Some(StopReason::RetriesExhausted));
}

#[tokio::test]
async fn transport_post_connection_refused_is_retried_too() {
    let row = transport("POST, connection refused").await;
    check(&row, "error: connect", 4, 0, &[100, 200, 400], Some(StopReason::RetriesExhausted));
}

#[tokio::test]
async fn api_get_503_twice_then_success() {
    let row = api("GET, 503 twice then success").await;
    check(&row, "status=200", 3, 3, &[100, 200], Some(StopReason::Final));
}

#[tokio::test]
async fn api_get_429_with_retry_after() {
    let row = api("GET, 429 with Retry-After: 2").await;
    check(&row, "status=200", 2, 2, &[2000], Some(StopReason::Final));
}

#[tokio::test]
async fn api_get_404_is_final() {
    let row = api("GET, 404 is final").await;
    check(&row, "status=404", 1, 1, &[], Some(StopReason::Final));
    assert_eq!(row.request_id.as_deref(), Some("req-1"));
}

#[tokio::test]
async fn api_get_always_503_gives_up_with_the_last_response() {
    let row = api("GET, always 503 (gives up)").await;
    check(&row, "status=503", 4, 4, &[100, 200, 400], Some(StopReason::RetriesExhausted));
    assert_eq!(row.request_id.as_deref(), Some("req-4"));
}

#[tokio::test]
async fn api_post_without_a_key_503() {
    let row = api("POST without a key, 503").await;
    check(&row, "status=503", 1, 1, &[], Some(StopReason::NotSafe));
}

#[tokio::test]
async fn api_post_with_a_key_503_then_success() {
    let row = api("POST with a key, 503 then success").await;
    check(&row, "status=200", 2, 2, &[100], Some(StopReason::Final));
}

#[tokio::test]
async fn api_post_429_is_safe_to_retry() {
    let row = api("POST, 429 is safe to retry").await;
    check(&row, "status=201", 2, 2, &[2000], Some(StopReason::Final));
}
