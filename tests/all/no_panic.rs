//! No input makes the pure parts panic or break their bounds.

use crate::support;

use std::time::{Duration, SystemTime};

use http::{HeaderValue, StatusCode};
use proptest::prelude::*;
use reqwest_safe_retry::{RetryConfig, parse_retry_after};

fn cases() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2048);
    ProptestConfig::with_cases(cases)
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..100_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn any_time() -> impl Strategy<Value = SystemTime> {
    (0u64..253_402_300_799).prop_map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn retry_after_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64), now in any_time()) {
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            let _ = parse_retry_after(&value, now);
        }
    }

    #[test]
    fn retry_after_reads_every_delay_seconds(secs in any::<u64>(), now in any_time()) {
        let value = HeaderValue::from_str(&secs.to_string()).unwrap();
        prop_assert_eq!(parse_retry_after(&value, now), Some(Duration::from_secs(secs)));
    }

    #[test]
    fn retry_after_dates_round_trip(at in any_time(), now in any_time()) {
        let value = HeaderValue::from_str(&httpdate::fmt_http_date(at)).unwrap();
        let want = at.duration_since(now).unwrap_or(Duration::ZERO);
        prop_assert_eq!(parse_retry_after(&value, now), Some(want));
    }

    #[test]
    fn inverted_bounds_are_an_error_not_a_panic(a in any_duration(), b in any_duration()) {
        let built = RetryConfig::builder().with_initial_backoff(a).with_max_backoff(b).build();
        prop_assert_eq!(built.is_ok(), a <= b);
        if let Err(error) = built {
            prop_assert_eq!(error.field(), "initial_backoff");
        }
    }

    #[test]
    fn any_status_set_is_accepted_or_rejected_cleanly(codes in proptest::collection::vec(100u16..1000, 0..8)) {
        let statuses = codes.iter().map(|c| StatusCode::from_u16(*c).unwrap());
        let built = RetryConfig::builder().with_retryable_statuses(statuses).build();
        let valid = codes.iter().all(|c| (400..=599).contains(c));
        prop_assert_eq!(built.is_ok(), valid);
        if let Ok(config) = built {
            for code in codes {
                prop_assert!(config.retryable_statuses().contains(&StatusCode::from_u16(code).unwrap()));
            }
        }
    }
}

#[tokio::test]
async fn every_status_code_is_classified() {
    use reqwest_safe_retry::{ManualClock, RetryMiddleware, RetryReport};
    let retryable = [429, 502, 503, 504];
    // One client for all: building one loads the system's root certificates.
    let inner = reqwest::Client::new();
    for code in 100..=999u16 {
        let config = RetryConfig::builder().without_budget().build().unwrap();
        let middleware = RetryMiddleware::new(config).with_clock(ManualClock::new());
        let client = reqwest_middleware::ClientBuilder::new(inner.clone())
            .with(middleware)
            .with(support::Answers::new(&[code]))
            .build();
        let response = client.get("http://status.test/").send().await.unwrap();
        let report = RetryReport::from_response(&response);
        let want = if retryable.contains(&code) { 4 } else { 1 };
        assert_eq!(report.attempts, want, "{code}");
    }
}
