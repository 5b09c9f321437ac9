//! Reading the server's `Retry-After` header (RFC 9110, section 10.2.3).

use std::time::{Duration, SystemTime};

use http::header::{DATE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue};

/// The wait a `Retry-After` value asks for, measured from `now`.
///
/// The middleware calls this with the time of the response's own `Date`
/// header when it has a valid one (so a client whose clock is off waits what
/// the server meant), and otherwise with its [`Clock`](crate::Clock)'s wall
/// time; it is public for clients that read the header themselves.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderValue;
/// use reqwest_safe_retry::parse_retry_after;
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

/// The wait a response's `Retry-After` asks for. A date is measured from
/// [`server_now`].
pub(crate) fn asked(
    headers: &HeaderMap,
    wall_time: impl FnOnce() -> SystemTime,
) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?;
    parse_retry_after(value, server_now(headers, wall_time))
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
        assert_eq!(asked(&with_date, never), Some(Duration::from_secs(7)));
        let without = headers(&[retry_at]);
        assert_eq!(asked(&without, rfc_example), Some(Duration::ZERO));
        assert_eq!(asked(&HeaderMap::new(), never), None);
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
