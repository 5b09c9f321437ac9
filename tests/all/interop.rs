//! Side by side with reqwest and other middleware: what a middleware inside
//! or outside the retry layer sees, reqwest's own retry off in the client the
//! middleware builds, the public types' traits, and end-to-end scenario tables.

mod orders;
mod scenarios;

use crate::support;
use http::Extensions;
use reqwest::{Method, Request, Response};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use reqwest_safe_retry::{
    RetryConfig, RetryDeadline, RetryMiddleware, clock::ManualClock, clock::TokioClock,
    jitter::FixedJitter, report::AttemptNumber, report::ReportSlot, report::RetryReason,
    report::RetryReport, report::StopReason, *,
};
use reqwest_safe_retry::{clock::*, jitter::*, report::*};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
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

fn send_sync<T: Send + Sync>() {}

fn cloneable<T: Clone>() {}

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<RetryMiddleware>();
    send_sync::<RetryConfig>();
    send_sync::<RetryConfigBuilder>();
    send_sync::<ConfigError>();
    send_sync::<RetryReport>();
    send_sync::<ReportSlot>();
    send_sync::<Decision>();
    send_sync::<StopReason>();
    send_sync::<RetryReason>();
    send_sync::<Jitter>();
    send_sync::<TokioClock>();
    send_sync::<ManualClock>();
    send_sync::<SeededJitter>();
    send_sync::<FixedJitter>();
    send_sync::<SafeToRetry>();
    send_sync::<MaxRetries>();
    send_sync::<RetryDeadline>();
    send_sync::<RetryEvent<'static>>();
    send_sync::<Attempt<'static>>();
}

#[test]
fn extension_markers_are_cloneable_as_reqwest_middleware_requires() {
    cloneable::<SafeToRetry>();
    cloneable::<MaxRetries>();
    cloneable::<RetryDeadline>();
    cloneable::<ReportSlot>();
    cloneable::<RetryMiddleware>();
}

#[test]
fn traits_are_object_safe() {
    let clock: Box<dyn Clock> = Box::new(TokioClock);
    let source: Box<dyn JitterSource> = Box::new(SeededJitter::new(1));
    let unit = source.unit();
    assert!((0.0..=1.0).contains(&unit));
    drop(clock);
}

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

/// The error's source chain, one level a line, looking inside `io::Error`s
/// too (their `source()` skips the error they wrap).
fn chain(error: &reqwest_middleware::Error) -> String {
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
fn h2_client_without_reqwest_retry() -> reqwest::ClientBuilder {
    support::h2_server::h2_client().retry(reqwest::retry::never())
}

/// Five refused streams, then 200; the middleware allows two retries.
#[cfg(feature = "http2")]
async fn five_refusals(inner: reqwest::ClientBuilder) -> (u16, RetryReport, usize, Vec<Duration>) {
    use support::h2_server::{Answer, h2_server};

    let refuse = Answer::Reset(h2::Reason::REFUSED_STREAM);
    let (url, streams, _) =
        h2_server(vec![refuse, refuse, refuse, refuse, refuse, Answer::Ok]).await;
    let (client, clock) = with_retry(inner, config(2));
    let (result, report) = send(&client, Method::POST, &url).await;
    let status = match result {
        Ok(response) => response.status().as_u16(),
        Err(e) => {
            assert!(!e.is_connect(), "{}", chain(&e));
            0
        }
    };
    (status, report, streams.get(), clock.sleeps())
}

#[cfg(feature = "http2")]
#[tokio::test]
async fn through_the_built_client_every_refused_stream_is_an_attempt() {
    // The client `client()` builds has reqwest's own retry off, whether or
    // not the builder turned it off: each stream is one attempt (the first
    // and two retries), three refused streams, and the error of the last.
    for inner in [support::h2_server::h2_client(), h2_client_without_reqwest_retry()] {
        let (status, report, streams, sleeps) = five_refusals(inner).await;
        assert_eq!(status, 0, "the last refusal is returned as an error");
        assert_eq!((report.attempts, report.stop), (3, StopReason::RetriesExhausted));
        assert_eq!(streams, 3);
        assert_eq!(sleeps, [100 * MS, 200 * MS]);
    }
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
