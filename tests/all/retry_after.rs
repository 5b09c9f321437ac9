//! `Retry-After`: seconds and dates, measured against the response's `Date`
//! or the clock, a floor under the backoff, capped, and never a panic on
//! whatever bytes the header holds.

use crate::support;
use http::HeaderValue;
use proptest::prelude::*;
use reqwest_safe_retry::RetryAfter;
use reqwest_safe_retry::rate_limit::parse_retry_after;
use reqwest_safe_retry::{
    Jitter, RetryAfterOverCap, RetryMiddleware, clock::ManualClock, jitter::FixedJitter,
    report::RetryReport, report::StopReason,
};
use std::time::{Duration, SystemTime};
use support::*;
use wiremock::{MockServer, ResponseTemplate};

fn unavailable_with_retry_after(value: &str) -> ResponseTemplate {
    ResponseTemplate::new(503).insert_header("Retry-After", value)
}

async fn get(
    client: &reqwest_middleware::ClientWithMiddleware,
    server: &MockServer,
) -> reqwest::Response {
    client.get(format!("{}/r", server.uri())).send().await.unwrap()
}

#[tokio::test]
async fn retry_after_seconds_replaces_the_backoff() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(
        policy().with_retry_after(RetryAfter::default().with_spread(false)).build().unwrap(),
    );
    assert_eq!(get(&client, &server).await.status(), 200);
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
}

#[tokio::test]
async fn retry_after_is_a_floor_spread_by_the_retrys_ceiling() {
    // The jitter source picks where in [2 s, 2 s + 100 ms] the retry lands.
    for (unit, want) in [(0.0, 2000), (0.5, 2050), (1.0, 2100)] {
        let server = MockServer::start().await;
        script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
            .await;
        let clock = ManualClock::new();
        let middleware = RetryMiddleware::new(policy().build().unwrap())
            .with_clock(clock.clone())
            .with_jitter_source(FixedJitter::new(unit));
        assert_eq!(get(&wrap(middleware), &server).await.status(), 200);
        assert_eq!(clock.sleeps(), [want * MS], "{unit}");
    }
    // Without jitter there is no spread.
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(
        policy().with_backoff(support::backoff().with_jitter(Jitter::None)).build().unwrap(),
    );
    get(&client, &server).await;
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
}

/// A 503 whose `Retry-After` is the RFC's example date, with `Date` if given,
/// then a 200; on a raw server, which adds no headers of its own.
async fn dated(date: Option<&str>) -> String {
    let date = date.map_or(String::new(), |d| format!("Date: {d}\r\n"));
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\n{date}Retry-After: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let (url, _) =
        raw_server(vec![Raw::Reply(Box::leak(head.into_boxed_str())), Raw::Reply(OK_CLOSE)]).await;
    url
}

/// The RFC's example date, shifted by `secs`.
fn rfc_date(secs: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777u64.saturating_add_signed(secs))
}

async fn wait_for_date(date: Option<&str>, wall: SystemTime) -> Vec<Duration> {
    let url = dated(date).await;
    let clock = ManualClock::new().with_wall_time(wall);
    let config =
        policy().with_retry_after(RetryAfter::default().with_spread(false)).build().unwrap();
    let middleware = RetryMiddleware::new(config).with_clock(clock.clone());
    let response = wrap(middleware).get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    clock.sleeps()
}

#[tokio::test]
async fn retry_after_date_is_measured_against_the_responses_date() {
    // The server says it is 08:49:32 and asks for 08:49:37: five seconds,
    // whether the client's clock is right, 40 s slow or 40 s fast.
    let server_now = "Sun, 06 Nov 1994 08:49:32 GMT";
    for skew in [0, -40, 40] {
        let sleeps = wait_for_date(Some(server_now), rfc_date(-5 + skew)).await;
        assert_eq!(sleeps, [Duration::from_secs(5)], "clock off by {skew} s");
    }
}

#[tokio::test]
async fn without_a_date_header_retry_after_is_measured_from_the_clock() {
    assert_eq!(wait_for_date(None, rfc_date(-5)).await, [Duration::from_secs(5)]);
    // A garbage `Date` is ignored the same way.
    assert_eq!(wait_for_date(Some("yesterday"), rfc_date(-5)).await, [Duration::from_secs(5)]);
}

#[tokio::test]
async fn retry_after_date_in_the_past_means_no_wait() {
    assert_eq!(wait_for_date(None, rfc_date(3600)).await, [Duration::ZERO]);
    let server_now = "Sun, 06 Nov 1994 09:49:37 GMT";
    assert_eq!(wait_for_date(Some(server_now), rfc_date(-5)).await, [Duration::ZERO]);
}

#[tokio::test]
async fn retry_after_over_the_cap_returns_the_response_at_once() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("3600"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(policy().build().unwrap());
    let response = get(&client, &server).await;
    assert_eq!(response.status(), 503);
    let report = RetryReport::from_response(&response);
    assert_eq!(report.stop, StopReason::RetryAfterTooLong(Duration::from_secs(3600)));
    assert_eq!(hits(&server).await, 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn retry_after_over_the_cap_can_wait_the_cap_and_retry() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("3600"), ResponseTemplate::new(200)])
        .await;
    let config = policy().with_retry_after(
        RetryAfter::default()
            .with_cap(Duration::from_secs(5))
            .with_over_cap(RetryAfterOverCap::WaitTheCap)
            .with_spread(false),
    );
    let (client, clock) = client(config.build().unwrap());
    let response = get(&client, &server).await;
    assert_eq!(response.status(), 200);
    assert_eq!(clock.sleeps(), [Duration::from_secs(5)]);
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn retry_after_up_to_a_raised_cap_is_honoured() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("3600"), ResponseTemplate::new(200)])
        .await;
    let retry_after = RetryAfter::default().with_cap(Duration::from_secs(3600)).with_spread(false);
    let (client, clock) = client(policy().with_retry_after(retry_after).build().unwrap());
    assert_eq!(get(&client, &server).await.status(), 200);
    assert_eq!(clock.sleeps(), [Duration::from_secs(3600)]);
}

#[tokio::test]
async fn garbage_retry_after_falls_back_to_the_backoff() {
    for value in ["soon", "-3", "1.5", "", "Sun, 99 Nov 1994 08:49:37 GMT"] {
        let server = MockServer::start().await;
        script(
            &server,
            "/r",
            vec![unavailable_with_retry_after(value), ResponseTemplate::new(200)],
        )
        .await;
        let (client, clock) = client(policy().build().unwrap());
        assert_eq!(get(&client, &server).await.status(), 200, "{value:?}");
        assert_eq!(clock.sleeps(), [100 * MS], "{value:?}");
    }
}

#[tokio::test]
async fn deadline_counts_retry_after_waits() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![unavailable_with_retry_after("2"), ResponseTemplate::new(200)])
        .await;
    let (client, clock) = client(policy().with_deadline(Duration::from_secs(1)).build().unwrap());
    assert_eq!(get(&client, &server).await.status(), 503);
    assert!(clock.sleeps().is_empty());
}

/// A last middleware that answers 503 with `Retry-After: <date>` and no
/// `Date` header, then 200.
struct RetryAfterDate {
    date: String,
    calls: Counter,
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for RetryAfterDate {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.calls.bump();
        let response = match self.calls.get() {
            1 => http::Response::builder().status(503).header("Retry-After", &self.date),
            _ => http::Response::builder().status(200),
        };
        Ok(response.body("").unwrap().into())
    }
}

/// The provided `wall_time` (the system clock) is what a `Retry-After` date
/// is measured against when the response has no `Date`.
#[tokio::test(start_paused = true)]
async fn a_retry_after_date_is_measured_against_the_provided_wall_time() {
    let clock = Minimal::default();
    let config =
        policy().with_retry_after(RetryAfter::default().with_spread(false)).build().unwrap();
    let calls = Counter::default();
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(10));
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(config).with_clock(clock.clone()))
        .with(RetryAfterDate { date, calls: calls.clone() })
        .build();
    let response = client.get("http://127.0.0.1:9/r").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(RetryReport::from_response(&response).attempts, 2);
    let sleeps = clock.sleeps();
    assert_eq!(sleeps.len(), 1, "{sleeps:?}");
    // The date has whole seconds: the wait is what is left of 10 s after
    // rounding down, and the moments between making the date and reading it.
    assert!((Duration::from_secs(8)..=Duration::from_secs(10)).contains(&sleeps[0]), "{sleeps:?}");
}

#[tokio::test]
async fn zero_retry_after_forever_stops_at_the_retry_count() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![ResponseTemplate::new(503).insert_header("Retry-After", "0")]).await;
    let config = policy()
        .with_max_retries(50)
        .with_retry_after(RetryAfter::default().with_spread(false))
        .build()
        .unwrap();
    let (client, clock) = client(config);
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (51, StopReason::RetriesExhausted));
    assert_eq!(clock.sleeps(), vec![Duration::ZERO; 50]);
    assert_eq!(hits(&server).await, 51);
}

/// Cases for the `Retry-After` parser's properties; `PROPTEST_CASES`
/// overrides.
fn parser_cases() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2048);
    ProptestConfig::with_cases(cases)
}

/// Any wall time up to the end of year 9999.
fn any_time() -> impl Strategy<Value = SystemTime> {
    (0u64..253_402_300_799).prop_map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
}

proptest! {
    #![proptest_config(parser_cases())]

    #[test]
    fn retry_after_never_panics_on_bytes(bytes in proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..64), now in any_time()) {
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            let _ = parse_retry_after(&value, now);
        }
    }

    #[test]
    fn retry_after_reads_every_delay_seconds(secs in proptest::arbitrary::any::<u64>(), now in any_time()) {
        let value = HeaderValue::from_str(&secs.to_string()).unwrap();
        prop_assert_eq!(parse_retry_after(&value, now), Some(Duration::from_secs(secs)));
    }

    #[test]
    fn retry_after_dates_round_trip(at in any_time(), now in any_time()) {
        let value = HeaderValue::from_str(&httpdate::fmt_http_date(at)).unwrap();
        let want = at.duration_since(now).unwrap_or(Duration::ZERO);
        prop_assert_eq!(parse_retry_after(&value, now), Some(want));
    }
}

/// The RFC 9110 example date, as a response's `Date`, and its Unix time.
const DATE: (&str, u64) = ("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777);

/// A client that reads rate-limit headers (or not), its waits unspread.
fn reading(headers: bool) -> (reqwest_middleware::ClientWithMiddleware, ManualClock) {
    let retry_after = RetryAfter::default().with_spread(false).with_rate_limit_headers(headers);
    client(policy().with_retry_after(retry_after).build().unwrap())
}

/// GitHub's primary rate limit: a 403 with no request left and the reset as
/// a Unix time, 10 s after the response's `Date`.
fn github_limit() -> ResponseTemplate {
    ResponseTemplate::new(403)
        .insert_header("date", DATE.0)
        .insert_header("x-ratelimit-remaining", "0")
        .insert_header("x-ratelimit-reset", (DATE.1 + 10).to_string().as_str())
}

#[tokio::test]
async fn a_github_rate_limit_is_waited_out_with_the_rate_limit_headers_read() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![github_limit(), ResponseTemplate::new(201)]).await;
    let (client, clock) = reading(true);
    // A POST: the 403 refused it before any work, as a 429 does.
    let response = client.post(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(clock.sleeps(), [Duration::from_secs(10)], "the reset the server named");
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn without_the_rate_limit_headers_read_a_403_is_final() {
    let server = MockServer::start().await;
    script(&server, "/r", vec![github_limit(), ResponseTemplate::new(201)]).await;
    let (client, clock) = reading(false);
    let response = client.post(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(RetryReport::from_response(&response).stop, StopReason::NothingToRetry);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn a_403_that_names_no_limit_stays_final_with_the_headers_read() {
    let server = MockServer::start().await;
    let left = github_limit().insert_header("x-ratelimit-remaining", "7");
    for forbidden in [ResponseTemplate::new(403), left] {
        script(&server, "/r", vec![forbidden, ResponseTemplate::new(201)]).await;
        let (client, _) = reading(true);
        let response = client.post(format!("{}/r", server.uri())).send().await.unwrap();
        assert_eq!(response.status(), 403);
        server.reset().await;
    }
}

#[tokio::test]
async fn the_ietf_ratelimit_field_names_the_wait_of_a_429_without_retry_after() {
    let server = MockServer::start().await;
    let limited = ResponseTemplate::new(429)
        .insert_header("ratelimit-policy", "\"default\";q=100;w=60")
        .insert_header("ratelimit", "\"default\";r=0;t=7");
    script(&server, "/r", vec![limited, ResponseTemplate::new(200)]).await;
    let (client, clock) = reading(true);
    assert_eq!(get(&client, &server).await.status(), 200);
    assert_eq!(clock.sleeps(), [Duration::from_secs(7)]);
    // Not read: the backoff.
    server.reset().await;
    let limited = ResponseTemplate::new(429).insert_header("ratelimit", "\"default\";r=0;t=7");
    script(&server, "/r", vec![limited, ResponseTemplate::new(200)]).await;
    let (client, clock) = reading(false);
    assert_eq!(get(&client, &server).await.status(), 200);
    assert_eq!(clock.sleeps(), [Duration::from_millis(100)]);
}

#[tokio::test]
async fn a_reset_over_the_cap_is_returned_as_a_retry_after_over_it_is() {
    let server = MockServer::start().await;
    let far = ResponseTemplate::new(429).insert_header("ratelimit", "\"default\";r=0;t=3600");
    script(&server, "/r", vec![far, ResponseTemplate::new(200)]).await;
    let (client, _) = reading(true);
    let response = get(&client, &server).await;
    assert_eq!(response.status(), 429);
    let stop = RetryReport::from_response(&response).stop;
    assert_eq!(stop, StopReason::RetryAfterTooLong(Duration::from_secs(3600)));
}

// ---- The hints of OpenAI's and Stripe's APIs ----

/// `method` to `/r` (with `key` as its `Idempotency-Key`, if given) through
/// the quick start's settings (`RetryConfig::default()`), the server
/// answering `responses` in turn: the waits, the attempts and the stop.
async fn hinted(
    method: reqwest::Method,
    key: Option<&str>,
    responses: Vec<ResponseTemplate>,
) -> (Vec<Duration>, RetryReport) {
    let server = MockServer::start().await;
    script(&server, "/r", responses).await;
    let (client, clock) = client(reqwest_safe_retry::RetryConfig::default());
    let slot = reqwest_safe_retry::report::ReportSlot::new();
    let mut request = client.request(method, format!("{}/r", server.uri())).body("{}");
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.with_extension(slot.clone()).send().await.unwrap();
    (clock.sleeps(), slot.get().unwrap())
}

fn answer(status: u16, headers: &[(&str, &str)]) -> ResponseTemplate {
    headers
        .iter()
        .fold(ResponseTemplate::new(status), |r, (name, value)| r.insert_header(*name, *value))
}

#[tokio::test]
async fn openai_s_retry_after_ms_is_read_like_retry_after_in_milliseconds() {
    let limited = answer(429, &[("retry-after-ms", "1500")]);
    let (waits, report) =
        hinted(reqwest::Method::POST, None, vec![limited, ResponseTemplate::new(200)]).await;
    // One retry, after the 1.5 s asked, spread by up to the first backoff
    // ceiling (500 ms, jitter at the top).
    assert_eq!((report.attempts, report.stop), (2, StopReason::NothingToRetry));
    assert_eq!(waits, [Duration::from_millis(2000)]);
}

#[tokio::test]
async fn retry_after_ms_wins_over_retry_after_and_garbage_in_it_is_ignored() {
    let exact = || RetryAfter::default().with_spread(false);
    for (headers, wait) in [
        (vec![("retry-after-ms", "1500"), ("retry-after", "10")], 1500),
        // The host's pause keeps whole milliseconds, rounded up.
        (vec![("retry-after-ms", "250.5"), ("retry-after", "10")], 251),
        (vec![("retry-after-ms", "soon"), ("retry-after", "3")], 3000),
        (vec![("retry-after-ms", "-5"), ("retry-after", "3")], 3000),
        (vec![("retry-after-ms", "NaN"), ("retry-after", "3")], 3000),
    ] {
        let server = MockServer::start().await;
        script(&server, "/r", vec![answer(429, &headers), ResponseTemplate::new(200)]).await;
        let (client, clock) = client(policy().with_retry_after(exact()).build().unwrap());
        assert_eq!(get(&client, &server).await.status(), 200);
        let waited = clock.sleeps()[0];
        assert_eq!(waited.as_millis(), wait, "{headers:?}");
    }
}

#[tokio::test]
async fn x_should_retry_false_makes_an_answer_final_and_true_retries_what_is_safe_to_repeat() {
    let no = || answer(503, &[("x-should-retry", "false")]);
    let yes = || answer(500, &[("x-should-retry", "True")]);
    let ok = || ResponseTemplate::new(200);
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let (_, report) = hinted(get.clone(), None, vec![no(), ok()]).await;
    assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry));
    let (_, report) = hinted(get, None, vec![yes(), ok()]).await;
    assert_eq!((report.attempts, report.stop), (2, StopReason::NothingToRetry));
    let (_, report) = hinted(post.clone(), None, vec![yes(), ok()]).await;
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotSafe), "a POST without a key");
    let (_, report) = hinted(post, Some("chat-1"), vec![yes(), ok()]).await;
    assert_eq!((report.attempts, report.stop), (2, StopReason::NothingToRetry), "a keyed POST");
}

#[tokio::test]
async fn stripe_should_retry_speaks_for_a_keyed_charge() {
    let post = || reqwest::Method::POST;
    let conflict = answer(409, &[("stripe-should-retry", "true")]);
    let (_, report) =
        hinted(post(), Some("charge-7"), vec![conflict, ResponseTemplate::new(200)]).await;
    assert_eq!((report.attempts, report.stop), (2, StopReason::NothingToRetry));
    let unavailable = answer(503, &[("stripe-should-retry", "false")]);
    let (_, report) =
        hinted(post(), Some("charge-8"), vec![unavailable, ResponseTemplate::new(200)]).await;
    assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry));
}

#[tokio::test]
async fn hints_on_a_success_or_with_hints_off_change_nothing() {
    let server = MockServer::start().await;
    let hinted_500 = answer(500, &[("x-should-retry", "true"), ("retry-after-ms", "1")]);
    let hinted_503 = answer(503, &[("x-should-retry", "false"), ("retry-after-ms", "1")]);
    script(&server, "/r", vec![hinted_500.clone(), hinted_503, ResponseTemplate::new(200)]).await;
    let off = RetryAfter::default().with_server_hints(false).with_spread(false);
    let (client, clock) = client(policy().with_retry_after(off).build().unwrap());
    assert_eq!(get(&client, &server).await.status(), 500, "a 500 stays final");
    assert_eq!(get(&client, &server).await.status(), 200, "a 503 is retried, on the backoff");
    assert_eq!(clock.sleeps(), [100 * MS]);
    let (_, report) = hinted(
        reqwest::Method::GET,
        None,
        vec![answer(200, &[("x-should-retry", "true")]), hinted_500],
    )
    .await;
    assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry));
}

#[tokio::test]
async fn a_should_retry_false_holds_for_a_403_taken_as_a_429_too() {
    let server = MockServer::start().await;
    let limited = answer(403, &[("retry-after", "1"), ("x-should-retry", "false")]);
    script(&server, "/r", vec![limited, ResponseTemplate::new(200)]).await;
    let rules = RetryAfter::default().with_rate_limit_headers(true);
    let (client, clock) = client(policy().with_retry_after(rules).build().unwrap());
    assert_eq!(get(&client, &server).await.status(), 403);
    assert!(clock.sleeps().is_empty());
}
