//! Reading the server's `Retry-After` header (RFC 9110, section 10.2.3).

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use http::header::{DATE, RETRY_AFTER};

use crate::rate_limit::parse_retry_after;

/// How a wait the server asks for is honoured: its `Retry-After`, or one a
/// predicate hands on ([`Verdict::server_asked`](crate::Verdict::server_asked)).
///
/// | setting | default | why |
/// |---|---|---|
/// | `cap` | 30 s | a server may ask us to wait, not to hang; longer asks are returned to the caller |
/// | `over_cap` | [`RetryAfterOverCap::ReturnResponse`] | the caller, not the middleware, decides whether to wait longer than the cap |
/// | `spread` | on | `Retry-After` is a floor: clients told the same thing come back spread over the retry's backoff ceiling, not in one instant |
/// | `rate_limit_headers` | off | only `Retry-After` is a standard; read the others where an API writes them |
/// | `pause` | on | a server that asks one call to wait has asked the whole process: the host's other calls wait too, and one probe goes when the wait ends |
///
/// ```
/// use std::time::Duration;
/// use reqwest_safe_retry::{RetryAfter, RetryAfterOverCap, RetryConfig};
///
/// // Wait at most 5 s, then try again.
/// let retry_after = RetryAfter::default()
///     .with_cap(Duration::from_secs(5))
///     .with_over_cap(RetryAfterOverCap::WaitTheCap);
/// let config = RetryConfig::builder().with_retry_after(retry_after).build()?;
/// assert_eq!(config.retry_after().cap(), Duration::from_secs(5));
/// # Ok::<(), reqwest_safe_retry::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter {
    cap: Duration,
    over_cap: RetryAfterOverCap,
    spread: bool,
    pause: bool,
    rate_limit_headers: bool,
}

impl Default for RetryAfter {
    fn default() -> Self {
        Self {
            cap: Duration::from_secs(30),
            over_cap: RetryAfterOverCap::ReturnResponse,
            spread: true,
            pause: true,
            rate_limit_headers: false,
        }
    }
}

impl RetryAfter {
    /// The longest wait honoured. A server asking for more gets its
    /// response handed to the caller at once, rather than retried early,
    /// unless [`over_cap`](Self::with_over_cap) says otherwise.
    pub fn with_cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }

    /// What to do when the server asks for more than the cap: return the
    /// response at once (the default) or wait the cap and retry.
    pub fn with_over_cap(mut self, over_cap: RetryAfterOverCap) -> Self {
        self.over_cap = over_cap;
        self
    }

    /// Whether to spread a wait the server asked for (on by default).
    ///
    /// `Retry-After` says "not before", and a fleet told "5 seconds", or the
    /// same date, would otherwise come back in the same instant. With the
    /// spread on, the wait is the server's value plus a random part of this
    /// retry's backoff ceiling (see [`Backoff`](crate::Backoff)), drawn from
    /// the jitter source: up to 500 ms more before the first retry, by
    /// default. With [`Jitter::None`](crate::Jitter::None) there is no
    /// spread. Off, the wait is exactly the server's value, as many clients
    /// do.
    pub fn with_spread(mut self, spread: bool) -> Self {
        self.spread = spread;
        self
    }

    /// Whether a wait the server asks for pauses its host for every call
    /// of the middleware (on by default).
    ///
    /// A `429` or `503` whose wait is within the cap (and above zero)
    /// pauses the host (scheme, host and port) until the time the server
    /// named, for every call of this middleware and its clones: a call
    /// that is about to send to the host, first attempt or retry, waits
    /// until then, plus a spread of its own as for `Retry-After`. When the
    /// pause ends, one request goes first (the probe): if the server asks
    /// for another wait, the host is paused again and the other calls sent
    /// nothing; otherwise they go, each after its spread. So a host that
    /// keeps asking gets one request per pause from the process, whatever
    /// the number of calls waiting.
    ///
    /// A retry that waits out such a pause is not paid for by the
    /// [budget](crate::RetryBudget): the pause, not the budget, bounds it
    /// (to one request per pause), and the budget stays whole for the
    /// failures it is for.
    ///
    /// A call whose [deadline](crate::RetryConfigBuilder::with_deadline)
    /// ends before the pause does returns at once with a
    /// [`HostPaused`](crate::rate_limit::HostPaused) error, as does one that
    /// carries [`ReturnIfPaused`](crate::rate_limit::ReturnIfPaused). A pause
    /// over the cap is no pause: the response is returned (or the cap
    /// waited, as [`with_over_cap`](Self::with_over_cap) says) and other
    /// calls go on.
    ///
    /// A probe refused again with no wait named (or one over the cap or of
    /// zero) holds the host for the first retry's backoff ceiling before
    /// the next probe; any other outcome opens it. The pause holds back
    /// whole attempts: a [hedge](crate::hedge) below this middleware may
    /// still send copies of a probe.
    ///
    /// Off, each call honours the wait it was told alone, as most clients
    /// do.
    pub fn with_pause(mut self, pause: bool) -> Self {
        self.pause = pause;
        self
    }

    /// Whether the rate-limit headers some APIs write are read where an
    /// answer has no `Retry-After` (off by default), and a `403` that is a
    /// rate limit is taken as a `429`.
    ///
    /// On, the wait an answer asks for is also read from:
    ///
    /// - GitHub's `x-ratelimit-reset` (a Unix time), when
    ///   `x-ratelimit-remaining` is `0`;
    /// - the IETF draft's `RateLimit` field (`"default";r=0;t=30`): the
    ///   longest reset `t` (seconds) of its limits with none remaining
    ///   (`r=0`), or its earlier `RateLimit-Reset` (seconds) when
    ///   `RateLimit-Remaining` is `0`.
    ///
    /// Such a wait is honoured as a `Retry-After` is: measured against the
    /// response's `Date`, capped, spread, and pausing the host. And a `403`
    /// that carries a `Retry-After` or a spent limit (GitHub answers its
    /// rate limits so) is retried as a `429` is, whatever the method: the
    /// server refused before doing any work. A limit not spent, or a value
    /// that is not a whole number of seconds, is ignored.
    ///
    /// ```
    /// use reqwest_safe_retry::{RetryAfter, RetryConfig};
    ///
    /// // GitHub: wait for the reset it names, up to a minute.
    /// let retry_after = RetryAfter::default()
    ///     .with_rate_limit_headers(true)
    ///     .with_cap(std::time::Duration::from_secs(60));
    /// let config = RetryConfig::builder().with_retry_after(retry_after).build()?;
    /// assert!(config.retry_after().rate_limit_headers());
    /// # Ok::<(), reqwest_safe_retry::ConfigError>(())
    /// ```
    pub fn with_rate_limit_headers(mut self, read: bool) -> Self {
        self.rate_limit_headers = read;
        self
    }

    /// The longest wait honoured.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// What happens when the server asks for more than the cap.
    pub fn over_cap(&self) -> RetryAfterOverCap {
        self.over_cap
    }

    /// Whether a wait the server asked for is spread.
    pub fn spread(&self) -> bool {
        self.spread
    }

    /// Whether a wait the server asks for pauses its host for every call.
    pub fn pause(&self) -> bool {
        self.pause
    }

    /// Whether rate-limit headers other than `Retry-After` are read.
    pub fn rate_limit_headers(&self) -> bool {
        self.rate_limit_headers
    }

    /// Whether `response` is a `403` these settings take as a `429`: with
    /// the rate-limit headers read, one that carries a `Retry-After` or a
    /// spent limit.
    pub(crate) fn takes_as_429(&self, status: http::StatusCode, headers: &HeaderMap) -> bool {
        self.rate_limit_headers
            && status == http::StatusCode::FORBIDDEN
            && (headers
                .get(RETRY_AFTER)
                .is_some_and(|value| parse_retry_after(value, SystemTime::UNIX_EPOCH).is_some())
                || crate::rate_limit::limit_spent(headers))
    }

    /// Whether a wait the server asked for is one to honour in full: above
    /// zero, which sets no time, and within the cap.
    pub(crate) fn honours(&self, asked: Duration) -> bool {
        !asked.is_zero() && asked <= self.cap
    }
}

/// What the middleware does when a server asks for a longer wait than the
/// [`RetryAfter`] cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RetryAfterOverCap {
    /// Hand the response to the caller at once, with
    /// [`StopReason::RetryAfterTooLong`](crate::report::StopReason::RetryAfterTooLong)
    /// saying how long the server asked for. The default: retrying before
    /// the server said it would be ready is likely wasted, and whether to
    /// wait an hour is the caller's call.
    #[default]
    ReturnResponse,
    /// Wait the cap, then retry, as if the server had asked for exactly the
    /// cap (spread as any `Retry-After` wait is). The retry may well meet the
    /// same answer; the retry count and the budget still bound how often.
    WaitTheCap,
}

/// The wait a response's `Retry-After` asks for, or, with the rate-limit
/// headers read, those headers when it has none. A time is measured from
/// [`server_now`].
pub(crate) fn asked(
    rules: &RetryAfter,
    headers: &HeaderMap,
    wall_time: impl FnOnce() -> SystemTime,
) -> Option<Duration> {
    match headers.get(RETRY_AFTER) {
        Some(value) => parse_retry_after(value, server_now(headers, wall_time)),
        None if rules.rate_limit_headers => {
            crate::rate_limit::reset_asked(headers, server_now(headers, wall_time))
        }
        None => None,
    }
}

/// The wait until `at`, a time the server named, measured from
/// [`server_now`]; none once it has passed.
pub(crate) fn until(
    at: SystemTime,
    headers: Option<&HeaderMap>,
    wall_time: impl FnOnce() -> SystemTime,
) -> Duration {
    let now = match headers {
        Some(headers) => server_now(headers, wall_time),
        None => wall_time(),
    };
    at.duration_since(now).unwrap_or(Duration::ZERO)
}

/// "Now" as the server's times mean it: the response's own `Date` when it
/// has a valid one, so a client whose clock is off waits what the server
/// meant; otherwise `wall_time`, read only then.
fn server_now(headers: &HeaderMap, wall_time: impl FnOnce() -> SystemTime) -> SystemTime {
    let date =
        headers.get(DATE).and_then(|date| httpdate::parse_http_date(date.to_str().ok()?).ok());
    date.unwrap_or_else(wall_time)
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    // Sun, 06 Nov 1994 08:49:37 GMT, the example date of RFC 9110.
    fn rfc_example() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn parse_str(s: &str, now: SystemTime) -> Option<Duration> {
        parse_retry_after(&HeaderValue::from_str(s).unwrap(), now)
    }

    #[test]
    fn delay_seconds() {
        assert_eq!(parse_str("0", rfc_example()), Some(Duration::ZERO));
        assert_eq!(parse_str("120", rfc_example()), Some(Duration::from_secs(120)));
        assert_eq!(parse_str("  7 ", rfc_example()), Some(Duration::from_secs(7)));
    }

    #[test]
    fn all_three_date_forms() {
        let now = rfc_example() - Duration::from_secs(10);
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_str(form, now), Some(Duration::from_secs(10)), "{form}");
        }
    }

    #[test]
    fn past_date_means_no_wait() {
        let now = rfc_example() + Duration::from_secs(3600);
        assert_eq!(parse_str("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(Duration::ZERO));
    }

    #[test]
    fn huge_number_saturates() {
        let got = parse_str("99999999999999999999999", rfc_example());
        assert_eq!(got, Some(Duration::from_secs(u64::MAX)));
    }

    #[test]
    fn a_date_is_measured_against_the_response_date_when_it_has_one() {
        let headers = |pairs: &[(http::HeaderName, &'static str)]| {
            pairs.iter().map(|(k, v)| (k.clone(), HeaderValue::from_static(v))).collect()
        };
        let retry_at = (RETRY_AFTER, "Sun, 06 Nov 1994 08:49:37 GMT");
        let with_date = headers(&[retry_at.clone(), (DATE, "Sun, 06 Nov 1994 08:49:30 GMT")]);
        let never = || -> SystemTime { unreachable!("the response's Date is used") };
        let rules = RetryAfter::default();
        assert_eq!(asked(&rules, &with_date, never), Some(Duration::from_secs(7)));
        let without = headers(&[retry_at]);
        assert_eq!(asked(&rules, &without, rfc_example), Some(Duration::ZERO));
        assert_eq!(asked(&rules, &HeaderMap::new(), never), None);
    }

    #[test]
    fn a_403_is_taken_as_a_429_only_when_it_names_a_wait_and_the_headers_are_read() {
        let map = |pairs: &[(&'static str, &'static str)]| -> HeaderMap {
            pairs
                .iter()
                .map(|(k, v)| (http::HeaderName::from_static(k), HeaderValue::from_static(v)))
                .collect()
        };
        let read = RetryAfter::default().with_rate_limit_headers(true);
        let forbidden = http::StatusCode::FORBIDDEN;
        let secondary = map(&[("retry-after", "60")]);
        let primary = map(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1700000000")]);
        assert!(read.takes_as_429(forbidden, &secondary));
        assert!(read.takes_as_429(forbidden, &primary));
        assert!(!read.takes_as_429(forbidden, &map(&[("retry-after", "soon")])), "garbage");
        assert!(!read.takes_as_429(forbidden, &HeaderMap::new()), "a plain 403");
        assert!(!read.takes_as_429(http::StatusCode::UNAUTHORIZED, &secondary), "only a 403");
        assert!(!RetryAfter::default().takes_as_429(forbidden, &secondary), "headers not read");
    }

    #[test]
    fn garbage_is_ignored() {
        for bad in ["", "   ", "-5", "+5", "1.5", "soon", "Sun, 32 Nov 1994 08:49:37 GMT", "5s"] {
            assert_eq!(parse_str(bad, rfc_example()), None, "{bad:?}");
        }
        let opaque = HeaderValue::from_bytes(b"\xff\xfe").unwrap();
        assert_eq!(parse_retry_after(&opaque, rfc_example()), None);
    }

    #[test]
    fn a_time_the_server_named_is_measured_like_a_date() {
        let headers = |date: &'static str| {
            std::iter::once((DATE, HeaderValue::from_static(date))).collect::<HeaderMap>()
        };
        let reset = rfc_example();
        let never = || -> SystemTime { unreachable!("the response's Date is used") };
        let seven_before = headers("Sun, 06 Nov 1994 08:49:30 GMT");
        assert_eq!(until(reset, Some(&seven_before), never), Duration::from_secs(7));
        // A bad Date, or no response: the wall time.
        let ten_before = || rfc_example() - Duration::from_secs(10);
        assert_eq!(until(reset, Some(&headers("soon")), ten_before), Duration::from_secs(10));
        assert_eq!(until(reset, None, ten_before), Duration::from_secs(10));
        // Past: no wait.
        let later = || rfc_example() + Duration::from_secs(1);
        assert_eq!(until(reset, None, later), Duration::ZERO);
    }
}
