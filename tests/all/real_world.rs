//! What real servers and real stacks do that a scripted server does not:
//! bodies that stall, answers that never come, deadlines that pass with an
//! attempt in flight, middlewares that wrap errors or leave extensions behind.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use reqwest_safe_retry::{
    AttemptNumber, DeadlineExceeded, FixedJitter, ManualClock, ReportSlot, RetryDeadline,
    RetryMiddleware, RetryReason, RetryReport, StopReason, TokioClock,
};
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

// ---- Bodies that stall ----

#[tokio::test]
async fn a_stalled_error_body_does_not_hold_up_the_retry() {
    let (url, connections) = raw_server(vec![Raw::StalledBody, Raw::Reply(OK_CLOSE)]).await;
    let (client, clock) = client(policy().build().unwrap());
    let response = bounded("the retry after a stalled body", client.get(&url).send()).await;
    assert_eq!(response.unwrap().status(), 200);
    assert_eq!(connections.get(), 2);
    assert_eq!(clock.sleeps(), [100 * MS]);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_error_body_is_dropped_when_the_wait_ends() {
    // On tokio's clock: the drain runs for the whole 100 ms wait, then the
    // body is dropped and the retry goes out on a new connection.
    let (url, connections) = raw_server(vec![Raw::StalledBody, Raw::Reply(OK_CLOSE)]).await;
    let middleware = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(TokioClock)
        .with_jitter_source(FixedJitter::TOP);
    let start = tokio::time::Instant::now();
    let response = bounded("the retry", wrap(middleware).get(&url).send()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(start.elapsed(), 100 * MS, "no longer than the planned wait");
    assert_eq!(connections.get(), 2);
}

#[tokio::test]
async fn a_stalled_body_that_is_not_retried_reaches_the_caller_at_once() {
    let (url, _) = raw_server(vec![Raw::StalledBody]).await;
    let (client, _) = client(policy().build().unwrap());
    let response = bounded("a POST's 503", client.post(&url).body("x").send()).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(RetryReport::from_response(&response).stop, StopReason::NotSafe);
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
async fn a_shorter_request_timeout_is_never_raised() {
    let (url, connections) = raw_server(vec![Raw::Stall]).await;
    let config = policy()
        .with_max_retries(1)
        .with_attempt_timeout(Duration::from_secs(10))
        .with_deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let middleware =
        RetryMiddleware::new(config).with_clock(TokioClock).with_jitter_source(FixedJitter::TOP);
    let start = tokio::time::Instant::now();
    let call = wrap(middleware).get(&url).timeout(Duration::from_secs(1)).send();
    let error = bounded("the call", call).await.unwrap_err();
    assert!(error.is_timeout());
    // Two attempts of 1 s each and one wait of 100 ms.
    assert_eq!(start.elapsed(), Duration::from_millis(2100));
    assert_eq!(connections.get(), 2);
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

// ---- Extensions belong to one attempt ----

/// Notes what each attempt's extensions held, then leaves a mark of its own
/// and an attempt number of its own, as a careless inner middleware might.
#[derive(Clone, Default)]
struct Litterer {
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// The attempt number an attempt carried, and whether it found a mark.
type Seen = (Option<u32>, bool);

#[derive(Clone)]
struct Mark;

#[async_trait::async_trait]
impl Middleware for Litterer {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let number = extensions.get::<AttemptNumber>().map(AttemptNumber::get);
        self.seen.lock().unwrap().push((number, extensions.get::<Mark>().is_some()));
        extensions.insert(Mark);
        next.run(req, extensions).await
    }
}

#[tokio::test]
async fn each_attempt_starts_from_the_callers_extensions() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let inner = Litterer::default();
    let retry = RetryMiddleware::new(policy().build().unwrap()).with_clock(ManualClock::new());
    let client = ClientBuilder::new(bare_reqwest()).with(retry).with(inner.clone()).build();
    let request = client.get(format!("{}/r", server.uri())).build().unwrap();
    let mut extensions = Extensions::new();
    client.execute_with_extensions(request, &mut extensions).await.unwrap();
    assert_eq!(*inner.seen.lock().unwrap(), [(None, false), (Some(2), false), (Some(3), false)]);
    assert!(extensions.get::<AttemptNumber>().is_none(), "the attempt number does not leak out");

    // The same extensions, reused for the next request: its first attempt is
    // not mistaken for a later one.
    inner.seen.lock().unwrap().clear();
    let request = client.get(format!("{}/r", server.uri())).build().unwrap();
    client.execute_with_extensions(request, &mut extensions).await.unwrap();
    assert_eq!(inner.seen.lock().unwrap()[0].0, None);
}

// ---- Errors that inner middlewares wrap ----

#[tokio::test]
async fn a_wrapped_reqwest_error_is_classified_by_what_it_wraps() {
    let url = refused_address().await;
    let clock = ManualClock::new();
    let retry = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP);
    let events = Arc::new(Mutex::new(Vec::new()));
    let log = events.clone();
    let retry = retry.on_decision(move |event| log.lock().unwrap().push(event.decision));
    let client = ClientBuilder::new(bare_reqwest()).with(retry).with(Wrapping).build();
    let error = client.get(&url).send().await.unwrap_err();
    assert!(matches!(error, reqwest_middleware::Error::Middleware(_)), "returned as it came");
    assert_eq!(clock.sleeps(), [100 * MS, 200 * MS, 400 * MS]);
    let first = events.lock().unwrap()[0];
    assert_eq!(
        first,
        reqwest_safe_retry::Decision::Retry { after: 100 * MS, reason: RetryReason::NotConnected }
    );
}

// ---- Failures that repeat themselves are final ----

/// Sends a GET to a raw server that answers `reply` and checks that the
/// failure is final: one attempt, one connection, no wait.
async fn assert_final(reply: &'static str) {
    let (url, connections) = raw_server(vec![Raw::Reply(reply)]).await;
    let (client, clock) = client(policy().build().unwrap());
    let slot = ReportSlot::new();
    let error = client.get(&url).with_extension(slot.clone()).send().await.unwrap_err();
    assert!(!error.is_timeout() && !error.is_connect(), "{error:?}");
    assert_eq!(slot.get().unwrap().stop, StopReason::NothingToRetry, "{error:?}");
    assert!(clock.sleeps().is_empty());
    assert_eq!(connections.get(), 1);
}

#[tokio::test]
async fn a_malformed_response_is_final() {
    assert_final("HTTP/1.1 2000 Nope\r\n\r\n").await;
}

#[tokio::test]
async fn oversized_response_headers_are_final() {
    let huge = format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n", "a".repeat(1 << 20));
    assert_final(Box::leak(huge.into_boxed_str())).await;
}

#[tokio::test]
async fn an_unsupported_version_is_final() {
    assert_final("HTTP/3.0 200 OK\r\n\r\n").await;
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

/// Sends the request on, then makes a call of its own (an audit log, say)
/// to `audit`, and returns that call's error wrapped if it fails.
struct Auditing {
    audit: String,
}

#[async_trait::async_trait]
impl Middleware for Auditing {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let response = next.run(req, extensions).await?;
        match reqwest::Client::new().post(&self.audit).send().await {
            Ok(_) => Ok(response),
            Err(e) => Err(reqwest_middleware::Error::middleware(Context(e))),
        }
    }
}

#[tokio::test]
async fn another_calls_wrapped_error_says_nothing_about_this_request() {
    let server = MockServer::start().await;
    script_statuses(&server, "/orders", &[201]).await;
    let audit = refused_address().await;
    let retry = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::TOP);
    let client = ClientBuilder::new(bare_reqwest()).with(retry).with(Auditing { audit }).build();
    let slot = ReportSlot::new();
    let call = client.post(format!("{}/orders", server.uri())).body("order");
    call.with_extension(slot.clone()).send().await.unwrap_err();
    assert_eq!(hits(&server).await, 1, "the order was created once");
    assert_eq!(slot.get().unwrap().stop, StopReason::NothingToRetry);
}
