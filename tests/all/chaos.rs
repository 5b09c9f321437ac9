//! The fault-injection middleware through the quick start's client: each
//! fault meets the retry layer's rules as the real failure would (the
//! README's "What is retried" table, row by row), rules pick calls as
//! documented, and nothing sleeps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::chaos::{Chaos, ChaosError, ChaosOverride, ChaosRecord, Fault, Rule};
use reqwest_safe_retry::clock::ManualClock;
use reqwest_safe_retry::jitter::FixedJitter;
use reqwest_safe_retry::report::{Decision, ReportSlot, RetryReason, RetryReport, StopReason};
use reqwest_safe_retry::{BodyBuffering, RetryConfig, RetryMiddleware};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::calls::{bounded, chain};

/// A server that answers every request 200 with `body`.
async fn server(body: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(any())
        .respond_with(ResponseTemplate::new(200).set_body_string(body))
        .mount(&server)
        .await;
    server
}

/// The requests `server` received.
async fn received(server: &MockServer) -> usize {
    server.received_requests().await.map_or(0, |requests| requests.len())
}

/// The quick start's client with `RetryConfig::default()`, a manual clock
/// and jitter at the top, the rules inside the retries, and the reasons the
/// retry layer gave for its retries.
struct Stack {
    client: ClientWithMiddleware,
    clock: ManualClock,
    record: ChaosRecord,
    reasons: Arc<Mutex<Vec<RetryReason>>>,
}

impl Stack {
    fn new(rules: impl IntoIterator<Item = Rule>) -> Self {
        Self::with_config(RetryConfig::default(), rules)
    }

    fn with_config(config: RetryConfig, rules: impl IntoIterator<Item = Rule>) -> Self {
        let clock = ManualClock::new();
        let chaos = Chaos::new(rules).expect("valid rules").with_clock(clock.clone()).with_seed(7);
        let record = chaos.record();
        let reasons = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&reasons);
        let client = RetryMiddleware::new(config)
            .with_clock(clock.clone())
            .with_jitter_source(FixedJitter::TOP)
            .on_decision(move |event| {
                if let Decision::Retry { reason, .. } = event.decision {
                    seen.lock().unwrap().push(reason);
                }
            })
            .client(reqwest::Client::builder())
            .expect("the client builds")
            .with(chaos)
            .build();
        Self { client, clock, record, reasons }
    }

    /// Sends `method` to `url`: the outcome and the retry layer's report.
    async fn send(
        &self,
        method: Method,
        url: &str,
    ) -> (reqwest_middleware::Result<reqwest::Response>, RetryReport) {
        let slot = ReportSlot::new();
        let request = self.client.request(method.clone(), url).with_extension(slot.clone());
        let outcome = bounded(&format!("{method} {url}"), request.send()).await;
        (outcome, slot.get().expect("the report"))
    }

    fn reasons(&self) -> Vec<RetryReason> {
        self.reasons.lock().unwrap().clone()
    }
}

/// One row of the README's table: `fault` for a GET (safe to repeat) and
/// a POST (not), each through a fresh stack. Returns, per method, the
/// outcome, the report and the reasons of the retries.
async fn row(
    fault: Fault,
) -> [(reqwest_middleware::Result<reqwest::Response>, RetryReport, Vec<RetryReason>); 2] {
    let server = server("fine").await;
    let mut rows = Vec::new();
    for method in [Method::GET, Method::POST] {
        let stack = Stack::new([Rule::new("row", fault.clone())]);
        let (outcome, report) = stack.send(method, &format!("{}/row", server.uri())).await;
        rows.push((outcome, report, stack.reasons()));
    }
    let sends = fault.sends_request();
    assert_eq!(received(&server).await > 0, sends, "{fault:?}: the server sees the request");
    rows.try_into().unwrap_or_else(|_| unreachable!())
}

const RETRIED: (u32, StopReason) = (4, StopReason::RetriesExhausted);
const NOT_SAFE: (u32, StopReason) = (1, StopReason::NotSafe);
const FINAL: (u32, StopReason) = (1, StopReason::NothingToRetry);

fn stop(report: &RetryReport) -> (u32, StopReason) {
    (report.attempts, report.stop)
}

#[tokio::test]
async fn a_502_503_or_504_is_retried_when_safe_to_repeat_and_returned_otherwise() {
    for status in
        [StatusCode::BAD_GATEWAY, StatusCode::SERVICE_UNAVAILABLE, StatusCode::GATEWAY_TIMEOUT]
    {
        let [get, post] = row(Fault::status(status)).await;
        assert_eq!(get.0.unwrap().status(), status);
        assert_eq!(stop(&get.1), RETRIED);
        assert_eq!(get.2, [RetryReason::Status(status); 3]);
        assert_eq!(post.0.unwrap().status(), status);
        assert_eq!(stop(&post.1), NOT_SAFE);
    }
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_for_any_method_after_the_server_s_wait() {
    let fault = Fault::retry_after(StatusCode::TOO_MANY_REQUESTS, Duration::from_millis(1500));
    for (outcome, report, reasons) in row(fault).await {
        let response = outcome.unwrap();
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "2", "rounded up to whole seconds");
        assert_eq!(stop(&report), RETRIED);
        assert_eq!(reasons[0], RetryReason::Status(StatusCode::TOO_MANY_REQUESTS));
        assert!(report.total_wait >= Duration::from_secs(6), "each wait at least the 2 s asked");
    }
}

#[tokio::test]
async fn any_other_status_is_returned_for_every_method() {
    for status in [500, 501, 404, 409, 201] {
        let status = StatusCode::from_u16(status).unwrap();
        for (outcome, report, reasons) in row(Fault::status(status)).await {
            assert_eq!(outcome.unwrap().status(), status);
            assert_eq!(stop(&report), FINAL);
            assert!(reasons.is_empty());
        }
    }
}

#[tokio::test]
async fn a_refused_connection_is_reqwest_s_connect_error_and_is_retried_for_any_method() {
    for (outcome, report, reasons) in row(Fault::refused()).await {
        let error = outcome.expect_err("refused");
        let reqwest_middleware::Error::Reqwest(inner) = &error else { panic!("{error:?}") };
        assert!(inner.is_connect(), "{}", chain(&error));
        assert!(chain(&error).contains("ConnectionRefused"), "{}", chain(&error));
        let url = inner.url().expect("the request's URL");
        assert_eq!(url.path(), "/row", "the request's URL, not the refusing port's");
        assert_eq!(stop(&report), RETRIED);
        assert_eq!(reasons, [RetryReason::NotConnected; 3]);
    }
}

// reqwest's timer, under tokio's paused clock: no real wait.
#[tokio::test(start_paused = true)]
async fn a_timeout_is_reqwest_s_timeout_and_is_retried_only_when_safe_to_repeat() {
    let [get, post] = row(Fault::timeout()).await;
    for (outcome, _, _) in [&get, &post] {
        let error = outcome.as_ref().expect_err("timed out");
        let reqwest_middleware::Error::Reqwest(inner) = error else { panic!("{error:?}") };
        assert!(inner.is_timeout() && !inner.is_connect(), "{}", chain(error));
    }
    assert_eq!(stop(&get.1), RETRIED);
    assert_eq!(get.2, [RetryReason::Timeout; 3]);
    assert_eq!(stop(&post.1), NOT_SAFE);
}

// The last attempt reaches the server over real I/O, which tokio's paused
// clock would race with the bound: reqwest's timer ticks for real here.
#[tokio::test]
async fn a_timeout_at_once_adds_no_wait_to_the_clock_s_record() {
    let server = server("fine").await;
    let stack = Stack::new([Rule::new("timeouts", Fault::timeout()).first(2)]);
    let (outcome, report) = stack.send(Method::GET, &server.uri()).await;
    assert_eq!(outcome.unwrap().status(), 200);
    assert_eq!(stop(&report), (3, StopReason::NothingToRetry));
    assert_eq!(stack.clock.sleeps(), [Duration::from_millis(500), Duration::from_secs(1)]);
}

#[tokio::test]
async fn a_reset_after_the_request_was_read_is_retried_only_when_safe_to_repeat() {
    let [get, post] = row(Fault::reset()).await;
    for (outcome, _, _) in [&get, &post] {
        let error = outcome.as_ref().expect_err("reset");
        let reqwest_middleware::Error::Reqwest(inner) = error else { panic!("{error:?}") };
        assert!(inner.is_request() && !inner.is_connect() && !inner.is_timeout());
        assert!(chain(error).contains("ConnectionReset"), "{}", chain(error));
    }
    assert_eq!(stop(&get.1), RETRIED);
    assert_eq!(get.2, [RetryReason::ConnectionLost; 3]);
    assert_eq!(stop(&post.1), NOT_SAFE);
}

#[tokio::test]
async fn a_body_cut_short_reaches_the_caller_without_response_buffering() {
    let [get, post] = row(Fault::cut_body(4)).await;
    for (outcome, report, _) in [get, post] {
        let response = outcome.expect("the headers arrived");
        assert_eq!(response.status(), 200);
        assert_eq!(stop(&report), FINAL);
        let mut response = response;
        assert_eq!(response.chunk().await.unwrap().as_deref(), Some(&b"fine"[..]));
        let error = response.chunk().await.expect_err("cut after 4 bytes");
        assert!(format!("{:?}", error).contains("UnexpectedEof"), "{error:?}");
    }
}

#[tokio::test]
async fn a_body_cut_short_is_retried_with_response_buffering_when_safe_to_repeat() {
    let server = server("all of the body").await;
    let config = RetryConfig::builder()
        .with_body_buffering(BodyBuffering::default().with_response(1 << 16))
        .build()
        .unwrap();
    let stack = Stack::with_config(config, [Rule::new("cut", Fault::cut_body(3)).first(2)]);
    let (outcome, report) = stack.send(Method::GET, &server.uri()).await;
    assert_eq!(outcome.unwrap().text().await.unwrap(), "all of the body");
    assert_eq!(stop(&report), (3, StopReason::NothingToRetry));
    assert_eq!(stack.reasons(), [RetryReason::ConnectionLost; 2]);
}

#[tokio::test]
async fn thirty_seconds_of_latency_on_the_manual_clock_take_no_wall_time() {
    let server = server("late").await;
    let stack = Stack::new([Rule::new("slow", Fault::latency(Duration::from_secs(30)))]);
    // `bounded` fails the test after 10 s of real time: the 30 s are the
    // manual clock's.
    let (outcome, report) = stack.send(Method::GET, &server.uri()).await;
    assert_eq!(outcome.unwrap().text().await.unwrap(), "late");
    assert_eq!(stop(&report), FINAL);
    assert_eq!(stack.clock.sleeps(), [Duration::from_secs(30)]);
    assert_eq!(received(&server).await, 1);
}

// reqwest's timer, under tokio's paused clock: no real wait.
#[tokio::test(start_paused = true)]
async fn latency_past_the_request_s_own_timeout_ends_in_reqwest_s_timeout_at_that_timeout() {
    let server = server("late").await;
    let stack = Stack::new([Rule::new("slow", Fault::latency(Duration::from_secs(30))).first(1)]);
    // A POST: a timed-out GET would be retried, and the retry answered.
    let request = stack.client.post(server.uri()).timeout(Duration::from_secs(2));
    let error = bounded("a late POST", request.send()).await.expect_err("timed out");
    assert!(error.is_timeout(), "{}", chain(&error));
    assert_eq!(stack.clock.sleeps(), [Duration::from_secs(2)]);
    assert_eq!(received(&server).await, 0, "the answer never came");
}

#[tokio::test]
async fn latency_shorter_than_the_request_s_timeout_leaves_the_request_the_rest_of_it() {
    let server = server("late").await;
    let clock = ManualClock::new();
    let slow = Rule::new("slow", Fault::latency(Duration::from_millis(1500)));
    let chaos = Chaos::new([slow]).unwrap().with_clock(clock.clone());
    let seen = crate::support::SeenTimeouts::default();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(chaos)
        .with(seen.clone())
        .build();
    let request = client.get(server.uri()).timeout(Duration::from_secs(2));
    assert_eq!(request.send().await.unwrap().text().await.unwrap(), "late");
    assert_eq!(seen.get(), [Some(Duration::from_millis(500))]);
    assert_eq!(clock.sleeps(), [Duration::from_millis(1500)]);
    // Without a timeout of its own, the request gets none.
    client.get(server.uri()).send().await.unwrap();
    assert_eq!(seen.get()[1], None);
}

// reqwest's timer, under tokio's paused clock: no real wait.
#[tokio::test(start_paused = true)]
async fn a_timeout_after_a_wait_ends_at_the_request_s_own_timeout_if_that_is_sooner() {
    let server = server("late").await;
    let stack = Stack::new([Rule::new("hang", Fault::timeout_after(Duration::from_secs(60)))]);
    let request = stack.client.post(server.uri()).timeout(Duration::from_secs(2));
    let error = bounded("a hanging POST", request.send()).await.expect_err("timed out");
    assert!(error.is_timeout());
    assert_eq!(stack.clock.sleeps(), [Duration::from_secs(2)]);
}

#[tokio::test]
async fn a_response_without_a_body_is_not_cut_and_a_cut_one_keeps_its_length() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::path("/empty"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    Mock::given(any())
        .respond_with(ResponseTemplate::new(200).set_body_string("twelve bytes"))
        .mount(&server)
        .await;
    let stack = Stack::new([Rule::new("cut", Fault::cut_body(0))]);
    let (head, _) = stack.send(Method::HEAD, &server.uri()).await;
    assert_eq!(head.unwrap().bytes().await.unwrap().len(), 0, "a HEAD has no body to cut");
    let (empty, _) = stack.send(Method::GET, &format!("{}/empty", server.uri())).await;
    assert_eq!(empty.unwrap().bytes().await.unwrap().len(), 0, "nor a 204");
    let (cut, _) = stack.send(Method::GET, &server.uri()).await;
    let cut = cut.unwrap();
    assert_eq!(cut.content_length(), Some(12));
    assert!(cut.bytes().await.is_err());
    assert_eq!(stack.record.rule("cut").unwrap().injected, 3);
}

// reqwest's timer, under tokio's paused clock: no real wait.
#[tokio::test(start_paused = true)]
async fn a_timeout_after_a_wait_waits_on_the_clock_first() {
    let server = server("late").await;
    let stack =
        Stack::new([Rule::new("hang", Fault::timeout_after(Duration::from_secs(5))).first(1)]);
    let (outcome, report) = stack.send(Method::POST, &server.uri()).await;
    assert!(outcome.expect_err("timed out").is_timeout());
    assert_eq!(stop(&report), NOT_SAFE);
    assert_eq!(stack.clock.sleeps(), [Duration::from_secs(5)]);
}

#[tokio::test]
async fn a_script_reproduces_two_503s_then_success_with_no_server_answering_503() {
    let server = server("fine").await;
    let rule = Rule::new("two 503s", Fault::status(StatusCode::SERVICE_UNAVAILABLE)).first(2);
    let stack = Stack::new([rule]);
    let (outcome, report) = stack.send(Method::GET, &server.uri()).await;
    assert_eq!(outcome.unwrap().status(), 200);
    assert_eq!(stop(&report), (3, StopReason::NothingToRetry));
    // The seed table's row: waits of 500 ms and 1 s at the top of the jitter.
    assert_eq!(stack.clock.sleeps(), [Duration::from_millis(500), Duration::from_secs(1)]);
    assert_eq!(received(&server).await, 1, "only the third attempt reached the server");
    let record = stack.record.rule("two 503s").unwrap();
    assert_eq!((record.seen, record.injected, record.hits.len()), (3, 2, 2));
}

/// The paths of the calls `rate` injected into, out of 200 with `seed`.
async fn injected_paths(server: &MockServer, seed: u64) -> Vec<String> {
    let chaos = Chaos::new([Rule::new("coin", Fault::status(StatusCode::BAD_GATEWAY)).rate(0.3)])
        .unwrap()
        .with_seed(seed);
    let record = chaos.record();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(chaos).build();
    for call in 0..200 {
        let response = client.get(format!("{}/{call}", server.uri())).send().await.unwrap();
        let _ = response.status();
    }
    let hits = record.rule("coin").unwrap().hits;
    hits.iter().map(|hit| hit.url.path().to_owned()).collect()
}

#[tokio::test]
async fn a_seeded_rate_injects_the_same_faults_run_after_run() {
    let server = server("fine").await;
    let first = injected_paths(&server, 42).await;
    assert_eq!(first, injected_paths(&server, 42).await);
    assert_ne!(first, injected_paths(&server, 43).await, "another seed, other calls");
    assert!((40..=80).contains(&first.len()), "about 30% of 200: {}", first.len());
}

#[tokio::test]
async fn no_rule_injects_nothing_and_rules_that_see_no_call_inject_nothing() {
    let server = server("fine").await;
    let quiet = [
        Rule::new("other host", Fault::refused()).host("localhost"),
        Rule::new("deletes", Fault::refused()).method(Method::DELETE),
        Rule::new("later", Fault::refused()).starting_after(Duration::from_secs(60)),
        Rule::new("never", Fault::refused()).rate(0.0),
        Rule::new("no hits", Fault::refused()).limit(0),
    ];
    for rules in [Vec::new(), quiet.to_vec()] {
        let stack = Stack::new(rules);
        for _ in 0..20 {
            let (outcome, report) = stack.send(Method::GET, &server.uri()).await;
            assert_eq!(outcome.unwrap().status(), 200);
            assert_eq!(stop(&report), FINAL);
        }
        assert_eq!(stack.record.injected(), 0);
    }
    assert_eq!(received(&server).await, 40);
}

#[tokio::test]
async fn rules_go_in_order_within_their_span_and_limit() {
    let server = server("fine").await;
    let config = RetryConfig::builder().with_max_retries(0).build().unwrap();
    let stack = Stack::with_config(
        config,
        [
            Rule::new("posts", Fault::status(StatusCode::CONFLICT)).method(Method::POST).limit(2),
            Rule::new("window", Fault::status(StatusCode::BAD_GATEWAY))
                .starting_after(Duration::from_secs(10))
                .lasting(Duration::from_secs(5)),
            Rule::new("every third", Fault::status(StatusCode::GATEWAY_TIMEOUT)).every(3),
        ],
    );
    let status = |outcome: reqwest_middleware::Result<reqwest::Response>| outcome.unwrap().status();
    let mut statuses = Vec::new();
    for (method, at) in [
        (Method::POST, 0),
        (Method::POST, 0),
        (Method::POST, 0),
        (Method::GET, 0),
        (Method::GET, 0),
        (Method::GET, 10),
        (Method::GET, 14),
        (Method::GET, 15),
    ] {
        let elapsed = stack.clock.elapsed().as_secs();
        stack.clock.advance(Duration::from_secs(at - elapsed.min(at)));
        statuses.push(status(stack.send(method, &server.uri()).await.0).as_u16());
    }
    // The third POST is past the first rule's limit, and the first call the
    // last rule sees; the window takes the calls at 10 s and 14 s.
    assert_eq!(statuses, [409, 409, 200, 200, 504, 502, 502, 200]);
    let records = stack.record.rules();
    let counts: Vec<_> = records.iter().map(|r| (r.name.as_str(), r.seen, r.injected)).collect();
    assert_eq!(counts, [("posts", 3, 2), ("window", 2, 2), ("every third", 4, 1)]);
    assert_eq!(records[1].hits[1].at, Duration::from_secs(14));
}

#[tokio::test]
async fn a_request_can_turn_the_rules_off_or_force_one() {
    let server = server("fine").await;
    let stack = Stack::new([
        Rule::new("down", Fault::status(StatusCode::SERVICE_UNAVAILABLE)),
        Rule::new("teapot", Fault::status(StatusCode::IM_A_TEAPOT)).limit(0),
    ]);
    let off = stack.client.get(server.uri()).with_extension(ChaosOverride::Off);
    assert_eq!(off.send().await.unwrap().status(), 200);
    let forced = ChaosOverride::Force("teapot".into());
    let teapot = stack.client.get(server.uri()).with_extension(forced);
    assert_eq!(teapot.send().await.unwrap().status(), 418, "forced past its limit");
    let unknown = ChaosOverride::Force("gremlin".into());
    let error = stack.client.get(server.uri()).with_extension(unknown).send().await.unwrap_err();
    assert!(error.to_string().contains("gremlin"), "{error}");
    let counts: Vec<_> = stack.record.rules().iter().map(|r| (r.seen, r.injected)).collect();
    assert_eq!(counts, [(0, 0), (1, 1)]);
}

#[tokio::test]
async fn outside_the_retries_the_caller_meets_the_fault_and_the_retries_never_see_it() {
    let server = server("fine").await;
    let clock = ManualClock::new();
    let inner = RetryMiddleware::new(RetryConfig::default())
        .with_clock(clock.clone())
        .client(reqwest::Client::builder())
        .unwrap()
        .build();
    let chaos =
        Chaos::new([Rule::new("down", Fault::status(StatusCode::SERVICE_UNAVAILABLE)).first(1)])
            .unwrap()
            .with_clock(clock.clone());
    let client = chaos.around(inner).build();
    let response = client.get(server.uri()).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(RetryReport::from_response(&response).attempts, 1);
    assert!(clock.sleeps().is_empty(), "no retry waited");
    assert_eq!(received(&server).await, 0);
    // The next call passes the rule and goes through the retry layer.
    let slot = ReportSlot::new();
    let response = client.get(server.uri()).with_extension(slot.clone()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(slot.get().map(|report| report.stop), Some(StopReason::NothingToRetry));
}

#[test]
fn bad_rules_are_refused_with_the_rule_named() {
    let rule = |name| Rule::new(name, Fault::status(StatusCode::BAD_GATEWAY));
    for (rules, expected) in [
        (vec![rule("a").rate(1.5)], "chaos rule `a`: the rate 1.5 is not between 0 and 1"),
        (vec![rule("b").rate(f64::NAN)], "chaos rule `b`: the rate NaN is not between 0 and 1"),
        (vec![rule("c").rate(-0.1)], "chaos rule `c`: the rate -0.1 is not between 0 and 1"),
        (
            vec![rule("d").every(0)],
            "chaos rule `d`: `every(0)` picks no call; use 1 for every call",
        ),
        (vec![rule("e"), rule("e")], "two chaos rules are named `e`"),
    ] {
        let error = Chaos::new(rules).unwrap_err();
        assert_eq!(error.to_string(), expected);
    }
    assert!(Chaos::new([rule("f").rate(0.0), rule("g").rate(1.0)]).is_ok());
    assert!(matches!(
        Chaos::new([rule("h").every(0)]),
        Err(ChaosError::EveryZero { rule }) if rule == "h"
    ));
}

#[tokio::test]
async fn a_response_fault_carries_the_headers_given_and_the_request_s_url() {
    let mut headers = HeaderMap::new();
    headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
    let fault = Fault::response(StatusCode::TOO_MANY_REQUESTS, headers);
    let chaos = Chaos::new([Rule::new("limited", fault)]).unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(chaos).build();
    let url = "http://127.0.0.1:9/limited?page=2";
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after-ms"], "1500");
    assert_eq!(response.url().as_str(), url);
}

#[cfg(feature = "tracing")]
#[tokio::test]
async fn each_injection_is_an_event_naming_the_rule_the_fault_and_the_host_only() {
    let logs = crate::support::capture_logs(tracing::Level::DEBUG);
    let server = server("fine").await;
    let stack = Stack::new([Rule::new("gateway", Fault::status(StatusCode::BAD_GATEWAY)).first(1)]);
    let (outcome, _) =
        stack.send(Method::GET, &format!("{}/secret/path?token=1", server.uri())).await;
    assert_eq!(outcome.unwrap().status(), 200);
    let text = logs.text();
    let events: Vec<_> = text.lines().filter(|line| line.contains("fault injected")).collect();
    assert_eq!(events.len(), 1, "{text}");
    for field in ["chaos.rule=gateway", "chaos.fault=\"status\"", "http.request.method=GET"] {
        assert!(events[0].contains(field), "{field} in {}", events[0]);
    }
    assert!(events[0].contains("server.address=\"127.0.0.1\""), "{}", events[0]);
    assert!(!text.contains("secret") && !text.contains("token"), "no path or query: {text}");
}
