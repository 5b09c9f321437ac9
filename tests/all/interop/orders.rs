//! The orders client's scenario table, row by row, through the same code
//! `cargo run --example orders_client` prints.

use client::{ErrorCode, Order};
use scenarios::{Outcome, Received, Row, Scenario, table};
use std::time::Duration;

#[path = "../../../examples/orders_client/client.rs"]
mod client;

#[path = "../../../examples/orders_client/scenarios.rs"]
mod scenarios;

async fn row(label: &str) -> Row {
    let scenario: Scenario =
        table().into_iter().find(|scenario| scenario.label == label).expect(label);
    scenarios::run(&scenario).await
}

fn order(status: &str) -> Outcome {
    Outcome::Order(Order { id: "ord_1".into(), status: status.into() })
}

fn api(status: u16, code: ErrorCode, server_code: &str, request_id: &str) -> Outcome {
    Outcome::Api {
        status,
        code,
        server_code: server_code.into(),
        request_id: Some(request_id.into()),
    }
}

fn get() -> Received {
    Received::new("GET", "/orders/ord_1", None, "")
}

fn post(key: Option<&str>) -> Received {
    Received::new("POST", "/orders", key, r#"{"item":"book"}"#)
}

fn delete() -> Received {
    Received::new("DELETE", "/orders/ord_1", None, "")
}

/// Checks a row: the outcome, the attempts made, the waits in milliseconds,
/// and every request the server received.
fn check(row: &Row, outcome: Outcome, attempts: u32, waits: &[u64], received: &[Received]) {
    assert_eq!(row.outcome, outcome, "{row}");
    assert_eq!(row.attempts, attempts, "{row}");
    let waits: Vec<Duration> = waits.iter().map(|ms| Duration::from_millis(*ms)).collect();
    assert_eq!(row.waits, waits, "{row}");
    assert_eq!(row.received, received, "{row}");
}

#[test]
fn the_table_is_the_notes_rows_then_the_rest() {
    let labels: Vec<(&str, bool)> = table().iter().map(|s| (s.label, s.from_notes)).collect();
    assert_eq!(
        labels,
        [
            ("GET, 503 twice then success", true),
            ("GET, 429 with Retry-After: 2", true),
            ("GET, 404 is final", true),
            ("GET, always 503 (gives up)", true),
            ("POST without a key, 503", true),
            ("POST with a key, 503 then success", true),
            ("POST, 429 is safe to retry", true),
            ("GET, 500 then success", false),
            ("POST without a key, 500", false),
            ("GET, 429 asks for 120 s", false),
            ("cancel (DELETE), 503 then success", false),
            ("cancel (DELETE), 409 is final", false),
            ("create once, 503 then success", false),
            ("POST with a key, 422 insufficient_funds", false),
            ("POST without a key, connection refused", false),
        ]
    );
}

// The design notes' rows: each matches the notes' output (attempts, sleeps,
// outcome, error code and request id); the code column shows the sentinel
// the caller matches on next to the server's own code.

#[tokio::test]
async fn notes_get_503_twice_then_success() {
    let row = row("GET, 503 twice then success").await;
    check(&row, order("paid"), 3, &[100, 200], &[get(), get(), get()]);
}

#[tokio::test]
async fn notes_get_429_waits_the_retry_after() {
    let row = row("GET, 429 with Retry-After: 2").await;
    check(&row, order("paid"), 2, &[2000], &[get(), get()]);
}

#[tokio::test]
async fn notes_get_404_is_final() {
    let row = row("GET, 404 is final").await;
    check(&row, api(404, ErrorCode::NotFound, "upstream_404", "req-1"), 1, &[], &[get()]);
}

#[tokio::test]
async fn notes_get_always_503_gives_up_with_the_last_request_id() {
    let row = row("GET, always 503 (gives up)").await;
    let outcome = api(503, ErrorCode::Unavailable, "upstream_503", "req-4");
    check(&row, outcome, 4, &[100, 200, 400], &[get(), get(), get(), get()]);
}

#[tokio::test]
async fn notes_post_without_a_key_is_not_repeated_after_503() {
    let row = row("POST without a key, 503").await;
    let outcome = api(503, ErrorCode::Unavailable, "upstream_503", "req-1");
    check(&row, outcome, 1, &[], &[post(None)]);
}

#[tokio::test]
async fn notes_post_with_a_key_is_repeated_with_the_same_key_and_body() {
    let row = row("POST with a key, 503 then success").await;
    check(&row, order("paid"), 2, &[100], &[post(Some("key-123")), post(Some("key-123"))]);
}

#[tokio::test]
async fn notes_post_429_is_retried_without_a_key() {
    let row = row("POST, 429 is safe to retry").await;
    check(&row, order("paid"), 2, &[2000], &[post(None), post(None)]);
}

// The rest of the client.

#[tokio::test]
async fn get_500_is_retried() {
    let row = row("GET, 500 then success").await;
    check(&row, order("paid"), 2, &[100], &[get(), get()]);
}

#[tokio::test]
async fn post_without_a_key_is_not_repeated_after_500() {
    let row = row("POST without a key, 500").await;
    let outcome = api(500, ErrorCode::Internal, "upstream_500", "req-1");
    check(&row, outcome, 1, &[], &[post(None)]);
}

#[tokio::test]
async fn retry_after_over_the_cap_waits_the_cap() {
    let row = row("GET, 429 asks for 120 s").await;
    check(&row, order("paid"), 2, &[5000], &[get(), get()]);
}

#[tokio::test]
async fn cancel_is_a_delete_and_is_retried() {
    let row = row("cancel (DELETE), 503 then success").await;
    check(&row, order("cancelled"), 2, &[100], &[delete(), delete()]);
}

#[tokio::test]
async fn cancel_409_is_a_conflict() {
    let row = row("cancel (DELETE), 409 is final").await;
    check(&row, api(409, ErrorCode::Conflict, "upstream_409", "req-1"), 1, &[], &[delete()]);
}

#[tokio::test]
async fn create_once_sends_one_generated_key_on_every_attempt() {
    let row = row("create once, 503 then success").await;
    check(&row, order("paid"), 2, &[100], &[post(Some("once-1")), post(Some("once-1"))]);
}

#[tokio::test]
async fn a_known_body_code_is_the_sentinel() {
    let row = row("POST with a key, 422 insufficient_funds").await;
    let outcome = api(422, ErrorCode::InsufficientFunds, "insufficient_funds", "req-1");
    check(&row, outcome, 1, &[], &[post(Some("key-456"))]);
}

/// Stricter in the design notes: a connection failure is retried only when
/// the request is safe to repeat, so one attempt. The client does not
/// follow redirects, so the middleware knows a refused connection never
/// reached the server and repeats even a POST without a key.
#[tokio::test]
async fn refused_connection_is_retried_for_a_post_without_a_key() {
    let row = row("POST without a key, connection refused").await;
    check(&row, Outcome::Transport("connect".into()), 4, &[100, 200, 400], &[]);
}

#[tokio::test]
async fn orders_stream_follows_the_cursor() {
    let (ids, requests) = scenarios::list_orders().await;
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(requests, 2);
}
