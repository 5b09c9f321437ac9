//! What the middleware tells: the report on each response, the decision
//! hook, the metrics it feeds, the `tracing` events, and how reqwest-tracing's
//! spans sit around the attempts.

#[cfg(feature = "tracing")]
mod reqwest_tracing;
#[cfg(feature = "tracing")]
mod tracing_events;

use crate::support;
use metrics_wiring::{Recorded, WARM_UP, exchange};
use reqwest_safe_retry::{
    RetryMiddleware, clock::ManualClock, report::Decision, report::ReportSlot, report::RetryReason,
    report::RetryReport, report::StopReason,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;
use wiremock::MockServer;

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

#[tokio::test]
async fn hook_sees_every_decision() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let middleware = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(ManualClock::new())
        .with_jitter_source(reqwest_safe_retry::jitter::FixedJitter::TOP)
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

#[path = "../../examples/metrics_wiring/mod.rs"]
mod metrics_wiring;

/// The exchange runs on this thread (`#[tokio::test]` is single-threaded),
/// so a recorder installed for this thread alone sees every decision, and
/// tests running beside it see none of them.
#[tokio::test]
async fn the_hook_counts_retries_stops_and_waits_by_stable_labels() {
    let recorder = Recorded::default();
    let _local = metrics::set_default_local_recorder(&recorder);

    let (calls, throttled) = exchange().await;

    let outcomes: Vec<(&str, u16, u32, StopReason)> = calls[WARM_UP..]
        .iter()
        .map(|c| (c.label, c.status, c.report.attempts, c.report.stop))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("GET /flaky", 200, 3, StopReason::NothingToRetry),
            ("GET /limited", 200, 2, StopReason::NothingToRetry),
            ("GET /too-long", 429, 1, StopReason::RetryAfterTooLong(Duration::from_secs(120))),
            ("GET (other host)", 503, 4, StopReason::RetriesExhausted),
            ("GET (other host)", 503, 3, StopReason::BudgetExhausted),
            // The host that is down: its own reserve, then one attempt a
            // call until its throttle keeps calls back.
            ("GET (host down)", 503, 4, StopReason::RetriesExhausted),
            ("GET (host down)", 503, 3, StopReason::BudgetExhausted),
            ("GET (host down)", 503, 1, StopReason::BudgetExhausted),
            ("GET (host down)", 503, 1, StopReason::BudgetExhausted),
            ("GET (host down)", 503, 1, StopReason::BudgetExhausted),
            ("GET (host down)", 503, 1, StopReason::BudgetExhausted),
            ("GET (host down)", 503, 1, StopReason::BudgetExhausted),
            ("GET (host down)", 503, 1, StopReason::BudgetExhausted),
            ("GET (host down)", 503, 1, StopReason::BudgetExhausted),
        ]
    );
    assert_eq!(throttled, 31);
    assert!(calls[..WARM_UP].iter().all(|c| c.status == 200 && c.report.attempts == 1));

    let counters = recorder.counters();
    let expected: BTreeMap<String, u64> = [
        // /flaky twice, the other hosts three times and twice each.
        (r#"http_client_retries_total{reason="status",status="503"}"#, 12),
        (r#"http_client_retries_total{reason="status",status="429"}"#, 1),
        // /flaky and /limited recovered; the twenty first-attempt successes
        // are not counted.
        (r#"http_client_retry_stops_total{stop="nothing_to_retry"}"#, 2),
        (r#"http_client_retry_stops_total{stop="retry_after_too_long"}"#, 1),
        (r#"http_client_retry_stops_total{stop="retries_exhausted"}"#, 2),
        (r#"http_client_retry_stops_total{stop="budget_exhausted"}"#, 9),
        // Calls kept back, unsent: one stop each.
        (r#"http_client_retry_stops_total{stop="throttled"}"#, 31),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(counters, expected);

    // Backoff waits at half their ceilings (0.5 s, 1 s, 2 s), and the
    // Retry-After of 2 s spread by half of the first ceiling. The 120 s asked
    // for is not a wait: it is the refused Retry-After.
    let histograms = recorder.histograms();
    let expected: BTreeMap<String, Vec<f64>> = [
        (
            "http_client_retry_wait_seconds",
            vec![0.25, 0.5, 2.25, 0.25, 0.5, 1.0, 0.25, 0.5, 0.25, 0.5, 1.0, 0.25, 0.5],
        ),
        ("http_client_retry_after_refused_seconds", vec![120.0]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(histograms, expected);
}

/// What the metrics example exports for a fleet whose store is gone.
#[cfg(feature = "fleet")]
#[tokio::test]
async fn a_fleet_whose_store_is_gone_shows_as_not_connected_with_failed_rounds() {
    use reqwest_safe_retry::fleet::Fleet;
    let recorder = Recorded::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let fleet = Fleet::new(metrics_wiring::Gone);
    let server = wiremock::MockServer::start().await;
    let client = RetryMiddleware::new(reqwest_safe_retry::RetryConfig::default())
        .with_fleet(&fleet)
        .client(reqwest::Client::builder())
        .unwrap()
        .build();
    let _ = client.get(server.uri()).send().await.unwrap();
    assert!(fleet.sync().await.is_err());
    metrics_wiring::record_fleet(&fleet.status());
    let gauges = recorder.gauges();
    assert_eq!(gauges[metrics_wiring::FLEET_CONNECTED], 0.0, "{gauges:?}");
    let counters = recorder.counters();
    let failed = format!("{}{{what=\"failed_rounds\"}}", metrics_wiring::FLEET);
    assert_eq!(counters[&failed], 1, "{counters:?}");
    assert_eq!(counters.keys().filter(|k| k.starts_with(metrics_wiring::FLEET)).count(), 8);
}
