//! The source tables, row by row, through the same code the demo prints:
//! `RetryConfig::default()` on the quick start's client, only the clock and
//! the jitter injected. Each table runs two ways: every row in a fresh
//! process (a middleware of its own), and every row through one middleware,
//! so the budget earned and spent by earlier rows is in play for later ones.

use demo::{Row, Scenario, api_client_table, roundtripper_table};
use reqwest_safe_retry::{
    RetryConfig, clock::ManualClock, jitter::FixedJitter, report::ReportSlot, report::StopReason,
};
use std::time::Duration;

// `examples/demo.rs`'s `scenarios` module, named after the demo here so that
// it does not share its parent's name.
#[path = "../../../examples/scenarios/mod.rs"]
mod demo;

const MS: Duration = Duration::from_millis(1);

/// One expected row: result, attempts made, attempts that reached the
/// server, waits in milliseconds, stop reason.
type Expected = (&'static str, &'static str, u32, usize, &'static [u64], Option<StopReason>);

const FINAL: Option<StopReason> = Some(StopReason::NothingToRetry);

const EXHAUSTED: Option<StopReason> = Some(StopReason::RetriesExhausted);

const NOT_SAFE: Option<StopReason> = Some(StopReason::NotSafe);

/// The seed's rows with the crate's defaults: its attempts and outcomes,
/// waits of the default backoff (500 ms doubling, at the top of the full
/// jitter's range), and Retry-After spread by up to the retry's ceiling.
const ROUNDTRIPPER: [Expected; 9] = [
    ("GET, two 503s then success", "status=200", 3, 3, &[500, 1000], FINAL),
    ("GET, 429 with Retry-After: 2", "status=200", 2, 2, &[2500], FINAL),
    ("POST without a key", "status=503", 1, 1, &[], NOT_SAFE),
    ("POST with Idempotency-Key", "status=200", 2, 2, &[500], FINAL),
    ("GET a missing page", "status=404", 1, 1, &[], FINAL),
    ("GET, server stays down", "status=503", 4, 4, &[500, 1000, 2000], EXHAUSTED),
    ("GET, cancelled during the wait", "cancelled", 1, 1, &[500], None),
    ("GET, connection refused", "error: connect", 4, 0, &[500, 1000, 2000], EXHAUSTED),
    ("POST, connection refused", "error: connect", 4, 0, &[500, 1000, 2000], EXHAUSTED),
];

/// The API client article's rows, jitter at half its range.
const API_CLIENT: [Expected; 7] = [
    ("GET, 503 twice then success", "status=200", 3, 3, &[250, 500], FINAL),
    ("GET, 429 with Retry-After: 2", "status=200", 2, 2, &[2250], FINAL),
    ("GET, 404 is final", "status=404", 1, 1, &[], FINAL),
    ("GET, always 503 (gives up)", "status=503", 4, 4, &[250, 500, 1000], EXHAUSTED),
    ("POST without a key, 503", "status=503", 1, 1, &[], NOT_SAFE),
    ("POST with a key, 503 then success", "status=200", 2, 2, &[250], FINAL),
    ("POST, 429 is safe to retry", "status=201", 2, 2, &[2250], FINAL),
];

fn check(rows: &[Row], expected: &[Expected]) {
    assert_eq!(rows.len(), expected.len());
    for (row, &(label, result, attempts, reached, waits, stop)) in rows.iter().zip(expected) {
        assert_eq!(row.label, label);
        assert_eq!(row.result, result, "{row}");
        assert_eq!((row.attempts, row.reached), (attempts, reached), "{row}");
        let waits: Vec<Duration> = waits.iter().map(|ms| *ms as u32 * MS).collect();
        assert_eq!(row.waits, waits, "{row}");
        assert_eq!(row.stop, stop, "{row}");
    }
}

async fn fresh(table: &[Scenario], jitter: FixedJitter) -> Vec<Row> {
    demo::run_table(jitter, table).await
}

#[tokio::test]
async fn the_roundtripper_table_row_by_row_each_in_a_fresh_process() {
    check(&fresh(&roundtripper_table(), FixedJitter::TOP).await, &ROUNDTRIPPER);
}

#[tokio::test]
async fn the_roundtripper_table_through_one_middleware() {
    let rows = demo::run_shared(FixedJitter::TOP, &roundtripper_table()).await;
    check(&rows, &ROUNDTRIPPER);
    let keyed = rows.iter().find(|row| row.label == "POST with Idempotency-Key").unwrap();
    assert_eq!(keyed.last_body.as_deref(), Some("order=1"), "the body was sent again");
}

#[tokio::test]
async fn the_api_client_table_row_by_row_each_in_a_fresh_process() {
    let rows = fresh(&api_client_table(), FixedJitter::new(0.5)).await;
    check(&rows, &API_CLIENT);
    let ids: Vec<Option<&str>> = rows.iter().map(|row| row.request_id.as_deref()).collect();
    assert_eq!(ids[2..4], [Some("req-1"), Some("req-4")], "the final responses' request ids");
}

#[tokio::test]
async fn the_api_client_table_through_one_middleware() {
    let rows = demo::run_shared(FixedJitter::new(0.5), &api_client_table()).await;
    check(&rows, &API_CLIENT);
}

#[test]
fn the_demo_runs_the_defaults() {
    assert_eq!(format!("{:?}", demo::config()), format!("{:?}", RetryConfig::default()));
}

#[tokio::test]
async fn the_demo_client_is_the_quick_start_client() {
    // The middleware follows redirects itself: the report counts the hop.
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/a"))
        .respond_with(wiremock::ResponseTemplate::new(303).insert_header("Location", "/b"))
        .mount(&server)
        .await;
    let client = demo::client(ManualClock::new(), FixedJitter::TOP);
    let slot = ReportSlot::new();
    let response =
        client.post(format!("{}/a", server.uri())).with_extension(slot.clone()).send().await;
    assert_eq!(response.unwrap().status(), 404, "the hop was followed to /b");
    assert_eq!(slot.get().unwrap().redirects, 1);
}
