//! No input makes the pure parts panic or break their bounds: durations,
//! status sets and times at their extremes build cleanly or fail with an
//! error, and the arithmetic never overflows.

use std::time::{Duration, SystemTime};

use http::StatusCode;

use proptest::prelude::*;

use reqwest_safe_retry::RetryConfig;
use reqwest_safe_retry::{Backoff, RetryAfter};

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

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn inverted_bounds_are_an_error_not_a_panic(a in any_duration(), b in any_duration()) {
        let built = RetryConfig::builder().with_backoff(Backoff::default().with_initial(a).with_max(b)).build();
        prop_assert_eq!(built.is_ok(), a <= b);
        if let Err(error) = built {
            prop_assert_eq!(error.field(), "backoff.initial");
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

/// Answers 503, with the `Retry-After` the request asks for in
/// `x-retry-after`, if any.
struct EchoRetryAfter;

impl wiremock::Respond for EchoRetryAfter {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let template = wiremock::ResponseTemplate::new(503);
        match request.headers.get("x-retry-after") {
            Some(value) => template.insert_header("Retry-After", value.clone()),
            None => template,
        }
    }
}

/// Times, waits and settings at their extremes.
#[derive(Debug, Clone)]
struct Extreme {
    /// How far the clock moves before the first call, and between calls.
    advance: (Duration, Duration),
    wall_secs: u64,
    retry_after: Option<String>,
    cap: Duration,
    wait_the_cap: bool,
    backoff: (Duration, Duration),
    jitter: reqwest_safe_retry::Jitter,
    unit: f64,
    deadline: Option<Duration>,
    retries: u32,
    budget: (f64, u32, Duration),
}

fn extreme() -> impl Strategy<Value = Extreme> {
    use reqwest_safe_retry::Jitter;
    let retry_after = prop_oneof![
        Just(None),
        Just(Some("0".to_owned())),
        Just(Some(u64::MAX.to_string())),
        Just(Some("99999999999999999999".to_owned())),
        Just(Some("Fri, 31 Dec 9999 23:59:59 GMT".to_owned())),
        Just(Some("Thu, 01 Jan 1970 00:00:00 GMT".to_owned())),
        any::<u64>().prop_map(|s| Some(s.to_string())),
    ];
    let jitter = prop_oneof![
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        Just(Jitter::None)
    ];
    let wall = prop_oneof![Just(0u64), Just(u64::MAX / 4), 0u64..253_402_300_799];
    let budget = (0.0..=1.0f64, 0u32..=1000, 100u64..=3_600_000)
        .prop_map(|(ratio, reserve, ms)| (ratio, reserve, Duration::from_millis(ms)));
    (
        (any_duration(), any_duration()),
        wall,
        retry_after,
        (any_duration(), any::<bool>()),
        (any_duration(), any_duration()),
        (jitter, prop_oneof![Just(0.0), Just(1.0), 0.0..=1.0f64]),
        proptest::option::of(any_duration()),
        0u32..4,
        budget,
    )
        .prop_map(
            |(
                advance,
                wall_secs,
                retry_after,
                (cap, wait_the_cap),
                (a, b),
                (jitter, unit),
                deadline,
                retries,
                budget,
            )| {
                Extreme {
                    advance,
                    wall_secs,
                    retry_after,
                    cap,
                    wait_the_cap,
                    backoff: (a.min(b), a.max(b)),
                    jitter,
                    unit,
                    deadline: deadline.filter(|d| !d.is_zero()),
                    retries,
                    budget,
                }
            },
        )
}

/// Two calls through the quick start's client under `case`: each ends with
/// the server's 503 or the crate's deadline error, within its count.
async fn run_extreme(url: &str, case: Extreme) {
    use reqwest_safe_retry::{
        DeadlineExceeded, RetryAfterOverCap, RetryBudget, RetryMiddleware, clock::ManualClock,
        jitter::FixedJitter, report::RetryReport,
    };
    let wall = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(case.wall_secs)).unwrap();
    let clock = ManualClock::new().with_wall_time(wall);
    clock.advance(case.advance.0);
    let (ratio, reserve, window) = case.budget;
    let over_cap = if case.wait_the_cap {
        RetryAfterOverCap::WaitTheCap
    } else {
        RetryAfterOverCap::ReturnResponse
    };
    let mut config = RetryConfig::builder()
        .with_max_retries(case.retries)
        .with_backoff(
            Backoff::default()
                .with_initial(case.backoff.0)
                .with_max(case.backoff.1)
                .with_jitter(case.jitter),
        )
        .with_retry_after(RetryAfter::default().with_cap(case.cap).with_over_cap(over_cap))
        .with_budget(
            RetryBudget::default().with_ratio(ratio).with_reserve(reserve).with_window(window),
        );
    if let Some(deadline) = case.deadline {
        config = config.with_deadline(deadline);
    }
    let middleware = RetryMiddleware::new(config.build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::new(case.unit));
    let client = middleware.client(reqwest::Client::builder()).unwrap().build();
    for _ in 0..2 {
        let mut request = client.get(url);
        if let Some(value) = &case.retry_after {
            request = request.header("x-retry-after", value);
        }
        match request.send().await {
            Ok(response) => {
                assert_eq!(response.status(), 503);
                assert!(RetryReport::from_response(&response).attempts <= case.retries + 1);
            }
            Err(reqwest_middleware::Error::Middleware(error)) => {
                let paused = error.is::<reqwest_safe_retry::rate_limit::HostPaused>();
                assert!(error.is::<DeadlineExceeded>() || paused, "{error}");
            }
            Err(error) => panic!("{error}"),
        }
        clock.advance(case.advance.1);
    }
}

/// No time a clock reaches, no wait a server asks for and no setting makes
/// the crate's arithmetic overflow: the tests run in a debug build, where an
/// overflow panics.
#[test]
fn extreme_times_waits_and_settings_never_overflow() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let server = runtime.block_on(async {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(EchoRetryAfter)
            .mount(&server)
            .await;
        server
    });
    let url = format!("{}/r", server.uri());
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
    runner
        .run(&extreme(), |case| {
            runtime.block_on(run_extreme(&url, case));
            Ok(())
        })
        .unwrap();
}
