//! A quota shared by a fleet: one API's limit for every process, answered
//! `429` with `Retry-After` when it is spent. Each process alone learns of
//! a pause from a `429` of its own, so the API sees one request a process
//! in each pause; a fleet shares the pause through its store, by rounds
//! alone, or by the store's feed of each pause written.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response, ResponseBuilderExt};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use reqwest_safe_retry::fleet::Fleet;
use reqwest_safe_retry::jitter::SeededJitter;
use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
use tokio::time::Instant;

use super::pooled::MODELS;
use super::store::{SimStore, StoreModel};
use crate::sim::{SEED, base_client, runtime};

/// Processes, each calling once a second.
const PROCESSES: [usize; 3] = [1, 10, 100];
/// The pause the API asks for when its quota is spent.
const PAUSE: Duration = Duration::from_secs(20);
/// Each run's length.
const LENGTH: Duration = Duration::from_secs(180);

/// The API's quota between two pauses: ten seconds of the fleet's calls.
fn quota(processes: usize) -> u32 {
    10 * processes as u32
}

/// The limiter: a quota, then a pause of [`PAUSE`] (every request in it
/// answered `429` with the whole seconds left), then the quota again.
#[derive(Clone)]
struct Limiter {
    start: Instant,
    quota: u32,
    state: Arc<Mutex<Windows>>,
}

/// What the limiter saw: each request's time and process, and each
/// pause's start.
#[derive(Default)]
struct Windows {
    taken: u32,
    until: Option<Instant>,
    arrivals: Vec<(Duration, usize)>,
    starts: Vec<Duration>,
}

/// A request's process.
#[derive(Clone, Copy)]
struct From(usize);

#[async_trait::async_trait]
impl Middleware for Limiter {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let now = Instant::now();
        let From(process) = *extensions.get::<From>().expect("every call says whose it is");
        let mut state = self.state.lock().expect("no panics while counting");
        state.arrivals.push((now - self.start, process));
        // Each answer from the request's URL, as reqwest's are: the pause is
        // the answering host's.
        let answer = |status: u16, left: Option<Duration>| {
            let mut response = http::Response::builder().status(status).url(request.url().clone());
            if let Some(left) = left {
                let seconds = left.as_secs_f64().ceil().max(1.0);
                response = response.header(http::header::RETRY_AFTER, format!("{seconds}"));
            }
            Ok(Response::from(response.body(Vec::new()).expect("a valid response")))
        };
        let limited = |left: Duration| answer(429, Some(left));
        if let Some(until) = state.until.filter(|until| now < *until) {
            return limited(until - now);
        }
        state.until = None;
        state.taken += 1;
        if state.taken <= self.quota {
            return answer(200, None);
        }
        state.taken = 0;
        state.until = Some(now + PAUSE);
        state.starts.push(now - self.start);
        limited(PAUSE)
    }
}

/// How a run's processes learn of a pause.
#[derive(Debug, Clone, Copy)]
enum Sharing {
    Alone,
    Fleet(StoreModel),
}

impl Sharing {
    fn name(self) -> String {
        match self {
            Sharing::Alone => "alone".to_owned(),
            Sharing::Fleet(model) => format!("a fleet, {}", model.name()),
        }
    }

    fn all() -> Vec<Sharing> {
        let mut all = vec![Sharing::Alone];
        for model in MODELS {
            all.push(Sharing::Fleet(StoreModel { feed: false, ..model }));
            all.push(Sharing::Fleet(model));
        }
        all
    }
}

/// What the pauses of one run saw: the requests inside each after the one
/// that started it (mean and most), those of them sent later than the
/// news could take to reach every process (most), and the processes that
/// sent one in the second after each ended (mean).
#[derive(Debug, Clone, Copy)]
struct Seen {
    pauses: usize,
    inside_mean: f64,
    inside_most: usize,
    late_most: usize,
    after_mean: f64,
}

impl Sharing {
    /// How long news of a pause takes to reach every process: a write and
    /// the feed's delay, with a millisecond to spare (the run's clock
    /// moves in whole ones); the near store's for a process alone.
    fn news_time(self) -> Duration {
        let delay = match self {
            Sharing::Alone => MODELS[0].delay,
            Sharing::Fleet(model) => model.delay,
        };
        delay * 2 + Duration::from_millis(1)
    }
}

fn run(sharing: Sharing, processes: usize) -> Seen {
    runtime().block_on(async move {
        let start = Instant::now();
        let limiter = Limiter { start, quota: quota(processes), state: Arc::default() };
        let store = match sharing {
            Sharing::Alone => None,
            Sharing::Fleet(model) => Some(SimStore::new(model)),
        };
        let mut clients = Vec::new();
        let mut tasks = Vec::new();
        for p in 0..processes {
            let mut retry = RetryMiddleware::new(RetryConfig::default())
                .with_jitter_source(SeededJitter::new(SEED + p as u64));
            if let Some(store) = &store {
                let fleet = Fleet::new(store.clone());
                retry = retry.with_fleet(&fleet);
                tasks.push(fleet.spawn(Fleet::DEFAULT_INTERVAL));
            }
            clients
                .push(ClientBuilder::new(base_client()).with(retry).with(limiter.clone()).build());
        }
        let calls = LENGTH.as_secs() as usize * processes;
        let mut sent = Vec::new();
        for n in 0..calls {
            let at = Duration::from_secs_f64(n as f64 / processes as f64);
            tokio::time::sleep_until(start + at).await;
            let (client, p) = (clients[n % processes].clone(), n % processes);
            sent.push(tokio::spawn(async move {
                let _ = client.get("http://sim.test/").with_extension(From(p)).send().await;
            }));
        }
        for call in sent {
            call.await.expect("calls do not panic");
        }
        drop(tasks);
        let state = limiter.state.lock().expect("no panics while counting");
        let ended = |start: &&Duration| **start + PAUSE + Duration::from_secs(1) <= LENGTH;
        let starts: Vec<Duration> = state.starts.iter().filter(ended).copied().collect();
        let within = |from: Duration, to: Duration| {
            state.arrivals.iter().filter(move |(at, _)| *at > from && *at < to)
        };
        let inside: Vec<usize> = starts.iter().map(|&s| within(s, s + PAUSE).count()).collect();
        let news = sharing.news_time();
        let late = starts.iter().map(|&s| within(s + news, s + PAUSE).count()).max();
        let after: Vec<usize> = starts
            .iter()
            .map(|&s| {
                let end = s + PAUSE;
                let mut senders: Vec<usize> =
                    within(end, end + Duration::from_secs(1)).map(|(_, p)| *p).collect();
                senders.sort_unstable();
                senders.dedup();
                senders.len()
            })
            .collect();
        let mean =
            |values: &[usize]| values.iter().sum::<usize>() as f64 / values.len().max(1) as f64;
        Seen {
            pauses: starts.len(),
            inside_mean: mean(&inside),
            inside_most: inside.iter().copied().max().unwrap_or(0),
            late_most: late.unwrap_or(0),
            after_mean: mean(&after),
        }
    })
}

/// Prints the table, and returns the checks that failed: with the near
/// store's feed, no request inside a pause sent later than its news took
/// to reach every process, and one process probing its end; and every
/// fleet at most as many requests inside a pause as the same processes
/// alone.
pub(crate) fn run_all() -> Vec<String> {
    println!(
        "\nA quota shared by a fleet: the API answers 429 with Retry-After: {} s once ten seconds \
         of the fleet's calls are spent, each process calling once a second, {} s a run. \
         Requests inside a pause after the one that started it: mean (most), and most sent \
         later than its news takes to reach every process (2 × the store's delay + 1 ms); then \
         processes sending in the second after it ends (mean).",
        PAUSE.as_secs(),
        LENGTH.as_secs()
    );
    let mut header = format!("  {:<36}", "processes learn of a pause");
    for p in PROCESSES {
        header.push_str(&format!(" {:>24}", format!("P={p}")));
    }
    println!("{header}");
    let mut failures = Vec::new();
    let mut alone = Vec::new();
    for sharing in Sharing::all() {
        let mut line = format!("  {:<36}", sharing.name());
        for (n, p) in PROCESSES.into_iter().enumerate() {
            let seen = run(sharing, p);
            line.push_str(&format!(
                " {:>24}",
                format!(
                    "{:.1} ({}) {}, {:.1}",
                    seen.inside_mean, seen.inside_most, seen.late_most, seen.after_mean
                )
            ));
            let label = format!("{}, P={p}", sharing.name());
            let mut check = |ok: bool, what: String| {
                if !ok {
                    failures.push(format!("FAIL: quota {label}: {what}"));
                }
            };
            check(seen.pauses >= 3, format!("{} pauses in the run", seen.pauses));
            match sharing {
                Sharing::Alone => alone.push(seen),
                Sharing::Fleet(model) => {
                    let own = alone[n];
                    check(
                        seen.inside_mean <= own.inside_mean,
                        format!("{:.1} inside, alone {:.1}", seen.inside_mean, own.inside_mean),
                    );
                    if model.feed && model.lost_per_mille == 0 {
                        check(seen.late_most == 0, format!("{} late", seen.late_most));
                        check(seen.after_mean <= 1.0, format!("{:.1} probing", seen.after_mean));
                    }
                }
            }
        }
        println!("{line}");
    }
    for failure in &failures {
        println!("  {failure}");
    }
    if failures.is_empty() {
        println!(
            "  PASS: with the near store's feed, no request inside a pause once its news could \
             reach every process, and one process probing its end; no fleet worse than alone"
        );
    }
    failures
}
