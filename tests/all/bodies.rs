//! Request and response bodies: the same bytes on every attempt, error
//! bodies drained or dropped so their connection can serve the retry, and
//! streams that cannot be copied sent once.

#[cfg(feature = "http2")]
mod http2;
mod responses;
mod streams;

use crate::support;
use bytes::Bytes;
use reqwest_safe_retry::{
    RetryMiddleware, clock::TokioClock, jitter::FixedJitter, report::RetryReport,
    report::StopReason,
};
use std::time::Duration;
use support::*;
use wiremock::{MockServer, ResponseTemplate};

#[tokio::test]
async fn body_is_identical_on_every_attempt() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let (client, _) = client(policy().build().unwrap());
    let body: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let response =
        client.put(format!("{}/r", server.uri())).body(body.clone()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let received = server.received_requests().await.unwrap();
    assert_eq!(received.len(), 3);
    assert!(received.iter().all(|r| r.body == body));
}

fn streaming_body() -> reqwest::Body {
    let chunks =
        [Ok::<_, std::io::Error>(Bytes::from_static(b"order=")), Ok(Bytes::from_static(b"1"))];
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

#[tokio::test]
async fn streaming_body_is_sent_once_and_its_response_returned() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, clock) = client(policy().build().unwrap());
    let response =
        client.put(format!("{}/r", server.uri())).body(streaming_body()).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReplayable));
    assert!(clock.sleeps().is_empty());
    let received = server.received_requests().await.unwrap();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body, b"order=1");
}

#[tokio::test]
async fn streaming_body_with_a_final_answer_stops_as_final() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[201]).await;
    let (client, _) = client(policy().build().unwrap());
    let response =
        client.put(format!("{}/r", server.uri())).body(streaming_body()).send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((response.status().as_u16(), report.stop), (201, StopReason::NothingToRetry));
}

#[tokio::test]
async fn large_error_bodies_do_not_stop_the_retry() {
    let server = MockServer::start().await;
    let big = ResponseTemplate::new(503).set_body_bytes(vec![b'x'; 4 << 20]);
    let small = ResponseTemplate::new(503).set_body_bytes(vec![b'y'; 1000]);
    script(&server, "/r", vec![big, small, ResponseTemplate::new(200).set_body_string("done")])
        .await;
    let (client, _) = client(policy().build().unwrap());
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.text().await.unwrap(), "done");
    assert_eq!(hits(&server).await, 3);
}

#[tokio::test]
async fn endless_error_body_is_not_read_to_the_end() {
    let (url, connections) = raw_server(vec![Raw::EndlessBody, Raw::Reply(OK_CLOSE)]).await;
    let (client, _) = client(policy().build().unwrap());
    // Reading the endless body would hang; the bound turns that into a failure.
    let send = tokio::time::timeout(Duration::from_secs(30), client.get(&url).send());
    let response = send.await.expect("the drain stops at its limit").unwrap();
    // Before reading: the 503's body would never end.
    assert_eq!(response.status(), 200, "the retry was made");
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(connections.get(), 2);
}

/// On tokio's clock, paused: the 100 ms wait passes in virtual time, and the
/// body, already on the socket, is read while it runs.
#[tokio::test(start_paused = true)]
async fn a_drained_error_body_frees_its_connection_for_the_retry() {
    let (url, connections) = raw_server(vec![keep_alive(503, 10_000), keep_alive(200, 2)]).await;
    let middleware = RetryMiddleware::new(policy().build().unwrap())
        .with_jitter_source(reqwest_safe_retry::jitter::FixedJitter::TOP);
    let client = wrap(middleware);
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(connections.get(), 1, "the retry reused the drained connection");
}

/// The limit is inclusive, whether the length is declared or found by
/// reading. A declared length one byte over closes the connection unread; a
/// chunked body is read until it passes the limit (the client may already
/// hold a byte or two more, so the case over the limit is well over).
#[tokio::test(start_paused = true)]
async fn an_error_body_exactly_at_the_drain_limit_is_read() {
    let chunked = |length: usize| {
        let body = "x".repeat(length);
        Raw::KeepAlive(format!(
            "HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n\r\n{length:x}\r\n{body}\r\n0\r\n\r\n"
        ))
    };
    // Large enough that the client has not buffered the whole body by the
    // time the response is dropped.
    const LIMIT: usize = 64 * 1024;
    let cases = [
        (keep_alive(503, LIMIT), 1),
        (keep_alive(503, LIMIT + 1), 2),
        (chunked(LIMIT), 1),
        (chunked(2 * LIMIT), 2),
    ];
    for (n, (error, expected)) in cases.into_iter().enumerate() {
        let (url, connections) = raw_server(vec![error, keep_alive(200, 2)]).await;
        let middleware = RetryMiddleware::new(policy().with_drain_limit(LIMIT).build().unwrap())
            .with_jitter_source(reqwest_safe_retry::jitter::FixedJitter::TOP);
        let response = wrap(middleware).get(&url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(connections.get(), expected, "case {n}");
    }
}

#[tokio::test]
async fn an_error_body_over_the_drain_limit_is_dropped_unread() {
    let (url, connections) = raw_server(vec![keep_alive(503, 100_000), keep_alive(200, 2)]).await;
    let (client, _) = client(policy().with_drain_limit(64 * 1024).build().unwrap());
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(connections.get(), 2, "the oversized body's connection was closed, not read");
}

/// Long enough for anything on loopback; a hang fails the test with a message.
const BOUND: Duration = Duration::from_secs(20);

async fn bounded<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(BOUND, future).await.unwrap_or_else(|_| panic!("{what} hung"))
}

// ---- Bodies that stall ----

#[tokio::test]
async fn a_stalled_error_body_does_not_hold_up_the_retry() {
    let (url, connections) = raw_server(vec![Raw::StalledBody, Raw::Reply(OK_CLOSE)]).await;
    let (client, clock) = client(policy().build().unwrap());
    let response = bounded("the retry after a stalled body", client.get(&url).send()).await;
    assert_eq!(response.unwrap().status(), 200);
    assert_eq!(connections.get(), 2);
    assert_eq!(clock.sleeps(), [100 * MS]);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_error_body_is_dropped_when_the_wait_ends() {
    // On tokio's clock: the drain runs for the whole 100 ms wait, then the
    // body is dropped and the retry goes out on a new connection.
    let (url, connections) = raw_server(vec![Raw::StalledBody, Raw::Reply(OK_CLOSE)]).await;
    let middleware = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(TokioClock)
        .with_jitter_source(FixedJitter::TOP);
    let start = tokio::time::Instant::now();
    let response = bounded("the retry", wrap(middleware).get(&url).send()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(start.elapsed(), 100 * MS, "no longer than the planned wait");
    assert_eq!(connections.get(), 2);
}

#[tokio::test]
async fn a_stalled_body_that_is_not_retried_reaches_the_caller_at_once() {
    let (url, _) = raw_server(vec![Raw::StalledBody]).await;
    let (client, _) = client(policy().build().unwrap());
    let response = bounded("a POST's 503", client.post(&url).body("x").send()).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(RetryReport::from_response(&response).stop, StopReason::NotSafe);
}
