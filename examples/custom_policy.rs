//! Shaping the policy: a different status set, a custom predicate, and
//! per-request overrides.
//!
//! Run with `cargo run --example custom_policy`; it starts its own server on
//! loopback and prints what each request did.

use std::time::Duration;

use http::StatusCode;

use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::Backoff;
use reqwest_safe_retry::{
    MaxRetries, Outcome, RetryConfig, RetryMiddleware, Retryability, SafeToRetry,
    report::ReportSlot,
};
use wiremock::matchers::path;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Mounts `statuses` at `at`: each answered once in turn, the last for good.
async fn flaky(server: &MockServer, at: &str, statuses: &[u16]) {
    let (last, first) = statuses.split_last().expect("at least one status");
    for (n, status) in first.iter().enumerate() {
        Mock::given(path(at))
            .respond_with(ResponseTemplate::new(*status))
            .up_to_n_times(1)
            .with_priority(n as u8 + 1)
            .mount(server)
            .await;
    }
    Mock::given(path(at)).respond_with(ResponseTemplate::new(*last)).mount(server).await;
}

async fn show(label: &str, request: reqwest_middleware::RequestBuilder) {
    let slot = ReportSlot::new();
    let outcome = request.with_extension(slot.clone()).send().await;
    let report = slot.get().expect("the middleware always reports");
    let result = match outcome {
        Ok(response) => response.status().to_string(),
        Err(error) => format!("error: {error}"),
    };
    println!("{label:<52} {result:<28} attempts={} stop: {}", report.attempts, report.stop);
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = MockServer::start().await;
    let url = |p: &str| format!("{}{p}", server.uri());

    // Retry 500 and 503 only (not 502/504/429), and let a predicate add a rule:
    // a 409 whose body is not yet read means "locked, try again" for this API,
    // but only for requests that are safe to repeat.
    let config = RetryConfig::builder()
        .with_retryable_statuses([
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::SERVICE_UNAVAILABLE,
        ])
        .with_backoff(Backoff::default().with_initial(Duration::from_millis(10)))
        .with_predicate(|attempt| match attempt.outcome {
            Outcome::Response(r) if r.status() == 409 => Some(Retryability::WhenSafe),
            _ => None,
        })
        .build()?;
    let client: ClientWithMiddleware =
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(RetryMiddleware::new(config))
            .build();

    flaky(&server, "/a", &[500, 200]).await;
    show("GET, 500 then 200 (500 is in this status set)", client.get(url("/a"))).await;
    flaky(&server, "/b", &[502, 200]).await;
    show("GET, 502 (not in this status set)", client.get(url("/b"))).await;
    flaky(&server, "/c", &[409, 409, 200]).await;
    show("GET, 409 twice (the predicate retries it)", client.get(url("/c"))).await;
    flaky(&server, "/d", &[409, 200]).await;
    show("POST, 409 (predicate says: only when safe)", client.post(url("/d"))).await;
    flaky(&server, "/e", &[503, 200]).await;
    show(
        "POST marked SafeToRetry, 503 then 200",
        client.post(url("/e")).with_extension(SafeToRetry),
    )
    .await;
    flaky(&server, "/f", &[503, 200]).await;
    show(
        "GET with MaxRetries::new(0), 503",
        client.get(url("/f")).with_extension(MaxRetries::new(0)),
    )
    .await;
    flaky(&server, "/g", &[503]).await;
    show(
        "GET with MaxRetries::new(1), always 503",
        client.get(url("/g")).with_extension(MaxRetries::new(1)),
    )
    .await;
    Ok(())
}
