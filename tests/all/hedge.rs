//! Hedged requests against a loopback server whose answers are delayed in
//! tokio's paused time: when a hedge is sent, which copy wins, what is
//! cancelled, and which requests are never hedged.

mod idempotency_key;

use crate::support;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::hedge::{
    HedgeConfig, HedgeConfigBuilder, HedgeMiddleware, HedgeReport, HedgeSlot,
};
use reqwest_safe_retry::{RetryBudget, RetryConfig, RetryMiddleware, clock::ManualClock};
use std::sync::Arc;
use std::time::Duration;
use support::{Counter, MS, RawServer};
use tokio::time::Instant;

const SLOW: Duration = Duration::from_secs(60);

/// What the server does with the n-th request it reads: answer with the
/// status after the delay, or with status 0 close the connection at once.
#[derive(Clone, Copy)]
struct Answer(Duration, u16);

struct Server {
    url: String,
    /// Requests read.
    requests: Counter,
    /// Requests whose connection the client closed before the answer.
    abandoned: Counter,
    _raw: RawServer,
}

/// Answers request n after `script[n]`'s delay (the last repeats), with a
/// body naming n, on keep-alive connections.
async fn server(script: Vec<Answer>) -> Server {
    let (requests, abandoned) = (Counter::default(), Counter::default());
    let (seen, lost) = (requests.clone(), abandoned.clone());
    let script = Arc::new(script);
    let raw = RawServer::start(move |mut conn| {
        let (script, seen, lost) = (script.clone(), seen.clone(), lost.clone());
        async move {
            while let Some(request) = conn.request().await {
                let n = request.index;
                seen.bump();
                let Answer(delay, status) = script[n.min(script.len() - 1)];
                if status == 0 {
                    // Closes the connection without an answer.
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = conn.hang() => {
                        lost.bump();
                        return;
                    }
                }
                let body = format!("copy {n}");
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nretry-after: 1\r\n\r\n",
                    body.len()
                );
                if conn.write(head + &body).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    Server { url: raw.url("/item"), requests, abandoned, _raw: raw }
}

fn client(config: HedgeConfigBuilder) -> (ClientWithMiddleware, HedgeMiddleware) {
    let hedge = HedgeMiddleware::new(config.build().unwrap());
    let client =
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(hedge.clone()).build();
    (client, hedge)
}

fn fixed(delay: Duration) -> HedgeConfigBuilder {
    HedgeConfig::builder().with_delay(delay)
}

/// Sends a GET; returns the status, the body, the report and the time taken.
async fn get(client: &ClientWithMiddleware, url: &str) -> (u16, String, HedgeReport, Duration) {
    let start = Instant::now();
    let slot = HedgeSlot::new();
    let response = ends(client.get(url).with_extension(slot.clone()).send()).await.unwrap();
    let report = HedgeReport::from_response(&response).unwrap();
    assert_eq!(slot.get(), Some(report));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap(), report, start.elapsed())
}

/// Awaits `call`, failing the test if it has not ended by the time the
/// slowest answer is long overdue (in paused time, at once): a call that
/// stops making progress fails here instead of hanging.
async fn ends<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(SLOW * 10, call).await.expect("the call never ended")
}

fn report(copies: u32, winner: u32) -> (u32, u32) {
    (copies, winner)
}

fn pair(r: HedgeReport) -> (u32, u32) {
    (r.copies, r.winner)
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_copy_is_beaten_by_a_hedge_sent_after_the_delay() {
    let server = server(vec![Answer(SLOW, 200), Answer(Duration::ZERO, 200)]).await;
    let (client, _) = client(fixed(100 * MS));
    let (status, body, r, took) = get(&client, &server.url).await;
    assert_eq!((status, body.as_str()), (200, "copy 1"));
    assert_eq!(pair(r), report(2, 2));
    assert!(took >= 100 * MS && took < 110 * MS, "{took:?}");
    assert_eq!(server.requests.get(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_delay_is_waited_on_the_clock_given() {
    // The hedge waits for the manual clock's time: it goes out once the
    // test moves that clock past the delay, without tokio's time moving,
    // and records no sleep of its own.
    let server = server(vec![Answer(SLOW, 200), Answer(Duration::ZERO, 200)]).await;
    let clock = ManualClock::new();
    let config = fixed(100 * MS).with_max_copies(2).build().unwrap();
    let hedge = HedgeMiddleware::new(config.clone()).with_clock(clock.clone());
    assert_eq!(hedge.config(), &config);
    let printed = format!("{hedge:?}");
    assert!(printed.starts_with("HedgeMiddleware") && printed.contains("ManualClock"), "{printed}");
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(hedge).build();
    let move_clock = async {
        // Busy, so tokio's paused time does not jump to the slow answer.
        while server.requests.get() < 1 {
            tokio::task::yield_now().await;
        }
        clock.advance(100 * MS);
    };
    let ((status, body, r, took), ()) = tokio::join!(get(&client, &server.url), move_clock);
    assert_eq!((status, body.as_str(), pair(r)), (200, "copy 1", report(2, 2)));
    assert!(clock.sleeps().is_empty());
    assert!(took < 100 * MS, "tokio's clock moved {took:?}");
}

#[tokio::test(start_paused = true)]
async fn the_losing_copy_is_cancelled_and_its_connection_closed() {
    let server = server(vec![Answer(SLOW, 200), Answer(5 * MS, 200)]).await;
    let (client, _) = client(fixed(100 * MS));
    let (_, body, _, _) = get(&client, &server.url).await;
    assert_eq!(body, "copy 1");
    // The server sees the slow copy's connection closed, long before it
    // would have answered.
    let closed = tokio::time::timeout(Duration::from_secs(1), async {
        while server.abandoned.get() == 0 {
            tokio::time::sleep(MS).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "the losing copy's connection is still open");
    assert_eq!(server.abandoned.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_fast_answer_sends_no_hedge() {
    let server = server(vec![Answer(30 * MS, 200)]).await;
    let (client, _) = client(fixed(100 * MS));
    let (status, _, r, took) = get(&client, &server.url).await;
    assert_eq!((status, pair(r)), (200, report(1, 1)));
    assert!(took < 100 * MS, "{took:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(server.requests.get(), 1, "no copy went out after the answer");
}

#[tokio::test(start_paused = true)]
async fn an_unsafe_post_is_never_hedged_but_a_keyed_one_is() {
    let server =
        server(vec![Answer(500 * MS, 200), Answer(SLOW, 200), Answer(Duration::ZERO, 200)]).await;
    let (client, _) = client(fixed(100 * MS));
    let slot = HedgeSlot::new();
    let response = ends(client.post(&server.url).body("order").with_extension(slot.clone()).send())
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "copy 0");
    assert_eq!(slot.get().map(pair), Some(report(1, 1)));
    assert_eq!(server.requests.get(), 1);

    let response =
        ends(client.post(&server.url).header("Idempotency-Key", "order-7").body("order").send())
            .await
            .unwrap();
    assert_eq!(HedgeReport::from_response(&response).map(pair), Some(report(2, 2)));
    assert_eq!(response.text().await.unwrap(), "copy 2");
}

#[tokio::test(start_paused = true)]
async fn the_budget_stops_hedges_once_spent() {
    // A reserve of one hedge and nothing earned: one hedge, then none.
    let budget = RetryBudget::default().with_ratio(0.0).with_reserve(1);
    let server =
        server(vec![Answer(SLOW, 200), Answer(Duration::ZERO, 200), Answer(500 * MS, 200)]).await;
    let (client, _) = client(fixed(100 * MS).with_budget(budget));
    let (_, _, first, _) = get(&client, &server.url).await;
    assert_eq!(pair(first), report(2, 2));
    let (_, body, second, took) = get(&client, &server.url).await;
    assert_eq!((body.as_str(), pair(second)), ("copy 2", report(1, 1)));
    assert!(took >= 500 * MS, "{took:?}");
    assert_eq!(server.requests.get(), 3);
}

#[cfg(feature = "tracing")]
#[tokio::test(start_paused = true)]
async fn each_hedge_sent_or_refused_is_logged_with_its_number() {
    let logs = support::capture_logs(tracing::Level::DEBUG);
    // A reserve of one hedge: copy 2 is paid for, copy 3 is refused.
    let budget = RetryBudget::default().with_ratio(0.0).with_reserve(1);
    let server = server(vec![Answer(SLOW, 200)]).await;
    let (client, _) = client(fixed(100 * MS).with_max_copies(3).with_budget(budget));
    let (_, _, r, _) = get(&client, &server.url).await;
    assert_eq!(pair(r), report(2, 1));
    let text = logs.text();
    let lines = |what: &str| -> Vec<String> {
        text.lines().filter(|line| line.contains(what)).map(String::from).collect()
    };
    let (sent, refused) = (lines("sending hedged copy"), lines("budget exhausted"));
    assert_eq!((sent.len(), refused.len()), (1, 1), "{text}");
    for (line, copy) in [(&sent[0], "copy=2"), (&refused[0], "copy=3")] {
        assert!(line.contains(copy) && line.contains("delay_ms=100"), "{line}");
        assert!(line.contains("127.0.0.1") && !line.contains("/item"), "{line}");
    }
}

#[tokio::test(start_paused = true)]
async fn no_more_than_max_copies_are_sent() {
    let server = server(vec![Answer(SLOW, 200)]).await;
    let (client, _) = client(fixed(100 * MS).with_max_copies(3).with_budget(None));
    let (_, body, r, took) = get(&client, &server.url).await;
    // Copies at 0, 100 and 200 ms, all slow: the first answers first.
    assert_eq!((body.as_str(), pair(r)), ("copy 0", report(3, 1)));
    assert!(took >= SLOW && took < SLOW + 10 * MS, "{took:?}");
    assert_eq!(server.requests.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_429_stops_further_hedges_and_a_final_answer_still_wins() {
    let server = server(vec![Answer(SLOW, 200), Answer(50 * MS, 429)]).await;
    let (client, _) = client(fixed(100 * MS).with_max_copies(3).with_budget(None));
    let (status, body, r, _) = get(&client, &server.url).await;
    assert_eq!((status, body.as_str(), pair(r)), (200, "copy 0", report(2, 1)));
    assert_eq!(server.requests.get(), 2, "no third copy after the 429");
}

#[tokio::test(start_paused = true)]
async fn a_429_is_returned_once_no_copy_is_left() {
    let server = server(vec![Answer(SLOW, 503), Answer(50 * MS, 429)]).await;
    let (client, _) = client(fixed(100 * MS).with_max_copies(3).with_budget(None));
    let (status, body, r, took) = get(&client, &server.url).await;
    // Both struggled: the first such answer is the one returned, when the
    // last copy has answered too.
    assert_eq!((status, body.as_str(), pair(r)), (429, "copy 1", report(2, 2)));
    assert!(took >= SLOW, "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn the_delay_follows_the_hosts_latency_quantile() {
    // Slowest first, so that no answer is slower than the p95 of those
    // before it: none of them is hedged.
    let mut script: Vec<Answer> = (1..=40).rev().map(|ms| Answer(ms * MS, 200)).collect();
    script.push(Answer(SLOW, 200));
    script.push(Answer(Duration::ZERO, 200));
    let server = server(script).await;
    // The default quantile, p95, with a fallback far from every latency.
    let (client, hedge) = client(HedgeConfig::builder().with_fallback_delay(500 * MS));
    let url: reqwest::Url = server.url.parse().unwrap();
    assert_eq!(hedge.delay_for(&url), 500 * MS, "the fallback, before any answer");
    for n in 1..=40 {
        let (_, _, r, _) = get(&client, &server.url).await;
        assert_eq!(pair(r), report(1, 1));
        if n == 19 {
            assert_eq!(hedge.delay_for(&url), 500 * MS, "the fallback, with 19 answers");
        }
    }
    // Latencies of 1 to 40 ms: the p95 is the 38th, 38 ms.
    let delay = hedge.delay_for(&url);
    assert!(delay >= 38 * MS && delay < 39 * MS, "{delay:?}");
    let (_, body, r, took) = get(&client, &server.url).await;
    assert_eq!((body.as_str(), pair(r)), ("copy 41", report(2, 2)));
    assert!(took >= 38 * MS && took < 43 * MS, "{took:?}");
    // Another host has its own latencies: the fallback.
    let other: reqwest::Url = "http://127.0.0.2:1/".parse().unwrap();
    assert_eq!(hedge.delay_for(&other), 500 * MS);
}

#[tokio::test(start_paused = true)]
async fn inside_the_retry_middleware_each_attempt_is_hedged() {
    // Attempt 1: a slow copy and a hedge that meets a 503; the slow copy
    // then says 503 too, the retry middleware waits and tries again.
    let server = server(vec![
        Answer(200 * MS, 503),
        Answer(Duration::ZERO, 503),
        Answer(SLOW, 200),
        Answer(Duration::ZERO, 200),
    ])
    .await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(RetryConfig::builder().with_budget(None).build().unwrap()))
        .with(HedgeMiddleware::new(fixed(100 * MS).with_budget(None).build().unwrap()))
        .build();
    let (status, body, r, _) = get(&client, &server.url).await;
    assert_eq!((status, body.as_str(), pair(r)), (200, "copy 3", report(2, 2)));
    assert_eq!(server.requests.get(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_body_that_cannot_be_copied_is_sent_once() {
    use reqwest_safe_retry::SafeToRetry;

    let server =
        server(vec![Answer(SLOW, 200), Answer(Duration::ZERO, 200), Answer(300 * MS, 200)]).await;
    let (client, _) = client(fixed(100 * MS));
    // Declared safe, with a body in memory: hedged.
    let response = ends(client.post(&server.url).body("order").with_extension(SafeToRetry).send())
        .await
        .unwrap();
    assert_eq!(HedgeReport::from_response(&response).map(pair), Some(report(2, 2)));
    // The same with a streamed body, which cannot be copied: sent once.
    let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>("order")]);
    let response = ends(
        client
            .post(&server.url)
            .body(reqwest::Body::wrap_stream(chunks))
            .with_extension(SafeToRetry)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(HedgeReport::from_response(&response).map(pair), Some(report(1, 1)));
    assert_eq!(response.text().await.unwrap(), "copy 2");
    assert_eq!(server.requests.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_failure_is_returned_when_no_copy_is_left_and_is_not_hedged() {
    let server = server(vec![Answer(Duration::ZERO, 0), Answer(Duration::ZERO, 200)]).await;
    let (client, _) = client(fixed(100 * MS));
    let slot = HedgeSlot::new();
    let start = Instant::now();
    let error =
        ends(client.get(&server.url).with_extension(slot.clone()).send()).await.unwrap_err();
    assert!(error.is_request() || error.is_connect(), "{error:?}");
    assert!(start.elapsed() < 100 * MS, "returned before the hedge was due");
    assert_eq!(slot.get().map(pair), Some(report(1, 1)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(server.requests.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn final_answers_earn_the_hedges() {
    // No reserve, half a hedge per final answer.
    let budget = RetryBudget::default().with_ratio(0.5).with_reserve(0);
    let server = server(vec![
        Answer(500 * MS, 200),
        Answer(Duration::ZERO, 200),
        Answer(SLOW, 200),
        Answer(Duration::ZERO, 200),
    ])
    .await;
    let (client, _) = client(fixed(100 * MS).with_budget(budget));
    let (_, _, r, took) = get(&client, &server.url).await;
    assert_eq!(pair(r), report(1, 1), "nothing earned yet");
    assert!(took >= 500 * MS, "{took:?}");
    let (_, _, r, _) = get(&client, &server.url).await;
    assert_eq!(pair(r), report(1, 1));
    // Two answers have paid for one hedge.
    let (_, body, r, _) = get(&client, &server.url).await;
    assert_eq!((body.as_str(), pair(r)), ("copy 3", report(2, 2)));
}

/// Under `ManualClock` a hedge's delay is a wait for the clock's time: a
/// copy is hedged only once the test moves the clock past it, and hedging
/// moves no time itself, so a deadline on the same clock is not spent by
/// timers (the clock's docs say so).
#[tokio::test]
async fn under_a_manual_clock_a_hedge_waits_for_the_test_to_move_time() {
    let delay = Duration::from_secs(1);
    let config = HedgeConfig::builder().with_delay(delay).with_budget(None).build().unwrap();
    // The first copy is answered late, the second at once.
    let server = server(vec![Answer(SLOW, 200), Answer(Duration::ZERO, 200)]).await;
    let clock = ManualClock::new();
    let hedge = HedgeMiddleware::new(config).with_clock(clock.clone());
    let retry = RetryMiddleware::new(
        RetryConfig::builder().with_deadline(Duration::from_secs(10)).build().unwrap(),
    )
    .with_clock(clock.clone());
    let client = retry.client(reqwest::Client::builder()).unwrap().with(hedge).build();
    let slot = HedgeSlot::new();
    let call = client.get(&server.url).with_extension(slot.clone()).send();
    let hedged = async {
        // Nothing is hedged while the time stands, however long.
        while server.requests.get() < 1 {
            tokio::task::yield_now().await;
        }
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(server.requests.get(), 1, "no hedge before the delay");
        assert_eq!(clock.elapsed(), Duration::ZERO, "the timer moved no time");
        clock.advance(delay);
        while server.requests.get() < 2 {
            tokio::task::yield_now().await;
        }
    };
    let (result, ()) =
        tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(call, hedged) })
            .await
            .expect("bounded");
    assert_eq!(result.unwrap().status(), 200);
    let report = slot.get().expect("a hedge report");
    assert_eq!((report.copies, report.winner), (2, 2));
}
