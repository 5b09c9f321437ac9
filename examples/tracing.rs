//! Retries as `tracing` events, and the attempt count under the name
//! OpenTelemetry's HTTP conventions give it, `http.request.resend_count`.
//!
//! Run with `cargo run --example tracing`; it starts its own flaky server on
//! loopback. The crate's events are at debug level under the target
//! `reqwest_safe_retry`; they carry the attempt, method, reason and wait, and
//! never headers, bodies or URLs.

use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use reqwest_safe_retry::Backoff;
use reqwest_safe_retry::{
    RetryConfig, RetryMiddleware, report::AttemptNumber, report::RetryReport,
};
use tracing::Instrument;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Placed before the retry middleware, so it runs once per call: one span
/// per call, holding the retries' events and the attempts' spans.
struct CallSpans;

#[async_trait::async_trait]
impl Middleware for CallSpans {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let span = tracing::info_span!("call", http.request.method = %req.method());
        next.run(req, extensions).instrument(span).await
    }
}

/// Placed after the retry middleware, so it runs once per attempt: one span
/// per attempt, as OpenTelemetry's HTTP client conventions describe.
struct AttemptSpans;

#[async_trait::async_trait]
impl Middleware for AttemptSpans {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        // Absent on the first attempt.
        let resend_count = extensions.get::<AttemptNumber>().map_or(0, |n| n.get() - 1);
        let span = tracing::info_span!(
            "HTTP",
            http.request.method = %req.method(),
            http.request.resend_count = resend_count,
            http.response.status_code = tracing::field::Empty,
        );
        let result = next.run(req, extensions).instrument(span.clone()).await;
        if let Ok(response) = &result {
            span.record("http.response.status_code", response.status().as_u16());
        }
        span.in_scope(|| tracing::info!("attempt finished"));
        result
    }
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_target(true)
        .with_ansi(false)
        .init();

    let server = MockServer::start().await;
    Mock::given(any())
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&server).await;

    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::from_millis(20)))
        .build()
        .expect("a valid configuration");
    // A span per call outside the retries, a span per attempt inside them:
    // the retries' events land in the call's span.
    let client = RetryMiddleware::new(config)
        .client_behind(reqwest::Client::builder(), |outside| outside.with(CallSpans))
        .expect("the client builds")
        .with(AttemptSpans)
        .build();

    let response = client
        .get(format!("{}/orders?token=never-logged", server.uri()))
        .send()
        .await
        .expect("the server recovers");
    let report = RetryReport::from_response(&response);
    tracing::info!(
        http.response.status_code = response.status().as_u16(),
        http.request.resend_count = report.resend_count(),
        total_wait_ms = report.total_wait.as_millis() as u64,
        "request finished"
    );
}
