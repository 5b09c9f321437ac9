//! A `Clock` that implements only what it must, `now` and `sleep`: the
//! provided `wall_time` and `sleep_until` still give the middleware what it
//! needs. (`ManualClock` and `TokioClock` override both, so the other test
//! files never reach the provided ones.) Both tests run in tokio's paused
//! time, so the clock's `tokio::time::sleep` advances virtual time only.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use reqwest_safe_retry::{
    Clock, DeadlineExceeded, ReportSlot, RetryMiddleware, RetryReport, Sleep, StopReason,
};
use support::*;

/// Tokio's paused time, through `now` and `sleep` alone; records each sleep.
#[derive(Debug, Clone, Default)]
struct Minimal {
    sleeps: Arc<Mutex<Vec<Duration>>>,
}

impl Minimal {
    fn sleeps(&self) -> Vec<Duration> {
        self.sleeps.lock().unwrap().clone()
    }
}

impl Clock for Minimal {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        self.sleeps.lock().unwrap().push(duration);
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A last middleware that never answers.
struct Silent;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Silent {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        std::future::pending().await
    }
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

/// The provided `sleep_until` (a `sleep` for the time left) bounds an
/// attempt in flight by the deadline when the attempt has no timeout of its
/// own.
#[tokio::test(start_paused = true)]
async fn a_deadline_cuts_an_attempt_in_flight_through_the_provided_sleep_until() {
    let clock = Minimal::default();
    let config = policy().with_deadline(Duration::from_secs(2)).build().unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(config).with_clock(clock.clone()))
        .with(Silent)
        .build();
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client.get("http://127.0.0.1:9/r").with_extension(slot.clone()).send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the deadline ends the call")
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    match &error {
        reqwest_middleware::Error::Middleware(e) => assert!(e.is::<DeadlineExceeded>(), "{e}"),
        other => panic!("{other}"),
    }
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::DeadlineExceeded));
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)], "one sleep, for the time left");
}

/// The provided `wall_time` (the system clock) is what a `Retry-After` date
/// is measured against when the response has no `Date`.
#[tokio::test(start_paused = true)]
async fn a_retry_after_date_is_measured_against_the_provided_wall_time() {
    let clock = Minimal::default();
    let config = policy().with_retry_after_spread(false).build().unwrap();
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
