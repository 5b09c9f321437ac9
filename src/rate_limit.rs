//! What a server says about its limits, and what the middleware makes of
//! it: the wait a `Retry-After` asks for, and the pause it puts a host in
//! for every call of the middleware.
//!
//! # Why a pause shared by the host's calls
//!
//! A server that answers one call `429 Too Many Requests` with
//! `Retry-After: 2` is not asking that call alone to wait: it is shedding
//! the client's load. If each call honoured only the wait it was told,
//! every other call in the process would go on sending first attempts
//! during those two seconds, and each would be told the same; the calls
//! that waited would come back together and be refused again, until the
//! retry budget ran dry. So the middleware pauses the host: every call
//! about to send to it waits until the time the server named, and when
//! the pause ends one request goes first, the probe. If the server asks
//! for another wait, the host is paused again and the others sent nothing;
//! if not, they go, each after a spread of its own. A host that keeps
//! asking gets one request a pause from the process.
//!
//! [`RetryAfter::with_pause`](crate::RetryAfter::with_pause) says which
//! answers pause a host and turns the pause off. A call that cannot wait
//! ends with [`HostPaused`]: when its deadline comes first, or when it
//! carries [`ReturnIfPaused`].

use std::time::{Duration, SystemTime};

use http::HeaderValue;

/// Marks one request as one that does not wait for its host's pause: if
/// the host is paused when it is about to be sent, the call ends at once
/// with [`HostPaused`]; if its own answer pauses the host, that answer is
/// returned rather than retried after the pause.
///
/// ```
/// use reqwest_safe_retry::rate_limit::ReturnIfPaused;
///
/// # fn build(client: &reqwest_middleware::ClientWithMiddleware) {
/// // A health check that reports a paused server rather than wait for it.
/// let _ = client.get("http://example.test/health").with_extension(ReturnIfPaused);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReturnIfPaused;

/// The call's host is paused at its server's request, and the call did not
/// wait: its deadline would pass first, or it carries [`ReturnIfPaused`].
/// Nothing was sent in the attempt it would have made.
///
/// It comes inside [`reqwest_middleware::Error::Middleware`]:
///
/// ```
/// # fn check(error: &reqwest_middleware::Error) -> Option<std::time::Duration> {
/// use reqwest_safe_retry::rate_limit::HostPaused;
///
/// match error {
///     reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<HostPaused>().map(HostPaused::wait),
///     _ => None,
/// }
/// # }
/// ```
///
/// The call's [`RetryReport`](crate::report::RetryReport) stops with
/// [`StopReason::HostPaused`](crate::report::StopReason::HostPaused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("host paused at its server's request for {wait:?} more, after {attempts} attempt(s)")]
pub struct HostPaused {
    wait: Duration,
    attempts: u32,
}

impl HostPaused {
    pub(crate) fn new(wait: Duration, attempts: u32) -> Self {
        Self { wait, attempts }
    }

    /// How long the call would have waited before sending: the rest of the
    /// pause and its spread, or, while another call's probe is in flight,
    /// the time before it would have looked again.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Attempts the call sent before it stopped: `0` when its first was
    /// held back.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// The wait a `Retry-After` value asks for, measured from `now`.
///
/// The middleware calls this with the time of the response's own `Date`
/// header when it has a valid one (so a client whose clock is off waits what
/// the server meant), and otherwise with its [`Clock`](crate::clock::Clock)'s wall
/// time; it is public for clients that read the header themselves.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderValue;
/// use reqwest_safe_retry::rate_limit::parse_retry_after;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_770);
/// let date = HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT");
/// assert_eq!(parse_retry_after(&date, now), Some(Duration::from_secs(7)));
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("120"), now), Some(Duration::from_secs(120)));
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("soon"), now), None);
/// ```
///
/// Accepts delay-seconds (`120`) and an HTTP date in any of the three forms
/// RFC 9110 allows (IMF-fixdate, RFC 850, asctime). A date in the past asks
/// for no wait. A number too large for a `u64` saturates, so it reads as
/// "longer than any cap". Anything else — empty, negative, fractional, a
/// malformed date, bytes that are not visible ASCII — is `None`: the caller
/// ignores the header and falls back to its own backoff.
pub fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if text.is_empty() {
        return None;
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let secs = text.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}
