//! A loopback server whose responses' bodies break on cue: whole, reset
//! mid-body once the client has the headers, chunked then reset when the
//! test says so, or stalled mid-body. For the tests of response buffering
//! and of what such bodies do to the budget.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use reqwest_safe_retry::clock::ManualClock;
use reqwest_safe_retry::jitter::FixedJitter;
use reqwest_safe_retry::report::{Decision, RetryReason};
use reqwest_safe_retry::{BodyBuffering, RetryConfigBuilder, RetryMiddleware};
use tokio::sync::Notify;

use super::{Conn, RawServer, bare_reqwest, policy};

pub const BODY: &str = "the whole body, every byte of it";

/// What the server does with one request.
#[derive(Clone)]
pub enum Step {
    /// 200 with [`BODY`], `Content-Length`, an `X-Kept` header; keep-alive.
    Whole,
    /// 200 announcing [`BODY`]'s length, half of it, then (once the client
    /// has the headers) a reset.
    ResetMidBody,
    /// 200, chunked: 5 bytes, then 20, then (once the test says so) a reset.
    ChunksThenReset,
    /// 200 announcing [`BODY`]'s length, half of it, then nothing: the
    /// connection held open.
    StallMidBody,
}

/// Tells the server when to reset: when the client has the headers (below
/// the retry middleware) or when the test says so.
#[derive(Clone, Default)]
pub struct Go(pub Arc<Notify>);

impl Go {
    /// Writes `bytes`, waits for the word (said after the write: a word said
    /// for an earlier answer does not count), then resets the connection.
    pub async fn write_then_reset(&self, mut conn: Conn, bytes: &[u8]) {
        let word = self.0.notified();
        tokio::pin!(word);
        word.as_mut().enable();
        let _ = conn.write(bytes).await;
        // Bounded: a missed word resets anyway, and the test says what it saw.
        let _ = tokio::time::timeout(Duration::from_secs(5), word).await;
        conn.reset();
    }

    pub fn go(&self) {
        self.0.notify_waiters();
    }
}

/// A loopback server following `script` (the last step repeats), counting
/// the requests it gets.
pub async fn server(script: Vec<Step>, go: Go) -> (String, Arc<Mutex<usize>>) {
    let requests = Arc::new(Mutex::new(0usize));
    let count = requests.clone();
    let server =
        RawServer::start(move |conn| serve(conn, script.clone(), count.clone(), go.clone())).await;
    let url = server.url("/resource?q=1");
    // Serves until the test ends.
    std::mem::forget(server);
    (url, requests)
}

/// Plays `script` on one connection.
async fn serve(mut conn: Conn, script: Vec<Step>, count: Arc<Mutex<usize>>, go: Go) {
    while conn.request().await.is_some() {
        let step = {
            let mut n = count.lock().unwrap();
            *n += 1;
            script[(*n - 1).min(script.len() - 1)].clone()
        };
        let half = &BODY[..BODY.len() / 2];
        let head = |length: usize| {
            format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nX-Kept: yes\r\n\r\n")
        };
        match step {
            Step::Whole => {
                let answer = format!("{}{BODY}", head(BODY.len()));
                if conn.write(answer).await.is_err() {
                    return;
                }
            }
            Step::ResetMidBody => {
                let answer = format!("{}{half}", head(BODY.len()));
                go.write_then_reset(conn, answer.as_bytes()).await;
                return;
            }
            Step::ChunksThenReset => {
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}\r\n14\r\n{}\r\n",
                    "a".repeat(5),
                    "b".repeat(20)
                );
                go.write_then_reset(conn, answer.as_bytes()).await;
                return;
            }
            Step::StallMidBody => {
                let _ = conn.write(format!("{}{half}", head(BODY.len()))).await;
                conn.hang().await;
                return;
            }
        }
    }
}

/// Long enough for anything on loopback; a hang fails the test with a message.
pub const BOUND: Duration = Duration::from_secs(20);

pub async fn bounded<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(BOUND, future).await.unwrap_or_else(|_| panic!("{what} hung"))
}

/// Below the retry middleware: says "go" once an attempt has its headers.
pub struct HeadersArrived(pub Go);

#[async_trait::async_trait]
impl Middleware for HeadersArrived {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let outcome = next.run(request, extensions).await;
        if outcome.is_ok() {
            self.0.go();
        }
        outcome
    }
}

/// The retry reasons of every retry taken.
pub type Reasons = Arc<Mutex<Vec<RetryReason>>>;

/// A client with `config` over a reqwest client that does not follow
/// redirects, the manual clock, jitter at the top, and `go` said when
/// headers arrive.
pub fn client(config: RetryConfigBuilder, go: &Go) -> (ClientWithMiddleware, ManualClock, Reasons) {
    client_over(bare_reqwest(), config, go)
}

/// As [`client`], over `inner`.
pub fn client_over(
    inner: reqwest::Client,
    config: RetryConfigBuilder,
    go: &Go,
) -> (ClientWithMiddleware, ManualClock, Reasons) {
    let clock = ManualClock::new();
    let reasons = Reasons::default();
    let seen = reasons.clone();
    let middleware = RetryMiddleware::new(config.build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP)
        .on_decision(move |event| {
            if let Decision::Retry { reason, .. } = event.decision {
                seen.lock().unwrap().push(reason);
            }
        });
    let client =
        ClientBuilder::new(inner).with(middleware).with(HeadersArrived(go.clone())).build();
    (client, clock, reasons)
}

pub fn buffering() -> RetryConfigBuilder {
    policy().with_body_buffering(BodyBuffering::default().with_response(1024))
}

/// `is_body()`, `is_decode()`, `is_timeout()`.
pub fn kinds(error: &reqwest::Error) -> (bool, bool, bool) {
    (error.is_body(), error.is_decode(), error.is_timeout())
}

/// The error and its sources, as text.
pub fn chain(error: &reqwest::Error) -> String {
    let error: &(dyn std::error::Error + 'static) = error;
    let chain = std::iter::successors(Some(error), |&e| e.source());
    chain.map(ToString::to_string).collect::<Vec<_>>().join(": ").to_lowercase()
}

pub fn reqwest_error(error: &reqwest_middleware::Error) -> &reqwest::Error {
    match error {
        reqwest_middleware::Error::Reqwest(error) => error,
        other => panic!("not reqwest's error: {other:?}"),
    }
}
