//! What a rule injects: a response, an error of the transport, a body cut
//! short, or time.

use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderValue, StatusCode};

/// One fault a [`Rule`](super::Rule) injects. Each is built by a function
/// of its own; the [module docs](super) say what the retry middleware
/// makes of each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault(pub(super) Kind);

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A response, in place of the server's.
    Response { status: StatusCode, headers: HeaderMap },
    /// A connection refused: the request never left.
    Refused,
    /// reqwest's timeout, after `after` on the clock.
    Timeout { after: Duration },
    /// The connection reset after the server read the request.
    Reset,
    /// The server's response, its body failing after `after` bytes.
    CutBody { after: usize },
    /// The server's response, `by` later.
    Latency { by: Duration },
}

impl Fault {
    /// A response of `status` with no headers and an empty body, in place
    /// of the server's: the request is not sent.
    pub fn status(status: StatusCode) -> Self {
        Self::response(status, HeaderMap::new())
    }

    /// A response of `status` with `headers` and an empty body, in place of
    /// the server's: the request is not sent.
    ///
    /// ```
    /// use http::{HeaderMap, HeaderValue, StatusCode};
    /// use reqwest_safe_retry::chaos::Fault;
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
    /// let fault = Fault::response(StatusCode::TOO_MANY_REQUESTS, headers);
    /// # let _ = fault;
    /// ```
    pub fn response(status: StatusCode, headers: HeaderMap) -> Self {
        Self(Kind::Response { status, headers })
    }

    /// A response of `status` whose `Retry-After` asks for `after`, in
    /// whole seconds rounded up (the header has no finer unit).
    pub fn retry_after(status: StatusCode, after: Duration) -> Self {
        let seconds = after.as_secs().saturating_add(u64::from(after.subsec_nanos() > 0));
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        Self::response(status, headers)
    }

    /// A refused connection: the error reqwest returns when nothing listens
    /// at the server's port, so the request never reached a server.
    pub fn refused() -> Self {
        Self(Kind::Refused)
    }

    /// reqwest's timeout of a request that went out and got no answer in
    /// time, at once.
    pub fn timeout() -> Self {
        Self::timeout_after(Duration::ZERO)
    }

    /// reqwest's timeout, after waiting `after` on the middleware's clock
    /// (or the request's own timeout, if that is shorter): a server that
    /// took the request and never answered.
    pub fn timeout_after(after: Duration) -> Self {
        Self(Kind::Timeout { after })
    }

    /// A connection reset after the server read the whole request and
    /// before it answered: the server may have acted on it.
    pub fn reset() -> Self {
        Self(Kind::Reset)
    }

    /// The server's own response, whose body fails after `after` bytes as
    /// if the connection closed there (at its end, if it is shorter): the
    /// request is sent as usual. A response that has no body (to a HEAD,
    /// or a 1xx, 204 or 304) is passed on whole. The response keeps its
    /// headers, `Content-Length` included.
    pub fn cut_body(after: usize) -> Self {
        Self(Kind::CutBody { after })
    }

    /// The request passed on to the server after `by` on the middleware's
    /// clock, as a slow network or a queue in front of the server would
    /// hold it. The request's own timeout (`RequestBuilder::timeout`)
    /// counts the wait in: one not longer than `by` ends the call as
    /// reqwest would, at the timeout with reqwest's timeout error, and the
    /// request never reaches the server. (A timeout set on the
    /// `reqwest::ClientBuilder` is not visible to a middleware, and does
    /// not count the wait.)
    pub fn latency(by: Duration) -> Self {
        Self(Kind::Latency { by })
    }

    /// The fault's label in events and records: `status`, `refused`,
    /// `timeout`, `reset`, `cut_body` or `latency`.
    pub fn label(&self) -> &'static str {
        match self.0 {
            Kind::Response { .. } => "status",
            Kind::Refused => "refused",
            Kind::Timeout { .. } => "timeout",
            Kind::Reset => "reset",
            Kind::CutBody { .. } => "cut_body",
            Kind::Latency { .. } => "latency",
        }
    }

    /// Whether the request goes on to the server: a body cut short and
    /// latency send it (latency unless the request's own timeout ends
    /// first), the others do not.
    pub fn sends_request(&self) -> bool {
        matches!(self.0, Kind::CutBody { .. } | Kind::Latency { .. })
    }
}
