//! Replicas: the fleet's goals measured on real processes. Each case
//! starts a private `redis-server` (Debian's `redis-server` package, on
//! loopback, no persistence), a loopback server that logs every request it
//! reads, and N copies of this program as workers, each built as the
//! README's fleet quick start builds its client (or, with the fleet off,
//! the quick start's client alone), calling on a schedule in real time.
//! Every case runs with the fleet off and on, one after the other. Each
//! worker's calls come at random at its schedule's rate (a Poisson
//! process), as a replica's users' requests do; `--arrivals even` spaces
//! them evenly instead, which against an evenly refilled bucket lets one
//! process take most of the tokens.
//!
//! ```text
//! cargo run --release -p reqwest-safe-retry-sim --bin replicas -- \
//!     [--case quota|faults|spike|pooled|hostile]... [--processes 10,20] [--runs 2] \
//!     [--arrivals random|even]
//! ```
//!
//! It prints a table a case and the goals under it, and exits 1 if a goal
//! was missed. The whole run takes about half an hour a run; the figures
//! in BENCHMARKS.md come from it.

mod cases;
mod harness;
mod hostile;
mod resp;
mod server;
mod worker;

fn main() {
    if let Ok(orders) = std::env::var(worker::WORKER) {
        worker::run(&orders);
        return;
    }
    let mut options = cases::Options {
        processes: vec![10, 20],
        runs: 1,
        cases: Vec::new(),
        arrivals: worker::Arrivals::Random,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        match (arg.as_str(), value) {
            ("--case", Some(case)) if cases::CASES.contains(&case.as_str()) => {
                options.cases.push(case)
            }
            ("--processes", Some(list)) => {
                let parsed: Option<Vec<usize>> =
                    list.split(',').map(|p| p.parse().ok().filter(|p| *p > 0)).collect();
                options.processes =
                    parsed.unwrap_or_else(|| usage(&format!("--processes takes numbers: {list}")));
            }
            ("--runs", Some(runs)) => {
                options.runs = runs
                    .parse()
                    .ok()
                    .filter(|r| *r > 0)
                    .unwrap_or_else(|| usage(&format!("--runs takes a number: {runs}")));
            }
            ("--arrivals", Some(name)) => {
                options.arrivals = worker::Arrivals::parse(&name)
                    .unwrap_or_else(|| usage(&format!("--arrivals takes random or even: {name}")));
            }
            (arg, _) => usage(&format!("unknown argument {arg}")),
        }
    }
    if options.cases.is_empty() {
        options.cases = cases::CASES.iter().map(|c| (*c).to_owned()).collect();
    }
    if std::process::Command::new("redis-server").arg("--version").output().is_err() {
        eprintln!("replicas: redis-server is not on the PATH (Debian's redis-server package)");
        std::process::exit(2);
    }
    let missed = cases::run(&options);
    println!();
    if missed.is_empty() {
        println!("PASS: every goal held");
    } else {
        println!("FAIL: {} goal(s) missed:", missed.len());
        for line in &missed {
            println!("  {line}");
        }
        std::process::exit(1);
    }
}

fn usage(error: &str) -> ! {
    eprintln!("replicas: {error}");
    eprintln!(
        "usage: replicas [--case {}]... [--processes 10,20] [--runs 2] [--arrivals random|even]",
        cases::CASES.join("|")
    );
    std::process::exit(2);
}
