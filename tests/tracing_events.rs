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
    assert!(line.contains("attempt=1"), "{line}");
    assert!(line.contains("reason=status 503"), "{line}");
    assert!(line.contains("wait_ms=100"), "{line}");
    for secret in ["hunter2", "sekrit", "4242", "token"] {
        assert!(!log.contains(secret), "{secret} leaked: {log}");
    }
}
