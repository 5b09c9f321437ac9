//! Shared pieces for the integration tests: a scripted wiremock server, a
//! client whose clock and jitter are pinned (so every wait is exact), and
//! the servers wiremock cannot be: [`raw`], the one raw HTTP/1 server every
//! suite scripts its misbehaving answers on ([`raw_server`] plays a list
//! of common ones), [`hops`] for the far end of a redirect, and the TLS
//! and HTTP/2 servers. No suite binds a listener of its own, and the soak
//! (`sim/`) builds its servers on [`raw`] too.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub use raw::{Conn, RawServer};
use reqwest::redirect::Policy;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::Backoff;
use reqwest_safe_retry::{
    RetryConfig, RetryConfigBuilder, RetryMiddleware, clock::ManualClock, jitter::FixedJitter,
};
use wiremock::matchers::path;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub mod broken_bodies;
pub mod calls;
#[cfg(feature = "http2")]
pub mod h2_server;
pub mod hops;
pub mod raw;
#[cfg(feature = "redis")]
pub mod redis_server;
#[cfg(feature = "redis")]
#[path = "../../../benches/support/slow_proxy.rs"]
pub mod slow_proxy;
pub mod tls_server;

pub const MS: Duration = Duration::from_millis(1);

/// Answers with the scripted responses in turn, then repeats the last one.
pub struct Script {
    responses: Vec<ResponseTemplate>,
    next: AtomicUsize,
}

impl Respond for Script {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        self.responses[n.min(self.responses.len() - 1)].clone()
    }
}

/// Mounts a script of plain statuses at `at`.
pub async fn script_statuses(server: &MockServer, at: &str, statuses: &[u16]) {
    script(server, at, statuses.iter().map(|s| ResponseTemplate::new(*s)).collect()).await;
}

/// Mounts a script of responses at `at`.
pub async fn script(server: &MockServer, at: &str, responses: Vec<ResponseTemplate>) {
    assert!(!responses.is_empty());
    let script = Script { responses, next: AtomicUsize::new(0) };
    Mock::given(path(at)).respond_with(script).mount(server).await;
}

/// Every Rust file under `dir` of the crate, and its subdirectories, in one
/// string, each ending with a line break.
pub fn rust_sources(dir: &str) -> String {
    let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)];
    let mut text = String::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(path).unwrap());
                text.push('\n');
            }
        }
    }
    text
}

/// How many requests the server has received.
pub async fn hits(server: &MockServer) -> usize {
    server.received_requests().await.expect("request recording is on").len()
}

/// The default policy with 100 ms initial backoff, so waits read 100, 200,
/// 400..., and without the retry budget: these tests are about the rules,
/// and the budget (whose reserve gives a fresh client one retry) has tests
/// of its own.
pub fn policy() -> RetryConfigBuilder {
    RetryConfig::builder().with_backoff(backoff()).with_budget(None)
}

/// The backoff of [`policy`]: 100 ms initial, the rest the defaults.
pub fn backoff() -> Backoff {
    Backoff::default().with_initial(100 * MS)
}

/// A client with `config`, a manual clock and jitter pinned at the top.
pub fn client(config: RetryConfig) -> (ClientWithMiddleware, ManualClock) {
    let clock = ManualClock::new();
    let middleware =
        RetryMiddleware::new(config).with_clock(clock.clone()).with_jitter_source(FixedJitter::TOP);
    (wrap(middleware), clock)
}

/// The client `middleware` builds, following no redirect, and below the
/// middleware a [`Runaway`] guard.
pub fn wrap(middleware: RetryMiddleware) -> ClientWithMiddleware {
    built(reqwest::Client::builder(), middleware.with_redirect_policy(Policy::none()))
}

/// The client `middleware` builds from `builder`, and below the middleware
/// a [`Runaway`] guard.
pub fn built(builder: reqwest::ClientBuilder, middleware: RetryMiddleware) -> ClientWithMiddleware {
    middleware.client(builder).expect("the client builds").with(Runaway::default()).build()
}

/// `inner` wrapped with `middleware`, and below it a [`Runaway`] guard.
pub fn guarded(inner: reqwest::Client, middleware: RetryMiddleware) -> ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(inner).with(middleware).with(Runaway::default()).build()
}

/// Keeps the timeout each request carried past it: placed below a retry
/// layer, each attempt's.
#[derive(Clone, Default)]
pub struct SeenTimeouts(pub Arc<std::sync::Mutex<Vec<Option<Duration>>>>);

impl SeenTimeouts {
    /// The timeouts seen so far, in order.
    pub fn get(&self) -> Vec<Option<Duration>> {
        self.0.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for SeenTimeouts {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.0.lock().unwrap().push(request.timeout().copied());
        next.run(request, extensions).await
    }
}

/// Counts the attempts that pass through it, placed below a retry layer
/// (each attempt) or above it (each call).
#[derive(Clone, Default)]
pub struct Calls(pub Counter);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Calls {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.0.bump();
        next.run(req, extensions).await
    }
}

/// More attempts than any test sends through one client.
const RUNAWAY: usize = 5000;

/// Fails a test whose retry loop does not stop: with the manual clock every
/// wait returns at once, so a broken stopping rule would otherwise send
/// requests until the test runner gives up. Past [`RUNAWAY`] attempts
/// through one client, every attempt panics, within seconds.
#[derive(Default)]
pub struct Runaway {
    sent: AtomicUsize,
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Runaway {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let sent = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
        assert!(
            sent <= RUNAWAY,
            "{sent} attempts through one test client: a retry loop that does not stop"
        );
        next.run(request, extensions).await
    }
}

/// The clients users build: reqwest's default, which follows redirects,
/// with the middleware put on it by hand, so that it knows nothing of them;
/// the client the middleware builds, following no redirect; and the quick
/// start's, the client the middleware builds with reqwest's default policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Following,
    NotFollowing,
    Handing,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Following, Kind::NotFollowing, Kind::Handing];

    /// A client of this kind with `config`, a manual clock and jitter pinned
    /// at the top.
    pub fn client(self, config: RetryConfigBuilder) -> (ClientWithMiddleware, ManualClock) {
        let clock = ManualClock::new();
        let middleware = RetryMiddleware::new(config.build().expect("a valid test policy"))
            .with_clock(clock.clone())
            .with_jitter_source(FixedJitter::TOP);
        let client = match self {
            Kind::Following => guarded(reqwest::Client::new(), middleware),
            Kind::NotFollowing => wrap(middleware),
            Kind::Handing => built(reqwest::Client::builder(), middleware),
        };
        (client, clock)
    }
}

pub fn bare_reqwest() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a plain client builds")
}

/// An address on loopback where nothing listens: connections are refused.
pub async fn refused_address() -> String {
    let (url, socket) = hops::refusing_port();
    // Kept bound for the rest of the process: see `refusing_port`.
    std::mem::forget(socket);
    url
}

/// A listener that never accepts, its queue filled until a connection is
/// no longer answered: a connect to it times out. Returns its URL, and the
/// listener and the connections that fill it, to keep.
pub async fn unanswered_connects() -> (String, (tokio::net::TcpListener, Vec<tokio::net::TcpStream>))
{
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let address = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    loop {
        let connect = tokio::net::TcpStream::connect(address);
        match tokio::time::timeout(Duration::from_millis(50), connect).await {
            Ok(stream) => queued.push(stream.unwrap()),
            // The queue is full: the kernel no longer answers.
            Err(_) => break,
        }
        assert!(queued.len() < 64, "the listener's queue never filled");
    }
    (format!("http://{address}/"), (listener, queued))
}

/// Counts calls to a `Fn`.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicUsize>);

impl Counter {
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a raw TCP test server does with one request.
#[derive(Debug, Clone)]
pub enum Raw {
    /// Close the connection without a byte of response.
    Close,
    /// Answer with these bytes and close.
    Reply(&'static str),
    /// Answer with these bytes and wait for the next request on the same
    /// connection.
    KeepAlive(String),
    /// Answer 503 and stream a body that never ends.
    EndlessBody,
    /// Answer 503 with a chunked body: one chunk, then nothing, the
    /// connection held open until the client goes away.
    StalledBody,
    /// Read the request and never answer, holding the connection open.
    Stall,
    /// Answer 200 with a declared body of 30 bytes, send 3, and hold the
    /// connection open.
    StalledOk,
    /// Answer 200 and stream a body that never ends.
    EndlessOk,
}

/// A server for what wiremock cannot play: each request gets the next
/// behaviour (the last repeats). Returns its base URL and a count of the
/// connections it accepted; it serves until the test ends.
pub async fn raw_server(script: Vec<Raw>) -> (String, Counter) {
    let connections = Counter::default();
    let count = connections.clone();
    let script = Arc::new(script);
    let server = RawServer::start(move |conn| {
        count.bump();
        play(conn, script.clone())
    })
    .await;
    let url = server.url("");
    // Serves until the runtime ends, as the callers keep only the URL.
    std::mem::forget(server);
    (url, connections)
}

/// Plays `script` on one connection.
async fn play(mut conn: Conn, script: Arc<Vec<Raw>>) {
    while let Some(request) = conn.request().await {
        let behaviour = script[request.index.min(script.len() - 1)].clone();
        match behaviour {
            Raw::Close => break,
            Raw::Reply(bytes) => {
                let _ = conn.write(bytes).await;
                break;
            }
            Raw::KeepAlive(bytes) => {
                if conn.write(bytes).await.is_err() {
                    break;
                }
            }
            Raw::EndlessBody | Raw::EndlessOk => {
                let head = if matches!(behaviour, Raw::EndlessOk) {
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                } else {
                    "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
                };
                let _ = conn.write(head).await;
                let chunk = format!("{:x}\r\n{}\r\n", 8192, "x".repeat(8192));
                // Stops when the client goes away.
                while conn.write(&chunk).await.is_ok() {}
                break;
            }
            Raw::StalledBody => {
                let head = "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nbusy.\r\n";
                let _ = conn.write(head).await;
                conn.hang().await;
                break;
            }
            Raw::Stall => {
                conn.hang().await;
                break;
            }
            Raw::StalledOk => {
                let _ = conn.write("HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\nabc").await;
                conn.hang().await;
                break;
            }
        }
    }
    conn.close().await;
}

/// A keep-alive response with `status` and a body of `length` bytes.
pub fn keep_alive(status: u16, length: usize) -> Raw {
    Raw::KeepAlive(format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {length}\r\n\r\n{}",
        "x".repeat(length)
    ))
}

pub const OK_CLOSE: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

/// A last middleware that answers at once from a script of statuses (the
/// last repeats), without a network: for paused time, and for speed.
pub struct Answers {
    statuses: Vec<u16>,
    next: AtomicUsize,
}

impl Answers {
    pub fn new(statuses: &[u16]) -> Self {
        assert!(!statuses.is_empty());
        Self { statuses: statuses.to_vec(), next: AtomicUsize::new(0) }
    }
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Answers {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let status = self.statuses[n.min(self.statuses.len() - 1)];
        Ok(http::Response::builder().status(status).body("").unwrap().into())
    }
}

/// Wraps every reqwest error in `Error::Middleware`, as middlewares that add
/// context do.
pub struct Wrapping;

/// The context `Wrapping` adds.
#[derive(Debug, thiserror::Error)]
#[error("while calling the orders service")]
pub struct Context(#[source] pub reqwest::Error);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Wrapping {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        match next.run(req, extensions).await {
            Err(reqwest_middleware::Error::Reqwest(e)) => {
                Err(reqwest_middleware::Error::middleware(Context(e)))
            }
            other => other,
        }
    }
}

/// What a test's thread logs through `tracing`, from `capture_logs` until
/// this is dropped.
#[cfg(feature = "tracing")]
pub struct LogCapture {
    buffer: Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
    _anchor: tracing::Dispatch,
}

#[cfg(feature = "tracing")]
impl LogCapture {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.buffer.lock().unwrap().clone()).unwrap()
    }
}

/// A dispatcher that wants everything and writes nowhere, for a test that
/// sets a subscriber on its own thread to keep alive beside it.
///
/// tracing caches, per callsite and for the whole process, whether any
/// subscriber wants it; while a single dispatcher is registered, a callsite
/// first reached where no subscriber wants it (another test's thread) is
/// cached as unwanted, and this test's subscriber would never see it. With
/// this second dispatcher registered, every callsite keeps asking.
#[cfg(feature = "tracing")]
pub fn interest_anchor() -> tracing::Dispatch {
    let sink = tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE);
    tracing::Dispatch::new(sink.with_writer(std::io::sink).finish())
}

/// Captures, on this thread, what is logged at `level` and above.
#[cfg(feature = "tracing")]
pub fn capture_logs(level: tracing::Level) -> LogCapture {
    #[derive(Clone)]
    struct Writer(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let anchor = interest_anchor();
    let buffer = Arc::new(std::sync::Mutex::new(Vec::new()));
    let writer = Writer(buffer.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    LogCapture { buffer, _guard: guard, _anchor: anchor }
}

/// A resolver under which no name exists; counts the look-ups.
#[derive(Clone, Default)]
pub struct NoSuchHost(pub Counter);

impl reqwest::dns::Resolve for NoSuchHost {
    fn resolve(&self, _: reqwest::dns::Name) -> reqwest::dns::Resolving {
        self.0.bump();
        Box::pin(async { Err("no such host".into()) })
    }
}

/// A resolver whose every look-up times out at once, as a DNS server that is
/// briefly unreachable; counts the look-ups.
#[derive(Clone, Default)]
pub struct DnsTimeout(pub Counter);

impl reqwest::dns::Resolve for DnsTimeout {
    fn resolve(&self, _: reqwest::dns::Name) -> reqwest::dns::Resolving {
        self.0.bump();
        Box::pin(async { Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()) })
    }
}

/// A client builder that resolves every name with `resolver`.
pub fn unresolving_client(
    resolver: &(impl reqwest::dns::Resolve + Clone + 'static),
) -> reqwest::ClientBuilder {
    reqwest::Client::builder().dns_resolver(std::sync::Arc::new(resolver.clone()))
}

/// Tokio's paused time, through the required methods alone; records each
/// sleep. Only for tests under `#[tokio::test(start_paused = true)]`,
/// where its sleeps take no real time.
#[derive(Debug, Clone, Default)]
pub struct Minimal {
    sleeps: Arc<std::sync::Mutex<Vec<Duration>>>,
}

impl Minimal {
    pub fn sleeps(&self) -> Vec<Duration> {
        self.sleeps.lock().unwrap().clone()
    }
}

impl reqwest_safe_retry::clock::Clock for Minimal {
    fn now(&self) -> std::time::Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep(&self, duration: Duration) -> reqwest_safe_retry::clock::Sleep {
        self.sleeps.lock().unwrap().push(duration);
        Box::pin(tokio::time::sleep(duration))
    }

    // A real timer: sleep for the time left.
    fn sleep_until(&self, deadline: std::time::Instant) -> reqwest_safe_retry::clock::Sleep {
        self.sleep(deadline.saturating_duration_since(self.now()))
    }
}
