//! A herd of clients against a simulated server, in virtual time.
//!
//! Every request goes through a real `reqwest_middleware` stack; the last
//! middleware plays the server and answers without a network. Time is tokio's
//! paused clock, so a minute of simulated traffic takes a moment, and our
//! jitter is seeded, so our rows are the same on every run. (The peer,
//! reqwest-retry, draws its jitter from the thread's generator; its rows vary
//! a little from run to run.)
//!
//! Two server models:
//!
//! 1. Outage then recovery: clients send requests at a steady rate; the server
//!    answers 503 to everything for a while, then serves up to a capacity per
//!    second and answers 503 beyond it.
//! 2. Contention, after the AWS Architecture Blog's "Exponential Backoff And
//!    Jitter": each client needs one successful call; calls that start in the
//!    same 10 ms slot conflict and all fail.
//!
//! Run with `cargo run --release --example herd -- [chart.svg] [--clients N]
//! [--processes P] [--floor F]`: the clients are spread over P processes, each
//! with its own middleware and so its own budget, whose floor is F retries per
//! second (default 10).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_safe_retry::{Jitter, RetryBudget, RetryConfig, RetryMiddleware, SeededJitter};
use tokio::time::Instant;

const SEED: u64 = 2026;

/// One retry policy of the comparison.
#[derive(Debug, Clone, Copy)]
enum Policy {
    Ours { backoff: Backoff, budget: bool },
    Peer,
}

#[derive(Debug, Clone, Copy)]
enum Backoff {
    Immediate,
    Exponential(Jitter),
}

impl Policy {
    fn all() -> Vec<Policy> {
        let kinds = [
            Backoff::Immediate,
            Backoff::Exponential(Jitter::None),
            Backoff::Exponential(Jitter::Full),
            Backoff::Exponential(Jitter::Equal),
            Backoff::Exponential(Jitter::Decorrelated),
        ];
        let mut all: Vec<Policy> = [false, true]
            .into_iter()
            .flat_map(|budget| kinds.map(|backoff| Policy::Ours { backoff, budget }))
            .collect();
        all.push(Policy::Peer);
        all
    }

    fn name(&self) -> String {
        match self {
            Policy::Peer => "reqwest-retry (default exponential)".to_owned(),
            Policy::Ours { backoff, budget } => {
                let backoff = match backoff {
                    Backoff::Immediate => "no backoff",
                    Backoff::Exponential(Jitter::None) => "exponential, no jitter",
                    Backoff::Exponential(Jitter::Full) => "full jitter",
                    Backoff::Exponential(Jitter::Equal) => "equal jitter",
                    Backoff::Exponential(Jitter::Decorrelated) => "decorrelated jitter",
                    Backoff::Exponential(_) => "other jitter",
                };
                if *budget { format!("{backoff} + budget") } else { backoff.to_owned() }
            }
        }
    }

    /// A client whose last middleware is `server`. `max_retries` and
    /// `initial` shape the backoff; the rest is the crate's default policy.
    fn client(
        &self,
        server: impl Middleware,
        max_retries: u32,
        initial: Duration,
        floor: u32,
        seed: u64,
    ) -> ClientWithMiddleware {
        let builder = ClientBuilder::new(reqwest::Client::new());
        let builder = match *self {
            Policy::Peer => builder.with(RetryTransientMiddleware::new_with_policy(
                ExponentialBackoff::builder().build_with_max_retries(max_retries),
            )),
            Policy::Ours { backoff, budget } => {
                let mut config = RetryConfig::builder().with_max_retries(max_retries);
                config = match backoff {
                    Backoff::Immediate => {
                        config.with_initial_backoff(Duration::ZERO).with_max_backoff(Duration::ZERO)
                    }
                    Backoff::Exponential(jitter) => {
                        config.with_initial_backoff(initial).with_jitter(jitter)
                    }
                };
                config = if budget {
                    config.with_budget(RetryBudget::default().with_reserve(floor))
                } else {
                    config.without_budget()
                };
                let config = config.build().expect("a valid simulation policy");
                builder
                    .with(RetryMiddleware::new(config).with_jitter_source(SeededJitter::new(seed)))
            }
        };
        builder.with(server).build()
    }
}

fn answer(status: u16) -> Response {
    http::Response::builder().status(status).body(Vec::new()).expect("a valid response").into()
}

/// Calls and successes the server saw in each second.
#[derive(Debug, Default, Clone)]
struct Load {
    calls: Vec<u32>,
    served: Vec<u32>,
}

impl Load {
    fn record(&mut self, second: usize, served: bool) {
        if self.calls.len() <= second {
            self.calls.resize(second + 1, 0);
            self.served.resize(second + 1, 0);
        }
        self.calls[second] += 1;
        self.served[second] += u32::from(served);
    }
}

/// Model 1: down for `outage`, then serving at most `capacity` calls a second.
struct OutageServer {
    start: Instant,
    outage: std::ops::Range<Duration>,
    capacity: u32,
    load: Arc<Mutex<Load>>,
}

#[async_trait::async_trait]
impl Middleware for OutageServer {
    async fn handle(
        &self,
        _: Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let at = self.start.elapsed();
        let second = at.as_secs() as usize;
        let mut load = self.load.lock().expect("no panics while counting");
        let served = !self.outage.contains(&at)
            && load.served.get(second).copied().unwrap_or(0) < self.capacity;
        load.record(second, served);
        Ok(answer(if served { 200 } else { 503 }))
    }
}

/// Model 2: calls starting in the same slot conflict; a call alone succeeds.
/// Each call lasts until the end of its slot.
struct ContendedResource {
    start: Instant,
    slot: Duration,
    slots: Arc<Mutex<HashMap<u128, u32>>>,
}

#[async_trait::async_trait]
impl Middleware for ContendedResource {
    async fn handle(
        &self,
        _: Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let slot = self.start.elapsed().as_nanos() / self.slot.as_nanos();
        *self.slots.lock().expect("no panics while counting").entry(slot).or_insert(0) += 1;
        let end = self.start + self.slot * (slot as u32 + 1);
        tokio::time::sleep_until(end).await;
        let callers = self.slots.lock().expect("no panics while counting")[&slot];
        Ok(answer(if callers == 1 { 200 } else { 503 }))
    }
}

/// What one logical request came to.
#[derive(Debug, Clone, Copy)]
struct Done {
    latency: Duration,
    ok: bool,
}

#[derive(Debug)]
struct Summary {
    name: String,
    requests: usize,
    calls: u64,
    peak: u32,
    p50: Duration,
    p99: Duration,
    max: Duration,
    success: f64,
    finished: Duration,
    recovered: Option<u64>,
    load: Vec<u32>,
}

impl Summary {
    fn new(name: String, mut done: Vec<Done>, load: Load, finished: Duration) -> Self {
        done.sort_by_key(|d| d.latency);
        let pick = |q: f64| {
            let i = ((done.len() as f64 - 1.0) * q).round() as usize;
            done.get(i).map_or(Duration::ZERO, |d| d.latency)
        };
        Self {
            name,
            requests: done.len(),
            calls: load.calls.iter().map(|c| u64::from(*c)).sum(),
            peak: load.calls.iter().copied().max().unwrap_or(0),
            p50: pick(0.5),
            p99: pick(0.99),
            max: pick(1.0),
            success: done.iter().filter(|d| d.ok).count() as f64 / done.len().max(1) as f64,
            finished,
            recovered: None,
            load: load.calls,
        }
    }

    fn amplification(&self) -> f64 {
        self.calls as f64 / self.requests.max(1) as f64
    }
}

/// The outage model's settings.
#[derive(Debug, Clone, Copy)]
struct Outage {
    clients: usize,
    processes: usize,
    /// The budget's floor, retries per second per process.
    floor: u32,
    /// Each client sends one request per this interval.
    interval: Duration,
    /// Requests are issued from 0 to this time.
    issue_for: Duration,
    outage: (Duration, Duration),
    capacity: u32,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

fn run_outage(policy: Policy, model: Outage) -> Summary {
    runtime().block_on(async move {
        let start = Instant::now();
        let load = Arc::new(Mutex::new(Load::default()));
        let processes: Vec<ClientWithMiddleware> = (0..model.processes)
            .map(|p| {
                let server = OutageServer {
                    start,
                    outage: model.outage.0..model.outage.1,
                    capacity: model.capacity,
                    load: load.clone(),
                };
                policy.client(server, 3, Duration::from_millis(500), model.floor, SEED + p as u64)
            })
            .collect();
        // Requests evenly spaced: `clients` of them per interval.
        let gap = model.interval / model.clients as u32;
        let total = (model.issue_for.as_nanos() / gap.as_nanos()) as usize;
        let mut tasks = Vec::with_capacity(total);
        for n in 0..total {
            let issue = start + gap * n as u32;
            tokio::time::sleep_until(issue).await;
            // Client n % clients lives in process (n % clients) % processes.
            let client = processes[(n % model.clients) % model.processes].clone();
            tasks.push(tokio::spawn(async move {
                let ok = matches!(client.get("http://sim.test/orders").send().await,
                    Ok(r) if r.status().is_success());
                Done { latency: issue.elapsed(), ok }
            }));
        }
        let mut done = Vec::with_capacity(total);
        for task in tasks {
            done.push(task.await.expect("request tasks do not panic"));
        }
        let finished = start.elapsed();
        let load = load.lock().expect("no panics while counting").clone();
        let mut summary = Summary::new(policy.name(), done, load.clone(), finished);
        // Recovered: from this second on, every call that came was served.
        let issue_end = model.issue_for.as_secs() as usize;
        let outage_end = model.outage.1.as_secs() as usize;
        summary.recovered = (outage_end..issue_end)
            .find(|&s| (s..issue_end).all(|t| load.calls.get(t) == load.served.get(t)))
            .map(|s| (s - outage_end) as u64);
        summary
    })
}

fn run_contention(policy: Policy, clients: usize) -> Summary {
    runtime().block_on(async move {
        let start = Instant::now();
        let slots = Arc::new(Mutex::new(HashMap::new()));
        let resource =
            ContendedResource { start, slot: Duration::from_millis(10), slots: slots.clone() };
        // One process, so our jitter comes from one seeded source.
        let client = policy.client(resource, 100, Duration::from_millis(10), 10, SEED);
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move {
                    let ok = matches!(client.get("http://sim.test/lock").send().await,
                        Ok(r) if r.status().is_success());
                    Done { latency: start.elapsed(), ok }
                })
            })
            .collect();
        let mut done = Vec::with_capacity(clients);
        for task in tasks {
            done.push(task.await.expect("request tasks do not panic"));
        }
        let finished = start.elapsed();
        let calls: u32 = slots.lock().expect("no panics while counting").values().sum();
        let load = Load { calls: vec![calls], served: Vec::new() };
        Summary::new(policy.name(), done, load, finished)
    })
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

fn outage_table(rows: &[Summary]) {
    println!(
        "{:<38} {:>9} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "policy", "calls", "ampl.", "peak/s", "p50", "p99", "max", "success", "recovered"
    );
    for r in rows {
        let recovered = r.recovered.map_or("never".to_owned(), |s| format!("+{s}s"));
        println!(
            "{:<38} {:>9} {:>6.2} {:>7} {:>8} {:>8} {:>8} {:>7.1}% {:>10}",
            r.name,
            r.calls,
            r.amplification(),
            r.peak,
            secs(r.p50),
            secs(r.p99),
            secs(r.max),
            r.success * 100.0,
            recovered
        );
    }
}

fn contention_table(clients: usize, rows: &[Summary]) {
    println!("{clients} clients:");
    println!(
        "  {:<38} {:>8} {:>13} {:>8} {:>10}",
        "policy", "calls", "calls/client", "success", "finished"
    );
    for r in rows {
        println!(
            "  {:<38} {:>8} {:>13.1} {:>7.1}% {:>10}",
            r.name,
            r.calls,
            r.amplification(),
            r.success * 100.0,
            secs(r.finished)
        );
    }
}

/// A line chart of calls per second, one line per policy.
fn svg(rows: &[Summary], model: &Outage) -> String {
    let (width, height, pad) = (960.0, 520.0, 60.0);
    let seconds = rows.iter().map(|r| r.load.len()).max().unwrap_or(1).max(2) as f64;
    let peak = rows.iter().map(|r| r.peak).max().unwrap_or(1).max(1) as f64;
    let x = |s: f64| pad + s / (seconds - 1.0) * (width - 2.0 * pad);
    let y = |c: f64| height - pad - c / peak * (height - 2.0 * pad);
    let colours = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf", "#000000",
    ];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(
        out,
        "<text x=\"{pad}\" y=\"24\" font-size=\"15\">Server load per second: {} clients, outage {}–{} s, capacity {}/s</text>",
        model.clients,
        model.outage.0.as_secs(),
        model.outage.1.as_secs(),
        model.capacity
    );
    let (x0, x1) = (x(model.outage.0.as_secs_f64()), x(model.outage.1.as_secs_f64()));
    let _ = writeln!(
        out,
        "<rect x=\"{x0:.1}\" y=\"{pad}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#f4dede\"/>",
        x1 - x0,
        height - 2.0 * pad
    );
    for tick in 0..=5 {
        let c = peak * f64::from(tick) / 5.0;
        let _ = writeln!(
            out,
            "<line x1=\"{pad}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"8\" y=\"{:.1}\">{c:.0}</text>",
            width - pad,
            y(c),
            y(c),
            y(c) + 4.0
        );
    }
    for s in (0..seconds as usize).step_by(10) {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{s}s</text>",
            x(s as f64),
            height - pad + 18.0
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let points: Vec<String> = r
            .load
            .iter()
            .enumerate()
            .map(|(s, c)| format!("{:.1},{:.1}", x(s as f64), y(f64::from(*c))))
            .collect();
        let dash = if r.name.contains("budget") { "" } else { " stroke-dasharray=\"5,3\"" };
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"{dash} points=\"{}\"/>",
            points.join(" ")
        );
        let ly = pad + 16.0 * i as f64;
        let _ = writeln!(
            out,
            "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            width - pad - 250.0,
            width - pad - 225.0,
            width - pad - 220.0,
            ly + 4.0,
            r.name
        );
    }
    out.push_str("</svg>\n");
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut chart = None;
    let mut clients = 1000;
    let mut processes = 1;
    let mut floor = 10;
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> usize {
            args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("{name} takes a positive whole number");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--clients" => clients = number("--clients").max(1),
            "--processes" => processes = number("--processes").max(1),
            "--floor" => floor = u32::try_from(number("--floor")).unwrap_or(u32::MAX),
            _ if arg.starts_with("--") => {
                eprintln!("usage: herd [chart.svg] [--clients N] [--processes P] [--floor F]");
                std::process::exit(2);
            }
            _ => chart = Some(arg),
        }
    }
    let model = Outage {
        clients,
        processes: processes.min(clients),
        floor,
        interval: Duration::from_secs(2),
        issue_for: Duration::from_secs(60),
        outage: (Duration::from_secs(10), Duration::from_secs(30)),
        capacity: (clients as u32 * 6 / 10).max(1),
    };

    println!(
        "Outage then recovery: {} clients in {} process(es), one request each per {}s for {}s; \
         all 503 from {}s to {}s, then at most {} served per second.",
        model.clients,
        model.processes,
        model.interval.as_secs(),
        model.issue_for.as_secs(),
        model.outage.0.as_secs(),
        model.outage.1.as_secs(),
        model.capacity
    );
    println!(
        "Policies: 3 retries, 500 ms initial backoff, 30 s cap (the crate's defaults); \
         budget 10% of traffic plus {} retries/s per process over 10 s.\n",
        model.floor
    );
    let rows: Vec<Summary> = Policy::all().into_iter().map(|p| run_outage(p, model)).collect();
    outage_table(&rows);

    let outage_only = Outage { outage: (Duration::ZERO, Duration::MAX), ..model };
    println!("\nTotal outage for the whole run (every call fails):\n");
    let total: Vec<Summary> =
        Policy::all().into_iter().map(|p| run_outage(p, outage_only)).collect();
    outage_table(&total);

    println!(
        "\nContention: every client needs one success; calls in the same 10 ms slot conflict."
    );
    println!("Policies: up to 100 retries, 10 ms initial backoff, 30 s cap; no budget.\n");
    let contenders: Vec<Policy> = Policy::all()
        .into_iter()
        .filter(|p| !matches!(p, Policy::Ours { budget: true, .. }))
        .collect();
    for clients in [50, 100, 190] {
        let rows: Vec<Summary> = contenders.iter().map(|p| run_contention(*p, clients)).collect();
        contention_table(clients, &rows);
    }

    if let Some(path) = chart {
        match std::fs::write(&path, svg(&rows, &model)) {
            Ok(()) => println!("\nwrote the load chart to {path}"),
            Err(error) => {
                eprintln!("could not write {path}: {error}");
                std::process::exit(1);
            }
        }
    }
}
