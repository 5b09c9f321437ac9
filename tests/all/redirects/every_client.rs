//! Every client a user can build, following redirects or not: none repeats
//! a request a redirect showed was processed, each keeps reqwest's redirect
//! choices and limits, and deadlines and resend counts cover the hops.

use crate::support;

use http::HeaderValue;

use reqwest::redirect::Policy;

use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};

use reqwest_safe_retry::{
    DeadlineExceeded, RetryConfig, RetryMiddleware, clock::ManualClock, jitter::FixedJitter,
    report::AttemptNumber, report::ReportSlot, report::StopReason,
};

use std::sync::Arc;

use support::hops::{BOUND, SHORT, refusing_port};

use support::*;

use wiremock::matchers::any;

use wiremock::{Mock, MockServer, ResponseTemplate};

use super::chains::Chains;

/// A hop limit, `referer(false)` and a filter that refuses another port
/// hold through the middleware as without it.
#[tokio::test]
async fn the_users_redirect_choices_hold() {
    let chains = Chains::start().await;
    // At most 2 redirects: a 5-redirect chain fails after 3 requests, as
    // with reqwest.
    let limited = || reqwest::Client::builder().no_proxy();
    let plain_limited = reqwest_middleware::ClientBuilder::new(
        limited().redirect(Policy::limited(2)).build().unwrap(),
    )
    .build();
    let ours_limited = RetryMiddleware::default()
        .with_clock(ManualClock::new())
        .with_redirect_policy(Policy::limited(2))
        .client(limited())
        .unwrap()
        .build();
    for client in [plain_limited, ours_limited] {
        let (url, prefix) = chains.url(302, "AAAAAA");
        let error = client.get(&url).send().await.unwrap_err();
        assert!(error.is_redirect(), "{error:?}");
        assert_eq!(chains.arrivals(&prefix).await.len(), 3);
    }

    // No Referer, as the builder says.
    let no_referer = || reqwest::Client::builder().no_proxy().referer(false);
    let plain = reqwest_middleware::ClientBuilder::new(no_referer().build().unwrap()).build();
    let ours = RetryMiddleware::default().client(no_referer()).unwrap().build();
    for client in [plain, ours] {
        let (url, prefix) = chains.url(302, "AB");
        client.get(format!("{url}?token=secret")).send().await.unwrap();
        let at_b = chains.b.received_requests().await.unwrap();
        let hop = at_b.iter().find(|r| r.url.path().starts_with(&prefix)).unwrap();
        assert!(!hop.headers.contains_key("referer"), "{:?}", hop.headers);
    }

    // A filter that refuses B's port: the redirect comes back, B sees
    // nothing.
    let b_port = chains.b.address().port();
    let filter = move || {
        Policy::custom(move |attempt| match attempt.url().port() {
            Some(port) if port == b_port => attempt.stop(),
            _ => attempt.follow(),
        })
    };
    let plain = reqwest_middleware::ClientBuilder::new(
        reqwest::Client::builder().no_proxy().redirect(filter()).build().unwrap(),
    )
    .build();
    let ours = RetryMiddleware::default()
        .with_redirect_policy(filter())
        .client(reqwest::Client::builder().no_proxy())
        .unwrap()
        .build();
    for client in [plain, ours] {
        let (url, prefix) = chains.url(307, "AAB");
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 307);
        let arrivals = chains.arrivals(&prefix).await;
        assert!(arrivals.iter().all(|(server, ..)| *server == 'A'), "{arrivals:?}");
    }
}

/// `https_only` holds: a plain-HTTP URL is refused before anything is sent,
/// with and without the middleware.
#[tokio::test]
async fn https_only_holds() {
    let chains = Chains::start().await;
    let https_only = || reqwest::Client::builder().no_proxy().https_only(true);
    let plain = reqwest_middleware::ClientBuilder::new(https_only().build().unwrap()).build();
    let ours = RetryMiddleware::default().client(https_only()).unwrap().build();
    for client in [plain, ours] {
        let (url, prefix) = chains.url(302, "AB");
        assert!(client.get(&url).send().await.is_err());
        assert!(chains.arrivals(&prefix).await.is_empty());
    }
}

/// A `Location` with UTF-8 bytes is followed to the same path as reqwest
/// follows it.
#[tokio::test]
async fn a_utf8_location_is_followed_as_reqwest_follows_it() {
    let server = MockServer::start().await;
    let location = HeaderValue::from_bytes("/caf\u{e9}/ok".as_bytes()).unwrap();
    Mock::given(wiremock::matchers::path("/start"))
        .respond_with(ResponseTemplate::new(302).insert_header("Location", location))
        .mount(&server)
        .await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&server).await;
    let plain = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).build();
    let ours = RetryMiddleware::default().client(reqwest::Client::builder()).unwrap().build();
    let mut paths = Vec::new();
    for client in [plain, ours] {
        let response = client.get(format!("{}/start", server.uri())).send().await.unwrap();
        paths.push((response.status().as_u16(), response.url().path().to_owned()));
    }
    assert_eq!(paths[0], paths[1]);
    assert_eq!(paths[0].0, 200);
}

/// A POST without a key answered 303 to a port that refuses: processed once
/// by every client a user can build around one middleware.
#[tokio::test]
async fn no_client_a_user_builds_repeats_a_processed_post() {
    let (refused, _port) = refusing_port();
    let orders = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ResponseTemplate::new(303).insert_header("Location", format!("{refused}/x")))
        .mount(&orders)
        .await;
    let retry = || {
        RetryMiddleware::new(policy().build().unwrap())
            .with_clock(ManualClock::new())
            .with_jitter_source(FixedJitter::TOP)
    };
    let one = retry();
    let clients: Vec<(&str, ClientWithMiddleware)> = vec![
        // The redirect policy set, the middleware put on a client by hand.
        (
            "configured but put on by hand",
            reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                .with(retry().with_redirect_policy(Policy::default()))
                .build(),
        ),
        // One middleware, two clients: the one it built, and one by hand.
        (
            "one middleware, its own client",
            one.clone().client(reqwest::Client::builder()).unwrap().build(),
        ),
        (
            "one middleware, another client",
            reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(one).build(),
        ),
        // Two retry layers in one chain.
        (
            "two retry layers",
            retry().client(reqwest::Client::builder()).unwrap().with(retry()).build(),
        ),
    ];
    for (name, client) in clients {
        let before = hits(&orders).await;
        let slot = ReportSlot::new();
        let call = client.post(orders.uri()).body("item=1").with_extension(slot.clone()).send();
        let error = tokio::time::timeout(BOUND, call).await.unwrap().unwrap_err();
        assert!(error.is_connect(), "{name}: {error:?}");
        assert_eq!(hits(&orders).await - before, 1, "{name}: the POST was processed once");
        assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe, "{name}");
    }
}

/// A builder with a redirect policy of its own is refused, not stripped of
/// it: the limit or filter would otherwise be lost without a word.
#[test]
fn a_builder_with_its_own_redirect_policy_is_refused() {
    for own in [Policy::none(), Policy::limited(5), Policy::custom(|attempt| attempt.stop())] {
        let builder = reqwest::Client::builder().redirect(own);
        let Err(error) = RetryMiddleware::default().client(builder) else {
            panic!("a builder with its own redirect policy was taken")
        };
        assert!(matches!(error, reqwest_safe_retry::ClientError::RedirectPolicySet), "{error}");
        assert!(error.to_string().contains("with_redirect_policy"), "{error}");
    }
    let default = reqwest::Client::builder().redirect(Policy::default());
    assert!(RetryMiddleware::default().client(default).is_ok(), "the default loses nothing");
}

/// The same clients still retry what is safe to repeat.
#[tokio::test]
async fn every_such_client_still_retries_a_get() {
    let retry = || {
        RetryMiddleware::new(policy().build().unwrap())
            .with_clock(ManualClock::new())
            .with_jitter_source(FixedJitter::TOP)
    };
    let one = retry();
    let clients = [
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(retry()).build(),
        one.clone().client(reqwest::Client::builder()).unwrap().build(),
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(one).build(),
        retry().client(reqwest::Client::builder()).unwrap().with(retry()).build(),
    ];
    for (n, client) in clients.into_iter().enumerate() {
        let server = MockServer::start().await;
        script_statuses(&server, "/", &[503, 200]).await;
        let response = client.get(server.uri()).send().await.unwrap();
        assert_eq!((n, response.status().as_u16()), (n, 200));
    }
}

/// A request's own timeout bounds each attempt, its redirects included, as
/// it bounds reqwest's whole chain: a chain whose third hop never answers
/// times out, a GET is retried (each attempt the whole chain), a POST not.
#[tokio::test]
async fn a_requests_timeout_bounds_the_chain() {
    let server = MockServer::start().await;
    for (at, next) in [("/0", "/1"), ("/1", "/2")] {
        Mock::given(wiremock::matchers::path(at))
            .respond_with(ResponseTemplate::new(307).insert_header("Location", next))
            .mount(&server)
            .await;
    }
    Mock::given(wiremock::matchers::path("/2"))
        .respond_with(ResponseTemplate::new(200).set_delay(BOUND))
        .mount(&server)
        .await;
    let plain = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).build();
    let error = plain.get(format!("{}/0", server.uri())).timeout(SHORT).send().await.unwrap_err();
    assert!(error.is_timeout());
    // The request's timeout bounds the whole call, as it bounds plain
    // reqwest's: one attempt, whatever the method.
    for (method, attempts) in [(reqwest::Method::GET, 1), (reqwest::Method::POST, 1)] {
        let (client, _) = Kind::Handing.client(policy());
        let slot = ReportSlot::new();
        let call = client
            .request(method.clone(), format!("{}/0", server.uri()))
            .timeout(SHORT)
            .with_extension(slot.clone())
            .send();
        let error = tokio::time::timeout(BOUND, call).await.expect("bounded").unwrap_err();
        assert!(error.is_timeout(), "{method}: {error:?}");
        let report = slot.get().unwrap();
        assert_eq!((report.attempts, report.redirects), (attempts, 2 * attempts), "{method}");
    }
}

/// The bound the docs state: with the defaults, at most 4 attempts of at
/// most 11 requests each.
#[tokio::test]
async fn one_call_sends_at_most_attempts_times_the_redirect_limit() {
    let server = MockServer::start().await;
    for i in 0..10 {
        Mock::given(wiremock::matchers::path(format!("/{i}")))
            .respond_with(
                ResponseTemplate::new(302).insert_header("Location", format!("/{}", i + 1)),
            )
            .mount(&server)
            .await;
    }
    Mock::given(wiremock::matchers::path("/10"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let (client, _) = Kind::Handing.client(policy());
    let slot = ReportSlot::new();
    let call = client.get(format!("{}/0", server.uri())).with_extension(slot.clone()).send();
    let response = tokio::time::timeout(BOUND, call).await.unwrap().unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(hits(&server).await, 4 * 11);
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.redirects, report.resend_count()), (4, 40, 43));
}

/// The deadline passes after a 303 answered the POST, while its next hop
/// hangs: the caller learns the POST was processed. Sent straight to the
/// hop that hangs, nothing answered it, and the error says nothing of the
/// kind.
#[tokio::test]
async fn a_deadline_after_a_redirect_says_the_request_was_processed() {
    let (a, b) = (MockServer::start().await, MockServer::start().await);
    Mock::given(any())
        .respond_with(
            ResponseTemplate::new(303).insert_header("Location", format!("{}/x", b.uri())),
        )
        .mount(&a)
        .await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200).set_delay(BOUND)).mount(&b).await;
    for (url, redirected) in [(a.uri(), true), (format!("{}/x", b.uri()), false)] {
        let clock = ManualClock::new();
        let config = RetryConfig::builder().with_deadline(std::time::Duration::from_secs(1));
        let client = RetryMiddleware::new(config.build().unwrap())
            .with_clock(clock.clone())
            .client(reqwest::Client::builder())
            .unwrap()
            .build();
        let slot = ReportSlot::new();
        let at_b = b.received_requests().await.unwrap().len();
        let call = client.post(&url).body("item=1").with_extension(slot.clone()).send();
        // Once the hanging hop is under way, time runs out.
        let advance = async {
            while b.received_requests().await.unwrap().len() == at_b {
                tokio::task::yield_now().await;
            }
            clock.advance(std::time::Duration::from_secs(2));
        };
        let (result, ()) =
            tokio::time::timeout(BOUND, async { tokio::join!(call, advance) }).await.unwrap();
        let reqwest_middleware::Error::Middleware(error) = result.unwrap_err() else {
            panic!("not the deadline's error")
        };
        let exceeded = error.downcast_ref::<DeadlineExceeded>().unwrap();
        assert_eq!(exceeded.redirected(), redirected, "{url}");
        assert_eq!(exceeded.to_string().contains("processed"), redirected, "{exceeded}");
        let report = slot.get().unwrap();
        let redirects = u32::from(redirected);
        assert_eq!(
            (report.attempts, report.redirects, report.stop),
            (1, redirects, StopReason::DeadlineExceeded)
        );
    }
    assert_eq!(hits(&a).await, 1);
}

/// A redirect in an earlier attempt counts too: a GET whose first attempt
/// was redirected to a 503, and whose second hangs at the first hop until
/// the deadline, ends with an error that says the request was processed.
#[tokio::test]
async fn a_redirect_in_an_earlier_attempt_marks_the_deadline_too() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::path("/a"))
        .respond_with(ResponseTemplate::new(302).insert_header("Location", "/b"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(wiremock::matchers::path("/a"))
        .respond_with(ResponseTemplate::new(200).set_delay(BOUND))
        .mount(&server)
        .await;
    Mock::given(wiremock::matchers::path("/b"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let clock = ManualClock::new();
    let config = policy().with_deadline(std::time::Duration::from_secs(10));
    let client = RetryMiddleware::new(config.build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP)
        .client(reqwest::Client::builder())
        .unwrap()
        .build();
    let slot = ReportSlot::new();
    let call = client.get(format!("{}/a", server.uri())).with_extension(slot.clone()).send();
    // Once the second attempt hangs at the first hop, time runs out.
    let advance = async {
        while hits(&server).await < 3 {
            tokio::task::yield_now().await;
        }
        clock.advance(std::time::Duration::from_secs(20));
    };
    let (result, ()) =
        tokio::time::timeout(BOUND, async { tokio::join!(call, advance) }).await.unwrap();
    let reqwest_middleware::Error::Middleware(error) = result.unwrap_err() else {
        panic!("not the deadline's error")
    };
    assert!(error.downcast_ref::<DeadlineExceeded>().unwrap().redirected());
    let report = slot.get().unwrap();
    assert_eq!(
        (report.attempts, report.redirects, report.stop),
        (2, 1, StopReason::DeadlineExceeded)
    );
}

/// `RetryReport`, `AttemptNumber` and the events count resends alike, the
/// redirects included: a GET answered 302 then 503, then 302 then 200 is
/// four requests.
#[tokio::test]
async fn every_resend_count_includes_redirects() {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::path("/start"))
        .respond_with(ResponseTemplate::new(302).insert_header("Location", "/next"))
        .mount(&server)
        .await;
    script_statuses(&server, "/next", &[503, 200]).await;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let numbers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook = events.clone();
    let retry = RetryMiddleware::new(policy().build().unwrap())
        .with_clock(ManualClock::new())
        .on_decision(move |event| hook.lock().unwrap().push(event.resend_count));
    let client =
        retry.client(reqwest::Client::builder()).unwrap().with(Numbers(numbers.clone())).build();
    let response = client.get(format!("{}/start", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let report = reqwest_safe_retry::report::RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.redirects, report.resend_count()), (2, 2, 3));
    assert_eq!(*events.lock().unwrap(), [1, 3], "the 503 was the 2nd request, the 200 the 4th");
    assert_eq!(*numbers.lock().unwrap(), [None, Some((2, 2))]);
}

/// Each attempt's `AttemptNumber` as (number, resend count), if set.
type Recorded = Arc<std::sync::Mutex<Vec<Option<(u32, u32)>>>>;

/// Records each attempt's `AttemptNumber`.
struct Numbers(Recorded);

#[async_trait::async_trait]
impl Middleware for Numbers {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let number = extensions.get::<AttemptNumber>().map(|n| (n.get(), n.resend_count()));
        self.0.lock().unwrap().push(number);
        next.run(request, extensions).await
    }
}

/// A clock whose sleeps all end when the test opens its gate: the hedge's
/// timer fires exactly when the test says.
#[derive(Debug, Clone, Default)]
struct Gate(Arc<tokio::sync::Notify>);

impl reqwest_safe_retry::clock::Clock for Gate {
    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }

    fn sleep(&self, _: std::time::Duration) -> reqwest_safe_retry::clock::Sleep {
        let gate = self.0.clone();
        Box::pin(async move { gate.notified().await })
    }

    fn sleep_until(&self, _: std::time::Instant) -> reqwest_safe_retry::clock::Sleep {
        let gate = self.0.clone();
        Box::pin(async move { gate.notified().await })
    }
}

/// The hedge inside the quick start's client: once a copy's 307 took a
/// request safe only by its key to another origin, no further copy is sent
/// (the key was set for the first); a GET, a 307 within the origin, or a
/// POST that a 302 turned into a GET, is hedged as before.
#[tokio::test]
async fn no_hedge_follows_a_key_taken_to_another_origin() {
    use reqwest_safe_retry::hedge::{HedgeConfig, HedgeMiddleware, HedgeSlot};

    let (a, b) = (MockServer::start().await, MockServer::start().await);
    Mock::given(wiremock::matchers::path("/away"))
        .respond_with(
            ResponseTemplate::new(307).insert_header("Location", format!("{}/slow", b.uri())),
        )
        .mount(&a)
        .await;
    Mock::given(wiremock::matchers::path("/here"))
        .respond_with(ResponseTemplate::new(307).insert_header("Location", "/slow"))
        .mount(&a)
        .await;
    Mock::given(wiremock::matchers::path("/moved"))
        .respond_with(
            ResponseTemplate::new(302).insert_header("Location", format!("{}/slow", b.uri())),
        )
        .mount(&a)
        .await;
    for server in [&a, &b] {
        Mock::given(wiremock::matchers::path("/slow"))
            .respond_with(ResponseTemplate::new(200).set_delay(BOUND))
            .mount(server)
            .await;
    }
    let cases = [
        ("a keyed POST taken away", reqwest::Method::POST, "/away", &b, 1),
        ("a GET taken away", reqwest::Method::GET, "/away", &b, 2),
        ("a keyed POST kept on its origin", reqwest::Method::POST, "/here", &a, 2),
        // A 302 turns a POST into a GET, and keeps a PATCH a PATCH.
        ("a keyed POST moved away", reqwest::Method::POST, "/moved", &b, 2),
        ("a keyed PATCH moved away", reqwest::Method::PATCH, "/moved", &b, 1),
    ];
    for (name, method, at, slow, copies) in cases {
        let gate = Gate::default();
        let hedge = HedgeMiddleware::new(HedgeConfig::builder().with_budget(None).build().unwrap())
            .with_clock(gate.clone());
        let retry =
            RetryMiddleware::new(RetryConfig::builder().with_max_retries(0).build().unwrap())
                .with_clock(ManualClock::new());
        let client = retry.client(reqwest::Client::builder()).unwrap().with(hedge).build();
        let slow_before = slow.received_requests().await.unwrap().len();
        let slot = HedgeSlot::new();
        let call = client
            .request(method, format!("{}{at}", a.uri()))
            .header("Idempotency-Key", "k-1")
            .body("item=1")
            .timeout(SHORT)
            .with_extension(slot.clone())
            .send();
        // Once the first copy has reached the slow hop, the hedge's delay
        // runs out.
        let open = async {
            while slow.received_requests().await.unwrap().len() == slow_before {
                tokio::task::yield_now().await;
            }
            gate.0.notify_waiters();
        };
        let (result, ()) =
            tokio::time::timeout(BOUND, async { tokio::join!(call, open) }).await.unwrap();
        assert!(result.unwrap_err().is_timeout(), "{name}: the slow hop never answers");
        assert_eq!(slot.get().map(|report| report.copies), Some(copies), "{name}");
    }
}
