//! Middlewares outside the retries (`RetryMiddleware::client_behind`): met
//! once per call, whatever the retries do inside.

use std::sync::Arc;

use reqwest_middleware::Extension;
use reqwest_safe_retry::{RetryMiddleware, SafeToRetry, clock::ManualClock};
use wiremock::MockServer;

use crate::support::*;

#[tokio::test]
async fn outside_the_retries_a_middleware_meets_each_call_once_and_an_initialiser_holds() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 201]).await;
    let (per_call, per_attempt) = (Calls::default(), Calls::default());
    let shared: Arc<dyn reqwest_middleware::Middleware> = Arc::new(per_call.clone());
    let client = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(ManualClock::new())
        .client_behind(reqwest::Client::builder(), |outside| {
            assert_eq!(format!("{outside:?}"), "OutsideRetries { .. }");
            // Every request of the client is declared safe to repeat.
            outside.with_init(Extension(SafeToRetry)).with_arc(shared)
        })
        .unwrap()
        .with(per_attempt.clone())
        .build();
    let response = client.post(format!("{}/r", server.uri())).body("order=1").send().await;
    assert_eq!(response.unwrap().status(), 201, "a POST retried: the initialiser ran");
    assert_eq!((per_call.0.get(), per_attempt.0.get()), (1, 3));
}

/// reqwest's own retry, resending a 503 within an attempt.
fn resending_503s() -> reqwest::retry::Builder {
    reqwest::retry::for_host("127.0.0.1").no_budget().classify_fn(|answer| {
        if answer.status() == Some(http::StatusCode::SERVICE_UNAVAILABLE) {
            answer.retryable()
        } else {
            answer.success()
        }
    })
}

#[tokio::test]
async fn reqwest_s_own_retry_is_the_middleware_s_to_give_and_a_builder_s_is_replaced() {
    // With `http2`, a builder's policy gives way to `never()`; without,
    // it is left as it is.
    let builders_kept = !cfg!(feature = "http2");
    for (given, attempts) in [(true, 1), (false, if builders_kept { 1 } else { 2 })] {
        let server = MockServer::start().await;
        script_statuses(&server, "/r", &[503, 201]).await;
        let middleware =
            RetryMiddleware::new(policy().build().unwrap()).with_clock(ManualClock::new());
        let middleware =
            if given { middleware.with_reqwest_retry(resending_503s) } else { middleware };
        assert_eq!(format!("{middleware:?}").contains("reqwest_retry: Some(\"<fn>\")"), given);
        let builder = reqwest::Client::builder().retry(resending_503s());
        let client = middleware.client(builder).unwrap().build();
        let slot = reqwest_safe_retry::report::ReportSlot::new();
        let response = client.get(format!("{}/r", server.uri())).with_extension(slot.clone());
        assert_eq!(response.send().await.unwrap().status(), 201);
        assert_eq!(slot.get().unwrap().attempts, attempts, "given: {given}");
        assert_eq!(hits(&server).await, 2);
    }
}
