//! The loopback server the replicas call: the integration tests' raw
//! HTTP/1 server (`tests/all/support/raw.rs`) with a rule for what it
//! accepts, and a log of every request it read and how it was answered.

use std::sync::{Arc, Mutex};
use std::time::Instant;

#[path = "../../../../tests/all/support/raw.rs"]
mod raw;

use raw::{Conn, RawServer};

/// What the server accepts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rule {
    /// Everything, `200`.
    Everything,
    /// `quota` requests, then a pause of `pause_ms` in which every request
    /// is answered `429` with the whole seconds left as `Retry-After`;
    /// then the quota again: a rate limiter with a shared quota.
    Quota { quota: u32, pause_ms: u64 },
    /// A token bucket of `rate` requests a second and `depth` tokens,
    /// `503` with no `Retry-After` above it, until `until_ms` (from the
    /// run's start), after which everything is accepted.
    Bucket { rate: f64, depth: f64, until_ms: Option<f64> },
}

/// One request as the server read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    /// Milliseconds since the run's start.
    pub(crate) at: f64,
    /// Whether it was accepted (`200`).
    pub(crate) accepted: bool,
}

/// The server's log and the state of its rule.
#[derive(Debug)]
pub(crate) struct Log {
    start: Instant,
    rule: Rule,
    arrivals: Vec<Arrival>,
    /// The quota's: taken since the last pause, and when the pause ends.
    taken: u32,
    until: Option<f64>,
    /// When each of the quota's pauses began.
    pub(crate) pauses: Vec<f64>,
    /// The bucket's: tokens, and when they were counted.
    tokens: f64,
    counted: f64,
}

impl Log {
    fn new(start: Instant, rule: Rule) -> Self {
        let tokens = match rule {
            Rule::Bucket { depth, .. } => depth,
            _ => 0.0,
        };
        Self {
            start,
            rule,
            arrivals: Vec::new(),
            taken: 0,
            until: None,
            pauses: Vec::new(),
            tokens,
            counted: 0.0,
        }
    }

    /// Answers a request arriving now: the status, and the
    /// `Retry-After` seconds, if any.
    fn answer(&mut self) -> (u16, Option<u64>) {
        let at = self.start.elapsed().as_secs_f64() * 1000.0;
        let (status, wait) = self.rule_says(at);
        self.arrivals.push(Arrival { at, accepted: status == 200 });
        (status, wait)
    }

    fn rule_says(&mut self, at: f64) -> (u16, Option<u64>) {
        match self.rule {
            Rule::Everything => (200, None),
            Rule::Quota { quota, pause_ms } => {
                if let Some(until) = self.until.filter(|until| at < *until) {
                    let left = ((until - at) / 1000.0).ceil().max(1.0) as u64;
                    return (429, Some(left));
                }
                self.until = None;
                self.taken += 1;
                if self.taken <= quota {
                    return (200, None);
                }
                self.taken = 0;
                self.until = Some(at + pause_ms as f64);
                self.pauses.push(at);
                (429, Some(pause_ms.div_ceil(1000)))
            }
            Rule::Bucket { rate, depth, until_ms } => {
                if until_ms.is_some_and(|until| at >= until) {
                    return (200, None);
                }
                self.tokens = (self.tokens + (at - self.counted) / 1000.0 * rate).min(depth);
                self.counted = at;
                if self.tokens >= 1.0 {
                    self.tokens -= 1.0;
                    (200, None)
                } else {
                    (503, None)
                }
            }
        }
    }

    /// Every request read so far.
    pub(crate) fn arrivals(&self) -> &[Arrival] {
        &self.arrivals
    }
}

/// The running server.
pub(crate) struct Server {
    raw: RawServer,
    log: Arc<Mutex<Log>>,
}

impl Server {
    /// Starts one on `127.0.0.1` with `rule`, its clock from `start`.
    pub(crate) async fn start(rule: Rule, start: Instant) -> Self {
        let log = Arc::new(Mutex::new(Log::new(start, rule)));
        let serving = log.clone();
        let raw = RawServer::start(move |conn| serve(conn, serving.clone())).await;
        Self { raw, log }
    }

    /// `http://127.0.0.1:port`.
    pub(crate) fn url(&self) -> String {
        self.raw.url("")
    }

    /// The port.
    pub(crate) fn port(&self) -> u16 {
        self.raw.addr().port()
    }

    /// The log, read when the run is over.
    pub(crate) fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Serves one connection: each request answered by the rule, kept alive.
async fn serve(mut conn: Conn, log: Arc<Mutex<Log>>) {
    while conn.request().await.is_some() {
        let (status, wait) = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).answer();
        let reason = match status {
            200 => "OK",
            429 => "Too Many Requests",
            _ => "Service Unavailable",
        };
        let retry_after = wait.map(|s| format!("retry-after: {s}\r\n")).unwrap_or_default();
        let body = if status == 200 { "ok" } else { "" };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\n{retry_after}\r\n{body}",
            body.len()
        );
        if conn.write(head).await.is_err() {
            return;
        }
    }
}
