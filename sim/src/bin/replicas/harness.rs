//! One run: a private `redis-server`, the loopback server, and the
//! replicas as processes of their own, each started from this program as a
//! worker; faults played on Redis, and a hostile writer, on the run's
//! clock; what the server read and what every call came to, gathered.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::hostile::{self, Play};
use crate::server::{Arrival, Rule, Server};
use crate::worker::{Arrivals, Orders, WORKER, instant_of, unix_ms};

#[allow(dead_code, unreachable_pub)]
#[path = "../../../../tests/all/support/redis_server.rs"]
mod redis_server;

use redis_server::RedisServer;

/// What is done to Redis, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// `SIGKILL`: its data goes with it.
    Kill,
    /// Started again, empty, on its port.
    Restart,
    /// `SIGSTOP`: it holds its connections and answers nothing.
    Freeze,
    /// `SIGCONT`.
    Thaw,
}

/// A run's setting.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) processes: usize,
    pub(crate) fleet: bool,
    pub(crate) rule: Rule,
    /// Stages of every worker's schedule: how long (ms), and its calls a
    /// second.
    pub(crate) stages: Vec<(u64, f64)>,
    pub(crate) arrivals: Arrivals,
    pub(crate) return_if_paused: bool,
    /// How long after the schedule the last calls may take.
    pub(crate) linger_ms: u64,
    /// Faults on Redis, at milliseconds from the start.
    pub(crate) faults: Vec<(u64, Fault)>,
    /// A hostile member writing to the store, if any.
    pub(crate) hostile: Option<Play>,
}

/// One call, as its worker saw it.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// Milliseconds from the start.
    pub(crate) start: f64,
    pub(crate) took: f64,
    /// `ok`, `s503`, `throttled`, `paused`, `connect`, ...
    pub(crate) outcome: String,
    /// Attempts sent, as its report says.
    pub(crate) attempts: u32,
}

impl Call {
    pub(crate) fn ok(&self) -> bool {
        self.outcome == "ok"
    }
}

/// What a run came to.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) arrivals: Vec<Arrival>,
    /// When each of the quota's pauses began.
    pub(crate) pauses: Vec<f64>,
    pub(crate) calls: Vec<Call>,
    /// Calls still running when their worker stopped waiting.
    pub(crate) unfinished: usize,
    /// Each worker's fleet status line.
    pub(crate) fleets: Vec<String>,
}

/// Runs `spec` and gathers what it came to.
pub(crate) fn run(spec: &Spec) -> Run {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    runtime.block_on(run_on(spec))
}

async fn run_on(spec: &Spec) -> Run {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let number = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut redis = spec.fleet.then(RedisServer::start);
    let redis_url = redis.as_ref().map_or_else(|| "redis://127.0.0.1:1/".to_owned(), |r| r.url());
    // The workers need a moment to start and connect: the run begins
    // after it, as the replicas of a service run long before a spike.
    let epoch_ms = unix_ms() + 2_000 + 60 * spec.processes as u64;
    let start = instant_of(epoch_ms);
    let server = Server::start(spec.rule, start).await;
    let prefix = format!("replicas-{}-{number}", std::process::id());
    let exe = std::env::current_exe().expect("this program's path");
    let workers: Vec<_> = (0..spec.processes)
        .map(|id| {
            let orders = Orders {
                id: id as u32,
                redis: redis_url.clone(),
                url: format!("{}/r", server.url()),
                prefix: prefix.clone(),
                fleet: spec.fleet,
                epoch_ms,
                stages: spec.stages.clone(),
                arrivals: spec.arrivals,
                return_if_paused: spec.return_if_paused,
                linger_ms: spec.linger_ms,
            };
            Command::new(&exe)
                .env(WORKER, orders.encode())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("this program starts as a worker")
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        workers
            .into_iter()
            .map(|w| w.wait_with_output().expect("a worker's output"))
            .collect::<Vec<_>>()
    });
    let length = spec.stages.iter().map(|(ms, _)| *ms).sum::<u64>() + spec.linger_ms;
    let hostile = match (spec.hostile, redis.as_ref()) {
        (Some(play), Some(redis)) => {
            let host = format!("http://127.0.0.1:{}", server.port());
            let (port, prefix) = (redis.port(), prefix.clone());
            Some(tokio::spawn(hostile::play(play, port, prefix, host, start, length)))
        }
        _ => None,
    };
    for &(at, fault) in &spec.faults {
        tokio::time::sleep_until((start + Duration::from_millis(at)).into()).await;
        if let Some(redis) = redis.as_mut() {
            match fault {
                Fault::Kill => redis.stop(),
                Fault::Restart => redis.restart(),
                Fault::Freeze => redis.freeze(),
                Fault::Thaw => redis.thaw(),
            }
        }
    }
    let outputs = outputs.await.expect("the workers' outputs");
    if let Some(hostile) = hostile {
        hostile.abort();
    }
    let mut run = Run::default();
    for (worker, output) in outputs.iter().enumerate() {
        assert!(output.status.success(), "worker {worker} failed: {:?}", output.status);
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(call) = line.strip_prefix("call ") {
                let words: Vec<&str> = call.split(' ').collect();
                run.calls.push(Call {
                    start: words[0].parse().unwrap_or(f64::NAN),
                    took: words[1].parse().unwrap_or(f64::NAN),
                    outcome: words[2].to_owned(),
                    attempts: words.get(3).and_then(|n| n.parse().ok()).unwrap_or(0),
                });
            } else if let Some(n) = line.strip_prefix("unfinished ") {
                run.unfinished += n.parse::<usize>().unwrap_or(0);
            } else if line.starts_with("fleet ") {
                run.fleets.push(line.to_owned());
            }
        }
    }
    let log = server.log();
    run.arrivals = log.arrivals().to_vec();
    run.pauses = log.pauses.clone();
    drop(log);
    drop(redis);
    if std::env::var_os(SERIES).is_some() {
        run.print_series(spec);
    }
    run
}

/// The environment variable that has each run print its figures second by
/// second, to see where a table's figure comes from.
const SERIES: &str = "REPLICAS_SERIES";

impl Run {
    /// Prints, a second a row: the requests the server read and accepted,
    /// and the calls started, with what they came to; then each worker's
    /// fleet status.
    fn print_series(&self, spec: &Spec) {
        let length = spec.stages.iter().map(|(ms, _)| *ms).sum::<u64>() / 1000;
        println!(
            "series: P={} fleet={} (second: requests/accepted, calls: ok throttled paused other)",
            spec.processes, spec.fleet
        );
        for second in 0..length {
            let (from, to) = ((second * 1000) as f64, ((second + 1) * 1000) as f64);
            let arrivals = self.arrivals.iter().filter(|a| a.at >= from && a.at < to);
            let (requests, accepted) =
                arrivals.fold((0, 0), |(r, a), x| (r + 1, a + usize::from(x.accepted)));
            let calls: Vec<&Call> =
                self.calls.iter().filter(|c| c.start >= from && c.start < to).collect();
            let count = |what: &str| calls.iter().filter(|c| c.outcome == what).count();
            let other = calls.len() - count("ok") - count("throttled") - count("paused");
            println!(
                "  {second:>3}: {requests:>4}/{accepted:<4} calls {:>4}: {:>4} {:>4} {:>4} {:>4}",
                calls.len(),
                count("ok"),
                count("throttled"),
                count("paused"),
                other
            );
        }
        for line in &self.fleets {
            println!("  {line}");
        }
    }
}
