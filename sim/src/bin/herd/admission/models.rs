//! Models of the field's designs for admitting requests to a host, each
//! from its published algorithm and default constants, as a middleware
//! between the crate's retry middleware (its throttle off) and the server.
//! Like the real ones, each judges every attempt, retries included, and
//! counts as a failure what the crate counts as a rejection (here, every
//! 503 the server sends).

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use http::Extensions;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use tokio::time::Instant;

/// An attempt a model refused locally: never sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused;

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("refused locally by the model")
    }
}

impl std::error::Error for Refused {}

/// The designs modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Design {
    /// Google SRE client-side throttling: `(requests − K × accepts) /
    /// (requests + 1)` with K = 2 over 2 minutes; refused requests count.
    Sre,
    /// Envoy's admission control filter, defaults: a 30 s window, success
    /// rate threshold 95%, aggression 1, at most 80% rejected.
    Envoy,
    /// go-zero's Google breaker: K = 1.5 over 10 s (40 buckets), a
    /// protection of 5 requests; a dropped request counts as a failure.
    GoZero,
    /// The AWS SDKs' adaptive retry mode: a client-side token bucket whose
    /// rate CUBIC sets (×0.7 on a throttling error), which calls wait for.
    Aws,
    /// Polly's circuit breaker (v8) defaults: opens at a failure ratio of
    /// 10% over 30 s with at least 100 calls, for 5 s, then one trial.
    Polly,
}

impl Design {
    pub(crate) const ALL: [Design; 5] =
        [Design::Sre, Design::Envoy, Design::GoZero, Design::Aws, Design::Polly];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Design::Sre => "SRE throttling (K = 2, 2 min)",
            Design::Envoy => "Envoy admission control",
            Design::GoZero => "go-zero breaker (K = 1.5, 10 s)",
            Design::Aws => "AWS adaptive (CUBIC rate)",
            Design::Polly => "Polly circuit breaker",
        }
    }
}

/// Counts in time buckets over a sliding window.
#[derive(Debug)]
struct Window {
    bucket: Duration,
    /// (bucket number, total, successes).
    buckets: Vec<(u64, f64, f64)>,
}

impl Window {
    fn new(window: Duration, buckets: usize) -> Self {
        Self { bucket: window / buckets as u32, buckets: vec![(u64::MAX, 0.0, 0.0); buckets] }
    }

    fn number(&self, since: Duration) -> u64 {
        (since.as_nanos() / self.bucket.as_nanos()) as u64
    }

    fn add(&mut self, since: Duration, success: bool) {
        let number = self.number(since);
        let len = self.buckets.len() as u64;
        let slot = &mut self.buckets[(number % len) as usize];
        if slot.0 != number {
            *slot = (number, 0.0, 0.0);
        }
        slot.1 += 1.0;
        slot.2 += f64::from(u8::from(success));
    }

    /// (total, successes) over the window ending at `since`.
    fn sums(&self, since: Duration) -> (f64, f64) {
        let number = self.number(since);
        let len = self.buckets.len() as u64;
        self.buckets
            .iter()
            .filter(|b| b.0 != u64::MAX && b.0 + len > number && b.0 <= number)
            .fold((0.0, 0.0), |(t, s), b| (t + b.1, s + b.2))
    }

    fn clear(&mut self) {
        self.buckets.iter_mut().for_each(|b| *b = (u64::MAX, 0.0, 0.0));
    }
}

/// The AWS SDKs' client-side rate limiter (adaptive mode).
#[derive(Debug)]
struct Cubic {
    enabled: bool,
    fill_rate: f64,
    max_capacity: f64,
    capacity: f64,
    last_refill: f64,
    measured: f64,
    bucket: f64,
    bucket_count: f64,
    last_max_rate: f64,
    last_throttle: f64,
}

const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;
const MIN_FILL_RATE: f64 = 0.5;

impl Cubic {
    fn new() -> Self {
        Self {
            enabled: false,
            fill_rate: 0.0,
            max_capacity: 0.0,
            capacity: 0.0,
            last_refill: 0.0,
            measured: 0.0,
            bucket: 0.0,
            bucket_count: 0.0,
            last_max_rate: 0.0,
            last_throttle: 0.0,
        }
    }

    fn refill(&mut self, t: f64) {
        self.capacity =
            (self.capacity + (t - self.last_refill) * self.fill_rate).min(self.max_capacity);
        self.last_refill = t;
    }

    /// How long a request must wait for its token at `t`; takes it.
    fn acquire(&mut self, t: f64) -> f64 {
        if !self.enabled {
            return 0.0;
        }
        self.refill(t);
        self.capacity -= 1.0;
        if self.capacity >= 0.0 { 0.0 } else { -self.capacity / self.fill_rate }
    }

    fn measure(&mut self, t: f64) {
        // Half-second buckets, smoothed by 0.8.
        let bucket = (t * 2.0).floor() / 2.0;
        self.bucket_count += 1.0;
        if bucket > self.bucket {
            let rate = self.bucket_count / (bucket - self.bucket);
            self.measured = rate * 0.8 + self.measured * 0.2;
            self.bucket_count = 0.0;
            self.bucket = bucket;
        }
    }

    fn answer(&mut self, t: f64, throttled: bool) {
        self.measure(t);
        let rate = if throttled {
            let rate = if self.enabled { self.measured.min(self.fill_rate) } else { self.measured };
            self.last_max_rate = rate;
            self.last_throttle = t;
            self.enabled = true;
            rate * CUBIC_BETA
        } else {
            let window = (self.last_max_rate * (1.0 - CUBIC_BETA) / CUBIC_C).cbrt();
            let cubic = CUBIC_C * (t - self.last_throttle - window).powi(3) + self.last_max_rate;
            cubic.min(2.0 * self.measured)
        };
        self.refill(t);
        self.fill_rate = rate.max(MIN_FILL_RATE);
        self.max_capacity = rate.max(1.0);
        self.capacity = self.capacity.min(self.max_capacity);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaker {
    Closed,
    Open { until: Duration },
    HalfOpen { trial: bool },
}

/// One process's state of one design.
#[derive(Debug)]
enum State {
    Ratio { window: Window },
    Aws(Box<Cubic>),
    Polly { window: Window, breaker: Breaker },
}

/// A model as a middleware: one per process.
pub(crate) struct Guard {
    design: Design,
    start: Instant,
    state: Mutex<(State, StdRng)>,
}

impl Guard {
    pub(crate) fn new(design: Design, start: Instant, seed: u64) -> Self {
        let state = match design {
            Design::Sre => State::Ratio { window: Window::new(Duration::from_secs(120), 120) },
            Design::Envoy => State::Ratio { window: Window::new(Duration::from_secs(30), 30) },
            Design::GoZero => State::Ratio { window: Window::new(Duration::from_secs(10), 40) },
            Design::Aws => State::Aws(Box::new(Cubic::new())),
            Design::Polly => State::Polly {
                window: Window::new(Duration::from_secs(30), 10),
                breaker: Breaker::Closed,
            },
        };
        Self { design, start, state: Mutex::new((state, StdRng::seed_from_u64(seed))) }
    }

    /// Whether an attempt goes now, or after a wait (AWS queues it).
    fn admit(&self) -> Result<Duration, Refused> {
        let since = self.start.elapsed();
        let mut guard = self.state.lock().expect("no panics in a model");
        let (state, rng) = &mut *guard;
        let draw: f64 = rng.random();
        match (self.design, state) {
            (Design::Sre, State::Ratio { window }) => {
                let (requests, accepts) = window.sums(since);
                let p = ((requests - 2.0 * accepts) / (requests + 1.0)).max(0.0);
                if draw < p {
                    // A refused request still counts as a request.
                    window.add(since, false);
                    return Err(Refused);
                }
            }
            (Design::Envoy, State::Ratio { window }) => {
                let (total, success) = window.sums(since);
                let p = ((total - success / 0.95) / (total + 1.0)).clamp(0.0, 0.8);
                if draw < p {
                    return Err(Refused);
                }
            }
            (Design::GoZero, State::Ratio { window }) => {
                let (total, accepts) = window.sums(since);
                let p = ((total - 5.0 - 1.5 * accepts) / (total + 1.0)).max(0.0);
                if draw < p {
                    window.add(since, false);
                    return Err(Refused);
                }
            }
            (Design::Aws, State::Aws(cubic)) => {
                return Ok(Duration::from_secs_f64(cubic.acquire(since.as_secs_f64())));
            }
            (Design::Polly, State::Polly { breaker, .. }) => match *breaker {
                Breaker::Closed => {}
                Breaker::Open { until } if since < until => return Err(Refused),
                Breaker::Open { .. } => *breaker = Breaker::HalfOpen { trial: true },
                Breaker::HalfOpen { trial: false } => *breaker = Breaker::HalfOpen { trial: true },
                Breaker::HalfOpen { trial: true } => return Err(Refused),
            },
            _ => unreachable!("each design has its state"),
        }
        Ok(Duration::ZERO)
    }

    fn answer(&self, success: bool) {
        let since = self.start.elapsed();
        let mut guard = self.state.lock().expect("no panics in a model");
        match &mut guard.0 {
            State::Ratio { window } => window.add(since, success),
            State::Aws(cubic) => cubic.answer(since.as_secs_f64(), !success),
            State::Polly { window, breaker } => {
                let open = Breaker::Open { until: since + Duration::from_secs(5) };
                if let Breaker::HalfOpen { .. } = breaker {
                    *breaker = if success { Breaker::Closed } else { open };
                    window.clear();
                    return;
                }
                window.add(since, success);
                let (total, successes) = window.sums(since);
                if total >= 100.0 && (total - successes) / total >= 0.1 {
                    *breaker = open;
                    window.clear();
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Middleware for Guard {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let wait = self.admit().map_err(reqwest_middleware::Error::middleware)?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let outcome = next.run(request, extensions).await;
        let success = matches!(&outcome, Ok(response) if response.status().is_success());
        self.answer(success);
        outcome
    }
}
