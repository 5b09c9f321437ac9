//! A spike that ends: calls offered at ten times what the server takes for
//! 20 s, then falling back to a tenth of it, half of it, or all of it. The
//! overload goal (G4) keeps demand where it was when the overload ends; in
//! the commonest overload, demand itself falls, and a throttle that cut its
//! share then sends so little that the evidence it needs to open again
//! comes back slowly. What counts is the calls started from 2 s after the
//! spike that succeed: with no admission, all of them.

use std::time::Duration;

use super::{Admit, FLEET, RATES, Scenario, run_stages, sum};

const S: fn(u64) -> Duration = Duration::from_secs;

/// Demand at the rate after the spike before it, for the books to be
/// those of a process in steady use.
const BEFORE: Duration = Duration::from_secs(30);
/// The spike.
const SPIKE: Duration = Duration::from_secs(20);
/// After it.
const AFTER: Duration = Duration::from_secs(30);
/// Demand after the spike, as a share of what the server takes.
pub(super) const FALLS: [f64; 3] = [0.1, 0.5, 1.0];

/// One run's figures: the share of calls that succeeded 2 to 10 s and 10
/// to 30 s after the spike (`None` where none was made), and all attempts
/// during the spike ÷ the attempts the server accepted.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spike {
    pub(super) early: Option<f64>,
    pub(super) late: Option<f64>,
    pub(super) load: f64,
}

/// `k` processes at `rate` calls a second each in the spike, against a
/// server taking a tenth of that; the demand then falls to `fall` times
/// what the server takes.
pub(super) fn spike(admit: Admit, rate: f64, k: usize, fall: f64) -> Spike {
    let capacity = rate * k as f64 / 10.0;
    let after = rate / 10.0 * fall;
    let scenario =
        Scenario::Overload { healthy: Duration::ZERO, over: BEFORE + SPIKE + AFTER, capacity };
    let stages = [(BEFORE, after), (SPIKE, rate), (AFTER, after)];
    let s = run_stages(admit, scenario, &stages, k);
    let end = BEFORE + SPIKE;
    let succeeded = |from: Duration, to: Duration| {
        let offered = sum(&s.offered, from, to);
        (offered > 0.0).then(|| sum(&s.succeeded, from, to) / offered)
    };
    Spike {
        early: succeeded(end + S(2), end + S(10)),
        late: succeeded(end + S(10), end + S(30)),
        load: sum(&s.attempts, BEFORE, end) / sum(&s.accepted, BEFORE, end).max(1.0),
    }
}

pub(super) fn percent(share: Option<f64>) -> String {
    share.map_or("–".to_owned(), |s| format!("{:.1}%", (s * 100.0).max(0.0)))
}

/// Runs the spike for every design, column and fall; prints the table and
/// returns the checks ours failed: at least 99% of the calls started 2 to
/// 10 s after the spike succeed.
pub(crate) fn run() -> Vec<String> {
    println!(
        "\nSpike ends (calls offered at 10× what the server takes for 20 s, after 30 s at the \
         rate that follows; then a tenth of, half of, or all it takes, for 30 s): calls that \
         succeeded 2–10 s / 10–30 s after the spike, and all attempts ÷ accepted during it"
    );
    let columns: Vec<(f64, usize)> =
        RATES.iter().flat_map(|&rate| [(rate, 1), (rate, FLEET)]).collect();
    let mut failures = Vec::new();
    for fall in FALLS {
        println!("  falling to {fall}× what the server takes:");
        let mut header = format!("    {:<30}", "design");
        for &(rate, k) in &columns {
            let after = rate / 10.0 * fall;
            let name = format!("{rate}/s→{after:.2}/s P{}", if k == 1 { "=1" } else { "≥10" });
            header.push_str(&format!(" {name:>26}"));
        }
        println!("{header}");
        for admit in Admit::all() {
            let mut line = format!("    {:<30}", admit.name());
            for &(rate, k) in &columns {
                let s = spike(admit, rate, k, fall);
                let cell = format!("{}/{} {:.2}×", percent(s.early), percent(s.late), s.load);
                line.push_str(&format!(" {cell:>26}"));
                if admit == Admit::Ours && s.early.is_some_and(|e| e < 0.99) {
                    failures.push(format!(
                        "FAIL: spike ends {rate}/s k={k} falling to {fall}×: {} of calls \
                         succeeded 2–10 s after, under 99%",
                        percent(s.early)
                    ));
                }
            }
            println!("{line}");
        }
    }
    for line in &failures {
        println!("  {line}");
    }
    if failures.is_empty() {
        println!("  PASS: spike ends: ours at least 99% 2–10 s after the spike, every cell");
    }
    failures
}
