//! The throttle on a fleet's pooled evidence: the goals G1–G5 for
//! processes that each judge a host on their own answers, and for the same
//! processes in a fleet that pools them through a store (its delay and its
//! losses modelled), at 1 call a second per process for 1, 10 and 100
//! processes, and at 10 and 100 for 10. Unlike the goals' fleet columns,
//! every process is simulated.

use super::goals::{Column, flaky_share, outage, overload, quiet_refusals, secs};
use super::spike::{FALLS, percent, spike};
use super::{Admit, Arrivals, StoreModel};
use std::time::Duration;

/// The stores: one near (2 ms a command, none lost), one far and lossy
/// (50 ms, one command in ten lost).
pub(super) const MODELS: [StoreModel; 2] = [
    StoreModel { delay: Duration::from_millis(2), lost_per_mille: 0, feed: true },
    StoreModel { delay: Duration::from_millis(50), lost_per_mille: 100, feed: true },
];

/// Calls a second per process, and processes.
const COLUMNS: [Column; 5] = [(1.0, 1), (1.0, 10), (1.0, 100), (10.0, 10), (100.0, 10)];

/// G3's draws per cell here (the goals' tables take more for one process).
const G3_DRAWS: u64 = 4;

fn designs() -> Vec<(String, Admit)> {
    let mut designs = vec![("ours, own evidence".to_owned(), Admit::Ours)];
    for model in MODELS {
        designs.push((format!("ours, pooled ({})", model.name()), Admit::Pooled(model)));
    }
    designs
}

fn column_name((rate, k): Column) -> String {
    format!("{rate}/s P={k}")
}

/// Runs the goals for each design and column, prints the tables, and
/// returns the checks the pooled designs failed: every goal, G4 included
/// at 1 call a second, for every column of ten processes or more (and
/// G1–G3 and G5 for one process, whose fleet is itself).
pub(crate) fn run() -> Vec<String> {
    println!(
        "\nPooled evidence: G1–G5 for processes judging a host on their own answers, and for \
         the same processes pooling them through a fleet's store (every process simulated; G3 \
         the mean of {G3_DRAWS} draws)."
    );
    let mut failures = Vec::new();
    let mut check = |ok: bool, what: String| {
        let line = format!("{}: {what}", if ok { "PASS" } else { "FAIL" });
        if !ok {
            println!("  {line}");
            failures.push(line);
        }
    };
    let mut header = format!("  {:<40}", "design");
    for column in COLUMNS {
        header.push_str(&format!(" {:>24}", column_name(column)));
    }
    for (name, admit) in designs() {
        let pooled = matches!(admit, Admit::Pooled(_));
        let mut lines: [String; 5] = Default::default();
        for column in COLUMNS {
            let label = format!("{name}, {}", column_name(column));
            let o = outage(admit, column);
            lines[0].push_str(&format!(
                " {:>24}",
                format!(
                    "{:.2}/{:.3}/{:.3} {}",
                    o.first_10_20,
                    o.first_after,
                    o.all_after,
                    secs(o.reacts)
                )
            ));
            lines[1].push_str(&format!(
                " {:>24}",
                format!("{} / {:.2}%", secs(o.back), (o.refused_after * 100.0).max(0.0))
            ));
            let draws: Vec<_> = (0..G3_DRAWS).map(|d| flaky_share(admit, column, d)).collect();
            let mean =
                |f: fn(&(f64, f64)) -> f64| draws.iter().map(f).sum::<f64>() / G3_DRAWS as f64;
            let (load, kept) = (mean(|d| d.0), mean(|d| d.1));
            lines[2].push_str(&format!(" {:>24}", format!("{load:.3}×, {:.1}%", kept * 100.0)));
            let g4 = overload(admit, column);
            lines[3].push_str(&format!(
                " {:>24}",
                format!(
                    "{:.2}/{:.2}× {:.0}% {}",
                    g4.first_per_accepted,
                    g4.all_per_accepted,
                    g4.goodput * 100.0,
                    secs(g4.back)
                )
            ));
            let (quiet, _) = quiet_refusals(admit, 0.5, column.1, Arrivals::Even);
            let (at_random, offered) = quiet_refusals(admit, 0.5, column.1, Arrivals::Random);
            lines[4].push_str(&format!(" {:>24}", format!("{quiet}, {at_random}/{offered}")));
            if !pooled {
                continue;
            }
            let (rate, k) = column;
            let mut checks = o.g1(&label, rate);
            checks.extend(o.g2(&label));
            checks.push((load >= 0.98, format!("G3 {label}: load {load:.3} ≥ 0.98×")));
            checks
                .push((kept >= 0.99, format!("G3 {label}: successes {:.2}% ≥ 99%", kept * 100.0)));
            if k >= 10 {
                checks.extend(g4.g4(&label));
            }
            for (ok, what) in checks {
                check(ok, what);
            }
            check(quiet == 0, format!("G5 {label}: {quiet} refused at 0.5/s"));
        }
        println!("\n  {name}");
        println!("{header}");
        let titles = [
            "G1 first 10–20 s/after/all after, reacts",
            "G2 back in / refused after",
            "G3 load, successes",
            "G4 first/all ÷ accepted, goodput, back",
            "G5 refused at 0.5/s: even, random",
        ];
        for (title, line) in titles.iter().zip(&lines) {
            println!("  {title:<40}{line}");
        }
    }
    println!(
        "\n  Spike ends (as in the admission's table): calls that succeeded 2–10 s / 10–30 s \
         after the spike, calls kept back locally 2–10 s after it, all attempts ÷ accepted \
         during it"
    );
    for (name, admit) in designs() {
        let mut line = format!("    {name:<38}");
        for fall in FALLS {
            for (rate, k) in COLUMNS.into_iter().filter(|(_, k)| *k >= 10) {
                let s = spike(admit, rate, k, fall);
                let cell = s.cell();
                line.push_str(&format!(" {:>34}", format!("{rate}/s P={k} →{fall}×: {cell}")));
                let label = format!("{name}, {rate}/s P={k} falling to {fall}×");
                if matches!(admit, Admit::Pooled(_)) {
                    check(
                        !s.keeps_back_too_many(),
                        format!(
                            "spike ends {label}: {} kept back 2–10 s after",
                            percent(s.kept_back)
                        ),
                    );
                }
            }
        }
        println!("{line}");
    }
    if failures.is_empty() {
        println!(
            "  PASS: pooled evidence: G1–G5 and the spike's end for every pooled row, G4 at \
             1/s for P ≥ 10"
        );
    }
    failures
}
