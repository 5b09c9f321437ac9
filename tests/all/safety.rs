//! What is sent again and what is not: by method, idempotency key,
//! `SafeToRetry`, the client's redirect handling and the caller's overrides
//! of the retry count.

mod classified;
mod minted_keys;
mod predicate;
mod readme_table;
mod tls_and_http2;

use crate::support;
use reqwest::Method;
use reqwest_safe_retry::{
    MaxRetries, RetryMiddleware, SafeToRetry, clock::ManualClock, report::RetryReport,
    report::StopReason,
};
use support::*;
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn send(
    kind: Kind,
    method: Method,
    statuses: &[u16],
    key: Option<&str>,
) -> (u16, usize, RetryReport) {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", statuses).await;
    let (client, _) = kind.client(policy());
    let mut request = client.request(method, format!("{}/r", server.uri()));
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.unwrap();
    let report = RetryReport::from_response(&response);
    (response.status().as_u16(), hits(&server).await, report)
}

#[tokio::test]
async fn idempotent_methods_are_retried_on_503() {
    for method in
        [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE]
    {
        for kind in Kind::ALL {
            let (status, hits, report) = send(kind, method.clone(), &[503, 200], None).await;
            assert_eq!((status, hits, report.attempts), (200, 2, 2), "{method} {kind:?}");
        }
    }
}

#[tokio::test]
async fn post_without_key_is_not_retried() {
    for kind in Kind::ALL {
        let (status, hits, report) = send(kind, Method::POST, &[503, 200], None).await;
        assert_eq!((status, hits), (503, 1), "{kind:?}");
        assert_eq!(report.stop, StopReason::NotSafe, "{kind:?}");
    }
}

#[tokio::test]
async fn patch_without_key_is_not_retried() {
    for kind in Kind::ALL {
        let (status, hits, _) = send(kind, Method::PATCH, &[502, 200], None).await;
        assert_eq!((status, hits), (502, 1), "{kind:?}");
    }
}

#[tokio::test]
async fn post_with_idempotency_key_is_retried() {
    for kind in Kind::ALL {
        let (status, hits, _) = send(kind, Method::POST, &[503, 200], Some("k-1")).await;
        assert_eq!((status, hits), (200, 2), "{kind:?}");
    }
}

#[tokio::test]
async fn patch_with_idempotency_key_is_retried() {
    for kind in Kind::ALL {
        let (status, hits, _) = send(kind, Method::PATCH, &[504, 200], Some("k-2")).await;
        assert_eq!((status, hits), (200, 2), "{kind:?}");
    }
}

#[tokio::test]
async fn empty_idempotency_key_does_not_make_a_post_safe() {
    for kind in Kind::ALL {
        let (status, hits, _) = send(kind, Method::POST, &[503, 200], Some("")).await;
        assert_eq!((status, hits), (503, 1), "{kind:?}");
    }
}

#[tokio::test]
async fn idempotency_header_name_is_configurable() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let config = policy().with_idempotency_header("X-Dedup-Id").build().unwrap();
    let (client, _) = client(config);
    let url = format!("{}/r", server.uri());
    let response = client.post(&url).header("Idempotency-Key", "k").send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 1));
    let response = client.post(&url).header("X-Dedup-Id", "k").send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (200, 3));
}

#[tokio::test]
async fn post_429_is_retried_without_a_key_when_redirects_are_not_followed() {
    let (status, hits, _) = send(Kind::NotFollowing, Method::POST, &[429, 201], None).await;
    assert_eq!((status, hits), (201, 2));
}

#[tokio::test]
async fn post_429_is_retried_without_a_key_when_the_middleware_follows_redirects() {
    let (status, hits, report) = send(Kind::Handing, Method::POST, &[429, 201], None).await;
    assert_eq!((status, hits, report.attempts), (201, 2, 2));
}

#[tokio::test]
async fn post_refused_is_retried_without_a_key_when_the_middleware_follows_redirects() {
    let (client, clock) = Kind::Handing.client(policy());
    let (url, _port) = support::hops::refusing_port();
    let slot = reqwest_safe_retry::report::ReportSlot::new();
    let result = client.post(url).body("order=1").with_extension(slot.clone()).send().await;
    assert!(result.unwrap_err().is_connect());
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
    assert_eq!(clock.sleeps(), [100 * MS, 200 * MS, 400 * MS]);
}

#[tokio::test]
async fn post_429_is_not_retried_without_a_key_when_redirects_may_be_followed() {
    // The 429 may have come from a later hop, after the POST was processed.
    let (status, hits, report) = send(Kind::Following, Method::POST, &[429, 201], None).await;
    assert_eq!((status, hits, report.stop), (429, 1, StopReason::NotSafe));
}

#[tokio::test]
async fn get_429_is_retried_by_both_clients() {
    for kind in Kind::ALL {
        let (status, hits, _) = send(kind, Method::GET, &[429, 200], None).await;
        assert_eq!((status, hits), (200, 2), "{kind:?}");
    }
}

#[tokio::test]
async fn a_redirected_429_is_not_taken_for_the_first_hop() {
    // A client that does follow redirects, although the middleware was told
    // it does not: the response's URL gives the redirect away.
    let server = MockServer::start().await;
    let target = format!("{}/elsewhere", server.uri());
    Mock::given(wiremock::matchers::path("/r"))
        .respond_with(ResponseTemplate::new(303).insert_header("Location", target.as_str()))
        .mount(&server)
        .await;
    script_statuses(&server, "/elsewhere", &[429, 200]).await;
    let config = policy().build().unwrap();
    let clock = reqwest_safe_retry::clock::ManualClock::new();
    let middleware = reqwest_safe_retry::RetryMiddleware::new(config).with_clock(clock.clone());
    let client =
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
    let response = client.post(format!("{}/r", server.uri())).body("order").send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((response.status().as_u16(), report.stop), (429, StopReason::NotSafe));
    let posts = server.received_requests().await.unwrap();
    assert_eq!(posts.iter().filter(|r| r.url.path() == "/r").count(), 1);
}

#[tokio::test]
async fn post_429_can_be_made_to_require_a_key() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[429, 201]).await;
    let (client, _) = client(policy().with_retry_429_any_method(false).build().unwrap());
    let response = client.post(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (429, 1));
}

#[tokio::test]
async fn connection_refused_is_retried_even_for_post_when_redirects_are_not_followed() {
    let url = refused_address().await;
    let (client, clock) = Kind::NotFollowing.client(policy());
    let error = client.post(&url).body("order=1").send().await.unwrap_err();
    assert!(error.is_connect());
    assert_eq!(clock.sleeps(), [100 * MS, 200 * MS, 400 * MS]);
}

#[tokio::test]
async fn connection_refused_is_not_retried_for_post_when_redirects_may_be_followed() {
    // The refusal may have met a later hop, after the POST was processed.
    let url = refused_address().await;
    let (client, clock) = Kind::Following.client(policy());
    let slot = reqwest_safe_retry::report::ReportSlot::new();
    let error =
        client.post(&url).body("order=1").with_extension(slot.clone()).send().await.unwrap_err();
    assert!(error.is_connect());
    assert!(clock.sleeps().is_empty());
    assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe);
}

#[tokio::test]
async fn connection_refused_is_retried_for_get_by_both_clients() {
    for kind in Kind::ALL {
        let url = refused_address().await;
        let (client, clock) = kind.client(policy());
        let error = client.get(&url).send().await.unwrap_err();
        assert!(error.is_connect(), "{kind:?}");
        assert_eq!(clock.sleeps(), [100 * MS, 200 * MS, 400 * MS], "{kind:?}");
    }
}

#[tokio::test]
async fn zero_max_retries_turns_retrying_off_for_the_client() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, clock) = client(policy().with_max_retries(0).build().unwrap());
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((response.status().as_u16(), report.attempts), (503, 1));
    assert_eq!(report.stop, StopReason::RetriesExhausted);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn a_blank_idempotency_key_does_not_make_a_post_safe() {
    for kind in Kind::ALL {
        let (status, hits, _) = send(kind, Method::POST, &[503, 200], Some(" \t ")).await;
        assert_eq!((status, hits), (503, 1), "{kind:?}");
    }
}

#[tokio::test]
async fn a_fragment_does_not_hide_the_first_hop() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[429, 201]).await;
    let (client, _) = Kind::NotFollowing.client(policy());
    let response = client.post(format!("{}/r#section", server.uri())).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (201, 2));
}

#[tokio::test]
async fn max_retries_of_zero_sends_once() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, _) = client(policy().build().unwrap());
    let request = client.get(format!("{}/r", server.uri())).with_extension(MaxRetries::new(0));
    let response = request.send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 1));
    let report = RetryReport::from_response(&response);
    assert_eq!(report.stop, StopReason::RetriesExhausted);
}

#[tokio::test]
async fn safe_to_retry_makes_one_post_repeatable() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let (client, _) = client(policy().build().unwrap());
    let url = format!("{}/r", server.uri());
    let response = client.post(&url).with_extension(SafeToRetry).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (200, 2));
}

#[tokio::test]
async fn max_retries_override_changes_the_count() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503]).await;
    let (client, clock) = client(policy().build().unwrap());
    let url = format!("{}/r", server.uri());
    client.get(&url).with_extension(MaxRetries::new(1)).send().await.unwrap();
    assert_eq!(hits(&server).await, 2);
    client.get(&url).with_extension(MaxRetries::new(6)).send().await.unwrap();
    assert_eq!(hits(&server).await, 2 + 7);
    assert_eq!(clock.sleeps().len(), 1 + 6);
}

#[tokio::test]
async fn an_initialiser_makes_every_request_of_a_client_safe_to_retry() {
    let server = MockServer::start().await;
    script_statuses(&server, "/orders", &[503, 201]).await;
    let middleware = RetryMiddleware::new(policy().build().unwrap()).with_clock(ManualClock::new());
    let orders = reqwest_middleware::ClientBuilder::new(bare_reqwest())
        .with_init(reqwest_middleware::Extension(SafeToRetry))
        .with(middleware)
        .build();
    let response =
        orders.post(format!("{}/orders", server.uri())).body("order 7").send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (201, 2));
    // Without the initialiser the same POST is sent once.
    let server = MockServer::start().await;
    script_statuses(&server, "/orders", &[503, 201]).await;
    let (plain, _) = client(policy().build().unwrap());
    let response =
        plain.post(format!("{}/orders", server.uri())).body("order 7").send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 1));
}
