//! The traffic: [`IN_FLIGHT`] workers send calls, one at a time each, until
//! the time is up, through six client stacks that share nothing but the
//! servers. Each call is a GET, a PUT, a POST with or without an
//! `Idempotency-Key`, or a PUT or POST whose body is a stream
//! (`reqwest::Body::wrap_stream`), to a first hop that plays one of the
//! faults (see `faults.rs`), or to a port where nothing listens. The mix is
//! drawn from a generator seeded per worker; what the servers then do
//! depends on timing too.
//!
//! Every stack has a deadline and an attempt timeout, so every call is
//! bounded, in real time (the default `TokioClock`). Each call runs in a
//! task of its own, whose `JoinHandle` says whether it panicked.
//!
//! Longer than most files: six client stacks and every kind of request, with
//! the ledger each call leaves for the checks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use reqwest::Method;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::hedge::HedgeMiddleware;
use reqwest_safe_retry::rate_limit::{HostPaused, Throttled};
use reqwest_safe_retry::{Backoff, BodyBuffering};
use reqwest_safe_retry::{
    DeadlineExceeded, RetryConfig, RetryMiddleware, report::Decision, report::ReportSlot,
};

use crate::checks::Gauge;
use crate::faults;
use crate::servers::Fleet;

/// Calls in flight at once.
pub(crate) const IN_FLIGHT: usize = 128;
/// Each attempt's bound, on every stack.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);
/// Response and stream buffering limits, where they are on.
const BUFFERING: usize = 64 * 1024;
/// Of the calls, the share sent to a port where nothing listens.
const REFUSED_SHARE: f64 = 0.06;

/// Labelled counts.
#[derive(Debug, Default)]
pub(crate) struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    pub(crate) fn add(&self, label: &str) {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match counts.get_mut(label) {
            Some(count) => *count += 1,
            None => {
                counts.insert(label.to_owned(), 1);
            }
        }
    }

    pub(crate) fn counts(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What the clients counted.
#[derive(Debug, Default)]
pub(crate) struct ClientStats {
    pub(crate) calls: AtomicU64,
    /// Attempts the middleware made, as its decision hook saw them.
    pub(crate) attempts: AtomicU64,
    pub(crate) retries: Tally,
    pub(crate) stops: Tally,
    pub(crate) outcomes: Tally,
    pub(crate) requests: Tally,
    pub(crate) refused_first_hops: AtomicU64,
    pub(crate) redirects_followed: AtomicU64,
    /// Calls in flight.
    pub(crate) in_flight: Gauge,
    /// The most a call (and the read of its body) outlived its deadline.
    pub(crate) max_overshoot_us: AtomicU64,
    pub(crate) longest_call_us: AtomicU64,
    /// Calls that outlived their deadline by more than the slack.
    pub(crate) late_calls: AtomicU64,
    /// The first [`LATE_KEPT`] of those.
    pub(crate) late: Mutex<Vec<Late>>,
    /// The call that outlived its deadline the most, described.
    pub(crate) worst: Mutex<Option<(Duration, String)>>,
    /// Call tasks (and workers) that panicked, from their `JoinHandle`s.
    pub(crate) panics: AtomicU64,
}

/// Late calls kept for the timer-lag check.
const LATE_KEPT: usize = 200;

/// A call that outlived its deadline by more than the slack.
#[derive(Debug)]
pub(crate) struct Late {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) over: Duration,
    pub(crate) what: String,
}

/// A middleware inside the retry layer that adds a credential to every
/// attempt, as an authentication layer would.
struct Token;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Token {
    async fn handle(
        &self,
        mut request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let token = http::HeaderValue::from_static("session=soak");
        request.headers_mut().insert("cookie", token);
        next.run(request, extensions).await
    }
}

/// One client, as a caller would build it.
#[derive(Debug)]
pub(crate) struct Stack {
    pub(crate) name: &'static str,
    client: ClientWithMiddleware,
    pub(crate) deadline: Duration,
    request_body_buffering: bool,
    pub(crate) calls: AtomicU64,
}

fn config(deadline: Duration, buffering: bool) -> RetryConfig {
    let mut builder = RetryConfig::builder()
        .with_backoff(
            Backoff::default()
                .with_initial(Duration::from_millis(20))
                .with_max(Duration::from_millis(200)),
        )
        .with_deadline(deadline)
        .with_attempt_timeout(ATTEMPT_TIMEOUT);
    if buffering {
        builder = builder.with_body_buffering(
            BodyBuffering::default().with_response(BUFFERING).with_request(BUFFERING),
        );
    }
    builder.build().expect("a valid configuration")
}

/// The six stacks: the quick start's client (built by the middleware,
/// which records its redirects), with and without a `HedgeMiddleware` inside and response
/// (and stream) buffering; and a plain client (reqwest's default redirect
/// policy), which follows redirects below the middleware, with and without
/// hedging.
pub(crate) fn stacks(stats: &Arc<ClientStats>) -> Vec<Stack> {
    let short = Duration::from_millis(1000);
    let long = Duration::from_millis(1500);
    let plans = [
        ("quick start", long, false, false, true),
        ("quick start + hedge", short, false, true, true),
        ("quick start + buffering", long, true, false, true),
        ("quick start + hedge + buffering", short, true, true, true),
        ("plain client", long, false, false, false),
        ("plain client + hedge", short, false, true, false),
    ];
    plans
        .into_iter()
        .map(|(name, deadline, buffering, hedge, quick_start)| {
            let hook = stats.clone();
            let retry =
                RetryMiddleware::new(config(deadline, buffering)).on_decision(move |event| {
                    if event.attempt > 0 {
                        hook.attempts.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Decision::Retry { reason, .. } = event.decision {
                        hook.retries.add(reason.as_str());
                    }
                });
            // Idle connections are dropped after 500 ms rather than
            // reqwest's 90 s: with a new host every millisecond or so, the
            // pool would otherwise hold a closed connection's channel
            // (9 KiB) per host for 90 s, and its idle connections would
            // swing the heap by tens of MiB each time it is swept. That is
            // hyper-util's business, not the middleware's, and would drown
            // the crate's own growth. The plain client is put under the
            // middleware by hand, so the middleware knows nothing of its
            // redirects, as with `reqwest::Client::new()`.
            // Credentials in two more places than the request: the
            // client's default headers, and a middleware inside the retry
            // layer; the servers count any that reaches another origin.
            let mut credentials = http::HeaderMap::new();
            credentials.insert("authorization", http::HeaderValue::from_static("Bearer soak"));
            let inner = reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_millis(500))
                .default_headers(credentials);
            let builder = match quick_start {
                true => retry.client(inner).expect("a client"),
                false => reqwest_middleware::ClientBuilder::new(inner.build().expect("a client"))
                    .with(retry),
            };
            let mut builder = builder.with(Token);
            if hedge {
                builder = builder.with(HedgeMiddleware::default());
            }
            Stack {
                name,
                client: builder.build(),
                deadline,
                request_body_buffering: buffering,
                calls: AtomicU64::new(0),
            }
        })
        .collect()
}

/// What a call sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Get,
    Put,
    PostWithKey,
    Post,
    StreamedPut,
    StreamedPost { key: bool },
}

impl Shape {
    fn draw(rng: &mut StdRng) -> Shape {
        match rng.random_range(0..100) {
            0..30 => Shape::Get,
            30..45 => Shape::Put,
            45..60 => Shape::PostWithKey,
            60..80 => Shape::Post,
            80..90 => Shape::StreamedPut,
            _ => Shape::StreamedPost { key: rng.random_bool(0.5) },
        }
    }

    fn label(self) -> &'static str {
        match self {
            Shape::Get => "GET",
            Shape::Put => "PUT",
            Shape::PostWithKey => "POST with Idempotency-Key",
            Shape::Post => "POST without a key",
            Shape::StreamedPut => "PUT, streamed body",
            Shape::StreamedPost { key: true } => "POST with key, streamed body",
            Shape::StreamedPost { key: false } => "POST without key, streamed body",
        }
    }

    fn method(self) -> Method {
        match self {
            Shape::Get => Method::GET,
            Shape::Put | Shape::StreamedPut => Method::PUT,
            _ => Method::POST,
        }
    }

    /// Whether the middleware may not repeat it once a server may have
    /// acted on it: a POST without a key, or a streamed body it cannot
    /// copy (stream buffering off).
    fn not_safe(self, request_body_buffering: bool) -> bool {
        match self {
            Shape::Post | Shape::StreamedPost { key: false } => true,
            Shape::StreamedPut | Shape::StreamedPost { key: true } => !request_body_buffering,
            Shape::Get | Shape::Put | Shape::PostWithKey => false,
        }
    }
}

/// One call, drawn by a worker.
#[derive(Debug)]
struct Plan {
    stack: usize,
    shape: Shape,
    url: String,
    body: usize,
}

fn draw(rng: &mut StdRng, stacks: usize, fleet: &Fleet, stats: &ClientStats) -> Plan {
    let stack = rng.random_range(0..stacks);
    let shape = Shape::draw(rng);
    let url = if rng.random_bool(REFUSED_SHARE) {
        stats.refused_first_hops.fetch_add(1, Ordering::Relaxed);
        format!("http://{}/p/ok", fleet.refused(rng))
    } else {
        let path = faults::plan(rng, ATTEMPT_TIMEOUT.as_millis() as u64);
        format!("http://{}{path}", fleet.pick(rng.random_bool(0.75), rng))
    };
    let body = [16, 700, 4096][rng.random_range(0..3)];
    Plan { stack, shape, url, body }
}

/// Sends calls from [`IN_FLIGHT`] workers until `until`, or `max_calls`.
pub(crate) async fn run(
    stacks: Arc<Vec<Stack>>,
    fleet: Arc<Fleet>,
    stats: Arc<ClientStats>,
    seed: u64,
    until: Instant,
    max_calls: u64,
) {
    let started = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..IN_FLIGHT as u64)
        .map(|worker| {
            let (stacks, fleet, stats, started) =
                (stacks.clone(), fleet.clone(), stats.clone(), started.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003) ^ worker);
                while Instant::now() < until && started.fetch_add(1, Ordering::Relaxed) < max_calls
                {
                    let plan = draw(&mut rng, stacks.len(), &fleet, &stats);
                    let call =
                        tokio::spawn(call(stacks.clone(), plan, fleet.clone(), stats.clone()));
                    if let Err(error) = call.await {
                        if error.is_panic() {
                            stats.panics.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        if let Err(error) = worker.await {
            if error.is_panic() {
                stats.panics.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Unique call ids, for the servers' ledger.
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

async fn call(stacks: Arc<Vec<Stack>>, plan: Plan, fleet: Arc<Fleet>, stats: Arc<ClientStats>) {
    let _in_flight = stats.in_flight.enter();
    let stack = &stacks[plan.stack];
    stack.calls.fetch_add(1, Ordering::Relaxed);
    stats.calls.fetch_add(1, Ordering::Relaxed);
    stats.requests.add(plan.shape.label());
    let id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
    let method = plan.shape.method();
    let mut request = stack
        .client
        .request(method.clone(), &plan.url)
        .header("x-call-id", id.to_string())
        .header("x-method", method.as_str());
    if plan.shape.not_safe(stack.request_body_buffering) {
        request = request.header("x-not-safe", "1");
    }
    if plan.shape != Shape::Get {
        request = request.header("x-body-length", plan.body.to_string());
    }
    if matches!(plan.shape, Shape::StreamedPut | Shape::StreamedPost { .. }) {
        request = request.header("x-streamed", "1");
    }
    if matches!(plan.shape, Shape::PostWithKey | Shape::StreamedPost { key: true }) {
        request = request.header("Idempotency-Key", format!("order-{id}"));
    }
    let body = Bytes::from(vec![b'b'; plan.body]);
    request = match plan.shape {
        Shape::Get => request,
        Shape::Put | Shape::PostWithKey | Shape::Post => request.body(body),
        Shape::StreamedPut | Shape::StreamedPost { .. } => {
            let chunks: Vec<Result<Bytes, std::io::Error>> =
                body.chunks(512).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            request.body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
        }
    };
    let slot = ReportSlot::new();
    fleet.ledger.open(id);
    let start = Instant::now();
    let mut sent = None;
    let outcome = match request.with_extension(slot.clone()).send().await {
        Ok(response) => {
            sent = Some(start.elapsed());
            let status = response.status();
            match response.bytes().await {
                Ok(_) => status_label(status.as_u16()),
                Err(error) if error.is_timeout() => "body: timed out",
                Err(_) => "body: broken",
            }
        }
        Err(error) => error_label(&error),
    };
    let took = start.elapsed();
    fleet.ledger.close(id);
    stats.outcomes.add(outcome);
    let report = slot.get();
    if let Some(report) = report {
        stats.stops.add(report.stop.as_str());
        stats.redirects_followed.fetch_add(u64::from(report.redirects), Ordering::Relaxed);
    }
    let over = took.saturating_sub(stack.deadline);
    stats.max_overshoot_us.fetch_max(over.as_micros() as u64, Ordering::Relaxed);
    stats.longest_call_us.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
    let late = over > crate::SLACK;
    if late {
        stats.late_calls.fetch_add(1, Ordering::Relaxed);
    }
    let mut worst = stats.worst.lock().unwrap_or_else(|p| p.into_inner());
    if late || worst.as_ref().is_none_or(|(most, _)| over > *most) {
        let report = report.map_or("no report".to_owned(), |r| {
            format!(
                "{} attempts, {} redirects, {:?} waiting, stop: {}",
                r.attempts, r.redirects, r.total_wait, r.stop
            )
        });
        let sent = sent.map_or("no response".to_owned(), |t| format!("response after {t:?}"));
        let text = format!(
            "call {id} on {} ({} ms deadline): {} {}; {outcome} after {took:?}, {sent}; {report}",
            stack.name,
            stack.deadline.as_millis(),
            plan.shape.label(),
            plan.url
        );
        if late {
            let mut kept = stats.late.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() < LATE_KEPT {
                let end = start + took;
                kept.push(Late { start, end, over, what: text.clone() });
            }
        }
        if worst.as_ref().is_none_or(|(most, _)| over > *most) {
            *worst = Some((over, text));
        }
    }
}

fn status_label(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        300..=399 => "3xx (a redirect handed back)",
        429 => "429",
        400..=499 => "4xx",
        503 => "503",
        _ => "other 5xx",
    }
}

fn error_label(error: &reqwest_middleware::Error) -> &'static str {
    match error {
        reqwest_middleware::Error::Reqwest(error) if error.is_timeout() => "error: timeout",
        reqwest_middleware::Error::Reqwest(error) if error.is_connect() => "error: connect",
        reqwest_middleware::Error::Reqwest(error) if error.is_redirect() => {
            "error: too many redirects"
        }
        reqwest_middleware::Error::Reqwest(error) if error.is_body() || error.is_decode() => {
            "error: body"
        }
        reqwest_middleware::Error::Reqwest(_) => "error: connection reset or closed",
        reqwest_middleware::Error::Middleware(error) => {
            if error.downcast_ref::<DeadlineExceeded>().is_some() {
                "error: deadline exceeded"
            } else if error.is::<Throttled>() {
                "throttled: not sent"
            } else if error.is::<HostPaused>() {
                "host paused: not sent"
            } else {
                "error: other"
            }
        }
    }
}
