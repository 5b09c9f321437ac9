//! The throttle on first attempts, against the raw loopback server in
//! paused time: a host that turns most requests away gets a share of new
//! calls; the rest end at once with `Throttled`, unsent.

use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest_safe_retry::RetryConfig;
use reqwest_safe_retry::rate_limit::{SkipThrottling, Throttled};
use reqwest_safe_retry::report::{Decision, StopReason};

use super::*;

/// What one call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Status(u16),
    Throttled,
    /// Any other error: a refused connection.
    Failed,
}

fn ended(outcome: reqwest_middleware::Result<reqwest::Response>) -> Ended {
    match outcome {
        Ok(response) => Ended::Status(response.status().as_u16()),
        Err(reqwest_middleware::Error::Middleware(e)) if e.is::<Throttled>() => Ended::Throttled,
        Err(_) => Ended::Failed,
    }
}

/// Calls to `url`, one each `gap` for `count` gaps, each started on time
/// and run to its end; what each came to, with its start.
async fn steady(
    client: &ClientWithMiddleware,
    url: &str,
    gap: Duration,
    count: u32,
    mark: bool,
) -> Vec<(Duration, Ended)> {
    calls_at(client, url, (0..count).map(|n| gap * n), mark).await
}

/// Calls to `url`, each started at its time from now and run to its end;
/// what each came to, with its start.
async fn calls_at(
    client: &ClientWithMiddleware,
    url: &str,
    times: impl IntoIterator<Item = Duration>,
    mark: bool,
) -> Vec<(Duration, Ended)> {
    let start = Instant::now();
    let mut calls = Vec::new();
    for at in times {
        tokio::time::sleep_until(start + at).await;
        let (client, url) = (client.clone(), url.to_owned());
        calls.push(tokio::spawn(async move {
            let request = client.get(url);
            let request = if mark { request.with_extension(SkipThrottling) } else { request };
            (start.elapsed(), ended(request.send().await))
        }));
    }
    let mut ends = Vec::new();
    for call in calls {
        ends.push(call.await.unwrap());
    }
    ends
}

fn count(ends: &[(Duration, Ended)], range: std::ops::Range<Duration>, what: Ended) -> usize {
    ends.iter().filter(|(at, end)| range.contains(at) && *end == what).count()
}

/// A server that answers 503, with no `Retry-After`, for its first
/// `down`, and 200 after.
async fn down_for(arrivals: &Arrivals, down: Duration) -> RawServer {
    server(arrivals, move |_, at| if at < down { (503, None) } else { (200, None) }).await
}

#[tokio::test(start_paused = true)]
async fn a_host_that_is_down_gets_a_twentieth_of_new_calls_and_all_of_them_once_back() {
    let arrivals = Arrivals::new();
    let server = down_for(&arrivals, 60 * S).await;
    let stops = Arc::new(AtomicUsize::new(0));
    let counted = stops.clone();
    let middleware = RetryMiddleware::new(RetryConfig::default()).on_decision(move |event| {
        if event.decision == Decision::Stop(StopReason::Throttled) {
            assert_eq!(event.attempt, 0, "nothing was sent");
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });
    let client = middleware.client(reqwest::Client::builder()).unwrap().build();
    let ends = steady(&client, &server.url("/r"), 100 * MS, 900, false).await;

    // Ten calls a second: from 20 s into the outage on, at most a tenth of
    // them, with their retries, reach the server.
    let offered = 400;
    let late = arrivals.within(20 * S..60 * S);
    assert!(late * 10 <= offered, "{late} requests from 400 calls");
    let throttled = count(&ends, 20 * S..60 * S, Ended::Throttled);
    assert!(throttled * 10 >= offered * 9, "{throttled} of 400 calls kept back");
    assert_eq!(stops.load(Ordering::Relaxed), count(&ends, ZERO..90 * S, Ended::Throttled));
    // Once the server serves again, within 3 s every call goes and succeeds.
    assert_eq!(count(&ends, 63 * S..90 * S, Ended::Status(200)), 270);
}

#[tokio::test(start_paused = true)]
async fn a_call_marked_to_skip_the_throttle_is_sent_and_counts() {
    let arrivals = Arrivals::new();
    let server = down_for(&arrivals, 60 * S).await;
    let client = quick_start(RetryConfig::default());
    let url = server.url("/r");
    steady(&client, &url, 100 * MS, 300, false).await;
    let before = arrivals.len();
    let marked = steady(&client, &url, 100 * MS, 10, true).await;
    assert!(marked.iter().all(|(_, end)| *end == Ended::Status(503)), "{marked:?}");
    assert!(arrivals.len() >= before + 10, "each was sent");
    let unmarked = steady(&client, &url, 100 * MS, 10, false).await;
    assert!(count(&unmarked, ZERO..S, Ended::Throttled) >= 8, "{unmarked:?}");
}

#[tokio::test(start_paused = true)]
async fn with_the_throttle_off_every_call_is_sent() {
    let arrivals = Arrivals::new();
    let server = down_for(&arrivals, 60 * S).await;
    let config = RetryConfig::builder().with_throttling(false).build().unwrap();
    let client = quick_start(config);
    let ends = steady(&client, &server.url("/r"), 100 * MS, 300, false).await;
    assert_eq!(count(&ends, ZERO..30 * S, Ended::Status(503)), 300);
}

#[tokio::test(start_paused = true)]
async fn a_quiet_caller_is_never_kept_back() {
    let arrivals = Arrivals::new();
    let server = down_for(&arrivals, 120 * S).await;
    let client = quick_start(RetryConfig::default());
    let ends = steady(&client, &server.url("/r"), 2 * S, 60, false).await;
    assert_eq!(count(&ends, ZERO..120 * S, Ended::Status(503)), 60, "every call went");
}

#[tokio::test(start_paused = true)]
async fn refused_connections_count_as_rejections() {
    let url = crate::support::refused_address().await;
    let client = quick_start(RetryConfig::default());
    let ends = steady(&client, &url, 100 * MS, 300, false).await;
    let throttled = count(&ends, 10 * S..30 * S, Ended::Throttled);
    assert!(throttled >= 180, "{throttled} of 200 calls kept back");
    assert_eq!(
        count(&ends, ZERO..30 * S, Ended::Failed) + count(&ends, ZERO..30 * S, Ended::Throttled),
        300
    );
}

#[tokio::test(start_paused = true)]
async fn half_the_answers_failing_at_random_keeps_every_call() {
    let arrivals = Arrivals::new();
    // A hash of the request's index: every other answer or so fails,
    // independently of load.
    let flaky = |index: usize| (index.wrapping_mul(0x9E37_79B9) >> 7) % 2 == 0;
    let server =
        server(&arrivals, move |index, _| if flaky(index) { (503, None) } else { (200, None) })
            .await;
    let client = quick_start(RetryConfig::default());
    let ends = steady(&client, &server.url("/r"), 100 * MS, 600, false).await;
    assert_eq!(count(&ends, ZERO..60 * S, Ended::Throttled), 0);
}

#[cfg(feature = "tracing")]
#[tokio::test(start_paused = true)]
async fn a_call_kept_back_is_logged_with_the_throttled_label() {
    let captured = crate::support::capture_logs(tracing::Level::DEBUG);
    let arrivals = Arrivals::new();
    let server = down_for(&arrivals, 60 * S).await;
    let client = quick_start(RetryConfig::default());
    let ends = steady(&client, &server.url("/r"), 100 * MS, 200, false).await;
    let kept_back = count(&ends, ZERO..20 * S, Ended::Throttled);
    assert!(kept_back > 0);
    let text = captured.text();
    let logged = text.lines().filter(|line| line.contains(r#"retry.stop="throttled""#)).count();
    assert_eq!(logged, kept_back, "one event per call kept back");
    assert!(text.contains("not retrying request: throttled"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_request_sent_with_no_copy_still_teaches_the_throttle() {
    // No retries: every attempt goes out with no copy kept to name its
    // host by, and the throttle still hears each answer, whatever the
    // budget (a per-host one keeps the host in the table, the others not).
    use reqwest_safe_retry::{BudgetScope, RetryBudget};
    let global = RetryBudget::default().with_scope(BudgetScope::Global);
    for budget in [Some(RetryBudget::default()), None, Some(global)] {
        let arrivals = Arrivals::new();
        let server = down_for(&arrivals, 60 * S).await;
        let config =
            RetryConfig::builder().with_max_retries(0).with_budget(budget).build().unwrap();
        let client = quick_start(config);
        let ends = steady(&client, &server.url("/r"), 100 * MS, 300, false).await;
        assert!(count(&ends, 20 * S..30 * S, Ended::Throttled) >= 90, "{budget:?}: {ends:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn rejections_count_even_where_they_are_not_retried() {
    // 503 is not retried here, so each is a final answer: still a
    // rejection for the throttle.
    let arrivals = Arrivals::new();
    let server = down_for(&arrivals, 60 * S).await;
    let config = RetryConfig::builder()
        .with_retryable_statuses([http::StatusCode::TOO_MANY_REQUESTS])
        .build()
        .unwrap();
    let client = quick_start(config);
    let ends = steady(&client, &server.url("/r"), 100 * MS, 300, false).await;
    assert!(count(&ends, 20 * S..30 * S, Ended::Throttled) >= 90, "{ends:?}");
}

/// A server that takes `per_sec` requests a second, a token bucket holding
/// two seconds' worth, and answers 503 to the rest.
async fn taking(arrivals: &Arrivals, per_sec: f64) -> RawServer {
    let depth = 2.0 * per_sec;
    let bucket = Mutex::new((depth, ZERO));
    server(arrivals, move |_, at| {
        let mut bucket = bucket.lock().unwrap();
        let (tokens, last) = &mut *bucket;
        *tokens = (*tokens + (at - *last).as_secs_f64() * per_sec).min(depth);
        *last = at;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            (200, None)
        } else {
            (503, None)
        }
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn calls_come_back_when_a_spike_ends() {
    // A server taking ten requests a second is offered a hundred calls a
    // second for 20 s; then the calls fall to what it takes, half of it, or
    // one every two seconds, for 30 s. Every call started from 2 s after
    // the spike (at least 99 in 100) ends 200, as with no throttle.
    for after in [100 * MS, 200 * MS, 2 * S] {
        let arrivals = Arrivals::new();
        let server = taking(&arrivals, 10.0).await;
        let client = quick_start(RetryConfig::default());
        let spike = (0..2_000).map(|n| 10 * MS * n);
        let fall =
            (0..30 * S.as_millis() as u32 / after.as_millis() as u32).map(|n| 20 * S + after * n);
        let ends = calls_at(&client, &server.url("/r"), spike.chain(fall), false).await;
        let later = ends.iter().filter(|(at, _)| *at >= 22 * S).count();
        let served = count(&ends, 22 * S..60 * S, Ended::Status(200));
        assert!(served * 100 >= later * 99, "every {after:?}: {served} of {later} served");
        // In the spike, first attempts went at a few times what it took.
        let throttled = count(&ends, 10 * S..20 * S, Ended::Throttled);
        assert!(throttled >= 500, "every {after:?}: {throttled} of 1000 kept back in the spike");
    }
}

#[tokio::test]
async fn a_test_looping_on_a_failing_mock_meets_the_throttle_and_is_told_the_way_out() {
    // What a user's test sees: the quick start on a manual clock, fifty
    // calls in a row to a mock that always answers 503. The waits move the
    // clock, not the test, so the rejections soon span the seconds that
    // call a host down; the calls kept back say so, and how to send every
    // call anyway.
    use reqwest_safe_retry::clock::ManualClock;
    let arrivals = Arrivals::new();
    let server = down_for(&arrivals, 3_600 * S).await;
    let url = server.url("/r");
    let ends = |config: RetryConfig| {
        let client = RetryMiddleware::new(config)
            .with_clock(ManualClock::new())
            .with_jitter_source(reqwest_safe_retry::jitter::FixedJitter::TOP)
            .client(reqwest::Client::builder())
            .unwrap()
            .build();
        let url = url.clone();
        async move {
            let mut ends = Vec::new();
            for _ in 0..50 {
                ends.push(client.get(&url).send().await);
            }
            ends
        }
    };
    let looped = ends(RetryConfig::default()).await;
    let kept_back: Vec<String> = looped
        .iter()
        .filter_map(|end| match end {
            Err(reqwest_middleware::Error::Middleware(e)) if e.is::<Throttled>() => {
                Some(e.to_string())
            }
            _ => None,
        })
        .collect();
    // Pinned, with the jitter fixed: 43 requests reach the mock (the
    // budget's reserve pays for the first calls' retries, then each call
    // is sent once), and 12 of the 50 calls are kept back unsent, the
    // first of them the 12th call.
    assert_eq!(arrivals.len(), 43);
    assert_eq!(kept_back.len(), 12, "the throttle acts under a manual clock as anywhere");
    let first = looped.iter().position(|end| end.is_err());
    assert_eq!(first, Some(11));
    let told = &kept_back[0];
    assert!(told.starts_with("not sent: its host accepted about "), "{told}");
    assert!(told.contains("with_throttling(false)"), "{told}");
    assert!(told.contains("rate_limit::SkipThrottling"), "{told}");
    // With the throttle off, every call is sent and ends 503; with the
    // budget off as well, every call is also retried as configured (three
    // times), as the README's testing section says.
    let config = RetryConfig::builder().with_throttling(false).build().unwrap();
    let before = arrivals.len();
    let sent = ends(config).await;
    assert!(sent.iter().all(|end| matches!(end, Ok(r) if r.status() == 503)));
    assert!(arrivals.len() - before < 4 * 50, "the budget still holds retries back");
    let config = RetryConfig::builder().with_throttling(false).with_budget(None).build().unwrap();
    let before = arrivals.len();
    let sent = ends(config).await;
    assert!(sent.iter().all(|end| matches!(end, Ok(r) if r.status() == 503)));
    assert_eq!(arrivals.len() - before, 4 * 50);
}
