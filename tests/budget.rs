//! The retry budget, through the middleware against a loopback server.

mod support;

use std::time::Duration;

use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::{
    Decision, FixedJitter, ManualClock, RetryBudget, RetryConfig, RetryMiddleware, RetryReport,
    StopReason,
};
use support::*;
use wiremock::MockServer;

/// Zero-length waits, so the manual clock moves only when the test moves it.
fn instant_retries(budget: RetryBudget) -> RetryConfig {
    RetryConfig::builder()
        .with_initial_backoff(Duration::ZERO)
        .with_max_backoff(Duration::ZERO)
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
    // No share of traffic, a floor of 1 per second over 10 s: 10 retries.
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_min_per_sec(1)));
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
async fn retries_resume_once_the_window_has_passed() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    let (middleware, clock) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_min_per_sec(1)));
    let client = wrap(middleware);
    for _ in 0..4 {
        report(&client, &url).await;
    }
    assert_eq!(report(&client, &url).await.stop, StopReason::BudgetExhausted);
    clock.advance(Duration::from_secs(10));
    assert_eq!(report(&client, &url).await.attempts, 4);
}

#[tokio::test]
async fn successful_traffic_earns_retries() {
    let server = MockServer::start().await;
    let url = down(&server).await;
    script_statuses(&server, "/ok", &[200]).await;
    let ok = format!("{}/ok", server.uri());
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.5).with_min_per_sec(0)));
    let client = wrap(middleware);
    // Alone, a failing request has half a retry in the bank: none.
    assert_eq!(report(&client, &url).await.attempts, 1);
    // With three good requests and this one, the bank holds 2.5 retries: two.
    for _ in 0..3 {
        report(&client, &ok).await;
    }
    let retried = report(&client, &url).await;
    assert_eq!((retried.attempts, retried.stop), (3, StopReason::BudgetExhausted));
}

#[tokio::test]
async fn a_failing_host_does_not_spend_another_hosts_budget() {
    let failing = MockServer::start().await;
    let healthy = MockServer::start().await;
    let failing_url = down(&failing).await;
    let other_url = down(&healthy).await;
    let (middleware, _) =
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_min_per_sec(1)));
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
        .with_min_per_sec(1)
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
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_min_per_sec(1)));
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
        middleware(instant_retries(RetryBudget::default().with_ratio(0.0).with_min_per_sec(0)));
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
        .with_initial_backoff(Duration::ZERO)
        .with_max_backoff(Duration::ZERO)
        .without_budget()
        .build()
        .unwrap();
    let (middleware, _) = middleware(config);
    let client = wrap(middleware);
    for _ in 0..50 {
        assert_eq!(report(&client, &url).await.attempts, 4);
    }
}
