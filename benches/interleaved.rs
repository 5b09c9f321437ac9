//! The happy path's cost in interleaved rounds: in each round every stack
//! times one batch of in-process calls (the last middleware answers 200 at
//! once), the order of the stacks rotating from round to round, so that a
//! noisy neighbour hits every stack alike. Prints each stack's median time
//! per call, and each ratio to reqwest-retry as the median of the per-round
//! ratios with their 10th to 90th percentile.
//!
//! `cargo bench --bench interleaved [-- --rounds R --calls N]`
//!
//! `--only STACK --calls N` sends N calls through one stack and prints
//! nothing: run it under `valgrind --tool=callgrind` for two values of N, and
//! the difference of the instruction counts over the difference of the calls
//! is the instructions per call, a figure the machine's load does not move.

mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use reqwest_middleware::ClientWithMiddleware;
use support::{Scripted, Stack};

const STACKS: [Stack; 4] = [Stack::None, Stack::Peer, Stack::Ours, Stack::OursNoBudget];

fn client(stack: Stack) -> ClientWithMiddleware {
    stack.build(reqwest::Client::builder(), Some(Scripted::new(&[200])))
}

async fn calls(client: &ClientWithMiddleware, n: u64) {
    for _ in 0..n {
        let response = client.get("http://bench.test/").send().await;
        black_box(response.expect("the in-process server answers"));
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut rounds, mut n, mut only) = (41usize, 2000u64, None);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--rounds" => rounds = value().parse().expect("--rounds takes a number"),
            "--calls" => n = value().parse().expect("--calls takes a number"),
            "--only" => {
                let name = value();
                only = Some(STACKS.into_iter().find(|s| s.name() == name).expect("a stack's name"));
            }
            // `cargo bench` passes `--bench`; anything else is a mistake.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    if let Some(stack) = only {
        let client = client(stack);
        runtime.block_on(calls(&client, n));
        return;
    }
    let clients: Vec<ClientWithMiddleware> = STACKS.into_iter().map(client).collect();
    // Warm up every stack: pools, caches and the budget's first host.
    for client in &clients {
        runtime.block_on(calls(client, 200));
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); STACKS.len()];
    for round in 0..rounds {
        for k in 0..STACKS.len() {
            let i = (round + k) % STACKS.len();
            let start = Instant::now();
            runtime.block_on(calls(&clients[i], n));
            times[i].push(start.elapsed() / n as u32);
        }
    }
    let peer = STACKS.iter().position(|s| *s == Stack::Peer).expect("the peer is measured");
    println!("{rounds} interleaved rounds of {n} in-process calls per stack (200 first time):");
    println!("  {:<30} {:>12} {:>26}", "stack", "median/call", "÷ reqwest-retry (p10–p90)");
    for (i, stack) in STACKS.iter().enumerate() {
        let mut own: Vec<f64> = times[i].iter().map(Duration::as_secs_f64).collect();
        own.sort_by(f64::total_cmp);
        let mut ratios: Vec<f64> = times[i]
            .iter()
            .zip(&times[peer])
            .map(|(t, p)| t.as_secs_f64() / p.as_secs_f64())
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "  {:<30} {:>9.0} ns {:>12.3} ({:.3}–{:.3})",
            stack.name(),
            percentile(&own, 0.5) * 1e9,
            percentile(&ratios, 0.5),
            percentile(&ratios, 0.1),
            percentile(&ratios, 0.9),
        );
    }
}
