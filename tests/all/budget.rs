//! The retry budget: what earns retries and what spends them, per host or
//! shared, its reserve and its window, and that it bounds retries under load.

mod bodies;

use crate::support;

use reqwest_middleware::ClientWithMiddleware;

use reqwest_safe_retry::rate_limit::Throttled;
use reqwest_safe_retry::{Backoff, RetryAfter};
use reqwest_safe_retry::{
    RetryBudget, RetryConfig, RetryMiddleware, clock::ManualClock, jitter::FixedJitter,
    report::Decision, report::RetryReport, report::StopReason,
};

use std::time::Duration;

use support::*;

use wiremock::matchers::{any, header};

use wiremock::{Mock, MockServer, ResponseTemplate};

/// Zero-length waits, so the manual clock moves only when the test moves it.
fn instant_retries(budget: RetryBudget) -> RetryConfig {
    RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO).with_max(Duration::ZERO))
        .with_budget(budget)
        .build()
        .unwrap()
}

fn middleware(config: RetryConfig) -> (RetryMiddleware, ManualClock) {
    let clock = ManualClock::new();
    let middleware =
        RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    (middleware, clock)
}

async fn report(client: &ClientWithMiddleware, url: &str) -> RetryReport {
    let response = client.get(url).send().await.unwrap();
    RetryReport::from_response(&response)
}

async fn down(server: &MockServer) -> String {
    script_statuses(server, "/down", &[503]).await;
    format!("{}/down", server.uri())
}

#[tokio::test]
async fn retries_stop_when_the_budget_is_spent() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    // Nothing earned, a reserve of 10: 10 retries.
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_reserve(10)));
    let client = wrap(middleware);
    let mut reports = Vec::new();
    for _ in 0..5 {
        reports.push(report(&client, &url).await);
    }
    let attempts: Vec<u32> = reports.iter().map(|r| r.attempts).collect();
    assert_eq!(attempts, [4, 4, 4, 2, 1]);
    assert_eq!(reports[2].stop, StopReason::RetriesExhausted);
    assert_eq!(reports[3].stop, StopReason::BudgetExhausted);
    assert_eq!(reports[4].stop, StopReason::BudgetExhausted);
    assert_eq!(hits(&server).await, 15);
}

#[tokio::test]
async fn time_alone_refills_nothing_and_answers_do() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    script_statuses(&server, "/ok", &[200]).await;
    let ok = format!("{}/ok", server.uri());
    let (middleware, clock) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.5).with_reserve(3)));
    let client = wrap(middleware);
    assert_eq!(report(&client, &url).await.attempts, 4);
    assert_eq!(report(&client, &url).await.stop, StopReason::BudgetExhausted);
    // A long quiet spell grants nothing: no burst when an outage drags on.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(report(&client, &url).await.stop, StopReason::BudgetExhausted);
    // Two answers earn one retry, into the reserve: each answer earns once.
    for _ in 0..2 {
        report(&client, &ok).await;
    }
    let retried = report(&client, &url).await;
    assert_eq!((retried.attempts, retried.stop), (2, StopReason::BudgetExhausted));
}

#[tokio::test]
async fn earnings_lapse_after_the_window() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    script_statuses(&server, "/ok", &[200]).await;
    let ok = format!("{}/ok", server.uri());
    let (middleware, clock) =
        middleware(instant_retries(RetryBudget::default().with_ratio(1.0).with_reserve(0)));
    let client = wrap(middleware);
    for _ in 0..5 {
        report(&client, &ok).await;
    }
    clock.advance(Duration::from_secs(10));
    let late = report(&client, &url).await;
    assert_eq!((late.attempts, late.stop), (1, StopReason::BudgetExhausted));
}

#[tokio::test]
async fn a_quiet_client_still_gets_its_retry() {
    // The default budget: a client that sends a request a minute, so that
    // nothing it earned stays in the window, meets an isolated 503 now and
    // then among its successes, and retries each one from its reserve.
    let server = MockServer::start().await;
    let mut script = vec![503, 200];
    for _ in 0..2 {
        script.extend([200; 10]);
        script.extend([503, 200]);
    }
    script_statuses(&server, "/r", &script).await;
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO))
        .build()
        .unwrap();
    let (middleware, clock) = middleware(config);
    let client = wrap(middleware);
    let url = format!("{}/r", server.uri());
    let mut retried = Vec::new();
    for _ in 0..23 {
        let report = report(&client, &url).await;
        if report.attempts > 1 {
            retried.push((report.attempts, report.stop));
        }
        clock.advance(Duration::from_secs(60));
    }
    assert_eq!(retried, vec![(2, StopReason::NothingToRetry); 3]);
}

#[tokio::test]
async fn a_fresh_client_gets_its_configured_retries() {
    // The default reserve holds one call's retries and two more, so the
    // first call of a fresh process rides out an isolated failure in full.
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 503, 200]).await;
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO))
        .build()
        .unwrap();
    let (fresh, _) = middleware(config);
    let first = report(&wrap(fresh), &format!("{}/r", server.uri())).await;
    assert_eq!((first.attempts, first.stop), (4, StopReason::NothingToRetry));
    // The reserve follows the retry count...
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 503, 503, 503, 503, 200]).await;
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO))
        .with_max_retries(6)
        .build()
        .unwrap();
    let (more, _) = middleware(config);
    let first = report(&wrap(more), &format!("{}/r", server.uri())).await;
    assert_eq!((first.attempts, first.stop), (7, StopReason::NothingToRetry));
    // ... and a smaller one caps what a fleet of one-shot processes costs.
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO))
        .with_budget(RetryBudget::default().with_reserve(1))
        .build()
        .unwrap();
    let (capped, _) = middleware(config);
    let first = report(&wrap(capped), &format!("{}/r", server.uri())).await;
    assert_eq!((first.attempts, first.stop), (2, StopReason::BudgetExhausted));
}

#[tokio::test]
async fn the_first_call_after_a_long_quiet_spell_gets_its_retries() {
    let server = MockServer::start().await;
    let mut script = vec![200; 20];
    script.extend([503, 503, 503, 200]);
    script_statuses(&server, "/r", &script).await;
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO))
        .build()
        .unwrap();
    let (middleware, clock) = middleware(config);
    let client = wrap(middleware);
    let url = format!("{}/r", server.uri());
    for _ in 0..20 {
        assert_eq!(report(&client, &url).await.attempts, 1);
    }
    // An hour later nothing earned is left in the window; the reserve is.
    clock.advance(Duration::from_secs(3600));
    let after = report(&client, &url).await;
    assert_eq!((after.attempts, after.stop), (4, StopReason::NothingToRetry));
}

#[tokio::test]
async fn a_retry_that_succeeds_is_given_back() {
    // Nothing earned and one retry on credit: without the refund the second
    // call could not retry.
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 200, 503, 200, 503, 503]).await;
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_reserve(1)));
    let client = wrap(middleware);
    let url = format!("{}/r", server.uri());
    for _ in 0..2 {
        let retried = report(&client, &url).await;
        assert_eq!((retried.attempts, retried.stop), (2, StopReason::NothingToRetry));
    }
    // A retry that fails is not: the reserve is spent, and stays spent.
    let failed = report(&client, &url).await;
    assert_eq!((failed.attempts, failed.stop), (2, StopReason::BudgetExhausted));
    let next = report(&client, &url).await;
    assert_eq!((next.attempts, next.stop), (1, StopReason::BudgetExhausted));
}

#[tokio::test]
async fn a_retry_the_caller_cancelled_before_it_was_sent_is_given_back() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let gate = Gate::default();
    let config = RetryConfig::builder()
        .with_budget(RetryBudget::default().with_ratio(0.0).with_reserve(1))
        .build()
        .unwrap();
    let middleware =
        RetryMiddleware::new(config).with_clock(gate.clone()).with_jitter_source(FixedJitter::TOP);
    let client = wrap(middleware);
    let url = format!("{}/r", server.uri());
    // The first call is dropped during its wait: its retry never went out.
    let call = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(url).send().await }
    });
    gate.waiting().await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert_eq!(hits(&server).await, 1);
    // So the reserve still holds the retry the next call needs.
    gate.open();
    let next = report(&client, &url).await;
    assert_eq!((next.attempts, next.stop), (2, StopReason::NothingToRetry));
}

#[tokio::test]
async fn a_first_429_whose_wait_the_server_chose_costs_the_budget_nothing() {
    // A burst of a fresh process, refused with 429 and Retry-After: 1: the
    // server asked for every call's first retry and set its time, so all
    // are taken, though nothing has been earned and the reserve is empty.
    let server = MockServer::start().await;
    let clock = ManualClock::new();
    let config = RetryConfig::builder()
        .with_budget(RetryBudget::default().with_ratio(0.0).with_reserve(0))
        .build()
        .unwrap();
    let middleware =
        RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    let client = wrap(middleware);
    for n in 0..20 {
        script(
            &server,
            &format!("/c{n}"),
            vec![
                wiremock::ResponseTemplate::new(429).insert_header("Retry-After", "1"),
                wiremock::ResponseTemplate::new(200),
            ],
        )
        .await;
    }
    let urls: Vec<String> = (0..20).map(|n| format!("{}/c{n}", server.uri())).collect();
    let reports = futures_util::future::join_all(urls.iter().map(|url| report(&client, url))).await;
    for retried in reports {
        assert_eq!((retried.attempts, retried.stop), (2, StopReason::NothingToRetry));
    }
    // A call refused again waits for the host's pause again, one request
    // a pause: the pause bounds it, and the budget does not pay.
    let again = || async {
        let server = MockServer::start().await;
        let refused = wiremock::ResponseTemplate::new(429).insert_header("Retry-After", "1");
        let answers = vec![refused.clone(), refused, wiremock::ResponseTemplate::new(200)];
        script(&server, "/again", answers).await;
        server
    };
    let server = again().await;
    let paused = report(&client, &format!("{}/again", server.uri())).await;
    assert_eq!((paused.attempts, paused.stop), (3, StopReason::NothingToRetry));
    // With the pause off, it is paid for: the server is shedding load.
    let unpaused = |retry_after: RetryAfter| {
        let config = RetryConfig::builder()
            .with_retry_after(retry_after.with_pause(false))
            .with_budget(RetryBudget::default().with_ratio(0.0).with_reserve(0))
            .build()
            .unwrap();
        wrap(self::middleware(config).0)
    };
    let server = again().await;
    let again = report(&unpaused(RetryAfter::default()), &format!("{}/again", server.uri())).await;
    assert_eq!((again.attempts, again.stop), (2, StopReason::BudgetExhausted));
    // Without the spread the returns would be synchronised: with the pause
    // off, the budget pays.
    let server = MockServer::start().await;
    script(
        &server,
        "/exact",
        vec![
            wiremock::ResponseTemplate::new(429).insert_header("Retry-After", "1"),
            wiremock::ResponseTemplate::new(200),
        ],
    )
    .await;
    let exact = unpaused(RetryAfter::default().with_spread(false));
    let unpaid = report(&exact, &format!("{}/exact", server.uri())).await;
    assert_eq!((unpaid.attempts, unpaid.stop), (1, StopReason::BudgetExhausted));
    // And a 503 with Retry-After is paid for like any other retry.
    let server = MockServer::start().await;
    script(
        &server,
        "/busy",
        vec![
            wiremock::ResponseTemplate::new(503).insert_header("Retry-After", "1"),
            wiremock::ResponseTemplate::new(200),
        ],
    )
    .await;
    let busy = unpaused(RetryAfter::default());
    let unpaid = report(&busy, &format!("{}/busy", server.uri())).await;
    assert_eq!((unpaid.attempts, unpaid.stop), (1, StopReason::BudgetExhausted));
}

/// With the pause on (the default), a `503` whose `Retry-After` pauses the
/// host costs the budget nothing either: the pause bounds its retries.
#[tokio::test]
async fn a_retry_that_waits_out_a_pause_costs_the_budget_nothing() {
    let server = MockServer::start().await;
    let busy = wiremock::ResponseTemplate::new(503).insert_header("Retry-After", "1");
    script(&server, "/busy", vec![busy.clone(), busy, wiremock::ResponseTemplate::new(200)]).await;
    let config = RetryConfig::builder()
        .with_budget(RetryBudget::default().with_ratio(0.0).with_reserve(0))
        .build()
        .unwrap();
    let (middleware, clock) = self::middleware(config);
    let paused = report(&wrap(middleware), &format!("{}/busy", server.uri())).await;
    assert_eq!((paused.attempts, paused.stop), (3, StopReason::NothingToRetry));
    // Each retry waited its Retry-After and the spread, and no more.
    assert_eq!(clock.sleeps(), [Duration::from_millis(1500), Duration::from_secs(2)]);
}

/// A server answering `/limited` with a 429 asking for `asked`, then 200.
async fn limited(asked: &str) -> (MockServer, String) {
    let server = MockServer::start().await;
    let refused = wiremock::ResponseTemplate::new(429).insert_header("Retry-After", asked);
    script(&server, "/limited", vec![refused, wiremock::ResponseTemplate::new(200)]).await;
    let url = format!("{}/limited", server.uri());
    (server, url)
}

#[tokio::test]
async fn a_429_asking_for_more_than_the_cap_is_paid_for_even_when_the_cap_is_waited() {
    // A limiter that asks every caller for an hour: with `WaitTheCap` each
    // caller may come back after the cap, but only as the budget allows,
    // since the server did not ask for that time.
    for (asked, reserve, attempts, stop) in [
        ("3600", 0, 1, StopReason::BudgetExhausted),
        ("3600", 1, 2, StopReason::NothingToRetry),
        ("30", 0, 2, StopReason::NothingToRetry),
    ] {
        let (_server, url) = limited(asked).await;
        let config = RetryConfig::builder()
            .with_retry_after(
                RetryAfter::default()
                    .with_over_cap(reqwest_safe_retry::RetryAfterOverCap::WaitTheCap),
            )
            .with_budget(RetryBudget::default().with_ratio(0.0).with_reserve(reserve))
            .build()
            .unwrap();
        let (middleware, clock) = self::middleware(config);
        let report = report(&wrap(middleware), &url).await;
        let case = format!("Retry-After {asked}, reserve {reserve}");
        assert_eq!((report.attempts, report.stop), (attempts, stop), "{case}");
        if attempts == 2 {
            // The cap (30 s), spread by up to the first ceiling.
            assert_eq!(clock.sleeps(), [Duration::from_millis(30_500)], "{case}");
        }
    }
}

/// A `Retry-After: 0` sets no time to come back: a limiter answering every
/// request so would get a free retry of each, twice its load, so the budget
/// pays for it.
#[tokio::test]
async fn a_429_asking_for_no_wait_is_paid_for() {
    for (asked, attempts, stop) in
        [("0", 1, StopReason::BudgetExhausted), ("1", 2, StopReason::NothingToRetry)]
    {
        let (_server, url) = limited(asked).await;
        let config = RetryConfig::builder()
            .with_budget(RetryBudget::default().with_ratio(0.0).with_reserve(0))
            .build()
            .unwrap();
        let (middleware, _) = self::middleware(config);
        let report = report(&wrap(middleware), &url).await;
        assert_eq!((report.attempts, report.stop), (attempts, stop), "Retry-After: {asked}");
    }
}

/// The README's note on its demo: two refused calls to one host, through
/// the quick start's client with the defaults, share the host's fresh
/// reserve of 5 retries.
#[tokio::test]
async fn two_refused_calls_to_one_host_share_its_reserve() {
    let (url, _port) = hops::refusing_port();
    let (middleware, _) = self::middleware(RetryConfig::default());
    let client = middleware.client(reqwest::Client::builder()).unwrap().build();
    let mut reports = Vec::new();
    for method in [reqwest::Method::GET, reqwest::Method::POST] {
        let slot = reqwest_safe_retry::report::ReportSlot::new();
        let result = client.request(method, &url).with_extension(slot.clone()).send().await;
        assert!(result.unwrap_err().is_connect());
        let report = slot.get().unwrap();
        reports.push((report.attempts, report.stop));
    }
    assert_eq!(reports, [(4, StopReason::RetriesExhausted), (3, StopReason::BudgetExhausted)]);
}

#[tokio::test]
async fn a_fleet_of_quiet_processes_adds_little_to_a_total_outage() {
    // A hundred processes, each with its own middleware and so its own
    // budget, each sending a request a second through a minute of outage:
    // together they add at most their reserves, one call's retries and two
    // more each: 1 + 5 / 60 the load, not a floor each per second. That is
    // the budget's bound alone; the default's throttle sends far fewer.
    let fleet = |config: RetryConfig| async move {
        let (mut calls, mut requests, mut throttled) = (0, 0, 0);
        for _ in 0..100 {
            let (middleware, clock) = middleware(config.clone());
            let client = reqwest_middleware::ClientBuilder::new(bare_reqwest())
                .with(middleware)
                .with(Answers::new(&[503]))
                .build();
            for _ in 0..60 {
                match client.get("http://down.test/").send().await {
                    Ok(response) => calls += RetryReport::from_response(&response).attempts,
                    Err(error) => {
                        assert!(is_throttled(&error), "{error}");
                        throttled += 1;
                    }
                }
                requests += 1;
                clock.advance(Duration::from_secs(1));
            }
        }
        (requests, calls, throttled)
    };
    let budget_alone = RetryConfig::builder().with_throttling(false).build().unwrap();
    let (requests, calls, throttled) = fleet(budget_alone).await;
    let amplification = f64::from(calls) / f64::from(requests);
    assert_eq!((requests, calls, throttled), (6000, 6500, 0), "five retries per process");
    assert!(amplification <= 1.1, "{amplification}");

    let (requests, calls, throttled) = fleet(RetryConfig::default()).await;
    assert_eq!(requests, 6000);
    // Per process: the dozen calls before ten rejections in a row over 4 s
    // say the host is down, the reserve's five retries, then one probe
    // each 2.5 s (this jitter source's draws never pass a share below 1).
    assert!(f64::from(calls) <= 0.6 * f64::from(requests), "{calls} calls");
    assert!(throttled >= requests / 2, "{throttled} calls kept back");
}

fn is_throttled(error: &reqwest_middleware::Error) -> bool {
    matches!(error, reqwest_middleware::Error::Middleware(e) if e.is::<Throttled>())
}

#[tokio::test]
async fn successful_traffic_earns_retries() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    script_statuses(&server, "/ok", &[200]).await;
    let ok = format!("{}/ok", server.uri());
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.5).with_reserve(0)));
    let client = wrap(middleware);
    // A failure earns nothing: no retry.
    assert_eq!(report(&client, &url).await.attempts, 1);
    // Three good answers earn one and a half retries: one.
    for _ in 0..3 {
        report(&client, &ok).await;
    }
    let retried = report(&client, &url).await;
    assert_eq!((retried.attempts, retried.stop), (2, StopReason::BudgetExhausted));
}

#[tokio::test]
async fn a_failing_host_does_not_spend_another_hosts_budget() {
    let failing = MockServer::start().await;
    let healthy = MockServer::start().await;
    let failing_url = down(&failing).await;
    let other_url = down(&healthy).await;
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_reserve(10)));
    let client = wrap(middleware);
    for _ in 0..5 {
        report(&client, &failing_url).await;
    }
    assert_eq!(report(&client, &failing_url).await.stop, StopReason::BudgetExhausted);
    assert_eq!(report(&client, &other_url).await.attempts, 4);
}

#[tokio::test]
async fn global_scope_shares_the_budget_across_hosts() {
    let a = MockServer::start().await;
    let b = MockServer::start().await;
    let (a_url, b_url) = (down(&a).await, down(&b).await);
    let budget = RetryBudget::default()
        .with_ratio(0.0)
        .with_reserve(10)
        .with_scope(reqwest_safe_retry::BudgetScope::Global);
    let (middleware, _) = middleware(instant_retries(budget));
    let client = wrap(middleware);
    for _ in 0..5 {
        report(&client, &a_url).await;
    }
    assert_eq!(report(&client, &b_url).await.stop, StopReason::BudgetExhausted);
}

#[tokio::test]
async fn clones_of_one_middleware_share_the_budget() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_reserve(10)));
    let first = wrap(middleware.clone());
    let second = wrap(middleware);
    for _ in 0..3 {
        report(&first, &url).await;
    }
    // 9 of 10 spent through the first client: the second gets one.
    assert_eq!(report(&second, &url).await.attempts, 2);
}

#[tokio::test]
async fn hook_sees_the_budget_stop() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    let stops = Counter::default();
    let count = stops.clone();
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_reserve(0)));
    let middleware = middleware.on_decision(move |event| {
        if event.decision == Decision::Stop(StopReason::BudgetExhausted) {
            count.bump();
        }
    });
    let client = wrap(middleware);
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(stops.get(), 1);
}

#[tokio::test]
async fn without_a_budget_only_the_count_bounds_retries() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO).with_max(Duration::ZERO))
        .with_budget(None)
        // Fifty calls into a host that rejects every attempt, in one instant:
        // the throttle would keep most of them back.
        .with_throttling(false)
        .build()
        .unwrap();
    let (middleware, _) = middleware(config);
    let client = wrap(middleware);
    for _ in 0..50 {
        assert_eq!(report(&client, &url).await.attempts, 4);
    }
}

/// A clock whose waits last until [`open`](Gate::open), and which says when
/// the first one starts: a call can be cancelled in the middle of a wait.
#[derive(Debug, Clone, Default)]
struct Gate {
    clock: ManualClock,
    started: std::sync::Arc<tokio::sync::Notify>,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Gate {
    async fn waiting(&self) {
        self.started.notified().await;
    }

    fn open(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl reqwest_safe_retry::clock::Clock for Gate {
    fn now(&self) -> std::time::Instant {
        self.clock.now()
    }

    fn wall_time(&self) -> std::time::SystemTime {
        self.clock.wall_time()
    }

    fn sleep(&self, duration: Duration) -> reqwest_safe_retry::clock::Sleep {
        if self.open.load(std::sync::atomic::Ordering::SeqCst) {
            return self.clock.sleep(duration);
        }
        self.started.notify_one();
        Box::pin(std::future::pending())
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> reqwest_safe_retry::clock::Sleep {
        self.clock.sleep_until(deadline)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_concurrent_requests_all_complete_within_the_budget() {
    let server = MockServer::start().await;
    Mock::given(header("x-fail", "1"))
        .respond_with(ResponseTemplate::new(503))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&server).await;

    // Zero-length waits keep virtual time still, so the whole run falls in one
    // budget window: the 1500 final answers earn 150 retries, each answer
    // once (into the reserve of 5 while it is below its cap, else into the
    // window): at most 155.
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO).with_max(Duration::ZERO))
        .with_budget(RetryBudget::default())
        .build()
        .unwrap();
    let retries = Counter::default();
    let budget_stops = Counter::default();
    let (r, b) = (retries.clone(), budget_stops.clone());
    let middleware = RetryMiddleware::new(config)
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::TOP)
        .on_decision(move |event| match event.decision {
            Decision::Retry { .. } => r.bump(),
            Decision::Stop(StopReason::BudgetExhausted) => b.bump(),
            _ => {}
        });
    let client = wrap(middleware);
    let url = format!("{}/r", server.uri());

    let tasks: Vec<_> = (0..2000)
        .map(|n| {
            let client = client.clone();
            let url = url.clone();
            let fail = if n % 4 == 0 { "1" } else { "0" };
            tokio::spawn(async move {
                let response = client.get(url).header("x-fail", fail).send().await.unwrap();
                (fail == "1", response.status().as_u16(), RetryReport::from_response(&response))
            })
        })
        .collect();
    let all = futures_util::future::join_all(tasks);
    let results =
        tokio::time::timeout(Duration::from_secs(120), all).await.expect("no request hangs");

    let mut attempts = 0;
    for result in results {
        let (failing, status, report) = result.expect("no task panics");
        assert_eq!(status, if failing { 503 } else { 200 });
        if !failing {
            assert_eq!(report.attempts, 1);
        }
        attempts += report.attempts as usize;
    }
    let granted = retries.get();
    assert!((100..=155).contains(&granted), "{granted} retries granted");
    assert_eq!(attempts, 2000 + granted);
    assert_eq!(hits(&server).await, 2000 + granted);
    assert!(budget_stops.get() > 0);
}
