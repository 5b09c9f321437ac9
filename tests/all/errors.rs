//! The errors a caller gets back: the same reqwest errors as without the
//! middleware, configuration errors that name their field, and no input that
//! makes the middleware panic.

mod bad_input;
mod no_panic;

use crate::support;
use reqwest_safe_retry::{report::ReportSlot, report::RetryReport, report::StopReason};
use std::time::Duration;
use support::*;
use wiremock::{MockServer, ResponseTemplate};

/// Sends a GET to `url` through a client without middleware and through ours, and
/// returns both errors.
async fn both_errors(
    url: &str,
    timeout: Option<Duration>,
) -> (reqwest_middleware::Error, reqwest_middleware::Error, RetryReport) {
    let plain = reqwest_middleware::ClientBuilder::new(bare_reqwest()).build();
    let (ours, _) = client(policy().build().unwrap());
    let slot = ReportSlot::new();
    let mut a = plain.get(url);
    let mut b = ours.get(url).with_extension(slot.clone());
    if let Some(t) = timeout {
        a = a.timeout(t);
        b = b.timeout(t);
    }
    let plain_error = a.send().await.unwrap_err();
    let our_error = b.send().await.unwrap_err();
    (plain_error, our_error, slot.get().unwrap())
}

#[tokio::test]
async fn connect_error_answers_as_without_the_middleware() {
    let url = refused_address().await;
    let (plain, ours, report) = both_errors(&url, None).await;
    assert!(matches!(ours, reqwest_middleware::Error::Reqwest(_)));
    for (name, a, b) in [
        ("is_connect", plain.is_connect(), ours.is_connect()),
        ("is_timeout", plain.is_timeout(), ours.is_timeout()),
        ("is_request", plain.is_request(), ours.is_request()),
    ] {
        assert_eq!(a, b, "{name}");
    }
    assert_eq!(plain.status(), ours.status());
    assert_eq!(plain.url(), ours.url());
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
}

#[tokio::test]
async fn timeout_error_answers_as_without_the_middleware() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![ResponseTemplate::new(200).set_delay(Duration::from_secs(60))])
        .await;
    let (plain, ours, report) = both_errors(&format!("{}/r", server.uri()), Some(30 * MS)).await;
    assert!(plain.is_timeout() && ours.is_timeout());
    assert_eq!(plain.is_connect(), ours.is_connect());
    assert_eq!(plain.status(), ours.status());
    // The request's timeout bounds the call, as it bounds reqwest's.
    assert_eq!((report.attempts, report.stop), (1, StopReason::DeadlineExceeded));
}
