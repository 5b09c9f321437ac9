//! The built-in rules, outcome by outcome: statuses, connection failures, timeouts, HTTP/2 refusals and broken bodies.

use std::fmt;

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

fn wrapped(kind: io::ErrorKind) -> Wrapper {
    Wrapper(Box::new(Wrapper(Box::new(io::Error::from(kind)))))
}

#[test]
fn the_walk_steps_into_an_io_error_that_wraps_another() {
    // As rustls reports a handshake the peer closed: an `Other` error
    // around the real one, which `source()` alone would skip.
    let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "tls handshake eof");
    let outer = Wrapper(Box::new(io::Error::other(eof)));
    assert!(any_io(&outer, is_passing_connect_failure));
    let certificate = io::Error::new(io::ErrorKind::InvalidData, "unknown issuer");
    let outer = Wrapper(Box::new(io::Error::other(certificate)));
    assert!(!any_io(&outer, is_passing_connect_failure));
}

#[test]
fn temporary_name_lookup_failures_are_told_from_names_that_do_not_exist() {
    let lookup = |e: io::Error| is_temporary_dns_failure(&Wrapper(Box::new(e)));
    assert!(lookup(io::Error::from(io::ErrorKind::TimedOut)));
    assert!(lookup(io::Error::from(io::ErrorKind::Interrupted)));
    // As std reports getaddrinfo's EAI_AGAIN (glibc, then musl).
    let glibc = "failed to lookup address information: Temporary failure in name resolution";
    assert!(lookup(io::Error::other(glibc)));
    assert!(lookup(io::Error::other("failed to lookup address information: Try again")));
    // EAI_NONAME, NXDOMAIN: final.
    let nxdomain = "failed to lookup address information: Name or service not known";
    assert!(!lookup(io::Error::other(nxdomain)));
    assert!(!lookup(io::Error::from(io::ErrorKind::NotFound)));
}

#[test]
fn passing_connect_failures_are_found_deep_in_the_chain() {
    for kind in [
        io::ErrorKind::ConnectionRefused,
        io::ErrorKind::HostUnreachable,
        io::ErrorKind::NetworkUnreachable,
        io::ErrorKind::AddrNotAvailable,
        io::ErrorKind::ConnectionReset,
        io::ErrorKind::ConnectionAborted,
        io::ErrorKind::UnexpectedEof,
        io::ErrorKind::BrokenPipe,
    ] {
        assert!(any_io(&wrapped(kind), is_passing_connect_failure), "{kind:?}");
    }
    for kind in [io::ErrorKind::InvalidData, io::ErrorKind::Other, io::ErrorKind::TimedOut] {
        assert!(!any_io(&wrapped(kind), is_passing_connect_failure), "{kind:?}");
    }
}

#[tokio::test]
async fn a_request_handed_back_unsent_is_recognised() {
    // A connection that is gone before the request is written: hyper
    // hands the request back as canceled.
    let (io, _peer) = tokio::io::duplex(64);
    let io = hyper_util::rt::TokioIo::new(io);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, String>(io).await.unwrap();
    drop(connection);
    let error = sender.send_request(http::Request::new(String::new())).await.unwrap_err();
    let chain = Wrapper(Box::new(error));
    assert!(any_hyper(&chain, hyper::Error::is_canceled));
    assert!(!any_hyper(&chain, |e| e.is_parse() || e.is_user()));
}

#[cfg(feature = "http2")]
#[tokio::test]
async fn a_connection_gone_at_setup_is_recognised_as_not_sent() {
    // What hyper-util's connect_to gets from `SendRequest::ready()` when
    // the fresh connection's dispatcher is already gone.
    let (io, _peer) = tokio::io::duplex(64 * 1024);
    let io = hyper_util::rt::TokioIo::new(io);
    let executor = hyper_util::rt::TokioExecutor::new();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake::<_, _, String>(executor, io).await.unwrap();
    drop(connection);
    let error = sender.ready().await.unwrap_err();
    assert!(error.is_closed());
    let chain = Wrapper(Box::new(error));
    assert_eq!(dispatch_failure(&chain), Some(Failure::NotSent));
}

#[cfg(feature = "http2")]
#[test]
fn refused_streams_and_graceful_goaway_are_recognised() {
    let refused = Wrapper(Box::new(h2::Error::from(h2::Reason::REFUSED_STREAM)));
    assert!(chain_has_refused_stream(&refused));
    let cancel = Wrapper(Box::new(h2::Error::from(h2::Reason::CANCEL)));
    assert!(!chain_has_refused_stream(&cancel));
    // NO_ERROR proves nothing unprocessed unless a GOAWAY says it.
    let reset = Wrapper(Box::new(h2::Error::from(h2::Reason::NO_ERROR)));
    assert!(!chain_has_refused_stream(&reset));
}

#[cfg(not(feature = "http2"))]
#[test]
fn without_http2_no_stream_is_taken_for_refused() {
    assert!(!chain_has_refused_stream(&wrapped(io::ErrorKind::ConnectionRefused)));
}

#[test]
fn a_predicate_that_says_never_gives_no_reach() {
    assert_eq!(Reach::of(Retryability::Never), None);
    assert_eq!(Reach::of(Retryability::WhenSafe), Some(Reach::WhenSafe));
    assert_eq!(Reach::of(Retryability::AnyMethod), Some(Reach::AnyMethod));
}

#[test]
fn statuses_follow_the_given_set() {
    let set = [429, 502, 503, 504].map(|c| StatusCode::from_u16(c).unwrap());
    let verdict =
        |code: u16, any: bool| classify_status(StatusCode::from_u16(code).unwrap(), &set, any);
    assert_eq!(verdict(429, true).unwrap().0, Reach::AnyMethod);
    assert_eq!(verdict(429, false).unwrap().0, Reach::WhenSafe);
    for code in [502, 503, 504] {
        let (reach, reason) = verdict(code, true).unwrap();
        assert_eq!(reach, Reach::WhenSafe);
        assert_eq!(reason, RetryReason::Status(StatusCode::from_u16(code).unwrap()));
    }
    for code in [200, 201, 301, 400, 404, 408, 500, 501, 505, 599] {
        assert_eq!(verdict(code, true), None, "{code}");
    }
}

#[test]
fn only_reqwest_errors_are_read_for_a_body_failure() {
    let error =
        reqwest_middleware::Error::middleware(io::Error::from(io::ErrorKind::ConnectionReset));
    assert_eq!(body_failure_of(&error), Failure::Final);
}

#[test]
fn errors_from_other_middleware_are_final() {
    let error =
        reqwest_middleware::Error::middleware(io::Error::from(io::ErrorKind::ConnectionRefused));
    assert_eq!(failure_of(&error, None), Failure::Final);
}

#[test]
fn a_failure_is_read_from_the_client_s_signs_and_the_chain() {
    let read = |kind, signs| failure(&wrapped(kind), signs);
    let connect = Signs { connect: true, ..Signs::default() };
    assert_eq!(read(io::ErrorKind::ConnectionRefused, connect), Failure::NeverReached);
    assert_eq!(read(io::ErrorKind::InvalidData, connect), Failure::Final, "a certificate");
    let connect_timeout = Signs { timeout: true, ..connect };
    assert_eq!(read(io::ErrorKind::Other, connect_timeout), Failure::NeverReached);
    let request = Signs { request: true, ..Signs::default() };
    assert_eq!(read(io::ErrorKind::ConnectionReset, request), Failure::ConnectionLost);
    let timeout = Signs { timeout: true, ..Signs::default() };
    assert_eq!(read(io::ErrorKind::Other, timeout), Failure::Timeout);
    // Neither sent nor connecting: not this request's failure to repeat.
    assert_eq!(read(io::ErrorKind::ConnectionReset, Signs::default()), Failure::Final);
}

#[test]
fn a_body_s_failure_is_a_timeout_a_lost_connection_or_final() {
    assert_eq!(body_failure(&wrapped(io::ErrorKind::TimedOut), false), Failure::Timeout);
    assert_eq!(body_failure(&wrapped(io::ErrorKind::Other), true), Failure::Timeout);
    assert_eq!(
        body_failure(&wrapped(io::ErrorKind::UnexpectedEof), false),
        Failure::ConnectionLost
    );
    assert_eq!(body_failure(&wrapped(io::ErrorKind::InvalidData), false), Failure::Final);
}

#[test]
fn each_failure_has_its_reach_and_reason() {
    let table = [
        (Failure::NeverReached, Some((Reach::AnyMethod, RetryReason::NotConnected))),
        (Failure::NotSent, Some((Reach::AnyMethod, RetryReason::NotSent))),
        (Failure::RefusedStream, Some((Reach::AnyMethod, RetryReason::RefusedStream))),
        (Failure::Timeout, Some((Reach::WhenSafe, RetryReason::Timeout))),
        (Failure::ConnectionLost, Some((Reach::WhenSafe, RetryReason::ConnectionLost))),
        (Failure::Final, None),
    ];
    for (failure, class) in table {
        assert_eq!(failure.class(), class, "{failure:?}");
    }
}
