//! What a response whose body breaks while the middleware reads it does to
//! the budget: it earns nothing, and a whole body earns a retry.

use crate::support;

use http::Extensions;

use reqwest::{Request, Response};

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};

use reqwest_safe_retry::BodyBuffering;
use reqwest_safe_retry::{
    RetryBudget, RetryConfigBuilder, RetryMiddleware, clock::ManualClock, jitter::FixedJitter,
    report::Decision, report::ReportSlot, report::RetryReason, report::RetryReport,
    report::StopReason,
};

use std::sync::{Arc, Mutex};

use std::time::Duration;

use support::*;

/// Long enough for anything on loopback; a hang fails the test with a message.
const BOUND: Duration = Duration::from_secs(20);

async fn bounded<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(BOUND, future).await.unwrap_or_else(|_| panic!("{what} hung"))
}

use crate::support::broken_bodies::{BODY, Go, Step, server};

/// Below the retry middleware: says "go" once an attempt has its headers.
struct HeadersArrived(Go);

#[async_trait::async_trait]
impl Middleware for HeadersArrived {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let outcome = next.run(request, extensions).await;
        if outcome.is_ok() {
            self.0.go();
        }
        outcome
    }
}

/// The retry reasons of every retry taken.
type Reasons = Arc<Mutex<Vec<RetryReason>>>;

/// A client with `config` over a reqwest client that does not follow
/// redirects, the manual clock, jitter at the top, and `go` said when
/// headers arrive.
fn client(config: RetryConfigBuilder, go: &Go) -> (ClientWithMiddleware, ManualClock, Reasons) {
    client_over(bare_reqwest(), config, go)
}

/// As [`client`], over `inner`.
fn client_over(
    inner: reqwest::Client,
    config: RetryConfigBuilder,
    go: &Go,
) -> (ClientWithMiddleware, ManualClock, Reasons) {
    let clock = ManualClock::new();
    let reasons = Reasons::default();
    let seen = reasons.clone();
    let middleware = RetryMiddleware::new(config.build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP)
        .on_decision(move |event| {
            if let Decision::Retry { reason, .. } = event.decision {
                seen.lock().unwrap().push(reason);
            }
        });
    let client =
        ClientBuilder::new(inner).with(middleware).with(HeadersArrived(go.clone())).build();
    (client, clock, reasons)
}

fn buffering() -> RetryConfigBuilder {
    policy().with_body_buffering(BodyBuffering::default().with_response(1024))
}

/// `is_body()`, `is_decode()`, `is_timeout()`.
fn kinds(error: &reqwest::Error) -> (bool, bool, bool) {
    (error.is_body(), error.is_decode(), error.is_timeout())
}

fn reqwest_error(error: &reqwest_middleware::Error) -> &reqwest::Error {
    match error {
        reqwest_middleware::Error::Reqwest(error) => error,
        other => panic!("not reqwest's error: {other:?}"),
    }
}

#[tokio::test]
async fn a_broken_body_earns_nothing_and_a_whole_one_earns_a_retry() {
    // No reserve, a whole retry earned per final answer: only answers pay.
    let go = Go::default();
    let script = vec![Step::ResetMidBody, Step::Whole, Step::ResetMidBody, Step::Whole];
    let (url, requests) = server(script, go.clone()).await;
    let budget = RetryBudget::default().with_reserve(0).with_ratio(1.0);
    let (client, _, reasons) = client(buffering().with_budget(budget), &go);
    // A broken body is a failure: it pays for nothing, not even its own retry.
    let slot = ReportSlot::new();
    let call = client.get(&url).with_extension(slot.clone()).send();
    let error = bounded("the first GET", call).await.unwrap_err();
    assert_eq!(kinds(reqwest_error(&error)), (false, true, false), "{error:?}");
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::BudgetExhausted));
    // A body read whole is a final answer: it earns the next call's retry.
    let whole = bounded("the second GET", client.get(&url).send()).await.unwrap();
    assert_eq!(whole.text().await.unwrap(), BODY);
    let retried = bounded("the third GET", client.get(&url).send()).await.unwrap();
    assert_eq!(RetryReport::from_response(&retried).attempts, 2);
    assert_eq!(retried.text().await.unwrap(), BODY);
    assert_eq!(*requests.lock().unwrap(), 4);
    assert_eq!(*reasons.lock().unwrap(), [RetryReason::ConnectionLost]);
}
