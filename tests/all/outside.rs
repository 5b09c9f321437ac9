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
