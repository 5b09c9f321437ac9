//! The tower layer over hyper-util's client, against a real server on
//! loopback: the rules the middleware's tests check, checked side by side
//! with the middleware on the same scenario, the same settings and the
//! same pinned clock and jitter.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use reqwest_safe_retry::report::{ReportSlot, RetryReport, StopReason};
use reqwest_safe_retry::tower::{Retry, RetryLayer};
use reqwest_safe_retry::{
    MaxRetries, RetryConfig, RetryMiddleware, clock::ManualClock, jitter::FixedJitter,
};
use tower::{BoxError, Layer, Service, ServiceExt};
use wiremock::{MockServer, ResponseTemplate};

use crate::support::{self, MS, hits, policy, script};

type Hyper = Client<HttpConnector, Full<Bytes>>;

/// hyper-util's client through the layer with `config`, a manual clock and
/// jitter pinned at the top, as [`support::client`] pins the middleware's.
fn layered(config: RetryConfig) -> (Retry<Hyper>, ManualClock) {
    let clock = ManualClock::new();
    let middleware =
        RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    let client = Client::builder(TokioExecutor::new()).build_http();
    (RetryLayer::from(middleware).layer(client), clock)
}

/// What a call came to: the server's hits, the status (or none for an
/// error), the report, and the waits slept.
#[derive(Debug, PartialEq)]
struct Seen {
    hits: usize,
    status: Option<StatusCode>,
    attempts: u32,
    stop: StopReason,
    sleeps: Vec<Duration>,
}

/// One call of `method` (with `key` as its `Idempotency-Key`, if set) to
/// a server playing `answers`, through the layer.
async fn through_layer(
    config: RetryConfig,
    method: Method,
    key: Option<&str>,
    answers: Vec<ResponseTemplate>,
) -> Seen {
    let server = MockServer::start().await;
    script(&server, "/r", answers).await;
    let (service, clock) = layered(config);
    let slot = ReportSlot::new();
    let mut request = Request::builder().method(method).uri(format!("{}/r", server.uri()));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let mut request = request.body(Full::new(Bytes::from_static(b"{}"))).unwrap();
    request.extensions_mut().insert(slot.clone());
    let outcome = service.oneshot(request).await;
    let report = slot.get().expect("a report");
    if let Ok(response) = &outcome {
        assert_eq!(RetryReport::from_extensions(response.extensions()), report);
    }
    Seen {
        hits: hits(&server).await,
        status: outcome.ok().map(|response| response.status()),
        attempts: report.attempts,
        stop: report.stop,
        sleeps: clock.sleeps(),
    }
}

/// The same call through the middleware on reqwest.
async fn through_middleware(
    config: RetryConfig,
    method: Method,
    key: Option<&str>,
    answers: Vec<ResponseTemplate>,
) -> Seen {
    let server = MockServer::start().await;
    script(&server, "/r", answers).await;
    let (client, clock) = support::client(config);
    let slot = ReportSlot::new();
    let mut request = client.request(method, format!("{}/r", server.uri())).body("{}");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let outcome = request.with_extension(slot.clone()).send().await;
    let report = slot.get().expect("a report");
    Seen {
        hits: hits(&server).await,
        status: outcome.ok().map(|response| response.status()),
        attempts: report.attempts,
        stop: report.stop,
        sleeps: clock.sleeps(),
    }
}

fn statuses(statuses: &[u16]) -> Vec<ResponseTemplate> {
    statuses.iter().map(|&status| ResponseTemplate::new(status)).collect()
}

/// A scenario: its name, the method, the key if any, the answers, and the
/// hits and stop expected.
type Case =
    (&'static str, Method, Option<&'static str>, Vec<ResponseTemplate>, (usize, StopReason));

#[tokio::test]
async fn the_rule_table_holds_through_the_layer_as_through_the_middleware() {
    let retry_after =
        |status, after: &str| ResponseTemplate::new(status).insert_header("retry-after", after);
    let cases: Vec<Case> = vec![
        (
            "GET 503 then 200",
            Method::GET,
            None,
            statuses(&[503, 200]),
            (2, StopReason::NothingToRetry),
        ),
        (
            "PUT 502 502 502 502",
            Method::PUT,
            None,
            statuses(&[502]),
            (4, StopReason::RetriesExhausted),
        ),
        ("POST 503: not safe", Method::POST, None, statuses(&[503]), (1, StopReason::NotSafe)),
        (
            "POST with a key",
            Method::POST,
            Some("k-1"),
            statuses(&[503, 201]),
            (2, StopReason::NothingToRetry),
        ),
        (
            "POST with a blank key",
            Method::POST,
            Some(" "),
            statuses(&[503]),
            (1, StopReason::NotSafe),
        ),
        (
            "POST 429, Retry-After",
            Method::POST,
            None,
            vec![retry_after(429, "2"), ResponseTemplate::new(200)],
            (2, StopReason::NothingToRetry),
        ),
        ("GET 404 is final", Method::GET, None, statuses(&[404]), (1, StopReason::NothingToRetry)),
        (
            "GET 503, Retry-After over the cap",
            Method::GET,
            None,
            vec![retry_after(503, "3600")],
            (1, StopReason::RetryAfterTooLong(Duration::from_secs(3600))),
        ),
    ];
    for (name, method, key, answers, (hits, stop)) in cases {
        let layer =
            through_layer(policy().build().unwrap(), method.clone(), key, answers.clone()).await;
        let middleware = through_middleware(policy().build().unwrap(), method, key, answers).await;
        assert_eq!((layer.hits, layer.stop), (hits, stop), "{name}: {layer:?}");
        assert_eq!(layer, middleware, "{name}: the layer and the middleware part ways");
    }
}

#[tokio::test]
async fn the_defaults_are_the_middlewares() {
    // A 503 then a 200, on the settings a user gets: the same waits.
    let layer =
        through_layer(RetryConfig::default(), Method::GET, None, statuses(&[503, 200])).await;
    let middleware =
        through_middleware(RetryConfig::default(), Method::GET, None, statuses(&[503, 200])).await;
    assert_eq!(layer.status, Some(StatusCode::OK));
    assert_eq!(layer, middleware);
}

#[tokio::test]
async fn a_refused_connection_is_retried_for_a_post_and_its_error_comes_back() {
    let refused = support::refused_address().await;
    let (service, clock) = layered(policy().build().unwrap());
    let slot = ReportSlot::new();
    let mut request = Request::post(format!("{refused}/charge"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    request.extensions_mut().insert(slot.clone());
    let error = service.oneshot(request).await.expect_err("nothing listens");
    let client = error
        .downcast_ref::<hyper_util::client::legacy::Error>()
        .expect("hyper-util's own error, as it came");
    assert!(client.is_connect());
    let report = slot.get().expect("a report");
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
    assert_eq!(clock.sleeps().len(), 3, "a backoff before each retry");
}

#[tokio::test]
async fn the_attempt_timeout_cuts_an_attempt_on_the_clock_and_a_get_is_retried() {
    let server = MockServer::start().await;
    // The first answer never comes in time; the second at once.
    script(
        &server,
        "/slow",
        vec![
            ResponseTemplate::new(200).set_delay(Duration::from_secs(3600)),
            ResponseTemplate::new(200),
        ],
    )
    .await;
    let config = policy().with_attempt_timeout(Some(50 * MS)).build().unwrap();
    let (service, clock) = layered(config);
    let request = Request::get(format!("{}/slow", server.uri())).body(Full::default()).unwrap();
    let call = tokio::spawn(service.oneshot(request));
    // The attempt is in flight: the cut is on the manual clock.
    while hits(&server).await == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(50 * MS);
    let response = call.await.unwrap().expect("the retry's answer");
    assert_eq!(response.status(), StatusCode::OK);
    let report = RetryReport::from_extensions(response.extensions());
    assert_eq!(report.attempts, 2);
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn a_request_says_how_many_retries_it_allows() {
    let server = MockServer::start().await;
    script(&server, "/r", statuses(&[503])).await;
    let (service, _clock) = layered(policy().build().unwrap());
    let mut request = Request::get(format!("{}/r", server.uri())).body(Full::default()).unwrap();
    request.extensions_mut().insert(MaxRetries::new(1));
    let response = service.oneshot(request).await.unwrap();
    let report = RetryReport::from_extensions(response.extensions());
    assert_eq!((report.attempts, report.stop), (2, StopReason::RetriesExhausted));
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn readiness_is_awaited_before_each_retry_through_a_buffer() {
    // `Buffer` below the layer: each attempt takes its own place, and the
    // layer waits for it before each retry.
    let server = MockServer::start().await;
    script(&server, "/r", statuses(&[503, 503, 200])).await;
    let (_, clock) = layered(policy().build().unwrap());
    let middleware = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP);
    let client: Hyper = Client::builder(TokioExecutor::new()).build_http();
    let buffered = tower::buffer::Buffer::new(client, 1);
    let service = RetryLayer::from(middleware).layer(buffered);
    let request = Request::get(format!("{}/r", server.uri())).body(Full::default()).unwrap();
    let response = service.oneshot(request).await.expect("the third answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(RetryReport::from_extensions(response.extensions()).attempts, 3);
}

/// A streamed body of `chunks`: not `Clone`, as a proxy's or an upload's.
type Streamed = http_body_util::StreamBody<
    futures_util::stream::Iter<
        std::vec::IntoIter<Result<hyper::body::Frame<Bytes>, std::io::Error>>,
    >,
>;

fn streamed(chunks: &[&'static [u8]]) -> Streamed {
    let frames: Vec<_> = chunks
        .iter()
        .map(|chunk| Ok(hyper::body::Frame::data(Bytes::from_static(chunk))))
        .collect();
    http_body_util::StreamBody::new(futures_util::stream::iter(frames))
}

/// A keyed POST of a streamed body through `BodyBufferLayer` (`limit`),
/// the layer and hyper-util's client, to a server playing `statuses`:
/// the bodies the server received and the report.
async fn keyed_stream(limit: usize, statuses: &[u16]) -> (Vec<Vec<u8>>, RetryReport) {
    use reqwest_safe_retry::tower::{BodyBufferLayer, BufferedBody};

    let server = MockServer::start().await;
    script(&server, "/upload", self::statuses(statuses)).await;
    let clock = ManualClock::new();
    let middleware = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP);
    let client: Client<HttpConnector, BufferedBody<Streamed>> =
        Client::builder(TokioExecutor::new()).build_http();
    let service = tower::ServiceBuilder::new()
        .layer(BodyBufferLayer::new(limit))
        .layer(RetryLayer::from(middleware))
        .service(client);
    let slot = ReportSlot::new();
    let mut request = Request::post(format!("{}/upload", server.uri()))
        .header("idempotency-key", "upload-1")
        .body(streamed(&[b"chunk-1;", b"chunk-2;", b"chunk-3"]))
        .unwrap();
    request.extensions_mut().insert(slot.clone());
    let _ = service.oneshot(request).await.expect("an answer");
    let received = server.received_requests().await.unwrap_or_default();
    (received.into_iter().map(|request| request.body).collect(), slot.get().expect("a report"))
}

#[tokio::test]
async fn a_streamed_body_within_the_buffer_is_sent_again_whole() {
    let (bodies, report) = keyed_stream(64, &[503, 201]).await;
    assert_eq!(bodies, [b"chunk-1;chunk-2;chunk-3".to_vec(), b"chunk-1;chunk-2;chunk-3".to_vec()]);
    assert_eq!((report.attempts, report.stop), (2, StopReason::NothingToRetry));
}

#[tokio::test]
async fn a_streamed_body_over_the_buffer_is_sent_once_whole_and_never_retried() {
    let (bodies, report) = keyed_stream(10, &[503, 201]).await;
    assert_eq!(bodies, [b"chunk-1;chunk-2;chunk-3".to_vec()], "sent once, every byte");
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReplayable));
}

#[tokio::test]
async fn a_429_on_a_call_s_last_attempt_pauses_its_host_for_the_next_call_as_the_middleware_s() {
    use reqwest_safe_retry::rate_limit::{HostPaused, ReturnIfPaused};

    let limited = || vec![ResponseTemplate::new(429).insert_header("retry-after", "3")];
    // Through the layer: the first call allows no retry, so its request
    // goes without a copy kept; the second must not be sent.
    let server = MockServer::start().await;
    script(&server, "/r", limited()).await;
    let (service, _clock) = layered(policy().build().unwrap());
    let mut first = Request::get(format!("{}/r", server.uri())).body(Full::default()).unwrap();
    first.extensions_mut().insert(MaxRetries::new(0));
    let answer = service.clone().oneshot(first).await.expect("the 429");
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    let mut second = Request::get(format!("{}/r", server.uri())).body(Full::default()).unwrap();
    second.extensions_mut().insert(ReturnIfPaused);
    let error = service.oneshot(second).await.expect_err("the host is paused");
    assert!(error.downcast_ref::<HostPaused>().is_some(), "{error}");
    assert_eq!(hits(&server).await, 1, "the second call was not sent");

    // The same through the middleware.
    let server = MockServer::start().await;
    script(&server, "/r", limited()).await;
    let (client, _clock) = support::client(policy().build().unwrap());
    let url = format!("{}/r", server.uri());
    let answer = client.get(&url).with_extension(MaxRetries::new(0)).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    let error = client.get(&url).with_extension(ReturnIfPaused).send().await.unwrap_err();
    assert!(matches!(error, reqwest_middleware::Error::Middleware(_)), "{error}");
    assert_eq!(hits(&server).await, 1);
}

/// A service that answers 503 once, then is never ready again (`stuck`)
/// or fails to become ready (otherwise): a `Buffer` whose worker is busy
/// for good, or gone.
#[derive(Clone)]
struct OnceThen {
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stuck: bool,
}

impl Service<Request<Full<Bytes>>> for OnceThen {
    type Response = http::Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = std::future::Ready<Result<Self::Response, BoxError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        use std::sync::atomic::Ordering;
        match (self.calls.load(Ordering::SeqCst), self.stuck) {
            (0, _) => std::task::Poll::Ready(Ok(())),
            (_, true) => std::task::Poll::Pending,
            (_, false) => std::task::Poll::Ready(Err("the worker is gone".into())),
        }
    }

    fn call(&mut self, _: Request<Full<Bytes>>) -> Self::Future {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut answer = http::Response::new(Full::default());
        *answer.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        std::future::ready(Ok(answer))
    }
}

fn once_then(stuck: bool, clock: &ManualClock) -> Retry<OnceThen> {
    let middleware = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP);
    RetryLayer::from(middleware).layer(OnceThen { calls: Default::default(), stuck })
}

#[tokio::test]
async fn the_wait_for_readiness_before_a_retry_ends_at_the_deadline() {
    let clock = ManualClock::new();
    let service = once_then(true, &clock);
    let slot = ReportSlot::new();
    let mut request = Request::get("http://127.0.0.1:9/r").body(Full::default()).unwrap();
    request.extensions_mut().insert(reqwest_safe_retry::RetryDeadline::new(Duration::from_secs(1)));
    request.extensions_mut().insert(slot.clone());
    let call = tokio::spawn(service.oneshot(request));
    // The retry waits for a service that is never ready; the time passes.
    while slot.get().is_none() {
        tokio::task::yield_now().await;
        clock.advance(100 * MS);
    }
    let error = call.await.unwrap().expect_err("no answer before the deadline");
    assert!(error.is::<reqwest_safe_retry::DeadlineExceeded>(), "{error}");
    assert_eq!(slot.get().map(|r| r.stop), Some(StopReason::DeadlineExceeded));
}

#[tokio::test]
async fn a_service_that_fails_before_a_retry_hands_back_its_error_and_says_so() {
    let clock = ManualClock::new();
    let service = once_then(false, &clock);
    let slot = ReportSlot::new();
    let mut request = Request::get("http://127.0.0.1:9/r").body(Full::default()).unwrap();
    request.extensions_mut().insert(slot.clone());
    let error = service.oneshot(request).await.expect_err("the service failed");
    assert_eq!(error.to_string(), "the worker is gone");
    let report = slot.get().expect("a report");
    assert_eq!((report.attempts, report.stop), (1, StopReason::ServiceFailed));
}

#[tokio::test]
async fn hyper_util_s_own_refusal_of_a_request_is_final_as_without_the_layer() {
    // A URI without its host: hyper-util refuses it before anything is
    // sent, the same way every time.
    let server = MockServer::start().await;
    let host = server.address().to_string();
    let request = || {
        Request::get("/r").header(http::header::HOST, host.as_str()).body(Full::default()).unwrap()
    };
    let bare: Hyper = Client::builder(TokioExecutor::new()).build_http();
    let alone = bare.request(request()).await.expect_err("refused by the client");
    let (service, clock) = layered(policy().build().unwrap());
    let slot = ReportSlot::new();
    let mut layered_request = request();
    layered_request.extensions_mut().insert(slot.clone());
    let error = service.oneshot(layered_request).await.expect_err("refused by the client");
    assert_eq!(error.to_string(), alone.to_string());
    let report = slot.get().expect("a report");
    assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry));
    assert!(clock.sleeps().is_empty());
    assert_eq!(hits(&server).await, 0);
}

#[tokio::test]
async fn a_body_that_is_not_sync_goes_through_the_buffer_and_the_layer_on_any_thread() {
    use http_body_util::BodyExt;
    use http_body_util::combinators::UnsyncBoxBody;
    use reqwest_safe_retry::tower::{BodyBufferLayer, BufferedBody};

    // axum's and tonic's bodies are boxed so: `Send`, not `Sync`.
    type Unsync = UnsyncBoxBody<Bytes, std::io::Error>;
    let server = MockServer::start().await;
    script(&server, "/r", statuses(&[503, 201])).await;
    let client: Client<HttpConnector, BufferedBody<Unsync>> =
        Client::builder(TokioExecutor::new()).build_http();
    let clock = ManualClock::new();
    let middleware = RetryMiddleware::new(policy().build().unwrap()).with_clock(clock.clone());
    let service = tower::ServiceBuilder::new()
        .layer(BodyBufferLayer::new(1024))
        .layer(RetryLayer::from(middleware))
        .service(client);
    let body: Unsync =
        Full::new(Bytes::from_static(b"{}")).map_err(|never| match never {}).boxed_unsync();
    let request = Request::post(format!("{}/r", server.uri()))
        .header("idempotency-key", "k-2")
        .body(body)
        .unwrap();
    let answer = tokio::spawn(service.oneshot(request)).await.unwrap().expect("the retry's answer");
    assert_eq!(answer.status(), StatusCode::CREATED);
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn below_follow_redirect_each_hop_is_a_call_of_its_own() {
    use tower_http::follow_redirect::FollowRedirectLayer;

    let server = MockServer::start().await;
    // A POST answered 303 was processed: the GET it turns into is safe to
    // repeat, and the 503 it meets is retried; the POST is never sent again.
    let moved = ResponseTemplate::new(303).insert_header("location", "/new");
    script(&server, "/old", vec![moved]).await;
    script(&server, "/new", statuses(&[503, 200])).await;
    let (retry, clock) = layered(policy().build().unwrap());
    let service = tower::ServiceBuilder::new().layer(FollowRedirectLayer::new()).service(retry);
    let request = Request::post(format!("{}/old", server.uri()))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let answer = service.oneshot(request).await.expect("the last hop's answer");
    assert_eq!(answer.status(), StatusCode::OK);
    let report = RetryReport::from_extensions(answer.extensions());
    assert_eq!((report.attempts, report.stop), (2, StopReason::NothingToRetry), "the last hop's");
    let received = server.received_requests().await.unwrap();
    let sent: Vec<(String, String)> =
        received.iter().map(|r| (r.method.to_string(), r.url.path().to_owned())).collect();
    assert_eq!(
        sent,
        [("POST", "/old"), ("GET", "/new"), ("GET", "/new")]
            .map(|(m, p)| (m.to_owned(), p.to_owned()))
    );
    assert_eq!(clock.sleeps().len(), 1);
}

#[tokio::test]
async fn below_follow_redirect_a_request_s_overrides_reach_its_first_hop_alone() {
    // tower-http 0.6 does not carry a request's extensions to the next hop:
    // `MaxRetries` (and a `ReportSlot`) are the first hop's; later hops go
    // by the layer's settings.
    use tower_http::follow_redirect::FollowRedirectLayer;

    let server = MockServer::start().await;
    script(&server, "/old", vec![ResponseTemplate::new(302).insert_header("location", "/new")])
        .await;
    script(&server, "/new", statuses(&[503, 200])).await;
    let (retry, _clock) = layered(policy().build().unwrap());
    let service = tower::ServiceBuilder::new().layer(FollowRedirectLayer::new()).service(retry);
    let slot = ReportSlot::new();
    let mut request = Request::get(format!("{}/old", server.uri())).body(Full::default()).unwrap();
    request.extensions_mut().insert(MaxRetries::new(0));
    request.extensions_mut().insert(slot.clone());
    let answer = service.oneshot(request).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "the second hop retried by the layer's settings");
    assert_eq!(slot.get().map(|r| r.attempts), Some(1), "the slot heard the first hop alone");
}

/// A service that never answers its first call and answers 200 to the
/// next: an attempt a `Timeout` below the layer must cut.
#[derive(Clone, Default)]
struct SilentOnce {
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Service<Request<Full<Bytes>>> for SilentOnce {
    type Response = http::Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Full<Bytes>>) -> Self::Future {
        let first = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        Box::pin(async move {
            if first {
                std::future::pending::<()>().await;
            }
            Ok(http::Response::new(Full::default()))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_below_the_layer_bounds_each_attempt_and_its_elapsed_is_a_timeout() {
    use std::time::Duration;
    use tower::timeout::TimeoutLayer;

    for (method, attempts, ok) in [(Method::GET, 2, true), (Method::POST, 1, false)] {
        let clock = ManualClock::new();
        let middleware = RetryMiddleware::new(policy().build().unwrap()).with_clock(clock.clone());
        let service = tower::ServiceBuilder::new()
            .layer(RetryLayer::from(middleware))
            .layer(TimeoutLayer::new(Duration::from_secs(5)))
            .service(SilentOnce::default());
        let slot = ReportSlot::new();
        let mut request = Request::builder().method(method.clone()).uri("http://127.0.0.1:9/r");
        request = request.extension(slot.clone());
        let outcome = service.oneshot(request.body(Full::default()).unwrap()).await;
        assert_eq!(outcome.is_ok(), ok, "{method}");
        if let Err(error) = &outcome {
            assert!(error.is::<tower::timeout::error::Elapsed>(), "tower's own error: {error}");
        }
        let report = slot.get().expect("a report");
        assert_eq!(report.attempts, attempts, "{method}");
        let stop = if ok { StopReason::NothingToRetry } else { StopReason::NotSafe };
        assert_eq!(report.stop, stop, "{method}");
    }
}

#[tokio::test]
async fn an_axum_proxy_retries_its_upstream_with_the_body_it_was_sent() {
    use reqwest_safe_retry::tower::{BodyBufferLayer, BufferedBody};

    let upstream = MockServer::start().await;
    script(&upstream, "/orders", statuses(&[503, 201])).await;
    // The proxy: axum's requests (a body that is neither `Clone` nor
    // `Sync`), read into memory up to 64 KiB, retried upstream.
    let client: Client<HttpConnector, BufferedBody<axum::body::Body>> =
        Client::builder(TokioExecutor::new()).build_http();
    let clock = ManualClock::new();
    let middleware = RetryMiddleware::new(policy().build().unwrap()).with_clock(clock.clone());
    let forward = tower::ServiceBuilder::new()
        .layer(BodyBufferLayer::new(64 * 1024))
        .layer(RetryLayer::from(middleware))
        .service(client);
    let base = upstream.uri();
    let proxy = axum::Router::new().fallback(move |request: Request<axum::body::Body>| {
        let (forward, base) = (forward.clone(), base.clone());
        async move {
            let (mut parts, body) = request.into_parts();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            parts.uri = format!("{base}{path}").parse().unwrap();
            parts.headers.remove(http::header::HOST);
            match forward.oneshot(Request::from_parts(parts, body)).await {
                Ok(answer) => {
                    let report = RetryReport::from_extensions(answer.extensions());
                    let (mut parts, body) = answer.into_parts();
                    parts.headers.insert("x-attempts", report.attempts.into());
                    http::Response::from_parts(parts, axum::body::Body::new(body))
                }
                Err(error) => {
                    let mut answer = http::Response::new(axum::body::Body::from(error.to_string()));
                    *answer.status_mut() = StatusCode::BAD_GATEWAY;
                    answer
                }
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, proxy).await.unwrap() });

    let answer = support::bare_reqwest()
        .post(format!("http://{address}/orders"))
        .header("idempotency-key", "order-9")
        .body(r#"{"item":"book"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::CREATED);
    assert_eq!(answer.headers()["x-attempts"], "2");
    let bodies: Vec<Vec<u8>> =
        upstream.received_requests().await.unwrap().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies, [br#"{"item":"book"}"#.to_vec(), br#"{"item":"book"}"#.to_vec()]);
}
