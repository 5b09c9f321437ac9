//! A fleet of real processes: twenty copies of this test binary, each a
//! worker with the quick start's client in a fleet on one `redis-server`,
//! calling one loopback rate limiter that answers `429` with
//! `Retry-After: 2`; Redis killed halfway.
//!
//! The workers run in real time: Redis measures a pause's time-to-live
//! with its own clock, and the processes are separate. The test itself
//! waits on events (the limiter's pauses, the workers' exits), never on
//! a sleep of its own. It is a binary of its own, so that it runs alone,
//! not beside the other tests on a busy machine: it counts what twenty
//! processes send within milliseconds of each pause.
#![cfg(feature = "redis")]

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest_safe_retry::fleet::{Fleet, RedisStore};
use reqwest_safe_retry::rate_limit::{HostPaused, ReturnIfPaused};
use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
use tokio::sync::Notify;
use wiremock::{Mock, MockServer, Respond, ResponseTemplate};

#[allow(dead_code, unreachable_pub)]
#[path = "all/support/redis_server.rs"]
mod redis_server;

use redis_server::RedisServer;

/// The environment variable that makes this test a worker: the Redis URL,
/// the limiter's URL, the fleet's prefix and the worker's number, separated
/// by spaces.
const WORKER: &str = "REQWEST_SAFE_RETRY_FLEET_WORKER";
const WORKERS: usize = 20;
/// Each worker's calls, one every [`GAP`]: some twenty-five seconds, the
/// fleet's forty calls a second. (At a hundred, a request or two may be on
/// its way before the news of a pause reaches its process, on a machine
/// busy with the other tests: see BENCHMARKS.md.)
const CALLS: u32 = 50;
const GAP: Duration = Duration::from_millis(500);
/// Requests the limiter takes between two pauses.
const QUOTA: u32 = 40;
const PAUSE: Duration = Duration::from_secs(2);
/// By when every process of the fleet knows of a pause even without the
/// store's feed: a round (500 ms) and its round trips, with room for a
/// loaded machine.
const KNOWN_BY: Duration = Duration::from_millis(1200);
/// How early a pause may end: its books keep time in whole milliseconds.
const SLACK: Duration = Duration::from_millis(2);
/// The most a call may take: less than the store's patience (1 s), which
/// a call that waited for Redis would take.
const NO_WAIT: Duration = Duration::from_millis(800);

/// A pause the limiter asked for, and the requests that reached it.
#[derive(Debug, Clone)]
struct Window {
    start: Instant,
    /// Requests in it after the one that started it.
    inside: u32,
    /// Requests in it after every process could know of it.
    late: u32,
    /// The workers that sent a request in the second after it ended.
    after_end: u32,
    /// Whether Redis was gone before it started.
    alone: bool,
}

/// The limiter: `QUOTA` requests, then a pause of `PAUSE` (every request
/// in it answered `429` with the time left), then the quota again.
#[derive(Clone, Default)]
struct Limiter {
    state: Arc<Mutex<State>>,
    paused: Arc<Notify>,
}

#[derive(Default)]
struct State {
    taken: u32,
    until: Option<Instant>,
    /// Each request's arrival, and the worker that sent it.
    arrivals: Vec<(Instant, u32)>,
    starts: Vec<Instant>,
    redis_gone: Option<Instant>,
}

impl Respond for Limiter {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        let now = Instant::now();
        let worker = request.headers.get("x-worker").and_then(|v| v.to_str().ok()?.parse().ok());
        let mut state = self.state.lock().unwrap();
        state.arrivals.push((now, worker.unwrap_or(u32::MAX)));
        if let Some(until) = state.until.filter(|until| now < *until) {
            let left = (until - now).as_secs_f64().ceil().max(1.0);
            return ResponseTemplate::new(429).insert_header("retry-after", format!("{left}"));
        }
        state.until = None;
        state.taken += 1;
        if state.taken <= QUOTA {
            return ResponseTemplate::new(200);
        }
        state.taken = 0;
        state.until = Some(now + PAUSE);
        state.starts.push(now);
        self.paused.notify_one();
        ResponseTemplate::new(429).insert_header("retry-after", "2")
    }
}

impl Limiter {
    fn windows(&self) -> Vec<Window> {
        let state = self.state.lock().unwrap();
        let within = |from: Instant, to: Instant| {
            state.arrivals.iter().filter(move |(at, _)| (from..to).contains(at))
        };
        let count = |from: Instant, to: Instant| within(from, to).count() as u32;
        let workers = |from: Instant, to: Instant| {
            within(from, to).map(|(_, worker)| *worker).collect::<HashSet<_>>().len() as u32
        };
        state
            .starts
            .iter()
            .map(|&start| Window {
                start,
                inside: count(start + Duration::from_nanos(1), start + PAUSE),
                late: count(start + KNOWN_BY, start + PAUSE),
                after_end: workers(start + PAUSE, start + PAUSE + Duration::from_secs(1)),
                alone: state.redis_gone.is_some_and(|gone| gone + KNOWN_BY < start),
            })
            .collect()
    }
}

/// What a worker saw.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    ok: u32,
    limited: u32,
    held: u32,
    throttled: u32,
    errors: u32,
    /// Requests it sent while a pause it was told of itself was in force.
    own_pause_broken: u32,
    slowest_ms: u64,
}

impl Seen {
    fn line(&self) -> String {
        let Seen { ok, limited, held, throttled, errors, own_pause_broken, slowest_ms } = *self;
        format!(
            "worker ok={ok} limited={limited} held={held} throttled={throttled} errors={errors} \
             broken={own_pause_broken} slowest_ms={slowest_ms}"
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix("worker ")?;
        let mut seen = Seen::default();
        for field in rest.split(' ') {
            let (name, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            let small = u32::try_from(value).ok()?;
            match name {
                "ok" => seen.ok = small,
                "limited" => seen.limited = small,
                "held" => seen.held = small,
                "throttled" => seen.throttled = small,
                "errors" => seen.errors = small,
                "broken" => seen.own_pause_broken = small,
                "slowest_ms" => seen.slowest_ms = value,
                _ => return None,
            }
        }
        Some(seen)
    }
}

/// A worker: the quick start's client in a fleet, calling every `GAP`.
/// A call to a paused host returns at once ([`ReturnIfPaused`]), so that
/// every call's time is its own.
async fn work(redis: &str, url: &str, prefix: &str, worker: &str) -> Seen {
    let fleet = Fleet::new(RedisStore::new(redis, prefix).unwrap());
    let _rounds = fleet.spawn(Fleet::DEFAULT_INTERVAL);
    let client = RetryMiddleware::new(RetryConfig::default())
        .with_fleet(&fleet)
        .client(reqwest::Client::builder())
        .unwrap()
        .build();
    let mut seen = Seen::default();
    // The end of the last pause this process was told of by a 429 of its
    // own, as the 429 put it (the middleware's own end is a little later).
    let mut own_until: Option<Instant> = None;
    let mut pace = tokio::time::interval(GAP);
    for _ in 0..CALLS {
        pace.tick().await;
        let start = Instant::now();
        let request = client.get(url).header("x-worker", worker).with_extension(ReturnIfPaused);
        let outcome = request.send().await;
        let took = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        seen.slowest_ms = seen.slowest_ms.max(took);
        let sent = match outcome {
            Ok(response) if response.status() == 429 => {
                seen.limited += 1;
                let asked: u64 =
                    response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
                let broke = own_until.is_some_and(|until| start + SLACK < until);
                own_until = Some(start + Duration::from_secs(asked));
                seen.own_pause_broken += u32::from(broke);
                false
            }
            Ok(_) => {
                seen.ok += 1;
                true
            }
            Err(reqwest_middleware::Error::Middleware(error)) if error.is::<HostPaused>() => {
                seen.held += 1;
                false
            }
            Err(reqwest_middleware::Error::Middleware(error))
                if error.is::<reqwest_safe_retry::rate_limit::Throttled>() =>
            {
                seen.throttled += 1;
                false
            }
            Err(_) => {
                seen.errors += 1;
                false
            }
        };
        if sent && own_until.is_some_and(|until| start + SLACK < until) {
            seen.own_pause_broken += 1;
        }
    }
    seen
}

/// This test's name, for a worker to be started as.
const NAME: &str =
    "twenty_processes_share_each_pause_through_redis_and_keep_their_own_when_it_is_killed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_processes_share_each_pause_through_redis_and_keep_their_own_when_it_is_killed() {
    if let Ok(args) = std::env::var(WORKER) {
        let args: Vec<&str> = args.split(' ').collect();
        println!("{}", work(args[0], args[1], args[2], args[3]).await.line());
        return;
    }
    let mut redis = RedisServer::start();
    let server = MockServer::start().await;
    let limiter = Limiter::default();
    Mock::given(wiremock::matchers::any()).respond_with(limiter.clone()).mount(&server).await;
    let exe = std::env::current_exe().unwrap();
    let workers: Vec<_> = (0..WORKERS)
        .map(|n| {
            Command::new(&exe)
                .args([NAME, "--exact", "--nocapture", "--test-threads=1", "--quiet"])
                .env(WORKER, format!("{} {}/r fleet-20 {n}", redis.url(), server.uri()))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("the test binary starts as a worker")
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        workers.into_iter().map(|worker| worker.wait_with_output().unwrap()).collect::<Vec<_>>()
    });
    // Halfway, when the third pause starts (the first two have ended, and
    // so have their probes), Redis is killed: unless the workers are done
    // first, which fails the test below.
    let third = async {
        loop {
            let paused = limiter.paused.notified();
            if limiter.state.lock().unwrap().starts.len() >= 3 {
                break;
            }
            paused.await;
        }
    };
    tokio::pin!(outputs);
    let outputs = tokio::select! {
        () = third => {
            redis.stop();
            limiter.state.lock().unwrap().redis_gone = Some(Instant::now());
            outputs.await.unwrap()
        }
        outputs = &mut outputs => outputs.unwrap(),
    };
    let mut seen = Vec::new();
    for output in outputs {
        assert!(output.status.success(), "a worker failed: {output:?}");
        let text = String::from_utf8_lossy(&output.stdout);
        seen.push(text.lines().find_map(Seen::parse).unwrap_or_else(|| panic!("{text}")));
    }
    let windows = limiter.windows();
    for w in &windows {
        let Window { inside, late, after_end, alone, .. } = w;
        let redis = if *alone { "gone" } else { "up or going" };
        eprintln!(
            "pause (Redis {redis}): {inside} inside, {late} after {KNOWN_BY:?}, {after_end} \
             process(es) in the second after it"
        );
    }
    assert_eq!(seen.len(), WORKERS);
    for worker in &seen {
        assert_eq!(worker.errors, 0, "no call failed: {worker:?}");
        assert_eq!(worker.own_pause_broken, 0, "each process holds its own pauses: {worker:?}");
        assert!(worker.slowest_ms < NO_WAIT.as_millis() as u64, "no call waited: {worker:?}");
    }
    let gone = limiter.state.lock().unwrap().redis_gone;
    let gone = gone.unwrap_or_else(|| panic!("three pauses while the workers ran: {windows:#?}"));
    let shared: Vec<&Window> =
        windows.iter().filter(|w| w.start + PAUSE + Duration::from_secs(1) < gone).collect();
    let alone: Vec<&Window> = windows.iter().filter(|w| w.alone).collect();
    assert!(shared.len() >= 2 && alone.len() >= 2, "{windows:#?}");
    for window in &shared {
        // What was on its way before the news reached a process: a
        // request from the whole fleet at most.
        assert!(window.inside <= 1, "the pause is heard at once: {window:?}");
        assert_eq!(window.late, 0, "none once the fleet knew: {window:?}");
        assert!(window.after_end <= 1, "one process probes for the fleet: {window:?}");
    }
    let probing: u32 = alone.iter().map(|w| w.after_end).sum();
    assert!(probing > alone.len() as u32, "alone, each process probes for itself: {alone:#?}");
}
