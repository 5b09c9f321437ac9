//! A spike that ends: a token bucket of 10 requests a second (`503` above
//! it); the processes offer 100 calls a second in all for 20 s, after 10 s
//! at the rate that follows, then 5 or 10 calls a second in all for 10 s.

use super::{Goals, Options, arrived, columns, off_and_on, percent, started, success, table};
use crate::harness::{Call, Run, Spec};
use crate::server::Rule;

const CAPACITY: f64 = 10.0;
const SPIKE: f64 = 100.0;
const BEFORE_MS: u64 = 10_000;
const SPIKE_MS: u64 = 20_000;
const AFTER_MS: u64 = 10_000;
/// Calls a second in all after the spike.
const FALLS: [f64; 2] = [5.0, 10.0];
/// The load's goal: requests ÷ accepted during the spike.
const LOAD_GOAL: f64 = 3.2;

/// What a run came to.
struct Figures {
    /// Requests ÷ accepted during the spike, in all and from its 10th
    /// second, once the throttles have had time to settle.
    load: f64,
    settled: f64,
    /// Retries of calls started in the spike ÷ the requests accepted in it.
    retries: f64,
    /// The share of calls started 2 to 10 s after it that succeeded.
    after: Option<f64>,
    /// The share of spike calls throttled.
    throttled: Option<f64>,
    /// What the calls started 2 to 10 s after it that failed came to.
    failed: String,
}

fn figures(run: &Run) -> Figures {
    let (from, to) = (BEFORE_MS as f64, (BEFORE_MS + SPIKE_MS) as f64);
    let (all, ok) = arrived(&run.arrivals, from, to);
    let (late, late_ok) = arrived(&run.arrivals, from + 10_000.0, to);
    let after: Vec<_> = started(&run.calls, to + 2_000.0, to + AFTER_MS as f64).collect();
    let failed = outcomes(after.iter().copied());
    let after = success(after.into_iter());
    let spike: Vec<_> = started(&run.calls, from, to).collect();
    let throttled = spike.iter().filter(|c| c.outcome == "throttled").count();
    let throttled = (!spike.is_empty()).then(|| throttled as f64 / spike.len() as f64);
    let retries: u32 = spike.iter().map(|c| c.attempts.saturating_sub(1)).sum();
    Figures {
        load: all as f64 / ok.max(1) as f64,
        settled: late as f64 / late_ok.max(1) as f64,
        retries: f64::from(retries) / ok.max(1) as f64,
        after,
        throttled,
        failed,
    }
}

/// The outcomes of the failed calls among `calls`, with their counts.
fn outcomes<'a>(calls: impl Iterator<Item = &'a Call>) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for call in calls.filter(|c| !c.ok()) {
        *counts.entry(call.outcome.as_str()).or_insert(0_u32) += 1;
    }
    if counts.is_empty() {
        return "none".to_owned();
    }
    let counts: Vec<String> = counts.iter().map(|(outcome, n)| format!("{n} {outcome}")).collect();
    counts.join(", ")
}

pub(super) fn run(options: &Options) -> Vec<String> {
    let mut goals = Goals::new();
    for fall in FALLS {
        let mut rows: Vec<(String, Vec<String>)> = [
            "spike: requests ÷ accepted",
            "spike from 10 s: requests ÷ accepted",
            "spike: retries ÷ accepted",
            "spike: calls throttled",
            "calls started 2–10 s after that succeed",
            "those that failed, by outcome",
        ]
        .iter()
        .map(|name| ((*name).to_owned(), Vec::new()))
        .collect();
        for &processes in &options.processes {
            for _ in 0..options.runs {
                let p = processes as f64;
                let spec = Spec {
                    processes,
                    fleet: false,
                    rule: Rule::Bucket { rate: CAPACITY, depth: CAPACITY, until_ms: None },
                    stages: vec![
                        (BEFORE_MS, fall / p),
                        (SPIKE_MS, SPIKE / p),
                        (AFTER_MS, fall / p),
                    ],
                    arrivals: options.arrivals,
                    return_if_paused: false,
                    linger_ms: 15_000,
                    faults: Vec::new(),
                    hostile: None,
                };
                let (off, on) = off_and_on(&spec);
                let (off, on) = (figures(&off), figures(&on));
                for f in [&off, &on] {
                    rows[0].1.push(format!("{:.2}×", f.load));
                    rows[1].1.push(format!("{:.2}×", f.settled));
                    rows[2].1.push(format!("{:.2}×", f.retries));
                    rows[3].1.push(percent(f.throttled));
                    rows[4].1.push(percent(f.after));
                    rows[5].1.push(f.failed.clone());
                }
                let label = format!("spike falling to {fall}/s, P={processes}");
                for (Figures { load, after, .. }, fleet) in [(&off, "off"), (&on, "on")] {
                    let (load, after) = (*load, *after);
                    goals.check(
                        load <= LOAD_GOAL,
                        format!("{label}, fleet {fleet}: spike load {load:.2}× ≤ {LOAD_GOAL}×"),
                    );
                    let after = after.unwrap_or(1.0);
                    goals.check(
                        after >= 0.99,
                        format!(
                            "{label}, fleet {fleet}: {:.1}% of the calls after it succeed, ≥ 99%",
                            after * 100.0
                        ),
                    );
                }
                goals.check(
                    on.load <= off.load + 0.15,
                    format!(
                        "{label}: the fleet's load no worse than alone ({:.2}× against {:.2}×)",
                        on.load, off.load
                    ),
                );
            }
        }
        table(
            &format!(
                "A spike that ends: {CAPACITY} req/s taken (503 above); {SPIKE} calls/s in all for {} s, then {fall} calls/s",
                SPIKE_MS / 1000
            ),
            &columns(options),
            &rows,
        );
        goals.print();
    }
    goals.missed()
}
