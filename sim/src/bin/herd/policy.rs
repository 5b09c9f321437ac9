//! The retry policies compared, and the budget designs modelled in this
//! simulator to compare the crate's against.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_safe_retry::{
    Attempt, Jitter, Outcome, RetryBudget, RetryConfig, RetryMiddleware, Retryability,
    jitter::SeededJitter,
};
use tokio::time::Instant;

use crate::sim::base_client;

/// One retry policy of the comparison. All use 3 retries and, but for the
/// peer and `Immediate`, the crate's default backoff.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Policy {
    /// The crate's middleware with this backoff, with or without the
    /// crate's budget, whose reserve the command line may set (else the
    /// crate's default reserve).
    Ours { backoff: Backoff, budget: bool },
    /// `RetryConfig::default()`, the crate's budget as it ships.
    Default,
    /// `RetryConfig::builder().with_budget(None)`.
    NoBudget,
    /// A budget design modelled below, through the crate's custom predicate
    /// with the crate's own budget off.
    Model(Model),
    /// The peer: reqwest-retry's default exponential backoff.
    Peer,
    /// reqwest's own retries as `reqwest::Client::new()` ships them. In
    /// reqwest 0.13 the default policy retries only HTTP/2 protocol NACKs
    /// (a refused stream, a graceful GOAWAY), never an HTTP status, so for
    /// a server that answers 503 or 429 it is a client with no retries.
    Reqwest,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Backoff {
    Immediate,
    Exponential(Jitter),
}

impl Policy {
    /// The policies of the outage tables.
    pub(crate) fn outage_tables() -> Vec<Policy> {
        let kinds = [
            Backoff::Immediate,
            Backoff::Exponential(Jitter::None),
            Backoff::Exponential(Jitter::Full),
            Backoff::Exponential(Jitter::Equal),
            Backoff::Exponential(Jitter::Decorrelated),
        ];
        let mut all: Vec<Policy> = [false, true]
            .into_iter()
            .flat_map(|budget| kinds.map(|backoff| Policy::Ours { backoff, budget }))
            .collect();
        all.push(Policy::Default);
        all.push(Policy::Peer);
        all
    }

    /// The policies of the fleet grid besides the default, which has grids
    /// of its own.
    pub(crate) fn fleet() -> Vec<Policy> {
        let mut all = vec![Policy::NoBudget, Policy::Peer];
        all.extend(Model::ALL.map(Policy::Model));
        all
    }

    pub(crate) fn name(&self) -> String {
        match self {
            Policy::Peer => "reqwest-retry (default exponential)".to_owned(),
            Policy::Reqwest => "reqwest 0.13 built-in (no status retries)".to_owned(),
            Policy::Default => "new default".to_owned(),
            Policy::NoBudget => "no budget".to_owned(),
            Policy::Model(model) => model.name().to_owned(),
            Policy::Ours { backoff, budget } => {
                let backoff = match backoff {
                    Backoff::Immediate => "no backoff",
                    Backoff::Exponential(Jitter::None) => "exponential, no jitter",
                    Backoff::Exponential(Jitter::Full) => "full jitter",
                    Backoff::Exponential(Jitter::Equal) => "equal jitter",
                    Backoff::Exponential(Jitter::Decorrelated) => "decorrelated jitter",
                    Backoff::Exponential(_) => "other jitter",
                };
                if *budget { format!("{backoff} + budget") } else { backoff.to_owned() }
            }
        }
    }

    /// A client of one process whose last middleware is `server`. A model
    /// policy gets a fresh model: one per process, like the crate's budget.
    pub(crate) fn client(
        &self,
        server: impl Middleware,
        max_retries: u32,
        reserve: Option<u32>,
        seed: u64,
    ) -> ClientWithMiddleware {
        let builder = ClientBuilder::new(base_client());
        let config = match *self {
            // No retry middleware: reqwest's default never retries a status.
            Policy::Reqwest => return builder.with(server).build(),
            Policy::Peer => {
                let policy = ExponentialBackoff::builder().build_with_max_retries(max_retries);
                return builder
                    .with(RetryTransientMiddleware::new_with_policy(policy))
                    .with(server)
                    .build();
            }
            Policy::Default => RetryConfig::default(),
            Policy::NoBudget => RetryConfig::builder()
                .with_max_retries(max_retries)
                .with_budget(None)
                .build()
                .expect("a valid policy"),
            Policy::Model(model) => {
                let state = Arc::new(Mutex::new(model.start(Instant::now())));
                RetryConfig::builder()
                    .with_max_retries(max_retries)
                    .with_budget(None)
                    .with_predicate(move |attempt| {
                        state.lock().expect("no panics in a model").judge(attempt, max_retries)
                    })
                    .build()
                    .expect("a valid policy")
            }
            Policy::Ours { backoff, budget } => {
                let mut config = RetryConfig::builder().with_max_retries(max_retries);
                if let Backoff::Exponential(jitter) = backoff {
                    config = config
                        .with_backoff(reqwest_safe_retry::Backoff::default().with_jitter(jitter));
                } else {
                    config = config.with_backoff(
                        reqwest_safe_retry::Backoff::default()
                            .with_initial(Duration::ZERO)
                            .with_max(Duration::ZERO),
                    );
                }
                config = if budget {
                    let default = RetryBudget::default();
                    config.with_budget(reserve.map_or(default, |r| default.with_reserve(r)))
                } else {
                    config.with_budget(None)
                };
                config.build().expect("a valid policy")
            }
        };
        let middleware = RetryMiddleware::new(config).with_jitter_source(SeededJitter::new(seed));
        builder.with(middleware).with(server).build()
    }
}

/// Budget designs, modelled here and plugged into the middleware through
/// its predicate.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Model {
    /// This crate's previous budget: over a sliding 10 s window of 10
    /// slots, retries ≤ 0.1 × requests + 10/s × 10 s.
    OldBudget,
    /// tower's `TpsBudget::new(10 s, 10/s, 0.2)`: the same with 20%.
    Tps,
    /// gRPC retry throttling: 10 tokens, −1 per failure, +0.1 per success,
    /// retries only above half.
    Grpc,
    /// The AWS SDKs' standard retry quota: 500, a retry costs 5, refunded
    /// when it succeeds; a success at the first attempt adds 1.
    Aws,
}

impl Model {
    pub(crate) const ALL: [Model; 4] = [Model::OldBudget, Model::Tps, Model::Grpc, Model::Aws];

    fn name(self) -> &'static str {
        match self {
            Model::OldBudget => "old budget (10% + 10/s per process)",
            Model::Tps => "TpsBudget-like (20% + 10/s per process)",
            Model::Grpc => "gRPC-like retry throttling (10 tokens)",
            Model::Aws => "AWS-standard-like retry quota (500)",
        }
    }

    fn start(self, now: Instant) -> ModelState {
        match self {
            Model::OldBudget => ModelState::Window(Box::new(Window::new(now, 0.1, 10.0))),
            Model::Tps => ModelState::Window(Box::new(Window::new(now, 0.2, 10.0))),
            Model::Grpc => ModelState::Grpc { tokens: GRPC_MAX_TOKENS },
            Model::Aws => ModelState::Aws { quota: AWS_QUOTA },
        }
    }
}

const GRPC_MAX_TOKENS: f64 = 10.0;
const AWS_QUOTA: u32 = 500;
const AWS_RETRY_COST: u32 = 5;

/// One process's state of a budget model.
#[derive(Debug)]
enum ModelState {
    Window(Box<Window>),
    Grpc { tokens: f64 },
    Aws { quota: u32 },
}

impl ModelState {
    /// The predicate: records the attempt, and vetoes a retry the model
    /// does not allow. `None` leaves the decision to the built-in rules,
    /// which retry a 503 or a 429 for a GET while retries remain, after
    /// the 429's `Retry-After`. A 429 is judged like a 503: a failure, and a
    /// retry the model must pay for.
    fn judge(&mut self, attempt: &Attempt<'_>, max_retries: u32) -> Option<Retryability> {
        let now = Instant::now();
        if attempt.number == 1 {
            self.request(now);
        }
        match attempt.outcome {
            Outcome::Response(r) if r.status().is_success() => {
                self.success(attempt.number > 1);
                None
            }
            Outcome::Response(r) if r.status() == 503 || r.status() == 429 => {
                self.failure();
                if attempt.number <= max_retries && !self.withdraw(now) {
                    Some(Retryability::Never)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    fn request(&mut self, now: Instant) {
        if let ModelState::Window(window) = self {
            *window.slot(now).0 += 1;
        }
    }

    fn success(&mut self, retried: bool) {
        match self {
            ModelState::Window(_) => {}
            ModelState::Grpc { tokens } => *tokens = (*tokens + 0.1).min(GRPC_MAX_TOKENS),
            ModelState::Aws { quota } => {
                let refund = if retried { AWS_RETRY_COST } else { 1 };
                *quota = (*quota + refund).min(AWS_QUOTA);
            }
        }
    }

    fn failure(&mut self) {
        if let ModelState::Grpc { tokens } = self {
            *tokens = (*tokens - 1.0).max(0.0);
        }
    }

    /// Whether a retry may be taken now; if so, it is paid for.
    fn withdraw(&mut self, now: Instant) -> bool {
        match self {
            ModelState::Window(window) => window.withdraw(now),
            ModelState::Grpc { tokens } => *tokens > GRPC_MAX_TOKENS / 2.0,
            ModelState::Aws { quota } => {
                let allowed = *quota >= AWS_RETRY_COST;
                if allowed {
                    *quota -= AWS_RETRY_COST;
                }
                allowed
            }
        }
    }
}

/// A sliding window of ten 1 s slots counting requests and retries.
#[derive(Debug)]
struct Window {
    start: Instant,
    ratio: f64,
    floor_per_sec: f64,
    /// (requests, retries) of the second `second % 10`, and that second.
    slots: [(u64, u64, u64); 10],
}

impl Window {
    fn new(start: Instant, ratio: f64, floor_per_sec: f64) -> Self {
        Self { start, ratio, floor_per_sec, slots: [(0, 0, u64::MAX); 10] }
    }

    /// The current slot's (requests, retries), emptied if it held an older
    /// second.
    fn slot(&mut self, now: Instant) -> (&mut u64, &mut u64) {
        let second = (now - self.start).as_secs();
        let slot = &mut self.slots[(second % 10) as usize];
        if slot.2 != second {
            *slot = (0, 0, second);
        }
        (&mut slot.0, &mut slot.1)
    }

    fn withdraw(&mut self, now: Instant) -> bool {
        let second = (now - self.start).as_secs();
        let live = |s: &&(u64, u64, u64)| s.2 != u64::MAX && s.2 + 10 > second;
        let requests: u64 = self.slots.iter().filter(live).map(|s| s.0).sum();
        let retries: u64 = self.slots.iter().filter(live).map(|s| s.1).sum();
        let allowed =
            (retries + 1) as f64 <= self.ratio * requests as f64 + self.floor_per_sec * 10.0;
        if allowed {
            *self.slot(now).1 += 1;
        }
        allowed
    }
}
