//! The cases, each run with the fleet off and on, for each number of
//! processes, as many times as asked; each prints its table and returns
//! the goals it missed.

mod faults;
mod hostile;
mod pooled;
mod quota;
mod spike;

use crate::harness::{self, Call, Run, Spec};
use crate::server::Arrival;
use crate::worker::Arrivals;

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) processes: Vec<usize>,
    pub(crate) runs: usize,
    pub(crate) cases: Vec<String>,
    /// How the workers space their calls.
    pub(crate) arrivals: Arrivals,
}

/// The cases, by name.
pub(crate) const CASES: [&str; 5] = ["quota", "faults", "spike", "pooled", "hostile"];

/// Runs the cases asked for; returns every goal missed.
pub(crate) fn run(options: &Options) -> Vec<String> {
    let mut missed = Vec::new();
    for case in &options.cases {
        let case_missed = match case.as_str() {
            "quota" => quota::run(options),
            "faults" => faults::run(options),
            "spike" => spike::run(options),
            "pooled" => pooled::run(options),
            "hostile" => hostile::run(options),
            other => vec![format!("no case named {other}")],
        };
        missed.extend(case_missed);
    }
    missed
}

/// A goal's check: prints it, and keeps it if it failed.
pub(crate) struct Goals {
    lines: Vec<String>,
    missed: Vec<String>,
}

impl Goals {
    pub(crate) fn new() -> Self {
        Self { lines: Vec::new(), missed: Vec::new() }
    }

    /// Keeps a goal's check, to print under the table.
    pub(crate) fn check(&mut self, ok: bool, what: String) {
        self.lines.push(format!("  {}: {what}", if ok { "PASS" } else { "FAIL" }));
        if !ok {
            self.missed.push(what);
        }
    }

    /// Prints the checks kept since the last time.
    pub(crate) fn print(&mut self) {
        for line in self.lines.drain(..) {
            println!("{line}");
        }
    }

    pub(crate) fn missed(mut self) -> Vec<String> {
        self.print();
        self.missed
    }
}

/// Runs `spec` with the fleet off and on, one after the other.
pub(crate) fn off_and_on(spec: &Spec) -> (Run, Run) {
    let off = harness::run(&Spec { fleet: false, ..spec.clone() });
    let on = harness::run(&Spec { fleet: true, ..spec.clone() });
    (off, on)
}

/// The requests that arrived from `from` to `to` (ms), and how many of
/// them were accepted.
pub(crate) fn arrived(arrivals: &[Arrival], from: f64, to: f64) -> (usize, usize) {
    let within = arrivals.iter().filter(|a| a.at >= from && a.at < to);
    within.fold((0, 0), |(all, ok), a| (all + 1, ok + usize::from(a.accepted)))
}

/// The calls started from `from` to `to` (ms).
pub(crate) fn started(calls: &[Call], from: f64, to: f64) -> impl Iterator<Item = &Call> {
    calls.iter().filter(move |c| c.start >= from && c.start < to)
}

/// The share of `calls` that succeeded; `None` for none.
pub(crate) fn success<'a>(calls: impl Iterator<Item = &'a Call>) -> Option<f64> {
    let (all, ok) = calls.fold((0, 0), |(all, ok), c| (all + 1, ok + usize::from(c.ok())));
    (all > 0).then(|| ok as f64 / all as f64)
}

/// The `q` quantile of `values` (0 to 1); `NaN` for none.
pub(crate) fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let at = ((values.len() as f64 - 1.0) * q).round() as usize;
    values[at.min(values.len() - 1)]
}

/// A share as a percentage.
pub(crate) fn percent(share: Option<f64>) -> String {
    share.map_or("–".to_owned(), |s| format!("{:.1}%", s * 100.0))
}

/// Prints a table: a header of columns, then rows of cells.
pub(crate) fn table(title: &str, columns: &[String], rows: &[(String, Vec<String>)]) {
    println!("\n{title}");
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0).max(10);
    let cell = columns
        .iter()
        .map(String::len)
        .chain(rows.iter().flat_map(|(_, c)| c.iter().map(String::len)))
        .max()
        .unwrap_or(8);
    let mut line = format!("| {:<width$} |", "");
    for column in columns {
        line.push_str(&format!(" {column:>cell$} |"));
    }
    println!("{line}");
    let mut rule = format!("|{}|", "-".repeat(width + 2));
    for _ in columns {
        rule.push_str(&format!("{}:|", "-".repeat(cell + 1)));
    }
    println!("{rule}");
    for (name, cells) in rows {
        let mut line = format!("| {name:<width$} |");
        for c in cells {
            line.push_str(&format!(" {c:>cell$} |"));
        }
        println!("{line}");
    }
}

/// The columns of a case's table: for each number of processes and run,
/// off and on.
pub(crate) fn columns(options: &Options) -> Vec<String> {
    let mut columns = Vec::new();
    for &p in &options.processes {
        for run in 1..=options.runs {
            let run = if options.runs > 1 { format!(" #{run}") } else { String::new() };
            columns.push(format!("P={p}{run} off"));
            columns.push(format!("P={p}{run} on"));
        }
    }
    columns
}
