//! Loopback imitations of three public APIs' retry conventions, each with
//! the state that makes its convention matter, called through the client
//! the quick start builds with the settings the API calls for:
//!
//! - **Stripe-like**: charges deduplicated by `Idempotency-Key`, a charge
//!   made and then answered `500` with `Stripe-Should-Retry`;
//! - **OpenAI-like**: a window in milliseconds (`retry-after-ms`) that
//!   turns away every request inside it, and `x-should-retry`;
//! - **GitHub-like**: a quota of requests a window, refused with a `403`
//!   and the reset as a Unix time; and the same quota told in the IETF
//!   draft's `RateLimit` fields.
//!
//! Each server counts what a client must never do to it: a second charge
//! for one key, a request inside the window it named.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::clock::{Clock, ManualClock};
use reqwest_safe_retry::jitter::FixedJitter;
use reqwest_safe_retry::report::{ReportSlot, RetryReport, StopReason};
use reqwest_safe_retry::{RetryAfter, RetryConfig, RetryConfigBuilder, RetryMiddleware};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The quick start's client, with `config`, a manual clock the server reads
/// too, and jitter at the top of its range so that waits are exact.
fn client(config: RetryConfigBuilder, clock: &ManualClock) -> ClientWithMiddleware {
    RetryMiddleware::new(config.build().expect("a valid configuration"))
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP)
        .client(reqwest::Client::builder())
        .expect("the client builds")
        .build()
}

/// Mounts `imitation` as the whole of a new server.
async fn serve(imitation: impl Respond + 'static) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(any()).respond_with(imitation).mount(&server).await;
    server
}

/// `request` sent with a report slot: the status, the body and the report.
async fn send(request: reqwest_middleware::RequestBuilder) -> (u16, String, RetryReport) {
    let slot = ReportSlot::new();
    let response = request.with_extension(slot.clone()).send().await.expect("an answer");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap(), slot.get().expect("a report"))
}

// ---- Stripe-like: charges deduplicated by key ----

/// Charges, deduplicated by `Idempotency-Key`: a key seen before gets the
/// first answer's charge again. The first `lost` charges are made and then
/// answered `500` with `Stripe-Should-Retry: true`, as if the answer had
/// been lost on the way; a request without a key makes a new charge.
#[derive(Clone, Default)]
struct Charges {
    state: Arc<Mutex<ChargeBook>>,
}

#[derive(Default)]
struct ChargeBook {
    made: u32,
    lost: u32,
    by_key: HashMap<String, u32>,
}

impl Charges {
    fn losing(lost: u32) -> Self {
        let charges = Self::default();
        charges.state.lock().unwrap().lost = lost;
        charges
    }

    fn made(&self) -> u32 {
        self.state.lock().unwrap().made
    }
}

impl Respond for Charges {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut book = self.state.lock().unwrap();
        let key = request.headers.get("idempotency-key").map(|k| k.to_str().unwrap().to_owned());
        if let Some(charge) = key.as_ref().and_then(|key| book.by_key.get(key)) {
            return ResponseTemplate::new(200)
                .insert_header("idempotent-replayed", "true")
                .set_body_string(format!("ch_{charge}"));
        }
        book.made += 1;
        let charge = book.made;
        if let Some(key) = key {
            book.by_key.insert(key, charge);
        }
        if book.lost > 0 {
            book.lost -= 1;
            return ResponseTemplate::new(500).insert_header("stripe-should-retry", "true");
        }
        ResponseTemplate::new(200).set_body_string(format!("ch_{charge}"))
    }
}

#[tokio::test]
async fn stripe_a_minted_key_gets_the_charge_whose_answer_was_lost_and_makes_no_second() {
    let charges = Charges::losing(1);
    let server = serve(charges.clone()).await;
    let clock = ManualClock::new();
    let client = client(RetryConfig::builder().with_minted_keys(true), &clock);
    let (status, body, report) =
        send(client.post(format!("{}/v1/charges", server.uri())).body("amount=500")).await;
    assert_eq!((status, body.as_str(), report.attempts), (200, "ch_1", 2));
    assert_eq!(charges.made(), 1, "one charge for one call");
    let minted = report.minted_key.expect("a key minted for the call").to_string();
    let requests = server.received_requests().await.unwrap();
    for request in &requests {
        assert_eq!(request.headers.get("idempotency-key").unwrap(), minted.as_str());
    }
    assert_eq!(requests.len(), 2);
}

#[tokio::test]
async fn stripe_without_a_key_the_lost_answer_is_returned_not_charged_again() {
    let charges = Charges::losing(1);
    let server = serve(charges.clone()).await;
    let clock = ManualClock::new();
    // The quick start's settings: no key is minted.
    let client = client(RetryConfig::builder(), &clock);
    let (status, _, report) =
        send(client.post(format!("{}/v1/charges", server.uri())).body("amount=500")).await;
    assert_eq!((status, report.attempts, report.stop), (500, 1, StopReason::NotSafe));
    assert_eq!(charges.made(), 1);
}

#[tokio::test]
async fn stripe_a_callers_key_is_kept_and_should_retry_false_is_obeyed() {
    let charges = Charges::losing(1);
    let server = serve(charges.clone()).await;
    let clock = ManualClock::new();
    let client = client(RetryConfig::builder().with_minted_keys(true), &clock);
    let charge = || client.post(format!("{}/v1/charges", server.uri())).body("amount=500");
    let (status, body, report) = send(charge().header("Idempotency-Key", "order-7")).await;
    assert_eq!((status, body.as_str(), report.minted_key), (200, "ch_1", None));
    // The same key again, a day later: the server's replay, no new charge.
    let (status, body, _) = send(charge().header("Idempotency-Key", "order-7")).await;
    assert_eq!((status, body.as_str(), charges.made()), (200, "ch_1", 1));

    let declined = MockServer::start().await;
    let no = ResponseTemplate::new(503).insert_header("stripe-should-retry", "false");
    Mock::given(any()).respond_with(no).mount(&declined).await;
    let (status, _, report) =
        send(client.post(declined.uri()).header("Idempotency-Key", "order-8")).await;
    assert_eq!((status, report.attempts, report.stop), (503, 1, StopReason::NothingToRetry));
}

// ---- OpenAI-like: a window in milliseconds, and x-should-retry ----

/// Completions behind a window: the first `refusals` requests are answered
/// `429` with `retry-after-ms: 1500` and `x-should-retry: true`, and any
/// request inside the window the last refusal named is refused again and
/// counted as too early.
#[derive(Clone)]
struct Completions {
    clock: ManualClock,
    state: Arc<Mutex<Window>>,
}

#[derive(Default)]
struct Window {
    refusals: u32,
    closed_until: Option<Duration>,
    too_early: u32,
}

impl Completions {
    fn refusing(clock: &ManualClock, refusals: u32) -> Self {
        let window = Window { refusals, ..Window::default() };
        Self { clock: clock.clone(), state: Arc::new(Mutex::new(window)) }
    }

    fn too_early(&self) -> u32 {
        self.state.lock().unwrap().too_early
    }
}

impl Respond for Completions {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let mut window = self.state.lock().unwrap();
        let now = self.clock.elapsed();
        let early = window.closed_until.is_some_and(|until| now < until);
        window.too_early += u32::from(early);
        if early || window.refusals > 0 {
            window.refusals = window.refusals.saturating_sub(1);
            window.closed_until = Some(now + Duration::from_millis(1500));
            return ResponseTemplate::new(429)
                .insert_header("retry-after-ms", "1500")
                .insert_header("retry-after", "2")
                .insert_header("x-should-retry", "true");
        }
        ResponseTemplate::new(200).set_body_string("{\"choices\":[]}")
    }
}

#[tokio::test]
async fn openai_the_window_in_milliseconds_is_waited_out_and_nothing_is_sent_inside_it() {
    let clock = ManualClock::new();
    let completions = Completions::refusing(&clock, 1);
    let server = serve(completions.clone()).await;
    let client = client(RetryConfig::builder(), &clock);
    let url = format!("{}/v1/chat/completions", server.uri());
    let (status, _, report) = send(client.post(&url).body("{}")).await;
    assert_eq!((status, report.attempts), (200, 2), "a POST: a 429 is retried for any method");
    assert_eq!(completions.too_early(), 0);
    // The 1.5 s asked (not the 2 s of `retry-after`), spread by up to the
    // first backoff ceiling.
    assert_eq!(clock.sleeps(), [Duration::from_millis(2000)]);
}

#[tokio::test]
async fn openai_x_should_retry_is_obeyed_for_what_is_safe_to_repeat_and_only_that() {
    let clock = ManualClock::new();
    let server = MockServer::start().await;
    let hinted = |should: &str| ResponseTemplate::new(500).insert_header("x-should-retry", should);
    Mock::given(any()).respond_with(hinted("true")).up_to_n_times(1).mount(&server).await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&server).await;
    let minting = client(RetryConfig::builder().with_minted_keys(true), &clock);
    let (status, _, report) = send(minting.post(server.uri()).body("{}")).await;
    assert_eq!((status, report.attempts), (200, 2), "a keyed POST, the 500 retried");

    server.reset().await;
    Mock::given(any()).respond_with(hinted("true")).up_to_n_times(1).mount(&server).await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&server).await;
    let plain = client(RetryConfig::builder(), &clock);
    let (status, _, report) = send(plain.post(server.uri()).body("{}")).await;
    assert_eq!((status, report.stop), (500, StopReason::NotSafe), "no key: not repeated");

    server.reset().await;
    let final_503 = ResponseTemplate::new(503).insert_header("x-should-retry", "false");
    Mock::given(any()).respond_with(final_503).mount(&server).await;
    let (status, _, report) = send(plain.get(server.uri())).await;
    assert_eq!((status, report.attempts), (503, 1), "false: even a GET's 503 is final");
}

// ---- GitHub-like: a quota a window, told two ways ----

/// How a [`Quota`] tells its state.
#[derive(Clone, Copy)]
enum Telling {
    /// GitHub's: `x-ratelimit-remaining` and `x-ratelimit-reset` (a Unix
    /// time), a spent quota answered `403`.
    GitHub,
    /// The IETF draft's (10): `RateLimit-Policy` and `RateLimit`, with a
    /// partition key; a spent quota answered `429`.
    Ietf,
}

/// `limit` requests per 10 s window, counted on the clock's wall time and
/// told in each answer; a request past the quota is refused and counted.
#[derive(Clone)]
struct Quota {
    clock: ManualClock,
    telling: Telling,
    limit: u64,
    state: Arc<Mutex<(u64, u64, u32)>>,
}

const WINDOW: u64 = 10;

impl Quota {
    fn new(clock: &ManualClock, telling: Telling, limit: u64) -> Self {
        let state = Arc::new(Mutex::new((0, 0, 0)));
        Self { clock: clock.clone(), telling, limit, state }
    }

    /// Requests refused for want of quota.
    fn refused(&self) -> u32 {
        self.state.lock().unwrap().2
    }
}

impl Respond for Quota {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let now = self.clock.wall_time();
        let secs = now.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        let mut state = self.state.lock().unwrap();
        let (window, used, refused) = &mut *state;
        if secs / WINDOW != *window {
            (*window, *used) = (secs / WINDOW, 0);
        }
        let spent = *used >= self.limit;
        *used += u64::from(!spent);
        *refused += u32::from(spent);
        let left = self.limit - *used;
        let reset_at = (*window + 1) * WINDOW;
        let status = match (spent, self.telling) {
            (false, _) => 200,
            (true, Telling::GitHub) => 403,
            (true, Telling::Ietf) => 429,
        };
        let answer =
            ResponseTemplate::new(status).insert_header("date", httpdate::fmt_http_date(now));
        match self.telling {
            Telling::GitHub => answer
                .insert_header("x-ratelimit-limit", self.limit.to_string())
                .insert_header("x-ratelimit-remaining", left.to_string())
                .insert_header("x-ratelimit-reset", reset_at.to_string()),
            Telling::Ietf => answer
                .insert_header("ratelimit-policy", format!("\"10s\";q={};w={WINDOW}", self.limit))
                .insert_header(
                    "ratelimit",
                    format!("\"10s\";r={left};t={};pk=:dXNlci03:", reset_at - secs),
                ),
        }
    }
}

/// Eight GETs in a row against a quota of five a window, with the
/// rate-limit headers read: every one answered `200`, the sixth after the
/// reset; the waits, and the requests the quota refused.
async fn eight_calls(telling: Telling) -> (Vec<Duration>, u32) {
    // Two seconds into a window.
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_602);
    let clock = ManualClock::new().with_wall_time(start);
    let quota = Quota::new(&clock, telling, 5);
    let server = serve(quota.clone()).await;
    let reading = RetryAfter::default().with_rate_limit_headers(true);
    let client = client(RetryConfig::builder().with_retry_after(reading), &clock);
    for call in 0..8 {
        let (status, _, report) = send(client.get(format!("{}/repos/o/r", server.uri()))).await;
        assert_eq!(status, 200, "call {call}: {report:?}");
    }
    (clock.sleeps(), quota.refused())
}

#[tokio::test]
async fn github_a_spent_quota_is_waited_out_to_its_reset() {
    let (waits, refused) = eight_calls(Telling::GitHub).await;
    // The sixth is refused once, then waits the 8 s left of the window,
    // spread by up to the first backoff ceiling.
    assert_eq!(waits, [Duration::from_millis(8500)]);
    assert_eq!(refused, 1);
}

#[tokio::test]
async fn ietf_draft_fields_with_a_partition_key_are_read_as_github_s_are() {
    let (waits, refused) = eight_calls(Telling::Ietf).await;
    assert_eq!(waits, [Duration::from_millis(8500)]);
    assert_eq!(refused, 1);
}

#[tokio::test]
async fn github_the_quick_starts_settings_return_the_403_unread() {
    let clock = ManualClock::new();
    let quota = Quota::new(&clock, Telling::GitHub, 0);
    let server = serve(quota.clone()).await;
    let client = client(RetryConfig::builder(), &clock);
    let (status, _, report) = send(client.get(server.uri())).await;
    assert_eq!((status, report.attempts, report.stop), (403, 1, StopReason::NothingToRetry));
    assert!(clock.sleeps().is_empty());
}
