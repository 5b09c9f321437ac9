//! What a server says about its limits, and what the middleware makes of
//! it: the wait a `Retry-After` asks for, the pause it puts a host in for
//! every call of the middleware, and the throttle on first attempts to a
//! host that turns most requests away.
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
//!
//! # Why first attempts are throttled
//!
//! The retry budget bounds retries, but a host that is down, or in
//! overload, still gets every new call of every process. So each middleware
//! keeps, per host, the share of first attempts it lets through, moved by
//! the host's recent answers: down when fewer than one attempt in 2.7 was
//! accepted, up when more were. A call the share keeps back ends at once
//! with [`Throttled`], unsent, and earns the budget nothing.
//!
//! - **An outage** is shed within seconds: ten rejections in a row over
//!   six seconds halve the share with each further one, down to a
//!   twentieth. A call still goes whenever none went for 2.5 s, and the
//!   first one the host accepts lets every call through again.
//! - **An overload** settles where the host accepts about one attempt in
//!   2.7, the balance of Google's client-side throttling: enough to keep
//!   the server busy, not ten times what it can take. When it ends, calls
//!   that fell to what the host was taking go at once, and a run of
//!   accepted answers too long to be chance (seven in a row, over a second
//!   with no rejection, where one in 2.7 was accepted) lets every call
//!   through again.
//! - **A host failing half its answers independently of load** is left
//!   alone: the ratio rests on about 40 recent answers, and half of them
//!   accepted is well above one in 2.7.
//! - **A quiet caller** (fewer than 0.75 calls a second to the host,
//!   measured over about ten seconds, so that a burst of eight or more
//!   counts as busy) is never throttled.
//! - **Old news is dropped**: a host neither called nor heard from for a
//!   minute is judged afresh on what it answers next.
//!
//! Rejections are `429`, `502`, `503` and `504` answers, refused or
//! unreachable connections, and connect and read timeouts; every other
//! answer is accepted, and other errors count as neither. The README's
//! herd simulation compares this with the field's other designs.
//!
//! [`RetryConfigBuilder::with_throttling`](crate::RetryConfigBuilder::with_throttling)
//! turns it off for a middleware, and [`SkipThrottling`] for one request.

use std::fmt;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue};

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
/// wait: its deadline would pass first, it carries [`ReturnIfPaused`], or
/// it has already waited on its host's pauses as long as the `Retry-After`
/// cap allows in all (see [`RetryAfter::cap`](crate::RetryAfter::cap);
/// one backoff spread beyond it), as when a pause is renewed again and
/// again, or another process's probe never settles. Nothing was sent in
/// the attempt it would have made.
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

/// Marks one request as one the host's throttle never keeps back: it is
/// sent whatever share of first attempts the host gets. Its answer still
/// counts towards the host's share.
///
/// ```
/// use reqwest_safe_retry::rate_limit::SkipThrottling;
///
/// # fn build(client: &reqwest_middleware::ClientWithMiddleware) {
/// // A payment's confirmation goes even while its host sheds load.
/// let _ = client.get("http://example.test/confirm").with_extension(SkipThrottling);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkipThrottling;

/// The call's first attempt was kept back: its host has been turning most
/// requests away, and the call fell outside the share of first attempts
/// the host gets for now. Nothing was sent, and the call earned the retry
/// budget nothing.
///
/// Its message says how the host answered lately and how to send every
/// call anyway: [`with_throttling(false)`](crate::RetryConfigBuilder::with_throttling)
/// for a client, [`SkipThrottling`] for one request. The throttle acts the
/// same under the `test-util` feature's `ManualClock` as in
/// production, so a test that calls a failing mock over and over meets it
/// too.
///
/// It comes inside [`reqwest_middleware::Error::Middleware`]:
///
/// ```
/// # fn check(error: &reqwest_middleware::Error) -> bool {
/// use reqwest_safe_retry::rate_limit::Throttled;
///
/// matches!(error, reqwest_middleware::Error::Middleware(e) if e.is::<Throttled>())
/// # }
/// ```
///
/// The call's [`RetryReport`](crate::report::RetryReport) stops with
/// [`StopReason::Throttled`](crate::report::StopReason::Throttled), after no
/// attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Throttled {
    accepted: u32,
    answered: u32,
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { accepted, answered } = self;
        f.write_str("not sent: ")?;
        if *answered == 0 {
            // The evidence that cut the host's share has faded, and no
            // answer since has counted (other errors count as neither).
            f.write_str("its host turned most attempts away, and has answered none lately")?;
        } else {
            write!(
                f,
                "its host accepted about {accepted} of the {answered} attempts it answered lately"
            )?;
        }
        f.write_str(
            ", so this call was kept back to spare it (to send every call, turn the throttle off \
             with `with_throttling(false)`, or mark the request with `rate_limit::SkipThrottling`)",
        )
    }
}

impl std::error::Error for Throttled {}

impl Throttled {
    /// A call kept back by a host that accepted `accepted` of the
    /// `answered` attempts it answered lately.
    pub(crate) fn new(accepted: u32, answered: u32) -> Self {
        Self { accepted, answered }
    }

    /// About how many attempts the host answered lately, in the throttle's
    /// books (older answers count for less; a host's books start with a
    /// few accepted ones presumed).
    pub fn answered(&self) -> u32 {
        self.answered
    }

    /// How many of those [`answered`](Self::answered) it accepted.
    pub fn accepted(&self) -> u32 {
        self.accepted
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
/// use http::{HeaderMap, HeaderValue};
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
    if let Some(secs) = seconds(text) {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait a response's rate-limit headers ask for when its limit is
/// spent, measured from `now` (the server's, as for a `Retry-After` date):
///
/// - GitHub's `x-ratelimit-reset` (a Unix time in seconds), when
///   `x-ratelimit-remaining` is `0`;
/// - the IETF draft's `RateLimit` field (`"default";r=0;t=30`, read as
///   [`spent_field`] says): the longest `t` (seconds) of the limits whose
///   `r` (remaining) is `0`;
/// - its earlier `RateLimit-Reset` (seconds), when `RateLimit-Remaining`
///   is `0`.
///
/// A limit not spent asks for nothing, and so does a value that is not a
/// whole number of seconds, or a time no `SystemTime` can hold: the
/// headers are then ignored. Of several, the longest wait.
pub(crate) fn reset_asked(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let github = spent(headers, "x-ratelimit-remaining")
        .then(|| header_seconds(headers.get("x-ratelimit-reset")?))
        .flatten()
        .and_then(|at| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(at)))
        .map(|at| at.duration_since(now).unwrap_or(Duration::ZERO));
    let field = spent_field(headers);
    let older = spent(headers, "ratelimit-remaining")
        .then(|| header_seconds(headers.get("ratelimit-reset")?))
        .flatten()
        .map(Duration::from_secs);
    [github, field, older].into_iter().flatten().max()
}

/// Whether the rate-limit headers name a spent limit and when it resets.
pub(crate) fn limit_spent(headers: &HeaderMap) -> bool {
    reset_asked(headers, SystemTime::UNIX_EPOCH).is_some()
}

/// Whether the header `name` says no request is left: `0`.
fn spent(headers: &HeaderMap, name: &str) -> bool {
    headers.get(name).and_then(|value| value.to_str().ok()).is_some_and(|v| v.trim() == "0")
}

/// A whole number of seconds, digits only; one too large for a `u64`
/// saturates, so it reads as longer than any cap.
fn seconds(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse().unwrap_or(u64::MAX))
}

/// A header's value as [`seconds`].
fn header_seconds(value: &HeaderValue) -> Option<u64> {
    seconds(value.to_str().ok()?.trim())
}

/// The longest reset among the limits of the `RateLimit` field (draft 10
/// of the IETF's "RateLimit header fields for HTTP") whose remaining count
/// is `0`.
///
/// The field is read as an RFC 9651 structured field: a List, its lines
/// joined with commas as the RFC says. Each limit is an Item whose value
/// is a String, the name of the quota policy, with the parameters `r`
/// (requests remaining) and `t` (seconds until the quota resets), both
/// non-negative Integers, and an optional `pk` (the partition key), a
/// Byte Sequence: `"day";r=0;t=600;pk=:dXNlci03:`.
///
/// - A field that is not a valid List (a stray quote, a bad byte
///   sequence, any syntax error) is ignored whole, as RFC 9651 requires.
/// - A limit that does not have that shape (a Token or a number for its
///   name, an inner list, `r` or `t` missing, negative or not an Integer,
///   a `pk` that is not a Byte Sequence) is ignored alone; the others
///   count. Unknown parameters are ignored; of repeated ones the last
///   counts.
/// - The partition key is checked and not otherwise used: the pause it
///   leads to holds the host, since nothing in a request says which of
///   the server's partitions it falls in. Clients whose calls span
///   several partitions of one host (one API key each) may want
///   [`RetryAfter::with_pause(false)`](crate::RetryAfter::with_pause).
/// - `RateLimit-Policy` (the quotas, `q`, `qu`, `w`) is not needed for the
///   wait and not read.
fn spent_field(headers: &HeaderMap) -> Option<Duration> {
    let mut lines = headers.get_all("ratelimit").iter();
    let first = lines.next()?;
    let mut field = first.as_bytes().to_vec();
    for line in lines {
        field.extend_from_slice(b", ");
        field.extend_from_slice(line.as_bytes());
    }
    let limits: sfv::List = sfv::Parser::new(&field).parse().ok()?;
    limits.iter().filter_map(spent_limit).max()
}

/// The reset of one limit of a `RateLimit` field, if none of it remains;
/// `None` for a limit with some left, or one not of the draft's shape.
fn spent_limit(limit: &sfv::ListEntry) -> Option<Duration> {
    let sfv::ListEntry::Item(limit) = limit else { return None };
    limit.bare_item.as_string()?;
    let count = |name| match limit.params.get(sfv::key_ref(name)) {
        Some(value) => value.as_integer().map(i64::from).and_then(|n| u64::try_from(n).ok()),
        None => None,
    };
    let (remaining, reset) = (count("r")?, count("t")?);
    if let Some(partition) = limit.params.get(sfv::key_ref("pk")) {
        partition.as_byte_sequence()?;
    }
    (remaining == 0).then_some(Duration::from_secs(reset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Headers from `(name, value)` pairs.
    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (http::HeaderName::from_static(k), HeaderValue::from_str(v).unwrap()))
            .collect()
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn githubs_reset_counts_when_no_request_is_left() {
        let now = at(1_700_000_000);
        let spent = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1700000040")]);
        assert_eq!(reset_asked(&spent, now), Some(Duration::from_secs(40)));
        let left = headers(&[("x-ratelimit-remaining", "12"), ("x-ratelimit-reset", "1700000040")]);
        assert_eq!(reset_asked(&left, now), None, "requests left: no wait");
        let past = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1699999000")]);
        assert_eq!(reset_asked(&past, now), Some(Duration::ZERO));
        let no_reset = headers(&[("x-ratelimit-remaining", "0")]);
        assert_eq!(reset_asked(&no_reset, now), None);
    }

    #[test]
    fn the_ietf_field_counts_its_spent_limits_longest_reset() {
        let now = at(0);
        let one = headers(&[("ratelimit", "\"default\";r=0;t=30")]);
        assert_eq!(reset_asked(&one, now), Some(Duration::from_secs(30)));
        let two = headers(&[(
            "ratelimit",
            "\"burst\";r=4;t=1, \"day\";r=0;t=600;flag, \"hour\";r=0;t=90",
        )]);
        assert_eq!(reset_asked(&two, now), Some(Duration::from_secs(600)));
        let left = headers(&[("ratelimit", "\"default\";r=3;t=30")]);
        assert_eq!(reset_asked(&left, now), None);
        let older = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "12")]);
        assert_eq!(reset_asked(&older, now), Some(Duration::from_secs(12)));
    }

    #[test]
    fn a_limit_is_spent_when_none_is_left_and_it_names_its_reset() {
        let spent = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1700000040")]);
        assert!(limit_spent(&spent));
        assert!(limit_spent(&headers(&[("ratelimit", "\"default\";r=0;t=30")])));
        let left = headers(&[("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "1700000040")]);
        assert!(!limit_spent(&left));
        assert!(!limit_spent(&headers(&[("x-ratelimit-remaining", "0")])), "no reset named");
        assert!(!limit_spent(&HeaderMap::new()));
    }

    #[test]
    fn the_longest_wait_of_several_counts() {
        let now = at(1_000);
        let both = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1005"),
            ("ratelimit", "\"default\";r=0;t=9"),
        ]);
        assert_eq!(reset_asked(&both, now), Some(Duration::from_secs(9)));
    }

    #[test]
    fn garbage_rate_limit_headers_are_ignored() {
        let now = at(1_000);
        for pairs in [
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "soon")][..],
            &[("x-ratelimit-remaining", "zero"), ("x-ratelimit-reset", "1005")],
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "-5")],
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1.5e3")],
            &[("ratelimit", "r=0;t=9")],
            &[("ratelimit", "\"default\";r=0")],
            &[("ratelimit", "\"default\";r=0;t=nine")],
            &[("ratelimit", "\"default\";r;t=9")],
            &[("ratelimit-remaining", "0"), ("ratelimit-reset", "")],
        ] {
            assert_eq!(reset_asked(&headers(pairs), now), None, "{pairs:?}");
        }
        // A reset no `SystemTime` can hold is no reset.
        let absurd = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "18446744073709551615"),
        ]);
        assert_eq!(reset_asked(&absurd, now), None);
        let opaque = HeaderMap::from_iter([(
            http::HeaderName::from_static("ratelimit"),
            HeaderValue::from_bytes(b"\xff;r=0;t=1").unwrap(),
        )]);
        assert_eq!(reset_asked(&opaque, now), None);
    }

    /// The wait the `RateLimit` lines `lines` ask for, at time zero.
    fn field(lines: &[&str]) -> Option<Duration> {
        let pairs: Vec<_> = lines.iter().map(|line| ("ratelimit", *line)).collect();
        reset_asked(&headers(&pairs), at(0))
    }

    #[test]
    fn the_field_is_read_as_a_structured_list_not_split_on_punctuation() {
        // A quoted name is a name, whatever it spells.
        assert_eq!(field(&["\"n;r=0;t=9;\""]), None);
        assert_eq!(field(&["\"a,b;t=1\";r=0;t=4"]), Some(Duration::from_secs(4)));
        // Whitespace after a `;` is allowed, a parameter repeated counts last.
        assert_eq!(field(&["\"d\"; r=0; t=5;t=8"]), Some(Duration::from_secs(8)));
        // The lines of a field are one List.
        let lines = ["\"burst\";r=0;t=2", "\"day\";r=0;t=600"];
        assert_eq!(field(&lines), Some(Duration::from_secs(600)));
    }

    #[test]
    fn a_field_that_is_not_a_valid_list_is_ignored_whole() {
        for bad in [
            "\"a\";r=0;t=7, \"b\";r=0;t=",
            "\"a\";r=0;t=7,",
            "\"a\";r=0;t=7 \"b\"",
            "\"unterminated;r=0;t=7",
            // Sixteen digits: more than an RFC 9651 Integer holds.
            "\"a\";r=0;t=1000000000000000",
            "\"a\";r=0;t=7;pk=:not base64!:",
        ] {
            assert_eq!(field(&[bad]), None, "{bad}");
        }
        // One bad line spoils the field.
        assert_eq!(field(&["\"a\";r=0;t=7", "\"b\";r=0;t=="]), None);
    }

    #[test]
    fn a_limit_not_of_the_drafts_shape_is_ignored_alone() {
        let good = "\"ok\";r=0;t=3";
        for odd in [
            "default;r=0;t=70",
            "70;r=0;t=70",
            "(\"a\" \"b\");r=0;t=70",
            "\"r\";r=0.0;t=70",
            "\"r\";r=-1;t=70",
            "\"r\";r;t=70",
            "\"t\";r=0;t=-70",
            "\"t\";r=0;t=70.0",
            "\"t\";r=0;t=\"70\"",
            "\"pk\";r=0;t=70;pk=\"user-7\"",
            "\"pk\";r=0;t=70;pk=user",
        ] {
            assert_eq!(field(&[&format!("{odd}, {good}")]), Some(Duration::from_secs(3)), "{odd}");
        }
    }

    #[test]
    fn a_partition_key_is_checked_and_its_limit_counts() {
        let keyed = "\"user\";r=0;t=30;pk=:dXNlci03:";
        assert_eq!(field(&[keyed]), Some(Duration::from_secs(30)));
        let unspent = "\"user\";r=2;t=30;pk=:dXNlci03:";
        assert_eq!(field(&[unspent]), None);
        // Unknown parameters, and a policy field beside it, change nothing.
        let extra = "\"user\";r=0;t=30;pk=:dXNlci03:;qu=\"requests\";future=?1";
        assert_eq!(field(&[extra]), Some(Duration::from_secs(30)));
    }
}
