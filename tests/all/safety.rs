//! Which outcomes are retried, and for which requests, with both clients
//! users build: reqwest's default, which follows redirects, and one that does
//! not, with the middleware told so.
//!
//! Longer than most files: the whole table of outcomes against requests, for
//! every client users build, one behaviour per test.

use crate::support;

use reqwest::redirect::Policy;

use reqwest::Method;
use reqwest_safe_retry::{Outcome, RetryReport, Retryability, StopReason, Verdict};
use support::*;
use wiremock::matchers::any;
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
    let slot = reqwest_safe_retry::ReportSlot::new();
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
    let clock = reqwest_safe_retry::ManualClock::new();
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
    let (client, _) = client(policy().with_429_for_any_method(false).build().unwrap());
    let response = client.post(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (429, 1));
}

#[tokio::test]
async fn final_statuses_are_returned_at_once() {
    for code in [200, 201, 204, 301, 304, 400, 401, 403, 404, 408, 409, 422, 500, 501, 505] {
        let (status, hits, report) =
            send(Kind::NotFollowing, Method::GET, &[code, 200], None).await;
        assert_eq!((status, hits), (code, 1), "{code}");
        assert_eq!(report.stop, StopReason::NothingToRetry, "{code}");
    }
}

#[tokio::test]
async fn status_set_is_configurable() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[500, 503, 200]).await;
    let (client, clock) = client(
        policy()
            .with_retryable_statuses([http::StatusCode::INTERNAL_SERVER_ERROR])
            .build()
            .unwrap(),
    );
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    // 500 is retried now, 503 is no longer.
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 2));
    assert_eq!(clock.sleeps(), [100 * MS]);
}

#[tokio::test]
async fn predicate_sees_request_attempt_and_response() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[418, 418, 200]).await;
    let seen = Counter::default();
    let count = seen.clone();
    let config = policy()
        .with_predicate(move |attempt| {
            count.bump();
            assert_eq!(attempt.number as usize, count.get());
            assert_eq!(attempt.request.url().path(), "/r");
            match attempt.outcome {
                Outcome::Response(r) if r.status() == 418 => Some(Retryability::WhenSafe),
                _ => None,
            }
        })
        .build()
        .unwrap();
    let (client, clock) = client(config);
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(seen.get(), 3);
    assert_eq!(clock.sleeps(), [100 * MS, 200 * MS]);
}

#[tokio::test]
async fn predicate_cannot_make_an_unsafe_request_repeat_with_when_safe() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[418, 200]).await;
    let config = policy().with_predicate(|_| Some(Retryability::WhenSafe)).build().unwrap();
    let (client, _) = client(config);
    let response = client.post(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (418, 1));
}

#[tokio::test]
async fn predicate_can_veto_a_default_retry() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200]).await;
    let config = policy().with_predicate(|_| Some(Retryability::Never)).build().unwrap();
    let (client, _) = client(config);
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 1));
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
    let slot = reqwest_safe_retry::ReportSlot::new();
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
async fn redirect_errors_are_not_retried() {
    let server = MockServer::start().await;
    let location = format!("{}/loop", server.uri());
    Mock::given(any())
        .respond_with(ResponseTemplate::new(302).insert_header("Location", location.as_str()))
        .mount(&server)
        .await;
    let inner =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::limited(2)).build().unwrap();
    let clock = reqwest_safe_retry::ManualClock::new();
    let middleware = reqwest_safe_retry::RetryMiddleware::default().with_clock(clock.clone());
    let client = reqwest_middleware::ClientBuilder::new(inner).with(middleware).build();
    let error = client.get(&location).send().await.unwrap_err();
    assert!(error.is_redirect());
    assert!(clock.sleeps().is_empty());
    // One attempt: the first request and the two redirects it followed.
    assert_eq!(hits(&server).await, 3);
}

#[tokio::test]
async fn connect_failures_that_will_repeat_are_not_retried() {
    let inner = unresolving_client(&NoSuchHost::default()).build().unwrap();
    let clock = reqwest_safe_retry::ManualClock::new();
    let middleware = reqwest_safe_retry::RetryMiddleware::default().with_clock(clock.clone());
    let client = reqwest_middleware::ClientBuilder::new(inner).with(middleware).build();
    let slot = reqwest_safe_retry::ReportSlot::new();
    let error =
        client.get("http://orders.invalid/").with_extension(slot.clone()).send().await.unwrap_err();
    assert!(error.is_connect());
    assert!(clock.sleeps().is_empty());
    assert_eq!(slot.get().unwrap().attempts, 1);
    assert_eq!(slot.get().unwrap().stop, StopReason::NothingToRetry);
}

#[tokio::test]
async fn predicate_any_method_retries_a_post_without_a_key() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[409, 201]).await;
    let config = policy()
        .with_predicate(|attempt| match attempt.outcome {
            Outcome::Response(r) if r.status() == 409 => Some(Retryability::AnyMethod),
            _ => None,
        })
        .build()
        .unwrap();
    let (client, clock) = client(config);
    let response = client.post(format!("{}/r", server.uri())).body("x").send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (201, 2));
    assert_eq!(clock.sleeps(), [100 * MS]);
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
async fn predicate_is_consulted_on_the_last_attempt_too() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[418]).await;
    let seen = Counter::default();
    let count = seen.clone();
    let config = policy()
        .with_max_retries(1)
        .with_predicate(move |attempt| {
            count.bump();
            assert_eq!(attempt.request.url().path(), "/r");
            Some(Retryability::WhenSafe)
        })
        .build()
        .unwrap();
    let (client, _) = client(config);
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (2, StopReason::RetriesExhausted));
    assert_eq!(seen.get(), 2);
}

#[tokio::test]
async fn a_blank_idempotency_key_does_not_make_a_post_safe() {
    for kind in Kind::ALL {
        let (status, hits, _) = send(kind, Method::POST, &[503, 200], Some(" \t ")).await;
        assert_eq!((status, hits), (503, 1), "{kind:?}");
    }
}

#[tokio::test]
async fn a_predicates_any_method_is_held_to_the_redirect_rule() {
    // A redirect-following client; the POST is answered 303 to a port where
    // nothing listens. The predicate asks to retry connect errors for any
    // method, but the refusal met the second hop, after the order was made.
    let server = MockServer::start().await;
    let refused = refused_address().await;
    Mock::given(wiremock::matchers::path("/orders"))
        .respond_with(ResponseTemplate::new(303).insert_header("Location", refused.as_str()))
        .mount(&server)
        .await;
    let config = policy().with_predicate(|attempt| match attempt.outcome {
        Outcome::Error(e) if e.is_connect() => Some(Retryability::AnyMethod),
        _ => None,
    });
    let (client, _) = Kind::Following.client(config);
    let slot = reqwest_safe_retry::ReportSlot::new();
    let call = client.post(format!("{}/orders", server.uri())).body("order");
    call.with_extension(slot.clone()).send().await.unwrap_err();
    assert_eq!(hits(&server).await, 1);
    assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe);
}

#[tokio::test]
async fn a_fragment_does_not_hide_the_first_hop() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[429, 201]).await;
    let (client, _) = Kind::NotFollowing.client(policy());
    let response = client.post(format!("{}/r#section", server.uri())).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (201, 2));
}

/// A resolver that fails its first lookups the way `failure` says, then
/// resolves every name to `to`.
struct Flaky {
    failures: std::sync::atomic::AtomicUsize,
    failure: fn() -> std::io::Error,
    to: std::net::SocketAddr,
}

impl reqwest::dns::Resolve for Flaky {
    fn resolve(&self, _: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let left = self.failures.load(std::sync::atomic::Ordering::SeqCst);
        let (failure, to) = (self.failure, self.to);
        if left > 0 {
            self.failures.store(left - 1, std::sync::atomic::Ordering::SeqCst);
        }
        Box::pin(async move {
            if left > 0 {
                return Err(Box::new(failure()) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(std::iter::once(to)) as reqwest::dns::Addrs)
        })
    }
}

async fn through_flaky_dns(
    kind: Kind,
    failure: fn() -> std::io::Error,
) -> (u16, usize, RetryReport) {
    let server = MockServer::start().await;
    script_statuses(&server, "/orders", &[201]).await;
    let resolver =
        Flaky { failures: std::sync::atomic::AtomicUsize::new(2), failure, to: *server.address() };
    let inner = reqwest::Client::builder().dns_resolver(std::sync::Arc::new(resolver));
    let clock = reqwest_safe_retry::ManualClock::new();
    let middleware = reqwest_safe_retry::RetryMiddleware::new(policy().build().unwrap())
        .with_clock(clock.clone());
    let client = match kind {
        Kind::NotFollowing => built(inner, middleware.with_redirect_policy(Policy::none())),
        Kind::Handing => built(inner, middleware),
        Kind::Following => {
            reqwest_middleware::ClientBuilder::new(inner.build().unwrap()).with(middleware).build()
        }
    };
    let slot = reqwest_safe_retry::ReportSlot::new();
    let url = format!("http://orders.internal:{}/orders", server.address().port());
    let result = client.post(url).body("order").with_extension(slot.clone()).send().await;
    let status = result.map_or(0, |r| r.status().as_u16());
    (status, hits(&server).await, slot.get().unwrap())
}

#[tokio::test]
async fn a_temporary_dns_failure_is_retried_for_any_method_when_redirects_are_not_followed() {
    let glibc = || {
        std::io::Error::other(
            "failed to lookup address information: Temporary failure in name resolution",
        )
    };
    let timed_out = || std::io::Error::from(std::io::ErrorKind::TimedOut);
    for failure in [glibc as fn() -> std::io::Error, timed_out] {
        for kind in [Kind::NotFollowing, Kind::Handing] {
            let (status, hits, report) = through_flaky_dns(kind, failure).await;
            assert_eq!((status, hits, report.attempts), (201, 1, 3), "{kind:?}");
        }
    }
    // With a client that may follow redirects, the failed lookup may have
    // been a later hop's: the POST is not repeated.
    let (status, hits, report) = through_flaky_dns(Kind::Following, timed_out).await;
    assert_eq!((status, hits, report.stop), (0, 0, StopReason::NotSafe));
}

#[tokio::test]
async fn a_name_that_does_not_exist_stays_final() {
    let nxdomain =
        || std::io::Error::other("failed to lookup address information: Name or service not known");
    let (status, hits, report) = through_flaky_dns(Kind::NotFollowing, nxdomain).await;
    assert_eq!((status, hits, report.attempts, report.stop), (0, 0, 1, StopReason::NothingToRetry));
}

#[tokio::test]
async fn a_predicate_can_choose_the_wait_of_the_retry_it_asks_for() {
    let server = MockServer::start().await;
    script(
        &server,
        "/r",
        vec![
            // Over the cap, which alone would end the call with this answer.
            ResponseTemplate::new(409).insert_header("Retry-After", "3600"),
            ResponseTemplate::new(409),
            ResponseTemplate::new(200),
        ],
    )
    .await;
    let config = policy().with_predicate(|attempt| match attempt.outcome {
        Outcome::Response(r) if r.status() == 409 => Some(
            Verdict::new(Retryability::WhenSafe)
                .after(std::time::Duration::from_millis(250) * attempt.number),
        ),
        _ => None,
    });
    let (client, clock) = client(config.build().unwrap());
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 200);
    // Its own waits, not the backoff's and not the server's Retry-After.
    assert_eq!(clock.sleeps(), [250 * MS, 500 * MS]);
    assert_eq!(RetryReport::from_response(&response).attempts, 3);
}

#[tokio::test]
async fn a_predicates_wait_still_answers_to_safety_and_the_deadline() {
    let wait = |_: &reqwest_safe_retry::Attempt<'_>| {
        Some(Verdict::new(Retryability::WhenSafe).after(std::time::Duration::from_secs(10)))
    };
    // Not safe: a wait does not make a POST repeatable.
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[418, 200]).await;
    let (unsafe_post, _) = client(policy().with_predicate(wait).build().unwrap());
    let response = unsafe_post.post(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (418, 1));
    // Past the deadline: the wait is not started.
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[418, 200]).await;
    let config = policy().with_predicate(wait).with_deadline(std::time::Duration::from_secs(5));
    let (client, clock) = client(config.build().unwrap());
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((response.status().as_u16(), report.stop), (418, StopReason::DeadlineExceeded));
    assert!(clock.sleeps().is_empty());
}
