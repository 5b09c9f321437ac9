//! Idempotency keys the middleware mints: one per call, on every attempt,
//! never over a caller's key, only where asked, in the report.

use reqwest::Method;
use reqwest_safe_retry::report::{ReportSlot, RetryReport, StopReason};
use reqwest_safe_retry::{MintKey, RetryConfig};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// A server that answers 503 `failures` times, then 201.
async fn flaky(failures: u64) -> MockServer {
    let server = MockServer::start().await;
    if failures > 0 {
        Mock::given(any())
            .respond_with(ResponseTemplate::new(503))
            .up_to_n_times(failures)
            .with_priority(1)
            .mount(&server)
            .await;
    }
    Mock::given(any()).respond_with(ResponseTemplate::new(201)).mount(&server).await;
    server
}

/// The `Idempotency-Key` of each request `server` received.
async fn keys_seen(server: &MockServer) -> Vec<Option<String>> {
    let requests = server.received_requests().await.unwrap();
    let key = |r: &wiremock::Request| {
        r.headers.get("idempotency-key").map(|v| v.to_str().unwrap().to_owned())
    };
    requests.iter().map(key).collect()
}

/// `request` through a client minting keys if `minting`; the status and
/// the report.
async fn call(
    minting: bool,
    server: &MockServer,
    method: Method,
    build: impl FnOnce(reqwest_middleware::RequestBuilder) -> reqwest_middleware::RequestBuilder,
) -> (u16, RetryReport) {
    let (client, _) = client(policy().with_minted_keys(minting).build().unwrap());
    let slot = ReportSlot::new();
    let request = build(client.request(method, server.uri()).body("amount=5"));
    let response = request.with_extension(slot.clone()).send().await.unwrap();
    (response.status().as_u16(), slot.get().unwrap())
}

#[tokio::test]
async fn a_minted_key_makes_a_post_retryable_with_one_key_on_every_attempt() {
    let server = flaky(2).await;
    let (status, report) = call(true, &server, Method::POST, |r| r).await;
    assert_eq!((status, report.attempts, report.stop), (201, 3, StopReason::NothingToRetry));
    let minted = report.minted_key.expect("a key was minted").to_string();
    assert_eq!(keys_seen(&server).await, vec![Some(minted); 3]);
}

#[tokio::test]
async fn each_call_gets_a_key_of_its_own() {
    let server = flaky(0).await;
    let (_, first) = call(true, &server, Method::POST, |r| r).await;
    let (_, second) = call(true, &server, Method::PATCH, |r| r).await;
    assert_ne!(first.minted_key, second.minted_key);
    assert!(first.minted_key.is_some() && second.minted_key.is_some());
}

#[tokio::test]
async fn a_caller_s_key_is_never_replaced_and_a_safe_request_gets_none() {
    let server = flaky(1).await;
    let keyed = |r: reqwest_middleware::RequestBuilder| r.header("Idempotency-Key", "charge-7");
    let (status, report) = call(true, &server, Method::POST, keyed).await;
    assert_eq!((status, report.attempts, report.minted_key), (201, 2, None));
    let server = flaky(0).await;
    let (_, report) = call(true, &server, Method::PUT, |r| r).await;
    assert_eq!(report.minted_key, None);
    assert_eq!(keys_seen(&server).await, [None]);
}

#[tokio::test]
async fn without_the_setting_a_key_is_minted_only_for_a_request_that_asks() {
    let server = flaky(1).await;
    let (status, report) = call(false, &server, Method::POST, |r| r).await;
    assert_eq!((status, report.attempts, report.stop), (503, 1, StopReason::NotSafe));
    assert_eq!(report.minted_key, None);
    let server = flaky(1).await;
    let (status, report) = call(false, &server, Method::POST, |r| r.with_extension(MintKey)).await;
    assert_eq!((status, report.attempts), (201, 2));
    let minted = report.minted_key.map(|key| key.to_string());
    assert_eq!(keys_seen(&server).await, vec![minted; 2]);
}

#[tokio::test]
async fn the_key_of_a_call_that_ends_in_an_error_is_in_its_report() {
    let (url, _) = hops::refusing_port();
    let (client, _) = client(RetryConfig::builder().with_minted_keys(true).build().unwrap());
    let slot = ReportSlot::new();
    let error = client.post(&url).body("amount=5").with_extension(slot.clone()).send().await;
    assert!(error.unwrap_err().is_connect());
    let report = slot.get().unwrap();
    assert!(report.minted_key.is_some(), "{report:?}");
}
