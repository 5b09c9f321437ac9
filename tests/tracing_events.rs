//! The tracing event emitted for each retry.
#![cfg(feature = "tracing")]

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use support::*;
use wiremock::MockServer;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn tracing_event_says_attempt_reason_and_wait_but_no_secrets() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _anchor = interest_anchor();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (client, _) = client(policy().build().unwrap());
    client
        .get(format!("{}/r?token=hunter2", server.uri()))
        .header("Authorization", "Bearer sekrit")
        .body("card=4242")
        .send()
        .await
        .unwrap();
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = log.lines().find(|l| l.contains("retrying request")).expect(&log);
    assert!(line.contains("DEBUG"), "{line}");
    for field in [
        "retrying request: status 503",
        "attempt=1",
        "http.request.method=GET",
        "http.request.resend_count=0",
        "server.address=\"127.0.0.1\"",
        "error.type=\"503\"",
        "retry.reason=\"status\"",
        "wait_ms=100",
    ] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
    for secret in ["hunter2", "sekrit", "4242", "token"] {
        assert!(!log.contains(secret), "{secret} leaked: {log}");
    }
}

/// tracing caches, per callsite and for the whole process, whether any
/// subscriber wants it; while a single dispatcher is registered, a callsite
/// first reached where no subscriber wants it is cached as unwanted, and a
/// later test's subscriber would never see it. A second dispatcher that
/// wants everything and writes nowhere keeps every callsite asking.
fn interest_anchor() -> tracing::Dispatch {
    let sink = tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE);
    tracing::Dispatch::new(sink.with_writer(std::io::sink).finish())
}

fn capture(level: tracing::Level) -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

#[tokio::test]
async fn the_log_level_is_configurable() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503]).await;
    // A subscriber that only takes warnings sees the events raised to warn.
    let _anchor = interest_anchor();
    let (captured, _guard) = capture(tracing::Level::WARN);
    let middleware =
        reqwest_safe_retry::RetryMiddleware::new(policy().with_max_retries(1).build().unwrap())
            .with_clock(reqwest_safe_retry::ManualClock::new())
            .with_log_level(tracing::Level::WARN);
    wrap(middleware).get(format!("{}/r", server.uri())).send().await.unwrap();
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let retry = log.lines().find(|l| l.contains("retrying request")).expect(&log);
    assert!(retry.contains("WARN"), "{retry}");
    let stop = log.lines().find(|l| l.contains("not retrying request")).expect(&log);
    assert!(stop.contains("retry.stop=\"retries_exhausted\""), "{stop}");
    assert!(stop.contains("http.request.resend_count=1"), "{stop}");

    // At the default level, the same subscriber sees nothing.
    let _anchor = interest_anchor();
    let (quiet, _guard) = capture(tracing::Level::WARN);
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503]).await;
    let (client, _) = client(policy().with_max_retries(1).build().unwrap());
    client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert!(quiet.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_first_answer_that_is_final_emits_nothing() {
    let server = MockServer::start().await;
    script_statuses(&server, "/ok", &[200]).await;
    script_statuses(&server, "/missing", &[404]).await;
    let _anchor = interest_anchor();
    let (captured, _guard) = capture(tracing::Level::TRACE);
    let (client, _) = client(policy().build().unwrap());
    for at in ["/ok", "/missing"] {
        client.get(format!("{}{at}", server.uri())).send().await.unwrap();
    }
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    // Neither "retrying request" nor "not retrying request".
    assert!(!log.contains("retrying request"), "{log}");
}

#[tokio::test]
async fn every_log_level_is_the_one_asked_for() {
    use tracing::Level;
    for level in [Level::TRACE, Level::DEBUG, Level::INFO, Level::WARN, Level::ERROR] {
        let _anchor = interest_anchor();
        let (captured, _guard) = capture(Level::TRACE);
        let config = policy().with_max_retries(1).build().unwrap();
        let middleware = reqwest_safe_retry::RetryMiddleware::new(config)
            .with_clock(reqwest_safe_retry::ManualClock::new())
            .with_log_level(level);
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(middleware)
            .with(Answers::new(&[503]))
            .build();
        client.get("http://127.0.0.1:9/r").send().await.unwrap();
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let retry = log.lines().find(|l| l.contains("retrying request: ")).expect(&log);
        let stop = log.lines().find(|l| l.contains("not retrying request: ")).expect(&log);
        assert!(!retry.contains("not retrying"), "{log}");
        for line in [retry, stop] {
            // `<timestamp> <LEVEL> <target>: <message>`
            assert_eq!(line.split_whitespace().nth(1), Some(level.as_str()), "{line}");
        }
    }
}
