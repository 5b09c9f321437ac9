//! The tower layer's happy path in interleaved rounds, beside tower's own
//! `Retry` with the policy a stack writes by hand (a clone per attempt, a
//! 5xx or an error retried at most three times, a `TpsBudget`), on the same
//! in-process service that answers 200 at once. Each round times one batch
//! of calls through every stack, the order rotating from round to round.
//! Prints each stack's median time per call and its ratio to tower's
//! `Retry`: the median of the per-round ratios, with their 10th to 90th
//! percentile.
//!
//! `cargo bench --bench tower --features tower [-- --rounds R --calls N]`
//!
//! `--only STACK --calls N` sends N calls through one stack (`service`,
//! `tower-retry`, `reqwest-safe-retry`) and prints nothing: under
//! `valgrind --tool=callgrind` for two values of N, the difference of the
//! instruction counts over the difference of the calls is the
//! instructions per call.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use reqwest_safe_retry::tower::RetryLayer;
use tower::retry::budget::{Budget, TpsBudget};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service, ServiceExt};

type Body = Full<Bytes>;
type Stack = BoxCloneSyncService<Request<Body>, Response<Body>, BoxError>;

const STACKS: [&str; 3] = ["service", "tower-retry", "reqwest-safe-retry"];

/// The policy a tower stack writes by hand.
#[derive(Clone)]
struct HandWritten {
    left: usize,
    budget: Arc<TpsBudget>,
}

impl<E> tower::retry::Policy<Request<Body>, Response<Body>, E> for HandWritten {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _: &mut Request<Body>,
        result: &mut Result<Response<Body>, E>,
    ) -> Option<Self::Future> {
        let failed = match result {
            Ok(response) => response.status().is_server_error(),
            Err(_) => true,
        };
        if !failed {
            self.budget.deposit();
            return None;
        }
        (self.left > 0 && self.budget.withdraw()).then(|| {
            self.left -= 1;
            ready(())
        })
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        Some(request.clone())
    }
}

/// The service every stack wraps: 200 at once.
fn service() -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = Ready<Result<Response<Body>, Infallible>>,
> + Clone
+ Send
+ Sync
+ 'static {
    tower::service_fn(|_: Request<Body>| ready(Ok(Response::new(Body::default()))))
}

fn stack(name: &str) -> Stack {
    match name {
        "service" => BoxCloneSyncService::new(service().map_err(BoxError::from)),
        "tower-retry" => {
            let budget = Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2));
            let policy = HandWritten { left: 3, budget };
            let retry = tower::retry::Retry::new(policy, service());
            BoxCloneSyncService::new(retry.map_err(BoxError::from))
        }
        "reqwest-safe-retry" => BoxCloneSyncService::new(RetryLayer::default().layer(service())),
        other => panic!("no stack named {other:?}"),
    }
}

async fn calls(stack: &mut Stack, n: u64) {
    for _ in 0..n {
        let request =
            Request::get("http://h0.bench.test/").body(Body::default()).expect("a request");
        let response = stack.ready().await.expect("ready").call(request).await;
        black_box(response.expect("the service answers"));
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value =
        |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let rounds_n: usize = value("--rounds").map_or(41, |v| v.parse().expect("--rounds N"));
    let n: u64 = value("--calls").map_or(2000, |v| v.parse().expect("--calls N"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    if let Some(only) = value("--only") {
        let mut stack = stack(&only);
        runtime.block_on(calls(&mut stack, n));
        return;
    }
    let mut stacks: Vec<Stack> = STACKS.iter().map(|name| stack(name)).collect();
    for stack in &mut stacks {
        runtime.block_on(calls(stack, 1000));
    }
    let mut times = vec![Vec::with_capacity(rounds_n); STACKS.len()];
    for round in 0..rounds_n {
        for k in 0..STACKS.len() {
            let i = (round + k) % STACKS.len();
            let start = Instant::now();
            runtime.block_on(calls(&mut stacks[i], n));
            times[i].push(start.elapsed().as_secs_f64() / n as f64);
        }
    }
    println!("{rounds_n} interleaved rounds of {n} calls, one host, one caller");
    println!("{:<20} {:>12} {:>26}", "stack", "per call", "÷ tower-retry (p10–p90)");
    for (i, name) in STACKS.iter().enumerate() {
        let mut own = times[i].clone();
        own.sort_by(f64::total_cmp);
        let mut ratios: Vec<f64> = times[i].iter().zip(&times[1]).map(|(t, p)| t / p).collect();
        ratios.sort_by(f64::total_cmp);
        let [median, low, high] = [0.5, 0.1, 0.9].map(|p| percentile(&ratios, p));
        println!(
            "{name:<20} {:>9.0} ns {:>12.2}× ({low:.2}–{high:.2})",
            percentile(&own, 0.5) * 1e9,
            median
        );
    }
}
