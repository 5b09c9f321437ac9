//! The orders client's scenario table: what `cargo run --example
//! orders_client` prints and `tests/all/interop/orders.rs` asserts, row by row.
//!
//! Each scenario starts a scripted server on loopback, builds the client on
//! a `reqwest::Client` that does not follow redirects, with a `ManualClock`
//! that records each wait instead of sleeping and the jitter pinned at half
//! the ceiling, makes one call and records the outcome, the attempts, the
//! waits and every request the server received.
//!
//! The first rows are the design notes' table. The rows after them show the
//! rest of the client: a 500, a `Retry-After` over the cap, `cancel_order`,
//! `create_order_once`, a code taken from the body, and a refused
//! connection.

// Shared with `tests/all/interop/orders.rs`.
#![allow(dead_code)]

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest_safe_retry::{clock::ManualClock, jitter::FixedJitter, report::ReportSlot};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::client::{Error, ErrorCode, IDEMPOTENCY_KEY, Order, OrdersClient, REQUEST_ID};

/// Which operation a scenario calls.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    /// `get_order("ord_1")`.
    Get,
    /// `create_order("book", key)`.
    Create(Option<&'static str>),
    /// `create_order_once("book")`; the scenarios' keys are `once-1`, ...
    CreateOnce,
    /// `cancel_order("ord_1")`.
    Cancel,
}

/// One call against a scripted server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scenario {
    pub(crate) label: &'static str,
    pub(crate) call: Call,
    /// Statuses answered in turn, the last repeating. Empty: nothing
    /// listens, so the connection is refused.
    pub(crate) statuses: &'static [u16],
    /// The `Retry-After` sent with every 429.
    pub(crate) retry_after: &'static str,
    /// The machine code in error bodies; `upstream_<status>` when `None`.
    pub(crate) body_code: Option<&'static str>,
    /// A row of the design notes' table.
    pub(crate) from_notes: bool,
}

impl Scenario {
    const fn new(label: &'static str, call: Call, statuses: &'static [u16]) -> Self {
        Self { label, call, statuses, retry_after: "2", body_code: None, from_notes: false }
    }

    const fn notes(self) -> Self {
        Self { from_notes: true, ..self }
    }
}

/// Every scenario, the design notes' rows first.
pub(crate) fn table() -> Vec<Scenario> {
    use Call::{Cancel, Create, CreateOnce, Get};
    vec![
        Scenario::new("GET, 503 twice then success", Get, &[503, 503, 200]).notes(),
        Scenario::new("GET, 429 with Retry-After: 2", Get, &[429, 200]).notes(),
        Scenario::new("GET, 404 is final", Get, &[404]).notes(),
        Scenario::new("GET, always 503 (gives up)", Get, &[503]).notes(),
        Scenario::new("POST without a key, 503", Create(None), &[503, 200]).notes(),
        Scenario::new("POST with a key, 503 then success", Create(Some("key-123")), &[503, 200])
            .notes(),
        Scenario::new("POST, 429 is safe to retry", Create(None), &[429, 201]).notes(),
        Scenario::new("GET, 500 then success", Get, &[500, 200]),
        Scenario::new("POST without a key, 500", Create(None), &[500, 200]),
        Scenario {
            retry_after: "120",
            ..Scenario::new("GET, 429 asks for 120 s", Get, &[429, 200])
        },
        Scenario::new("cancel (DELETE), 503 then success", Cancel, &[503, 200]),
        Scenario::new("cancel (DELETE), 409 is final", Cancel, &[409]),
        Scenario::new("create once, 503 then success", CreateOnce, &[503, 201]),
        Scenario {
            body_code: Some("insufficient_funds"),
            ..Scenario::new(
                "POST with a key, 422 insufficient_funds",
                Create(Some("key-456")),
                &[422],
            )
        },
        // The notes' client makes one attempt here: it retries a connection
        // failure only when the request is safe to repeat. The middleware
        // knows a refused connection never reached the server, and this
        // client does not follow redirects, so it repeats even this POST.
        Scenario::new("POST without a key, connection refused", Create(None), &[]),
    ]
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Order(Order),
    /// An error answer: status, the code to match on, the server's own code,
    /// the request id.
    Api {
        status: u16,
        code: ErrorCode,
        server_code: String,
        request_id: Option<String>,
    },
    /// No answer; `connect` when the connection was never made.
    Transport(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Order(order) => write!(f, "order id={} status={}", order.id, order.status),
            Outcome::Api { status, code, server_code, request_id } => write!(
                f,
                "ApiError status={status} code={code:?} server_code={server_code} request={}",
                request_id.as_deref().unwrap_or("-")
            ),
            Outcome::Transport(kind) => write!(f, "transport error: {kind}"),
        }
    }
}

/// One request as the server received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) body: String,
}

impl Received {
    pub(crate) fn new(method: &str, path: &str, key: Option<&str>, body: &str) -> Self {
        Self {
            method: method.to_owned(),
            path: path.to_owned(),
            idempotency_key: key.map(str::to_owned),
            body: body.to_owned(),
        }
    }
}

impl fmt::Display for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)?;
        if let Some(key) = &self.idempotency_key {
            write!(f, " key={key}")?;
        }
        if !self.body.is_empty() {
            write!(f, " {}", self.body)?;
        }
        Ok(())
    }
}

/// What one scenario did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) label: &'static str,
    pub(crate) outcome: Outcome,
    /// Attempts the client made, from the retry report.
    pub(crate) attempts: u32,
    /// The waits, as the manual clock recorded them.
    pub(crate) waits: Vec<Duration>,
    /// Every request the server received, in order.
    pub(crate) received: Vec<Received>,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let waits = format!("{:?}", self.waits);
        writeln!(
            f,
            "{:<40} attempts={} waits={waits:<22} -> {}",
            self.label, self.attempts, self.outcome
        )?;
        // Consecutive identical requests as one "n x request".
        let mut groups: Vec<(usize, &Received)> = Vec::new();
        for received in &self.received {
            match groups.last_mut() {
                Some((count, last)) if *last == received => *count += 1,
                _ => groups.push((1, received)),
            }
        }
        let groups: Vec<String> =
            groups.iter().map(|(count, received)| format!("{count} x {received}")).collect();
        let seen = if groups.is_empty() { "nothing".to_owned() } else { groups.join(", ") };
        write!(f, "{:<40} server received {seen}", "")
    }
}

/// The jitter of the table: half the ceiling, so waits are 100 ms, 200 ms,
/// 400 ms.
pub(crate) fn jitter() -> FixedJitter {
    FixedJitter::new(0.5)
}

/// A client for `base` as the table runs it, with the clock and report slot
/// to read afterwards.
pub(crate) fn client(base: &str) -> (OrdersClient, ManualClock, ReportSlot) {
    let clock = ManualClock::new();
    let report = ReportSlot::new();
    let keys = Arc::new(AtomicUsize::new(0));
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10));
    let client = OrdersClient::builder(base)
        .with_http_client(http)
        .with_clock(clock.clone())
        .with_jitter(jitter())
        .with_report_slot(report.clone())
        .with_idempotency_keys(move || format!("once-{}", keys.fetch_add(1, Ordering::SeqCst) + 1))
        .build()
        .expect("a valid client");
    (client, clock, report)
}

/// Answers the scripted statuses in turn, numbering answers `req-1`, ...
struct Scripted {
    scenario: Scenario,
    served: AtomicUsize,
}

impl Respond for Scripted {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let statuses = self.scenario.statuses;
        let n = self.served.fetch_add(1, Ordering::SeqCst);
        let status = statuses[n.min(statuses.len() - 1)];
        let body = match status {
            200 | 201 if request.method == "DELETE" => {
                r#"{"id":"ord_1","status":"cancelled"}"#.into()
            }
            200 | 201 => r#"{"id":"ord_1","status":"paid"}"#.into(),
            _ => {
                let code = self.scenario.body_code.map_or(format!("upstream_{status}"), Into::into);
                format!(r#"{{"code":"{code}","message":"try later"}}"#)
            }
        };
        let template = ResponseTemplate::new(status)
            .insert_header(REQUEST_ID, format!("req-{}", n + 1))
            .set_body_raw(body, "application/json");
        if status == 429 {
            template.insert_header("Retry-After", self.scenario.retry_after)
        } else {
            template
        }
    }
}

/// Runs one scenario on a fresh server.
pub(crate) async fn run(scenario: &Scenario) -> Row {
    let server = if scenario.statuses.is_empty() {
        None
    } else {
        let server = MockServer::start().await;
        let responder = Scripted { scenario: *scenario, served: AtomicUsize::new(0) };
        Mock::given(wiremock::matchers::any()).respond_with(responder).mount(&server).await;
        Some(server)
    };
    let base = match &server {
        Some(server) => server.uri(),
        None => refused_base().await,
    };
    let (client, clock, report) = client(&base);
    let result = match scenario.call {
        Call::Get => client.get_order("ord_1").await,
        Call::Create(key) => client.create_order("book", key).await,
        Call::CreateOnce => client.create_order_once("book").await,
        Call::Cancel => client.cancel_order("ord_1").await,
    };
    let outcome = match result {
        Ok(order) => Outcome::Order(order),
        Err(Error::Api(error)) => Outcome::Api {
            status: error.status.as_u16(),
            code: error.code,
            server_code: error.server_code,
            request_id: error.request_id,
        },
        Err(Error::Transport(error)) if error.is_connect() => Outcome::Transport("connect".into()),
        Err(error) => Outcome::Transport(error.to_string()),
    };
    let received = match &server {
        Some(server) => server.received_requests().await.unwrap_or_default(),
        None => Vec::new(),
    };
    let received = received
        .iter()
        .map(|request| Received {
            method: request.method.to_string(),
            path: request.url.path().to_owned(),
            idempotency_key: request
                .headers
                .get(IDEMPOTENCY_KEY)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            body: String::from_utf8_lossy(&request.body).into_owned(),
        })
        .collect();
    Row {
        label: scenario.label,
        outcome,
        attempts: report.get().map_or(0, |report| report.attempts),
        waits: clock.sleeps(),
        received,
    }
}

/// Runs every scenario of the table.
pub(crate) async fn run_table() -> Vec<(Scenario, Row)> {
    let mut rows = Vec::new();
    for scenario in table() {
        let row = run(&scenario).await;
        rows.push((scenario, row));
    }
    rows
}

/// Lists every order from a two-page API: the ids in order, and how many
/// requests the server received.
pub(crate) async fn list_orders() -> (Vec<String>, usize) {
    let server = MockServer::start().await;
    let page =
        |body: &str| ResponseTemplate::new(200).set_body_raw(body.to_owned(), "application/json");
    Mock::given(method("GET"))
        .and(path("/orders"))
        .and(query_param("cursor", "p2"))
        .respond_with(page(r#"{"data":[{"id":"c","status":"shipped"}],"next":null}"#))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/orders"))
        .respond_with(page(
            r#"{"data":[{"id":"a","status":"paid"},{"id":"b","status":"paid"}],"next":"p2"}"#,
        ))
        .mount(&server)
        .await;
    let (client, _, _) = client(&server.uri());
    let ids: Vec<String> =
        client.orders().map(|order| order.expect("listing works").id).collect().await;
    let requests = server.received_requests().await.unwrap_or_default().len();
    (ids, requests)
}

/// A loopback address where nothing listens.
async fn refused_base() -> String {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.bind(([127, 0, 0, 1], 0).into()).expect("bind loopback");
    let addr = socket.local_addr().expect("bound address");
    // Bound and never listening, for the rest of the process: connections
    // are refused, and no server started meanwhile, in this process or
    // another, can be given the port (a closed listener's port can be).
    std::mem::forget(socket);
    format!("http://{addr}")
}
