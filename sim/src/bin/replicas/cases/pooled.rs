//! Pooled evidence: every process calls once a second; the server takes a
//! tenth of the fleet's calls (503 above it) for 40 s, then everything. A
//! process alone has too few answers to tell this overload from bad luck
//! in time; a fleet pools them.

use super::{Goals, Options, arrived, columns, off_and_on, percent, started, success, table};
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

/// What a run came to.
struct Figures {
    /// Requests ÷ accepted from 10 s to the end of the overload.
    load: f64,
    /// Retries of the calls started then ÷ the requests accepted then.
    retries: f64,
    /// The share of the calls started then that were throttled.
    throttled: Option<f64>,
    /// The seconds after the overload until calls succeed at 95% and more
    /// for good: from the first second from which the calls started in
    /// every two seconds that follow succeed at 95% or more.
    back: Option<u64>,
}

fn figures(run: &Run) -> Figures {
    let end = OVERLOAD_MS as f64;
    let (all, ok) = arrived(&run.arrivals, FROM_MS, end);
    let calls: Vec<_> = started(&run.calls, FROM_MS, end).collect();
    let retries: u32 = calls.iter().map(|c| c.attempts.saturating_sub(1)).sum();
    let throttled = calls.iter().filter(|c| c.outcome == "throttled").count();
    let seconds = (LENGTH_MS - OVERLOAD_MS) / 1000 - 1;
    let good: Vec<bool> = (0..seconds)
        .map(|s| {
            let from = end + (s * 1000) as f64;
            let calls = started(&run.calls, from, from + BACK_WINDOW_MS);
            success(calls).is_some_and(|share| share >= 0.95)
        })
        .collect();
    Figures {
        load: all as f64 / ok.max(1) as f64,
        retries: f64::from(retries) / ok.max(1) as f64,
        throttled: (!calls.is_empty()).then(|| throttled as f64 / calls.len() as f64),
        back: (0..seconds).find(|&s| good[s as usize..].iter().all(|g| *g)),
    }
}

fn seconds(back: Option<u64>) -> String {
    back.map_or("never".to_owned(), |s| format!("{s} s"))
}

pub(super) fn run(options: &Options) -> Vec<String> {
    let mut goals = Goals::new();
    let mut rows: Vec<(String, Vec<String>)> = [
        "requests ÷ accepted, from 10 s",
        "retries ÷ accepted, from 10 s",
        "calls throttled, from 10 s",
        "back: calls succeed at 95% after",
    ]
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
                arrivals: options.arrivals,
                return_if_paused: false,
                linger_ms: 10_000,
                faults: Vec::new(),
                hostile: None,
            };
            let (off, on) = off_and_on(&spec);
            let (off, on) = (figures(&off), figures(&on));
            for figures in [&off, &on] {
                rows[0].1.push(format!("{:.2}×", figures.load));
                rows[1].1.push(format!("{:.2}×", figures.retries));
                rows[2].1.push(percent(figures.throttled));
                rows[3].1.push(seconds(figures.back));
            }
            let label = format!("pooled, P={processes}");
            goals.check(
                on.load <= LOAD_GOAL,
                format!(
                    "{label}: the fleet's load {:.2}× ≤ {LOAD_GOAL}× from 10 s (alone {:.2}×)",
                    on.load, off.load
                ),
            );
            let in_time = match (on.back, off.back) {
                (Some(on), Some(off)) => on <= off + 1,
                (Some(_), None) => true,
                (None, _) => false,
            };
            goals.check(
                in_time,
                format!(
                    "{label}: back in {} with the fleet, no later than alone ({}) + 1 s",
                    seconds(on.back),
                    seconds(off.back)
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
