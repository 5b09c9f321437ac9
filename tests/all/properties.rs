//! Random server scripts against random requests and policies, over real
//! loopback connections, with three clients: one that follows redirects,
//! with the middleware put on it by hand (it knows nothing of them), the
//! client the middleware builds with no redirect followed, and the quick
//! start's, the client the middleware builds, which follows them and
//! records each. Whatever happens, the safety invariants hold.
//!
//! The first-hop handler, `/orders`, plays the script in order of arrival
//! (the last entry repeats). A redirect sends the client on to `/hop/{i}/{d}`
//! (the redirect of script entry `i`, `d` hops deep) on the same server, on
//! a second server, or on a port where nothing listens, or with a 303 back to
//! `/orders` itself; a hop may redirect once more, and always plays the same
//! thing. A request that arrives with a `Referer` was sent by following a
//! redirect: the first-hop handler tells the original's attempts apart from
//! a 303 that led back to it by that header.
//!
//! The core invariant counts what a handler *processed*, not what it
//! received: any answer but a 429 (a redirect, a 5xx, an answer whose body
//! stalls), an answer held back, and a reset or a close after the request
//! was read, mean the server may have acted. A 429 and a connection never
//! accepted mean it did not. A request that is not safe to repeat (POST or
//! PATCH without a non-empty `Idempotency-Key`) is processed at most once by
//! each handler, across all attempts.
//!
//! Every call carries a credential from each of the four places one comes
//! from: `Authorization` on the request, `Proxy-Authorization` in the
//! client's `default_headers`, `Cookie2` added by a middleware inside the
//! retry layer, and a cookie store's `Cookie` for the servers' host. The
//! credential invariant is reqwest's own rule, which the middleware must not
//! cross: the first three reach a request exactly when it is a first hop or
//! its redirect came from the same server (reqwest strips them on the hop to
//! another origin, and builds each hop from the original headers); the
//! store's cookie, kept by host, reaches every request.
//!
//! Cases: 96 by default, each run with both clients at once; set
//! `PROPTEST_CASES` for longer runs. A failure prints the servers' log and
//! the smallest failing case found within 1024 shrinking steps or 20 s.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::support::{Conn, RawServer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use reqwest::Method;
use reqwest_safe_retry::{Backoff, RetryAfter};
use reqwest_safe_retry::{
    Jitter, RetryBudget, RetryConfig, RetryMiddleware, clock::ManualClock, jitter::SeededJitter,
    report::Decision, report::ReportSlot, report::RetryReason,
};

/// The client gives up on an attempt (answer and body) after this long.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(200);

/// A whole call, all attempts included, must finish within this. Waits
/// between attempts take no time (the clock is manual), so only attempts
/// count, and each is bounded by `CLIENT_TIMEOUT`.
const CALL_BOUND: Duration = Duration::from_secs(5);

/// The first-hop handler's path.
const FIRST_HOP: &str = "/orders";

/// What a handler does with one request.
#[derive(Debug, Clone)]
enum Play {
    /// Answer with this status and, maybe, a `Retry-After` value.
    Answer(u16, Option<String>),
    /// Answer with this redirect status, to a hop.
    Redirect(u16, Hop),
    /// Send the head of an answer and `sent` bytes of its body, then nothing
    /// more; the connection stays open until the client goes away.
    Stall { status: u16, framing: Framing, sent: usize },
    /// Hold the request, unanswered, until the client goes away.
    Slow,
    /// Close the connection without answering.
    Close,
    /// Reset the connection without answering.
    Reset,
}

/// Where a redirect leads.
#[derive(Debug, Clone)]
enum Hop {
    /// Another path on the same server, which plays this.
    SameHost(Box<Play>),
    /// A path on a second server, which plays this.
    OtherHost(Box<Play>),
    /// A port where nothing listens.
    Refused,
    /// Back to `/orders`, the URL first requested, which then plays this:
    /// only after a 303, so the request that comes back is a GET.
    Back(Box<Play>),
}

impl Hop {
    /// What the hop plays, if anything answers there.
    fn next(&self) -> Option<&Play> {
        match self {
            Hop::SameHost(next) | Hop::OtherHost(next) | Hop::Back(next) => Some(next),
            Hop::Refused => None,
        }
    }
}

/// How a stalled body says its length.
#[derive(Debug, Clone, Copy)]
enum Framing {
    Chunked,
    ContentLength(usize),
}

impl Play {
    /// Whether the server may have acted on the request.
    fn processed(&self) -> bool {
        !matches!(self, Play::Answer(429, _) | Play::Stall { status: 429, .. })
    }

    /// The status and `Retry-After` the client gets back, if it gets an
    /// answer at all.
    fn seen(&self, kind: ClientKind) -> Option<(u16, Option<&str>)> {
        match self {
            Play::Answer(status, retry_after) => Some((*status, retry_after.as_deref())),
            Play::Stall { status, .. } => Some((*status, None)),
            Play::Redirect(status, _) if kind == ClientKind::NotFollowing => Some((*status, None)),
            Play::Redirect(_, hop) => hop.next().and_then(|next| next.seen(kind)),
            Play::Slow | Play::Close | Play::Reset => None,
        }
    }
}

/// The request body, shown as escaped bytes.
#[derive(Clone)]
struct Body(Vec<u8>);

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

#[derive(Debug, Clone)]
struct Case {
    script: Vec<Play>,
    method: Method,
    key: Option<String>,
    body: Body,
    max_retries: u32,
    initial: Duration,
    max: Duration,
    jitter: Jitter,
    max_retry_after: Duration,
    deadline: Option<Duration>,
    budget: bool,
    seed: u64,
}

impl Case {
    /// Whether the crate may repeat the request whatever the server did.
    fn safe(&self) -> bool {
        self.method.is_idempotent() || self.key.as_deref().is_some_and(|k| !k.is_empty())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientKind {
    /// A plain client, redirects followed (reqwest's default), with the
    /// middleware put on it by hand.
    Following,
    /// The client the middleware builds, following no redirect.
    NotFollowing,
    /// The quick start's: the client the middleware builds, which follows
    /// redirects and records each.
    Handing,
}

impl ClientKind {
    const ALL: [ClientKind; 3] =
        [ClientKind::Following, ClientKind::NotFollowing, ClientKind::Handing];

    /// The client of this kind for `url`: credentials in the client's
    /// default headers, its cookie store and a middleware inside the retry
    /// layer (the request sets the fourth).
    fn client(
        self,
        middleware: RetryMiddleware,
        url: &str,
    ) -> reqwest_middleware::ClientWithMiddleware {
        let mut defaults = http::HeaderMap::new();
        defaults.insert("proxy-authorization", http::HeaderValue::from_static("Basic ZGVm"));
        let jar = reqwest::cookie::Jar::default();
        jar.add_cookie_str("session=jar", &url.parse().expect("the world's URL"));
        let builder =
            reqwest::Client::builder().default_headers(defaults).cookie_provider(Arc::new(jar));
        let built = match self {
            ClientKind::Following => reqwest_middleware::ClientBuilder::new(
                builder.build().expect("a plain client builds"),
            )
            .with(middleware),
            ClientKind::NotFollowing => middleware
                .with_redirect_policy(reqwest::redirect::Policy::none())
                .client(builder)
                .expect("a plain client builds"),
            ClientKind::Handing => middleware.client(builder).expect("a plain client builds"),
        };
        built.with(Token).build()
    }
}

/// A middleware inside the retry layer that adds a credential to every
/// attempt.
struct Token;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Token {
    async fn handle(
        &self,
        mut request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        request.headers_mut().insert("cookie2", http::HeaderValue::from_static("inner=1"));
        next.run(request, extensions).await
    }
}

impl fmt::Display for ClientKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientKind::Following => "the redirect-following client, the middleware put on by hand",
            ClientKind::NotFollowing => "the middleware's client that follows no redirect",
            ClientKind::Handing => "the quick start's client",
        })
    }
}

/// The manual clock's starting wall time, so Retry-After dates can be made
/// relative to it.
fn wall_start() -> SystemTime {
    reqwest_safe_retry::clock::Clock::wall_time(&ManualClock::new())
}

fn retry_after() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        2 => (0u64..4).prop_map(|s| Some(s.to_string())),
        1 => Just(Some("100000".to_owned())),
        1 => (0u64..4).prop_map(|s| Some(httpdate::fmt_http_date(wall_start() + Duration::from_secs(s)))),
        1 => prop_oneof![Just("-1"), Just("soon"), Just(""), Just("1.5")].prop_map(|s| Some(s.to_owned())),
    ]
}

/// A play that does not lead anywhere else.
fn terminal() -> impl Strategy<Value = Play> + Clone {
    let status = prop_oneof![
        1 => Just(200u16),
        1 => Just(201),
        1 => Just(400),
        1 => Just(404),
        2 => Just(429),
        1 => Just(500),
        1 => Just(502),
        1 => Just(503),
        1 => Just(504),
    ];
    let stall = (
        prop_oneof![Just(200u16), Just(429), Just(500), Just(503)],
        prop_oneof![
            Just(Framing::Chunked),
            Just(Framing::ContentLength(64)),
            // Longer than the drain limit.
            Just(Framing::ContentLength(1 << 20)),
        ],
        1usize..32,
    )
        .prop_map(|(status, framing, sent)| Play::Stall { status, framing, sent });
    prop_oneof![
        10 => (status, retry_after()).prop_map(|(s, r)| Play::Answer(s, r)),
        2 => stall,
        1 => Just(Play::Slow),
        1 => Just(Play::Close),
        1 => Just(Play::Reset),
    ]
}

fn redirect_status() -> BoxedStrategy<u16> {
    prop_oneof![Just(301u16), Just(302), Just(303), Just(307), Just(308)].boxed()
}

/// Where a redirect leads, the hop playing `next`. Boxed, as every strategy
/// of the chain is: their nested types would otherwise take more stack than
/// a test thread has to build a case.
fn hop(next: BoxedStrategy<Play>) -> BoxedStrategy<Hop> {
    prop_oneof![
        3 => next.clone().prop_map(|p| Hop::SameHost(Box::new(p))),
        2 => next.prop_map(|p| Hop::OtherHost(Box::new(p))),
        1 => Just(Hop::Refused),
    ]
    .boxed()
}

fn play() -> impl Strategy<Value = Play> {
    // A hop answers 429 more often than the first hop: that is where a
    // redirect-following client hides a request the server processed.
    let last = || {
        prop_oneof![
            3 => terminal(),
            1 => retry_after().prop_map(|r| Play::Answer(429, r)),
        ]
        .boxed()
    };
    // A hop may redirect once more: chains of two hops.
    let next = prop_oneof![
        4 => last(),
        1 => (redirect_status(), hop(last())).prop_map(|(s, h)| Play::Redirect(s, h)),
    ]
    .boxed();
    prop_oneof![
        4 => terminal().boxed(),
        2 => (redirect_status(), hop(next)).prop_map(|(s, h)| Play::Redirect(s, h)).boxed(),
        1 => last().prop_map(|p| Play::Redirect(303, Hop::Back(Box::new(p)))).boxed(),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let method = prop_oneof![
        1 => Just(Method::GET),
        1 => Just(Method::PUT),
        1 => Just(Method::DELETE),
        2 => Just(Method::POST),
        1 => Just(Method::PATCH),
    ];
    let jitter = prop_oneof![
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        Just(Jitter::None)
    ];
    // The retry count comes first because it shrinks first: every candidate
    // after that makes fewer attempts, and an attempt that stalls takes
    // `CLIENT_TIMEOUT` of real time.
    (
        1u32..5,
        proptest::collection::vec(play(), 1..6),
        method,
        prop_oneof![3 => Just(None), 1 => Just(Some("k-1".to_owned())), 1 => Just(Some(String::new()))],
        // A length and a first byte rather than a vector of bytes: it shrinks
        // in a few steps, not one per byte.
        (0usize..256, any::<u8>()).prop_map(|(len, first)| {
            (0..len).map(|i| first.wrapping_add((i as u8).wrapping_mul(37))).collect::<Vec<u8>>()
        }),
        (0u64..300, 0u64..1000),
        jitter,
        0u64..3000,
        proptest::option::of(100u64..5000),
        any::<bool>(),
        // Shrinking the seed would only add steps.
        any::<u64>().no_shrink(),
    )
        .prop_map(
            |(
                max_retries,
                script,
                method,
                key,
                body,
                (initial, extra),
                jitter,
                cap,
                deadline,
                budget,
                seed,
            )| Case {
                script,
                method,
                key,
                body: Body(body),
                max_retries,
                initial: Duration::from_millis(initial),
                max: Duration::from_millis(initial + extra),
                jitter,
                max_retry_after: Duration::from_millis(cap),
                deadline: deadline.map(Duration::from_millis),
                budget,
                seed,
            },
        )
}

/// One request a server read, and what it did with it.
#[derive(Debug, Clone)]
struct Received {
    /// `a` for the first-hop server, `b` for the other host.
    server: char,
    path: String,
    method: String,
    body: Vec<u8>,
    /// It came with a `Referer`: sent by following a redirect.
    referred: bool,
    /// `None` for a path nothing was scripted for (answered 404).
    play: Option<Play>,
    /// The server whose redirect led here; `None` for a first hop.
    from: Option<char>,
    /// Which of [`CREDENTIALS`] it carried.
    credentials: [bool; 4],
}

/// The sensitive headers a call carries, one from each place: the request,
/// the client's default headers, a middleware inside the retry layer, and
/// the cookie store.
const CREDENTIALS: [&str; 4] = ["authorization", "proxy-authorization", "cookie2", "cookie"];

impl Received {
    fn processed(&self) -> bool {
        self.play.as_ref().is_none_or(Play::processed)
    }

    /// An attempt of the request the caller made, not a hop after it.
    fn is_first_hop(&self) -> bool {
        self.server == 'a' && self.path == FIRST_HOP && !self.referred
    }
}

/// What the servers saw, one request a line.
struct Log<'a>(&'a [Received]);

impl fmt::Display for Log<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "    (nothing)");
        }
        for (n, r) in self.0.iter().enumerate() {
            let play = r.play.as_ref().map_or("404 (unscripted)".to_owned(), |p| format!("{p:?}"));
            let processed = if r.processed() { "processed" } else { "not processed" };
            let referred = if r.referred { " (redirected)" } else { "" };
            writeln!(
                f,
                "    {}. {} {} {}{referred} -> {play} [{processed}]",
                n + 1,
                r.server,
                r.method,
                r.path
            )?;
        }
        Ok(())
    }
}

/// Everything the two servers share.
struct Shared {
    script: Vec<Play>,
    /// `http://127.0.0.1:port` of the other host.
    other_host: String,
    /// `http://127.0.0.1:port` where nothing listens.
    refused: String,
    log: Mutex<Vec<Received>>,
}

/// Two keep-alive HTTP/1.1 servers on loopback: `a` serves the first hop
/// and same-host hops, `b` other-host hops. Stopped when dropped.
struct World {
    url: String,
    shared: Arc<Shared>,
    _servers: [RawServer; 2],
    /// Keeps the refused address's port bound.
    _refusing: tokio::net::TcpSocket,
}

impl World {
    async fn start(script: Vec<Play>) -> Self {
        // Bound, never listening: refused for as long as the world lives.
        let (refused, refusing) = crate::support::hops::refusing_port();
        let slot = Arc::new(std::sync::OnceLock::new());
        let a = serve('a', slot.clone()).await;
        let b = serve('b', slot.clone()).await;
        let shared = Arc::new(Shared {
            script,
            other_host: b.url(""),
            refused,
            log: Mutex::new(Vec::new()),
        });
        // Set before any request: nothing knows the servers' URLs yet.
        let _ = slot.set(shared.clone());
        World { url: a.url(FIRST_HOP), shared, _servers: [a, b], _refusing: refusing }
    }

    fn log(&self) -> Vec<Received> {
        self.shared.log.lock().unwrap().clone()
    }
}

/// Server `name`, serving each connection with what the two servers
/// share (set once both are listening, as it names the other's address).
async fn serve(name: char, shared: Arc<std::sync::OnceLock<Arc<Shared>>>) -> RawServer {
    RawServer::start(move |conn| {
        let shared = shared.get().expect("set before any request").clone();
        connection(conn, name, shared)
    })
    .await
}

impl Shared {
    /// Logs a request and picks its play, with the script index and depth
    /// a redirect names its hop by.
    fn record(&self, server: char, request: Request) -> (Play, (usize, usize)) {
        let Request { path, method, body, referred, credentials } = request;
        let mut log = self.log.lock().unwrap();
        let attempts = log.iter().filter(|r| r.is_first_hop()).count();
        let last = self.script.len() - 1;
        let mut from = None;
        let (play, at) = if server == 'a' && path == FIRST_HOP && !referred {
            let index = attempts.min(last);
            (Some(self.script[index].clone()), (index, 0))
        } else if server == 'a' && path == FIRST_HOP {
            from = Some('a');
            // Back from a 303: the request is served from the script entry
            // the last attempt met.
            let index = attempts.saturating_sub(1).min(last);
            let play = match &self.script[index] {
                Play::Redirect(_, Hop::Back(next)) => Some(*next.clone()),
                _ => None,
            };
            (play, (index, 1))
        } else {
            let mut parts = path.strip_prefix("/hop/").unwrap_or_default().split('/');
            let mut number = || parts.next().and_then(|n| n.parse::<usize>().ok());
            let (index, depth) = (number().unwrap_or(usize::MAX), number().unwrap_or(0));
            // Walk the chain from the script entry, `depth` redirects in.
            let mut play = self.script.get(index);
            let mut on = 'a';
            for _ in 0..depth {
                let hop = match play {
                    Some(Play::Redirect(_, hop)) => hop,
                    _ => break,
                };
                from = Some(on);
                // A same-host hop stays where the redirect came from.
                if matches!(hop, Hop::OtherHost(_)) {
                    on = 'b';
                }
                play = hop.next();
            }
            let play = play.filter(|_| depth > 0 && on == server).cloned();
            (play, (index, depth))
        };
        let play_seen = play.clone();
        log.push(Received {
            server,
            path,
            method,
            body,
            referred,
            play: play_seen,
            from,
            credentials,
        });
        (play.unwrap_or(Play::Answer(404, None)), at)
    }

    fn location(&self, hop: &Hop, (index, depth): (usize, usize)) -> String {
        let depth = depth + 1;
        match hop {
            Hop::SameHost(_) => format!("/hop/{index}/{depth}"),
            Hop::OtherHost(_) => format!("{}/hop/{index}/{depth}", self.other_host),
            Hop::Refused => format!("{}/hop/{index}/{depth}", self.refused),
            Hop::Back(_) => FIRST_HOP.to_owned(),
        }
    }
}

/// A request as the servers read it.
struct Request {
    path: String,
    method: String,
    body: Vec<u8>,
    referred: bool,
    credentials: [bool; 4],
}

async fn connection(mut conn: Conn, server: char, shared: Arc<Shared>) {
    while let Some(request) = conn.request().await {
        let has = |name: &str| request.header(name).is_some();
        let request = Request {
            referred: has("referer"),
            credentials: CREDENTIALS.map(has),
            path: request.path,
            method: request.method,
            body: request.body,
        };
        let (play, index) = shared.record(server, request);
        let head = match &play {
            Play::Answer(status, retry_after) => {
                let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: 4\r\n");
                if let Some(value) = retry_after {
                    head += &format!("Retry-After: {value}\r\n");
                }
                head + "\r\nbody"
            }
            Play::Redirect(status, hop) => format!(
                "HTTP/1.1 {status} X\r\nLocation: {}\r\nContent-Length: 0\r\n\r\n",
                shared.location(hop, index)
            ),
            Play::Stall { status, framing, sent } => {
                let part = "x".repeat(*sent);
                match framing {
                    Framing::Chunked => format!(
                        "HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n\r\n{sent:x}\r\n{part}\r\n"
                    ),
                    Framing::ContentLength(length) => {
                        format!("HTTP/1.1 {status} X\r\nContent-Length: {length}\r\n\r\n{part}")
                    }
                }
            }
            Play::Slow | Play::Close | Play::Reset => String::new(),
        };
        if conn.write(head).await.is_err() {
            return;
        }
        match play {
            Play::Answer(..) | Play::Redirect(..) => continue,
            Play::Stall { .. } | Play::Slow => {
                conn.hang().await;
                return;
            }
            Play::Close => return,
            Play::Reset => {
                conn.reset();
                return;
            }
        }
    }
}

fn config(case: &Case) -> RetryConfig {
    let mut builder = RetryConfig::builder()
        .with_max_retries(case.max_retries)
        .with_backoff(
            Backoff::default()
                .with_initial(case.initial)
                .with_max(case.max)
                .with_jitter(case.jitter),
        )
        .with_retry_after(RetryAfter::default().with_cap(case.max_retry_after));
    if let Some(deadline) = case.deadline {
        builder = builder.with_deadline(deadline);
    }
    builder = if case.budget {
        builder.with_budget(RetryBudget::default())
    } else {
        builder.with_budget(None)
    };
    builder.build().expect("the generated policies are valid")
}

/// The method and body a followed redirect sends to its hop, as reqwest
/// rewrites them.
fn hop_request(status: u16, method: &Method, body: &[u8]) -> (Method, Vec<u8>) {
    match status {
        301 | 302 if method == Method::POST => (Method::GET, Vec::new()),
        303 => (Method::GET, Vec::new()),
        _ => (method.clone(), body.to_vec()),
    }
}

/// The redirect statuses that led to the hop `r` arrived at, in order, or
/// `None` if no redirect of the script leads there.
fn chain(case: &Case, r: &Received) -> Option<Vec<u16>> {
    if r.path == FIRST_HOP {
        // Back from a 303 on the first hop.
        return Some(vec![303]);
    }
    let mut parts = r.path.strip_prefix("/hop/")?.split('/');
    let index: usize = parts.next()?.parse().ok()?;
    let depth: usize = parts.next()?.parse().ok()?;
    let mut play = case.script.get(index)?;
    let mut statuses = Vec::new();
    for _ in 0..depth {
        let Play::Redirect(status, hop) = play else { return None };
        statuses.push(*status);
        play = hop.next()?;
    }
    Some(statuses)
}

/// Runs every client on the case at once and reports every failure.
async fn check(case: Case) -> Result<(), TestCaseError> {
    let [following, not_following, handing] = ClientKind::ALL;
    let results =
        tokio::join!(run(&case, following), run(&case, not_following), run(&case, handing));
    let failures: Vec<String> =
        [(following, results.0), (not_following, results.1), (handing, results.2)]
            .into_iter()
            .filter_map(|(kind, result)| match result {
                Err(TestCaseError::Fail(reason)) => {
                    Some(format!("with {kind}: {}", reason.message()))
                }
                Err(TestCaseError::Reject(reason)) => {
                    Some(format!("with {kind}: rejected: {}", reason.message()))
                }
                Ok(()) => None,
            })
            .collect();
    if failures.is_empty() { Ok(()) } else { Err(TestCaseError::fail(failures.join("\n\n"))) }
}

async fn run(case: &Case, kind: ClientKind) -> Result<(), TestCaseError> {
    let world = World::start(case.script.clone()).await;
    let clock = ManualClock::new();
    let decisions = Arc::new(Mutex::new(Vec::new()));
    let hook = decisions.clone();
    let middleware = RetryMiddleware::new(config(case))
        .with_clock(clock.clone())
        .with_jitter_source(SeededJitter::new(case.seed))
        .on_decision(move |event| hook.lock().unwrap().push(event.decision));
    let client = kind.client(middleware, &world.url);
    let slot = ReportSlot::new();
    let mut request = client
        .request(case.method.clone(), &world.url)
        .timeout(CLIENT_TIMEOUT)
        .header("authorization", "Bearer request")
        .body(case.body.0.clone());
    if let Some(key) = &case.key {
        request = request.header("Idempotency-Key", key);
    }
    let call = request.with_extension(slot.clone()).send();
    let Ok(result) = tokio::time::timeout(CALL_BOUND, call).await else {
        return Err(TestCaseError::fail(format!(
            "the call did not finish within {CALL_BOUND:?}; the servers saw:\n{}",
            Log(&world.log())
        )));
    };

    let log = world.log();
    let report = slot.get().expect("a report for every request");
    let attempts = report.attempts as usize;
    let decisions = decisions.lock().unwrap().clone();
    let waits = clock.sleeps();
    let first_hops: Vec<&Received> = log.iter().filter(|r| r.is_first_hop()).collect();

    // Attempts never exceed retries + 1, and the first hop saw no more than
    // were made. Only the client that follows redirects and records them
    // counts any.
    let hops = report.redirects as usize;
    prop_assert!(kind == ClientKind::Handing || hops == 0, "{hops} redirects counted");
    prop_assert!(
        report.attempts <= case.max_retries + 1,
        "{} attempts for {} retries",
        report.attempts,
        case.max_retries
    );
    prop_assert!(
        first_hops.len() <= attempts,
        "the first hop saw {} requests in {attempts} attempts; the servers saw:\n{}",
        first_hops.len(),
        Log(&log)
    );
    prop_assert_eq!(waits.len(), attempts - 1);

    // The core invariant: a request that is not safe to repeat is processed
    // at most once by each handler across all attempts. A redirect's hop is
    // a handler of its own: sending a 307's POST on is not a retry. What a
    // redirect turned into a GET is another request, safe to repeat.
    // A key is trusted only at its origin: through the client the middleware
    // built, which sees every redirect, a request safe only by its key is
    // processed at most once by each handler of the other server.
    let key_only = case.safe() && !case.method.is_idempotent();
    let key_abroad = key_only && kind == ClientKind::Handing;
    if !case.safe() || key_abroad {
        let mut processed: BTreeMap<(char, &str), usize> = BTreeMap::new();
        let unsafe_method = |r: &&Received| r.method == case.method.as_str();
        let watched = |r: &&Received| !case.safe() || r.server == 'b';
        for r in log.iter().filter(|r| r.processed()).filter(unsafe_method).filter(watched) {
            *processed.entry((r.server, r.path.as_str())).or_default() += 1;
        }
        for ((server, path), times) in processed {
            prop_assert!(
                times <= 1,
                "{} {} (idempotency key {:?}) was processed {times} times \
                 at {path} on server {server}, in {attempts} attempts (max_retries {}); the servers saw:\n{}",
                case.method,
                FIRST_HOP,
                case.key,
                case.max_retries,
                Log(&log)
            );
        }
    }

    // The method and body are the same on every attempt, and on every hop
    // they are what reqwest's redirect rules make of them. A client that does
    // not follow redirects never reaches a hop.
    for r in &log {
        let (method, body) = if r.is_first_hop() {
            (case.method.clone(), case.body.0.clone())
        } else {
            prop_assert_ne!(
                kind,
                ClientKind::NotFollowing,
                "a hop was reached; the servers saw:\n{}",
                Log(&log)
            );
            let Some(statuses) = chain(case, r) else {
                return Err(TestCaseError::fail(format!("unexpected request to {}", r.path)));
            };
            statuses.into_iter().fold((case.method.clone(), case.body.0.clone()), |(m, b), s| {
                hop_request(s, &m, &b)
            })
        };
        prop_assert_eq!(r.method.as_str(), method.as_str(), "at {} {}", r.server, r.path);
        prop_assert_eq!(&r.body, &body, "at {} {}", r.server, r.path);
    }

    // Credentials, as reqwest's own following sends them: the request's, the
    // default headers' and the inner middleware's reach a first hop, or a
    // hop whose redirect came from the same server; never one that a
    // redirect brought from the other. The store's cookie is kept by host,
    // which both servers share.
    for r in &log {
        let kept = r.from.is_none_or(|from| from == r.server);
        for (name, carried) in CREDENTIALS.iter().zip(r.credentials).take(3) {
            prop_assert_eq!(
                carried,
                kept,
                "{} at {} {} (redirected from {:?}); the servers saw:\n{}",
                name,
                r.server,
                r.path,
                r.from,
                Log(&log)
            );
        }
        prop_assert!(r.credentials[3], "the cookie store's cookie at {} {}", r.server, r.path);
    }

    // Every wait is within [0, max_backoff] or is an honoured Retry-After.
    // Attempt n met the first hop's nth play whenever every attempt reached
    // the first hop.
    let mapped = first_hops.len() == attempts && hops == 0;
    let retries = decisions.iter().filter_map(|decision| match decision {
        Decision::Retry { after, reason } => Some((after, reason)),
        _ => None,
    });
    // Whether an earlier answer paused the host: then the next attempt is
    // the pause's probe, and a probe refused again with no time named holds
    // the host, and its retry, for the first backoff step.
    let mut paused = false;
    for (attempt, (after, reason)) in retries.enumerate() {
        prop_assert_eq!(*after, waits[attempt]);
        let seen = first_hops.get(attempt).and_then(|r| r.play.as_ref()).and_then(|p| p.seen(kind));
        let header = match (reason, seen) {
            (RetryReason::Status(status), Some((code, header))) if mapped => {
                prop_assert_eq!(status.as_u16(), code);
                header
            }
            _ => None,
        };
        // A date is measured from the wall clock, which the waits so far
        // have moved on.
        let now = wall_start() + waits[..attempt].iter().sum::<Duration>();
        let asked = header.and_then(|value| {
            let value = http::HeaderValue::from_str(value).unwrap();
            reqwest_safe_retry::rate_limit::parse_retry_after(&value, now)
        });
        match asked {
            Some(asked) => {
                // A floor: the server's value, spread upwards by at most this
                // retry's backoff ceiling (not at all without jitter).
                let factor = 1u32.checked_shl(attempt as u32).unwrap_or(u32::MAX);
                let ceiling = case.initial.checked_mul(factor).unwrap_or(case.max).min(case.max);
                let spread = if case.jitter == Jitter::None { Duration::ZERO } else { ceiling };
                let held = if paused && asked.is_zero() {
                    case.initial.min(case.max)
                } else {
                    Duration::ZERO
                };
                prop_assert!(
                    asked <= *after && *after <= asked + spread.max(held),
                    "{after:?} for {asked:?}"
                );
                prop_assert!(asked <= case.max_retry_after);
                paused |= !asked.is_zero();
            }
            None if mapped => prop_assert!(*after <= case.max),
            None => prop_assert!(*after <= case.max_retry_after.saturating_add(case.max)),
        }
    }

    // Total waiting never exceeds the deadline.
    if let Some(deadline) = case.deadline {
        prop_assert!(clock.total_slept() <= deadline);
    }

    // What the caller got is what the last attempt met, when it was an answer.
    if let (Ok(response), Some(last), true) = (&result, first_hops.last(), mapped) {
        if let Some((status, _)) = last.play.as_ref().and_then(|p| p.seen(kind)) {
            prop_assert_eq!(response.status().as_u16(), status);
        }
    }
    Ok(())
}

#[test]
fn retries_never_repeat_what_is_unsafe_and_stay_in_bounds() {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        // Enough to shrink a failing case to its essentials, without letting
        // candidates that stall make shrinking run for minutes.
        max_shrink_iters: 1024,
        max_shrink_time: 20_000,
        failure_persistence: None,
        ..Config::default()
    });
    match runner.run(&case(), |case| runtime.block_on(check(case))) {
        Ok(()) => {}
        Err(TestError::Fail(reason, case)) => {
            panic!("{}\n\nminimal failing case:\n{case:#?}", reason.message())
        }
        Err(TestError::Abort(reason)) => panic!("aborted: {}", reason.message()),
    }
}
