//! Pooled evidence: every process calls once a second; the server takes a
//! tenth of the fleet's calls (503 above it) for 40 s, then everything. A
//! process alone has too few answers to tell this overload from bad luck
//! in time; a fleet pools them.

use super::{Goals, Options, arrived, columns, off_and_on, started, success, table};
use crate::harness::{Run, Spec};
use crate::server::Rule;

const RATE: f64 = 1.0;
const OVERLOAD_MS: u64 = 40_000;
const LENGTH_MS: u64 = 55_000;
const FROM_MS: f64 = 10_000.0;
const LOAD_GOAL: f64 = 3.2;

/// The calls a share of success is taken over after the overload: those
/// started within this many milliseconds.
const BACK_WINDOW_MS: f64 = 2_000.0;

/// Requests ÷ accepted from 10 s to the end of the overload, and the
/// seconds after it until calls succeed at 95% and more for good: from
/// the first second from which the calls started in every two seconds
/// that follow succeed at 95% or more.
fn figures(run: &Run) -> (f64, Option<u64>) {
    let end = OVERLOAD_MS as f64;
    let (all, ok) = arrived(&run.arrivals, FROM_MS, end);
    let seconds = (LENGTH_MS - OVERLOAD_MS) / 1000 - 1;
    let good: Vec<bool> = (0..seconds)
        .map(|s| {
            let from = end + (s * 1000) as f64;
            let calls = started(&run.calls, from, from + BACK_WINDOW_MS);
            success(calls).is_some_and(|share| share >= 0.95)
        })
        .collect();
    let back = (0..seconds).find(|&s| good[s as usize..].iter().all(|g| *g));
    (all as f64 / ok.max(1) as f64, back)
}

fn seconds(back: Option<u64>) -> String {
    back.map_or("never".to_owned(), |s| format!("{s} s"))
}

pub(super) fn run(options: &Options) -> Vec<String> {
    let mut goals = Goals::new();
    let mut rows: Vec<(String, Vec<String>)> =
        ["requests ÷ accepted, from 10 s", "back: calls succeed at 95% after"]
            .iter()
            .map(|name| ((*name).to_owned(), Vec::new()))
            .collect();
    for &processes in &options.processes {
        for _ in 0..options.runs {
            let capacity = processes as f64 * RATE / 10.0;
            let spec = Spec {
                processes,
                fleet: false,
                rule: Rule::Bucket {
                    rate: capacity,
                    depth: capacity.max(1.0),
                    until_ms: Some(OVERLOAD_MS as f64),
                },
                stages: vec![(LENGTH_MS, RATE)],
                return_if_paused: false,
                linger_ms: 10_000,
                faults: Vec::new(),
                hostile: None,
            };
            let (off, on) = off_and_on(&spec);
            let (off, on) = (figures(&off), figures(&on));
            for (load, back) in [off, on] {
                rows[0].1.push(format!("{load:.2}×"));
                rows[1].1.push(seconds(back));
            }
            let label = format!("pooled, P={processes}");
            goals.check(
                on.0 <= LOAD_GOAL,
                format!(
                    "{label}: the fleet's load {:.2}× ≤ {LOAD_GOAL}× from 10 s (alone {:.2}×)",
                    on.0, off.0
                ),
            );
            let in_time = match (on.1, off.1) {
                (Some(on), Some(off)) => on <= off + 1,
                (Some(_), None) => true,
                (None, _) => false,
            };
            goals.check(
                in_time,
                format!(
                    "{label}: back in {} with the fleet, no later than alone ({}) + 1 s",
                    seconds(on.1),
                    seconds(off.1)
                ),
            );
        }
    }
    table(
        &format!(
            "Pooled evidence: {RATE} call/s a process; the server takes a tenth of it for {} s, then everything",
            OVERLOAD_MS / 1000
        ),
        &columns(options),
        &rows,
    );
    goals.missed()
}
