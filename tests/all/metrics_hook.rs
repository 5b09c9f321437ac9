//! The decision hook feeding the `metrics` facade, as `examples/metrics.rs`
//! wires it: the same hook, recorder and exchange, asserted exactly.

#[path = "../../examples/metrics_wiring/mod.rs"]
mod metrics_wiring;

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_wiring::{Recorded, WARM_UP, exchange};
use reqwest_safe_retry::StopReason;

/// The exchange runs on this thread (`#[tokio::test]` is single-threaded),
/// so a recorder installed for this thread alone sees every decision, and
/// tests running beside it see none of them.
#[tokio::test]
async fn the_hook_counts_retries_stops_and_waits_by_stable_labels() {
    let recorder = Recorded::default();
    let _local = metrics::set_default_local_recorder(&recorder);

    let calls = exchange().await;

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
        ]
    );
    assert!(calls[..WARM_UP].iter().all(|c| c.status == 200 && c.report.attempts == 1));

    let counters = recorder.counters();
    let expected: BTreeMap<String, u64> = [
        // /flaky twice, the other host three times and twice.
        (r#"http_client_retries_total{reason="status",status="503"}"#, 7),
        (r#"http_client_retries_total{reason="status",status="429"}"#, 1),
        // /flaky and /limited recovered; the twenty first-attempt successes
        // are not counted.
        (r#"http_client_retry_stops_total{stop="nothing_to_retry"}"#, 2),
        (r#"http_client_retry_stops_total{stop="retry_after_too_long"}"#, 1),
        (r#"http_client_retry_stops_total{stop="retries_exhausted"}"#, 1),
        (r#"http_client_retry_stops_total{stop="budget_exhausted"}"#, 1),
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
        ("http_client_retry_wait_seconds", vec![0.25, 0.5, 2.25, 0.25, 0.5, 1.0, 0.25, 0.5]),
        ("http_client_retry_after_refused_seconds", vec![120.0]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(histograms, expected);
}
