//! A hostile member of the fleet: the server answers every request, and
//! something that can write the store writes the host's keys and the
//! pause channel (see [`crate::hostile`]). Garbage and values out of bounds
//! must turn away at most 1% of the calls; a plausible word (a long pause,
//! renewed; a claim on a probe) must hold no call longer than the
//! `Retry-After` cap in all, after which it gets `HostPaused`.

use super::{Goals, Options, table};
use crate::harness::{self, Run, Spec};
use crate::hostile::Play;
use crate::server::Rule;

/// The middleware's `Retry-After` cap, by default.
const CAP_MS: f64 = 30_000.0;
/// What a call may take beyond the cap: the request itself.
const SLACK_MS: f64 = 500.0;

fn spec(options: &Options, processes: usize, fleet: bool, play: Option<Play>) -> Spec {
    Spec {
        processes,
        fleet,
        rule: Rule::Everything,
        stages: vec![(16_000, 1.0)],
        arrivals: options.arrivals,
        return_if_paused: false,
        linger_ms: 70_000,
        faults: Vec::new(),
        hostile: play,
    }
}

/// Calls, calls turned away (not `ok`), calls held past the cap, the
/// longest call (s), and the calls that got `HostPaused`.
fn figures(run: &Run) -> (usize, usize, usize, f64, usize) {
    let calls = run.calls.len() + run.unfinished;
    let away = run.calls.iter().filter(|c| !c.ok()).count() + run.unfinished;
    let held = run.calls.iter().filter(|c| c.took > CAP_MS + SLACK_MS).count() + run.unfinished;
    let longest = run.calls.iter().map(|c| c.took).fold(0.0, f64::max) / 1000.0;
    let paused = run.calls.iter().filter(|c| c.outcome == "paused").count();
    (calls, away, held, longest, paused)
}

pub(super) fn run(options: &Options) -> Vec<String> {
    let mut goals = Goals::new();
    let mut columns = Vec::new();
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for &processes in &options.processes {
        for run in 1..=options.runs {
            let run = if options.runs > 1 { format!(" #{run}") } else { String::new() };
            columns.push(format!("P={processes}{run}"));
        }
    }
    let mut plays: Vec<Option<Play>> = vec![None];
    plays.extend(Play::ALL.map(Some));
    for play in plays {
        let name = play.map_or("fleet off (reference)", Play::name);
        let mut cells = Vec::new();
        for &processes in &options.processes {
            for _ in 0..options.runs {
                let run = harness::run(&spec(options, processes, play.is_some(), play));
                let (calls, away, held, longest, paused) = figures(&run);
                cells.push(format!(
                    "{away}/{calls} away, {held} held, ≤{longest:.1} s, {paused} paused"
                ));
                let label = format!("hostile, {name}, P={processes}");
                match play {
                    Some(play) if play.garbage() => {
                        let share = away as f64 / calls.max(1) as f64;
                        goals.check(
                            share <= 0.01,
                            format!("{label}: {away} of {calls} calls turned away, ≤ 1%"),
                        );
                    }
                    _ => {}
                }
                goals.check(
                    held == 0,
                    format!(
                        "{label}: no call held past the cap ({held}; the longest {longest:.1} s)"
                    ),
                );
            }
        }
        rows.push((name.to_owned(), cells));
    }
    table(
        "A hostile member: the server answers 200; 1 call/s a process for 16 s; what the store's writer did",
        &columns,
        &rows,
    );
    goals.missed()
}
