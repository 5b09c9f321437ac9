//! Admission of first attempts: what a host that is down, failing at
//! random or overloaded gets from a fleet, and how soon it gets its traffic
//! back, for the crate's throttle beside models of the field's designs
//! (see [`models`]), all below the crate's retry middleware.
//!
//! The goals, each checked for the crate's default at 1, 10 and 100 calls
//! a second per process, for one process and for a fleet (k = 3 processes
//! standing for 10, 100 or 1000, each with its share of the capacity):
//!
//! - G1, total outage: first attempts under 0.5× the calls offered in the
//!   ten seconds after the first ten, and (at 10 calls a second or more) at
//!   most 0.10× after that, 0.12× with retries.
//! - G2, recovery: first attempts back to 95% of the calls offered within
//!   10 s of the server's recovery, and at most 1% of the next five
//!   minutes' calls refused locally.
//! - G3, no harm: with half of all answers failing independently of load,
//!   at least 0.98× the load and 99% of the successes of the same client
//!   without a throttle.
//! - G4, overload (calls offered at ten times what the server takes): from
//!   10 s on, first attempts at most 3.2× the attempts accepted, at least
//!   99% of the server's capacity used, first attempts back to 95% of the
//!   calls offered within 10 s of its end, and no call queued.
//! - G5, quiet callers: a process sending 0.5 calls a second or fewer,
//!   evenly, through an outage is never refused locally (at random, ten
//!   seconds of its calls now and then come faster: shown, not checked).
//!
//! Every other run's processes call at random, each a Poisson stream, into
//! a server whose bucket holds a second of its capacity, as the replicas
//! bench's real processes and loopback server do.

mod models;
mod pooled;
mod quota;
mod store;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use reqwest_safe_retry::fleet::{Fleet, FleetTask};
use reqwest_safe_retry::jitter::SeededJitter;
use reqwest_safe_retry::rate_limit::Throttled;
use reqwest_safe_retry::report::AttemptNumber;
use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
use tokio::time::Instant;

use crate::sim::{SEED, answer, base_client, runtime};
use models::{Design, Guard, Refused};
use store::{SimStore, StoreModel};

/// The seed of the first process's calls' times.
const ARRIVALS_SEED: u64 = SEED ^ 0xA221_7A15;
/// Calls a second per process: the goals' columns.
const RATES: [f64; 3] = [1.0, 10.0, 100.0];
/// Processes simulated for a fleet; one for a lone process.
const FLEET: usize = 3;

/// What stands between the retry middleware and the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    /// The crate's default, its throttle on.
    Ours,
    /// A model of another design, the crate's throttle off.
    Model(Design),
    /// Nothing: the crate's default with its throttle off.
    Nothing,
    /// The crate's default, each process in a fleet that pools its
    /// throttles' evidence (and its pauses) through a store of this model.
    Pooled(StoreModel),
}

impl Admit {
    fn all() -> Vec<Admit> {
        let mut all = vec![Admit::Ours];
        all.extend(Design::ALL.map(Admit::Model));
        all.push(Admit::Nothing);
        all
    }

    fn name(self) -> &'static str {
        match self {
            Admit::Ours => "ours: RetryConfig::default()",
            Admit::Model(design) => design.name(),
            Admit::Nothing => "no admission (throttle off)",
            Admit::Pooled(_) => "ours, evidence pooled",
        }
    }

    /// A run's store, shared by its processes, if the design has one.
    fn store(self) -> Option<SimStore> {
        match self {
            Admit::Pooled(model) => Some(SimStore::new(model)),
            _ => None,
        }
    }

    /// A process's client, and its fleet's task while it has one (on
    /// `store`): the rounds run until the task is dropped.
    fn client(
        self,
        server: &Server,
        start: Instant,
        seed: u64,
        store: Option<&SimStore>,
    ) -> (ClientWithMiddleware, Option<FleetTask>) {
        let config = match self {
            Admit::Ours | Admit::Pooled(_) => RetryConfig::default(),
            _ => RetryConfig::builder().with_throttling(false).build().expect("a valid policy"),
        };
        let mut retry = RetryMiddleware::new(config).with_jitter_source(SeededJitter::new(seed));
        let mut task = None;
        if let Some(store) = store {
            let fleet = Fleet::new(store.clone());
            retry = retry.with_fleet(&fleet);
            task = Some(fleet.spawn(Fleet::DEFAULT_INTERVAL));
        }
        let builder = ClientBuilder::new(base_client()).with(retry);
        let builder = match self {
            Admit::Model(design) => builder.with(Guard::new(design, start, seed)),
            _ => builder,
        };
        (builder.with(server.clone()).build(), task)
    }
}

/// What the server does at a time.
#[derive(Debug, Clone, Copy)]
enum Scenario {
    /// Served for `healthy`, every attempt 503 for `down`, then served.
    Outage { healthy: Duration, down: Duration },
    /// Each attempt fails (503) with probability one half, independently;
    /// `draw` picks which ones.
    Flaky { draw: u64 },
    /// Served for `healthy`, then at most `capacity` attempts a second for
    /// `over` (a token bucket holding a second's worth, at least two: a
    /// server's short queue), then served.
    Overload { healthy: Duration, over: Duration, capacity: f64 },
}

/// Per second: calls offered, first attempts, attempts, attempts accepted,
/// calls refused locally, calls that succeeded.
#[derive(Debug, Default, Clone)]
struct Seconds {
    offered: Vec<u32>,
    first: Vec<u32>,
    attempts: Vec<u32>,
    accepted: Vec<u32>,
    refused: Vec<u32>,
    succeeded: Vec<u32>,
    /// The longest a first attempt waited between its call and the server.
    queued: Duration,
}

fn bump(counts: &mut Vec<u32>, second: usize) {
    if counts.len() <= second {
        counts.resize(second + 1, 0);
    }
    counts[second] += 1;
}

fn sum(counts: &[u32], from: Duration, to: Duration) -> f64 {
    let (from, to) = (from.as_secs() as usize, to.as_secs() as usize);
    counts.iter().skip(from).take(to.saturating_sub(from)).map(|c| f64::from(*c)).sum()
}

/// A call's identity, for the flaky server's draw, and when it was made.
#[derive(Debug, Clone, Copy)]
struct Call {
    id: u64,
    at: Instant,
}

#[derive(Clone)]
struct Server {
    start: Instant,
    scenario: Scenario,
    state: Arc<Mutex<(Seconds, f64, Duration)>>,
}

impl Server {
    fn new(start: Instant, scenario: Scenario) -> Self {
        let tokens = match scenario {
            Scenario::Overload { capacity, .. } => depth(capacity),
            _ => 0.0,
        };
        Self {
            start,
            scenario,
            state: Arc::new(Mutex::new((Seconds::default(), tokens, Duration::ZERO))),
        }
    }

    fn serves(
        &self,
        at: Duration,
        call: Call,
        attempt: u32,
        state: &mut (Seconds, f64, Duration),
    ) -> bool {
        match self.scenario {
            Scenario::Outage { healthy, down } => !(healthy..healthy + down).contains(&at),
            Scenario::Flaky { draw } => {
                let seed = SEED ^ draw.wrapping_mul(0xD6E8_FEB8_6659_FD93);
                let mut h = (seed ^ call.id.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                    .wrapping_add(u64::from(attempt).wrapping_mul(0xBF58_476D_1CE4_E5B9));
                h ^= h >> 31;
                h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
                h ^= h >> 29;
                h % 2 == 0
            }
            Scenario::Overload { healthy, over, capacity } => {
                if !(healthy..healthy + over).contains(&at) {
                    return true;
                }
                let refill = (at.saturating_sub(state.2)).as_secs_f64() * capacity;
                state.1 = (state.1 + refill).min(depth(capacity));
                state.2 = at;
                let served = state.1 >= 1.0;
                if served {
                    state.1 -= 1.0;
                }
                served
            }
        }
    }
}

#[async_trait::async_trait]
impl Middleware for Server {
    async fn handle(
        &self,
        _: Request,
        extensions: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let at = self.start.elapsed();
        let second = at.as_secs() as usize;
        let call = *extensions.get::<Call>().expect("every call says who it is");
        let attempt = extensions.get::<AttemptNumber>().map_or(1, AttemptNumber::get);
        let mut state = self.state.lock().expect("no panics while counting");
        let served = self.serves(at, call, attempt, &mut state);
        let seconds = &mut state.0;
        bump(&mut seconds.attempts, second);
        if attempt == 1 {
            bump(&mut seconds.first, second);
            seconds.queued = seconds.queued.max(call.at.elapsed());
        }
        if served {
            bump(&mut seconds.accepted, second);
        }
        Ok(answer(if served { 200 } else { 503 }))
    }
}

/// What the overloaded server's bucket holds: a second's worth, as the
/// replicas bench's server, and at least two.
fn depth(capacity: f64) -> f64 {
    capacity.max(2.0)
}

/// `k` processes at `rate` calls a second each, for `length`, against
/// `scenario`, their calls spaced as `arrivals` says.
fn run(
    admit: Admit,
    scenario: Scenario,
    rate: f64,
    k: usize,
    length: Duration,
    arrivals: Arrivals,
) -> Seconds {
    run_stages(admit, scenario, &[(length, rate)], k, arrivals)
}

/// How each process's calls are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arrivals {
    /// Independently at random at the stage's rate (a Poisson process), as
    /// a replica's users call: every run but the one below.
    Random,
    /// Evenly, the processes in turn: for the quiet callers' rule, which
    /// promises a pace, not a draw.
    Even,
}

/// The times of the calls of `k` processes in `stages`, each with the
/// process that makes it, in order: each stage lasts its time, at its rate
/// of calls a second per process, spaced as `arrivals` says (at random,
/// process `p` drawing from its own seed; the replicas bench measured that
/// calls spaced evenly lock in step with an evenly refilled bucket).
fn call_times(stages: &[(Duration, f64)], k: usize, arrivals: Arrivals) -> Vec<(Duration, usize)> {
    if arrivals == Arrivals::Even {
        return even_times(stages, k);
    }
    let mut times = Vec::new();
    for process in 0..k {
        let mut rng = StdRng::seed_from_u64(ARRIVALS_SEED + process as u64);
        let mut from = 0.0;
        for &(length, rate) in stages {
            let to = from + length.as_secs_f64();
            if rate > 0.0 {
                // Every gap exponential, the first from the stage's start
                // as well: a Poisson stream has no memory of the last.
                let mut at = from + exponential(&mut rng, rate);
                while at < to {
                    times.push((at, process));
                    at += exponential(&mut rng, rate);
                }
            }
            from = to;
        }
    }
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    times.into_iter().map(|(at, process)| (Duration::from_secs_f64(at), process)).collect()
}

/// A gap of a Poisson stream at `rate` calls a second, in seconds: 1 − u
/// is in (0, 1], so its logarithm is finite.
fn exponential(rng: &mut StdRng, rate: f64) -> f64 {
    -(1.0 - rng.random::<f64>()).ln() / rate
}

/// The times of [`call_times`] spaced evenly, the processes in turn.
fn even_times(stages: &[(Duration, f64)], k: usize) -> Vec<(Duration, usize)> {
    let mut times = Vec::new();
    let mut from = Duration::ZERO;
    for &(length, rate) in stages {
        let fleet_rate = rate * k as f64;
        let total = (length.as_secs_f64() * fleet_rate + 1e-6).floor() as usize;
        times.extend(
            (0..total).map(|n| (from + Duration::from_secs_f64(n as f64 / fleet_rate), n % k)),
        );
        from += length;
    }
    times
}

/// `k` processes calling as [`call_times`] has them, against `scenario`.
fn run_stages(
    admit: Admit,
    scenario: Scenario,
    stages: &[(Duration, f64)],
    k: usize,
    arrivals: Arrivals,
) -> Seconds {
    let times = call_times(stages, k, arrivals);
    runtime().block_on(async move {
        let start = Instant::now();
        let server = Server::new(start, scenario);
        let store = admit.store();
        let (clients, _fleets): (Vec<_>, Vec<_>) =
            (0..k).map(|p| admit.client(&server, start, SEED + p as u64, store.as_ref())).unzip();
        let outcomes = Arc::new(Mutex::new(Seconds::default()));
        let mut tasks = Vec::new();
        for (n, (time, process)) in times.into_iter().enumerate() {
            let n = n as u64;
            tokio::time::sleep_until(start + time).await;
            let at = Instant::now();
            let client = clients[process].clone();
            let outcomes = outcomes.clone();
            tasks.push(tokio::spawn(async move {
                let call = Call { id: n, at };
                let sent = client.get("http://sim.test/").with_extension(call).send().await;
                let second = (at - start).as_secs() as usize;
                let mut seconds = outcomes.lock().expect("no panics while counting");
                bump(&mut seconds.offered, second);
                match sent {
                    Ok(response) if response.status().is_success() => {
                        bump(&mut seconds.succeeded, second)
                    }
                    Ok(_) => {}
                    Err(reqwest_middleware::Error::Middleware(e))
                        if e.is::<Throttled>() || e.is::<Refused>() =>
                    {
                        bump(&mut seconds.refused, second)
                    }
                    Err(error) => panic!("no other error in the simulation: {error}"),
                }
            }));
        }
        for task in tasks {
            task.await.expect("calls do not panic");
        }
        let mut seconds = outcomes.lock().expect("no panics while counting").clone();
        let served = server.state.lock().expect("no panics while counting").0.clone();
        seconds.first = served.first;
        seconds.attempts = served.attempts;
        seconds.accepted = served.accepted;
        seconds.queued = served.queued;
        seconds
    })
}

/// The first second from `from` on after which, until `to`, every five
/// seconds' first attempts are at least 95% of the calls offered; in
/// seconds after `from`.
fn back_by(seconds: &Seconds, from: Duration, to: Duration) -> Option<u64> {
    let s = Duration::from_secs;
    let window = |t: u64| {
        sum(&seconds.first, s(t), s(t + 5)) >= 0.95 * sum(&seconds.offered, s(t), s(t + 5))
    };
    let (from, to) = (from.as_secs(), to.as_secs());
    (from..to.saturating_sub(5)).find(|&t| (t..to.saturating_sub(5)).all(window)).map(|t| t - from)
}

mod goals;
mod spike;

pub(crate) use goals::run_goals;
pub(crate) use pooled::run as run_pooled;
pub(crate) use quota::run_all as run_quota;
pub(crate) use spike::run as run_spike;
