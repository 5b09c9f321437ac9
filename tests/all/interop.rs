//! Living alongside other reqwest-middleware middlewares.

use crate::support;

use std::sync::{Arc, Mutex};

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use reqwest_safe_retry::{AttemptNumber, FixedJitter, ManualClock, RetryMiddleware};
use support::*;
use wiremock::MockServer;

/// Counts the calls it sees and notes the attempt number each carried.
#[derive(Clone, Default)]
struct Recorder {
    calls: Counter,
    attempts: Arc<Mutex<Vec<Option<u32>>>>,
}

#[async_trait::async_trait]
impl Middleware for Recorder {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        self.calls.bump();
        self.attempts
            .lock()
            .unwrap()
            .push(extensions.get::<AttemptNumber>().map(AttemptNumber::get));
        next.run(req, extensions).await
    }
}

fn retry() -> RetryMiddleware {
    RetryMiddleware::new(policy().build().unwrap())
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::TOP)
}

#[tokio::test]
async fn a_middleware_outside_sees_one_call() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let outer = Recorder::default();
    let client = ClientBuilder::new(bare_reqwest()).with(outer.clone()).with(retry()).build();
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(outer.calls.get(), 1);
    assert_eq!(hits(&server).await, 3);
}

#[tokio::test]
async fn a_middleware_inside_sees_every_attempt_and_its_number() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let inner = Recorder::default();
    let client = ClientBuilder::new(bare_reqwest()).with(retry()).with(inner.clone()).build();
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(inner.calls.get(), 3);
    // Absent on the first attempt, numbered from the second.
    assert_eq!(*inner.attempts.lock().unwrap(), [None, Some(2), Some(3)]);
}

#[tokio::test]
async fn two_retry_layers_multiply_attempts() {
    // Not a recommended setup; it shows the layers compose without surprises.
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let config = || policy().with_max_retries(1).build().unwrap();
    let layer = || RetryMiddleware::new(config()).with_clock(ManualClock::new());
    let client = ClientBuilder::new(bare_reqwest()).with(layer()).with(layer()).build();
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(hits(&server).await, 4);
}
