//! What an attempt's outcome says about repeating the request.
//!
//! Two questions decide a retry, and they are kept apart: *may the outcome be
//! retried at all*, and *is this request safe to repeat*. This module answers
//! the first, as pure functions of the outcome: `None` means final, and
//! `Some` carries how far the outcome may be retried and why. The method and
//! the idempotency key answer the second (in `safety.rs`), with the redirect
//! rule (in the policy).
//!
//! Errors are read by walking their `source()` chain for the types the HTTP
//! stack really produces (`std::io::Error` kinds, `hyper::Error`, and with the
//! `http2` feature `h2::Error`), not by matching message text — with two
//! documented exceptions, each a last resort where the stack gives no type
//! or code: hyper's "dispatch task is gone" (see `classify_dispatch`), and a
//! temporary DNS failure from the system resolver, recognised by glibc's
//! and musl's wording.

use std::error::Error as StdError;
use std::io;

use http::StatusCode;

use crate::reason::{RetryReason, Retryability};

/// How far an outcome may be retried and why; `None` when it is final.
pub(crate) type Class = Option<(Reach, RetryReason)>;

/// How far an outcome that is not final may be retried: [`Retryability`]
/// without `Never`, which a [`Class`] says with `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Only if the request is safe to repeat.
    WhenSafe,
    /// Whatever the method, once the outcome is known to be the request's own.
    AnyMethod,
}

impl Reach {
    /// The reach of a predicate's answer; `None` when it is final.
    pub(crate) fn of(retryability: Retryability) -> Option<Self> {
        match retryability {
            Retryability::Never => None,
            Retryability::WhenSafe => Some(Self::WhenSafe),
            Retryability::AnyMethod => Some(Self::AnyMethod),
        }
    }
}

/// The built-in rules for a response status.
pub(crate) fn classify_status(
    status: StatusCode,
    retryable: &[StatusCode],
    any_method_429: bool,
) -> Class {
    if !retryable.contains(&status) {
        return None;
    }
    let reach = if status == StatusCode::TOO_MANY_REQUESTS && any_method_429 {
        Reach::AnyMethod
    } else {
        Reach::WhenSafe
    };
    Some((reach, RetryReason::Status(status)))
}

/// The built-in rules for a failed attempt of the request to `url`, when
/// known.
pub(crate) fn classify_error(
    error: &reqwest_middleware::Error,
    url: Option<&reqwest::Url>,
) -> Class {
    let error = reqwest_error(error, url)?;
    if error.is_connect() {
        // The request was never written. Retrying is safe for any method, but
        // only useful when the failure can pass: a refused or unreachable
        // peer, a connect timeout, a TLS handshake the peer cut off (an
        // overloaded load balancer does that). A certificate or protocol
        // error, or a name that does not resolve, fails the same way again.
        let passing = error.is_timeout()
            || any_io(error, is_passing_connect_failure)
            || is_temporary_dns_failure(error);
        return passing.then_some((Reach::AnyMethod, RetryReason::NotConnected));
    }
    if chain_has_refused_stream(error) {
        return Some((Reach::AnyMethod, RetryReason::RefusedStream));
    }
    if any_hyper(error, hyper::Error::is_canceled) {
        // hyper hands a request back unsent when its new connection closed
        // before the request was written (on a reused one it retries itself).
        return Some((Reach::AnyMethod, RetryReason::NotSent));
    }
    if error.is_request() {
        if let Some(class) = classify_dispatch(error) {
            return Some(class);
        }
    }
    if error.is_timeout() {
        return Some((Reach::WhenSafe, RetryReason::Timeout));
    }
    // A malformed response, oversized headers or an unsupported version
    // will be the same next time; so will an error in the request itself.
    if error.is_request() && !any_hyper(error, |e| e.is_parse() || e.is_user()) {
        // Reset, closed before the response, incomplete message: the
        // request may have been processed.
        return Some((Reach::WhenSafe, RetryReason::ConnectionLost));
    }
    None
}

/// What hyper's dispatcher says about a request it never answered, read from
/// the outermost `hyper::Error` in the chain (the one hyper-util wrapped for
/// this request; one deeper down came from elsewhere, a request body that is
/// another connection's `Incoming`, say).
///
/// - `ChannelClosed` (`is_closed()`): in a request's error its only source
///   is hyper-util's `connect_to`, whose `SendRequest::ready()` found a
///   *fresh* connection's dispatcher already gone (a GOAWAY or close at the
///   handshake) before the request was handed to it: not sent, any method.
/// - `DispatchGone` ("dispatch task is gone"): the dispatcher ended with the
///   request's callback still held: queued (HTTP/2: pending open behind
///   MAX_CONCURRENT_STREAMS) or in flight. Written or not is not told (a
///   draining server's GOAWAY lets the HEADERS out and answers them), so it
///   is a lost connection: only when safe. hyper gives no predicate for it;
///   recognised as a user error that is no body abort, by hyper's wording.
fn classify_dispatch(error: &(dyn StdError + 'static)) -> Class {
    let hyper = sources(error).find_map(|e| e.downcast_ref::<hyper::Error>())?;
    if hyper.is_closed() {
        return Some((Reach::AnyMethod, RetryReason::NotSent));
    }
    if hyper.is_user()
        && !hyper.is_body_write_aborted()
        && hyper.to_string() == "dispatch task is gone"
    {
        return Some((Reach::WhenSafe, RetryReason::ConnectionLost));
    }
    None
}

/// The built-in rule for a body that failed while the middleware read it:
/// a timeout, or a connection lost mid-body (reset, aborted, closed before
/// the declared length), may be retried when the request is safe to repeat.
/// A malformed body will be the same next time: final.
pub(crate) fn classify_body_error(error: &reqwest_middleware::Error) -> Class {
    let reqwest_middleware::Error::Reqwest(error) = error else { return None };
    if error.is_timeout() || any_io(error, |kind| kind == io::ErrorKind::TimedOut) {
        return Some((Reach::WhenSafe, RetryReason::Timeout));
    }
    // A malformed body (a bad chunk size, say) comes as an I/O error of
    // another kind, and is final by falling through: no case below is it.
    let lost = any_io(error, is_lost_connection)
        || any_hyper(error, |e| e.is_incomplete_message() || e.is_closed())
        || chain_has_lost_stream(error);
    lost.then_some((Reach::WhenSafe, RetryReason::ConnectionLost))
}

/// The `reqwest::Error` behind an outcome, also when an inner middleware
/// wrapped it in [`reqwest_middleware::Error::Middleware`] — but only one
/// about this request: an inner middleware may have made calls of its own
/// (an audit log, a token refresh), and their failures say nothing about
/// whether this request was processed.
fn reqwest_error<'a>(
    error: &'a reqwest_middleware::Error,
    url: Option<&reqwest::Url>,
) -> Option<&'a reqwest::Error> {
    match error {
        reqwest_middleware::Error::Reqwest(error) => Some(error),
        reqwest_middleware::Error::Middleware(error) => {
            let error: &(dyn StdError + 'static) = &**error;
            let wrapped = sources(error).find_map(|e| e.downcast_ref::<reqwest::Error>())?;
            match (wrapped.url(), url) {
                (Some(theirs), Some(ours)) if theirs != ours => None,
                _ => Some(wrapped),
            }
        }
    }
}

/// `error` and everything behind it. An `io::Error` that wraps another error
/// answers `source()` with the *wrapped error's* source, skipping the wrapped
/// error itself, so the walk steps into it with `get_ref` instead: that is
/// where rustls leaves a handshake's real cause.
fn sources<'a>(
    error: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |&e| match e.downcast_ref::<io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
        None => e.source(),
    })
}

fn any_io(error: &(dyn StdError + 'static), test: fn(io::ErrorKind) -> bool) -> bool {
    sources(error).filter_map(|e| e.downcast_ref::<io::Error>()).any(|io| test(io.kind()))
}

fn any_hyper(error: &(dyn StdError + 'static), test: impl Fn(&hyper::Error) -> bool) -> bool {
    sources(error).filter_map(|e| e.downcast_ref::<hyper::Error>()).any(test)
}

/// Connect failures that may pass: nobody listening or no route yet, or a
/// TLS handshake the peer closed or reset before it completed.
fn is_passing_connect_failure(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::AddrNotAvailable
    ) || is_lost_connection(kind)
}

/// A connection that broke: reset, aborted, closed before the end, or
/// written to after the peer closed it.
fn is_lost_connection(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::BrokenPipe
    )
}

/// A name lookup that may succeed if tried again (a resolver timing out, a
/// DNS server briefly unreachable: `EAI_AGAIN`), as against a name that does
/// not exist (`NXDOMAIN`), which stays final.
///
/// A resolver that says so with a type is read by the type: an `io::Error`
/// of kind `TimedOut` or `Interrupted` in the chain. The system resolver
/// (`getaddrinfo`, behind reqwest's default) gives no code for it: Rust's
/// standard library turns `EAI_AGAIN` into an uncategorised `io::Error`
/// whose only trace is the C library's message. So, as a last resort, and
/// only inside a connect error, its wording is recognised: glibc's
/// "Temporary failure in name resolution" and musl's "Try again".
fn is_temporary_dns_failure(error: &(dyn StdError + 'static)) -> bool {
    sources(error).filter_map(|e| e.downcast_ref::<io::Error>()).any(|io| {
        if matches!(io.kind(), io::ErrorKind::TimedOut | io::ErrorKind::Interrupted) {
            return true;
        }
        let message = io.to_string();
        message.contains("Temporary failure in name resolution") || message.ends_with("Try again")
    })
}

/// HTTP/2 REFUSED_STREAM, or a GOAWAY without error: the server says it did
/// not process the stream (RFC 9113, section 8.7). Without the `http2`
/// feature the crate cannot read `h2`'s errors and finds none (reqwest may
/// still speak HTTP/2, with its own feature on: its refusals then meet the
/// generic rules, and reqwest's own resend of them stays on).
fn chain_has_refused_stream(error: &(dyn StdError + 'static)) -> bool {
    #[cfg(feature = "http2")]
    let found = sources(error).filter_map(|e| e.downcast_ref::<h2::Error>()).any(|h2| {
        h2.reason() == Some(h2::Reason::REFUSED_STREAM)
            || (h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR))
    });
    #[cfg(not(feature = "http2"))]
    let found = {
        let _ = error;
        false
    };
    found
}

/// An HTTP/2 stream reset, or its connection gone away, mid-body. Without
/// the `http2` feature the crate cannot read `h2`'s errors, and finds none.
fn chain_has_lost_stream(error: &(dyn StdError + 'static)) -> bool {
    #[cfg(feature = "http2")]
    let found = sources(error)
        .filter_map(|e| e.downcast_ref::<h2::Error>())
        .any(|h2| h2.is_io() || h2.is_go_away() || h2.is_reset());
    #[cfg(not(feature = "http2"))]
    let found = {
        let _ = error;
        false
    };
    found
}

#[cfg(test)]
mod tests;
