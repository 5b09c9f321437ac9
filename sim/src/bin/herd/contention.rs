//! Contention, after the AWS Architecture Blog's "Exponential Backoff And
//! Jitter" (2015) and the simulator it used.
//!
//! Every client must update one row once, with optimistic concurrency: read
//! the row's version, then write conditionally on it. The write succeeds
//! only if no other write succeeded between the read and the write; else the
//! client backs off and starts over with a fresh read. Every message crosses
//! a network whose one-way delay is normal, mean 10 ms and standard
//! deviation 2 ms (clamped at 0).
//!
//! Here one HTTP call is one read-and-write exchange (four crossings): the
//! read reaches the server after one delay, the write after three, the
//! answer (200, or 409 Conflict) reaches the client after four. The retries
//! and their backoff are the crate's middleware's.
//!
//! Two differences from the blog's simulator: its first wait's ceiling is
//! twice the base (10 ms), the crate's is the base (5 ms); and tokio's
//! clock moves in whole milliseconds, so sends and backoffs are rounded up
//! to one (delays and the order of writes are kept exact).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use reqwest_safe_retry::Backoff;
use reqwest_safe_retry::{Jitter, RetryConfig, RetryMiddleware, jitter::SeededJitter};
use tokio::time::Instant;

use crate::sim::{SEED, answer, base_client, runtime};

/// Client counts, and the runs averaged for each.
const COUNTS: [(usize, u32); 10] = [
    (10, 100),
    (30, 100),
    (50, 100),
    (70, 100),
    (90, 100),
    (110, 100),
    (130, 100),
    (150, 100),
    (170, 100),
    (190, 100),
];

const POLICIES: [(&str, Option<Jitter>); 5] = [
    ("no backoff", None),
    ("exponential", Some(Jitter::None)),
    ("full jitter", Some(Jitter::Full)),
    ("equal jitter", Some(Jitter::Equal)),
    ("decorrelated", Some(Jitter::Decorrelated)),
];

/// A normal draw by the Box–Muller transform.
fn normal(rng: &mut StdRng, mean: f64, sd: f64) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: ln is finite
    let u2: f64 = rng.random::<f64>();
    mean + sd * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The row and everything the server knows about calls in flight.
struct Row {
    rng: StdRng,
    next_id: u64,
    /// Writes not yet judged: (write time, call) → read time.
    pending: BTreeMap<(Duration, u64), Duration>,
    /// When the last successful write happened: the row's version changed.
    last_write: Option<Duration>,
    judged: HashMap<u64, bool>,
    calls: u64,
}

impl Row {
    fn delay(&mut self) -> Duration {
        Duration::from_secs_f64(normal(&mut self.rng, 0.010, 0.002).max(0.0))
    }

    /// Judges every pending write up to `until`, in the order they reach
    /// the server: a write succeeds if the row is unchanged since its read.
    fn judge(&mut self, until: (Duration, u64)) {
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > until {
                break;
            }
            let ((write, id), read) = entry.remove_entry();
            let ok = self.last_write.is_none_or(|last| last <= read);
            if ok {
                self.last_write = Some(write);
            }
            self.judged.insert(id, ok);
        }
    }
}

#[derive(Clone)]
struct OccServer {
    start: Instant,
    row: Arc<Mutex<Row>>,
}

#[async_trait::async_trait]
impl Middleware for OccServer {
    async fn handle(
        &self,
        _: Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let sent = self.start.elapsed();
        let (id, write, answered) = {
            let mut row = self.row.lock().expect("no panics in the model");
            let read = sent + row.delay();
            let write = read + row.delay() + row.delay();
            let answered = write + row.delay();
            let id = row.next_id;
            row.next_id += 1;
            row.calls += 1;
            row.pending.insert((write, id), read);
            (id, write, answered)
        };
        // Every write that can reach the server before this one comes from a
        // call sent before it, so by the time the answer is due all of them
        // are known and can be judged in order.
        tokio::time::sleep_until(self.start + answered).await;
        let mut row = self.row.lock().expect("no panics in the model");
        row.judge((write, id));
        let ok = row.judged.remove(&id).expect("judged up to this write");
        Ok(answer(if ok { 200 } else { 409 }))
    }
}

/// One run: calls made, and when the last client finished.
fn run_once(jitter: Option<Jitter>, clients: usize, run: u32) -> (u64, Duration, bool) {
    runtime().block_on(async move {
        let start = Instant::now();
        let row = Row {
            rng: StdRng::seed_from_u64(SEED + u64::from(run)),
            next_id: 0,
            pending: BTreeMap::new(),
            last_write: None,
            judged: HashMap::new(),
            calls: 0,
        };
        let server = OccServer { start, row: Arc::new(Mutex::new(row)) };
        let (initial, max) = match jitter {
            Some(_) => (Duration::from_millis(5), Duration::from_secs(2)),
            None => (Duration::ZERO, Duration::ZERO),
        };
        let config = RetryConfig::builder()
            .with_budget(None)
            .with_max_retries(1000)
            .with_retryable_statuses([http::StatusCode::CONFLICT])
            .with_backoff(
                Backoff::default()
                    .with_initial(initial)
                    .with_max(max)
                    .with_jitter(jitter.unwrap_or(Jitter::None)),
            )
            .build()
            .expect("a valid policy");
        let middleware = RetryMiddleware::new(config)
            .with_jitter_source(SeededJitter::new(SEED + 1_000_000 + u64::from(run)));
        let client =
            ClientBuilder::new(base_client()).with(middleware).with(server.clone()).build();
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move {
                    matches!(client.put("http://sim.test/row").send().await,
                        Ok(r) if r.status().is_success())
                })
            })
            .collect();
        let mut all_ok = true;
        for task in tasks {
            all_ok &= task.await.expect("request tasks do not panic");
        }
        let calls = server.row.lock().expect("no panics in the model").calls;
        (calls, start.elapsed(), all_ok)
    })
}

pub(crate) fn run() {
    println!(
        "Contention, after the AWS Architecture Blog's \"Exponential Backoff And Jitter\": each \
         client must update one row once, by read then conditional write (optimistic \
         concurrency); a write fails if another write succeeded since its read."
    );
    println!(
        "One call = read + write, four network crossings of N(10 ms, 2 ms) each; base 5 ms, \
         cap 2 s, up to 1000 retries, no budget; the crate's middleware backs off. Each row is \
         the mean of the runs shown; the clock moves in whole milliseconds.\n"
    );
    let names: Vec<&str> = POLICIES.iter().map(|p| p.0).collect();
    let mut header = format!("  {:>7} {:>4} |", "clients", "runs");
    for name in &names {
        header.push_str(&format!(" {name:>12}"));
    }
    header.push_str(" |");
    for name in &names {
        header.push_str(&format!(" {name:>12}"));
    }
    println!("  {:>12} | {:^64} | {:^64}", "", "mean calls", "mean completion time");
    println!("{header}");
    let mut failures = 0;
    for (clients, runs) in COUNTS {
        let mut calls_line = String::new();
        let mut time_line = String::new();
        for (_, jitter) in POLICIES {
            let (mut calls, mut time) = (0u64, Duration::ZERO);
            for run in 0..runs {
                let (c, t, ok) = run_once(jitter, clients, run);
                calls += c;
                time += t;
                failures += u32::from(!ok);
            }
            calls_line.push_str(&format!(" {:>12.0}", calls as f64 / f64::from(runs)));
            time_line.push_str(&format!(" {:>11.2}s", time.as_secs_f64() / f64::from(runs)));
        }
        println!("  {clients:>7} {runs:>4} |{calls_line} |{time_line}");
    }
    if failures > 0 {
        println!("  ({failures} runs had a client that ran out of retries)");
    }
}
