//! The hedge middleware takes a request for safe to repeat by the retry
//! side's rule, with the idempotency header it is configured with. A
//! loopback server answers in tokio's paused time: every delay is virtual
//! and exact, nothing sleeps.

use crate::support::RawServer;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::hedge::{HedgeConfig, HedgeConfigBuilder, HedgeMiddleware, HedgeReport};
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

const SLOW: Duration = Duration::from_secs(60);

/// A server that answers its first request after [`SLOW`] and every later
/// one at once, each with a body naming it (`copy 0`, `copy 1`...).
async fn server() -> RawServer {
    RawServer::start(|mut conn| async move {
        while let Some(request) = conn.request().await {
            if request.index == 0 {
                tokio::time::sleep(SLOW).await;
            }
            let body = format!("copy {}", request.index);
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            if conn.write(head + &body).await.is_err() {
                return;
            }
        }
    })
    .await
}

/// A client hedging after 100 ms, without a budget, with `config`.
fn client(config: HedgeConfigBuilder) -> ClientWithMiddleware {
    let hedge =
        HedgeMiddleware::new(config.with_delay(100 * MS).with_budget(None).build().unwrap());
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(hedge).build()
}

/// POSTs an order keyed with `X-Request-Id`; returns the body and the
/// report's copies sent and winning copy.
async fn post(client: &ClientWithMiddleware, url: &str) -> (String, (u32, u32)) {
    let call = client.post(url).header("X-Request-Id", "order-7").body("order").send();
    // In paused time, a call that stops making progress fails at once.
    let response = tokio::time::timeout(SLOW * 10, call).await.expect("never ended").unwrap();
    let report = HedgeReport::from_response(&response).unwrap();
    (response.text().await.unwrap(), (report.copies, report.winner))
}

#[tokio::test(start_paused = true)]
async fn a_post_keyed_with_the_configured_idempotency_header_is_hedged() {
    let server = server().await;
    let client = client(HedgeConfig::builder().with_idempotency_header("X-Request-Id"));
    let start = tokio::time::Instant::now();
    let (body, report) = post(&client, &server.url("/orders")).await;
    assert_eq!((body.as_str(), report), ("copy 1", (2, 2)), "the hedge answered");
    assert!(start.elapsed() < SLOW, "{:?}", start.elapsed());
    assert_eq!(server.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_post_keyed_with_a_header_not_configured_is_not_hedged() {
    let server = server().await;
    let client = client(HedgeConfig::builder());
    let (body, report) = post(&client, &server.url("/orders")).await;
    assert_eq!((body.as_str(), report), ("copy 0", (1, 1)), "sent once, slow");
    assert_eq!(server.requests(), 1);
}
