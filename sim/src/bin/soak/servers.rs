//! The servers: the integration tests' raw HTTP/1 server
//! (`tests/all/support/raw.rs`), on loopback only, behind many listeners
//! that come and go.
//!
//! Listeners are bound on 127.0.0.2 to 127.0.0.51 (Linux routes all of
//! 127.0.0.0/8 to loopback), on ports the system picks, a new one whenever
//! fewer than [`SPARE`] are left that no call has used. Three calls in four
//! go to a listener no call has used, the others to one of the [`WINDOW`]
//! most recently first-used ones, so the client meets a steady stream of
//! new hosts, and sees some of them again. A listener that has left that window and has
//! not been picked for [`GRACE`] (longer than any call) is closed, so the
//! file descriptors in use stay bounded while the hosts the client has seen
//! grow without bound. Refused connections go to ports on 127.0.0.60, bound
//! once and closed at the start, where nothing listens again.
//!
//! Each request names its call (`x-call-id`); the [`Ledger`] counts what
//! every handler processed for it. Keep-alive connections are closed after
//! [`IDLE`] without a request.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::RngExt;
use tokio::task::JoinHandle;

use crate::checks::{Gauge, Ledger};
use crate::faults::{Kind, Play, Step, Target};

#[path = "../../../../tests/all/support/raw.rs"]
mod raw;

use raw::{Conn, RawServer};

/// Listeners are bound on 127.0.0.2 to 127.0.0.(1 + ADDRESSES).
pub(crate) const ADDRESSES: u8 = 50;
/// Where nothing listens: ports bound once there, then closed.
const REFUSED_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 60);
/// Refused ports.
pub(crate) const REFUSED_PORTS: usize = 16;
/// Listeners kept bound that no call has used yet.
const SPARE: u64 = 64;
/// The most recently first-used listeners, which calls and redirects go to
/// again.
const WINDOW: u64 = 256;
/// A listener out of the window and not picked for this long is closed.
const GRACE: Duration = Duration::from_secs(3);
/// A keep-alive connection without a request for this long is closed.
const IDLE: Duration = Duration::from_secs(5);

/// What the servers counted.
#[derive(Debug, Default)]
pub(crate) struct ServerStats {
    /// Requests read whole.
    pub(crate) received: AtomicU64,
    /// Of those, the ones the handler may have acted on.
    pub(crate) processed: AtomicU64,
    /// Requests by what the handler played.
    pub(crate) kinds: [AtomicU64; Kind::ALL.len()],
    /// Requests without a call id, answered 400 (none expected).
    pub(crate) anonymous: AtomicU64,
    /// Requests that came by a redirect from another listener (another
    /// origin) carrying a credential: reqwest's own following strips them
    /// there, so none is expected.
    pub(crate) leaked_credentials: AtomicU64,
    /// Requests that came by a redirect from another listener.
    pub(crate) crossed: AtomicU64,
    pub(crate) accepted: AtomicU64,
    pub(crate) accept_errors: AtomicU64,
    /// Connection tasks alive.
    pub(crate) connections: Gauge,
    /// Accept loops alive.
    pub(crate) accepting: Gauge,
    /// Listeners bound over the run.
    pub(crate) bound: AtomicU64,
    /// Listeners that accepted at least one connection.
    pub(crate) reached: AtomicU64,
    /// Listeners bound at once, at most.
    pub(crate) most_bound: AtomicU64,
}

/// One listener: its address, when a call or redirect last picked it, and
/// its server, which stops accepting when dropped.
#[derive(Debug)]
struct Slot {
    addr: SocketAddr,
    /// Milliseconds since the fleet started.
    last_pick: AtomicU64,
    server: RawServer,
}

/// The live listeners, oldest first; `first` is the sequence number of the
/// front one. Listeners are picked for the first time in the order they
/// were bound: those before `fresh` have been.
#[derive(Debug)]
struct Ring {
    slots: VecDeque<Slot>,
    first: u64,
    fresh: u64,
    next_ip: u8,
}

/// Everything the servers share.
#[derive(Debug)]
pub(crate) struct Fleet {
    ring: Mutex<Ring>,
    refused: Vec<SocketAddr>,
    /// Live listeners at most, from the file-descriptor limit.
    cap: usize,
    origin: Instant,
    stopped: AtomicBool,
    pub(crate) ledger: Ledger,
    pub(crate) stats: ServerStats,
}

impl Fleet {
    /// Binds the refused ports and the first listeners, and starts the task
    /// that keeps the spare ones coming.
    pub(crate) fn start(cap: usize) -> (Arc<Fleet>, JoinHandle<()>) {
        let refused = (0..REFUSED_PORTS)
            .map(|_| {
                let listener = std::net::TcpListener::bind((REFUSED_IP, 0)).expect("bind loopback");
                listener.local_addr().expect("an address")
            })
            .collect();
        let fleet = Arc::new(Fleet {
            ring: Mutex::new(Ring { slots: VecDeque::new(), first: 0, fresh: 0, next_ip: 0 }),
            refused,
            cap: cap.max(2 * (WINDOW + SPARE) as usize),
            origin: Instant::now(),
            stopped: AtomicBool::new(false),
            ledger: Ledger::default(),
            stats: ServerStats::default(),
        });
        fleet.top_up();
        let keeper = fleet.clone();
        let task = tokio::spawn(async move {
            while !keeper.stopped.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(2)).await;
                keeper.top_up();
                keeper.retire();
            }
        });
        (fleet, task)
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Binds listeners until [`SPARE`] are unused, within the cap.
    fn top_up(self: &Arc<Self>) {
        loop {
            let next_ip = {
                let mut ring = self.ring();
                let unused = (ring.first + ring.slots.len() as u64).saturating_sub(ring.fresh);
                let stopped = self.stopped.load(Ordering::Relaxed);
                if stopped || unused >= SPARE || ring.slots.len() >= self.cap {
                    return;
                }
                ring.next_ip = (ring.next_ip + 1) % ADDRESSES;
                ring.next_ip
            };
            let ip = Ipv4Addr::new(127, 0, 0, 2 + next_ip);
            let Some(server) = listen(ip, self.clone()) else {
                self.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let slot =
                Slot { addr: server.addr(), last_pick: AtomicU64::new(self.now_ms()), server };
            let mut ring = self.ring();
            ring.slots.push_back(slot);
            self.stats.bound.fetch_add(1, Ordering::Relaxed);
            self.stats.most_bound.fetch_max(ring.slots.len() as u64, Ordering::Relaxed);
        }
    }

    /// Closes the oldest listeners that no call can pick any more.
    fn retire(&self) {
        let now = self.now_ms();
        let mut ring = self.ring();
        while let Some(front) = ring.slots.front() {
            let out_of_window = ring.first + WINDOW < ring.fresh;
            let idle = now.saturating_sub(front.last_pick.load(Ordering::Relaxed))
                > GRACE.as_millis() as u64;
            if !(out_of_window && idle) {
                break;
            }
            let slot = ring.slots.pop_front().expect("a front");
            self.close(slot);
            ring.first += 1;
        }
    }

    /// A listener for a call's first hop: one never used when `fresh` (if
    /// one is bound), else one of the most recently first-used.
    pub(crate) fn pick(&self, fresh: bool, rng: &mut impl rand::Rng) -> SocketAddr {
        let now = self.now_ms();
        let mut ring = self.ring();
        if ring.slots.is_empty() {
            // Stopped: nothing listens anywhere.
            return self.refused[0];
        }
        let end = ring.first + ring.slots.len() as u64;
        let none_used = ring.fresh == ring.first;
        let seq = if (fresh || none_used) && ring.fresh < end {
            ring.fresh += 1;
            ring.fresh - 1
        } else {
            // One of the newest used, or the newest bound if none was.
            let low = ring.fresh.saturating_sub(WINDOW).max(ring.first);
            let high = ring.fresh.max(low + 1).min(end);
            rng.random_range(low..high)
        };
        let slot = &ring.slots[(seq - ring.first) as usize];
        slot.last_pick.store(now, Ordering::Relaxed);
        slot.addr
    }

    /// Listeners picked for a first hop so far: distinct hosts the client
    /// was sent to.
    pub(crate) fn hosts_used(&self) -> u64 {
        self.ring().fresh
    }

    /// Listeners bound now.
    pub(crate) fn listeners(&self) -> usize {
        self.ring().slots.len()
    }

    /// A port where nothing listens.
    pub(crate) fn refused(&self, rng: &mut impl rand::Rng) -> SocketAddr {
        self.refused[rng.random_range(0..self.refused.len())]
    }

    /// Closes every listener and stops binding new ones.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        let mut ring = self.ring();
        while let Some(slot) = ring.slots.pop_front() {
            self.close(slot);
            ring.first += 1;
        }
    }

    /// Stops a listener accepting, and keeps the count of its failed
    /// accepts.
    fn close(&self, slot: Slot) {
        let failed = slot.server.accept_errors() as u64;
        self.stats.accept_errors.fetch_add(failed, Ordering::Relaxed);
    }
}

/// A listener on `ip`, on a port the system picks, serving the fleet.
fn listen(ip: Ipv4Addr, fleet: Arc<Fleet>) -> Option<RawServer> {
    let listener = std::net::TcpListener::bind((ip, 0)).ok()?;
    let here: Arc<str> = listener.local_addr().ok()?.to_string().into();
    let alive = AcceptLoop::new(fleet);
    let handler = move |conn: Conn| {
        let fleet = alive.0.clone();
        fleet.stats.accepted.fetch_add(1, Ordering::Relaxed);
        if conn.index() == 0 {
            fleet.stats.reached.fetch_add(1, Ordering::Relaxed);
        }
        connection(conn, fleet, here.clone())
    };
    // Out of file descriptors, most likely: accept again a little later.
    let after_error = || tokio::time::sleep(Duration::from_millis(10));
    RawServer::on(listener, handler, after_error).ok()
}

/// Counts an accept loop alive while it lives: its handler owns it, and
/// the loop owns the handler.
#[derive(Debug)]
struct AcceptLoop(Arc<Fleet>);

impl AcceptLoop {
    fn new(fleet: Arc<Fleet>) -> Self {
        fleet.stats.accepting.add(1);
        AcceptLoop(fleet)
    }
}

impl Drop for AcceptLoop {
    fn drop(&mut self) {
        self.0.stats.accepting.add(-1);
    }
}

/// A request as the server read it.
#[derive(Debug)]
struct Request {
    method: String,
    path: String,
    call: Option<u64>,
    /// Marked by the client as not safe to repeat, and sent with the
    /// method it was marked for (a POST a 303 turned into a GET is another,
    /// safe request).
    not_safe: bool,
    /// The body's length as read, and as the caller sent it, when the
    /// request still has the caller's method (a redirect to a GET drops
    /// the body).
    body: Option<(usize, usize)>,
    /// The caller sent its body as a stream.
    streamed: bool,
    /// Sent by following a redirect.
    referred: bool,
    /// The listener whose redirect led here, from the `from` query.
    from: Option<String>,
    /// It carried `Authorization`, `Cookie`, `Cookie2`,
    /// `Proxy-Authorization` or `WWW-Authenticate`.
    credentials: bool,
}

impl Request {
    /// The request as the ledger needs it; `None` for a request line
    /// without a target or a `Content-Length` that is not a number, which
    /// end the connection.
    fn of(raw: raw::Request) -> Option<Request> {
        let raw::Request { method, path: target, headers, body, .. } = raw;
        if target.is_empty() {
            return None;
        }
        let (path, from) = match target.split_once("?from=") {
            Some((path, from)) => (path.to_owned(), Some(from.to_owned())),
            None => (target.clone(), None),
        };
        let mut credentials = false;
        let (mut call, mut referred) = (None, false);
        let (mut original, mut marked, mut sent) = (None::<String>, false, None::<usize>);
        let mut streamed = false;
        for (name, value) in &headers {
            match name.to_ascii_lowercase().as_str() {
                "content-length" => _ = value.parse::<usize>().ok()?,
                "x-call-id" => call = value.parse().ok(),
                "x-method" => original = Some(value.clone()),
                "x-not-safe" => marked = true,
                "x-body-length" => sent = value.parse().ok(),
                "x-streamed" => streamed = true,
                "referer" => referred = true,
                "authorization"
                | "cookie"
                | "cookie2"
                | "proxy-authorization"
                | "www-authenticate" => {
                    credentials = true;
                }
                _ => {}
            }
        }
        let as_sent = original.is_some_and(|original| original == method);
        let not_safe = marked && as_sent;
        let body = sent.filter(|_| as_sent).map(|sent| (body.len(), sent));
        Some(Request { method, path, call, not_safe, referred, body, streamed, from, credentials })
    }
}

async fn connection(mut conn: Conn, fleet: Arc<Fleet>, here: Arc<str>) {
    let _alive = fleet.stats.connections.enter();
    loop {
        let request = match tokio::time::timeout(IDLE, conn.request()).await {
            Ok(Some(request)) => request,
            _ => return,
        };
        let Some(request) = Request::of(request) else { return };
        fleet.stats.received.fetch_add(1, Ordering::Relaxed);
        let Some(call) = request.call else {
            fleet.stats.anonymous.fetch_add(1, Ordering::Relaxed);
            let _ = conn.write(b"HTTP/1.1 400 X\r\nContent-Length: 0\r\n\r\n").await;
            return;
        };
        if let Some((read, sent)) = request.body {
            if read != sent {
                let what = if request.streamed { "streamed" } else { "bytes" };
                fleet.ledger.lost_body(call, &request.method, &request.path, (read, sent, what));
            }
        }
        if request.from.as_deref().is_some_and(|from| from != &*here) {
            fleet.stats.crossed.fetch_add(1, Ordering::Relaxed);
            if request.credentials {
                fleet.stats.leaked_credentials.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (step, rest) = handler_step(&request);
        let play =
            fleet.ledger.serve(call, &request.path, &request.method, request.not_safe, |n| {
                Play::of(step, n)
            });
        fleet.stats.kinds[play.kind() as usize].fetch_add(1, Ordering::Relaxed);
        if play.processed() {
            fleet.stats.processed.fetch_add(1, Ordering::Relaxed);
        }
        if let Play::Reset = play {
            conn.reset();
            return;
        }
        let rest = format!("{rest}?from={here}");
        if !respond(&mut conn, play, &request, &rest, &here, &fleet).await {
            return;
        }
    }
}

/// The step this handler plays for `request`, and the path of the steps
/// after it, for a redirect to lead to.
fn handler_step(request: &Request) -> (Step, String) {
    let mut segments = request.path.trim_start_matches('/').split('/');
    let _hop = segments.next();
    let mut step = segments.next().and_then(Step::parse).unwrap_or(Step::Ok);
    let mut rest: Vec<&str> = segments.collect();
    // Back from a 303 to this URL: the rest of the path is served here.
    if step == (Step::Redirect { code: 303, to: Target::Back }) && request.referred {
        step = rest.first().and_then(|s| Step::parse(s)).unwrap_or(Step::Ok);
        rest.remove(0);
    }
    let rest = if rest.is_empty() { "ok".to_owned() } else { rest.join("/") };
    (step, format!("/h/{rest}"))
}

/// Plays `play` (a reset aside); whether the connection can take another
/// request.
async fn respond(
    conn: &mut Conn,
    play: Play,
    request: &Request,
    rest: &str,
    here: &str,
    fleet: &Fleet,
) -> bool {
    const BODY: &str = "{\"order\":1,\"status\":\"ok\",\"padding\":\"................\"}";
    let head = match play {
        Play::Answer { code, retry_after } => {
            let body = if code == 200 { BODY } else { "busy" };
            let retry_after =
                retry_after.map_or(String::new(), |ra| format!("Retry-After: {ra}\r\n"));
            format!(
                "HTTP/1.1 {code} X\r\n{retry_after}Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
        }
        Play::Redirect { code, to } => {
            let location = match to {
                Target::Same => rest.to_owned(),
                Target::Other => {
                    let other = fleet.pick(false, &mut rand::rng());
                    format!("http://{other}{rest}")
                }
                Target::Refused => format!("http://{}{rest}", fleet.refused(&mut rand::rng())),
                Target::Back => format!("{}?from={here}", request.path),
            };
            format!("HTTP/1.1 {code} X\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n")
        }
        Play::Loop { code } => {
            format!(
                "HTTP/1.1 {code} X\r\nLocation: {}?from={here}\r\nContent-Length: 0\r\n\r\n",
                request.path
            )
        }
        Play::Stall { chunked: true } => {
            "HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789".to_owned()
        }
        Play::Stall { chunked: false } => {
            "HTTP/1.1 200 X\r\nContent-Length: 4096\r\n\r\n01234567".to_owned()
        }
        Play::Trickle { bytes, .. } => format!("HTTP/1.1 200 X\r\nContent-Length: {bytes}\r\n\r\n"),
        Play::Slow { .. } | Play::Reset => String::new(),
    };
    if !head.is_empty() && conn.write(head).await.is_err() {
        return false;
    }
    match play {
        Play::Answer { .. } | Play::Redirect { .. } | Play::Loop { .. } => true,
        Play::Stall { .. } => {
            // Hold the connection until the client goes away.
            conn.hang().await;
            false
        }
        Play::Trickle { every_ms, bytes } => {
            // A byte every `every_ms`, the first one too.
            let every = Duration::from_millis(every_ms);
            for _ in 0..bytes {
                tokio::time::sleep(every).await;
                if conn.write(b"x").await.is_err() {
                    return false;
                }
            }
            true
        }
        Play::Slow { ms } => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let answer = format!("HTTP/1.1 200 X\r\nContent-Length: {}\r\n\r\n{BODY}", BODY.len());
            conn.write(answer).await.is_ok()
        }
        Play::Reset => false,
    }
}
