//! The cost of a call to a new host as the host tables fill, and what a
//! flood of new hosts does to calls to known ones.
//!
//! `cargo bench --bench hosts [-- --hosts N]`
//!
//! Part one: calls in process (the last middleware answers at once), each
//! to a host not seen before, through the retry middleware (its budget's
//! table) and through the hedge middleware (its budget's table and its
//! latency table), the hosts answering 200 (healthy) or 503 (failing, no
//! retry allowed, so each is a failing host the table must keep). Time
//! stands still (`ManualClock`) or runs (`TokioClock`). Printed: the cost
//! per call in the slice of calls that brings the tables to 1,000 hosts,
//! and in the last slice before N (50,000 by default), and their ratio: the
//! median of three runs.
//!
//! Part two: on two worker threads, a task calls four known healthy hosts
//! in turn and times each call, alone and then while another task sends
//! calls to new failing hosts without pause. Printed: the known calls' p50,
//! p99 and max, in both cases.

mod support;

use std::time::{Duration, Instant};

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_safe_retry::hedge::{HedgeConfig, HedgeMiddleware};
use reqwest_safe_retry::{RetryConfig, RetryMiddleware, clock::ManualClock};
use support::Scripted;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Retry,
    Hedge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Time {
    Still,
    Real,
}

fn client(table: Table, failing: bool, time: Time) -> ClientWithMiddleware {
    let statuses: &'static [u16] = if failing { &[503] } else { &[200] };
    let last = Scripted::new(statuses);
    let inner = reqwest::Client::new();
    match table {
        Table::Retry => {
            let config = RetryConfig::builder().with_max_retries(0).build().expect("valid");
            let mut retry = RetryMiddleware::new(config);
            if time == Time::Still {
                retry = retry.with_clock(ManualClock::new());
            }
            retry.client(reqwest::Client::builder()).expect("a client").with(last).build()
        }
        Table::Hedge => {
            let config = HedgeConfig::builder().with_delay(Duration::from_secs(3600));
            let mut hedge = HedgeMiddleware::new(config.build().expect("valid"));
            if time == Time::Still {
                hedge = hedge.with_clock(ManualClock::new());
            }
            ClientBuilder::new(inner).with(hedge).with(last).build()
        }
    }
}

/// Sends calls to hosts `from..to`, each new; returns the time per call.
async fn new_hosts(client: &ClientWithMiddleware, from: usize, to: usize) -> Duration {
    let urls: Vec<String> = (from..to).map(|n| format!("http://h{n}.bench.test/")).collect();
    let start = Instant::now();
    for url in &urls {
        let response = client.get(url).send().await.expect("the in-process server answers");
        std::hint::black_box(response);
    }
    start.elapsed() / (to - from) as u32
}

/// The cost per call at 1,000 hosts and in the last slice before `hosts`.
async fn growth(table: Table, failing: bool, time: Time, hosts: usize) -> (Duration, Duration) {
    let client = client(table, failing, time);
    let slice = 1000;
    let first = new_hosts(&client, 0, slice).await;
    new_hosts(&client, slice, hosts - slice).await;
    let last = new_hosts(&client, hosts - slice, hosts).await;
    (first, last)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Per-call latencies of calls to four known healthy hosts.
async fn known_calls(client: &ClientWithMiddleware, calls: usize) -> Vec<Duration> {
    let urls: Vec<String> = (0..4).map(|n| format!("http://known{n}.bench.test/")).collect();
    let mut times = Vec::with_capacity(calls);
    for n in 0..calls {
        let start = Instant::now();
        let response = client.get(&urls[n % 4]).send().await.expect("answered");
        std::hint::black_box(response);
        times.push(start.elapsed());
    }
    times.sort();
    times
}

fn quantiles(times: &[Duration]) -> String {
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    format!("{:>7.1} {:>7.1} {:>8.1}", us(at(0.5)), us(at(0.99)), us(at(1.0)))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut hosts = 50_000;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--hosts" => hosts = args.next().and_then(|v| v.parse().ok()).expect("a number"),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(hosts >= 3000, "--hosts takes 3000 or more");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    println!("A call to a new host, in process, µs per call (median of 3 runs):");
    println!(
        "  {:<8} {:<8} {:<6} {:>10} {:>10} {:>8}",
        "table",
        "hosts",
        "time",
        "at 1,000",
        format!("at {hosts}"),
        "ratio"
    );
    for table in [Table::Retry, Table::Hedge] {
        for failing in [false, true] {
            for time in [Time::Still, Time::Real] {
                let runs: Vec<(Duration, Duration)> =
                    (0..3).map(|_| runtime.block_on(growth(table, failing, time, hosts))).collect();
                let ratio =
                    median(runs.iter().map(|(a, b)| b.as_secs_f64() / a.as_secs_f64()).collect());
                let first = median(runs.iter().map(|(a, _)| a.as_secs_f64() * 1e6).collect());
                let last = median(runs.iter().map(|(_, b)| b.as_secs_f64() * 1e6).collect());
                println!(
                    "  {:<8} {:<8} {:<6} {:>10.2} {:>10.2} {:>8.2}",
                    format!("{table:?}").to_lowercase(),
                    if failing { "failing" } else { "healthy" },
                    format!("{time:?}").to_lowercase(),
                    first,
                    last,
                    ratio,
                );
            }
        }
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let known = client(Table::Retry, false, Time::Real);
    let calls = 20_000;
    println!("Calls to 4 known healthy hosts, µs (p50, p99, max), two worker threads:");
    let alone = runtime.block_on(async {
        known_calls(&known, 1000).await;
        known_calls(&known, calls).await
    });
    println!("  alone                           {}", quantiles(&alone));
    let flooded = runtime.block_on(async {
        let flood = client(Table::Retry, true, Time::Real);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flooding = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    new_hosts(&flood, n, n + 100).await;
                    n += 100;
                }
                n
            }
        });
        let known_client = known.clone();
        let times = tokio::spawn(async move { known_calls(&known_client, calls).await });
        let times = times.await.expect("the known calls finish");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let new = flooding.await.expect("the flood stops");
        (times, new)
    });
    println!("  while {:>6} new failing hosts  {}", flooded.1, quantiles(&flooded.0),);
}
