//! On HTTP/2, an error body dropped for the retry resets only its own
//! stream: the connection goes on serving the retry.

use crate::support;
use reqwest::Method;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::{
    RetryConfig, RetryMiddleware, clock::ManualClock, jitter::FixedJitter, report::ReportSlot,
    report::RetryReport,
};
use std::future::Future;
use std::time::Duration;
use support::*;

/// The policy for every test here: waits of 100, 200, 400 ms..., at most
/// `max_retries` retries, no budget. No client here follows redirects.
fn config(max_retries: u32) -> RetryConfig {
    policy().with_max_retries(max_retries).with_budget(None).build().unwrap()
}

/// `inner` behind the retry middleware, with a manual clock and jitter at the top.
fn with_retry(
    inner: reqwest::ClientBuilder,
    config: RetryConfig,
) -> (ClientWithMiddleware, ManualClock) {
    let clock = ManualClock::new();
    let middleware =
        RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    (middleware.client(inner).expect("the client builds").build(), clock)
}

/// Waits at most 10 s for a request and its retries.
async fn bounded<T>(what: &str, request: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within 10 s"))
}

/// Sends `method` to `url` with a small body and a report slot.
async fn send(
    client: &ClientWithMiddleware,
    method: Method,
    url: &str,
) -> (reqwest_middleware::Result<reqwest::Response>, RetryReport) {
    let slot = ReportSlot::new();
    let request = client.request(method.clone(), url).body("order=1").with_extension(slot.clone());
    let result = bounded(&format!("{method} {url}"), request.send()).await;
    (result, slot.get().expect("the middleware fills the slot"))
}

#[cfg(feature = "http2")]
#[tokio::test]
async fn on_http2_a_dropped_error_body_resets_only_its_stream() {
    use support::h2_server::{Answer, h2_client, h2_server_counting_resets};

    let (url, streams, connections, resets) =
        h2_server_counting_resets(vec![Answer::StalledBody, Answer::Ok]).await;
    let inner = h2_client().retry(reqwest::retry::never());
    let (client, clock) = with_retry(inner, config(3));
    let (result, report) = send(&client, Method::GET, &url).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!((report.attempts, clock.sleeps()), (2, vec![Duration::from_millis(100)]));
    // The stalled body was dropped when the wait ended: its stream was
    // cancelled and the retry went out on the same connection.
    assert_eq!((streams.get(), connections.get()), (2, 1));
    bounded("the stream's reset", async {
        while resets.get() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}
