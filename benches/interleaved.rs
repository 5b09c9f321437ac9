//! The happy path's cost in interleaved rounds: in each round every stack
//! times one batch of in-process calls (the last middleware answers 200 at
//! once), the order of the stacks rotating from round to round, so that a
//! noisy neighbour hits every stack alike. Prints each stack's median time
//! per call, and each ratio to reqwest-retry as the median of the per-round
//! ratios with their 10th to 90th percentile.
//!
//! Then the same for calls spread round-robin over many hosts (1, 1,000,
//! 5,000 and 50,000), from one caller and from 64 callers on two worker
//! threads: the retry budget keeps state per host, and its cost must not
//! grow with their number.
//!
//! `cargo bench --bench interleaved [-- --rounds R --calls N]`
//!
//! Between the two, one host from 64 callers on one worker thread, two,
//! and every core the machine has: the case where calls on different
//! threads meet on one host's state. `--cores` runs only that.
//!
//! `--grid [--hosts H] [--callers C]` runs only the hosts grid, or one row
//! or cell of it.
//!
//! `--only STACK --calls N [--hosts H] [--callers C]` sends N calls through
//! one stack and prints nothing: run it under `valgrind --tool=callgrind` for two values
//! of N, and the difference of the instruction counts over the difference
//! of the calls is the instructions per call, a figure the machine's load
//! does not move. `--only "reqwest-safe-retry, no books"` is ours with no
//! books kept per host (no budget, no throttle, no shared pause), for
//! that figure alone. With the `fleet` feature, `--only fleet` is ours in a
//! fleet whose store answers at once (connected, no host paused), its
//! rounds running: what a configured fleet adds to a call.

mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest_middleware::ClientWithMiddleware;
use support::{Scripted, Stack};

const STACKS: [Stack; 4] = [Stack::None, Stack::Peer, Stack::Ours, Stack::OursNoBudget];

/// The stacks of the hosts grid: the peer and ours, with and without the
/// budget.
const GRID_STACKS: [Stack; 3] = [Stack::Peer, Stack::Ours, Stack::OursNoBudget];

fn client(stack: Stack) -> ClientWithMiddleware {
    stack.build(reqwest::Client::builder(), Some(Scripted::new(&[200])))
}

/// The URLs of `hosts` distinct hosts.
fn urls(hosts: usize) -> Arc<Vec<String>> {
    Arc::new((0..hosts).map(|n| format!("http://h{n}.bench.test/")).collect())
}

/// `n` calls, the `k`-th to host `(from + k) % hosts`.
async fn calls(client: &ClientWithMiddleware, urls: &[String], from: usize, n: u64) {
    for k in 0..n as usize {
        let url = &urls[(from + k) % urls.len()];
        let response = client.get(url.as_str()).send().await;
        black_box(response.expect("the in-process server answers"));
    }
}

/// `n` calls in all from `callers` tasks at once, each starting at its own
/// host.
async fn spread(client: &ClientWithMiddleware, urls: &Arc<Vec<String>>, callers: usize, n: u64) {
    let each = n / callers as u64;
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (client, urls) = (client.clone(), urls.clone());
            tokio::spawn(async move { calls(&client, &urls, c * 7919, each).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("a caller finishes");
    }
}

/// A runtime on this thread for one caller, or on `workers` worker
/// threads.
fn runtime(callers: usize, workers: usize) -> tokio::runtime::Runtime {
    match callers {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        _ => {
            tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build()
        }
    }
    .expect("a runtime")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at]
}

/// Per-call times of `stacks` over `rounds` interleaved rounds of `n` calls
/// each, from `callers` tasks over `hosts` hosts on `workers` threads (one
/// caller: on this one), after a warm-up that calls every host.
fn rounds(
    stacks: &[Stack],
    rounds: usize,
    n: u64,
    (hosts, callers, workers): (usize, usize, usize),
) -> Vec<Vec<Duration>> {
    let runtime = runtime(callers, workers);
    let urls = urls(hosts);
    let clients: Vec<ClientWithMiddleware> = stacks.iter().copied().map(client).collect();
    for client in &clients {
        runtime.block_on(spread(client, &urls, callers, (hosts.max(200) * callers) as u64));
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); stacks.len()];
    for round in 0..rounds {
        for k in 0..stacks.len() {
            let i = (round + k) % stacks.len();
            let start = Instant::now();
            runtime.block_on(spread(&clients[i], &urls, callers, n));
            times[i].push(start.elapsed() / n as u32);
        }
    }
    times
}

/// The median time of `own`, and the median and 10th to 90th percentile
/// of its per-round ratios to `peer`.
fn summary(own: &[Duration], peer: &[Duration]) -> (f64, [f64; 3]) {
    let mut sorted: Vec<f64> = own.iter().map(Duration::as_secs_f64).collect();
    sorted.sort_by(f64::total_cmp);
    let mut ratios: Vec<f64> =
        own.iter().zip(peer).map(|(t, p)| t.as_secs_f64() / p.as_secs_f64()).collect();
    ratios.sort_by(f64::total_cmp);
    let ratio = [0.5, 0.1, 0.9].map(|p| percentile(&ratios, p));
    (percentile(&sorted, 0.5), ratio)
}

fn main() {
    let mut args = std::env::args().skip(1);
    #[cfg(feature = "fleet")]
    let mut only_fleet = false;
    let (mut rounds_n, mut n, mut only, mut hosts) = (41usize, 2000u64, None, None);
    let (mut grid, mut cores, mut callers) = (false, false, None);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--rounds" => rounds_n = value().parse().expect("--rounds takes a number"),
            "--calls" => n = value().parse().expect("--calls takes a number"),
            "--hosts" => hosts = Some(value().parse().expect("--hosts takes a number")),
            "--callers" => callers = Some(value().parse().expect("--callers takes a number")),
            "--grid" => grid = true,
            "--cores" => cores = true,
            "--only" => {
                let name = value();
                #[cfg(feature = "fleet")]
                if name == "fleet" {
                    only_fleet = true;
                    continue;
                }
                let mut named = STACKS.into_iter().chain([Stack::OursNoBooks]);
                only = Some(named.find(|s| s.name() == name).expect("a stack's name"));
            }
            // `cargo bench` passes `--bench`; anything else is a mistake.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    #[cfg(feature = "fleet")]
    if only_fleet {
        let runtime = runtime(callers.unwrap_or(1), 2);
        let fleet = reqwest_safe_retry::fleet::Fleet::new(support::at_once::AtOnce);
        let _rounds = runtime
            .block_on(async { fleet.spawn(reqwest_safe_retry::fleet::Fleet::DEFAULT_INTERVAL) });
        let client = support::ours(true).with_fleet(&fleet).client(reqwest::Client::builder());
        let client = client.expect("a client").with(Scripted::new(&[200])).build();
        let callers = callers.unwrap_or(1);
        runtime.block_on(spread(&client, &urls(hosts.unwrap_or(1)), callers, n));
        return;
    }
    if let Some(stack) = only {
        let callers = callers.unwrap_or(1);
        let client = client(stack);
        runtime(callers, 2).block_on(spread(&client, &urls(hosts.unwrap_or(1)), callers, n));
        return;
    }
    if cores {
        cores_table(rounds_n, n);
        return;
    }
    if !grid {
        table(rounds_n, n);
        cores_table(rounds_n, n);
    }
    hosts_grid(rounds_n, n, hosts, callers);
}

/// The stacks side by side, calls to one host from one caller.
fn table(rounds_n: usize, n: u64) {
    let times = rounds(&STACKS, rounds_n, n, (1, 1, 1));
    let peer = STACKS.iter().position(|s| *s == Stack::Peer).expect("the peer is measured");
    println!("{rounds_n} interleaved rounds of {n} in-process calls per stack (200 first time):");
    println!("  {:<30} {:>12} {:>26}", "stack", "median/call", "÷ reqwest-retry (p10–p90)");
    for (i, stack) in STACKS.iter().enumerate() {
        let (median, [ratio, low, high]) = summary(&times[i], &times[peer]);
        println!(
            "  {:<30} {:>9.0} ns {:>12.3} ({low:.3}–{high:.3})",
            stack.name(),
            median * 1e9,
            ratio,
        );
    }
}

/// One host from 64 callers on one worker thread, two, and every core:
/// where calls on different threads would meet on the host's state.
fn cores_table(rounds_n: usize, n: u64) {
    let all = std::thread::available_parallelism().map_or(1, usize::from);
    let mut workers = vec![1, 2, all];
    workers.sort_unstable();
    workers.dedup();
    let n = n * 8;
    println!(
        "\nOne host from 64 callers, ÷ reqwest-retry (p10–p90), {} rounds of {n} calls \
         ({all} cores here):",
        rounds_n.div_ceil(2)
    );
    println!("  {:>8}  {:>26}  {:>26}", "threads", "ours", "ours, no budget");
    for threads in workers {
        let times = rounds(&GRID_STACKS, rounds_n.div_ceil(2), n, (1, 64, threads));
        let cell = |i: usize| {
            let (_, [ratio, low, high]) = summary(&times[i], &times[0]);
            format!("{ratio:.3} ({low:.3}–{high:.3})")
        };
        println!("  {threads:>8}  {:>26}  {:>26}", cell(1), cell(2));
    }
}

/// Calls round-robin over many hosts from one caller and from 64, or only
/// the `hosts` and `callers` asked for.
fn hosts_grid(rounds_n: usize, n: u64, hosts: Option<usize>, callers: Option<usize>) {
    println!(
        "\nCalls round-robin over many hosts, ÷ reqwest-retry (p10–p90), \
         {} rounds of {n} calls from one caller, {} from 64:",
        rounds_n.div_ceil(2),
        n * 8
    );
    println!("  {:>6} {:>8}  {:>26}  {:>26}", "hosts", "callers", "ours", "ours, no budget");
    for callers in callers.map_or(vec![1, 64], |c| vec![c]) {
        // Many callers make a round of many calls, so that starting and
        // joining them is a small part of it.
        let n = if callers == 1 { n } else { n * 8 };
        for hosts in hosts.map_or(vec![1, 1000, 5000, 50_000], |h| vec![h]) {
            let times = rounds(&GRID_STACKS, rounds_n.div_ceil(2), n, (hosts, callers, 2));
            let cell = |i: usize| {
                let (_, [ratio, low, high]) = summary(&times[i], &times[0]);
                format!("{ratio:.3} ({low:.3}–{high:.3})")
            };
            println!("  {hosts:>6} {callers:>8}  {:>26}  {:>26}", cell(1), cell(2));
        }
    }
}
