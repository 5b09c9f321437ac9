//! What every simulation shares: a paused runtime, one reqwest client, the
//! outage server, load accounting, and one run of the outage model.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use tokio::time::Instant;

use crate::policy::Policy;

/// The seed of every simulation; process `p` of a run draws from `SEED + p`.
pub(crate) const SEED: u64 = 2026;

/// A current-thread runtime on tokio's paused clock: waits take no real time,
/// and the clock moves in whole milliseconds.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// The one reqwest client under every simulated process. Building one loads
/// the system's root certificates; no simulated call reaches it, as the
/// server is the last middleware.
pub(crate) fn base_client() -> reqwest::Client {
    static BASE: OnceLock<reqwest::Client> = OnceLock::new();
    BASE.get_or_init(reqwest::Client::new).clone()
}

pub(crate) fn answer(status: u16) -> Response {
    http::Response::builder().status(status).body(Vec::new()).expect("a valid response").into()
}

/// Calls and successes the server saw in each second, and the calls that
/// came during the outage.
#[derive(Debug, Default, Clone)]
pub(crate) struct Load {
    pub(crate) calls: Vec<u32>,
    pub(crate) served: Vec<u32>,
    pub(crate) in_outage: u64,
}

impl Load {
    fn record(&mut self, second: usize, served: bool) {
        if self.calls.len() <= second {
            self.calls.resize(second + 1, 0);
            self.served.resize(second + 1, 0);
        }
        self.calls[second] += 1;
        self.served[second] += u32::from(served);
    }
}

/// The outage model's server: every call answered 503 during the outage;
/// otherwise served up to `capacity` calls a second, 503 beyond it.
///
/// The capacity is a token bucket refilled at `capacity` a second and
/// holding one second's worth (at least one call), so that a capacity below
/// one call a second, as a small share of a fleet's server has, still means
/// something. An infinite capacity serves every call outside the outage.
#[derive(Clone)]
pub(crate) struct OutageServer {
    start: Instant,
    outage: std::ops::Range<Duration>,
    capacity: f64,
    state: Arc<Mutex<ServerState>>,
}

struct ServerState {
    load: Load,
    tokens: f64,
    refilled: Duration,
}

impl OutageServer {
    pub(crate) fn new(start: Instant, outage: (Duration, Duration), capacity: f64) -> Self {
        let state = ServerState {
            load: Load::default(),
            tokens: capacity.max(1.0),
            refilled: Duration::ZERO,
        };
        Self { start, outage: outage.0..outage.1, capacity, state: Arc::new(Mutex::new(state)) }
    }

    fn load(&self) -> Load {
        self.state.lock().expect("no panics while counting").load.clone()
    }
}

#[async_trait::async_trait]
impl Middleware for OutageServer {
    async fn handle(
        &self,
        _: Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let at = self.start.elapsed();
        let mut state = self.state.lock().expect("no panics while counting");
        let in_outage = self.outage.contains(&at);
        let served = if self.capacity.is_infinite() {
            !in_outage
        } else {
            let burst = self.capacity.max(1.0);
            let refill = (at - state.refilled).as_secs_f64() * self.capacity;
            state.tokens = (state.tokens + refill).min(burst);
            state.refilled = at;
            let served = !in_outage && state.tokens >= 1.0;
            if served {
                state.tokens -= 1.0;
            }
            served
        };
        state.load.in_outage += u64::from(in_outage);
        state.load.record(at.as_secs() as usize, served);
        Ok(answer(if served { 200 } else { 503 }))
    }
}

/// What one logical request came to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Done {
    pub(crate) latency: Duration,
    pub(crate) ok: bool,
    /// Issued during the outage.
    pub(crate) in_outage: bool,
}

#[derive(Debug)]
pub(crate) struct Summary {
    pub(crate) name: String,
    pub(crate) requests: usize,
    pub(crate) calls: u64,
    pub(crate) peak: u32,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) max: Duration,
    pub(crate) success: f64,
    pub(crate) recovered: Option<u64>,
    pub(crate) load: Vec<u32>,
    /// Requests issued during the outage.
    pub(crate) outage_requests: usize,
    /// Calls the server saw during the outage.
    pub(crate) outage_calls: u64,
}

impl Summary {
    fn new(name: String, mut done: Vec<Done>, load: &Load) -> Self {
        done.sort_by_key(|d| d.latency);
        let pick = |q: f64| {
            let i = ((done.len() as f64 - 1.0) * q).round() as usize;
            done.get(i).map_or(Duration::ZERO, |d| d.latency)
        };
        Self {
            name,
            requests: done.len(),
            calls: load.calls.iter().map(|c| u64::from(*c)).sum(),
            peak: load.calls.iter().copied().max().unwrap_or(0),
            p50: pick(0.5),
            p99: pick(0.99),
            max: pick(1.0),
            success: done.iter().filter(|d| d.ok).count() as f64 / done.len().max(1) as f64,
            recovered: None,
            load: load.calls.clone(),
            outage_requests: done.iter().filter(|d| d.in_outage).count(),
            outage_calls: load.in_outage,
        }
    }

    /// Calls the server saw per request issued.
    pub(crate) fn amplification(&self) -> f64 {
        self.calls as f64 / self.requests.max(1) as f64
    }

    /// Calls the server saw during the outage per request issued during it.
    /// Meant for an outage that lasts past the last retry and follows
    /// healthy traffic served at once: then every call during the outage
    /// belongs to a request issued during it.
    pub(crate) fn outage_amplification(&self) -> f64 {
        self.outage_calls as f64 / self.outage_requests.max(1) as f64
    }
}

/// The outage model's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outage {
    /// Processes simulated, each with its own middleware (and budget).
    pub(crate) processes: usize,
    /// Requests per second each process issues, evenly spaced; the
    /// processes take turns, so the fleet's requests are evenly spaced too.
    pub(crate) rate: f64,
    /// Requests are issued from 0 to this time; their retries may run on.
    pub(crate) issue_for: Duration,
    /// Every call in this span is answered 503.
    pub(crate) outage: (Duration, Duration),
    /// Calls a second served outside the outage (all processes together);
    /// `f64::INFINITY` serves every one.
    pub(crate) capacity: f64,
    /// The reserve of the `+ budget` policies' budget, in retries; `None`
    /// for the crate's default (`max_retries + 2`).
    pub(crate) reserve: Option<u32>,
}

impl Outage {
    /// Every call fails for as long as requests are issued.
    pub(crate) fn total(self) -> Self {
        Self { outage: (Duration::ZERO, Duration::MAX), ..self }
    }
}

/// Runs the outage model for `policy`; process `p` draws its jitter from
/// `SEED + p`.
pub(crate) fn run_outage(policy: Policy, model: Outage) -> Summary {
    runtime().block_on(async move {
        let start = Instant::now();
        let server = OutageServer::new(start, model.outage, model.capacity);
        let processes: Vec<ClientWithMiddleware> = (0..model.processes)
            .map(|p| policy.client(server.clone(), 3, model.reserve, SEED + p as u64))
            .collect();
        let fleet_rate = model.rate * model.processes as f64;
        let total = (model.issue_for.as_secs_f64() * fleet_rate + 1e-6).floor() as usize;
        let mut tasks = Vec::with_capacity(total);
        let outage = model.outage.0..model.outage.1;
        for n in 0..total {
            let issue = start + Duration::from_secs_f64(n as f64 / fleet_rate);
            tokio::time::sleep_until(issue).await;
            let client = processes[n % model.processes].clone();
            let in_outage = outage.contains(&(issue - start));
            tasks.push(tokio::spawn(async move {
                let ok = matches!(client.get("http://sim.test/orders").send().await,
                    Ok(r) if r.status().is_success());
                Done { latency: issue.elapsed(), ok, in_outage }
            }));
        }
        let mut done = Vec::with_capacity(total);
        for task in tasks {
            done.push(task.await.expect("request tasks do not panic"));
        }
        let load = server.load();
        let mut summary = Summary::new(policy.name(), done, &load);
        // Recovered: from this second on, every call that came was served.
        let issue_end = model.issue_for.as_secs() as usize;
        let outage_end = model.outage.1.as_secs().min(model.issue_for.as_secs()) as usize;
        summary.recovered = (outage_end..issue_end)
            .find(|&s| (s..issue_end).all(|t| load.calls.get(t) == load.served.get(t)))
            .map(|s| (s - outage_end) as u64);
        summary
    })
}
