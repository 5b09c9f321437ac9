//! How statuses and failures are classified: which answers are final,
//! which connect and DNS failures are worth another attempt, and what a
//! malformed answer or a wrapped error counts as.

use crate::support;
use http::Extensions;
use reqwest::redirect::Policy;
use reqwest::{Method, Request, Response};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use reqwest_safe_retry::{
    RetryMiddleware, clock::ManualClock, jitter::FixedJitter, report::ReportSlot,
    report::RetryReason, report::RetryReport, report::StopReason,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn send(
    kind: Kind,
    method: Method,
    statuses: &[u16],
    key: Option<&str>,
) -> (u16, usize, RetryReport) {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", statuses).await;
    let (client, _) = kind.client(policy());
    let mut request = client.request(method, format!("{}/r", server.uri()));
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.unwrap();
    let report = RetryReport::from_response(&response);
    (response.status().as_u16(), hits(&server).await, report)
}

#[tokio::test]
async fn final_statuses_are_returned_at_once() {
    for code in [200, 201, 204, 301, 304, 400, 401, 403, 404, 408, 409, 422, 500, 501, 505] {
        let (status, hits, report) =
            send(Kind::NotFollowing, Method::GET, &[code, 200], None).await;
        assert_eq!((status, hits), (code, 1), "{code}");
        assert_eq!(report.stop, StopReason::NothingToRetry, "{code}");
    }
}

#[tokio::test]
async fn status_set_is_configurable() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[500, 503, 200]).await;
    let (client, clock) = client(
        policy()
            .with_retryable_statuses([http::StatusCode::INTERNAL_SERVER_ERROR])
            .build()
            .unwrap(),
    );
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    // 500 is retried now, 503 is no longer.
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 2));
    assert_eq!(clock.sleeps(), [100 * MS]);
}

#[tokio::test]
async fn redirect_errors_are_not_retried() {
    let server = MockServer::start().await;
    let location = format!("{}/loop", server.uri());
    Mock::given(any())
        .respond_with(ResponseTemplate::new(302).insert_header("Location", location.as_str()))
        .mount(&server)
        .await;
    let inner =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::limited(2)).build().unwrap();
    let clock = reqwest_safe_retry::clock::ManualClock::new();
    let middleware = reqwest_safe_retry::RetryMiddleware::default().with_clock(clock.clone());
    let client = reqwest_middleware::ClientBuilder::new(inner).with(middleware).build();
    let error = client.get(&location).send().await.unwrap_err();
    assert!(error.is_redirect());
    assert!(clock.sleeps().is_empty());
    // One attempt: the first request and the two redirects it followed.
    assert_eq!(hits(&server).await, 3);
}

#[tokio::test]
async fn connect_failures_that_will_repeat_are_not_retried() {
    let inner = unresolving_client(&NoSuchHost::default()).build().unwrap();
    let clock = reqwest_safe_retry::clock::ManualClock::new();
    let middleware = reqwest_safe_retry::RetryMiddleware::default().with_clock(clock.clone());
    let client = reqwest_middleware::ClientBuilder::new(inner).with(middleware).build();
    let slot = reqwest_safe_retry::report::ReportSlot::new();
    let error =
        client.get("http://orders.invalid/").with_extension(slot.clone()).send().await.unwrap_err();
    assert!(error.is_connect());
    assert!(clock.sleeps().is_empty());
    assert_eq!(slot.get().unwrap().attempts, 1);
    assert_eq!(slot.get().unwrap().stop, StopReason::NothingToRetry);
}

/// A resolver that fails its first lookups the way `failure` says, then
/// resolves every name to `to`.
struct Flaky {
    failures: std::sync::atomic::AtomicUsize,
    failure: fn() -> std::io::Error,
    to: std::net::SocketAddr,
}

impl reqwest::dns::Resolve for Flaky {
    fn resolve(&self, _: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let left = self.failures.load(std::sync::atomic::Ordering::SeqCst);
        let (failure, to) = (self.failure, self.to);
        if left > 0 {
            self.failures.store(left - 1, std::sync::atomic::Ordering::SeqCst);
        }
        Box::pin(async move {
            if left > 0 {
                return Err(Box::new(failure()) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(std::iter::once(to)) as reqwest::dns::Addrs)
        })
    }
}

async fn through_flaky_dns(
    kind: Kind,
    failure: fn() -> std::io::Error,
) -> (u16, usize, RetryReport) {
    let server = MockServer::start().await;
    script_statuses(&server, "/orders", &[201]).await;
    let resolver =
        Flaky { failures: std::sync::atomic::AtomicUsize::new(2), failure, to: *server.address() };
    let inner = reqwest::Client::builder().dns_resolver(std::sync::Arc::new(resolver));
    let clock = reqwest_safe_retry::clock::ManualClock::new();
    let middleware = reqwest_safe_retry::RetryMiddleware::new(policy().build().unwrap())
        .with_clock(clock.clone());
    let client = match kind {
        Kind::NotFollowing => built(inner, middleware.with_redirect_policy(Policy::none())),
        Kind::Handing => built(inner, middleware),
        Kind::Following => {
            reqwest_middleware::ClientBuilder::new(inner.build().unwrap()).with(middleware).build()
        }
    };
    let slot = reqwest_safe_retry::report::ReportSlot::new();
    let url = format!("http://orders.internal:{}/orders", server.address().port());
    let result = client.post(url).body("order").with_extension(slot.clone()).send().await;
    let status = result.map_or(0, |r| r.status().as_u16());
    (status, hits(&server).await, slot.get().unwrap())
}

#[tokio::test]
async fn a_temporary_dns_failure_is_retried_for_any_method_when_redirects_are_not_followed() {
    let glibc = || {
        std::io::Error::other(
            "failed to lookup address information: Temporary failure in name resolution",
        )
    };
    let timed_out = || std::io::Error::from(std::io::ErrorKind::TimedOut);
    for failure in [glibc as fn() -> std::io::Error, timed_out] {
        for kind in [Kind::NotFollowing, Kind::Handing] {
            let (status, hits, report) = through_flaky_dns(kind, failure).await;
            assert_eq!((status, hits, report.attempts), (201, 1, 3), "{kind:?}");
        }
    }
    // With a client that may follow redirects, the failed lookup may have
    // been a later hop's: the POST is not repeated.
    let (status, hits, report) = through_flaky_dns(Kind::Following, timed_out).await;
    assert_eq!((status, hits, report.stop), (0, 0, StopReason::NotSafe));
}

#[tokio::test]
async fn a_name_that_does_not_exist_stays_final() {
    let nxdomain =
        || std::io::Error::other("failed to lookup address information: Name or service not known");
    let (status, hits, report) = through_flaky_dns(Kind::NotFollowing, nxdomain).await;
    assert_eq!((status, hits, report.attempts, report.stop), (0, 0, 1, StopReason::NothingToRetry));
}

#[tokio::test]
async fn connection_closed_before_response_retries_get() {
    let (url, connections) = raw_server(vec![Raw::Close, Raw::Reply(OK_CLOSE)]).await;
    let (client, clock) = client(policy().build().unwrap());
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(connections.get(), 2);
    assert_eq!(clock.sleeps(), [100 * MS]);
}

#[tokio::test]
async fn connection_closed_before_response_does_not_retry_post() {
    let (url, connections) = raw_server(vec![Raw::Close, Raw::Reply(OK_CLOSE)]).await;
    let (client, _) = client(policy().build().unwrap());
    let slot = reqwest_safe_retry::report::ReportSlot::new();
    let error =
        client.post(&url).body("order=1").with_extension(slot.clone()).send().await.unwrap_err();
    assert!(!error.is_connect());
    assert_eq!(connections.get(), 1);
    assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe);
}

#[tokio::test]
async fn read_timeout_after_sending_retries_get() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![ResponseTemplate::new(200).set_delay(Duration::from_secs(60))])
        .await;
    // Each attempt's bound: a request's own timeout bounds the whole call.
    let (client, clock) = client(policy().with_attempt_timeout(50 * MS).build().unwrap());
    let url = format!("{}/r", server.uri());
    let error = client.get(url).send().await.unwrap_err();
    assert!(error.is_timeout());
    assert_eq!(hits(&server).await, 4);
    assert_eq!(clock.sleeps(), [100 * MS, 200 * MS, 400 * MS]);
}

#[tokio::test]
async fn read_timeout_after_sending_does_not_retry_post() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![ResponseTemplate::new(200).set_delay(Duration::from_secs(60))])
        .await;
    let (client, clock) = client(policy().with_attempt_timeout(50 * MS).build().unwrap());
    let url = format!("{}/r", server.uri());
    let error = client.post(url).body("order=1").send().await.unwrap_err();
    assert!(error.is_timeout());
    assert_eq!(hits(&server).await, 1);
    assert!(clock.sleeps().is_empty());
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
        reqwest_safe_retry::report::Decision::Retry {
            after: 100 * MS,
            reason: RetryReason::NotConnected
        }
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

#[tokio::test]
async fn every_status_code_is_classified() {
    use reqwest_safe_retry::{RetryMiddleware, clock::ManualClock, report::RetryReport};
    let retryable = [429, 502, 503, 504];
    // One client for all: building one loads the system's root certificates.
    let inner = reqwest::Client::new();
    for code in 100..=999u16 {
        let config = reqwest_safe_retry::RetryConfig::builder().with_budget(None).build().unwrap();
        let middleware = RetryMiddleware::new(config).with_clock(ManualClock::new());
        let client = reqwest_middleware::ClientBuilder::new(inner.clone())
            .with(middleware)
            .with(support::Answers::new(&[code]))
            .build();
        let response = client.get("http://status.test/").send().await.unwrap();
        let report = RetryReport::from_response(&response);
        let want = if retryable.contains(&code) { 4 } else { 1 };
        assert_eq!(report.attempts, want, "{code}");
    }
}
