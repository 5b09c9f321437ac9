//! Redis lost: the shared quota's limiter again, with Redis killed
//! (`SIGKILL`) at 20 s and started again, empty, at 35 s, then frozen
//! (`SIGSTOP`) from 50 to 60 s. Calls carry `ReturnIfPaused`, so that
//! every call's time is its own: a call that waited for Redis would show.

use super::quota::{LIMITER, inside};
use super::{Goals, Options, columns, off_and_on, quantile, started, table};
use crate::harness::{Fault, Run, Spec};

/// The phases: name, from and to (ms).
const PHASES: [(&str, f64, f64); 5] = [
    ("Redis up", 0.0, 20_000.0),
    ("Redis killed", 20_000.0, 35_000.0),
    ("Redis back (from 2 s after its restart)", 37_000.0, 50_000.0),
    ("Redis frozen", 50_000.0, 60_000.0),
    ("Redis thawed", 60_000.0, 70_000.0),
];

/// A call slower than this waited for something.
const SLOW_MS: f64 = 100.0;

fn latency(run: &Run, from: f64, to: f64) -> (f64, f64, f64, usize) {
    let mut took: Vec<f64> = started(&run.calls, from, to).map(|c| c.took).collect();
    let slow = took.iter().filter(|t| **t >= SLOW_MS).count();
    (quantile(&mut took, 0.5), quantile(&mut took, 0.99), quantile(&mut took, 1.0), slow)
}

pub(super) fn run(options: &Options) -> Vec<String> {
    let mut goals = Goals::new();
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for (phase, _, _) in PHASES {
        rows.push((format!("{phase}: requests inside a pause, mean (most)"), Vec::new()));
        rows.push((format!("{phase}: call ms p50 / p99 / max"), Vec::new()));
        rows.push((format!("{phase}: calls ≥ {SLOW_MS} ms"), Vec::new()));
    }
    rows.push(("calls that failed".to_owned(), Vec::new()));
    for &processes in &options.processes {
        for _ in 0..options.runs {
            let spec = Spec {
                processes,
                fleet: false,
                rule: LIMITER,
                stages: vec![(70_000, 2.0)],
                arrivals: options.arrivals,
                return_if_paused: true,
                linger_ms: 5_000,
                faults: vec![
                    (20_000, Fault::Kill),
                    (35_000, Fault::Restart),
                    (50_000, Fault::Freeze),
                    (60_000, Fault::Thaw),
                ],
                hostile: None,
            };
            let (off, on) = off_and_on(&spec);
            let mut figures = Vec::new();
            for run in [&off, &on] {
                let mut cells = Vec::new();
                let mut per_phase = Vec::new();
                for (_, from, to) in PHASES {
                    let i = inside(run, from, to);
                    let (p50, p99, max, slow) = latency(run, from, to);
                    cells.push(format!("{:.2} ({})", i.mean, i.most));
                    cells.push(format!("{p50:.1} / {p99:.1} / {max:.0}"));
                    cells.push(slow.to_string());
                    per_phase.push((i.mean, p99, slow));
                }
                let failed = run
                    .calls
                    .iter()
                    .filter(|c| !matches!(c.outcome.as_str(), "ok" | "s429" | "paused"))
                    .count();
                cells.push(failed.to_string());
                for (row, cell) in rows.iter_mut().zip(cells) {
                    row.1.push(cell);
                }
                figures.push((per_phase, failed));
            }
            let (off, on) = (&figures[0], &figures[1]);
            let label = format!("faults, P={processes}");
            goals.check(
                on.1 == 0 && off.1 == 0,
                format!("{label}: no call failed (off {}, on {})", off.1, on.1),
            );
            let slow: usize = on.0.iter().map(|p| p.2).sum();
            goals.check(
                slow == 0,
                format!("{label}: no call of the fleet took {SLOW_MS} ms or more ({slow})"),
            );
            goals.check(
                on.0[0].0 <= 1.0 && on.0[2].0 <= 1.0,
                format!(
                    "{label}: about one request a pause with Redis up ({:.2}) and back ({:.2})",
                    on.0[0].0, on.0[2].0
                ),
            );
            goals.check(on.0[1].0 <= off.0[1].0 * 1.25 + 1.0, format!("{label}: with Redis killed, like processes alone ({:.2} a pause against {:.2})", on.0[1].0, off.0[1].0));
            goals.check(on.0[3].1 <= off.0[3].1 + 1.0, format!("{label}: with Redis frozen, p99 within 1 ms of processes alone ({:.1} against {:.1})", on.0[3].1, off.0[3].1));
        }
    }
    table(
        "Redis lost: the shared quota, Redis killed at 20 s, restarted at 35 s, frozen from 50 to 60 s (calls carry ReturnIfPaused)",
        &columns(options),
        &rows,
    );
    goals.missed()
}
