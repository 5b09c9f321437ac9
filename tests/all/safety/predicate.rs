//! A `should_retry` predicate: what it sees, what it may veto or add, and
//! the safety and deadline rules it cannot override.

use crate::support;

use reqwest_safe_retry::{Outcome, Retryability, Verdict, report::RetryReport, report::StopReason};

use support::*;

use wiremock::{Mock, MockServer, ResponseTemplate};

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
    let slot = reqwest_safe_retry::report::ReportSlot::new();
    let call = client.post(format!("{}/orders", server.uri())).body("order");
    call.with_extension(slot.clone()).send().await.unwrap_err();
    assert_eq!(hits(&server).await, 1);
    assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe);
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
