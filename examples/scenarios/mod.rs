//! The scenario tables behind `cargo run --example demo`, shared with the
//! integration tests so that what the demo prints is what the tests assert.

#![allow(dead_code, unreachable_pub)]

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::Method;
use reqwest_safe_retry::{
    FixedJitter, Jitter, ManualClock, Redirects, ReportSlot, RetryConfig, RetryMiddleware,
    StopReason,
};
use wiremock::matchers::any;
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

/// The first table: equal jitter pinned at the top, so waits are the ceilings
/// 100 ms, 200 ms, 400 ms; `Retry-After: 2` on every 429.
///
/// Both tables come from designs whose retry layer sees every hop (a Go
/// round-tripper sits below the client's redirects), so they run on a
/// client that does not follow redirects, and the middleware is told so.
/// Those designs have no retry budget and wait exactly what `Retry-After`
/// says, so the tables turn the budget and the spread off.
pub fn roundtripper_table() -> (RetryConfig, Vec<Scenario>) {
    let config = RetryConfig::builder()
        .with_redirects(Redirects::NotFollowed)
        .without_budget()
        .with_retry_after_spread(false)
        .with_initial_backoff(Duration::from_millis(100))
        .with_max_backoff(Duration::from_secs(5))
        .with_jitter(Jitter::Equal)
        .build()
        .expect("valid configuration");
    let scenarios = vec![
        Scenario::get("GET, two 503s then success", &[503, 503, 200]),
        Scenario::get("GET, 429 with Retry-After: 2", &[429, 200]),
        Scenario::post("POST without a key", &[503, 200], None),
        Scenario::post("POST with Idempotency-Key", &[503, 200], Some("k-1")),
        Scenario::get("GET a missing page", &[404]),
        Scenario::get("GET, server stays down", &[503]),
        Scenario { cancelled: true, ..Scenario::get("GET, cancelled during the wait", &[503]) },
        Scenario { statuses: None, ..Scenario::get("GET, connection refused", &[]) },
        Scenario { statuses: None, ..Scenario::post("POST, connection refused", &[], None) },
    ];
    (config, scenarios)
}

/// The second table: full jitter pinned at half the ceiling with a 200 ms
/// initial backoff, so waits are 100 ms, 200 ms, 400 ms.
pub fn api_client_table() -> (RetryConfig, Vec<Scenario>) {
    let config = RetryConfig::builder()
        .with_redirects(Redirects::NotFollowed)
        .without_budget()
        .with_retry_after_spread(false)
        .with_initial_backoff(Duration::from_millis(200))
        .with_max_backoff(Duration::from_secs(5))
        .with_jitter(Jitter::Full)
        .build()
        .expect("valid configuration");
    let scenarios = vec![
        Scenario::get("GET, 503 twice then success", &[503, 503, 200]),
        Scenario::get("GET, 429 with Retry-After: 2", &[429, 200]),
        Scenario::get("GET, 404 is final", &[404]),
        Scenario::get("GET, always 503 (gives up)", &[503]),
        Scenario::post("POST without a key, 503", &[503, 200], None),
        Scenario::post("POST with a key, 503 then success", &[503, 200], Some("key-123")),
        Scenario::post("POST, 429 is safe to retry", &[429, 201], None),
    ];
    (config, scenarios)
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

/// Runs one scenario on a fresh server with a manual clock and `jitter`.
pub async fn run(config: &RetryConfig, jitter: FixedJitter, scenario: &Scenario) -> Row {
    let server = MockServer::start().await;
    let url = match scenario.statuses {
        Some(statuses) => {
            let responder = Scripted { statuses, served: AtomicUsize::new(0) };
            Mock::given(any()).respond_with(responder).mount(&server).await;
            format!("{}/orders", server.uri())
        }
        None => refused_address().await,
    };
    let clock = ManualClock::new();
    let gate = WaitGate::new(clock.clone());
    let middleware = RetryMiddleware::new(config.clone()).with_jitter_source(jitter);
    let middleware = if scenario.cancelled {
        middleware.with_clock(gate.clone())
    } else {
        middleware.with_clock(clock.clone())
    };
    let inner = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client without redirects");
    let client = reqwest_middleware::ClientBuilder::new(inner).with(middleware).build();
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
        let call = tokio::spawn(request.send());
        let waiting = tokio::time::timeout(Duration::from_secs(10), gate.started());
        waiting.await.expect("the middleware starts a wait");
        call.abort();
        let ended = tokio::time::timeout(Duration::from_secs(10), call).await;
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
    let received = server.received_requests().await.unwrap_or_default();
    Row {
        label: scenario.label,
        result,
        // A cancelled call leaves no report: it never finished.
        attempts: slot.get().map_or(received_len(&server).await, |report| report.attempts),
        reached: received.len(),
        waits: clock.sleeps(),
        stop: slot.get().map(|report| report.stop),
        last_body: received.last().map(|r| String::from_utf8_lossy(&r.body).into_owned()),
        request_id,
    }
}

/// Runs every scenario of a table.
pub async fn run_table(table: (RetryConfig, Vec<Scenario>), jitter: FixedJitter) -> Vec<Row> {
    let (config, scenarios) = table;
    let mut rows = Vec::with_capacity(scenarios.len());
    for scenario in &scenarios {
        rows.push(run(&config, jitter, scenario).await);
    }
    rows
}

async fn refused_address() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    drop(listener);
    format!("http://{addr}/orders")
}

/// The requests `server` has received.
async fn received_len(server: &MockServer) -> u32 {
    server.received_requests().await.map_or(0, |r| r.len() as u32)
}

/// A clock whose waits never end by themselves, recorded on a manual clock,
/// and which says when the first one starts: a call can be cancelled in the
/// middle of a wait.
#[derive(Debug, Clone)]
struct WaitGate {
    clock: ManualClock,
    started: std::sync::Arc<tokio::sync::Notify>,
}

impl WaitGate {
    fn new(clock: ManualClock) -> Self {
        Self { clock, started: Default::default() }
    }

    async fn started(&self) {
        self.started.notified().await;
    }
}

impl reqwest_safe_retry::Clock for WaitGate {
    fn now(&self) -> std::time::Instant {
        self.clock.now()
    }

    fn wall_time(&self) -> std::time::SystemTime {
        self.clock.wall_time()
    }

    fn sleep(&self, duration: Duration) -> reqwest_safe_retry::Sleep {
        drop(self.clock.sleep(duration));
        self.started.notify_one();
        Box::pin(std::future::pending())
    }
}
