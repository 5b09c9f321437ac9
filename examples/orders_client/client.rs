//! A typed client for a small orders API, with its retries done by the
//! middleware.
//!
//! The shape: a builder of options, one method per operation, an error type
//! with a code to match on and the server's request id, response bodies read
//! up to a limit, and the order list as a `Stream` that follows the cursor.
//!
//! The retry rules are the ones the design notes give their orders client:
//!
//! - a request is *safe to repeat* when its method is idempotent (GET, HEAD,
//!   PUT, DELETE, ...) or when it carries an `Idempotency-Key`;
//! - 429 is retried for any method: the server turned the request away
//!   before doing anything;
//! - 500, 502, 503 and 504, and a timeout or reset after sending, are retried
//!   only when the request is safe to repeat;
//! - a refused connection is retried for any method: the middleware follows
//!   redirects itself (the HTTP client is built with its redirect policy),
//!   so it knows the server never saw the request. (The notes retry every
//!   connection failure only when safe; the middleware tells the failures
//!   apart.)
//! - every other status is final;
//! - waits use full jitter under a ceiling that starts at 200 ms and doubles
//!   up to 5 s; a `Retry-After` replaces the backoff, and one asking for more
//!   than 5 s waits 5 s.
//!
//! Deciding whether to retry and building the error are kept apart: the
//! middleware decides on the status and the transport outcome alone, and the
//! client turns the final answer into an [`ApiError`] afterwards. Mixing the
//! two — classifying the already-built error — is how a client ends up
//! retrying nothing.
//!
//! Longer than most files: a whole typed client (options, operations, errors,
//! pagination), the way users write one.

// Shared with `tests/all/interop/orders.rs`, which uses only part of it.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::Stream;
use rand::RngExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, USER_AGENT};
use reqwest::{Method, StatusCode, Url};
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::{
    Backoff, ConfigError, Jitter, RetryAfter, RetryAfterOverCap, RetryBudget, RetryConfig,
    RetryMiddleware, clock::Clock, clock::Sleep, clock::TokioClock, jitter::JitterSource,
    jitter::ThreadRngJitter, report::ReportSlot,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// Sent on every request, so server logs show which release is calling.
pub(crate) const CLIENT_USER_AGENT: &str = concat!("orders-rs/", env!("CARGO_PKG_VERSION"));
/// The header that makes a create safe to repeat.
pub(crate) const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
/// The header the server puts its request id in.
pub(crate) const REQUEST_ID: &str = "X-Request-Id";
/// The largest response body the client reads by default: 1 MiB.
pub(crate) const DEFAULT_MAX_BODY: usize = 1 << 20;
/// Retries after the first attempt, by default.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 3;

/// The orders client's retry policy as a middleware configuration.
///
/// The crate's retry budget stays on (the design notes' client has none): a
/// fresh client still makes every retry of an isolated failure, and in an
/// outage the retries stay near a tenth of the answers instead of
/// quadrupling the load. `budget: None` turns it off; see
/// [`OrdersClientBuilder::without_retry_budget`].
pub(crate) fn retry_config(
    max_retries: u32,
    budget: Option<RetryBudget>,
) -> Result<RetryConfig, ConfigError> {
    let config = RetryConfig::builder()
        .with_max_retries(max_retries)
        .with_backoff(
            Backoff::default()
                .with_initial(Duration::from_millis(200))
                .with_max(Duration::from_secs(5))
                .with_jitter(Jitter::Full),
        )
        // 429 stays retryable for any method (the crate's default); the
        // others only for requests that are safe to repeat.
        .with_retryable_statuses([
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::BAD_GATEWAY,
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::GATEWAY_TIMEOUT,
        ])
        // The server's `Retry-After`, exactly, up to 5 s; asked for longer,
        // wait 5 s and try again rather than hand the 429 back.
        //
        // The notes wait exactly what the server said: the spread is turned
        // off here, and named, since the crate's default spreads the clients
        // it asks.
        .with_retry_after(
            RetryAfter::default()
                .with_cap(Duration::from_secs(5))
                .with_over_cap(RetryAfterOverCap::WaitTheCap)
                .with_spread(false),
        );
    config.with_budget(budget).build()
}

/// An order, as the client hands it out.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub(crate) struct Order {
    pub(crate) id: String,
    pub(crate) status: String,
}

/// The condition behind a failed call, to match on.
///
/// Taken from the machine code in the error body when it is one the client
/// knows (`"insufficient_funds"`), and otherwise from the status (a 404 is
/// [`NotFound`](Self::NotFound) whatever code came with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ErrorCode {
    /// 400: the request was malformed.
    BadRequest,
    /// 401: no valid credentials.
    Unauthorized,
    /// 403: the credentials do not allow this.
    Forbidden,
    /// 404: no such order.
    NotFound,
    /// 409: the order is in a state that does not allow this.
    Conflict,
    /// 422: well-formed but not acceptable.
    Unprocessable,
    /// The payment was declined for want of funds (a body code).
    InsufficientFunds,
    /// The card was refused (a body code).
    InvalidCard,
    /// 429: too many requests; the client already waited and retried.
    RateLimited,
    /// 500: the server failed.
    Internal,
    /// 502, 503, 504: the server or a proxy in front of it could not answer.
    Unavailable,
    /// Any other status or code; the status and the server's code say more.
    Other,
}

impl ErrorCode {
    /// Body codes the client recognises, and what they stand for.
    const WIRE: [(&'static str, ErrorCode); 11] = [
        ("bad_request", ErrorCode::BadRequest),
        ("unauthorized", ErrorCode::Unauthorized),
        ("forbidden", ErrorCode::Forbidden),
        ("not_found", ErrorCode::NotFound),
        ("conflict", ErrorCode::Conflict),
        ("unprocessable", ErrorCode::Unprocessable),
        ("insufficient_funds", ErrorCode::InsufficientFunds),
        ("invalid_card", ErrorCode::InvalidCard),
        ("rate_limited", ErrorCode::RateLimited),
        ("internal", ErrorCode::Internal),
        ("unavailable", ErrorCode::Unavailable),
    ];

    /// The code for an error answer: the body's code if known, else the
    /// status's.
    pub(crate) fn of(status: StatusCode, body_code: &str) -> Self {
        Self::WIRE
            .iter()
            .find(|(wire, _)| *wire == body_code)
            .map_or_else(|| Self::from_status(status), |(_, code)| *code)
    }

    fn from_status(status: StatusCode) -> Self {
        match status.as_u16() {
            400 => Self::BadRequest,
            401 => Self::Unauthorized,
            403 => Self::Forbidden,
            404 => Self::NotFound,
            409 => Self::Conflict,
            422 => Self::Unprocessable,
            429 => Self::RateLimited,
            500 => Self::Internal,
            502..=504 => Self::Unavailable,
            _ => Self::Other,
        }
    }
}

/// A non-2xx answer: enough to branch on and enough to report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "orders api: {status} {code:?} ({server_code}): {message} (request {})",
    request_id.as_deref().unwrap_or("-")
)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    /// What to match on.
    pub(crate) code: ErrorCode,
    /// The machine code exactly as the server sent it (may be empty).
    pub(crate) server_code: String,
    pub(crate) message: String,
    /// The server's `X-Request-Id` of the final attempt, for support.
    pub(crate) request_id: Option<String>,
}

/// Everything a call can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The server answered, with an error status.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// No answer: refused, reset, timed out (after the retries allowed).
    #[error("orders api transport: {0}")]
    Transport(#[from] reqwest_middleware::Error),
    /// The answer broke off while its body was read.
    #[error("reading the response: {0}")]
    Body(#[from] reqwest::Error),
    /// The body was larger than the client reads.
    #[error("response larger than {0} bytes")]
    TooLarge(usize),
    /// A 2xx whose body is not what the API promises.
    #[error("decoding the response: {0}")]
    Decode(#[from] serde_json::Error),
}

impl Error {
    /// The server's answer, if there was one.
    pub(crate) fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(error) => Some(error),
            _ => None,
        }
    }

    /// The condition to match on, for an error answer.
    pub(crate) fn code(&self) -> Option<ErrorCode> {
        self.api().map(|error| error.code)
    }

    /// The request id to give support, for an error answer.
    pub(crate) fn request_id(&self) -> Option<&str> {
        self.api().and_then(|error| error.request_id.as_deref())
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.api().is_some_and(|error| error.status == StatusCode::NOT_FOUND)
    }

    pub(crate) fn is_rate_limited(&self) -> bool {
        self.api().is_some_and(|error| error.status == StatusCode::TOO_MANY_REQUESTS)
    }

    /// The request itself was wrong (a 4xx other than 429): sending it again
    /// unchanged will fail again.
    pub(crate) fn is_caller_fault(&self) -> bool {
        self.api().is_some_and(|error| {
            error.status.is_client_error() && error.status != StatusCode::TOO_MANY_REQUESTS
        })
    }

    /// Worth trying again later, above the client's own retries.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            Error::Api(error) => matches!(error.status.as_u16(), 429 | 500 | 502..=504),
            Error::Transport(error) => error.is_timeout() || error.is_connect(),
            _ => false,
        }
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BuildError {
    #[error("base URL {0:?}: {1}")]
    Url(String, String),
    #[error("base URL {0} cannot take a path")]
    NotABase(Url),
    #[error("HTTP client: {0}")]
    Http(#[from] reqwest_safe_retry::ClientError),
    #[error("retry policy: {0}")]
    Retry(#[from] ConfigError),
}

type KeySource = Arc<dyn Fn() -> String + Send + Sync>;

/// Options for an [`OrdersClient`]; every one has a safe default.
pub(crate) struct OrdersClientBuilder {
    base: String,
    http: Option<reqwest::ClientBuilder>,
    max_retries: u32,
    clock: Arc<dyn Clock>,
    jitter: Arc<dyn JitterSource>,
    budget: Option<RetryBudget>,
    report: Option<ReportSlot>,
    new_key: KeySource,
    max_body: usize,
}

impl fmt::Debug for OrdersClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrdersClientBuilder")
            .field("base", &self.base)
            .field("max_retries", &self.max_retries)
            .field("clock", &self.clock)
            .field("budget", &self.budget)
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

impl OrdersClientBuilder {
    /// The HTTP client to send with, for its pool, proxy, TLS and timeouts,
    /// as a builder: the orders client gives it the retry middleware's
    /// redirect policy, so the middleware follows redirects itself and every
    /// outcome it sees is its own request's. A 429 or a refused connection is
    /// then retried for a POST without a key too, and a POST a redirect
    /// answered is never repeated.
    ///
    /// The default has a 10 s timeout per attempt, as a backstop.
    pub(crate) fn with_http_client(mut self, client: reqwest::ClientBuilder) -> Self {
        self.http = Some(client);
        self
    }

    /// Retries after the first attempt (3 by default); 0 turns them off.
    pub(crate) fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Where waiting happens: `tokio::time` by default; a `ManualClock` in
    /// tests and demos returns at once and records each wait.
    pub(crate) fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Where the randomness behind the jitter comes from: the thread's
    /// generator by default; a `FixedJitter` pins every wait.
    pub(crate) fn with_jitter(mut self, jitter: impl JitterSource + 'static) -> Self {
        self.jitter = Arc::new(jitter);
        self
    }

    /// Spends retries to a host only as answers from it earn them, after
    /// `budget` (the crate's default budget by default).
    pub(crate) fn with_retry_budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Makes every retry the rules allow, however many fail, as the design
    /// notes' client does. Not for a client shared by a fleet.
    pub(crate) fn without_retry_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Receives the retry report of every call (attempts, waits, why it
    /// stopped); with calls running at once, the last to finish wins.
    pub(crate) fn with_report_slot(mut self, slot: ReportSlot) -> Self {
        self.report = Some(slot);
        self
    }

    /// How [`OrdersClient::create_order_once`] makes its keys: 128 random
    /// bits in hex by default.
    pub(crate) fn with_idempotency_keys(
        mut self,
        new_key: impl Fn() -> String + Send + Sync + 'static,
    ) -> Self {
        self.new_key = Arc::new(new_key);
        self
    }

    /// The largest response body read (1 MiB by default).
    pub(crate) fn with_max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    pub(crate) fn build(self) -> Result<OrdersClient, BuildError> {
        let base = Url::parse(&self.base)
            .map_err(|error| BuildError::Url(self.base.clone(), error.to_string()))?;
        if base.cannot_be_a_base() {
            return Err(BuildError::NotABase(base));
        }
        let config = retry_config(self.max_retries, self.budget)?;
        let jitter = self.jitter;
        let middleware = RetryMiddleware::new(config)
            .with_clock(SharedClock(self.clock))
            .with_jitter_source(move || jitter.unit());
        let http = self
            .http
            .unwrap_or_else(|| reqwest::Client::builder().timeout(Duration::from_secs(10)));
        Ok(OrdersClient {
            base,
            http: middleware.client(http)?.build(),
            report: self.report,
            new_key: self.new_key,
            max_body: self.max_body,
        })
    }
}

/// A clock chosen at run time, for the middleware's `with_clock`.
#[derive(Debug, Clone)]
struct SharedClock(Arc<dyn Clock>);

impl Clock for SharedClock {
    fn now(&self) -> Instant {
        self.0.now()
    }

    fn wall_time(&self) -> SystemTime {
        self.0.wall_time()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        self.0.sleep(duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        self.0.sleep_until(deadline)
    }
}

/// The orders API. Cheap to clone and safe to share: keep one per API and
/// use it from every task. A call is cancelled, its waits included, by
/// dropping its future (wrap it in `tokio::time::timeout` for a deadline).
#[derive(Clone)]
pub(crate) struct OrdersClient {
    base: Url,
    http: ClientWithMiddleware,
    report: Option<ReportSlot>,
    new_key: KeySource,
    max_body: usize,
}

impl fmt::Debug for OrdersClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrdersClient")
            .field("base", &self.base.as_str())
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
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
    /// Options for a client of the API at `base`.
    pub(crate) fn builder(base: &str) -> OrdersClientBuilder {
        OrdersClientBuilder {
            base: base.to_owned(),
            http: None,
            max_retries: DEFAULT_MAX_RETRIES,
            clock: Arc::new(TokioClock),
            jitter: Arc::new(ThreadRngJitter),
            budget: Some(RetryBudget::default()),
            report: None,
            new_key: Arc::new(|| format!("{:032x}", rand::rng().random::<u128>())),
            max_body: DEFAULT_MAX_BODY,
        }
    }

    pub(crate) async fn get_order(&self, id: &str) -> Result<Order, Error> {
        self.call(Method::GET, self.url(&["orders", id]), None, None).await
    }

    /// Creates an order. The key is a required argument, `None` included:
    /// only the caller knows whether a create may be repeated. With a key,
    /// the server answers a repeat with the first result, so a failed
    /// attempt is retried; without one, it is retried only when the server
    /// provably did nothing (a 429, a refused connection).
    pub(crate) async fn create_order(
        &self,
        item: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Order, Error> {
        let body = serde_json::json!({ "item": item }).to_string();
        self.call(Method::POST, self.url(&["orders"]), Some(body), idempotency_key).await
    }

    /// Creates an order under a fresh idempotency key, so the retries inside
    /// this call are safe. Calling it again is a new key, so a new order.
    pub(crate) async fn create_order_once(&self, item: &str) -> Result<Order, Error> {
        let key = (self.new_key)();
        self.create_order(item, Some(&key)).await
    }

    /// Cancels an order: a DELETE, which is idempotent, so retried like a GET.
    pub(crate) async fn cancel_order(&self, id: &str) -> Result<Order, Error> {
        self.call(Method::DELETE, self.url(&["orders", id]), None, None).await
    }

    /// Every order, page by page; the cursor stays inside. An error ends the
    /// stream after being yielded; dropping the stream stops the fetching.
    pub(crate) fn orders(&self) -> impl Stream<Item = Result<Order, Error>> + '_ {
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
                let mut url = self.url(&["orders"]);
                if let Some(cursor) = &state.cursor {
                    url.query_pairs_mut().append_pair("cursor", cursor);
                }
                match self.call::<Page>(Method::GET, url, None, None).await {
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

    /// The base URL with `segments` appended, each percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut().expect("checked by the builder").pop_if_empty().extend(segments);
        url
    }

    /// One call, retries included: the only place requests are built and
    /// answers read.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<String>,
        idempotency_key: Option<&str>,
    ) -> Result<T, Error> {
        let mut request = self
            .http
            .request(method, url)
            .header(USER_AGENT, CLIENT_USER_AGENT)
            .header(ACCEPT, "application/json");
        if let Some(slot) = &self.report {
            request = request.with_extension(slot.clone());
        }
        if let Some(body) = body {
            request = request.header(CONTENT_TYPE, "application/json").body(body);
        }
        if let Some(key) = idempotency_key.filter(|key| !key.is_empty()) {
            request = request.header(IDEMPOTENCY_KEY, key);
        }
        let mut response = request.send().await?;
        let status = response.status();
        let request_id = response
            .headers()
            .get(REQUEST_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        if response.content_length().is_some_and(|length| length > self.max_body as u64) {
            return Err(Error::TooLarge(self.max_body));
        }
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
        // Anything else, 3xx included (redirects are not followed), is an
        // error answer; its body may not be JSON at all.
        let parsed: ErrorBody = serde_json::from_slice(&bytes).unwrap_or_default();
        Err(ApiError {
            status,
            code: ErrorCode::of(status, &parsed.code),
            server_code: parsed.code,
            message: parsed.message,
            request_id,
        }
        .into())
    }
}
