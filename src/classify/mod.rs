//! What an attempt's outcome says about repeating the request.
//!
//! Two questions decide a retry, and they are kept apart: *may the outcome be
//! retried at all*, and *is this request safe to repeat*. This module answers
//! the first, as pure functions of the outcome: `None` means final, and
//! `Some` carries how far the outcome may be retried and why. The method and
//! the idempotency key answer the second (in `safety.rs`), with the redirect
//! rule (in the policy).
//!
//! A client's error is read in two steps. Its adapter reads the signs only
//! the client's own type gives (for reqwest: `is_connect`, `is_timeout`,
//! `is_request`, in `from_reqwest.rs`) into [`Signs`]; [`failure`] then reads
//! the rest from the error's chain and says what happened in no client's
//! terms, a [`Failure`], which [`Failure::class`] turns into the rules'
//! answer. The throttle reads the same [`Failure`].
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

mod from_reqwest;

pub(crate) use self::from_reqwest::{body_failure_of, failure_of};

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

/// What a failed attempt says about its request, in no client's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Never reached the server, by a failure that may pass: a refused or
    /// unreachable peer, a connect timeout, a TLS handshake cut off, a
    /// name lookup that timed out.
    NeverReached,
    /// Handed back unsent by the client: its new connection closed before
    /// the request was written.
    NotSent,
    /// HTTP/2 REFUSED_STREAM, or a graceful GOAWAY: the server says it did
    /// not process the stream.
    RefusedStream,
    /// No answer in time, after the request may have been written.
    Timeout,
    /// The connection broke after the request may have been written.
    ConnectionLost,
    /// The same next time (a certificate, a protocol or parse error, an
    /// error in the request itself), or not this request's own.
    Final,
}

impl Failure {
    /// The built-in rules for it: how far it may be retried and why.
    pub(crate) fn class(self) -> Class {
        match self {
            Self::NeverReached => Some((Reach::AnyMethod, RetryReason::NotConnected)),
            Self::NotSent => Some((Reach::AnyMethod, RetryReason::NotSent)),
            Self::RefusedStream => Some((Reach::AnyMethod, RetryReason::RefusedStream)),
            Self::Timeout => Some((Reach::WhenSafe, RetryReason::Timeout)),
            Self::ConnectionLost => Some((Reach::WhenSafe, RetryReason::ConnectionLost)),
            Self::Final => None,
        }
    }
}

/// What a client's own error type says that its chain may not: an adapter
/// reads these off it for [`failure`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Signs {
    /// The connection was never made (reqwest's `is_connect`).
    pub(crate) connect: bool,
    /// The client's own timer fired (reqwest's `is_timeout`).
    pub(crate) timeout: bool,
    /// Sending the request failed, as against building it or reading the
    /// response's body (reqwest's `is_request`).
    pub(crate) request: bool,
}

/// What `error`, a failed attempt whose client gave `signs`, says about
/// its request.
pub(crate) fn failure(error: &(dyn StdError + 'static), signs: Signs) -> Failure {
    if signs.connect {
        // The request was never written. Retrying is safe for any method, but
        // only useful when the failure can pass: a refused or unreachable
        // peer, a connect timeout, a TLS handshake the peer cut off (an
        // overloaded load balancer does that). A certificate or protocol
        // error, or a name that does not resolve, fails the same way again.
        let passing = signs.timeout
            || any_io(error, is_passing_connect_failure)
            || is_temporary_dns_failure(error);
        return if passing { Failure::NeverReached } else { Failure::Final };
    }
    if chain_has_refused_stream(error) {
        return Failure::RefusedStream;
    }
    if any_hyper(error, hyper::Error::is_canceled) {
        // hyper hands a request back unsent when its new connection closed
        // before the request was written (on a reused one it retries itself).
        return Failure::NotSent;
    }
    if signs.request {
        if let Some(failure) = dispatch_failure(error) {
            return failure;
        }
    }
    if signs.timeout {
        return Failure::Timeout;
    }
    // A malformed response, oversized headers or an unsupported version
    // will be the same next time; so will an error in the request itself.
    if signs.request && !any_hyper(error, |e| e.is_parse() || e.is_user()) {
        // Reset, closed before the response, incomplete message: the
        // request may have been processed.
        return Failure::ConnectionLost;
    }
    Failure::Final
}

/// What the failure of a response's body, read after its head came, says:
/// a timeout (`timeout`, the client's own sign, or one in the chain) or a
/// connection lost mid-body (reset, aborted, closed before the declared
/// length) may be retried when the request is safe to repeat. A malformed
/// body will be the same next time: final.
pub(crate) fn body_failure(error: &(dyn StdError + 'static), timeout: bool) -> Failure {
    if timeout || any_io(error, |kind| kind == io::ErrorKind::TimedOut) {
        return Failure::Timeout;
    }
    // A malformed body (a bad chunk size, say) comes as an I/O error of
    // another kind, and is final by falling through: no case below is it.
    let lost = any_io(error, is_lost_connection)
        || any_hyper(error, |e| e.is_incomplete_message() || e.is_closed())
        || chain_has_lost_stream(error);
    if lost { Failure::ConnectionLost } else { Failure::Final }
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
fn dispatch_failure(error: &(dyn StdError + 'static)) -> Option<Failure> {
    let hyper = sources(error).find_map(|e| e.downcast_ref::<hyper::Error>())?;
    if hyper.is_closed() {
        return Some(Failure::NotSent);
    }
    if hyper.is_user()
        && !hyper.is_body_write_aborted()
        && hyper.to_string() == "dispatch task is gone"
    {
        return Some(Failure::ConnectionLost);
    }
    None
}

/// `error` and everything behind it. An `io::Error` that wraps another error
/// answers `source()` with the *wrapped error's* source, skipping the wrapped
/// error itself, so the walk steps into it with `get_ref` instead: that is
/// where rustls leaves a handshake's real cause.
pub(crate) fn sources<'a>(
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
