//! MIGRATING.md, checked: every recipe in the guide is a function here, shown
//! in the guide as it is written here (`the_guide_shows_the_code_tested_here`
//! compares them), and every difference the guide's tables claim is a test,
//! against reqwest-retry itself where the claim is about it. All servers are
//! on loopback, every wait goes to a manual clock (ours) or is zero
//! (reqwest-retry's), and every network wait is bounded.

use crate::support;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{Method, Response, StatusCode};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Extension};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_safe_retry::{Backoff, BodyBuffering, RetryAfter};
use reqwest_safe_retry::{
    Jitter, Outcome, RetryAfterOverCap, RetryConfig, RetryConfigBuilder, RetryMiddleware,
    Retryability, SafeToRetry, Verdict, clock::ManualClock, jitter::FixedJitter, report::Decision,
    report::ReportSlot, report::RetryReport, report::StopReason,
};
use support::tls_server::{Handshake, rustls_client, tls_server, untrusting_client};
use support::*;
use wiremock::{MockServer, ResponseTemplate};

// ---------------------------------------------------------------------------
// The recipes, exactly as MIGRATING.md shows them (between the `guide:`
// markers).
// ---------------------------------------------------------------------------

// guide: like_reqwest_retry
/// reqwest-retry 0.9 as most code uses it —
/// `RetryTransientMiddleware::new_with_policy(ExponentialBackoff::builder().build_with_max_retries(3))`.
/// Use it on a client built with `every_request_safe` (below).
fn like_reqwest_retry() -> RetryConfigBuilder {
    RetryConfig::builder()
        // ExponentialBackoff::builder(): 1 s doubling up to 30 min, full jitter.
        .with_backoff(
            Backoff::default()
                .with_initial(Duration::from_secs(1))
                .with_max(Duration::from_secs(30 * 60))
                .with_jitter(Jitter::Full),
        )
        // reqwest-retry has no default count: use the one you passed it.
        .with_max_retries(3)
        // No retry budget there, and every call is sent.
        .with_budget(None)
        .with_throttling(false)
        // Retry-After ignored: whatever the server asks for is over a cap of
        // zero, so the wait is zero plus the spread, which with full jitter
        // is the backoff itself.
        .with_retry_after(
            RetryAfter::default()
                .with_cap(Duration::ZERO)
                .with_over_cap(RetryAfterOverCap::WaitTheCap),
        )
        // Its classification.
        .with_predicate(|attempt| {
            Some(if reqwest_retry_would_retry(&attempt.outcome) {
                Retryability::AnyMethod
            } else {
                Retryability::Never
            })
        })
}

/// reqwest-retry 0.9's `DefaultRetryableStrategy`, rule for rule: true where
/// it answers `Retryable::Transient`.
fn reqwest_retry_would_retry(outcome: &Outcome<'_>) -> bool {
    let error = match *outcome {
        Outcome::Response(response) => {
            let status = response.status();
            return status.is_server_error() || status == 408 || status == 429;
        }
        Outcome::Error(reqwest_middleware::Error::Reqwest(error)) => error,
        // An error another middleware returned is never retried there.
        _ => return false,
    };
    // Every connect error (DNS and certificate errors too), every timeout.
    if error.is_timeout() || error.is_connect() {
        return true;
    }
    if error.is_body() || error.is_decode() || error.is_builder() || error.is_redirect() {
        return false;
    }
    if !error.is_request() {
        return false;
    }
    // A response cut short, a request handed back unsent, or a reset or
    // aborted connection under hyper.
    let Some(hyper_error) = first_cause::<hyper::Error>(error) else { return false };
    hyper_error.is_incomplete_message()
        || hyper_error.is_canceled()
        || first_cause::<std::io::Error>(hyper_error).is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
            )
        })
}

/// The first error of type `T` behind `error` (not `error` itself).
fn first_cause<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    std::iter::successors(error.source(), |&e| e.source()).find_map(|e| e.downcast_ref::<T>())
}

/// reqwest-retry repeats any request, whatever its method and whatever
/// redirects the client followed: mark every request safe to repeat.
fn every_request_safe(client: ClientBuilder) -> ClientBuilder {
    client.with_init(Extension(SafeToRetry))
}
// guide: end

// guide: statuses_like_reqwest_retry
/// Every 5xx, 408 and 429, as reqwest-retry — but, without a predicate,
/// still only for requests that are safe to repeat.
fn statuses_like_reqwest_retry() -> RetryConfigBuilder {
    let statuses = (500..=599).chain([408, 429]).filter_map(|code| StatusCode::from_u16(code).ok());
    RetryConfig::builder().with_retryable_statuses(statuses)
}
// guide: end

// guide: every_connect_error
/// Retry every connect error, as reqwest-retry does: a name that does not
/// exist and a certificate that is not trusted too. For any method through
/// the client the middleware built, else when safe to repeat.
fn every_connect_error() -> RetryConfigBuilder {
    RetryConfig::builder().with_predicate(|attempt| match attempt.outcome {
        Outcome::Error(error) if error.is_connect() => Some(Retryability::AnyMethod),
        _ => None, // the built-in rules
    })
}
// guide: end

// guide: no_budget
/// Every retry the count allows, however many fail: no budget.
fn no_budget() -> RetryConfigBuilder {
    RetryConfig::builder().with_budget(None)
}
// guide: end

// guide: without_redirects
/// A client that follows no redirect: each 3xx comes back to the caller.
fn without_redirects(config: RetryConfig) -> RetryMiddleware {
    RetryMiddleware::new(config).with_redirect_policy(reqwest::redirect::Policy::none())
}
// guide: end

#[cfg(feature = "tracing")]
// guide: warn_on_retry
/// A warning before each retry and nothing else, as reqwest-retry logs.
fn warn_on_retry(middleware: RetryMiddleware) -> RetryMiddleware {
    middleware.on_decision(|event| {
        if let Decision::Retry { after, reason } = event.decision {
            tracing::warn!(attempt = event.attempt, %reason, "retrying after {after:?}");
        }
    })
}
// guide: end

// guide: retry_201
/// reqwest-retry's `RetryableStrategy` example (`Retry201`), ported: a 201
/// is retried (for any method where redirects are ruled out, as the built-in
/// rules' 429), no other response is, errors follow the built-in rules.
fn retry_201() -> RetryConfigBuilder {
    RetryConfig::builder().with_predicate(|attempt| match attempt.outcome {
        Outcome::Response(response) if response.status() == 201 => Some(Retryability::AnyMethod),
        // Not `None`: that would hand a 503 to the built-in rules, which retry it.
        Outcome::Response(_) => Some(Retryability::Never),
        _ => None,
    })
}
// guide: end

// guide: port_409_and_501_final
/// A `RetryableStrategy` that makes 409 and 501 final and hands every other
/// outcome to reqwest-retry's defaults, ported. `None` hands an outcome to
/// *this* crate's rules, so the statuses reqwest-retry's defaults retry are
/// configured first; the rules of safety still apply to them.
fn port_409_and_501_final() -> RetryConfigBuilder {
    statuses_like_reqwest_retry().with_predicate(|attempt| match attempt.outcome {
        Outcome::Response(response) if matches!(response.status().as_u16(), 409 | 501) => {
            Some(Retryability::Never)
        }
        _ => None, // the built-in rules, with reqwest-retry's statuses
    })
}
// guide: end

// guide: github_rate_limits
/// GitHub's rate limits, as its REST API documents them: a 403 or 429 with
/// `retry-after` is a secondary limit; one with `x-ratelimit-remaining: 0`
/// is the primary limit, lifted at `x-ratelimit-reset` (Unix seconds); a
/// 429 with neither asks for at least a minute. All refuse before any work
/// is done, so any method may wait them out. They are waits the server
/// asked for, so the cap applies: a wait longer than the `RetryAfter` cap is
/// returned to the caller.
fn github_rate_limits() -> RetryConfigBuilder {
    RetryConfig::builder().with_predicate(|attempt| {
        let Outcome::Response(response) = attempt.outcome else { return None };
        if !matches!(response.status().as_u16(), 403 | 429) {
            return None;
        }
        let number = |name: &str| response.headers().get(name)?.to_str().ok()?.parse::<u64>().ok();
        let limited = Verdict::new(Retryability::AnyMethod);
        if let Some(seconds) = number("retry-after") {
            Some(limited.server_asked(Duration::from_secs(seconds)))
        } else if number("x-ratelimit-remaining") == Some(0) {
            let reset = Duration::from_secs(number("x-ratelimit-reset")?);
            Some(limited.server_asked_until(UNIX_EPOCH.checked_add(reset)?))
        } else if response.status() == 429 {
            Some(limited.server_asked(Duration::from_secs(60))) // "at least a minute"
        } else {
            None // another 403 is final
        }
    })
}
// guide: end

// guide: only_for_host
/// Retries for one host only, as `reqwest::retry::for_host(host)` scopes
/// them, at most twice as reqwest does; the built-in rules decide what.
fn only_for_host(host: &'static str) -> RetryConfigBuilder {
    RetryConfig::builder().with_max_retries(2).with_predicate(move |attempt| {
        match attempt.request.url().host_str() {
            Some(name) if name == host => None, // the built-in rules
            _ => Some(Retryability::Never),
        }
    })
}
// guide: end

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

/// reqwest-retry with its default strategy, `max_retries` and waits of zero
/// (its sleeps are real ones).
fn peer(max_retries: u32) -> RetryTransientMiddleware<ExponentialBackoff> {
    let policy = ExponentialBackoff::builder()
        .retry_bounds(Duration::ZERO, Duration::ZERO)
        .build_with_max_retries(max_retries);
    RetryTransientMiddleware::new_with_policy(policy)
}

/// The two stacks a parity check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stack {
    /// reqwest-retry, 3 retries, waits of zero.
    Peer,
    /// This crate with [`like_reqwest_retry`] on a client built with
    /// [`every_request_safe`], on a manual clock.
    Recipe,
}

/// `inner` behind `stack`, with [`Calls`] below it; the clock is ours.
fn stack(stack: Stack, inner: reqwest::Client) -> (ClientWithMiddleware, Calls, ManualClock) {
    let (calls, clock) = (Calls::default(), ManualClock::new());
    let builder = ClientBuilder::new(inner);
    let builder = match stack {
        Stack::Peer => builder.with(peer(3)),
        Stack::Recipe => every_request_safe(builder).with(
            RetryMiddleware::new(like_reqwest_retry().build().unwrap())
                .with_clock(clock.clone())
                .with_jitter_source(FixedJitter::TOP),
        ),
    };
    (builder.with(calls.clone()).build(), calls, clock)
}

/// This crate's client built from `inner` with `config`, as the quick start
/// builds it, a manual clock and jitter at the top.
fn ours(inner: reqwest::ClientBuilder, config: RetryConfig) -> (ClientWithMiddleware, ManualClock) {
    ours_with(inner, RetryMiddleware::new(config))
}

/// The same with `middleware`.
fn ours_with(
    inner: reqwest::ClientBuilder,
    middleware: RetryMiddleware,
) -> (ClientWithMiddleware, ManualClock) {
    let clock = ManualClock::new();
    let middleware = middleware.with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    (middleware.client(inner).expect("the client builds").build(), clock)
}

/// Waits at most 10 s for a request and its retries.
async fn bounded<T>(what: &str, request: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within 10 s"))
}

/// A server answering `statuses` in turn at `/r`; returns it and the URL.
async fn scripted(statuses: &[u16]) -> (MockServer, String) {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", statuses).await;
    let url = format!("{}/r", server.uri());
    (server, url)
}

/// Sends `method` to `url` with a small body and a report slot.
async fn send(
    client: &ClientWithMiddleware,
    method: Method,
    url: &str,
) -> (reqwest_middleware::Result<Response>, RetryReport) {
    let slot = ReportSlot::new();
    let request = client.request(method.clone(), url).body("order=1").with_extension(slot.clone());
    let result = bounded(&format!("{method} {url}"), request.send()).await;
    (result, slot.get().expect("the middleware fills the slot"))
}

/// A status, or "error".
fn summary(result: &reqwest_middleware::Result<Response>) -> String {
    match result {
        Ok(response) => response.status().as_u16().to_string(),
        Err(_) => "error".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// The guide and this file agree.
// ---------------------------------------------------------------------------

/// Lines without their indentation, blank lines dropped.
fn normalised(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_guide_shows_the_code_tested_here() {
    let guide = normalised(include_str!("../../MIGRATING.md"));
    let source = include_str!("migration.rs");
    // Spelt so that these lines are no markers themselves.
    let (start, end) = (concat!("// guide", ": "), concat!("// guide", ": end"));
    let mut recipes = 0;
    for block in source.split(start).skip(1) {
        let (name, rest) = block.split_once('\n').unwrap();
        if name == "end" {
            continue;
        }
        let code = rest.split(end).next().unwrap();
        assert!(guide.contains(&normalised(code)), "MIGRATING.md does not show `{name}` as tested");
        recipes += 1;
    }
    assert!(recipes >= 9, "{recipes} recipes found");
}

/// Every test a table of the guide names in its "tests" column, or the
/// guide names in its prose, is a test of the suite: a claim cannot lose its
/// test by a rename.
#[test]
fn every_test_the_guide_names_exists() {
    let guide = include_str!("../../MIGRATING.md");
    let tests = support::rust_sources("tests/all");
    // A test name: a backticked identifier of at least four words.
    let names: Vec<&str> = guide
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|quoted| quoted.rsplit("::").next().unwrap())
        .filter(|name| name.split('_').count() >= 4)
        .filter(|name| {
            name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .collect();
    // The crate's own methods are named too: they are not tests.
    let api = support::rust_sources("src");
    // And so are the APIs the guide maps from.
    let theirs = [
        "default_on_request_success",
        "default_on_request_failure",
        "max_retries_per_request",
        "new_with_policy_and_strategy",
        "with_retry_log_level",
    ];
    let names: Vec<&str> = names
        .into_iter()
        .filter(|name| !api.contains(&format!("pub fn {name}(")) && !theirs.contains(name))
        .collect();
    assert!(names.len() >= 40, "{} test names found", names.len());
    for name in names {
        let defined = [format!("fn {name}("), format!("fn {name}<")];
        assert!(
            defined.iter().any(|d| tests.contains(d.as_str())),
            "MIGRATING.md names `{name}`, which is no function under tests/all"
        );
    }
    // And what a "tests" column names is a test, not a helper.
    let lines: Vec<&str> = tests.lines().collect();
    let is_test = |name: &str| {
        let at = lines.iter().position(|l| l.contains(&format!("fn {name}("))).unwrap();
        lines[at.saturating_sub(3)..at].iter().any(|l| {
            let l = l.trim();
            l.ends_with("test]") || l.starts_with("#[tokio::test(")
        })
    };
    let mut in_tests_column = false;
    for row in guide.lines() {
        if !row.starts_with('|') {
            in_tests_column = false;
            continue;
        }
        let last = row.trim_end_matches('|').rsplit('|').next().unwrap().trim();
        if last == "tests" {
            in_tests_column = true;
            continue;
        }
        if !in_tests_column {
            continue;
        }
        for quoted in last.split('`').skip(1).step_by(2) {
            let name = quoted.rsplit("::").next().unwrap();
            if name.split('_').count() >= 4 && !name.contains(['(', ' ']) {
                assert!(is_test(name), "the guide's tests column names `{name}`, not a test");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The recipe that reproduces reqwest-retry, against reqwest-retry itself.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn like_reqwest_retry_answers_as_reqwest_retry_does() {
    let scripts: [(Method, &[u16]); 9] = [
        (Method::POST, &[503, 503, 200]),
        (Method::PATCH, &[500, 502, 504, 200]),
        (Method::POST, &[501, 505, 599, 200]),
        (Method::POST, &[408, 429, 200]),
        (Method::POST, &[503]),
        (Method::GET, &[404, 200]),
        (Method::POST, &[409, 200]),
        (Method::DELETE, &[302, 200]),
        (Method::PUT, &[200, 503]),
    ];
    for (method, script) in scripts {
        let mut seen = Vec::new();
        for side in [Stack::Peer, Stack::Recipe] {
            let (server, url) = scripted(script).await;
            let (client, calls, _) = stack(side, bare_reqwest());
            let request = client.request(method.clone(), &url).body("order=1");
            let result = bounded(&format!("{method} {script:?}"), request.send()).await;
            seen.push((summary(&result), calls.0.get(), hits(&server).await));
        }
        assert_eq!(seen[0], seen[1], "{method} {script:?}: reqwest-retry, then the recipe");
    }
}

#[tokio::test]
async fn like_reqwest_retry_fails_as_reqwest_retry_does() {
    // (case, method): each side gets a fresh server; the outcome and the
    // attempts below the retry layer must agree.
    for case in ["refused", "dns", "certificate", "reset", "timeout"] {
        let mut seen = Vec::new();
        for side in [Stack::Peer, Stack::Recipe] {
            let resolver = NoSuchHost::default();
            let (_port, url, inner, timeout) = match case {
                "refused" => {
                    let (url, port) = hops::refusing_port();
                    (Some(port), url, bare_reqwest(), None)
                }
                "dns" => {
                    let inner =
                        unresolving_client(&resolver).redirect(reqwest::redirect::Policy::none());
                    (None, "http://orders.invalid/".to_owned(), inner.build().unwrap(), None)
                }
                "certificate" => {
                    let (url, _, _) = tls_server(vec![Handshake::Complete]).await;
                    (None, url, untrusting_client(), None)
                }
                "reset" => {
                    let (url, _) = raw_server(vec![Raw::Close, Raw::Reply(OK_CLOSE)]).await;
                    (None, url, bare_reqwest(), None)
                }
                _ => {
                    // The client's timeout bounds each attempt, as
                    // reqwest-retry's request timeout does (here, a
                    // request's own bounds the whole call).
                    let (url, _) = raw_server(vec![Raw::Stall, Raw::Reply(OK_CLOSE)]).await;
                    let inner = reqwest::Client::builder()
                        .redirect(reqwest::redirect::Policy::none())
                        .timeout(Duration::from_millis(200));
                    (None, url, inner.build().unwrap(), None)
                }
            };
            let (client, calls, _) = stack(side, inner);
            let mut request = client.post(&url).body("order=1");
            if let Some(timeout) = timeout {
                request = request.timeout(timeout);
            }
            let result = bounded(case, request.send()).await;
            seen.push((summary(&result), calls.0.get()));
        }
        assert_eq!(seen[0], seen[1], "POST, {case}: reqwest-retry, then the recipe");
        let retried = seen[0].1 > 1;
        assert!(retried, "POST, {case}: reqwest-retry retries it: {seen:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_requests_timeout_bounds_each_attempt_of_reqwest_retry_and_the_whole_call_here() {
    let (url, _) = raw_server(vec![Raw::Stall]).await;
    let timeout = Duration::from_millis(200);
    // reqwest-retry: every copy of the request carries the whole timeout.
    let (peer, calls, _) = stack(Stack::Peer, bare_reqwest());
    let start = tokio::time::Instant::now();
    bounded("reqwest-retry", peer.get(&url).timeout(timeout).send()).await.unwrap_err();
    assert_eq!((calls.0.get(), start.elapsed()), (4, 4 * timeout));
    // Here, as with reqwest alone: the timeout bounds the call.
    let calls = Calls::default();
    let quick_start = RetryMiddleware::new(RetryConfig::default())
        .client(reqwest::Client::builder())
        .unwrap()
        .with(calls.clone())
        .build();
    let start = tokio::time::Instant::now();
    let error = bounded("the quick start", quick_start.get(&url).timeout(timeout).send())
        .await
        .unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!((calls.0.get(), start.elapsed()), (1, timeout));
}

#[tokio::test]
async fn like_reqwest_retry_waits_as_reqwest_retrys_default_backoff() {
    // Jitter pinned at the top: the ceilings, 1 s then 2 s.
    let (server, url) = scripted(&[503, 503, 200]).await;
    let (client, calls, clock) = stack(Stack::Recipe, bare_reqwest());
    let (result, report) = send(&client, Method::POST, &url).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!((calls.0.get(), hits(&server).await, report.attempts), (3, 3, 3));
    assert_eq!(clock.sleeps(), [Duration::from_secs(1), Duration::from_secs(2)]);
}

#[tokio::test]
async fn like_reqwest_retry_ignores_retry_after() {
    // Asked for 2 s, then 60 s (over the default cap), the recipe waits its
    // backoff: with jitter at the top, the ceilings, 1 s then 2 s.
    let server = MockServer::start().await;
    let busy = |seconds| ResponseTemplate::new(503).insert_header("Retry-After", seconds);
    script(&server, "/r", vec![busy("2"), busy("60"), ResponseTemplate::new(200)]).await;
    let (client, _, clock) = stack(Stack::Recipe, bare_reqwest());
    let (result, _) = send(&client, Method::POST, &format!("{}/r", server.uri())).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(hits(&server).await, 3);
    assert_eq!(clock.sleeps(), [Duration::from_secs(1), Duration::from_secs(2)]);
}

// ---------------------------------------------------------------------------
// Unsafe requests: POST and PATCH without a key.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn default_returns_a_posts_503_after_one_attempt() {
    for method in [Method::POST, Method::PATCH] {
        let (server, url) = scripted(&[503, 503, 200]).await;
        let (client, clock) = client(RetryConfig::default());
        let (result, report) = send(&client, method.clone(), &url).await;
        assert_eq!(result.unwrap().status(), 503, "{method}");
        assert_eq!((report.attempts, report.stop), (1, StopReason::NotSafe), "{method}");
        assert_eq!(hits(&server).await, 1, "{method}");
        assert!(clock.sleeps().is_empty());
    }
}

#[tokio::test]
async fn default_does_not_retry_a_post_after_a_reset_or_a_timeout() {
    for (first, timeout) in [(Raw::Close, None), (Raw::Stall, Some(Duration::from_millis(200)))] {
        let (url, connections) = raw_server(vec![first.clone(), Raw::Reply(OK_CLOSE)]).await;
        let (client, clock) = client(RetryConfig::default());
        let slot = ReportSlot::new();
        let mut request = client.post(&url).body("order=1").with_extension(slot.clone());
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        let error = bounded("POST", request.send()).await.expect_err("no answer to the POST");
        assert_eq!(error.is_timeout(), timeout.is_some(), "{first:?}: {error}");
        let report = slot.get().unwrap();
        assert_eq!((report.attempts, report.stop), (1, StopReason::NotSafe), "{first:?}");
        assert_eq!(connections.get(), 1, "{first:?}");
        assert!(clock.sleeps().is_empty());
    }
}

#[tokio::test]
async fn reqwest_retry_retries_a_post_on_503() {
    let (server, url) = scripted(&[503, 503, 200]).await;
    let client = reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(peer(3)).build();
    let response = bounded("POST", client.post(&url).body("order=1").send()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(hits(&server).await, 3);
}

#[tokio::test]
async fn safe_to_retry_makes_one_post_repeatable() {
    let (server, url) = scripted(&[503, 200]).await;
    let (client, _) = client(RetryConfig::default());
    // guide: safe_to_retry
    let response = client.post(&url).body("order=1").with_extension(SafeToRetry).send().await;
    // guide: end
    assert_eq!(response.unwrap().status(), 200);
    assert_eq!(hits(&server).await, 2);
}

// ---------------------------------------------------------------------------
// Statuses: 500 and 408 are final here.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn default_returns_500_and_408_at_once() {
    for status in [500, 408, 501] {
        let (server, url) = scripted(&[status, 200]).await;
        let (client, _) = client(RetryConfig::default());
        let (result, report) = send(&client, Method::GET, &url).await;
        assert_eq!(result.unwrap().status(), status);
        assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry), "{status}");
        assert_eq!(hits(&server).await, 1, "{status}");
    }
}

#[tokio::test]
async fn statuses_like_reqwest_retry_retry_500_and_408_when_safe() {
    for status in [500, 408, 501, 599] {
        let (server, url) = scripted(&[status, 200]).await;
        let (client, _) = client(statuses_like_reqwest_retry().build().unwrap());
        let (result, _) = send(&client, Method::GET, &url).await;
        assert_eq!(result.unwrap().status(), 200, "{status}");
        assert_eq!(hits(&server).await, 2, "{status}");
        // A POST without a key still is not repeated: that takes a predicate.
        let (server, url) = scripted(&[status, 200]).await;
        let (result, report) = send(&client, Method::POST, &url).await;
        assert_eq!(result.unwrap().status(), status);
        assert_eq!((report.stop, hits(&server).await), (StopReason::NotSafe, 1), "{status}");
    }
}

// ---------------------------------------------------------------------------
// Connect errors: DNS and certificates.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn default_does_not_retry_a_missing_name_or_a_bad_certificate() {
    let resolver = NoSuchHost::default();
    let (client, _) = ours(unresolving_client(&resolver), RetryConfig::default());
    let (result, report) = send(&client, Method::GET, "http://orders.invalid/").await;
    assert!(result.unwrap_err().is_connect());
    assert_eq!(
        (report.attempts, report.stop, resolver.0.get()),
        (1, StopReason::NothingToRetry, 1)
    );

    let (url, connections, _) = tls_server(vec![Handshake::Complete]).await;
    let (client, _) = ours(rustls_client(), RetryConfig::default());
    let (result, report) = send(&client, Method::GET, &url).await;
    assert!(result.unwrap_err().is_connect());
    assert_eq!(
        (report.attempts, report.stop, connections.get()),
        (1, StopReason::NothingToRetry, 1)
    );
}

#[tokio::test]
async fn default_retries_a_temporary_dns_failure_like_a_refused_connection() {
    // For a POST too: no server saw it.
    let resolver = DnsTimeout::default();
    let (client, _) = ours(unresolving_client(&resolver), RetryConfig::default());
    let (result, report) = send(&client, Method::POST, "http://orders.invalid/").await;
    assert!(result.unwrap_err().is_connect());
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
    assert_eq!(resolver.0.get(), 4);
}

#[tokio::test]
async fn every_connect_error_retries_dns_and_certificate_failures() {
    // Retried as often as the policy says: the budget's reserve holds one
    // call's retries.
    let resolver = NoSuchHost::default();
    let (client, _) = ours(unresolving_client(&resolver), every_connect_error().build().unwrap());
    let (result, report) = send(&client, Method::GET, "http://orders.invalid/").await;
    assert!(result.unwrap_err().is_connect());
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
    assert_eq!(resolver.0.get(), 4);

    let (url, connections, _) = tls_server(vec![Handshake::Complete]).await;
    let (client, _) = ours(rustls_client(), every_connect_error().build().unwrap());
    let (result, report) = send(&client, Method::GET, &url).await;
    assert!(result.unwrap_err().is_connect());
    assert_eq!((report.attempts, connections.get()), (4, 4));
}

// ---------------------------------------------------------------------------
// Errors come back as reqwest made them.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn default_returns_errors_unwrapped() {
    let (url, _port) = hops::refusing_port();
    let (client, _) = client(no_budget().build().unwrap());
    let (result, report) = send(&client, Method::GET, &url).await;
    let error = result.unwrap_err();
    assert!(error.is_connect() && !error.is_middleware(), "{error:?}");
    assert!(matches!(error, reqwest_middleware::Error::Reqwest(_)));
    assert!(error.url().is_some());
    // The count reqwest-retry put in `RetryError::WithRetries` is in the report.
    assert_eq!((report.attempts, report.resend_count()), (4, 3));
}

#[tokio::test]
async fn reqwest_retry_wraps_every_error() {
    for retries in [0, 2] {
        let (url, _port) = hops::refusing_port();
        let client =
            reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(peer(retries)).build();
        let error = bounded("GET", client.get(&url).send()).await.unwrap_err();
        assert!(!error.is_connect() && error.is_middleware(), "{error:?}");
        assert!(error.url().is_none());
        let reqwest_middleware::Error::Middleware(wrapped) = &error else { unreachable!() };
        let retry_error = wrapped.downcast_ref::<reqwest_retry::RetryError>().unwrap();
        match (retries, retry_error) {
            (0, reqwest_retry::RetryError::Error(inner)) => assert!(inner.is_connect()),
            (2, reqwest_retry::RetryError::WithRetries { retries: 2, err }) => {
                assert!(err.is_connect())
            }
            other => panic!("{other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// The retry budget.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn default_budget_lets_a_fresh_client_retry_its_failures_three_times() {
    // The reserve holds one call's retries and two more.
    let (server, url) = scripted(&[503, 503, 503, 200]).await;
    let (client, clock) = client(RetryConfig::default());
    let (result, report) = send(&client, Method::GET, &url).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!((report.attempts, report.stop), (4, StopReason::NothingToRetry));
    assert_eq!(hits(&server).await, 4);
    assert_eq!(clock.sleeps(), [500 * MS, 1000 * MS, 2000 * MS]);
}

#[tokio::test]
async fn no_budget_retries_a_fresh_clients_failures_three_times() {
    let (server, url) = scripted(&[503, 503, 503, 200]).await;
    let (client, clock) = client(no_budget().build().unwrap());
    let (result, report) = send(&client, Method::GET, &url).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!((report.attempts, hits(&server).await), (4, 4));
    // The default backoff, jitter at the top: 500 ms doubling.
    assert_eq!(clock.sleeps(), [500 * MS, 1000 * MS, 2000 * MS]);
}

// ---------------------------------------------------------------------------
// Retry-After.
// ---------------------------------------------------------------------------

fn retry_after(seconds: &str) -> Vec<ResponseTemplate> {
    vec![
        ResponseTemplate::new(503).insert_header("Retry-After", seconds),
        ResponseTemplate::new(200),
    ]
}

#[tokio::test]
async fn default_honours_retry_after_as_a_floor_with_spread() {
    let server = MockServer::start().await;
    script(&server, "/r", retry_after("2")).await;
    let (client, clock) = client(RetryConfig::default());
    let (result, _) = send(&client, Method::GET, &format!("{}/r", server.uri())).await;
    assert_eq!(result.unwrap().status(), 200);
    // 2 s, spread by up to the first retry's ceiling (500 ms): the top.
    assert_eq!(clock.sleeps(), [2500 * MS]);
}

#[tokio::test]
async fn default_returns_a_retry_after_over_the_cap_at_once() {
    let server = MockServer::start().await;
    script(&server, "/r", retry_after("60")).await;
    let (client, clock) = client(RetryConfig::default());
    let (result, report) = send(&client, Method::GET, &format!("{}/r", server.uri())).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(report.stop, StopReason::RetryAfterTooLong(Duration::from_secs(60)));
    assert_eq!(hits(&server).await, 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn reqwest_retry_ignores_retry_after() {
    // Asked for 30 s, reqwest-retry (waits of zero) comes back at once: the
    // bound would end the test long before 30 s.
    let server = MockServer::start().await;
    script(&server, "/r", retry_after("30")).await;
    let client = reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(peer(3)).build();
    let url = format!("{}/r", server.uri());
    let response = bounded("GET", client.get(&url).send()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(hits(&server).await, 2);
}

// ---------------------------------------------------------------------------
// Redirects.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn default_does_not_retry_a_posts_429_when_redirects_may_be_followed() {
    let (server, url) = scripted(&[429, 200]).await;
    let (client, _) = Kind::Following.client(RetryConfig::builder());
    let (result, report) = send(&client, Method::POST, &url).await;
    assert_eq!(result.unwrap().status(), 429);
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotSafe));
    assert_eq!(hits(&server).await, 1);
}

#[tokio::test]
async fn the_quick_start_retries_a_posts_429_and_refused_connection() {
    let (server, url) = scripted(&[429, 200]).await;
    let (client, _) = ours(reqwest::Client::builder(), RetryConfig::default());
    let (result, _) = send(&client, Method::POST, &url).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(hits(&server).await, 2);

    // Refused: retried as often as the policy says.
    let (url, _port) = hops::refusing_port();
    let (client, _) = ours(reqwest::Client::builder(), RetryConfig::default());
    let (result, report) = send(&client, Method::POST, &url).await;
    assert!(result.unwrap_err().is_connect());
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
}

#[tokio::test]
async fn without_redirects_hands_each_redirect_back_and_keeps_the_any_method_rules() {
    let server = MockServer::start().await;
    let see_other = ResponseTemplate::new(303).insert_header("Location", "/orders/7");
    script(&server, "/orders", vec![ResponseTemplate::new(429), see_other]).await;
    let url = format!("{}/orders", server.uri());
    let (client, _) =
        ours_with(reqwest::Client::builder(), without_redirects(RetryConfig::default()));
    let (result, report) = send(&client, Method::POST, &url).await;
    assert_eq!(result.unwrap().status(), 303, "the redirect is the caller's");
    assert_eq!((report.attempts, report.redirects), (2, 0));
    assert_eq!(hits(&server).await, 2, "the 429 retried, the 303 not followed");
}

// ---------------------------------------------------------------------------
// Bodies that cannot be copied, and errors from other middlewares.
// ---------------------------------------------------------------------------

fn streaming_body() -> reqwest::Body {
    let chunks = [Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"order=1"))];
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

#[tokio::test]
async fn a_streaming_body_is_sent_once_here_and_refused_by_reqwest_retry() {
    let (server, url) = scripted(&[503, 200]).await;
    let (client, _) = client(RetryConfig::default());
    let slot = ReportSlot::new();
    let request = client.put(&url).body(streaming_body()).with_extension(slot.clone());
    let response = bounded("PUT", request.send()).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(slot.get().unwrap().stop, StopReason::NotReplayable);
    assert_eq!(hits(&server).await, 1);

    let (server, url) = scripted(&[503, 200]).await;
    let client = reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(peer(3)).build();
    let error = bounded("PUT", client.put(&url).body(streaming_body()).send()).await.unwrap_err();
    assert!(error.to_string().contains("not cloneable"), "{error}");
    assert_eq!(hits(&server).await, 0);
}

#[tokio::test]
async fn an_upload_is_retried_only_when_buffered_and_safe_to_repeat() {
    use StopReason::{NotReplayable, NotSafe, NothingToRetry};
    // (method, key, buffering, status): what reaches the server, and why it
    // stopped. A 503 needs a request safe to repeat; a 429 does not.
    let cases = [
        (Method::POST, false, false, 503, 1, NotSafe),
        (Method::POST, false, true, 503, 1, NotSafe),
        (Method::POST, true, false, 503, 1, NotReplayable),
        (Method::POST, true, true, 503, 2, NothingToRetry),
        (Method::PUT, false, false, 503, 1, NotReplayable),
        (Method::PUT, false, true, 503, 2, NothingToRetry),
        (Method::POST, false, false, 429, 1, NotReplayable),
        (Method::POST, false, true, 429, 2, NothingToRetry),
    ];
    for (method, key, buffering, status, reached, stop) in cases {
        let (server, url) = scripted(&[status, 201]).await;
        let mut config = RetryConfig::builder();
        if buffering {
            config = config.with_body_buffering(BodyBuffering::default().with_request(64 * 1024));
        }
        let (client, _) = ours(reqwest::Client::builder(), config.build().unwrap());
        let slot = ReportSlot::new();
        let mut request = client.request(method.clone(), &url).body(streaming_body());
        if key {
            request = request.header("Idempotency-Key", "upload-1");
        }
        let result = bounded("upload", request.with_extension(slot.clone()).send()).await;
        let case = format!("{method} {status}, key {key}, buffering {buffering}");
        assert_eq!(hits(&server).await, reached, "{case}");
        assert_eq!(slot.get().unwrap().stop, stop, "{case}");
        let last = if reached == 2 { "201".to_owned() } else { status.to_string() };
        assert_eq!(summary(&result), last, "{case}");
    }
}

#[tokio::test]
async fn an_error_another_middleware_wrapped_is_still_read_here() {
    // A GET whose connection closes before the answer, then a 200.
    let (url, connections) = raw_server(vec![Raw::Close, Raw::Reply(OK_CLOSE)]).await;
    let middleware = RetryMiddleware::default().with_clock(ManualClock::new());
    let client =
        reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(middleware).with(Wrapping);
    let response = bounded("GET", client.build().get(&url).send()).await.unwrap();
    assert_eq!((response.status().as_u16(), connections.get()), (200, 2));

    let (url, connections) = raw_server(vec![Raw::Close, Raw::Reply(OK_CLOSE)]).await;
    let client =
        reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(peer(3)).with(Wrapping);
    let error = bounded("GET", client.build().get(&url).send()).await.unwrap_err();
    assert!(error.is_middleware(), "{error:?}");
    assert_eq!(connections.get(), 1, "reqwest-retry never retries a middleware's error");

    // Nor does the recipe.
    let (url, connections) = raw_server(vec![Raw::Close, Raw::Reply(OK_CLOSE)]).await;
    let middleware = RetryMiddleware::new(like_reqwest_retry().build().unwrap());
    let middleware = middleware.with_clock(ManualClock::new());
    let client = every_request_safe(ClientBuilder::new(bare_reqwest())).with(middleware);
    let client = client.with(Wrapping);
    let error = bounded("GET", client.build().get(&url).send()).await.unwrap_err();
    assert!(error.is_middleware(), "{error:?}");
    assert_eq!(connections.get(), 1);
}

// ---------------------------------------------------------------------------
// Custom classification.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn retry_201_retries_a_201_and_no_other_response() {
    let (server, url) = scripted(&[201, 200]).await;
    let (client, _) = client(retry_201().build().unwrap());
    let (result, _) = send(&client, Method::GET, &url).await;
    assert_eq!((result.unwrap().status().as_u16(), hits(&server).await), (200, 2));

    let (server, url) = scripted(&[503, 200]).await;
    let (client, _) = support::client(retry_201().build().unwrap());
    let (result, report) = send(&client, Method::GET, &url).await;
    assert_eq!((result.unwrap().status().as_u16(), hits(&server).await), (503, 1));
    assert_eq!(report.stop, StopReason::NothingToRetry);
}

/// The reqwest-retry strategy [`port_409_and_501_final`] ports: 409 and 501
/// final, everything else as reqwest-retry's defaults say.
struct Not409Or501;

impl reqwest_retry::RetryableStrategy for Not409Or501 {
    fn handle(
        &self,
        result: &reqwest_middleware::Result<Response>,
    ) -> Option<reqwest_retry::Retryable> {
        match result {
            Ok(response) if matches!(response.status().as_u16(), 409 | 501) => {
                Some(reqwest_retry::Retryable::Fatal)
            }
            Ok(response) => reqwest_retry::default_on_request_success(response),
            Err(error) => reqwest_retry::default_on_request_failure(error),
        }
    }
}

#[tokio::test]
async fn a_ported_strategy_that_delegates_needs_reqwest_retrys_statuses() {
    // reqwest-retry: the defaults it delegates to retry a 500.
    let (server, url) = scripted(&[500]).await;
    let policy = ExponentialBackoff::builder()
        .retry_bounds(Duration::ZERO, Duration::ZERO)
        .build_with_max_retries(3);
    let peer = RetryTransientMiddleware::new_with_policy_and_strategy(policy, Not409Or501);
    let client = ClientBuilder::new(bare_reqwest()).with(peer).build();
    let response = bounded("GET", client.get(&url).send()).await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (500, 4));

    // Ported word for word, `None` hands the 500 to this crate's rules,
    // where it is final.
    let word_for_word = RetryConfig::builder().with_predicate(|attempt| match attempt.outcome {
        Outcome::Response(r) if matches!(r.status().as_u16(), 409 | 501) => {
            Some(Retryability::Never)
        }
        _ => None,
    });
    let (server, url) = scripted(&[500]).await;
    let (client, _) = ours(reqwest::Client::builder(), word_for_word.build().unwrap());
    let (result, report) = send(&client, Method::GET, &url).await;
    assert_eq!((summary(&result), hits(&server).await), ("500".to_owned(), 1));
    assert_eq!(report.stop, StopReason::NothingToRetry);

    // With reqwest-retry's statuses configured: 4 attempts again, and 409
    // and 501 still final.
    for (status, attempts) in [(500, 4), (503, 4), (408, 4), (409, 1), (501, 1)] {
        let (server, url) = scripted(&[status]).await;
        let (client, _) =
            ours(reqwest::Client::builder(), port_409_and_501_final().build().unwrap());
        let (result, _) = send(&client, Method::GET, &url).await;
        assert_eq!(summary(&result), status.to_string());
        assert_eq!(hits(&server).await, attempts, "{status}");
    }
}

#[tokio::test]
async fn when_safe_keeps_a_posts_500_final_and_any_method_repeats_it() {
    // The rule of thumb: `AnyMethod` only for an answer given before the
    // server acted. A 500 may come after the work was done.
    for (scope, hits_wanted, stop) in [
        (Retryability::WhenSafe, 1, StopReason::NotSafe),
        (Retryability::AnyMethod, 2, StopReason::NothingToRetry),
    ] {
        let config = RetryConfig::builder().with_predicate(move |attempt| match attempt.outcome {
            Outcome::Response(r) if r.status() == 500 => Some(scope),
            _ => None,
        });
        let (server, url) = scripted(&[500, 201]).await;
        let (client, _) = ours(reqwest::Client::builder(), config.build().unwrap());
        let (_, report) = send(&client, Method::POST, &url).await;
        assert_eq!((hits(&server).await, report.stop), (hits_wanted, stop), "{scope:?}");
    }
}

// ---------------------------------------------------------------------------
// A predicate's waits, and an API's rate limits (GitHub's).
// ---------------------------------------------------------------------------

/// A wall time for the manual clock, and the same as a `Date` header.
fn wall() -> (SystemTime, String) {
    let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    (at, httpdate::fmt_http_date(at))
}

/// GitHub's answer when the primary limit is spent and lifts `in_secs`
/// after [`wall`].
fn primary_limit(in_secs: u64) -> ResponseTemplate {
    let (at, date) = wall();
    let reset = at.duration_since(UNIX_EPOCH).unwrap().as_secs() + in_secs;
    ResponseTemplate::new(403)
        .insert_header("date", date.as_str())
        .insert_header("x-ratelimit-remaining", "0")
        .insert_header("x-ratelimit-reset", reset.to_string().as_str())
}

/// GitHub's answer at a secondary limit.
fn secondary_limit(status: u16, retry_after: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).insert_header("retry-after", retry_after)
}

/// The quick start's client with `config`, on a manual clock at [`wall`].
fn github(config: RetryConfigBuilder) -> (ClientWithMiddleware, ManualClock) {
    let clock = ManualClock::new().with_wall_time(wall().0);
    let middleware = RetryMiddleware::new(config.build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP);
    (middleware.client(reqwest::Client::builder()).unwrap().build(), clock)
}

#[tokio::test]
async fn github_rate_limits_wait_for_the_reset_within_the_cap() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![primary_limit(10), ResponseTemplate::new(201)]).await;
    let (client, clock) = github(github_rate_limits());
    let (result, report) = send(&client, Method::POST, &format!("{}/r", server.uri())).await;
    assert_eq!((summary(&result), hits(&server).await), ("201".to_owned(), 2));
    // The reset, measured against the response's `Date`, spread like a
    // `Retry-After` by up to the first retry's ceiling (the top here).
    assert_eq!(clock.sleeps(), [Duration::from_millis(10_500)]);
    assert_eq!(report.stop, StopReason::NothingToRetry);
}

#[tokio::test]
async fn github_rate_limits_return_a_reset_beyond_the_cap() {
    for (cap, reset) in [(None, 40), (Some(5), 8)] {
        let server = MockServer::start().await;
        script(&server, "/r", vec![primary_limit(reset), ResponseTemplate::new(201)]).await;
        let mut config = github_rate_limits();
        if let Some(cap) = cap {
            config =
                config.with_retry_after(RetryAfter::default().with_cap(Duration::from_secs(cap)));
        }
        let (client, clock) = github(config);
        let (result, report) = send(&client, Method::POST, &format!("{}/r", server.uri())).await;
        assert_eq!((summary(&result), hits(&server).await), ("403".to_owned(), 1));
        let asked = Duration::from_secs(reset);
        assert_eq!(report.stop, StopReason::RetryAfterTooLong(asked), "cap {cap:?}");
        assert!(clock.sleeps().is_empty());
    }
}

#[tokio::test]
async fn github_rate_limits_wait_a_secondary_limits_retry_after() {
    for status in [403, 429] {
        let server = MockServer::start().await;
        script(&server, "/r", vec![secondary_limit(status, "3"), ResponseTemplate::new(201)]).await;
        let (client, clock) = github(github_rate_limits());
        let (result, _) = send(&client, Method::POST, &format!("{}/r", server.uri())).await;
        assert_eq!((summary(&result), hits(&server).await), ("201".to_owned(), 2), "{status}");
        assert_eq!(clock.sleeps(), [Duration::from_millis(3_500)], "{status}");
    }
    // Any other 403 is final.
    let (server, url) = scripted(&[403, 201]).await;
    let (client, _) = github(github_rate_limits());
    let (result, _) = send(&client, Method::POST, &url).await;
    assert_eq!((summary(&result), hits(&server).await), ("403".to_owned(), 1));
}

#[tokio::test]
async fn github_rate_limits_return_a_bare_429_and_ignore_a_reset_no_clock_holds() {
    // A 429 with neither header asks for at least a minute: over the cap.
    let (server, url) = scripted(&[429, 201]).await;
    let (client, _) = github(github_rate_limits());
    let (result, report) = send(&client, Method::POST, &url).await;
    assert_eq!((summary(&result), hits(&server).await), ("429".to_owned(), 1));
    assert_eq!(report.stop, StopReason::RetryAfterTooLong(Duration::from_secs(60)));

    // A reset past what a `SystemTime` can hold is no reset: the 403 is final.
    let server = MockServer::start().await;
    let absurd = ResponseTemplate::new(403)
        .insert_header("x-ratelimit-remaining", "0")
        .insert_header("x-ratelimit-reset", u64::MAX.to_string().as_str());
    script(&server, "/r", vec![absurd, ResponseTemplate::new(201)]).await;
    let (client, _) = github(github_rate_limits());
    let (result, report) = send(&client, Method::POST, &format!("{}/r", server.uri())).await;
    assert_eq!((summary(&result), hits(&server).await), ("403".to_owned(), 1));
    assert_eq!(report.stop, StopReason::NothingToRetry);
}

#[tokio::test]
async fn a_wait_the_server_asked_for_replaces_retry_after_and_is_measured_against_date() {
    let asked = |wait: Option<Duration>| {
        RetryConfig::builder().with_predicate(move |attempt| match attempt.outcome {
            Outcome::Response(r) if r.status() == 429 => {
                let verdict = Verdict::new(Retryability::AnyMethod);
                Some(match wait {
                    Some(wait) => verdict.server_asked(wait),
                    // 5 s after the wall time: 105 s after the response's Date.
                    None => verdict.server_asked_until(wall().0 + Duration::from_secs(5)),
                })
            }
            _ => None,
        })
    };
    let server = MockServer::start().await;
    let five = ResponseTemplate::new(429).insert_header("retry-after", "5");
    script(&server, "/r", vec![five, ResponseTemplate::new(200)]).await;
    let (client, clock) = github(asked(Some(Duration::from_secs(2))));
    let (result, _) = send(&client, Method::GET, &format!("{}/r", server.uri())).await;
    assert_eq!(summary(&result), "200");
    assert_eq!(clock.sleeps(), [Duration::from_millis(2_500)], "2 s, not the header's 5");

    let server = MockServer::start().await;
    let behind = httpdate::fmt_http_date(wall().0 - Duration::from_secs(100));
    let dated = ResponseTemplate::new(429).insert_header("date", behind.as_str());
    script(&server, "/r", vec![dated, ResponseTemplate::new(200)]).await;
    let (client, _) = github(asked(None));
    let (_, report) = send(&client, Method::GET, &format!("{}/r", server.uri())).await;
    assert_eq!(report.stop, StopReason::RetryAfterTooLong(Duration::from_secs(105)));
}

#[tokio::test]
async fn a_wait_the_server_asked_for_is_priced_as_retry_after_is() {
    // An empty reserve: only a retry free of the budget happens.
    let empty = || reqwest_safe_retry::RetryBudget::default().with_ratio(0.0).with_reserve(0);
    let predicate = |scope: Retryability, pause: bool| {
        RetryConfig::builder()
            .with_budget(empty())
            .with_retry_after(RetryAfter::default().with_pause(pause))
            .with_predicate(move |attempt| {
                Some(Verdict::new(scope).server_asked(Duration::from_secs(2))).filter(
                    |_| !matches!(attempt.outcome, Outcome::Response(r) if r.status() == 200),
                )
            })
    };
    // (status, scope, pause, retried): with the pause on (the default),
    // the host waits out the server's word, one request a pause, and the
    // budget does not pay. With it off, a 429 is a refusal whatever the
    // scope; so is what the predicate answers `AnyMethod`; a `WhenSafe`
    // 503 is paid for.
    for (status, scope, pause, retried) in [
        (503, Retryability::WhenSafe, true, true),
        (429, Retryability::WhenSafe, false, true),
        (429, Retryability::AnyMethod, false, true),
        (503, Retryability::AnyMethod, false, true),
        (503, Retryability::WhenSafe, false, false),
    ] {
        let (_server, url) = scripted(&[status, 200]).await;
        let (client, _) = github(predicate(scope, pause));
        let (result, report) = send(&client, Method::GET, &url).await;
        let case = format!("{status}, {scope:?}, pause {pause}");
        assert_eq!(summary(&result) == "200", retried, "{case}: {:?}", report.stop);
        if !retried {
            assert_eq!(report.stop, StopReason::BudgetExhausted, "{case}");
        }
    }
    // After an error there is no server's word: paid for.
    let (url, _port) = hops::refusing_port();
    let (client, _) = github(predicate(Retryability::AnyMethod, true));
    let (_, report) = send(&client, Method::POST, &url).await;
    assert_eq!((report.attempts, report.stop), (1, StopReason::BudgetExhausted));
}

#[tokio::test]
async fn a_wait_the_server_asked_for_is_capped_as_retry_after_is() {
    let asked_for = |seconds| {
        RetryConfig::builder().with_predicate(move |attempt| match attempt.outcome {
            Outcome::Response(r) if r.status() == 403 => Some(
                Verdict::new(Retryability::AnyMethod).server_asked(Duration::from_secs(seconds)),
            ),
            _ => None,
        })
    };
    // Over the cap, waiting the cap when told to: 30 s, spread.
    let (server, url) = scripted(&[403, 200]).await;
    let config = asked_for(3600)
        .with_retry_after(RetryAfter::default().with_over_cap(RetryAfterOverCap::WaitTheCap));
    let (client, clock) = github(config);
    let (result, _) = send(&client, Method::GET, &url).await;
    assert_eq!((summary(&result), hits(&server).await), ("200".to_owned(), 2));
    assert_eq!(clock.sleeps(), [Duration::from_millis(30_500)]);

    // Not spread when spreading is off.
    let (server, url) = scripted(&[403, 200]).await;
    let (client, clock) =
        github(asked_for(2).with_retry_after(RetryAfter::default().with_spread(false)));
    let (result, _) = send(&client, Method::GET, &url).await;
    assert_eq!((summary(&result), hits(&server).await), ("200".to_owned(), 2));
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
}

#[tokio::test]
async fn a_wait_the_predicate_chose_is_exact_uncapped_and_paid_for() {
    let chosen = |seconds| {
        RetryConfig::builder().with_predicate(move |attempt| match attempt.outcome {
            Outcome::Response(r) if r.status() == 403 => {
                Some(Verdict::new(Retryability::AnyMethod).after(Duration::from_secs(seconds)))
            }
            _ => None,
        })
    };
    // Longer than the 30 s cap, not spread.
    let (server, url) = scripted(&[403, 200]).await;
    let (client, clock) = github(chosen(40));
    let (result, _) = send(&client, Method::GET, &url).await;
    assert_eq!((summary(&result), hits(&server).await), ("200".to_owned(), 2));
    assert_eq!(clock.sleeps(), [Duration::from_secs(40)]);

    // Paid for: with an empty reserve, not retried at all.
    let empty = reqwest_safe_retry::RetryBudget::default().with_reserve(0);
    let (server, url) = scripted(&[403, 200]).await;
    let (client, _) = github(chosen(1).with_budget(empty));
    let (_, report) = send(&client, Method::GET, &url).await;
    assert_eq!((hits(&server).await, report.stop), (1, StopReason::BudgetExhausted));
}

/// A clock whose waits are recorded and all end when it is opened, so that
/// every caller has decided before any retry is sent.
#[derive(Debug, Clone)]
struct Gate {
    clock: ManualClock,
    open: tokio::sync::watch::Sender<bool>,
    waits: std::sync::Arc<std::sync::Mutex<Vec<Duration>>>,
}

impl Gate {
    fn new() -> Self {
        let waits = std::sync::Arc::default();
        Self { clock: ManualClock::new(), open: tokio::sync::watch::Sender::new(false), waits }
    }

    fn waits(&self) -> Vec<Duration> {
        self.waits.lock().unwrap().clone()
    }
}

impl reqwest_safe_retry::clock::Clock for Gate {
    fn now(&self) -> std::time::Instant {
        self.clock.now()
    }

    fn sleep(&self, wait: Duration) -> reqwest_safe_retry::clock::Sleep {
        self.waits.lock().unwrap().push(wait);
        let mut open = self.open.subscribe();
        Box::pin(async move {
            let _ = open.wait_for(|open| *open).await;
        })
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> reqwest_safe_retry::clock::Sleep {
        self.clock.sleep_until(deadline)
    }
}

#[tokio::test]
async fn fifty_callers_at_a_rate_limit_all_wait_it_out_spread() {
    // 50 concurrent POSTs each meet one secondary limit asking for 2 s. The
    // first retry after a refusal whose time the server set is free of the
    // budget, as after a 429; a wait the predicate chose is paid for, and a
    // fresh reserve covers 5 retries.
    for (server_asked, retried) in [(true, 50), (false, 5)] {
        let server = MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::path("/r"))
            .respond_with(secondary_limit(403, "2"))
            .up_to_n_times(50)
            .mount(&server)
            .await;
        script_statuses(&server, "/r", &[201]).await;
        let config = if server_asked {
            github_rate_limits()
        } else {
            RetryConfig::builder().with_predicate(|attempt| match attempt.outcome {
                Outcome::Response(r) if r.status() == 403 => {
                    Some(Verdict::new(Retryability::AnyMethod).after(Duration::from_secs(2)))
                }
                _ => None,
            })
        };
        let gate = Gate::new();
        let middleware = RetryMiddleware::new(config.build().unwrap())
            .with_clock(gate.clone())
            .with_jitter_source(reqwest_safe_retry::jitter::SeededJitter::new(7));
        let client = middleware.client(reqwest::Client::builder()).unwrap().build();
        let (url, done) = (format!("{}/r", server.uri()), Counter::default());
        let calls = (0..50).map(|_| async {
            let outcome = send(&client, Method::POST, &url).await;
            done.bump();
            outcome
        });
        let open = async {
            while gate.waits().len() + done.get() < 50 {
                tokio::task::yield_now().await;
            }
            gate.open.send_replace(true);
        };
        let both = async { tokio::join!(futures_util::future::join_all(calls), open) };
        let (outcomes, ()) = bounded("50 POSTs", both).await;
        let created = outcomes.iter().filter(|(result, _)| summary(result) == "201").count();
        assert_eq!(created, retried, "server asked: {server_asked}");
        let mut waits = gate.waits();
        if server_asked {
            // Every call decided to wait before the gate opened: its retry's
            // wait, spread over 2 s to 2.5 s, not all in one instant. (The
            // server's wait also paused the host; as the gate's time stands
            // still, each call then finds the pause on, waits once more,
            // and goes when that wait moves no time.)
            assert!(waits.len() >= retried);
            waits.truncate(retried);
            assert!(waits.iter().all(|w| (2000 * MS..=2500 * MS).contains(w)), "{waits:?}");
            waits.sort();
            waits.dedup();
            assert!(waits.len() > 40, "{} distinct waits of 50", waits.len());
        } else {
            assert_eq!(waits.len(), retried);
            let refused = outcomes.iter().filter(|(_, r)| r.stop == StopReason::BudgetExhausted);
            assert_eq!(refused.count(), 45);
        }
    }
}

// ---------------------------------------------------------------------------
// Counting, and what a key promises.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_followed_redirect_is_a_resend_but_not_a_retry() {
    let server = MockServer::start().await;
    let found = ResponseTemplate::new(302).insert_header("Location", "/to");
    script(&server, "/from", vec![found]).await;
    script_statuses(&server, "/to", &[200]).await;
    let url = format!("{}/from", server.uri());

    // Here: one attempt, no retry, one resend; a middleware inside the
    // retry layer sees the attempt once, and the last hop's answer.
    let calls = Calls::default();
    let middleware = RetryMiddleware::default().with_clock(ManualClock::new());
    let client = middleware.client(reqwest::Client::builder()).unwrap().with(calls.clone()).build();
    let (result, report) = send(&client, Method::GET, &url).await;
    assert_eq!(summary(&result), "200");
    assert_eq!((report.attempts, report.redirects, report.resend_count()), (1, 1, 1));
    assert_eq!((calls.0.get(), hits(&server).await), (1, 2));

    // reqwest-retry: the same requests, and the same single call inside.
    let calls = Calls::default();
    let client = ClientBuilder::new(reqwest::Client::new()).with(peer(3)).with(calls.clone());
    let response = bounded("GET", client.build().get(&url).send()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!((calls.0.get(), hits(&server).await), (1, 4));
}

#[tokio::test]
async fn a_key_is_retried_on_whether_or_not_the_server_deduplicates() {
    // A server that ignores the key: the POST's 503 is retried on the
    // strength of the key, and the server does the work twice. Only the
    // server can make a key mean something.
    let (server, url) = scripted(&[503, 201]).await;
    let (client, _) = ours(reqwest::Client::builder(), RetryConfig::default());
    let request = client.post(&url).header("Idempotency-Key", "issue-1").body("title=bug");
    let response = bounded("POST", request.send()).await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (201, 2));
}

// ---------------------------------------------------------------------------
// Logging.
// ---------------------------------------------------------------------------

#[cfg(feature = "tracing")]
mod logging {
    use super::*;

    /// What `client` logs at `level` and above for a GET answered 503, 200.
    async fn logged(level: tracing::Level, client: ClientWithMiddleware) -> String {
        let (_server, url) = scripted(&[503, 200]).await;
        let captured = capture_logs(level);
        let response = bounded("GET", client.get(&url).send()).await.unwrap();
        assert_eq!(response.status(), 200);
        captured.text()
    }

    fn wrap_ours(middleware: RetryMiddleware) -> ClientWithMiddleware {
        let middleware = middleware.with_clock(ManualClock::new());
        reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(middleware).build()
    }

    #[tokio::test]
    async fn reqwest_retry_logs_each_retry_at_warn() {
        let client = reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(peer(3)).build();
        let log = logged(tracing::Level::WARN, client).await;
        let line = log.lines().find(|l| l.contains("Retry attempt #0")).expect(&log);
        assert!(line.contains("WARN"), "{line}");
    }

    #[tokio::test]
    async fn default_logs_retries_at_debug_not_warn() {
        let log = logged(tracing::Level::WARN, wrap_ours(RetryMiddleware::default())).await;
        assert_eq!(log, "", "nothing at warn");
        let log = logged(tracing::Level::DEBUG, wrap_ours(RetryMiddleware::default())).await;
        let line = log.lines().find(|l| l.contains("retrying request")).expect(&log);
        assert!(line.contains("DEBUG"), "{line}");
    }

    #[tokio::test]
    async fn with_log_level_raises_retries_and_give_ups_to_warn_not_a_recovery() {
        // guide: with_log_level
        let middleware = RetryMiddleware::default().with_log_level(tracing::Level::WARN);
        // guide: end
        let log = logged(tracing::Level::WARN, wrap_ours(middleware.clone())).await;
        let line = log.lines().find(|l| l.contains("retrying request")).expect(&log);
        assert!(line.contains("WARN"), "{line}");
        assert!(!log.contains("not retrying"), "a recovered call warns of nothing: {log}");
        // The recovery is logged at debug.
        let log = logged(tracing::Level::DEBUG, wrap_ours(middleware.clone())).await;
        let line = log.lines().find(|l| l.contains("nothing to retry")).expect(&log);
        assert!(line.contains("DEBUG"), "{line}");

        // Giving up is a warning.
        let (_server, url) = scripted(&[503]).await;
        let captured = capture_logs(tracing::Level::WARN);
        let response = bounded("GET", wrap_ours(middleware).get(&url).send()).await.unwrap();
        assert_eq!(response.status(), 503);
        let log = captured.text();
        let line = log.lines().find(|l| l.contains("not retrying request")).expect(&log);
        assert!(line.contains("WARN") && line.contains("retries exhausted"), "{line}");

        // At trace, a recovery is logged at trace too.
        let traced = RetryMiddleware::default().with_log_level(tracing::Level::TRACE);
        let log = logged(tracing::Level::TRACE, wrap_ours(traced)).await;
        let line = log.lines().find(|l| l.contains("nothing to retry")).expect(&log);
        assert!(line.contains("TRACE"), "{line}");
    }

    #[tokio::test]
    async fn events_are_under_this_crates_target_not_reqwest_retrys() {
        use tracing_subscriber::filter::Targets;

        /// The target of the first line of `log` that contains `text`.
        fn target<'a>(log: &'a str, text: &str) -> &'a str {
            let line = log.lines().find(|l| l.contains(text)).expect(log);
            line.split_whitespace().find_map(|word| word.strip_suffix(':')).expect(line)
        }
        let theirs = reqwest_middleware::ClientBuilder::new(bare_reqwest()).with(peer(3)).build();
        let log = logged(tracing::Level::WARN, theirs).await;
        assert_eq!(target(&log, "Retry attempt #0"), "reqwest_retry::middleware");
        let ours = wrap_ours(RetryMiddleware::default().with_log_level(tracing::Level::WARN));
        let log = logged(tracing::Level::WARN, ours).await;
        let target = target(&log, "retrying request");
        assert_eq!(target, "reqwest_safe_retry::events");
        let filter = |directives: &str| directives.parse::<Targets>().unwrap();
        assert!(!filter("reqwest_retry=warn").would_enable(target, &tracing::Level::WARN));
        assert!(filter("reqwest_safe_retry=warn").would_enable(target, &tracing::Level::WARN));
    }

    #[tokio::test]
    async fn warn_on_retry_logs_each_retry_at_warn() {
        let middleware = warn_on_retry(RetryMiddleware::default());
        let log = logged(tracing::Level::WARN, wrap_ours(middleware)).await;
        let line = log.lines().find(|l| l.contains("retrying after")).expect(&log);
        assert!(line.contains("WARN") && line.contains("attempt=1"), "{line}");
        assert!(line.contains("reason=status 503"), "{line}");
    }
}

// ---------------------------------------------------------------------------
// reqwest's own retry.
// ---------------------------------------------------------------------------

/// A classifier for reqwest's scoped policies: retry a 503, nothing else.
fn reqwest_retries_503(policy: reqwest::retry::Builder) -> reqwest::retry::Builder {
    policy.classify_fn(|req_rep| match req_rep.status() {
        Some(http::StatusCode::SERVICE_UNAVAILABLE) => req_rep.retryable(),
        _ => req_rep.success(),
    })
}

#[tokio::test]
async fn reqwest_for_host_retries_its_host_at_once_twice_at_most() {
    let (server, url) = scripted(&[503, 503, 503, 200]).await;
    let inner = reqwest::Client::builder()
        .retry(reqwest_retries_503(reqwest::retry::for_host("127.0.0.1")))
        .build()
        .unwrap();
    let response = bounded("GET", inner.get(&url).send()).await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 3));
}

#[tokio::test]
async fn reqwest_for_host_still_retries_another_host_once() {
    // reqwest checks the scope only before a second retry: a request to
    // another host is retried once by the classifier anyway.
    let (server, url) = scripted(&[503, 503, 503, 200]).await;
    let inner = reqwest::Client::builder()
        .retry(reqwest_retries_503(reqwest::retry::for_host("api.example.com")))
        .build()
        .unwrap();
    let response = bounded("GET", inner.get(&url).send()).await.unwrap();
    assert_eq!((response.status().as_u16(), hits(&server).await), (503, 2));
}

#[tokio::test]
async fn only_for_host_retries_that_host_and_no_other() {
    let (server, url) = scripted(&[503, 200]).await;
    let (client, clock) = client(only_for_host("127.0.0.1").build().unwrap());
    let (result, _) = send(&client, Method::GET, &url).await;
    assert_eq!((result.unwrap().status().as_u16(), hits(&server).await), (200, 2));
    assert_eq!(clock.sleeps(), [500 * MS]);

    let (server, url) = scripted(&[503, 200]).await;
    let (client, _) = support::client(only_for_host("api.example.com").build().unwrap());
    let (result, report) = send(&client, Method::GET, &url).await;
    assert_eq!((result.unwrap().status().as_u16(), hits(&server).await), (503, 1));
    assert_eq!(report.stop, StopReason::NothingToRetry);
}

#[cfg(feature = "http2")]
mod http2 {
    use crate::support::h2_server::{Answer, h2_client, h2_server};

    use super::*;

    const REFUSE: Answer = Answer::Reset(h2::Reason::REFUSED_STREAM);

    #[tokio::test]
    async fn the_quick_start_turns_reqwests_retry_off_so_each_stream_is_an_attempt() {
        // Two refusals and an answer: three attempts, three streams, each
        // retry after its backoff.
        let (url, streams, _) = h2_server(vec![REFUSE, REFUSE, Answer::Ok]).await;
        let (client, clock) = ours(h2_client(), RetryConfig::default());
        let (result, report) = send(&client, Method::POST, &url).await;
        assert_eq!(result.unwrap().status(), 200);
        assert_eq!((report.attempts, streams.get()), (3, 3));
        assert_eq!(clock.sleeps(), [500 * MS, 1000 * MS]);
    }

    #[tokio::test]
    async fn a_refusal_storm_costs_the_quick_start_four_streams_a_call() {
        // Every stream refused: `max_retries + 1` streams, not three times
        // as many (reqwest's own retry would resend each attempt twice).
        let (url, streams, _) = h2_server(vec![REFUSE]).await;
        let (client, _) = ours(h2_client(), RetryConfig::default());
        let (result, report) = send(&client, Method::GET, &url).await;
        assert!(result.is_err());
        assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
        assert_eq!(streams.get(), 4);
    }

    #[tokio::test]
    async fn by_hand_reqwest_resends_refused_streams_below_the_middleware() {
        // A client put under the middleware by hand keeps reqwest's retry:
        // one attempt as the middleware counts, three streams, no wait.
        let (url, streams, _) = h2_server(vec![REFUSE, REFUSE, Answer::Ok]).await;
        let clock = ManualClock::new();
        let middleware = RetryMiddleware::default().with_clock(clock.clone());
        let client = ClientBuilder::new(h2_client().build().unwrap()).with(middleware).build();
        let (result, report) = send(&client, Method::POST, &url).await;
        assert_eq!(result.unwrap().status(), 200);
        assert_eq!((report.attempts, streams.get()), (1, 3));
        assert!(clock.sleeps().is_empty());
    }

    #[tokio::test]
    async fn with_reqwest_retry_never_each_stream_is_an_attempt() {
        let (url, streams, _) = h2_server(vec![REFUSE, Answer::Ok]).await;
        let inner = h2_client().retry(reqwest::retry::never());
        let (client, clock) = ours(inner, RetryConfig::default());
        let (result, report) = send(&client, Method::GET, &url).await;
        assert_eq!(result.unwrap().status(), 200);
        assert_eq!((report.attempts, streams.get()), (2, 2));
        assert_eq!(clock.sleeps(), [500 * MS]);
    }

    #[tokio::test]
    async fn reqwest_retry_does_not_retry_a_refused_stream_itself() {
        let (url, streams, _) = h2_server(vec![REFUSE, Answer::Ok]).await;
        let inner = h2_client().retry(reqwest::retry::never()).build().unwrap();
        let client = reqwest_middleware::ClientBuilder::new(inner).with(peer(3)).build();
        let error = bounded("GET", client.get(&url).send()).await.unwrap_err();
        assert!(error.is_middleware(), "{error:?}");
        assert_eq!(streams.get(), 1);
    }
}
