//! A soak test: minutes of mixed traffic in real time, over loopback,
//! against servers that play every fault the middleware must get right,
//! with the invariants counted where they can be seen.
//!
//! ```text
//! cargo run --release -p reqwest-safe-retry-sim --bin soak -- [--seconds N] [--seed S]
//! ```
//!
//! For N seconds (120 by default), 128 calls at a time go through six
//! client stacks (the quick start's, with and without hedging and
//! buffering, and a plain client that follows redirects below the
//! middleware, as `reqwest::Client::new()` does) to thousands of
//! listeners on 127.0.0.2 to 127.0.0.51 that come and go, so the client
//! meets more than 5,000 distinct hosts. The servers answer with 503 bursts
//! with and without `Retry-After`, 429s, resets, stalled and trickling
//! bodies, answers slower than the attempt timeout, and redirects (same
//! host, other host, a refused port, back to the same URL, loops); some
//! calls go to ports where nothing listens. Then it prints what happened
//! and checks:
//!
//! - duplicates: no request that was not safe to repeat (a POST without an
//!   `Idempotency-Key`, a streamed body sent once) was processed twice by a
//!   handler, as the servers count it per call, path and method;
//! - deadlines: no call, the read of its body included, outlived its
//!   deadline by more than 250 ms beyond how late the runtime's own timers
//!   were while it ran (a probe sleeps 10 ms at a time and notes its
//!   lateness: on two cores shared with other builds, the process is at
//!   times not run for a few hundred milliseconds, and no deadline can be
//!   kept better than the timers fire);
//! - panics: none, in any task or thread;
//! - memory: the live heap of the whole process, sampled every 10 ms
//!   (dhat's counting allocator), less what the harness's own servers hold
//!   (a cost per open connection and per listener, fitted over the run:
//!   the harness binds listeners as calls need fresh ones, from 64 to some
//!   2,500 over the first half minute, and the connections to them rise
//!   with them), grows from the first half to the second by at most a
//!   tenth of the first half's live heap (its 95th percentile). The
//!   retry budget's per-host table is private; its bound (1024 hosts, calm
//!   idle ones forgotten past it, the rest sharing one overflow account)
//!   is checked through this: a table that kept every host would grow with
//!   the hosts used, and so would the hedge's latency rings;
//! - failing hosts: one call to each of 20,000 distinct hosts where nothing
//!   listens costs as much in the last slice of 5,000 as in the first
//!   (the median per call at most 2×): the budget's host table holds at
//!   most its bound, and a flood of failing hosts meets no scan of it per
//!   call;
//! - leftovers: once the clients are dropped, no server connection, accept
//!   loop, call or tokio task is left alive (waiting at most 10 s).
//!
//! - credentials: every stack sends them from its client's `default_headers`
//!   and from a middleware inside the retry layer that adds one to every
//!   attempt, and every redirect names the listener it came from: a request
//!   that a redirect brought from another listener (another origin) carries
//!   none, as reqwest's own following strips them there.
//!
//! It prints PASS or FAIL for each, and exits with status 1 if any failed.
//! The CI runs it for two minutes.
//!
//! Longer than most files: the run's whole report, every check with its
//! count, is printed from here, in one place.

mod checks;
mod failing;
mod faults;
mod servers;
mod traffic;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use checks::{HeapPeaks, Verdicts};
use faults::Kind;
use servers::{ADDRESSES, Fleet};
use traffic::{ATTEMPT_TIMEOUT, ClientStats, IN_FLIGHT};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// How much a call may outlive its deadline: timers fire a little late,
/// and two cores are shared by everything here.
pub(crate) const SLACK: Duration = Duration::from_millis(250);
/// Distinct host:port pairs the client must have been sent to.
const MIN_HOSTS: u64 = 5000;
/// The most a listener and an open server connection (both its ends)
/// can hold, in bytes, for the memory check's fit to be believed: some
/// 5 KiB and 30 KiB are measured.
const LISTENER_MOST: f64 = 16.0 * 1024.0;
const CONNECTION_MOST: f64 = 128.0 * 1024.0;
/// Bytes in a MiB.
const MIB: f64 = 1024.0 * 1024.0;
/// How long the run's leftovers may take to wind down.
const WIND_DOWN: Duration = Duration::from_secs(10);

struct Options {
    seconds: u64,
    seed: u64,
}

fn options() -> Options {
    let mut options = Options { seconds: 120, seed: 1 };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> u64 {
            args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("{name} takes a whole number");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--seconds" => options.seconds = number("--seconds").max(2),
            "--seed" => options.seed = number("--seed"),
            _ => {
                eprintln!("usage: soak [--seconds N (default 120)] [--seed S (default 1)]");
                std::process::exit(2)
            }
        }
    }
    options
}

/// The soft limit on open files, from `/proc/self/limits`.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn main() {
    let options = options();
    let _profiler = dhat::Profiler::builder().testing().trim_backtraces(Some(4)).build();
    let panics = checks::count_panics();
    let fd_limit = open_files_limit().unwrap_or(1024);
    // A listener is one descriptor, a connection two (both ends are here).
    let cap = (fd_limit.saturating_sub(2000) / 4).clamp(640, 4000) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let started = Instant::now();
    let passed = runtime.block_on(soak(&options, cap, fd_limit, &panics));
    let wall = started.elapsed();
    drop(runtime);
    println!("wall time {:.1} s", wall.as_secs_f64());
    if passed {
        println!("PASS");
    } else {
        println!("FAIL");
        std::process::exit(1);
    }
}

/// Everything measured, for the table.
struct Run {
    heap: HeapPeaks,
    hosts_used: u64,
    /// The median cost per call of each slice of failing hosts.
    failing: Vec<Duration>,
    leftovers: Leftovers,
    ledger_peak: usize,
    lag: Arc<checks::TimerLag>,
}

#[derive(Debug, Clone, Copy)]
struct Leftovers {
    connections: i64,
    accepting: i64,
    in_flight: i64,
    tasks: usize,
    waited: Duration,
}

async fn soak(
    options: &Options,
    cap: usize,
    fd_limit: u64,
    panics: &std::sync::atomic::AtomicU64,
) -> bool {
    println!(
        "soak: {} s, seed {}, {IN_FLIGHT} calls in flight, attempt timeout {} ms, \
         open-files limit {fd_limit} (at most {cap} listeners)",
        options.seconds,
        options.seed,
        ATTEMPT_TIMEOUT.as_millis()
    );
    let (fleet, keeper) = Fleet::start(cap);
    let stats = Arc::new(ClientStats::default());
    let stacks = Arc::new(traffic::stacks(&stats));
    for stack in stacks.iter() {
        println!("  stack {:<34} deadline {} ms", stack.name, stack.deadline.as_millis());
    }
    let start = Instant::now();
    let length = Duration::from_secs(options.seconds);
    let stop = Arc::new(AtomicBool::new(false));
    let sampled = fleet.clone();
    let load = move || (sampled.stats.connections.get().max(0) as u64, sampled.listeners() as u64);
    let sampler = checks::sample_heap(start, length, stop.clone(), load);
    let lag = checks::TimerLag::new(start, options.seconds);
    let probe = tokio::spawn(lag.clone().probe(start + length + Duration::from_secs(2)));
    let thread_probe = lag.clone().probe_thread(start + length);
    // Progress, ten times over the run; and the ledger's size, which
    // should stay about the last seconds' calls.
    let (watched, watched_stats) = (fleet.clone(), stats.clone());
    let ledger_watch = tokio::spawn(async move {
        let mut peak = 0;
        let mut next_line = Duration::ZERO;
        while start.elapsed() < length {
            peak = peak.max(watched.ledger.on_record());
            if start.elapsed() >= next_line {
                next_line += length / 10;
                println!(
                    "  at {:>5.1} s: {:>7} calls, heap {}, {} server connections, {} listeners, {} calls on record",
                    start.elapsed().as_secs_f64(),
                    watched_stats.calls.load(Ordering::Relaxed),
                    mib(dhat::HeapStats::get().curr_bytes as u64),
                    watched.stats.connections.get(),
                    watched.listeners(),
                    watched.ledger.on_record(),
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak
    });
    let max_calls = options.seconds * 5000;
    traffic::run(
        stacks.clone(),
        fleet.clone(),
        stats.clone(),
        options.seed,
        start + length,
        max_calls,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let heap = sampler.join().unwrap_or_default();
    let ledger_peak = ledger_watch.await.unwrap_or_default();
    let _ = probe.await;
    let _ = thread_probe.join();
    let hosts_used = fleet.hosts_used();
    let refused_port = fleet.refused(&mut rand::rng()).port();
    let failing = failing::run(refused_port).await;

    // Wind down: drop the clients, close the listeners, and wait for what
    // is left to finish by itself.
    let calls_by_stack: Vec<(&'static str, u64)> =
        stacks.iter().map(|s| (s.name, s.calls.load(Ordering::Relaxed))).collect();
    drop(stacks);
    fleet.stop();
    let _ = keeper.await;
    let wind_down = Instant::now();
    let metrics = tokio::runtime::Handle::current().metrics();
    let leftovers = loop {
        let leftovers = Leftovers {
            connections: fleet.stats.connections.get(),
            accepting: fleet.stats.accepting.get(),
            in_flight: stats.in_flight.get(),
            tasks: metrics.num_alive_tasks(),
            waited: wind_down.elapsed(),
        };
        let clear = leftovers.connections == 0
            && leftovers.accepting == 0
            && leftovers.in_flight == 0
            && leftovers.tasks == 0;
        if clear || leftovers.waited >= WIND_DOWN {
            break leftovers;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let run = Run { heap, hosts_used, failing, leftovers, ledger_peak, lag };
    report(&run, &fleet, &stats, &calls_by_stack, panics.load(Ordering::Relaxed))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn tally(title: &str, counts: &BTreeMap<String, u64>) {
    println!("{title}");
    for (label, count) in counts {
        println!("  {label:<44} {count:>9}");
    }
}

/// Prints the table and the checks; whether all passed.
fn report(
    run: &Run,
    fleet: &Fleet,
    stats: &ClientStats,
    calls_by_stack: &[(&'static str, u64)],
    hook_panics: u64,
) -> bool {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let server = &fleet.stats;
    let ledger = &fleet.ledger;
    println!();
    println!("{:<46} {:>9}", "calls", load(&stats.calls));
    for (name, calls) in calls_by_stack {
        println!("  {name:<44} {calls:>9}");
    }
    tally("requests", &stats.requests.counts());
    println!("{:<46} {:>9}", "attempts made (the middleware's hook)", load(&stats.attempts));
    println!("{:<46} {:>9}", "redirects the middleware followed", load(&stats.redirects_followed));
    println!("{:<46} {:>9}", "requests read by the servers", load(&server.received));
    println!("{:<46} {:>9}", "  processed (all but 429s)", load(&server.processed));
    println!("{:<46} {:>9}", "  not safe to repeat, processed", load(&ledger.not_safe_processed));
    println!("faults played by the servers");
    for (kind, count) in Kind::ALL.iter().zip(&server.kinds) {
        println!("  {:<44} {:>9}", kind.label(), load(count));
    }
    println!("{:<46} {:>9}", "  first hops to a refused port", load(&stats.refused_first_hops));
    tally("retries, by reason", &stats.retries.counts());
    tally("outcomes", &stats.outcomes.counts());
    tally("stop reasons (RetryReport)", &stats.stops.counts());
    println!(
        "{:<46} {:>9}",
        "distinct host:port pairs used",
        run.hosts_used + servers::REFUSED_PORTS as u64
    );
    println!(
        "  listeners bound {} on {ADDRESSES} addresses, at most {} at once, {} reached",
        load(&server.bound),
        load(&server.most_bound),
        load(&server.reached)
    );
    println!(
        "  connections accepted {}, accept errors {}, requests without a call id {}",
        load(&server.accepted),
        load(&server.accept_errors),
        load(&server.anonymous)
    );
    let overshoot = Duration::from_micros(load(&stats.max_overshoot_us));
    let longest = Duration::from_micros(load(&stats.longest_call_us));
    println!(
        "{:<46} {:>6} ms  (longest call {} ms)",
        "deadline overshoot, max",
        overshoot.as_millis(),
        longest.as_millis()
    );
    println!("{:<46} {:>9}", "  calls later than the slack", load(&stats.late_calls));
    if let Some((_, worst)) = &*stats.worst.lock().unwrap_or_else(|p| p.into_inner()) {
        println!("  the latest: {worst}");
    }
    // What the timers' own lateness does not account for: a call may be as
    // late as the runtime was starved while it ran.
    let late = stats.late.lock().unwrap_or_else(|p| p.into_inner());
    let unexplained = late
        .iter()
        .map(|call| (call.over.saturating_sub(run.lag.during(call.start, call.end)), call))
        .max_by_key(|(excess, _)| *excess);
    let excess = unexplained.map_or(Duration::ZERO, |(excess, _)| excess);
    println!(
        "{:<46} {:>6} ms  (a 10 ms sleep on the runtime woke this late; on a thread, {} ms)",
        "timer lag, max",
        run.lag.most().as_millis(),
        run.lag.thread_most().as_millis()
    );
    println!("{:<46} {:>6} ms", "  overshoot beyond the timer lag, max", excess.as_millis());
    if let Some((excess, call)) = unexplained.filter(|(excess, _)| *excess > SLACK) {
        println!("  not explained by timer lag ({} ms): {}", excess.as_millis(), call.what);
    }
    let peak_ratio = run.heap.second as f64 / run.heap.first.max(1) as f64;
    let ratio = run.heap.second_p95 as f64 / run.heap.first_p95.max(1) as f64;
    println!(
        "heap, whole process (dhat): first-half peak {}, second-half peak {} ({peak_ratio:.3}), {} live at the end",
        mib(run.heap.first),
        mib(run.heap.second),
        mib(run.heap.at_end)
    );
    println!(
        "  live bytes, 95th percentile of 10 ms samples: first half {}, second half {} ({ratio:.3})",
        mib(run.heap.first_p95),
        mib(run.heap.second_p95),
    );
    let growth = (run.heap.second_rest - run.heap.first_rest) / run.heap.first_p95.max(1) as f64;
    println!(
        "  the harness's share, fitted: {:.1} KiB an open server connection, {:.1} KiB a listener; \
         the rest, median: first half {:.1} MiB, second half {:.1} MiB ({:+.1}% of the first \
         half's heap)",
        run.heap.per_connection / 1024.0,
        run.heap.per_listener / 1024.0,
        run.heap.first_rest / MIB,
        run.heap.second_rest / MIB,
        growth * 100.0
    );
    println!(
        "host table: the budget's, bounded at 1024 hosts (private: checked through the heap, \
         flat while {} hosts were used)",
        run.hosts_used
    );
    println!(
        "ledger: at most {} calls on record; {} requests arrived for a call already forgotten",
        run.ledger_peak,
        load(&ledger.late)
    );
    let l = run.leftovers;
    println!(
        "leftovers after {} ms: server connections {}, accept loops {}, calls in flight {}, tokio tasks {}",
        l.waited.as_millis(),
        l.connections,
        l.accepting,
        l.in_flight,
        l.tasks
    );
    let panics = load(&stats.panics);
    println!("panics: {panics} from JoinHandles, {hook_panics} through the panic hook");

    let mut verdicts = Verdicts::default();
    let duplicates = load(&ledger.duplicates);
    verdicts.check(
        duplicates == 0 && load(&ledger.late) == 0,
        format!(
            "duplicates: {duplicates} requests not safe to repeat processed twice (of {}), \
             {} unaudited",
            load(&ledger.not_safe_processed),
            load(&ledger.late)
        ),
    );
    let leaked = load(&server.leaked_credentials);
    verdicts.check(
        leaked == 0,
        format!(
            "credentials: {leaked} of {} requests that a redirect took to another origin \
             carried one",
            load(&server.crossed)
        ),
    );
    let lost = load(&ledger.lost_bodies);
    verdicts.check(
        lost == 0,
        format!("bodies: {lost} requests arrived without the body their caller sent"),
    );
    verdicts.check(
        excess <= SLACK,
        format!(
            "deadlines: the most a call outlived its deadline is {} ms, {} ms beyond how late \
             the runtime's timers were meanwhile (slack {} ms)",
            overshoot.as_millis(),
            excess.as_millis(),
            SLACK.as_millis()
        ),
    );
    verdicts.check(
        panics == 0 && hook_panics == 0,
        format!("panics: {panics} in tasks, {hook_panics} anywhere"),
    );
    // A fit that puts more on a listener or a connection than either can
    // hold, or less than nothing, has taken in something that grew or
    // shrank alongside them. With no fit (a load that hardly varied), the
    // live heap is compared whole.
    let plausible = (0.0..=LISTENER_MOST).contains(&run.heap.per_listener)
        && (0.0..=CONNECTION_MOST).contains(&run.heap.per_connection);
    let memory = if run.heap.fitted {
        (
            growth <= 0.10 && plausible,
            format!(
                "memory: beyond the harness's connections and listeners, the second half's live \
                 heap grew by {:+.1}% of the first half's {} (at most 10%; the fitted costs from \
                 0 to {} KiB a listener and to {} KiB a connection)",
                growth * 100.0,
                mib(run.heap.first_p95),
                LISTENER_MOST / 1024.0,
                CONNECTION_MOST / 1024.0,
            ),
        )
    } else {
        (
            ratio <= 1.10,
            format!(
                "memory: the harness's share could not be fitted; the second half's live heap \
                 (95th percentile) {} is {:.1}% of the first half's {} (at most 110%)",
                mib(run.heap.second_p95),
                ratio * 100.0,
                mib(run.heap.first_p95)
            ),
        )
    };
    verdicts.check(memory.0, memory.1);
    verdicts.check(
        run.hosts_used + servers::REFUSED_PORTS as u64 >= MIN_HOSTS,
        format!(
            "hosts: {} distinct host:port pairs used (at least {MIN_HOSTS}), with the heap flat: \
             the budget's host table stays at its bound",
            run.hosts_used + servers::REFUSED_PORTS as u64
        ),
    );
    let slices: Vec<String> =
        run.failing.iter().map(|d| format!("{:.0}", d.as_secs_f64() * 1e6)).collect();
    let (first, last) = (run.failing.first().copied(), run.failing.last().copied());
    verdicts.check(
        first.zip(last).is_some_and(|(first, last)| last <= first * 2),
        format!(
            "failing hosts: {} distinct refused hosts, median µs per call by slice of {}: {} \
             (the last at most 2× the first)",
            failing::HOSTS,
            failing::SLICE,
            slices.join(", ")
        ),
    );
    verdicts.check(
        l.connections == 0 && l.accepting == 0 && l.in_flight == 0 && l.tasks == 0,
        format!(
            "leftovers: {} connections, {} accept loops, {} calls, {} tasks after the clients were dropped",
            l.connections, l.accepting, l.in_flight, l.tasks
        ),
    );
    println!();
    verdicts.print();
    let examples = ledger.examples();
    if !examples.is_empty() {
        println!("  first requests found wrong:");
        for example in examples {
            println!("    {example}");
        }
    }
    verdicts.passed()
}
