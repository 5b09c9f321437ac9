//! The README's "What is retried, and why" table, row by row: each row is a
//! test here, through the quick start's client with `RetryConfig::default()`
//! (only the clock and the jitter injected), for a GET (safe to repeat) and
//! a POST without a key (any other request). Each test names its row in a
//! `README row:` line, and `the_readme_table_has_a_test_for_every_row`
//! fails when a row has none. A row's cases that loopback cannot produce
//! (an unreachable network, a request hyper handed back unsent or a new
//! connection closed before taking it) are checked on the
//! errors themselves, in `src/classify/tests.rs`; an HTTP/2 request
//! queued on a closing connection, in `safety/tls_and_http2.rs`.

use crate::support;
use reqwest::Method;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::BodyBuffering;
use reqwest_safe_retry::{
    RetryConfig, RetryMiddleware, clock::ManualClock, jitter::FixedJitter, report::ReportSlot,
    report::RetryReport, report::StopReason,
};
use std::time::Duration;
use support::tls_server::{Handshake, rustls_client, tls_server, trusting_builder};
use support::*;
use wiremock::{MockServer, ResponseTemplate};

/// The quick start's client on `builder`, with the defaults.
fn quick_start(builder: reqwest::ClientBuilder) -> ClientWithMiddleware {
    let middleware = RetryMiddleware::new(RetryConfig::default())
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::TOP);
    middleware.client(builder).expect("the client builds").build()
}

/// What a call of `method` to `url` came to: a status or "error", the
/// attempts and why it stopped. `timeout` bounds each attempt, if given, as
/// the client's timeout (a request's own bounds the whole call).
async fn call(
    builder: reqwest::ClientBuilder,
    method: Method,
    url: &str,
    timeout: Option<Duration>,
) -> Got {
    let builder = match timeout {
        Some(timeout) => builder.timeout(timeout),
        None => builder,
    };
    let client = quick_start(builder);
    let slot = ReportSlot::new();
    let request = client.request(method, url).body("order=1").with_extension(slot.clone());
    let result = tokio::time::timeout(Duration::from_secs(10), request.send())
        .await
        .expect("an outcome within 10 s");
    let outcome = match result {
        Ok(response) => response.status().as_u16().to_string(),
        Err(_) => "error".to_owned(),
    };
    let RetryReport { attempts, stop, .. } = slot.get().expect("the middleware fills the slot");
    (outcome, attempts, stop)
}

/// What came of a call: a status or "error", the attempts, the stop.
type Got = (String, u32, StopReason);

/// Retried: the second attempt gets the 200 behind the failure.
fn retried() -> Got {
    ("200".to_owned(), 2, StopReason::NothingToRetry)
}

/// Returned after one attempt, as `outcome`, for `stop`.
fn returned(outcome: &str, stop: StopReason) -> Got {
    (outcome.to_owned(), 1, stop)
}

/// A head that ends before its blank line.
const CUT_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConn";

/// README row: 502, 503, 504; a timeout after the request went out; a reset; a response cut short before its headers ended³; an HTTP/2 request queued on a connection that closed⁴
/// (the last is `tls_and_http2::a_request_queued_on_a_closing_connection_is_retried_when_safe`)
#[tokio::test]
async fn failures_after_sending_are_retried_only_when_safe_to_repeat() {
    for status in [502, 503, 504] {
        let post = returned(&status.to_string(), StopReason::NotSafe);
        for (method, expected) in [(Method::GET, retried()), (Method::POST, post)] {
            let server = MockServer::start().await;
            script_statuses(&server, "/r", &[status, 200]).await;
            let url = format!("{}/r", server.uri());
            let got = call(reqwest::Client::builder(), method.clone(), &url, None).await;
            assert_eq!(got, expected, "{method} {status}");
        }
    }
    let timeout = Some(Duration::from_millis(200));
    for (name, first, timeout) in [
        ("timeout", Raw::Stall, timeout),
        ("reset", Raw::Close, None),
        ("cut head", Raw::Reply(CUT_HEAD), None),
    ] {
        let post = returned("error", StopReason::NotSafe);
        for (method, expected) in [(Method::GET, retried()), (Method::POST, post)] {
            let (url, _) = raw_server(vec![first.clone(), Raw::Reply(OK_CLOSE)]).await;
            let got = call(reqwest::Client::builder(), method.clone(), &url, timeout).await;
            assert_eq!(got, expected, "{method}, {name}");
        }
    }
}

/// README row: 429 Too Many Requests
#[tokio::test]
async fn a_429_is_retried_for_any_method() {
    for method in [Method::GET, Method::POST] {
        let server = MockServer::start().await;
        script_statuses(&server, "/r", &[429, 200]).await;
        let url = format!("{}/r", server.uri());
        let got = call(reqwest::Client::builder(), method.clone(), &url, None).await;
        assert_eq!(got, retried(), "{method}");
    }
}

/// README row: connection refused or unreachable, connect timeout, TLS handshake cut off, temporary DNS failure; a request hyper handed back unsent, or that a new connection closed before taking
#[tokio::test]
async fn failures_before_sending_are_retried_for_any_method() {
    // Each fails every time: all four attempts are made.
    let exhausted = ("error".to_owned(), 4, StopReason::RetriesExhausted);
    for method in [Method::GET, Method::POST] {
        let (url, _port) = hops::refusing_port();
        let got = call(reqwest::Client::builder(), method.clone(), &url, None).await;
        assert_eq!(got, exhausted, "{method}, refused");

        let dns = DnsTimeout::default();
        let got = call(unresolving_client(&dns), method.clone(), "http://orders.invalid/", None);
        let got = got.await;
        assert_eq!(got, exhausted, "{method}, temporary DNS");

        let (url, connections, _) = tls_server(vec![Handshake::Reset]).await;
        let got = call(trusting_builder(), method.clone(), &url, None).await;
        assert_eq!(got, exhausted, "{method}, TLS cut off");
        assert_eq!(connections.get(), 4);

        let (url, _listener) = unanswered_connects().await;
        let builder = reqwest::Client::builder().connect_timeout(Duration::from_millis(50));
        let got = call(builder, method.clone(), &url, None).await;
        assert_eq!(got, exhausted, "{method}, connect timeout");
    }
}

/// README row: HTTP/2 REFUSED_STREAM or graceful GOAWAY²
#[cfg(feature = "http2")]
#[tokio::test]
async fn streams_the_server_did_not_process_are_retried_for_any_method() {
    use support::h2_server::{Answer, h2_client, h2_server};

    let refused = Answer::Reset(h2::Reason::REFUSED_STREAM);
    for first in [refused, Answer::GoAwayBefore] {
        for method in [Method::GET, Method::POST] {
            let (url, streams, _) = h2_server(vec![first, Answer::Ok]).await;
            let got = call(h2_client(), method.clone(), &url, None).await;
            assert_eq!(got, retried(), "{method}, {first:?}");
            assert_eq!(streams.get(), 2, "{method}, {first:?}");
        }
    }
}

/// README row: a redirect (301, 302, 303, 307, 308)
#[tokio::test]
async fn a_redirect_chain_is_sent_again_only_when_safe_to_repeat() {
    for status in [301, 302, 303, 307, 308] {
        let post = returned("503", StopReason::NotSafe);
        for (method, expected) in [(Method::GET, retried()), (Method::POST, post)] {
            let server = MockServer::start().await;
            let moved = ResponseTemplate::new(status).insert_header("Location", "/to");
            script(&server, "/from", vec![moved]).await;
            script_statuses(&server, "/to", &[503, 200]).await;
            let url = format!("{}/from", server.uri());
            let got = call(reqwest::Client::builder(), method.clone(), &url, None).await;
            // Followed by reqwest each time: the whole chain, per attempt.
            let attempts = expected.1;
            assert_eq!(got, expected, "{method} {status}");
            let hops = server.received_requests().await.unwrap();
            let firsts = hops.iter().filter(|r| r.url.path() == "/from").count();
            assert_eq!(firsts as u32, attempts, "{method} {status}");
        }
    }
}

/// README row: any other status (2xx, 4xx, 500, 501, ...), a malformed response, a certificate error, a name that does not exist
#[tokio::test]
async fn final_answers_are_returned_at_once() {
    for method in [Method::GET, Method::POST] {
        for status in [200, 201, 400, 404, 409, 500, 501, 505] {
            let server = MockServer::start().await;
            script_statuses(&server, "/r", &[status, 200]).await;
            let url = format!("{}/r", server.uri());
            let got = call(reqwest::Client::builder(), method.clone(), &url, None).await;
            assert_eq!(got, returned(&status.to_string(), StopReason::NothingToRetry));
        }
        let final_error = returned("error", StopReason::NothingToRetry);

        let (url, _) = raw_server(vec![Raw::Reply("garbage\r\n\r\n"), Raw::Reply(OK_CLOSE)]).await;
        let got = call(reqwest::Client::builder(), method.clone(), &url, None).await;
        assert_eq!(got, final_error, "{method}, malformed");

        let (url, connections, _) = tls_server(vec![Handshake::Complete]).await;
        let got = call(rustls_client(), method.clone(), &url, None).await;
        assert_eq!(got, final_error, "{method}, certificate");
        assert_eq!(connections.get(), 1);

        let missing = NoSuchHost::default();
        let got =
            call(unresolving_client(&missing), method.clone(), "http://orders.invalid/", None);
        assert_eq!(got.await, final_error, "{method}, no such name");
    }
}

/// The table's footnote ³: a body cut short while the caller reads it is
/// the caller's error, unless response buffering reads it inside the
/// attempt.
#[tokio::test]
async fn a_body_cut_short_is_retried_only_with_response_buffering() {
    const CUT_BODY: &str = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc";
    let (url, connections) = raw_server(vec![Raw::Reply(CUT_BODY), Raw::Reply(OK_CLOSE)]).await;
    let response = quick_start(reqwest::Client::builder()).get(&url).send().await.unwrap();
    assert_eq!(RetryReport::from_response(&response).attempts, 1);
    assert!(response.text().await.is_err(), "the caller meets the cut");
    assert_eq!(connections.get(), 1);

    let (url, connections) = raw_server(vec![Raw::Reply(CUT_BODY), Raw::Reply(OK_CLOSE)]).await;
    let config = RetryConfig::builder()
        .with_body_buffering(BodyBuffering::default().with_response(1024))
        .build()
        .unwrap();
    let middleware = RetryMiddleware::new(config).with_clock(ManualClock::new());
    let client = middleware.client(reqwest::Client::builder()).unwrap().build();
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(RetryReport::from_response(&response).attempts, 2);
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(connections.get(), 2);
}

#[test]
fn the_readme_table_has_a_test_for_every_row() {
    let readme = include_str!("../../../README.md");
    let table = readme.split("| outcome |").nth(1).expect("the table");
    let rows: Vec<&str> = table
        .lines()
        .skip(2) // the header's end and the separator
        .take_while(|line| line.starts_with('|'))
        .map(|line| line.split('|').nth(1).unwrap().trim())
        .collect();
    assert!(rows.len() >= 6, "{rows:?}");
    let source = include_str!("readme_table.rs");
    for row in rows {
        let marker = format!("/// README row: {row}\n");
        assert!(source.contains(&marker), "no test names the README row `{row}`");
    }
}

/// The README is a front page: the details live in the crate's docs,
/// MIGRATING.md and BENCHMARKS.md.
#[test]
fn the_readme_is_a_front_page_of_at_most_300_lines() {
    let lines = include_str!("../../../README.md").lines().count();
    assert!(lines <= 300, "README.md has {lines} lines");
}
