//! Many requests at once through one middleware, and servers that never let go.

use crate::support;

use std::time::Duration;

use reqwest_safe_retry::{
    DeadlineExceeded, Decision, FixedJitter, ManualClock, ReportSlot, RetryBudget, RetryConfig,
    RetryMiddleware, RetryReport, StopReason,
};
use support::*;
use wiremock::matchers::{any, header};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_concurrent_requests_all_complete_within_the_budget() {
    let server = MockServer::start().await;
    Mock::given(header("x-fail", "1"))
        .respond_with(ResponseTemplate::new(503))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&server).await;

    // Zero-length waits keep virtual time still, so the whole run falls in one
    // budget window: the 1500 final answers earn 150 retries, each answer
    // once (into the reserve of 5 while it is below its cap, else into the
    // window): at most 155.
    let config = RetryConfig::builder()
        .with_initial_backoff(Duration::ZERO)
        .with_max_backoff(Duration::ZERO)
        .with_budget(RetryBudget::default())
        .build()
        .unwrap();
    let retries = Counter::default();
    let budget_stops = Counter::default();
    let (r, b) = (retries.clone(), budget_stops.clone());
    let middleware = RetryMiddleware::new(config)
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::TOP)
        .on_decision(move |event| match event.decision {
            Decision::Retry { .. } => r.bump(),
            Decision::Stop(StopReason::BudgetExhausted) => b.bump(),
            _ => {}
        });
    let client = wrap(middleware);
    let url = format!("{}/r", server.uri());

    let tasks: Vec<_> = (0..2000)
        .map(|n| {
            let client = client.clone();
            let url = url.clone();
            let fail = if n % 4 == 0 { "1" } else { "0" };
            tokio::spawn(async move {
                let response = client.get(url).header("x-fail", fail).send().await.unwrap();
                (fail == "1", response.status().as_u16(), RetryReport::from_response(&response))
            })
        })
        .collect();
    let all = futures_util::future::join_all(tasks);
    let results =
        tokio::time::timeout(Duration::from_secs(120), all).await.expect("no request hangs");

    let mut attempts = 0;
    for result in results {
        let (failing, status, report) = result.expect("no task panics");
        assert_eq!(status, if failing { 503 } else { 200 });
        if !failing {
            assert_eq!(report.attempts, 1);
        }
        attempts += report.attempts as usize;
    }
    let granted = retries.get();
    assert!((100..=155).contains(&granted), "{granted} retries granted");
    assert_eq!(attempts, 2000 + granted);
    assert_eq!(hits(&server).await, 2000 + granted);
    assert!(budget_stops.get() > 0);
}

#[tokio::test]
async fn zero_retry_after_forever_stops_at_the_retry_count() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![ResponseTemplate::new(503).insert_header("Retry-After", "0")]).await;
    let config = policy().with_max_retries(50).with_retry_after_spread(false).build().unwrap();
    let (client, clock) = client(config);
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (51, StopReason::RetriesExhausted));
    assert_eq!(clock.sleeps(), vec![Duration::ZERO; 50]);
    assert_eq!(hits(&server).await, 51);
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
        .with_retry_after_spread(false)
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
