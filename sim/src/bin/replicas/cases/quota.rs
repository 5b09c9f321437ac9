//! A shared quota: the processes call a rate limiter that takes 40
//! requests, then answers `429` with `Retry-After: 2` for two seconds.
//! What reaches the limiter inside each pause, after the request that
//! started it, is what a fleet failed to hold back.

use super::{Goals, Options, columns, off_and_on, table};
use crate::harness::{Run, Spec};
use crate::server::Rule;

const QUOTA: u32 = 40;
const PAUSE_MS: u64 = 2_000;
const RATE: f64 = 2.0;
const LENGTH_MS: u64 = 30_000;

/// Requests inside each pause: the first's, the mean, the most.
pub(super) struct Inside {
    pub(super) pauses: usize,
    pub(super) first: usize,
    pub(super) mean: f64,
    pub(super) most: usize,
}

/// The requests inside each pause the limiter began from `from` to `to`.
pub(super) fn inside(run: &Run, from: f64, to: f64) -> Inside {
    let counts: Vec<usize> = run
        .pauses
        .iter()
        .filter(|&&start| start >= from && start < to)
        .map(|&start| {
            let end = start + PAUSE_MS as f64;
            run.arrivals.iter().filter(|a| a.at > start && a.at < end).count()
        })
        .collect();
    let mean = counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64;
    Inside {
        pauses: counts.len(),
        first: counts.first().copied().unwrap_or(0),
        mean,
        most: counts.iter().copied().max().unwrap_or(0),
    }
}

/// The limiter, as the fault case uses it too.
pub(super) const LIMITER: Rule = Rule::Quota { quota: QUOTA, pause_ms: PAUSE_MS };

pub(super) fn run(options: &Options) -> Vec<String> {
    let mut goals = Goals::new();
    for (return_if_paused, title) in [
        (true, "calls carrying ReturnIfPaused (a paused host's call returns at once)"),
        (false, "calls as the quick start makes them (a paused host's call waits)"),
    ] {
        let mut rows: Vec<(String, Vec<String>)> = [
            "pauses",
            "requests inside the first pause",
            "requests inside a pause, mean",
            "requests inside a pause, most",
            "calls that failed",
        ]
        .iter()
        .map(|name| ((*name).to_owned(), Vec::new()))
        .collect();
        for &processes in &options.processes {
            for _ in 0..options.runs {
                let spec = Spec {
                    processes,
                    fleet: false,
                    rule: LIMITER,
                    stages: vec![(LENGTH_MS, RATE)],
                    arrivals: options.arrivals,
                    return_if_paused,
                    linger_ms: 35_000,
                    faults: Vec::new(),
                    hostile: None,
                };
                let (off, on) = off_and_on(&spec);
                for (run, fleet) in [(&off, false), (&on, true)] {
                    let i = inside(run, 0.0, f64::INFINITY);
                    let failed = run
                        .calls
                        .iter()
                        .filter(|c| !matches!(c.outcome.as_str(), "ok" | "s429" | "paused"))
                        .count();
                    let cells = [
                        i.pauses.to_string(),
                        i.first.to_string(),
                        format!("{:.2}", i.mean),
                        i.most.to_string(),
                        failed.to_string(),
                    ];
                    for (row, cell) in rows.iter_mut().zip(cells) {
                        row.1.push(cell);
                    }
                    if fleet {
                        let label = format!("quota, {title}, P={processes}");
                        goals.check(
                            i.pauses > 0 && i.first <= 1 && i.mean <= 1.0,
                            format!(
                                "{label}: at most 1 request inside a pause, the first included (first {}, mean {:.2} over {} pauses)",
                                i.first, i.mean, i.pauses
                            ),
                        );
                    }
                    goals.check(
                        failed == 0,
                        format!(
                            "quota, {title}, P={processes}, fleet {}: no call failed ({failed})",
                            if fleet { "on" } else { "off" }
                        ),
                    );
                }
            }
        }
        table(
            &format!(
                "Shared quota: {QUOTA} requests, then 429 Retry-After: 2 for 2 s; {RATE} calls a second a process for {} s; {title}",
                LENGTH_MS / 1000
            ),
            &columns(options),
            &rows,
        );
        goals.print();
    }
    goals.missed()
}
