//! The `tracing` events the middleware emits: one per retry decision, at the
//! level asked for, naming the attempt, reason and wait but no secret.

use support::*;
use wiremock::MockServer;

use crate::support;

#[tokio::test]
async fn tracing_event_says_attempt_reason_and_wait_but_no_secrets() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let captured = capture_logs(tracing::Level::DEBUG);
    let (client, _) = client(policy().build().unwrap());
    client
        .get(format!("{}/r?token=hunter2", server.uri()))
        .header("Authorization", "Bearer sekrit")
        .body("card=4242-body-secret")
        .send()
        .await
        .unwrap();
    let log = captured.text();
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
    // Spelt so that no port number in the client's own logs can contain it.
    for secret in ["hunter2", "sekrit", "4242-body-secret", "token"] {
        assert!(!log.contains(secret), "{secret} leaked: {log}");
    }
}

#[tokio::test]
async fn the_log_level_is_configurable() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503]).await;
    // A subscriber that only takes warnings sees the events raised to warn.
    let captured = capture_logs(tracing::Level::WARN);
    let middleware =
        reqwest_safe_retry::RetryMiddleware::new(policy().with_max_retries(1).build().unwrap())
            .with_clock(reqwest_safe_retry::clock::ManualClock::new())
            .with_log_level(tracing::Level::WARN);
    wrap(middleware).get(format!("{}/r", server.uri())).send().await.unwrap();
    let log = captured.text();
    let retry = log.lines().find(|l| l.contains("retrying request")).expect(&log);
    assert!(retry.contains("WARN"), "{retry}");
    let stop = log.lines().find(|l| l.contains("not retrying request")).expect(&log);
    assert!(stop.contains("retry.stop=\"retries_exhausted\""), "{stop}");
    assert!(stop.contains("http.request.resend_count=1"), "{stop}");

    // At the default level, the same subscriber sees nothing.
    let quiet = capture_logs(tracing::Level::WARN);
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503]).await;
    let (client, _) = client(policy().with_max_retries(1).build().unwrap());
    client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert!(quiet.text().is_empty());
}

#[tokio::test]
async fn a_first_answer_that_is_final_emits_nothing() {
    let server = MockServer::start().await;
    script_statuses(&server, "/ok", &[200]).await;
    script_statuses(&server, "/missing", &[404]).await;
    let captured = capture_logs(tracing::Level::TRACE);
    let (client, _) = client(policy().build().unwrap());
    for at in ["/ok", "/missing"] {
        client.get(format!("{}{at}", server.uri())).send().await.unwrap();
    }
    let log = captured.text();
    // Neither "retrying request" nor "not retrying request".
    assert!(!log.contains("retrying request"), "{log}");
}

#[tokio::test]
async fn a_final_answer_after_a_retry_says_why_it_stopped() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let captured = capture_logs(tracing::Level::TRACE);
    let (client, _) = client(policy().build().unwrap());
    client.get(format!("{}/r", server.uri())).send().await.unwrap();
    let log = captured.text();
    let stop = log.lines().find(|l| l.contains("not retrying request")).expect(&log);
    assert!(
        stop.contains("retry.stop=\"nothing_to_retry\"") && stop.contains("attempt=2"),
        "{stop}"
    );
}

#[tokio::test]
async fn every_log_level_is_the_one_asked_for() {
    use tracing::Level;
    for level in [Level::TRACE, Level::DEBUG, Level::INFO, Level::WARN, Level::ERROR] {
        let captured = capture_logs(Level::TRACE);
        let config = policy().with_max_retries(1).build().unwrap();
        let middleware = reqwest_safe_retry::RetryMiddleware::new(config)
            .with_clock(reqwest_safe_retry::clock::ManualClock::new())
            .with_log_level(level);
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(middleware)
            .with(Answers::new(&[503]))
            .build();
        client.get("http://127.0.0.1:9/r").send().await.unwrap();
        let log = captured.text();
        let retry = log.lines().find(|l| l.contains("retrying request: ")).expect(&log);
        let stop = log.lines().find(|l| l.contains("not retrying request: ")).expect(&log);
        assert!(!retry.contains("not retrying"), "{log}");
        for line in [retry, stop] {
            // `<timestamp> <LEVEL> <target>: <message>`
            assert_eq!(line.split_whitespace().nth(1), Some(level.as_str()), "{line}");
        }
    }
}
