//! A host's pause: a `429` or `503` whose `Retry-After` is within the cap
//! holds back every call of the middleware to that host until the time the
//! server named, lets one probe through when it ends, and costs the retry
//! budget nothing. The servers here run in the test's own runtime, in
//! paused time, and stamp each request with the time it arrived.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::rate_limit::{HostPaused, ReturnIfPaused};
use reqwest_safe_retry::report::{RetryReport, StopReason};
use reqwest_safe_retry::{RetryAfter, RetryConfig, RetryDeadline, RetryMiddleware};
use tokio::time::Instant;

use crate::support::RawServer;

const MS: Duration = Duration::from_millis(1);
const ZERO: Duration = Duration::ZERO;
const S: Duration = Duration::from_secs(1);

/// When each request arrived, from the test's start, in paused time.
#[derive(Clone)]
struct Arrivals {
    start: Instant,
    times: Arc<Mutex<Vec<Duration>>>,
}

impl Arrivals {
    fn new() -> Self {
        Self { start: Instant::now(), times: Arc::default() }
    }

    /// Records an arrival now; returns the time since the start.
    fn record(&self) -> Duration {
        let at = self.start.elapsed();
        self.times.lock().unwrap().push(at);
        at
    }

    /// Arrivals within `range` of the start.
    fn within(&self, range: std::ops::Range<Duration>) -> usize {
        self.times.lock().unwrap().iter().filter(|at| range.contains(*at)).count()
    }

    fn len(&self) -> usize {
        self.times.lock().unwrap().len()
    }
}

/// A server that answers with what `answer` makes of the request's index
/// and its time of arrival: a status and a `Retry-After`, if any.
async fn server(
    arrivals: &Arrivals,
    answer: impl Fn(usize, Duration) -> (u16, Option<u64>) + Send + Sync + 'static,
) -> RawServer {
    held(arrivals, move |index, at| {
        let (status, retry_after) = answer(index, at);
        (status, retry_after, Duration::ZERO)
    })
    .await
}

/// As [`server`], each answer also held back for the time `answer` names.
async fn held(
    arrivals: &Arrivals,
    answer: impl Fn(usize, Duration) -> (u16, Option<u64>, Duration) + Send + Sync + 'static,
) -> RawServer {
    let (arrivals, answer) = (arrivals.clone(), Arc::new(answer));
    RawServer::start(move |mut conn| {
        let (arrivals, answer) = (arrivals.clone(), answer.clone());
        async move {
            while let Some(request) = conn.request().await {
                let (status, retry_after, hold) = answer(request.index, arrivals.record());
                tokio::time::sleep(hold).await;
                let retry_after =
                    retry_after.map(|s| format!("retry-after: {s}\r\n")).unwrap_or_default();
                let head =
                    format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\n{retry_after}\r\nok");
                if conn.write(head).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

/// The quick start's client, on `config`.
fn quick_start(config: RetryConfig) -> ClientWithMiddleware {
    RetryMiddleware::new(config).client(reqwest::Client::builder()).unwrap().build()
}

/// `n` calls to `url` at once; their statuses, in order.
async fn at_once(client: &ClientWithMiddleware, url: &str, n: usize) -> Vec<u16> {
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move { client.get(url).send().await.unwrap().status().as_u16() })
        })
        .collect();
    let mut statuses = Vec::new();
    for call in calls {
        statuses.push(call.await.unwrap());
    }
    statuses
}

/// One call, and `n` more at once 100 ms later, while the first waits out
/// what it was told; the statuses of the `n`, and the first's.
async fn first_then(client: &ClientWithMiddleware, url: &str, n: usize) -> (Vec<u16>, u16) {
    let first = tokio::spawn({
        let (client, url) = (client.clone(), url.to_owned());
        async move { client.get(url).send().await.unwrap().status().as_u16() }
    });
    tokio::time::sleep(100 * MS).await;
    let statuses = at_once(client, url, n).await;
    (statuses, first.await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_429_holds_back_the_hosts_other_calls_until_its_retry_after_ends() {
    let arrivals = Arrivals::new();
    let server =
        server(&arrivals, |index, _| if index == 0 { (429, Some(2)) } else { (200, None) }).await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    // The first call is told to wait 2 s, and retries after; a hundred
    // more start during the pause.
    let (statuses, first) = first_then(&client, &url, 100).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(first, 200);
    assert_eq!(arrivals.within(Duration::ZERO..2 * S), 1, "only the call that met the 429");
    assert_eq!(arrivals.len(), 102, "each call sent once more at most: none met the 429 again");
}

#[tokio::test(start_paused = true)]
async fn with_the_pause_off_the_other_calls_do_not_wait() {
    let arrivals = Arrivals::new();
    let server =
        server(&arrivals, |index, _| if index == 0 { (429, Some(2)) } else { (200, None) }).await;
    let config = RetryConfig::builder()
        .with_retry_after(RetryAfter::default().with_pause(false))
        .build()
        .unwrap();
    let client = quick_start(config);
    let url = server.url("/r");
    let (statuses, first) = first_then(&client, &url, 100).await;
    assert!(statuses.iter().all(|s| *s == 200));
    assert_eq!(first, 200);
    assert_eq!(arrivals.within(Duration::ZERO..2 * S), 101, "each call went at once");
}

/// The rate limiter of the issue that asked for the pause: 200 callers at
/// once, and a server that answers everything with `429` and
/// `Retry-After: 2` for its first 5 s.
#[tokio::test(start_paused = true)]
async fn two_hundred_callers_and_a_rate_limiter_get_one_request_through_a_pause() {
    let arrivals = Arrivals::new();
    let limited = 5 * S;
    let server =
        server(&arrivals, move |_, at| if at < limited { (429, Some(2)) } else { (200, None) })
            .await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    let statuses = at_once(&client, &url, 200).await;
    assert!(statuses.iter().all(|s| *s == 200), "every caller succeeds: {statuses:?}");
    // All 200 first attempts left before any answer came back; after
    // that, one request a pause (2 s and its spread) until the server
    // serves.
    assert_eq!(arrivals.within(Duration::ZERO..MS), 200);
    let during = arrivals.within(MS..limited);
    assert!((1..=2).contains(&during), "{during} requests while the limiter refused");
    assert_eq!(arrivals.len(), 200 + during + 200, "once open, each caller sent once");
}

#[tokio::test(start_paused = true)]
async fn the_pause_leaves_the_hosts_retry_budget_whole() {
    let arrivals = Arrivals::new();
    // Refused for 5 s; from 60 s, one 502, then served.
    let gave_502 = AtomicBool::new(false);
    let server = server(&arrivals, move |_, at| match at {
        at if at < 5 * S => (429, Some(2)),
        at if at >= 60 * S && !gave_502.swap(true, Ordering::Relaxed) => (502, None),
        _ => (200, None),
    })
    .await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    let statuses = at_once(&client, &url, 50).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    tokio::time::sleep_until(arrivals.start + 60 * S).await;
    // A call that meets a 502 is still retried: the budget was not spent
    // on the pause.
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(RetryReport::from_response(&response).attempts, 2);
}

/// A host paused for longer than the call's deadline allows: the call
/// ends at once, and sends nothing.
#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_comes_before_the_pause_ends_returns_at_once() {
    let arrivals = Arrivals::new();
    let server =
        server(&arrivals, |index, _| if index == 0 { (429, Some(20)) } else { (200, None) }).await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    let refused = client.get(&url).with_extension(ReturnIfPaused).send().await.unwrap();
    assert_eq!(refused.status(), 429, "its own answer, returned rather than waited out");
    assert_eq!(RetryReport::from_response(&refused).stop, StopReason::HostPaused);
    let started = Instant::now();
    let error = client.get(&url).with_extension(RetryDeadline::new(5 * S)).send().await;
    assert_eq!(started.elapsed(), Duration::ZERO, "no wait");
    let paused = held_back(error);
    assert_eq!(paused.attempts(), 0);
    assert!(paused.wait() >= 20 * S - 1 * MS, "{paused:?}");
    assert_eq!(arrivals.len(), 1, "nothing more was sent");
    // A deadline that covers the wait: the call waits, then goes.
    let waited = client.get(&url).with_extension(RetryDeadline::new(30 * S)).send().await;
    assert_eq!(waited.unwrap().status(), 200);
    assert!(started.elapsed() >= 20 * S);
}

#[tokio::test(start_paused = true)]
async fn a_call_that_does_not_wait_for_a_pause_ends_with_host_paused() {
    let arrivals = Arrivals::new();
    let server =
        server(&arrivals, |index, _| if index == 0 { (503, Some(3)) } else { (200, None) }).await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    let first = client.get(&url).with_extension(ReturnIfPaused).send().await.unwrap();
    assert_eq!(first.status(), 503, "a 503 with a Retry-After pauses the host too");
    let error = client.get(&url).with_extension(ReturnIfPaused).send().await;
    let paused = held_back(error);
    assert!((3 * S - 1 * MS..=3 * S + 500 * MS).contains(&paused.wait()), "{paused:?}");
    assert_eq!(arrivals.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_wait_over_the_cap_pauses_no_host() {
    let arrivals = Arrivals::new();
    let server =
        server(&arrivals, |index, _| if index == 0 { (429, Some(600)) } else { (200, None) }).await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    let first = client.get(&url).send().await.unwrap();
    assert_eq!(RetryReport::from_response(&first).stop, StopReason::RetryAfterTooLong(600 * S));
    let started = Instant::now();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    assert_eq!(started.elapsed(), Duration::ZERO, "the next call went at once");
}

/// The [`HostPaused`] error inside `error`.
fn held_back(error: reqwest_middleware::Result<reqwest::Response>) -> HostPaused {
    match error {
        Err(reqwest_middleware::Error::Middleware(error)) => {
            *error.downcast_ref::<HostPaused>().expect("a HostPaused error")
        }
        other => panic!("expected HostPaused, got {other:?}"),
    }
}

/// A server whose first answer is a 429 asking for 2 s, whose second (the
/// probe) takes `slow` to come and is `probe`, and which serves after.
async fn probed(arrivals: &Arrivals, slow: Duration, probe: (u16, Option<u64>)) -> RawServer {
    held(arrivals, move |index, _| match index {
        0 => (429, Some(2), Duration::ZERO),
        1 => (probe.0, probe.1, slow),
        _ => (200, None, Duration::ZERO),
    })
    .await
}

/// The times of the arrivals, in order.
fn sorted(arrivals: &Arrivals) -> Vec<Duration> {
    let mut times = arrivals.times.lock().unwrap().clone();
    times.sort();
    times
}

#[tokio::test(start_paused = true)]
async fn no_call_goes_while_the_probe_is_in_flight_however_long_it_takes() {
    let arrivals = Arrivals::new();
    // The probe's answer takes 15 s: longer than the budget's window.
    let server = probed(&arrivals, 15 * S, (200, None)).await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    let (statuses, first) = first_then(&client, &url, 20).await;
    assert!(statuses.iter().all(|s| *s == 200));
    assert_eq!(first, 200);
    let times = sorted(&arrivals);
    let probe = times[1];
    assert!(probe >= 2 * S, "{times:?}");
    let during = times.iter().filter(|at| (probe..probe + 15 * S).contains(*at)).count();
    assert_eq!(during, 1, "only the probe while it was in flight: {times:?}");
}

#[tokio::test(start_paused = true)]
async fn a_probe_refused_again_with_no_time_named_holds_the_others_a_backoff_step() {
    let arrivals = Arrivals::new();
    let server = probed(&arrivals, Duration::ZERO, (429, None)).await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    let (statuses, first) = first_then(&client, &url, 20).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(first, 200);
    let times = sorted(&arrivals);
    let probe = times[1];
    // The first retry's backoff ceiling, 500 ms by default.
    let held = times.iter().filter(|at| (probe..probe + 500 * MS).contains(*at)).count();
    assert_eq!(held, 1, "none went on the probe's bare 429: {times:?}");
}

#[tokio::test(start_paused = true)]
async fn a_wait_no_clock_can_hold_pauses_the_host_for_good() {
    let arrivals = Arrivals::new();
    let server = server(&arrivals, |_, _| (429, None)).await;
    // A server answering with a Retry-After past any clock, under no cap.
    let endless = RawServer::start(|mut conn| async move {
        while conn.request().await.is_some() {
            let head = "HTTP/1.1 429 X\r\ncontent-length: 2\r\nretry-after: 99999999999999999999\r\n\r\nok";
            if conn.write(head).await.is_err() {
                return;
            }
        }
    })
    .await;
    drop(server);
    let config = RetryConfig::builder()
        .with_retry_after(RetryAfter::default().with_cap(Duration::MAX))
        .build()
        .unwrap();
    let client = quick_start(config);
    let url = endless.url("/r");
    let once = client.get(&url).with_extension(reqwest_safe_retry::MaxRetries::new(0));
    assert_eq!(once.send().await.unwrap().status(), 429);
    let error = client.get(&url).with_extension(ReturnIfPaused).send().await;
    assert!(held_back(error).wait() > Duration::from_secs(3600 * 24 * 365));
    assert_eq!(endless.requests(), 1);
}

/// After a redirect, the pause goes on the host that asked for it: the
/// last hop's, not the one the call was sent to.
#[tokio::test]
async fn the_pause_goes_on_the_host_that_answered_after_a_redirect() {
    use wiremock::{Mock, MockServer, ResponseTemplate, matchers::path};
    let (first, last) = (MockServer::start().await, MockServer::start().await);
    let to_last = ResponseTemplate::new(302).insert_header("location", last.uri() + "/r");
    Mock::given(path("/r")).respond_with(to_last).mount(&first).await;
    let limited = ResponseTemplate::new(429).insert_header("retry-after", "30");
    Mock::given(path("/r")).respond_with(limited).mount(&last).await;
    let client = quick_start(RetryConfig::default());
    let once = reqwest_safe_retry::MaxRetries::new(0);
    let redirected = client.get(first.uri() + "/r").with_extension(once).send().await.unwrap();
    assert_eq!(redirected.status(), 429);
    // The last hop is paused...
    let error = client.get(last.uri() + "/r").with_extension(ReturnIfPaused).send().await;
    assert_eq!(held_back(error).attempts(), 0);
    // ...and the host the call went to is not.
    let again = client.get(first.uri() + "/r").with_extension(ReturnIfPaused).send().await;
    assert_eq!(again.unwrap().status(), 429, "sent, and redirected to the paused host");
    assert_eq!(first.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn the_probes_own_retry_waits_the_step_its_bare_refusal_holds_the_host() {
    // 429 asking for 2 s, then the probe's bare 429, then 200. Draws at the
    // bottom: no spread and no backoff of its own, so the probe's retry
    // waits the first backoff ceiling the refusal holds the host for, once.
    let arrivals = Arrivals::new();
    let server = server(&arrivals, |index, _| match index {
        0 => (429, Some(2)),
        1 => (429, None),
        _ => (200, None),
    })
    .await;
    let clock = reqwest_safe_retry::clock::ManualClock::new();
    let client = RetryMiddleware::new(RetryConfig::default())
        .with_clock(clock.clone())
        .with_jitter_source(reqwest_safe_retry::jitter::FixedJitter::new(0.0))
        .client(reqwest::Client::builder())
        .unwrap()
        .build();
    let response = client.get(server.url("/r")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(clock.sleeps(), [2 * S, 500 * MS]);
}

mod throttle;

/// A call that finds its host paused waits the rest of the pause plus a
/// spread of its own: a random part of the first retry's backoff ceiling,
/// or the whole ceiling when waits are not spread, so that the calls held
/// back do not all arrive as the pause ends.
#[tokio::test(start_paused = true)]
async fn a_call_held_by_a_pause_adds_its_own_spread() {
    use reqwest_safe_retry::jitter::FixedJitter;
    use reqwest_safe_retry::{Backoff, Jitter};

    let quarter = |config: RetryConfig| {
        RetryMiddleware::new(config)
            .with_jitter_source(FixedJitter::new(0.25))
            .client(reqwest::Client::builder())
            .unwrap()
            .build()
    };
    let backoff = Backoff::default().with_initial(800 * MS);
    let cases = [
        ("spread, full jitter", backoff, true, 200 * MS),
        ("waits not spread", backoff, false, 800 * MS),
        ("no jitter", backoff.with_jitter(Jitter::None), true, 800 * MS),
    ];
    for (case, backoff, spread, own) in cases {
        let arrivals = Arrivals::new();
        let server =
            server(&arrivals, |index, _| if index == 0 { (429, Some(3)) } else { (200, None) })
                .await;
        let config = RetryConfig::builder()
            .with_backoff(backoff)
            .with_retry_after(RetryAfter::default().with_spread(spread))
            .build()
            .unwrap();
        let client = quarter(config);
        let url = server.url("/r");
        let first = client.get(&url).with_extension(ReturnIfPaused).send().await.unwrap();
        assert_eq!(first.status(), 429, "{case}");
        let paused = held_back(client.get(&url).with_extension(ReturnIfPaused).send().await);
        assert_eq!(paused.wait(), 3 * S + own, "{case}");
    }
}

/// A `403` the settings take as a rate limit (GitHub's secondary limit: a
/// `403` with `Retry-After`) pauses its host as a `429` does, even where
/// rate limits are not retried.
#[tokio::test(start_paused = true)]
async fn a_403_taken_as_a_rate_limit_pauses_the_host_even_when_not_retried() {
    let arrivals = Arrivals::new();
    let server =
        server(&arrivals, |index, _| if index == 0 { (403, Some(3)) } else { (200, None) }).await;
    let config = RetryConfig::builder()
        .with_retryable_statuses([http::StatusCode::SERVICE_UNAVAILABLE])
        .with_retry_after(RetryAfter::default().with_rate_limit_headers(true))
        .build()
        .unwrap();
    let client = quick_start(config);
    let url = server.url("/r");
    let first = client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 403, "final here: rate limits are not retried");
    let paused = held_back(client.get(&url).with_extension(ReturnIfPaused).send().await);
    assert!((3 * S..=3 * S + 500 * MS).contains(&paused.wait()), "{paused:?}");
    assert_eq!(arrivals.len(), 1);
}

/// A pause renewed again and again: each call waits on pauses no longer
/// than the `Retry-After` cap in all (with one spread), its own answers'
/// pauses included, then ends with `HostPaused`: with its last answer if
/// that answer renewed the pause, else with the error.
#[tokio::test(start_paused = true)]
async fn a_call_waits_on_renewed_pauses_no_longer_than_the_cap_in_all() {
    let arrivals = Arrivals::new();
    // Every answer for the first 200 s asks for 20 s more.
    let server =
        server(&arrivals, |_, at| if at < 200 * S { (429, Some(20)) } else { (200, None) }).await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    let calls: Vec<_> = (0..5)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                tokio::time::sleep(i * 100 * MS).await;
                let started = Instant::now();
                let result = client.get(url).send().await;
                (started.elapsed(), result)
            })
        })
        .collect();
    let cap = RetryAfter::default().cap();
    for call in calls {
        let (waited, result) = call.await.unwrap();
        assert!(waited <= cap + S, "no longer than the cap and a spread: {waited:?}");
        let stop = match result {
            Ok(response) => {
                assert_eq!(response.status(), 429, "the call's own last answer");
                RetryReport::from_response(&response).stop
            }
            // Held back before its next attempt, a pause renewed by
            // another's answer in the way.
            Err(error) => {
                assert!(held_back(Err(error)).attempts() <= 1);
                assert!(waited >= 19 * S, "it waited out the first pause: {waited:?}");
                StopReason::HostPaused
            }
        };
        assert_eq!(stop, StopReason::HostPaused);
    }
    // The first call's answer, one probe at the pause's end, and at most
    // one more as the renewed pause ends.
    assert!(arrivals.len() <= 3, "{:?}", sorted(&arrivals));
}
