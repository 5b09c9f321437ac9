//! What an attempt's outcome says about repeating the request.
//!
//! Two questions decide a retry, and they are kept apart: *may the outcome be
//! retried at all*, and *is this request safe to repeat*. This module answers
//! the first; the method and the idempotency key answer the second.

use std::error::Error as StdError;
use std::fmt;
use std::io;

use http::StatusCode;
use reqwest::{Request, Response};

use crate::config::RetryConfig;
use crate::decision::RetryReason;

/// How far an outcome may be retried, before the request's safety is weighed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retryability {
    /// Final: return it to the caller.
    Never,
    /// Retry only if the request is safe to repeat (idempotent method or an
    /// idempotency key): the server may already have done the work.
    WhenSafe,
    /// Retry whatever the method: the server provably did not act on the
    /// request (it was never delivered, or the server refused it up front).
    AnyMethod,
}

/// The result of one attempt, as a custom predicate sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Outcome<'a> {
    /// The server answered; the body has not been read.
    Response(&'a Response),
    /// The attempt failed without a response.
    Error(&'a reqwest_middleware::Error),
}

/// One finished attempt, handed to a custom predicate.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Attempt<'a> {
    /// The request as the caller built it.
    pub request: &'a Request,
    /// Which attempt this was, starting at 1.
    pub number: u32,
    /// What came back.
    pub outcome: Outcome<'a>,
}

/// A verdict: whether and why an outcome may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) retryability: Retryability,
    pub(crate) reason: RetryReason,
}

impl Verdict {
    /// Final; its reason is never read, as nothing is retried.
    const FINAL: Self = Self { retryability: Retryability::Never, reason: RetryReason::Custom };

    fn new(retryability: Retryability, reason: RetryReason) -> Self {
        Self { retryability, reason }
    }
}

/// The built-in rules for a response status.
pub(crate) fn classify_status(config: &RetryConfig, status: StatusCode) -> Verdict {
    if !config.retryable_statuses().contains(&status) {
        return Verdict::FINAL;
    }
    let retryability = if status == StatusCode::TOO_MANY_REQUESTS && config.retry_429_any_method() {
        Retryability::AnyMethod
    } else {
        Retryability::WhenSafe
    };
    Verdict::new(retryability, RetryReason::Status(status))
}

/// The built-in rules for a failed attempt.
pub(crate) fn classify_error(error: &reqwest_middleware::Error) -> Verdict {
    let reqwest_middleware::Error::Reqwest(error) = error else {
        // Another middleware's error: we cannot know what it means.
        return Verdict::FINAL;
    };
    if error.is_builder()
        || error.is_redirect()
        || error.is_status()
        || error.is_decode()
        || error.is_upgrade()
    {
        return Verdict::FINAL;
    }
    if error.is_connect() {
        // The request was never written. Retrying is safe for any method, but
        // only useful when the failure can pass: a refused or unreachable
        // peer, or a connect timeout. TLS, certificate and name-resolution
        // failures will fail the same way again.
        return if error.is_timeout() || chain_has_unreachable_peer(error) {
            Verdict::new(Retryability::AnyMethod, RetryReason::NotConnected)
        } else {
            Verdict::FINAL
        };
    }
    if chain_has_refused_stream(error) {
        return Verdict::new(Retryability::AnyMethod, RetryReason::RefusedStream);
    }
    if error.is_timeout() {
        return Verdict::new(Retryability::WhenSafe, RetryReason::Timeout);
    }
    if error.is_request() {
        // Reset, closed before the response, incomplete message: the request
        // may have been processed.
        return Verdict::new(Retryability::WhenSafe, RetryReason::ConnectionLost);
    }
    Verdict::FINAL
}

fn sources<'a>(
    error: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |&e| e.source())
}

fn chain_has_unreachable_peer(error: &(dyn StdError + 'static)) -> bool {
    sources(error).filter_map(|e| e.downcast_ref::<io::Error>()).any(|io| {
        matches!(
            io.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::HostUnreachable
                | io::ErrorKind::NetworkUnreachable
                | io::ErrorKind::AddrNotAvailable
        )
    })
}

/// HTTP/2 REFUSED_STREAM, or a GOAWAY without error: the server says it did
/// not process the stream (RFC 9113, section 8.7).
#[cfg(feature = "http2")]
fn chain_has_refused_stream(error: &(dyn StdError + 'static)) -> bool {
    sources(error).filter_map(|e| e.downcast_ref::<h2::Error>()).any(|h2| {
        h2.reason() == Some(h2::Reason::REFUSED_STREAM)
            || (h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR))
    })
}

#[cfg(not(feature = "http2"))]
fn chain_has_refused_stream(_: &(dyn StdError + 'static)) -> bool {
    false
}

impl fmt::Display for Retryability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Retryability::Never => "final",
            Retryability::WhenSafe => "retryable when safe to repeat",
            Retryability::AnyMethod => "retryable for any method",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapper(Box<dyn StdError + Send + Sync>);

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrapper")
        }
    }

    impl StdError for Wrapper {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn unreachable_peers_are_found_deep_in_the_chain() {
        for kind in [io::ErrorKind::ConnectionRefused, io::ErrorKind::NetworkUnreachable] {
            let e = Wrapper(Box::new(Wrapper(Box::new(io::Error::from(kind)))));
            assert!(chain_has_unreachable_peer(&e), "{kind:?}");
        }
        let reset = Wrapper(Box::new(io::Error::from(io::ErrorKind::ConnectionReset)));
        assert!(!chain_has_unreachable_peer(&reset));
    }

    #[cfg(feature = "http2")]
    #[test]
    fn refused_streams_and_graceful_goaway_are_recognised() {
        let refused = Wrapper(Box::new(h2::Error::from(h2::Reason::REFUSED_STREAM)));
        assert!(chain_has_refused_stream(&refused));
        let cancel = Wrapper(Box::new(h2::Error::from(h2::Reason::CANCEL)));
        assert!(!chain_has_refused_stream(&cancel));
    }

    #[test]
    fn statuses_follow_the_configured_set() {
        let config = RetryConfig::default();
        let verdict = |code: u16| classify_status(&config, StatusCode::from_u16(code).unwrap());
        assert_eq!(verdict(429).retryability, Retryability::AnyMethod);
        for code in [502, 503, 504] {
            assert_eq!(verdict(code).retryability, Retryability::WhenSafe);
            assert_eq!(
                verdict(code).reason,
                RetryReason::Status(StatusCode::from_u16(code).unwrap())
            );
        }
        for code in [200, 201, 301, 400, 404, 408, 500, 501, 505, 599] {
            assert_eq!(verdict(code).retryability, Retryability::Never, "{code}");
        }
    }

    #[test]
    fn status_429_can_require_safety() {
        let config = RetryConfig::builder().with_429_for_any_method(false).build().unwrap();
        let verdict = classify_status(&config, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(verdict.retryability, Retryability::WhenSafe);
    }

    #[test]
    fn errors_from_other_middleware_are_final() {
        let error = reqwest_middleware::Error::middleware(io::Error::from(
            io::ErrorKind::ConnectionRefused,
        ));
        assert_eq!(classify_error(&error).retryability, Retryability::Never);
    }
}
