//! A herd of clients against a simulated server, in virtual time.
//!
//! Every request goes through a real `reqwest_middleware` stack; the last
//! middleware plays the server and answers without a network. Time is tokio's
//! paused clock, so minutes of simulated traffic take a moment, and our
//! jitter is seeded, so our rows are the same on every run. (The peer,
//! reqwest-retry, draws its jitter from the thread's generator; its rows vary
//! a little from run to run.)
//!
//! Five models:
//!
//! 1. Outage then recovery: clients send requests at a steady rate; the server
//!    answers 503 to everything for a while, then serves up to a capacity per
//!    second and answers 503 beyond it. Also drawn as a chart.
//! 2. Contention, after the AWS Architecture Blog's "Exponential Backoff And
//!    Jitter": each client needs one successful optimistic-concurrency write.
//! 3. No synchronized return: a thousand clients told `Retry-After: 5` at once.
//! 4. The fleet grid: 1 to 1000 client processes at 0.1 to 1000 requests a
//!    second each see one budget window (10 s) of healthy traffic, then a
//!    total outage, for the crate's budget and other designs (the old budget,
//!    tower's, gRPC's, the AWS SDKs'). For the crate's default every cell is
//!    held to the budget's bound, `min(1 + max_retries, 1 + ratio × window /
//!    T + (reserve + 1) / (r × T))`, over outages of 60 s and 10 min and for
//!    processes that send one call each; and the target of at most 1.1× at
//!    1 request a second or more over 60 s is checked.
//! 5. Partial failure: one process at 20 requests a second for 120 s against
//!    a server failing each attempt with probability 1% to 50% (503), and a
//!    fresh process's burst of 1000 calls against 429s with `Retry-After: 1`:
//!    success rate and extra load of the crate's default, no budget, the
//!    AWS-, gRPC- and TpsBudget-like models and reqwest's built-in retries,
//!    then the crate's targets (99.9% of calls saved at 5%, 99% at 20%, at
//!    most 1.3× load at 50%, no policy both saving more and loading less).
//!
//! Run with
//!
//! ```text
//! cargo run --release -p reqwest-safe-retry-sim --bin herd -- [chart.svg] [--clients N] [--processes P] [--reserve R]
//! ```
//!
//! The first model's clients are spread over P processes, each with its own
//! middleware and so its own budget; the `+ budget` policies' budget holds a
//! reserve of R retries (by default the crate's own: `max_retries + 2`, 5 with
//! the 3 retries used here). The other models ignore the options. Every check
//! prints PASS or FAIL; the simulator exits with status 1 if any failed, after
//! printing them all again.

mod admission;
mod chart;
mod contention;
mod fleet;
mod partial;
mod policy;
mod sim;
mod spread;

use std::time::Duration;

use policy::Policy;
use reqwest_safe_retry::RetryBudget;
use sim::{Outage, Summary, run_outage};

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

fn main() {
    let mut args = std::env::args().skip(1);
    let mut chart = None;
    let mut clients = 1000;
    let mut processes = 1;
    let mut reserve = None;
    let mut admission_only = false;
    let mut spike_only = false;
    let mut pooled_only = false;
    let mut quota_only = false;
    let mut partial_only = false;
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> usize {
            args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("{name} takes a positive whole number");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--admission" => admission_only = true,
            "--spike" => spike_only = true,
            "--pooled" => pooled_only = true,
            "--quota" => quota_only = true,
            "--partial" => partial_only = true,
            "--clients" => clients = number("--clients").max(1),
            "--processes" => processes = number("--processes").max(1),
            "--reserve" => {
                reserve = match u32::try_from(number("--reserve")) {
                    Ok(r) if r <= 1000 => Some(r),
                    _ => {
                        eprintln!("--reserve takes 0 to 1000 retries");
                        std::process::exit(2)
                    }
                }
            }
            _ if arg.starts_with("--") => {
                eprintln!(
                    "usage: herd [chart.svg] [--clients N] [--processes P] [--reserve R] \
                     [--admission] [--spike] [--pooled] [--quota] [--partial]\n\
                     \x20 chart.svg      write the outage-then-recovery load chart there\n\
                     \x20 --clients N    clients of the outage tables (default 1000)\n\
                     \x20 --processes P  processes they are spread over (default 1)\n\
                     \x20 --reserve R    the \"+ budget\" rows' reserve (default: the crate's, \
                     max_retries + 2)\n\
                     \x20 --admission    run the admission goals (G1–G5, spike ends) alone\n\
                     \x20 --spike        run the admission's spike-ends table alone\n\
                     \x20 --pooled       run the pooled-evidence table (a fleet's store) alone\n\
                     \x20 --quota        run the shared-quota table (a fleet's pauses) alone\n\
                     \x20 --partial      run the partial-failure tables alone\n\
                     Then the contention, spread, fleet-grid, partial-failure and admission \
                     tables; exits 1 if a check fails."
                );
                std::process::exit(2);
            }
            _ => chart = Some(arg),
        }
    }
    if spike_only {
        finish(admission::run_spike());
    }
    if quota_only {
        finish(admission::run_quota());
    }
    if pooled_only {
        finish(admission::run_pooled());
    }
    if admission_only {
        finish(admission::run_goals());
    }
    if partial_only {
        finish(partial::run_tables());
    }
    let processes = processes.min(clients);
    // Each client sends one request every 2 s.
    let interval = 2.0;
    let model = Outage {
        processes,
        rate: clients as f64 / interval / processes as f64,
        issue_for: Duration::from_secs(60),
        outage: (Duration::from_secs(10), Duration::from_secs(30)),
        capacity: (clients as f64 * 0.6).max(1.0).floor(),
        reserve,
    };

    println!(
        "Outage then recovery: {clients} clients in {processes} process(es), one request each \
         per {interval}s for {}s; all 503 from {}s to {}s, then at most {} served per second \
         (a token bucket holding one second's worth).",
        model.issue_for.as_secs(),
        model.outage.0.as_secs(),
        model.outage.1.as_secs(),
        model.capacity
    );
    let reserve_text = match reserve {
        Some(r) => format!("a reserve of {r} (--reserve)"),
        None => format!(
            "the crate's default reserve, max_retries + 2 = {}",
            RetryBudget::default().reserve_for(3)
        ),
    };
    println!(
        "Policies: 3 retries, 500 ms initial backoff, 30 s cap (the crate's defaults); \
         \"+ budget\": the crate's budget with {reserve_text} (each final answer earns \
         0.1 retry, kept 10 s); \"new default\": RetryConfig::default().\n"
    );
    let rows: Vec<Summary> =
        Policy::outage_tables().into_iter().map(|p| run_outage(p, model)).collect();
    outage_table(&rows);

    println!("\nTotal outage for the whole run (every call fails):\n");
    let total: Vec<Summary> =
        Policy::outage_tables().into_iter().map(|p| run_outage(p, model.total())).collect();
    outage_table(&total);

    if let Some(path) = chart {
        let title = format!(
            "Server load per second: {clients} clients, outage {}–{} s, capacity {}/s",
            model.outage.0.as_secs(),
            model.outage.1.as_secs(),
            model.capacity
        );
        match std::fs::write(&path, chart::svg(&rows, &title, model.outage)) {
            Ok(()) => println!("\nwrote the outage-then-recovery load chart to {path}"),
            Err(error) => {
                eprintln!("could not write {path}: {error}");
                std::process::exit(1);
            }
        }
    }

    println!();
    contention::run();

    println!();
    spread::run();

    println!();
    let fleet = fleet::grid();
    println!("\nfleet grid: max amplification {:.2} (default, 60 s outage)", fleet.worst_default);
    let mut failures = fleet.failures;

    println!();
    failures.extend(partial::run_tables());

    println!();
    failures.extend(admission::run_goals());
    failures.extend(admission::run_pooled());
    failures.extend(admission::run_quota());
    finish(failures);
}

/// Prints the checks that failed again and exits 1 if any did; else says
/// all passed and exits 0.
fn finish(failures: Vec<String>) -> ! {
    if !failures.is_empty() {
        println!("\n{} check(s) failed:", failures.len());
        for line in &failures {
            println!("  {line}");
        }
        std::process::exit(1);
    }
    println!("\nall checks passed");
    std::process::exit(0)
}
