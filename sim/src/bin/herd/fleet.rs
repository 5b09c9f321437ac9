//! The fleet grid: what a total outage costs a server for every number of
//! client processes and every request rate, and how soon the fleet lets it
//! recover. For the crate's default, each cell is checked against the bound
//! the budget promises.

use std::collections::HashMap;
use std::time::Duration;

use reqwest_safe_retry::RetryConfig;

use crate::policy::Policy;
use crate::sim::{Outage, run_outage};

/// Requests per second per process, the grid's rows.
const RATES: [f64; 5] = [0.1, 1.0, 10.0, 100.0, 1000.0];
/// Client processes, the grid's columns.
const PROCESSES: [usize; 4] = [1, 10, 100, 1000];
/// At most this many processes are simulated per cell.
const SIMULATED: usize = 3;
/// Healthy traffic each process sees before a total outage: one budget
/// window, so that a process starts the outage with a window's earnings.
const HEALTHY: Duration = Duration::from_secs(10);
/// The outage of every policy's grid.
const OUTAGE: Duration = Duration::from_secs(60);
/// The longer outage of the default's second grid.
const LONG_OUTAGE: Duration = Duration::from_secs(600);
/// The target for the default: at most this amplification at 1 request a
/// second per process or more, over the 60 s outage.
const TARGET: f64 = 1.1;
/// Slack for comparing a measured ratio with a computed one.
const EPSILON: f64 = 1e-9;

/// Processes simulated for `processes` at `rate`. Each process has its own
/// middleware and budget and shares nothing with the others but the
/// server, so `k` of them against `k / P` of the server's capacity stand
/// for all `P`.
fn simulated(processes: usize, rate: f64) -> usize {
    if rate >= 1000.0 { 1 } else { processes.min(SIMULATED) }
}

/// `k` processes at `rate` each: served at once for [`HEALTHY`], then every
/// call answered 503 while requests are issued for `length` and while their
/// retries run on.
fn total_outage(rate: f64, k: usize, length: Duration) -> Outage {
    Outage {
        processes: k,
        rate,
        issue_for: HEALTHY + length,
        outage: (HEALTHY, Duration::MAX),
        capacity: f64::INFINITY,
        reserve: None,
    }
}

/// `k` fresh processes that send one request each into a total outage.
fn one_call(k: usize) -> Outage {
    Outage {
        processes: k,
        rate: 1.0,
        issue_for: Duration::from_secs(1),
        outage: (Duration::ZERO, Duration::MAX),
        capacity: 0.0,
        reserve: None,
    }
}

/// Healthy for 20 s, all 503 for 20 s, then 40 s of serving up to 1.2 × the
/// rate of the `k` processes a second (503 beyond it).
fn recovery(rate: f64, k: usize) -> Outage {
    Outage {
        processes: k,
        rate,
        issue_for: Duration::from_secs(80),
        outage: (Duration::from_secs(20), Duration::from_secs(40)),
        capacity: 1.2 * rate * k as f64,
        reserve: None,
    }
}

/// The amplification of a total outage, counting only the requests issued
/// during it and the calls they made.
fn amplification(policy: Policy, model: Outage) -> f64 {
    run_outage(policy, model).outage_amplification()
}

/// One cell: amplification in the total outage, recovery in the other run.
#[derive(Debug, Clone, Copy)]
struct Cell {
    amplification: f64,
    recovered: Option<u64>,
}

impl Cell {
    fn run(policy: Policy, rate: f64, k: usize) -> Self {
        Cell {
            amplification: amplification(policy, total_outage(rate, k, OUTAGE)),
            recovered: run_outage(policy, recovery(rate, k)).recovered,
        }
    }

    fn recovered(&self) -> String {
        self.recovered.map_or("never".to_owned(), |s| format!("+{s}s"))
    }

    fn show(&self) -> String {
        format!("{:.2} / {}", self.amplification, self.recovered())
    }
}

/// What the crate's default budget promises for one process in a total
/// outage: it sends at most the window's unspent earnings plus the reserve
/// in retries, and no request more than `max_retries` of them.
#[derive(Debug, Clone, Copy)]
struct Bound {
    ratio: f64,
    window: f64,
    reserve: f64,
    max_retries: f64,
}

impl Bound {
    fn of_default() -> Self {
        let config = RetryConfig::default();
        let budget = config.budget().expect("the default has a budget");
        Self {
            ratio: budget.ratio(),
            window: budget.window().as_secs_f64(),
            reserve: f64::from(budget.reserve_for(config.max_retries())),
            max_retries: f64::from(config.max_retries()),
        }
    }

    /// After a window of healthy traffic at `rate` a second, an outage of
    /// `length`: `1 + ratio × window / T + (reserve + 1) / (r × T)`, at most
    /// `1 + max_retries`; the one is for a booking of earnings that
    /// straddles the window.
    fn after_healthy(&self, rate: f64, length: Duration) -> f64 {
        let t = length.as_secs_f64();
        (1.0 + self.ratio * self.window / t + (self.reserve + 1.0) / (rate * t))
            .min(1.0 + self.max_retries)
    }

    /// One request from a process that has earned nothing.
    fn one_call(&self) -> f64 {
        (1.0 + self.reserve).min(1.0 + self.max_retries)
    }
}

/// What the grids found: the default's largest amplification over the
/// 60 s outage, and every check that failed.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) worst_default: f64,
    pub(crate) failures: Vec<String>,
}

fn header(width: usize) -> String {
    let mut header = format!("  {:>14}", "req/s per proc");
    for p in PROCESSES {
        header.push_str(&format!(" {:>width$}", format!("P={p}")));
    }
    header
}

fn measured_within(measured: f64, bound: f64) -> String {
    let sign = if measured <= bound + EPSILON { "≤" } else { ">" };
    format!("{measured:.3} {sign} {bound:.3}")
}

/// Cells still to be held to their bounds: what, measured, bound.
type Pending = Vec<(String, f64, f64)>;

/// Holds each cell of a grid just printed to its bound: a cell over it is a
/// failure, printed at once.
fn settle(pending: Pending, report: &mut Report) {
    for (what, measured, limit) in pending {
        if measured > limit + EPSILON {
            let line =
                format!("FAIL: {what}: amplification {measured:.4} exceeds its bound {limit:.4}");
            println!("  {line}");
            report.failures.push(line);
        }
    }
}

/// The default's grids: measured against the bound, for a 60 s outage (with
/// recovery), a 10 min one, and one call per process.
fn default_grids(report: &mut Report) {
    let bound = Bound::of_default();
    println!(
        "\nnew default: RetryConfig::default(): budget ratio {}, window {} s, reserve {} \
         (max_retries + 2), {} retries. Each cell is \"measured ≤ bound\", the bound being \
         min(1 + max_retries, 1 + ratio × window / T + (reserve + 1) / (r × T)) for r req/s per \
         process and an outage of T; no cell may exceed it.",
        bound.ratio, bound.window, bound.reserve, bound.max_retries
    );
    let width = 20;

    println!(
        "\n  Total outage of {} s after {} s healthy (\"/ recovered\" from the recovery run):",
        OUTAGE.as_secs(),
        HEALTHY.as_secs()
    );
    println!("{}", header(width));
    let mut runs: HashMap<(usize, usize), Cell> = HashMap::new();
    let mut target_worst: f64 = 0.0;
    let mut pending = Pending::new();
    for (row, rate) in RATES.into_iter().enumerate() {
        let limit = bound.after_healthy(rate, OUTAGE);
        let mut line = format!("  {rate:>14}");
        for p in PROCESSES {
            let k = simulated(p, rate);
            let cell = *runs.entry((row, k)).or_insert_with(|| Cell::run(Policy::Default, rate, k));
            report.worst_default = report.worst_default.max(cell.amplification);
            if rate >= 1.0 {
                target_worst = target_worst.max(cell.amplification);
            }
            let shown =
                format!("{} / {}", measured_within(cell.amplification, limit), cell.recovered());
            line.push_str(&format!(" {shown:>width$}"));
            let what = format!("{} s outage, {rate} req/s, P={p}", OUTAGE.as_secs());
            pending.push((what, cell.amplification, limit));
        }
        println!("{line}");
    }
    settle(pending, report);
    let target = format!(
        "target ≤ {TARGET}× at ≥ 1 req/s per process over the {} s outage: largest \
         amplification {target_worst:.3}",
        OUTAGE.as_secs()
    );
    if target_worst <= TARGET + EPSILON {
        println!("  PASS: {target}: met");
    } else {
        let line = format!("FAIL: {target}: missed");
        println!("  {line}");
        report.failures.push(line);
    }

    println!(
        "\n  Total outage of {} min after {} s healthy (no recovery run):",
        LONG_OUTAGE.as_secs() / 60,
        HEALTHY.as_secs()
    );
    println!("{}", header(width));
    let mut long: HashMap<(usize, usize), f64> = HashMap::new();
    let mut pending = Pending::new();
    for (row, rate) in RATES.into_iter().enumerate() {
        let limit = bound.after_healthy(rate, LONG_OUTAGE);
        let mut line = format!("  {rate:>14}");
        for p in PROCESSES {
            let k = simulated(p, rate);
            let measured = *long.entry((row, k)).or_insert_with(|| {
                amplification(Policy::Default, total_outage(rate, k, LONG_OUTAGE))
            });
            line.push_str(&format!(" {:>width$}", measured_within(measured, limit)));
            let what = format!("{} min outage, {rate} req/s, P={p}", LONG_OUTAGE.as_secs() / 60);
            pending.push((what, measured, limit));
        }
        println!("{line}");
    }
    settle(pending, report);

    println!(
        "\n  One call per process (a fleet of command-line tools: each fresh process sends a \
         single request into a total outage, with nothing earned):"
    );
    println!("{}", header(width));
    let limit = bound.one_call();
    let mut line = format!("  {:>14}", "1 call");
    let mut calls: HashMap<usize, f64> = HashMap::new();
    let mut pending = Pending::new();
    for p in PROCESSES {
        let k = p.min(SIMULATED);
        let measured =
            *calls.entry(k).or_insert_with(|| amplification(Policy::Default, one_call(k)));
        line.push_str(&format!(" {:>width$}", measured_within(measured, limit)));
        pending.push((format!("one call per process, P={p}"), measured, limit));
    }
    println!("{line}");
    settle(pending, report);
}

/// Prints every policy's grid, and the default's against its bound.
pub(crate) fn grid() -> Report {
    println!(
        "Fleet grid: P client processes, each sending GETs at a steady rate to one shared server. \
         Each cell is \"amplification / recovered\":"
    );
    println!(
        "  amplification: each process is served for {} s (one budget window), then every call \
         is answered 503 while requests are issued for {} s, and while their retries run on; \
         it counts calls the server saw during the outage per request issued during it;",
        HEALTHY.as_secs(),
        OUTAGE.as_secs()
    );
    println!(
        "  recovered = seconds after the outage's end until every call of every later second \
         is served, in a second run: healthy for 20 s, all 503 for 20 s, then 40 s of serving \
         up to 1.2 × the fleet's request rate a second (503 beyond it)."
    );
    println!(
        "Simulated k of P processes; processes are independent (each its own middleware and \
         budget, nothing shared but the server), so k = min(P, {SIMULATED}) (1 in the \
         1000 req/s row) of them run against a server with k/P of the capacity, and \
         identical runs are made once."
    );
    println!(
        "All policies: GET, 3 retries, the crate's default backoff (500 ms initial, full \
         jitter, 30 s cap) but for reqwest-retry's own; each process seeds its jitter."
    );
    let mut report = Report::default();
    default_grids(&mut report);
    for policy in Policy::fleet() {
        println!("\n{}", policy.name());
        println!("{}", header(16));
        let mut runs: HashMap<(usize, usize), Cell> = HashMap::new();
        for (row, rate) in RATES.into_iter().enumerate() {
            let mut line = format!("  {rate:>14}");
            for p in PROCESSES {
                let k = simulated(p, rate);
                let cell = *runs.entry((row, k)).or_insert_with(|| Cell::run(policy, rate, k));
                line.push_str(&format!(" {:>16}", cell.show()));
            }
            println!("{line}");
        }
    }
    report
}
