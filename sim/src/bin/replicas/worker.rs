//! One replica: a process that builds its client as the README's quick
//! start does (in the README's fleet, or alone), then calls the server on
//! a schedule, each call in a task of its own so that a call that waits
//! holds none of the others back, and prints what each call came to.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::RngExt;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::fleet::{Fleet, RedisStore};
use reqwest_safe_retry::rate_limit::{HostPaused, ReturnIfPaused, Throttled};
use reqwest_safe_retry::report::{ReportSlot, RetryReport};
use reqwest_safe_retry::{DeadlineExceeded, RetryConfig, RetryMiddleware};

/// The environment variable that makes the program a worker.
pub(crate) const WORKER: &str = "REPLICAS_WORKER";

/// How a worker spaces its calls within a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrivals {
    /// Independently at random, at the stage's rate (a Poisson process):
    /// as the requests of a service's many users come to one replica.
    Random,
    /// Evenly, from a random phase. Against a bucket that refills evenly
    /// it phase-locks: the process whose calls come just after each token
    /// takes most of them, and the others see far fewer accepted.
    Even,
}

impl Arrivals {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            "random" => Some(Self::Random),
            "even" => Some(Self::Even),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::Even => "even",
        }
    }
}

/// What a worker is told, as `name=value` pairs separated by spaces.
#[derive(Debug, Clone)]
pub(crate) struct Orders {
    pub(crate) id: u32,
    pub(crate) redis: String,
    pub(crate) url: String,
    pub(crate) prefix: String,
    pub(crate) fleet: bool,
    /// The run's start, in milliseconds since the Unix epoch.
    pub(crate) epoch_ms: u64,
    /// Stages of the schedule: how long, and this worker's calls a second.
    pub(crate) stages: Vec<(u64, f64)>,
    pub(crate) arrivals: Arrivals,
    /// Whether each call carries `ReturnIfPaused`.
    pub(crate) return_if_paused: bool,
    /// How long after the schedule the last calls may take.
    pub(crate) linger_ms: u64,
}

impl Orders {
    pub(crate) fn encode(&self) -> String {
        let stages: Vec<String> = self.stages.iter().map(|(ms, r)| format!("{ms}:{r}")).collect();
        format!(
            "id={} redis={} url={} prefix={} fleet={} epoch={} stages={} arrivals={} rip={} linger={}",
            self.id,
            self.redis,
            self.url,
            self.prefix,
            u8::from(self.fleet),
            self.epoch_ms,
            stages.join(","),
            self.arrivals.name(),
            u8::from(self.return_if_paused),
            self.linger_ms
        )
    }

    fn decode(text: &str) -> Option<Self> {
        let mut orders = Orders {
            id: 0,
            redis: String::new(),
            url: String::new(),
            prefix: String::new(),
            fleet: false,
            epoch_ms: 0,
            stages: Vec::new(),
            arrivals: Arrivals::Random,
            return_if_paused: false,
            linger_ms: 0,
        };
        for pair in text.split(' ') {
            let (name, value) = pair.split_once('=')?;
            match name {
                "id" => orders.id = value.parse().ok()?,
                "redis" => orders.redis = value.to_owned(),
                "url" => orders.url = value.to_owned(),
                "prefix" => orders.prefix = value.to_owned(),
                "fleet" => orders.fleet = value == "1",
                "epoch" => orders.epoch_ms = value.parse().ok()?,
                "stages" => {
                    for stage in value.split(',') {
                        let (ms, rate) = stage.split_once(':')?;
                        orders.stages.push((ms.parse().ok()?, rate.parse().ok()?));
                    }
                }
                "arrivals" => orders.arrivals = Arrivals::parse(value)?,
                "rip" => orders.return_if_paused = value == "1",
                "linger" => orders.linger_ms = value.parse().ok()?,
                _ => return None,
            }
        }
        Some(orders)
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn unix_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// The instant of `epoch_ms` on this process's clock.
pub(crate) fn instant_of(epoch_ms: u64) -> Instant {
    let now = Instant::now();
    let unix = unix_ms();
    match epoch_ms.checked_sub(unix) {
        Some(ahead) => now + Duration::from_millis(ahead),
        None => now.checked_sub(Duration::from_millis(unix - epoch_ms)).unwrap_or(now),
    }
}

/// The times of a worker's calls, in milliseconds from the start: in each
/// stage at its rate, spaced as `arrivals` says.
fn schedule(stages: &[(u64, f64)], arrivals: Arrivals) -> Vec<f64> {
    let mut rng = rand::rng();
    let mut times = Vec::new();
    let mut from = 0.0;
    for &(ms, rate) in stages {
        let to = from + ms as f64;
        if rate > 0.0 {
            let gap = 1000.0 / rate;
            // An exponential gap (1 − u is in (0, 1], so its logarithm is
            // finite), the first from the stage's start too: a Poisson
            // stream has no memory of the last call. Even calls start at a
            // random phase.
            let next = |rng: &mut rand::rngs::ThreadRng| match arrivals {
                Arrivals::Random => -gap * (1.0 - rng.random::<f64>()).ln(),
                Arrivals::Even => gap,
            };
            let mut at = match arrivals {
                Arrivals::Random => from + next(&mut rng),
                Arrivals::Even => from + rng.random::<f64>() * gap,
            };
            while at < to {
                times.push(at);
                at += next(&mut rng);
            }
        }
        from = to;
    }
    times
}

/// The client, as the README's quick start builds it: in the README's
/// fleet when `fleet`. The fleet's task runs as long as it is held.
fn client(
    orders: &Orders,
) -> (ClientWithMiddleware, Option<(Fleet, reqwest_safe_retry::fleet::FleetTask)>) {
    let mut middleware = RetryMiddleware::new(RetryConfig::default());
    let mut fleet = None;
    if orders.fleet {
        let store = RedisStore::new(&orders.redis, &orders.prefix).expect("a Redis URL");
        let shared = Fleet::new(store);
        let rounds = shared.spawn(Fleet::DEFAULT_INTERVAL);
        middleware = middleware.with_fleet(&shared);
        fleet = Some((shared, rounds));
    }
    let client = middleware.client(reqwest::Client::builder()).expect("the client builds").build();
    (client, fleet)
}

/// One call's outcome, as a word.
fn outcome(result: &reqwest_middleware::Result<reqwest::Response>) -> String {
    match result {
        Ok(response) if response.status().is_success() => "ok".to_owned(),
        Ok(response) => format!("s{}", response.status().as_u16()),
        Err(reqwest_middleware::Error::Middleware(error)) if error.is::<Throttled>() => {
            "throttled".to_owned()
        }
        Err(reqwest_middleware::Error::Middleware(error)) if error.is::<HostPaused>() => {
            "paused".to_owned()
        }
        Err(reqwest_middleware::Error::Middleware(error)) if error.is::<DeadlineExceeded>() => {
            "deadline".to_owned()
        }
        Err(reqwest_middleware::Error::Reqwest(error)) if error.is_connect() => {
            "connect".to_owned()
        }
        Err(reqwest_middleware::Error::Reqwest(error)) if error.is_timeout() => {
            "timeout".to_owned()
        }
        Err(_) => "error".to_owned(),
    }
}

/// Runs a worker from the environment's orders; prints a line a call,
/// then the fleet's status.
pub(crate) fn run(text: &str) {
    let orders = Orders::decode(text).expect("a worker's orders");
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    runtime.block_on(work(orders));
}

async fn work(orders: Orders) {
    let (client, fleet) = client(&orders);
    let start = instant_of(orders.epoch_ms);
    let times = schedule(&orders.stages, orders.arrivals);
    let end_ms = orders.stages.iter().map(|(ms, _)| *ms).sum::<u64>();
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut calls = tokio::task::JoinSet::new();
    for at in times {
        tokio::time::sleep_until((start + Duration::from_secs_f64(at / 1000.0)).into()).await;
        let (client, orders, lines) = (client.clone(), orders.clone(), lines.clone());
        calls.spawn(async move {
            let began = Instant::now();
            let slot = ReportSlot::new();
            let mut request = client.get(&orders.url).with_extension(slot.clone());
            if orders.return_if_paused {
                request = request.with_extension(ReturnIfPaused);
            }
            let result = request.send().await;
            let took = began.elapsed().as_secs_f64() * 1000.0;
            let attempts = match &result {
                Ok(response) => RetryReport::from_response(response).attempts,
                Err(_) => slot.get().map_or(0, |report| report.attempts),
            };
            let started = began.saturating_duration_since(start).as_secs_f64() * 1000.0;
            let line = format!("call {started:.3} {took:.3} {} {attempts}", outcome(&result));
            lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line);
        });
    }
    let linger = start + Duration::from_millis(end_ms + orders.linger_ms);
    let _ = tokio::time::timeout_at(linger.into(), async {
        while calls.join_next().await.is_some() {}
    })
    .await;
    let unfinished = calls.len();
    calls.abort_all();
    let lines = lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = String::new();
    for line in lines.iter() {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!("unfinished {unfinished}\n"));
    if let Some((fleet, _)) = &fleet {
        let s = fleet.status();
        out.push_str(&format!(
            "fleet connected={} published={} received={} heard={} ignored={} dropped={} \
             failed_rounds={} held_for_probe={} pooled={} throttled_by_fleet={}\n",
            u8::from(s.connected),
            s.published,
            s.received,
            s.heard,
            s.ignored,
            s.dropped,
            s.failed_rounds,
            s.held_for_probe,
            s.pooled,
            s.throttled_by_fleet
        ));
    }
    print!("{out}");
}
