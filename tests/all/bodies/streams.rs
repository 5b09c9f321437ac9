//! Streamed request bodies: sent once by default, buffered up to a limit
//! when asked so they can be sent again, and never sent on without their
//! bytes across a redirect.

use crate::support;
use bytes::Bytes;
use futures_util::stream;
use futures_util::stream::Stream;
use reqwest_safe_retry::BodyBuffering;
use reqwest_safe_retry::{
    RetryConfig, RetryMiddleware, clock::ManualClock, report::ReportSlot, report::RetryReport,
    report::StopReason,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;
use wiremock::MockServer;

const KIB: usize = 1024;

/// `count` chunks of `size` bytes, each chunk filled with its index.
fn chunks(count: usize, size: usize) -> Vec<Bytes> {
    (0..count).map(|i| Bytes::from(vec![i as u8; size])).collect()
}

fn concat(chunks: &[Bytes]) -> Vec<u8> {
    chunks.iter().flatten().copied().collect()
}

/// A streamed body yielding `chunks`, one poll each.
fn streamed(chunks: Vec<Bytes>) -> reqwest::Body {
    reqwest::Body::wrap_stream(stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>)))
}

#[tokio::test]
async fn a_stream_within_the_limit_is_retried_with_the_same_body() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, clock) = client(
        policy()
            .with_body_buffering(BodyBuffering::default().with_request(64 * KIB))
            .build()
            .unwrap(),
    );
    let body = chunks(5, 10 * KIB);
    let response = client
        .put(format!("{}/r", server.uri()))
        .body(streamed(body.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(RetryReport::from_response(&response).attempts, 2);
    assert_eq!(clock.sleeps(), [100 * MS]);
    let received = server.received_requests().await.unwrap();
    assert_eq!(received.len(), 2);
    assert!(received.iter().all(|r| r.body == concat(&body)), "the same bytes each time");
}

#[tokio::test]
async fn a_stream_over_the_limit_is_sent_whole_once() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, clock) = client(
        policy()
            .with_body_buffering(BodyBuffering::default().with_request(64 * KIB))
            .build()
            .unwrap(),
    );
    let body = chunks(128, 8 * KIB); // 1 MiB
    let response = client
        .put(format!("{}/r", server.uri()))
        .body(streamed(body.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReplayable));
    assert!(clock.sleeps().is_empty());
    let received = server.received_requests().await.unwrap();
    assert_eq!(received.len(), 1);
    assert!(received[0].body == concat(&body), "every byte, in order");
}

/// Buffering is for a retry: a request that cannot have one sends its
/// stream as a stream (chunked), while one that can sends the bytes read
/// (with their length).
#[tokio::test]
async fn a_stream_that_cannot_be_retried_is_not_buffered() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[200]).await;
    let url = format!("{}/r", server.uri());
    let body = chunks(2, KIB);
    for retries in [0, 1] {
        let config = policy()
            .with_body_buffering(BodyBuffering::default().with_request(64 * KIB))
            .with_max_retries(retries);
        let (client, _) = client(config.build().unwrap());
        let response = client.put(&url).body(streamed(body.clone())).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let (client, _) = client(
        policy()
            .with_body_buffering(BodyBuffering::default().with_request(64 * KIB))
            .build()
            .unwrap(),
    );
    let request = client.put(&url).body(streamed(body.clone()));
    let response =
        request.with_extension(reqwest_safe_retry::MaxRetries::new(0)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let received = server.received_requests().await.unwrap();
    let chunked: Vec<bool> =
        received.iter().map(|r| r.headers.get("transfer-encoding").is_some()).collect();
    assert_eq!(chunked, [true, false, true], "max_retries 0, 1, and MaxRetries::new(0)");
    assert!(received.iter().all(|r| r.body == concat(&body)));
}

/// A server that opens `gate` when the first bytes of a request arrive,
/// reads a chunked request to its end, answers 503 and sends the bytes the
/// request took on the wire.
async fn gatekeeper(
    gate: Arc<tokio::sync::Notify>,
) -> (RawServer, tokio::sync::oneshot::Receiver<usize>) {
    let (read, bytes) = tokio::sync::oneshot::channel();
    let read = Arc::new(Mutex::new(Some(read)));
    let server = RawServer::start(move |mut conn| {
        let (gate, read) = (gate.clone(), read.clone());
        async move {
            assert!(conn.arrived().await, "the request never came");
            gate.notify_one();
            let request = conn.request().await.expect("the request ended early");
            let answer =
                "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            conn.write(answer).await.unwrap();
            if let Some(read) = read.lock().unwrap().take() {
                let _ = read.send(request.wire_len);
            }
        }
    })
    .await;
    (server, bytes)
}

/// Yields `count` chunks of `size` bytes, counting them in `produced`; past
/// `free` bytes it waits for `gate` before producing more.
fn gated(
    count: usize,
    size: usize,
    free: usize,
    gate: Arc<tokio::sync::Notify>,
    produced: Arc<AtomicUsize>,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    stream::unfold((0, false), move |(i, opened)| {
        let (gate, produced) = (gate.clone(), produced.clone());
        async move {
            if i == count {
                return None;
            }
            let mut opened = opened;
            if !opened && produced.load(Ordering::SeqCst) + size > free {
                gate.notified().await;
                opened = true;
            }
            produced.fetch_add(size, Ordering::SeqCst);
            Some((Ok(Bytes::from(vec![i as u8; size])), (i + 1, opened)))
        }
    })
}

/// The stream gives at most the limit plus one chunk until the server has
/// seen the request: were more read before sending, the stream and the
/// server would wait on each other, and the bound below would fail the test.
#[tokio::test]
async fn at_most_the_limit_and_one_chunk_are_read_before_sending() {
    let (limit, chunk, count) = (64 * KIB, 16 * KIB, 256); // a 4 MiB stream
    let gate = Arc::new(tokio::sync::Notify::new());
    let produced = Arc::new(AtomicUsize::new(0));
    let (server, read) = gatekeeper(gate.clone()).await;
    let url = server.url("");
    let (client, _) = client(
        policy().with_body_buffering(BodyBuffering::default().with_request(limit)).build().unwrap(),
    );
    let body = gated(count, chunk, limit + chunk, gate, produced.clone());
    let send = client.put(&url).body(reqwest::Body::wrap_stream(body)).send();
    let response = tokio::time::timeout(Duration::from_secs(30), send)
        .await
        .expect("more than the limit and one chunk was read before sending")
        .unwrap();
    assert_eq!(response.status(), 503);
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReplayable));
    assert_eq!(produced.load(Ordering::SeqCst), count * chunk);
    assert!(read.await.unwrap() > count * chunk, "the whole stream reached the server");
}

/// A stream that yields `order=` then fails.
fn failing() -> reqwest::Body {
    let chunks = [Ok(Bytes::from_static(b"order=")), Err(std::io::Error::other("producer failed"))];
    reqwest::Body::wrap_stream(stream::iter(chunks))
}

fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let chain = std::iter::successors(Some(error), |e| e.source());
    chain.map(ToString::to_string).collect::<Vec<_>>().join(": ")
}

/// What reading failed with is what sending fails with: the caller sees the
/// same kind of error as without buffering, and nothing is retried.
#[tokio::test]
async fn a_stream_that_fails_is_sent_as_far_as_it_got_then_fails_as_without_buffering() {
    let mut seen = Vec::new();
    for buffering in [None, Some(64 * KIB)] {
        let server = MockServer::start().await;
        script_statuses(&server, "/r", &[503, 200]).await;
        let config = match buffering {
            Some(limit) => {
                policy().with_body_buffering(BodyBuffering::default().with_request(limit))
            }
            None => policy(),
        };
        let (client, clock) = client(config.build().unwrap());
        let slot = ReportSlot::new();
        let error = client
            .put(format!("{}/r", server.uri()))
            .body(failing())
            .with_extension(slot.clone())
            .send()
            .await
            .unwrap_err();
        assert!(chain(&error).contains("producer failed"), "{buffering:?}: {}", chain(&error));
        assert!(clock.sleeps().is_empty());
        let report = slot.get().unwrap();
        seen.push((error.is_request(), error.is_body(), report.attempts, report.stop));
        assert_eq!(hits(&server).await, 0, "an incomplete request is no request");
    }
    assert_eq!(seen[0], seen[1], "without, then with buffering");
    // A request error caused by the body, which hyper counts as the caller's: final.
    assert_eq!(seen[0], (true, false, 1, StopReason::NothingToRetry));
}

/// One request as the server read it: method, path and body.
type Seen = (String, String, Vec<u8>);

/// A server whose `/first` answers `status` with `Location: /next`, and
/// whose `/next` answers 503 twice, then 200. Returns it and the requests
/// it read, chunked bodies decoded.
async fn server(status: u16) -> (RawServer, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let server = RawServer::start(move |mut conn| {
        let log = log.clone();
        async move {
            while let Some(request) = conn.request().await {
                let answer = {
                    let mut log = log.lock().unwrap();
                    let path = request.path.clone();
                    log.push((request.method, request.path, request.body));
                    let hops = log.iter().filter(|(_, p, _)| p == "/next").count();
                    if path == "/first" {
                        format!(
                            "HTTP/1.1 {status} X\r\nLocation: /next\r\nContent-Length: 0\r\n\r\n"
                        )
                    } else if hops <= 2 {
                        "HTTP/1.1 503 X\r\nContent-Length: 0\r\n\r\n".to_owned()
                    } else {
                        "HTTP/1.1 200 X\r\nContent-Length: 0\r\n\r\n".to_owned()
                    }
                };
                if conn.write(answer).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (server, seen)
}

/// Sends a PUT with a streamed body through the quick start's client;
/// returns the status the caller got and what the server read.
async fn streamed_put(status: u16) -> (u16, Vec<Seen>) {
    let (server, seen) = server(status).await;
    let url = server.url("/first");
    let retry = RetryMiddleware::new(RetryConfig::default()).with_clock(ManualClock::new());
    let client = retry.client(reqwest::Client::builder()).unwrap().build();
    let chunks = ["order", "=1"].map(|c| Ok::<_, std::io::Error>(bytes::Bytes::from(c)));
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = tokio::time::timeout(Duration::from_secs(5), client.put(&url).body(body).send())
        .await
        .expect("the call ends")
        .expect("an answer");
    let seen = seen.lock().unwrap().clone();
    (response.status().as_u16(), seen)
}

#[tokio::test]
async fn a_streamed_body_is_not_dropped_on_a_redirect_that_keeps_the_method() {
    let mut failures = Vec::new();
    for status in [301, 302, 307, 308] {
        let (got, seen) = streamed_put(status).await;
        let described: Vec<String> =
            seen.iter().map(|(m, p, b)| format!("{m} {p} ({} body bytes)", b.len())).collect();
        // The stream went to /first, once; then either the redirect is
        // handed back (nothing is left to send on), or the hop gets the
        // body, once. Never a PUT without its body, and never that again.
        let first = seen.iter().filter(|(_, p, _)| p == "/first").count();
        let hops: Vec<&Seen> = seen.iter().filter(|(_, p, _)| p == "/next").collect();
        let bodiless = hops.iter().any(|(_, _, body)| body.is_empty());
        if first != 1 || bodiless || hops.len() > 1 {
            failures.push(format!("{status}: the caller got {got}; the server read {described:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The other side of the rule above: a redirect that turns the request into
/// a GET needs no body, so reqwest follows a 303 of the streamed PUT with a
/// GET. The call cannot be sent again (the stream is gone), so the GET's
/// 503 is the caller's, and nothing is sent twice.
#[tokio::test]
async fn a_streamed_body_answered_303_is_followed_with_a_get() {
    let (got, seen) = streamed_put(303).await;
    let requests: Vec<(&str, &str)> =
        seen.iter().map(|(m, p, _)| (m.as_str(), p.as_str())).collect();
    assert_eq!(got, 503, "{requests:?}");
    assert_eq!(requests, [("PUT", "/first"), ("GET", "/next")]);
    // The stream reached the server whole.
    assert_eq!(seen[0].2, b"order=1");
}
