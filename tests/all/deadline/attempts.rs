//! The deadline and the attempt timeout against attempts in flight: each
//! cuts an attempt that has no timeout of its own, shortens a longer one,
//! never raises a shorter one, and says so in the error.

use crate::support;
use reqwest_safe_retry::{
    DeadlineExceeded, RetryDeadline, RetryMiddleware, clock::ManualClock, clock::TokioClock,
    jitter::FixedJitter, report::ReportSlot, report::RetryReport, report::StopReason,
};
use std::time::Duration;
use support::*;
use wiremock::MockServer;

/// Long enough for anything on loopback; a hang fails the test with a message.
const BOUND: Duration = Duration::from_secs(20);

async fn bounded<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(BOUND, future).await.unwrap_or_else(|_| panic!("{what} hung"))
}

fn deadline_error(error: &reqwest_middleware::Error) -> Option<&DeadlineExceeded> {
    match error {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<DeadlineExceeded>(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

// ---- The deadline bounds the attempt in flight ----

#[tokio::test(start_paused = true)]
async fn the_deadline_cuts_an_attempt_that_has_no_timeout() {
    let (url, connections) = raw_server(vec![Raw::Stall]).await;
    let config = policy().with_deadline(Duration::from_secs(2)).build().unwrap();
    let middleware = RetryMiddleware::new(config).with_clock(TokioClock);
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let call = wrap(middleware).get(&url).with_extension(slot.clone()).send();
    let error = bounded("the call", call).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    let deadline = deadline_error(&error).expect("the deadline's own error");
    assert_eq!((deadline.deadline(), deadline.attempts()), (Duration::from_secs(2), 1));
    assert_eq!(slot.get().unwrap().stop, StopReason::DeadlineExceeded);
    assert_eq!(connections.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_shortens_a_longer_request_timeout_and_reqwest_reports_it() {
    let (url, _) = raw_server(vec![Raw::Stall]).await;
    let config = policy().build().unwrap();
    let middleware = RetryMiddleware::new(config).with_clock(TokioClock);
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let call = wrap(middleware)
        .get(&url)
        .timeout(Duration::from_secs(60))
        .with_extension(RetryDeadline::new(Duration::from_secs(3)))
        .with_extension(slot.clone())
        .send();
    let error = bounded("the call", call).await.unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::DeadlineExceeded));
}

#[tokio::test(start_paused = true)]
async fn a_request_s_own_timeout_bounds_the_whole_call_and_is_never_raised() {
    let (url, connections) = raw_server(vec![Raw::Stall]).await;
    let config = policy()
        .with_max_retries(1)
        .with_attempt_timeout(Duration::from_secs(10))
        .with_deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let middleware =
        RetryMiddleware::new(config).with_clock(TokioClock).with_jitter_source(FixedJitter::TOP);
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let call = wrap(middleware)
        .get(&url)
        .timeout(Duration::from_secs(1))
        .with_extension(slot.clone())
        .send();
    let error = bounded("the call", call).await.unwrap_err();
    // As reqwest alone: the call ends at its timeout, with reqwest's error,
    // and no retry follows.
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(connections.get(), 1);
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::DeadlineExceeded));
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_bounds_each_attempt_and_is_retried_when_safe() {
    let (url, connections) = raw_server(vec![Raw::Stall, Raw::Stall, Raw::Reply(OK_CLOSE)]).await;
    let config = policy().with_attempt_timeout(Duration::from_secs(5)).build().unwrap();
    let middleware =
        RetryMiddleware::new(config).with_clock(TokioClock).with_jitter_source(FixedJitter::TOP);
    let start = tokio::time::Instant::now();
    let response = bounded("the call", wrap(middleware).get(&url).send()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(RetryReport::from_response(&response).attempts, 3);
    // 5 s, a 100 ms wait, 5 s, a 200 ms wait, then the answer.
    assert_eq!(start.elapsed(), Duration::from_millis(10_300));
    assert_eq!(connections.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_is_not_retried_for_a_post_without_a_key() {
    let (url, connections) = raw_server(vec![Raw::Stall, Raw::Reply(OK_CLOSE)]).await;
    let config = policy().with_attempt_timeout(Duration::from_secs(5)).build().unwrap();
    let middleware = RetryMiddleware::new(config).with_clock(TokioClock);
    let slot = ReportSlot::new();
    let call = wrap(middleware).post(&url).body("order").with_extension(slot.clone()).send();
    let error = bounded("the call", call).await.unwrap_err();
    assert!(error.is_timeout());
    assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe);
    assert_eq!(connections.get(), 1);
}

#[tokio::test]
async fn a_wait_that_would_leave_under_10_ms_to_send_is_not_started() {
    // The first wait is 100 ms; a retry needs 10 ms after it.
    let cases = [(110 * MS - Duration::from_nanos(1), 503, 0), (110 * MS, 200, 1)];
    for (deadline, status, waits) in cases {
        let server = MockServer::start().await;
        script_statuses(&server, "/r", &[503, 200]).await;
        let (deadlined, clock) = client(policy().with_deadline(deadline).build().unwrap());
        let response = deadlined.get(format!("{}/r", server.uri())).send().await.unwrap();
        assert_eq!(response.status(), status, "{deadline:?}");
        assert_eq!(clock.sleeps().len(), waits, "{deadline:?}");
        if status == 503 {
            let report = RetryReport::from_response(&response);
            assert_eq!(report.stop, StopReason::DeadlineExceeded);
        }
    }
}

#[tokio::test]
async fn on_the_manual_clock_the_deadline_cuts_an_attempt_when_the_test_moves_time() {
    let (url, _) = raw_server(vec![Raw::Stall]).await;
    let clock = ManualClock::new();
    let config = policy().with_deadline(Duration::from_secs(2)).build().unwrap();
    let client = wrap(RetryMiddleware::new(config).with_clock(clock.clone()));
    let call = tokio::spawn(async move { client.get(&url).send().await });
    // Virtual time stands still while the attempt is pending; move it.
    let mover = clock.clone();
    let error = bounded("the call", async move {
        loop {
            tokio::task::yield_now().await;
            mover.advance(Duration::from_millis(500));
            if call.is_finished() {
                return call.await.unwrap().unwrap_err();
            }
        }
    })
    .await;
    assert!(deadline_error(&error).is_some(), "{error:?}");
    assert!(clock.elapsed() >= Duration::from_secs(2));
}

// ---- Edges found by trying to break the promises ----

#[tokio::test]
async fn a_deadline_too_far_off_for_an_instant_is_no_deadline() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (far, _) = client(policy().with_deadline(Duration::MAX).build().unwrap());
    let url = format!("{}/r", server.uri());
    assert_eq!(far.get(&url).send().await.unwrap().status(), 200);
    let (plain, _) = client(policy().build().unwrap());
    let call = plain.get(&url).with_extension(RetryDeadline::new(Duration::MAX)).send();
    assert_eq!(call.await.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn no_retry_still_keeps_the_deadline_and_the_attempt_timeout() {
    for config in [
        policy().with_deadline(Duration::from_secs(2)),
        policy().with_attempt_timeout(Duration::from_secs(2)),
    ] {
        let (url, connections) = raw_server(vec![Raw::Stall]).await;
        let middleware = RetryMiddleware::new(config.build().unwrap()).with_clock(TokioClock);
        let slot = ReportSlot::new();
        let start = tokio::time::Instant::now();
        let call = wrap(middleware)
            .get(&url)
            .with_extension(reqwest_safe_retry::MaxRetries::new(0))
            .with_extension(slot.clone())
            .send();
        let error = bounded("a call without retries", call).await.unwrap_err();
        assert!(error.is_timeout() || deadline_error(&error).is_some(), "{error:?}");
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        let report = slot.get().unwrap();
        assert!(matches!(report.stop, StopReason::RetriesExhausted | StopReason::DeadlineExceeded));
        assert_eq!((report.attempts, connections.get()), (1, 1));
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_cut_by_the_deadline_says_so_with_or_without_a_timeout_of_its_own() {
    for own in [None, Some(Duration::from_secs(60))] {
        let (url, _) = raw_server(vec![Raw::Stall]).await;
        let middleware = RetryMiddleware::new(policy().build().unwrap()).with_clock(TokioClock);
        let slot = ReportSlot::new();
        let mut call = wrap(middleware)
            .post(&url)
            .body("order")
            .with_extension(RetryDeadline::new(Duration::from_secs(3)))
            .with_extension(slot.clone());
        if let Some(own) = own {
            call = call.timeout(own);
        }
        bounded("the call", call.send()).await.unwrap_err();
        assert_eq!(slot.get().unwrap().stop, StopReason::DeadlineExceeded, "{own:?}");
    }
}

// ---- A request's own timeout is the call's ----

#[tokio::test]
async fn a_request_s_own_timeout_leaves_each_attempt_what_remains_and_starts_no_retry_past_it() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 503, 503]).await;
    let clock = ManualClock::new();
    let seen = SeenTimeouts::default();
    let client = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP)
        .client(reqwest::Client::builder())
        .unwrap()
        .with(seen.clone())
        .build();
    let slot = ReportSlot::new();
    let call = client
        .get(format!("{}/r", server.uri()))
        .timeout(Duration::from_millis(250))
        .with_extension(slot.clone())
        .send();
    let response = bounded("the call", call).await.unwrap();
    // Waits of 100 ms and then 200 ms: the second would end past 250 ms,
    // so the 503 in hand is the call's answer.
    assert_eq!(response.status(), 503);
    assert_eq!(clock.sleeps(), [100 * MS]);
    assert_eq!(seen.get(), [Some(250 * MS), Some(150 * MS)]);
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (2, StopReason::DeadlineExceeded));
}
