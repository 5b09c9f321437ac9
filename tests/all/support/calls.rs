//! Calls through a middleware whose waits are pinned, bounded in time and
//! reporting what they did: for the suites that compare the middleware with
//! reqwest's own behaviour over TLS, HTTP/2 and failed connections.

use std::future::Future;
use std::time::Duration;

use reqwest::Method;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::clock::ManualClock;
use reqwest_safe_retry::jitter::FixedJitter;
use reqwest_safe_retry::report::{ReportSlot, RetryReport};
use reqwest_safe_retry::{RetryConfig, RetryMiddleware};

use super::policy;
#[cfg(feature = "http2")]
use crate::support;

/// The policy for every test here: waits of 100, 200, 400 ms..., at most
/// `max_retries` retries, no budget. No client here follows redirects.
pub fn config(max_retries: u32) -> RetryConfig {
    policy().with_max_retries(max_retries).with_budget(None).build().unwrap()
}

/// `inner` behind the retry middleware, with a manual clock and jitter at the top.
pub fn with_retry(
    inner: reqwest::ClientBuilder,
    config: RetryConfig,
) -> (ClientWithMiddleware, ManualClock) {
    let clock = ManualClock::new();
    let middleware =
        RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    (middleware.client(inner).expect("the client builds").build(), clock)
}

/// Waits at most 10 s for a request and its retries.
pub async fn bounded<T>(what: &str, request: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within 10 s"))
}

/// Sends `method` to `url` with a small body and a report slot.
pub async fn send(
    client: &ClientWithMiddleware,
    method: Method,
    url: &str,
) -> (reqwest_middleware::Result<reqwest::Response>, RetryReport) {
    let slot = ReportSlot::new();
    let request = client.request(method.clone(), url).body("order=1").with_extension(slot.clone());
    let result = bounded(&format!("{method} {url}"), request.send()).await;
    (result, slot.get().expect("the middleware fills the slot"))
}

/// The error's source chain, one level a line, looking inside `io::Error`s
/// too (their `source()` skips the error they wrap).
pub fn chain(error: &reqwest_middleware::Error) -> String {
    let reqwest_middleware::Error::Reqwest(error) = error else { return format!("{error:?}") };
    let mut lines = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(level) = next {
        lines.push(format!("{level:?}"));
        next = match level.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => level.source(),
        };
    }
    lines.join("\n  caused by: ")
}

/// An HTTP/2 client with reqwest's own retries off, so every stream the
/// server sees is an attempt of the middleware's.
#[cfg(feature = "http2")]
pub fn h2_client_without_reqwest_retry() -> reqwest::ClientBuilder {
    support::h2_server::h2_client().retry(reqwest::retry::never())
}
