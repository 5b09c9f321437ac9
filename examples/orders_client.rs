//! A small typed API client built on the middleware: options, one method per
//! operation, a typed error, bounded reads and pagination as a `Stream`.
//!
//! Run with `cargo run --example orders_client`; it starts its own orders API
//! on loopback and prints what each call did.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use reqwest::{Method, StatusCode, Url};
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::{ReportSlot, RetryConfig, RetryMiddleware};
use serde::Deserialize;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An order as the API returns it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
struct Order {
    id: String,
    status: String,
}

/// A non-2xx answer: enough to branch on and enough to report.
#[derive(Debug, Clone, thiserror::Error)]
#[error("api error {status}: {code}: {message} (request {request_id})")]
struct ApiError {
    status: StatusCode,
    code: String,
    message: String,
    request_id: String,
}

/// Everything a call can fail with.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("transport: {0}")]
    Transport(#[from] reqwest_middleware::Error),
    #[error("reading the response: {0}")]
    Body(#[from] reqwest::Error),
    #[error("response larger than {0} bytes")]
    TooLarge(usize),
    #[error("decoding the response: {0}")]
    Decode(#[from] serde_json::Error),
}

impl Error {
    fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Api(e) => Some(e.status),
            _ => None,
        }
    }

    fn is_not_found(&self) -> bool {
        self.status() == Some(StatusCode::NOT_FOUND)
    }

    fn is_rate_limited(&self) -> bool {
        self.status() == Some(StatusCode::TOO_MANY_REQUESTS)
    }

    /// Worth trying again later, above the client's own retries.
    fn is_retryable(&self) -> bool {
        match self {
            Error::Api(e) => {
                e.status == StatusCode::TOO_MANY_REQUESTS || e.status.is_server_error()
            }
            Error::Transport(e) => e.is_timeout() || e.is_connect(),
            _ => false,
        }
    }
}

/// How the client behaves; the defaults are safe.
#[derive(Debug, Clone)]
struct Options {
    retry: RetryConfig,
    timeout: Duration,
    max_body: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self { retry: RetryConfig::default(), timeout: Duration::from_secs(10), max_body: 1 << 20 }
    }
}

struct OrdersClient {
    base: Url,
    http: ClientWithMiddleware,
    max_body: usize,
}

#[derive(Deserialize)]
struct Page {
    data: Vec<Order>,
    next: Option<String>,
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

impl OrdersClient {
    fn new(base: &str, options: Options) -> Result<Self, Box<dyn std::error::Error>> {
        let inner = reqwest::Client::builder()
            .timeout(options.timeout)
            .user_agent(concat!("orders-rs/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let http = reqwest_middleware::ClientBuilder::new(inner)
            .with(RetryMiddleware::new(options.retry))
            .build();
        Ok(Self { base: Url::parse(base)?, http, max_body: options.max_body })
    }

    async fn get_order(&self, id: &str) -> Result<Order, Error> {
        self.call(Method::GET, &format!("orders/{id}"), None, None).await
    }

    /// The key is required: whether a create may be repeated is the caller's
    /// decision. The same key tells the server a repeat is the same order.
    async fn create_order(&self, item: &str, idempotency_key: &str) -> Result<Order, Error> {
        let body = serde_json::json!({ "item": item }).to_string();
        self.call(Method::POST, "orders", Some(body), Some(idempotency_key)).await
    }

    /// Every order, page by page, following the cursor.
    fn orders(&self) -> impl Stream<Item = Result<Order, Error>> + '_ {
        struct State {
            cursor: Option<String>,
            buffered: VecDeque<Order>,
            done: bool,
        }
        let start = State { cursor: None, buffered: VecDeque::new(), done: false };
        futures_util::stream::unfold(start, move |mut state| async move {
            loop {
                if let Some(order) = state.buffered.pop_front() {
                    return Some((Ok(order), state));
                }
                if state.done {
                    return None;
                }
                let path = match &state.cursor {
                    Some(cursor) => format!("orders?cursor={cursor}"),
                    None => "orders".to_owned(),
                };
                match self.call::<Page>(Method::GET, &path, None, None).await {
                    Ok(page) => {
                        state.buffered.extend(page.data);
                        state.done = page.next.is_none();
                        state.cursor = page.next;
                    }
                    Err(error) => {
                        state.done = true;
                        return Some((Err(error), state));
                    }
                }
            }
        })
    }

    async fn call<T: for<'de> Deserialize<'de>>(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
        idempotency_key: Option<&str>,
    ) -> Result<T, Error> {
        let url = self.base.join(path).expect("paths are relative");
        let slot = ReportSlot::new();
        let mut request = self
            .http
            .request(method, url)
            .header("Accept", "application/json")
            .with_extension(slot.clone());
        if let Some(body) = body {
            request = request.header("Content-Type", "application/json").body(body);
        }
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        let result = request.send().await;
        if let Some(report) = slot.get() {
            println!(
                "    ({} attempt(s), {:?} waiting, {})",
                report.attempts, report.total_wait, report.stop
            );
        }
        let mut response = result?;
        let status = response.status();
        let request_id = response
            .headers()
            .get("X-Request-Id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if bytes.len() + chunk.len() > self.max_body {
                return Err(Error::TooLarge(self.max_body));
            }
            bytes.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok(serde_json::from_slice(&bytes)?);
        }
        let parsed: ErrorBody = serde_json::from_slice(&bytes).unwrap_or_default();
        Err(ApiError { status, code: parsed.code, message: parsed.message, request_id }.into())
    }
}

/// The orders API, on loopback.
async fn orders_api() -> MockServer {
    let server = MockServer::start().await;
    let json = |status: u16, body: &str, id: &str| {
        ResponseTemplate::new(status)
            .insert_header("X-Request-Id", id)
            .set_body_raw(body.to_owned(), "application/json")
    };
    Mock::given(method("GET"))
        .and(path("/orders/ord_1"))
        .respond_with(json(200, r#"{"id":"ord_1","status":"paid"}"#, "req-1"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/orders/ord_404"))
        .respond_with(json(404, r#"{"code":"not_found","message":"no such order"}"#, "req-2"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/orders/busy"))
        .respond_with(
            json(429, r#"{"code":"rate_limited","message":"slow down"}"#, "req-3")
                .insert_header("Retry-After", "120"),
        )
        .mount(&server)
        .await;
    // The create fails once with 503, then succeeds.
    Mock::given(method("POST"))
        .and(path("/orders"))
        .respond_with(json(503, r#"{"code":"upstream","message":"try later"}"#, "req-4"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/orders"))
        .respond_with(json(201, r#"{"id":"ord_2","status":"new"}"#, "req-5"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/orders"))
        .and(query_param("cursor", "p2"))
        .respond_with(json(200, r#"{"data":[{"id":"c","status":"shipped"}],"next":null}"#, "req-7"))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/orders"))
        .respond_with(json(
            200,
            r#"{"data":[{"id":"a","status":"paid"},{"id":"b","status":"paid"}],"next":"p2"}"#,
            "req-6",
        ))
        .mount(&server)
        .await;
    server
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = orders_api().await;
    // Short waits, so the example finishes at once.
    let retry = RetryConfig::builder().with_initial_backoff(Duration::from_millis(20)).build()?;
    let client =
        OrdersClient::new(&format!("{}/", server.uri()), Options { retry, ..Options::default() })?;

    println!("get_order(ord_1):");
    println!("  -> {:?}", client.get_order("ord_1").await?);

    println!("get_order(ord_404):");
    let error = client.get_order("ord_404").await.unwrap_err();
    println!(
        "  -> {error}; not found: {}, retryable: {}",
        error.is_not_found(),
        error.is_retryable()
    );

    println!("get_order(busy), server asks for 120 s:");
    let error = client.get_order("busy").await.unwrap_err();
    println!(
        "  -> {error}; rate limited: {}, retryable: {}",
        error.is_rate_limited(),
        error.is_retryable()
    );

    println!("create_order(book, key ord-key-1), first answer 503:");
    println!("  -> {:?}", client.create_order("book", "ord-key-1").await?);

    println!("orders():");
    let orders: Vec<Order> = client.orders().map(|o| o.expect("listing works")).collect().await;
    let ids: Vec<&str> = orders.iter().map(|o| o.id.as_str()).collect();
    println!("  -> {ids:?}");
    Ok(())
}
