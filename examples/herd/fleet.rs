//! The fleet grid: what a total outage costs a server for every number of
//! client processes and every request rate, and how soon the fleet lets it
//! recover.

use std::collections::HashMap;
use std::time::Duration;

use crate::policy::Policy;
use crate::sim::{Outage, run_outage};

/// Requests per second per process, the grid's rows.
const RATES: [f64; 5] = [0.1, 1.0, 10.0, 100.0, 1000.0];
/// Client processes, the grid's columns.
const PROCESSES: [usize; 4] = [1, 10, 100, 1000];
/// At most this many processes are simulated per cell.
const SIMULATED: usize = 3;

/// Processes simulated for `processes` at `rate`. Each process has its own
/// middleware and budget and shares nothing with the others but the
/// server, so `k` of them against `k / P` of the server's capacity stand
/// for all `P`.
fn simulated(processes: usize, rate: f64) -> usize {
    if rate >= 1000.0 { 1 } else { processes.min(SIMULATED) }
}

/// One cell: amplification in the total outage, recovery in the other run.
#[derive(Debug, Clone, Copy)]
struct Cell {
    amplification: f64,
    recovered: Option<u64>,
}

impl Cell {
    fn run(policy: Policy, rate: f64, k: usize) -> Self {
        let total = Outage {
            processes: k,
            rate,
            issue_for: Duration::from_secs(60),
            outage: (Duration::ZERO, Duration::MAX),
            capacity: 0.0,
            reserve: None,
        };
        let amplification = run_outage(policy, total).amplification();
        let recovery = Outage {
            issue_for: Duration::from_secs(80),
            outage: (Duration::from_secs(20), Duration::from_secs(40)),
            // 1.2 × the fleet's rate, scaled to the k processes simulated.
            capacity: 1.2 * rate * k as f64,
            ..total
        };
        Cell { amplification, recovered: run_outage(policy, recovery).recovered }
    }

    fn show(&self) -> String {
        let recovered = self.recovered.map_or("never".to_owned(), |s| format!("+{s}s"));
        format!("{:.2} / {recovered}", self.amplification)
    }
}

/// Prints every policy's grid; returns the largest amplification of the
/// crate's default.
pub(crate) fn grid() -> f64 {
    println!(
        "Fleet grid: P client processes, each sending GETs at a steady rate to one shared server. \
         Each cell is \"amplification / recovered\":"
    );
    println!(
        "  amplification = calls the server saw / requests issued, requests issued for 60 s \
         with every call answered 503 (retries allowed to finish);"
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
    let mut worst_default: f64 = 0.0;
    for policy in Policy::fleet() {
        println!("\n{}", policy.name());
        let mut header = format!("  {:>14}", "req/s per proc");
        for p in PROCESSES {
            header.push_str(&format!(" {:>16}", format!("P={p}")));
        }
        println!("{header}");
        let mut runs: HashMap<(usize, usize), Cell> = HashMap::new();
        for (row, rate) in RATES.into_iter().enumerate() {
            let mut line = format!("  {rate:>14}");
            for p in PROCESSES {
                let k = simulated(p, rate);
                let cell = *runs.entry((row, k)).or_insert_with(|| Cell::run(policy, rate, k));
                if matches!(policy, Policy::Default) {
                    worst_default = worst_default.max(cell.amplification);
                }
                line.push_str(&format!(" {:>16}", cell.show()));
            }
            println!("{line}");
        }
    }
    worst_default
}
