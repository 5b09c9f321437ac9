//! The scenario tables behind `cargo run --example demo`, shared with the
//! integration tests so that what the demo prints is what the tests assert.

#![allow(dead_code, unreachable_pub)]

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::Method;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::{
    RetryConfig, RetryMiddleware, clock::Clock, clock::ManualClock, jitter::FixedJitter,
    report::ReportSlot, report::StopReason,
};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// One request against a scripted server.
pub struct Scenario {
    pub label: &'static str,
    pub method: Method,
    /// Statuses the server answers in turn; the last repeats. `None`: nothing
    /// listens, so the connection is refused.
    pub statuses: Option<&'static [u16]>,
    pub idempotency_key: Option<&'static str>,
    /// Cancel the call while it waits before its first retry: drop its
    /// future, as a caller that gave up would.
    pub cancelled: bool,
}

impl Scenario {
    const fn get(label: &'static str, statuses: &'static [u16]) -> Self {
        Self {
            label,
            method: Method::GET,
            statuses: Some(statuses),
            idempotency_key: None,
            cancelled: false,
        }
    }

    const fn post(
        label: &'static str,
        statuses: &'static [u16],
        key: Option<&'static str>,
    ) -> Self {
        Self {
            label,
            method: Method::POST,
            statuses: Some(statuses),
            idempotency_key: key,
            cancelled: false,
        }
    }
}

/// What happened: the final status or error, the attempts made and how many
/// reached the server, the waits the middleware asked for, why it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub label: &'static str,
    pub result: String,
    pub attempts: u32,
    pub reached: usize,
    pub waits: Vec<Duration>,
    pub stop: Option<StopReason>,
    /// The body the server saw on the last attempt, and the request id of the
    /// final response (`X-Request-Id`), where there was one.
    pub last_body: Option<String>,
    pub request_id: Option<String>,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let waits = format!("{:?}", self.waits);
        let mut line = format!(
            "{:<34} {:<15} attempts={} reached={} waits={waits:<22}",
            self.label, self.result, self.attempts, self.reached
        );
        if let Some(stop) = self.stop {
            line += &format!(" stop: {stop}");
        }
        if let Some(id) = &self.request_id {
            line += &format!(" (last response {id})");
        }
        f.write_str(line.trim_end())
    }
}

/// The first table, the round-tripper article's. Jitter pinned at the top
/// of its range, so the waits are the default ceilings: 500 ms, 1 s, 2 s.
pub fn roundtripper_table() -> Vec<Scenario> {
    vec![
        Scenario::get("GET, two 503s then success", &[503, 503, 200]),
        Scenario::get("GET, 429 with Retry-After: 2", &[429, 200]),
        Scenario::post("POST without a key", &[503, 200], None),
        Scenario::post("POST with Idempotency-Key", &[503, 200], Some("k-1")),
        Scenario::get("GET a missing page", &[404]),
        Scenario::get("GET, server stays down", &[503]),
        Scenario { cancelled: true, ..Scenario::get("GET, cancelled during the wait", &[503]) },
        Scenario { statuses: None, ..Scenario::get("GET, connection refused", &[]) },
        Scenario { statuses: None, ..Scenario::post("POST, connection refused", &[], None) },
    ]
}

/// The second table, the API client article's. Jitter pinned at half its
/// range, so the waits are half the default ceilings: 250 ms, 500 ms, 1 s.
pub fn api_client_table() -> Vec<Scenario> {
    vec![
        Scenario::get("GET, 503 twice then success", &[503, 503, 200]),
        Scenario::get("GET, 429 with Retry-After: 2", &[429, 200]),
        Scenario::get("GET, 404 is final", &[404]),
        Scenario::get("GET, always 503 (gives up)", &[503]),
        Scenario::post("POST without a key, 503", &[503, 200], None),
        Scenario::post("POST with a key, 503 then success", &[503, 200], Some("key-123")),
        Scenario::post("POST, 429 is safe to retry", &[429, 201], None),
    ]
}

/// The configuration every row runs: the crate's default, nothing turned
/// off. Only the clock and the jitter source are injected.
pub fn config() -> RetryConfig {
    RetryConfig::default()
}

/// The client of the quick start: the default configuration, the client
/// built by the middleware, and the manual clock (or `clock`) and pinned
/// `jitter` injected.
pub fn client(clock: impl Clock + 'static, jitter: FixedJitter) -> ClientWithMiddleware {
    RetryMiddleware::new(config())
        .with_clock(clock)
        .with_jitter_source(jitter)
        .client(reqwest::Client::builder())
        .expect("the quick start's client builds")
        .build()
}

/// Answers the scripted statuses in turn, numbering responses `req-1`, ...
struct Scripted {
    statuses: &'static [u16],
    served: AtomicUsize,
}

impl Respond for Scripted {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let n = self.served.fetch_add(1, Ordering::SeqCst);
        let status = self.statuses[n.min(self.statuses.len() - 1)];
        let template =
            ResponseTemplate::new(status).insert_header("X-Request-Id", format!("req-{}", n + 1));
        if status == 429 { template.insert_header("Retry-After", "2") } else { template }
    }
}

/// Runs one scenario with a middleware, a server and a manual clock of its
/// own, jitter pinned at `jitter`: a fresh process per row.
pub async fn run(jitter: FixedJitter, scenario: &Scenario) -> Row {
    let server = MockServer::start().await;
    let clock = ManualClock::new();
    let gate = WaitGate::new(clock.clone());
    let client = match scenario.cancelled {
        true => client(gate.clone(), jitter),
        false => client(clock.clone(), jitter),
    };
    let path = mount(&server, scenario, "/orders").await;
    let refused = refused_address().await;
    run_on(&client, &server, &path, &refused, &clock, &gate, scenario).await
}

/// Runs every scenario of a table through one middleware, one client and one
/// server, in order, as one process would: the retry budget earned and spent
/// by the earlier rows is the later rows' budget. Each row has a path of its
/// own on the server; each refused row a port of its own where nothing
/// listens (a host of its own, as far as the per-host budget is concerned).
pub async fn run_shared(jitter: FixedJitter, scenarios: &[Scenario]) -> Vec<Row> {
    let server = MockServer::start().await;
    let clock = ManualClock::new();
    let gate = WaitGate::new(clock.clone());
    // The gate's waits end at once until a row asks for one that never does.
    let client = client(gate.clone(), jitter);
    let mut rows = Vec::with_capacity(scenarios.len());
    for (n, scenario) in scenarios.iter().enumerate() {
        let path = mount(&server, scenario, &format!("/orders/{n}")).await;
        let refused = refused_address().await;
        rows.push(run_on(&client, &server, &path, &refused, &clock, &gate, scenario).await);
    }
    rows
}

/// Scripts `scenario`'s answers at `path` on `server`, if it has any.
async fn mount(server: &MockServer, scenario: &Scenario, path: &str) -> String {
    if let Some(statuses) = scenario.statuses {
        let responder = Scripted { statuses, served: AtomicUsize::new(0) };
        Mock::given(wiremock::matchers::path(path)).respond_with(responder).mount(server).await;
    }
    path.to_owned()
}

async fn run_on(
    client: &ClientWithMiddleware,
    server: &MockServer,
    path: &str,
    refused: &str,
    clock: &ManualClock,
    gate: &WaitGate,
    scenario: &Scenario,
) -> Row {
    let url = match scenario.statuses {
        Some(_) => format!("{}{path}", server.uri()),
        None => format!("{refused}{path}"),
    };
    let before = clock.sleeps().len();
    let seen_before = received(server, path).await.len();
    let slot = ReportSlot::new();
    let mut request = client.request(scenario.method.clone(), url).with_extension(slot.clone());
    if scenario.method == Method::POST {
        request = request.body("order=1");
    }
    if let Some(key) = scenario.idempotency_key {
        request = request.header("Idempotency-Key", key);
    }
    let (result, request_id) = if scenario.cancelled {
        // The call runs until the middleware starts its first wait, a wait
        // that would not end by itself; then the caller gives up.
        gate.close();
        let call = tokio::spawn(request.send());
        let waiting = tokio::time::timeout(Duration::from_secs(10), gate.started());
        waiting.await.expect("the middleware starts a wait");
        call.abort();
        let ended = tokio::time::timeout(Duration::from_secs(10), call).await;
        gate.open();
        let cancelled = ended.expect("cancelling returns at once").is_err_and(|e| e.is_cancelled());
        (if cancelled { "cancelled" } else { "not cancelled" }.to_owned(), None)
    } else {
        match request.send().await {
            Ok(response) => {
                let id = response
                    .headers()
                    .get("X-Request-Id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                (format!("status={}", response.status().as_u16()), id)
            }
            Err(error) if error.is_connect() => ("error: connect".to_owned(), None),
            Err(error) => (format!("error: {error}"), None),
        }
    };
    let received = received(server, path).await.split_off(seen_before);
    Row {
        label: scenario.label,
        result,
        // A cancelled call leaves no report: it never finished.
        attempts: slot.get().map_or(received.len() as u32, |report| report.attempts),
        reached: received.len(),
        waits: clock.sleeps().split_off(before),
        stop: slot.get().map(|report| report.stop),
        last_body: received.last().map(|r| String::from_utf8_lossy(&r.body).into_owned()),
        request_id,
    }
}

/// Runs every scenario of a table, each as a fresh process.
pub async fn run_table(jitter: FixedJitter, scenarios: &[Scenario]) -> Vec<Row> {
    let mut rows = Vec::with_capacity(scenarios.len());
    for scenario in scenarios {
        rows.push(run(jitter, scenario).await);
    }
    rows
}

async fn refused_address() -> String {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.bind(([127, 0, 0, 1], 0).into()).expect("bind loopback");
    let addr = socket.local_addr().expect("bound address");
    // Bound and never listening, for the rest of the process: connections
    // are refused, and no server started meanwhile, in this process or
    // another, can be given the port (a closed listener's port can be).
    std::mem::forget(socket);
    format!("http://{addr}")
}

/// The requests `server` has received at `path`.
async fn received(server: &MockServer, path: &str) -> Vec<wiremock::Request> {
    let all = server.received_requests().await.unwrap_or_default();
    all.into_iter().filter(|r| r.url.path() == path).collect()
}

/// A clock that records its waits on a manual clock and, while closed,
/// starts waits that never end by themselves and says when the first one
/// starts: a call can be cancelled in the middle of a wait.
#[derive(Debug, Clone)]
struct WaitGate {
    clock: ManualClock,
    started: std::sync::Arc<tokio::sync::Notify>,
    closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl WaitGate {
    fn new(clock: ManualClock) -> Self {
        Self { clock, started: Default::default(), closed: Default::default() }
    }

    async fn started(&self) {
        self.started.notified().await;
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    fn open(&self) {
        self.closed.store(false, Ordering::SeqCst);
    }
}

impl Clock for WaitGate {
    fn now(&self) -> std::time::Instant {
        self.clock.now()
    }

    fn wall_time(&self) -> std::time::SystemTime {
        self.clock.wall_time()
    }

    fn sleep(&self, duration: Duration) -> reqwest_safe_retry::clock::Sleep {
        let mut sleep = self.clock.sleep(duration);
        if !self.closed.load(Ordering::SeqCst) {
            return sleep;
        }
        // The wait is recorded as begun (the manual clock records a sleep
        // when it is first polled), and never ends.
        let _ = sleep.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        self.started.notify_one();
        Box::pin(std::future::pending())
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> reqwest_safe_retry::clock::Sleep {
        self.clock.sleep_until(deadline)
    }
}
