//! Stream buffering (`with_request_body_buffering`): a streamed request body read
//! into memory before the first attempt, so that it can be sent again.
//!
//! Without it a streamed body is sent once and never retried; that default
//! is tested in `tests/all/bodies.rs`
//! (`streaming_body_is_sent_once_and_its_response_returned`).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use reqwest_safe_retry::{
    DeadlineExceeded, FixedJitter, ReportSlot, RetryMiddleware, RetryReport, StopReason,
};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

/// A streamed body that yields `first`, then nothing ever again.
fn stalled(first: &'static [u8]) -> reqwest::Body {
    let first = stream::once(async move { Ok::<_, std::io::Error>(Bytes::from_static(first)) });
    reqwest::Body::wrap_stream(first.chain(stream::pending()))
}

#[tokio::test]
async fn a_stream_within_the_limit_is_retried_with_the_same_body() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, clock) = client(policy().with_request_body_buffering(64 * KIB).build().unwrap());
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
    let (client, clock) = client(policy().with_request_body_buffering(64 * KIB).build().unwrap());
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
        let config = policy().with_request_body_buffering(64 * KIB).with_max_retries(retries);
        let (client, _) = client(config.build().unwrap());
        let response = client.put(&url).body(streamed(body.clone())).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let (client, _) = client(policy().with_request_body_buffering(64 * KIB).build().unwrap());
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
/// reads a chunked request to its end, answers 503 and returns how many
/// bytes it read.
async fn gatekeeper(gate: Arc<tokio::sync::Notify>) -> (String, tokio::task::JoinHandle<usize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 64 * KIB];
        while !seen.ends_with(b"\r\n0\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request ended early");
            if seen.is_empty() {
                gate.notify_one();
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let answer =
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        socket.write_all(answer.as_bytes()).await.unwrap();
        seen.len()
    });
    (url, server)
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
    let (url, server) = gatekeeper(gate.clone()).await;
    let (client, _) = client(policy().with_request_body_buffering(limit).build().unwrap());
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
    assert!(server.await.unwrap() > count * chunk, "the whole stream reached the server");
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
            Some(limit) => policy().with_request_body_buffering(limit),
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

/// On tokio's clock, paused: the stream never ends, and the deadline, which
/// counts the time spent reading it, ends the call without sending anything.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_under_a_deadline_ends_at_the_deadline() {
    let (url, connections) = raw_server(vec![Raw::Reply(OK_CLOSE)]).await;
    let config = policy()
        .with_request_body_buffering(64 * KIB)
        .with_deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let client = wrap(RetryMiddleware::new(config).with_jitter_source(FixedJitter::TOP));
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client.put(&url).body(stalled(b"order=")).with_extension(slot.clone()).send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the deadline ends the wait for the stream")
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    match &error {
        reqwest_middleware::Error::Middleware(e) => {
            assert!(e.is::<DeadlineExceeded>(), "{e}")
        }
        other => panic!("{other}"),
    }
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (0, StopReason::DeadlineExceeded));
    assert_eq!(connections.get(), 0, "nothing was sent");
}

/// On tokio's clock, paused: reading waits no longer than the attempt
/// timeout; then the request goes out once, and reqwest times the attempt
/// out as it would have without buffering.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_under_an_attempt_timeout_is_sent_once_and_times_out() {
    let (url, connections) = raw_server(vec![Raw::Stall]).await;
    let config = policy()
        .with_request_body_buffering(64 * KIB)
        .with_attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let client = wrap(RetryMiddleware::new(config).with_jitter_source(FixedJitter::TOP));
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client.put(&url).body(stalled(b"order=")).with_extension(slot.clone()).send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the attempt timeout bounds the wait for the stream")
        .unwrap_err();
    assert!(error.is_timeout(), "{error}");
    let elapsed = start.elapsed();
    assert!(elapsed <= Duration::from_secs(2) + 100 * MS, "{elapsed:?}");
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReplayable));
    assert!(connections.get() <= 1);
}

/// On tokio's clock, paused: a request's own timeout shorter than the
/// attempt timeout bounds the wait for the stream, as it bounds the attempt;
/// a deadline further off does not stretch it.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_waits_no_longer_than_the_requests_own_shorter_timeout() {
    let (url, connections) = raw_server(vec![Raw::Stall]).await;
    let config = policy()
        .with_request_body_buffering(64 * KIB)
        .with_attempt_timeout(Duration::from_secs(5))
        .with_deadline(Duration::from_secs(30))
        .build()
        .unwrap();
    let client = wrap(RetryMiddleware::new(config).with_jitter_source(FixedJitter::TOP));
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client
        .put(&url)
        .timeout(Duration::from_secs(1))
        .body(stalled(b"order="))
        .with_extension(slot.clone())
        .send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the request's timeout bounds the wait for the stream")
        .unwrap_err();
    assert!(error.is_timeout(), "{error}");
    // One second reading, one second sending: not five, nor thirty.
    let elapsed = start.elapsed();
    assert!(elapsed <= Duration::from_secs(2) + 100 * MS, "{elapsed:?}");
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReplayable));
    assert!(connections.get() <= 1);
}

/// On tokio's clock, paused: a deadline nearer than the attempt timeout ends
/// the wait for the stream at the deadline, with nothing sent.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_stops_at_a_deadline_nearer_than_the_attempt_timeout() {
    let (url, connections) = raw_server(vec![Raw::Reply(OK_CLOSE)]).await;
    let config = policy()
        .with_request_body_buffering(64 * KIB)
        .with_attempt_timeout(Duration::from_secs(10))
        .with_deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let client = wrap(RetryMiddleware::new(config).with_jitter_source(FixedJitter::TOP));
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client.put(&url).body(stalled(b"order=")).with_extension(slot.clone()).send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the deadline ends the wait for the stream")
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    match &error {
        reqwest_middleware::Error::Middleware(e) => {
            assert!(e.is::<DeadlineExceeded>(), "{e}")
        }
        other => panic!("{other}"),
    }
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (0, StopReason::DeadlineExceeded));
    assert_eq!(connections.get(), 0, "nothing was sent");
}
