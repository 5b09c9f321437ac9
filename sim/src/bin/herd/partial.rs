//! Partial failure: a server that fails some attempts, not all. What share
//! of calls each policy saves, and at what extra load.
//!
//! Each attempt fails independently with probability `p`. The draw is a
//! hash of the seed, the call and the attempt's number, not a stream read in
//! the order attempts arrive: every policy meets the same failures, and a
//! failure at 5% is a failure at 20% too. Differences between rows are the
//! policies' decisions alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use tokio::time::Instant;

use crate::policy::{Model, Policy};
use crate::sim::{SEED, answer, runtime};

/// Failure probabilities, in percent: the table's columns.
const FAILURE_PERCENTS: [u32; 5] = [1, 5, 10, 20, 50];
/// The steady process: requests a second, and for how long.
const RATE: f64 = 20.0;
const STEADY_FOR: Duration = Duration::from_secs(120);
/// The burst: calls sent at t = 0 by a fresh process.
const BURST: usize = 1000;
const MAX_RETRIES: u32 = 3;

/// The policies compared, and how the table names them.
fn policies() -> [(Policy, String); 6] {
    [
        (Policy::Default, "ours: RetryConfig::default()".to_owned()),
        (Policy::NoBudget, "ours, without_budget()".to_owned()),
        (Policy::Model(Model::Aws), Policy::Model(Model::Aws).name()),
        (Policy::Model(Model::Grpc), Policy::Model(Model::Grpc).name()),
        (Policy::Model(Model::Tps), Policy::Model(Model::Tps).name()),
        (Policy::Reqwest, Policy::Reqwest.name()),
    ]
}

/// How the server says no.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// 503, no `Retry-After`.
    Unavailable,
    /// 429 with `Retry-After: 1`.
    TooMany,
}

/// How the calls are sent.
#[derive(Debug, Clone, Copy)]
enum Traffic {
    /// One call every 1/[`RATE`] s for [`STEADY_FOR`].
    Steady,
    /// [`BURST`] calls at t = 0.
    Burst,
}

impl Traffic {
    fn calls(self) -> usize {
        match self {
            Traffic::Steady => (RATE * STEADY_FOR.as_secs_f64()) as usize,
            Traffic::Burst => BURST,
        }
    }
}

/// SplitMix64's finaliser: a well-mixed hash of one word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether attempt `attempt` of call `call` fails at probability `p`.
fn fails(call: u64, attempt: u32, p: f64) -> bool {
    let draw = mix(mix(SEED ^ mix(call)).wrapping_add(u64::from(attempt)));
    ((draw >> 11) as f64 / (1u64 << 53) as f64) < p
}

/// Fails each attempt with probability `p`, as [`fails`] draws it; calls
/// are told apart by their path, `/calls/{n}`.
#[derive(Clone)]
struct FlakyServer {
    p: f64,
    refusal: Refusal,
    /// Attempts seen per call, and in all.
    state: Arc<Mutex<(HashMap<u64, u32>, u64)>>,
}

#[async_trait::async_trait]
impl Middleware for FlakyServer {
    async fn handle(
        &self,
        request: Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let call: u64 = request
            .url()
            .path()
            .rsplit('/')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a path /calls/{n}");
        let attempt = {
            let mut state = self.state.lock().expect("no panics while counting");
            state.1 += 1;
            let tries = state.0.entry(call).or_default();
            *tries += 1;
            *tries
        };
        if !fails(call, attempt, self.p) {
            return Ok(answer(200));
        }
        Ok(match self.refusal {
            Refusal::Unavailable => answer(503),
            Refusal::TooMany => {
                let mut response = answer(429);
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
                response
            }
        })
    }
}

/// What one run came to.
#[derive(Debug, Clone, Copy)]
struct Tally {
    calls: u64,
    ok: u64,
    attempts: u64,
}

impl Tally {
    fn success(&self) -> f64 {
        self.ok as f64 / self.calls as f64
    }

    fn load(&self) -> f64 {
        self.attempts as f64 / self.calls as f64
    }

    /// More calls succeeded, with fewer attempts, than in `other`.
    fn dominates(&self, other: &Tally) -> bool {
        self.ok > other.ok && self.attempts < other.attempts
    }
}

fn run(policy: Policy, traffic: Traffic, refusal: Refusal, p: f64) -> Tally {
    runtime().block_on(async move {
        let start = Instant::now();
        let server = FlakyServer { p, refusal, state: Arc::default() };
        let client = policy.client(server.clone(), MAX_RETRIES, None, SEED);
        let calls = traffic.calls();
        let mut tasks = Vec::with_capacity(calls);
        for n in 0..calls {
            if let Traffic::Steady = traffic {
                tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / RATE)).await;
            }
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                matches!(client.get(format!("http://sim.test/calls/{n}")).send().await,
                    Ok(r) if r.status().is_success())
            }));
        }
        let mut ok = 0;
        for task in tasks {
            ok += u64::from(task.await.expect("request tasks do not panic"));
        }
        let attempts = server.state.lock().expect("no panics while counting").1;
        Tally { calls: calls as u64, ok, attempts }
    })
}

/// One group of rows: every policy at every failure rate. `[policy][p]`.
fn group(traffic: Traffic, refusal: Refusal) -> Vec<Vec<Tally>> {
    let header = FAILURE_PERCENTS.iter().fold(format!("  {:<42}", "policy"), |mut h, p| {
        h.push_str(&format!(" {:>16}", format!("p = {p}%")));
        h
    });
    let sub = FAILURE_PERCENTS.iter().fold(format!("  {:<42}", ""), |mut h, _| {
        h.push_str(&format!(" {:>8} {:>7}", "success", "load"));
        h
    });
    println!("{header}\n{sub}");
    policies()
        .into_iter()
        .map(|(policy, name)| {
            let row: Vec<Tally> = FAILURE_PERCENTS
                .iter()
                .map(|p| run(policy, traffic, refusal, f64::from(*p) / 100.0))
                .collect();
            let mut line = format!("  {name:<42}");
            for t in &row {
                line.push_str(&format!(" {:>7.2}% {:>6.3}×", t.success() * 100.0, t.load()));
            }
            println!("{line}");
            row
        })
        .collect()
}

/// Prints the tables and the checks of ours; returns the checks that failed.
pub(crate) fn run_tables() -> Vec<String> {
    println!(
        "Partial failure: one process sends GETs at {RATE} req/s for {} s ({} calls a cell); the \
         server fails each attempt independently with probability p, answering 503 with no \
         Retry-After. Draws are seeded hashes of (call, attempt), so every policy meets the same \
         failures.",
        STEADY_FOR.as_secs(),
        Traffic::Steady.calls()
    );
    println!(
        "All: {MAX_RETRIES} retries and the crate's default backoff (500 ms initial, full jitter, \
         30 s cap), one middleware (and budget or model) per process. success = share of calls \
         that ended 2xx; load = attempts / calls."
    );
    println!(
        "The models (AWS, gRPC, TpsBudget) are policy.rs's, plugged in through the crate's \
         predicate with its own budget off; they judge a 429 as they judge a 503. reqwest 0.13's \
         built-in default retries only HTTP/2 protocol NACKs (REFUSED_STREAM, graceful GOAWAY), \
         never a status: against these answers it is a client with no retries.\n"
    );
    let steady = group(Traffic::Steady, Refusal::Unavailable);
    println!(
        "\nA fresh process's burst: one process that has sent nothing before sends {BURST} GETs \
         at t = 0; each attempt is refused with 429 and Retry-After: 1 with probability p (the \
         same draws), else served.\n"
    );
    let burst = group(Traffic::Burst, Refusal::TooMany);
    println!(
        "  Each 429 with Retry-After: 1 pauses the host for ours, and a retry that waits out the \
         pause is not charged to the budget: nothing goes before the time the server named, the \
         first request after it goes alone, and the rest only if it is accepted. So ours sends \
         what no budget sends here, at the times the server asked for.\n"
    );

    let mut failures = Vec::new();
    let mut check = |pass: bool, text: String| {
        if pass {
            println!("  PASS: {text}");
        } else {
            let line = format!("FAIL: {text}");
            println!("  {line}");
            failures.push(line);
        }
    };
    println!("\nChecks of ours (RetryConfig::default()):");
    let column = |percent: u32| {
        FAILURE_PERCENTS.iter().position(|p| *p == percent).expect("a column of the table")
    };
    let ours = &steady[0];
    for (percent, least) in [(5, 0.999), (20, 0.99)] {
        let t = ours[column(percent)];
        check(
            t.success() >= least,
            format!(
                "503 at {percent}%: {:.2}% of calls succeed ({} of {}; target ≥ {}%)",
                t.success() * 100.0,
                t.ok,
                t.calls,
                least * 100.0
            ),
        );
    }
    let t = ours[column(50)];
    check(t.load() <= 1.3, format!("503 at 50%: load {:.3}× (target ≤ 1.3×)", t.load()));
    let names = policies().map(|(_, name)| name);
    for (what, rows) in [("503, steady", &steady), ("429 burst", &burst)] {
        for (i, percent) in FAILURE_PERCENTS.iter().enumerate() {
            let ours = rows[0][i];
            let better: Vec<&str> = rows
                .iter()
                .zip(&names)
                .skip(1)
                .filter(|(row, _)| row[i].dominates(&ours))
                .map(|(_, name)| name.as_str())
                .collect();
            let text = format!(
                "{what} at {percent}%: no other policy gives both more successes and less load \
                 than ours"
            );
            match better.as_slice() {
                [] => check(true, text),
                _ => check(false, format!("{text}: {} does", better.join(", "))),
            }
        }
    }
    failures
}
