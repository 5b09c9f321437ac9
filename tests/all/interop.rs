//! Side by side with reqwest and other middleware: what a middleware inside
//! or outside the retry layer sees, reqwest's own retry off in the client the
//! middleware builds, the public types' traits, and end-to-end scenario tables.

mod orders;
mod scenarios;

use crate::support;
use crate::support::calls::{chain, config, h2_client_without_reqwest_retry, send, with_retry};
use http::Extensions;
use reqwest::{Method, Request, Response};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use reqwest_safe_retry::{
    RetryConfig, RetryDeadline, RetryMiddleware, clock::ManualClock, clock::TokioClock,
    jitter::FixedJitter, report::AttemptNumber, report::ReportSlot, report::RetryReason,
    report::RetryReport, report::StopReason, *,
};
use reqwest_safe_retry::{clock::*, jitter::*, report::*};
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
    send_sync::<reqwest_safe_retry::rate_limit::HostPaused>();
    send_sync::<reqwest_safe_retry::rate_limit::ReturnIfPaused>();
    send_sync::<reqwest_safe_retry::rate_limit::Throttled>();
    send_sync::<reqwest_safe_retry::rate_limit::SkipThrottling>();
}

#[test]
fn extension_markers_are_cloneable_as_reqwest_middleware_requires() {
    cloneable::<SafeToRetry>();
    cloneable::<MaxRetries>();
    cloneable::<RetryDeadline>();
    cloneable::<reqwest_safe_retry::rate_limit::ReturnIfPaused>();
    cloneable::<reqwest_safe_retry::rate_limit::SkipThrottling>();
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

/// Notes the size of the future of the middleware next in the chain.
#[derive(Clone, Default)]
struct FutureSize(Arc<Mutex<Option<usize>>>);

#[async_trait::async_trait]
impl Middleware for FutureSize {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let future = next.run(req, extensions);
        *self.0.lock().unwrap() = Some(std::mem::size_of_val(&*future));
        future.await
    }
}

/// The state a call keeps across its awaits is one block of the heap,
/// which reqwest-middleware boxes for every request; BENCHMARKS states its
/// size. Above 1,024 bytes, glibc's per-thread cache of freed blocks no
/// longer takes it, and every call pays for the allocator's slow path.
#[tokio::test]
async fn a_call_s_future_fits_the_allocator_s_per_thread_cache_and_is_as_documented() {
    let server = MockServer::start().await;
    let size = FutureSize::default();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(size.clone())
        .with(RetryMiddleware::default())
        .build();
    client.get(server.uri()).send().await.unwrap();
    let bytes = size.0.lock().unwrap().expect("a call went through");
    assert!(bytes <= 1024, "the call's future is {bytes} bytes");
    // The figure BENCHMARKS states, within a little that another toolchain's
    // layout may move it.
    let benchmarks = include_str!("../../BENCHMARKS.md").replace('\n', " ");
    let lead = "The future every request carries is ";
    let at = benchmarks.find(lead).expect("BENCHMARKS states the size") + lead.len();
    let stated: usize = benchmarks[at..].split(' ').next().unwrap().parse().unwrap();
    assert!(stated.abs_diff(bytes) <= 32, "BENCHMARKS says {stated} bytes, the future is {bytes}");
}
