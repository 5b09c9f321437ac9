//! tower's requests and answers, as the rules read them: `http` types, and
//! errors read from the chain hyper, hyper-util and tower give.

use std::error::Error as StdError;
use std::io;
use std::marker::PhantomData;
use std::time::Duration;

use http::header::HOST;
use http::request::Parts;
use http::{HeaderMap, Method, Request, Response, Uri};

use super::Replay;
use crate::classify::{self, Failure, Signs};
use crate::config::RetryConfig;
use crate::exchange::{Ended, Exchange};
use crate::head::Head;
use crate::hosts::Origin;
use crate::predicate::Verdict;

pub(crate) use ::tower::BoxError;

/// The adapter for a `Service<http::Request<B>>` answering
/// `http::Response<R>`.
pub(crate) struct Tower<B, R>(PhantomData<fn() -> (B, R)>);

/// A request kept for the next attempt, in its parts: a copy is the head's
/// clone and the body's [`Replay`], and sending it moves them back into a
/// request.
pub(crate) struct Pending<B> {
    pub(crate) head: Parts,
    pub(crate) body: B,
}

impl<B> Pending<B> {
    pub(crate) fn new(request: Request<B>) -> Self {
        let (head, body) = request.into_parts();
        Self { head, body }
    }

    pub(crate) fn into_request(self) -> Request<B> {
        Request::from_parts(self.head, self.body)
    }
}

impl<B: Replay, R> Exchange for Tower<B, R> {
    type Request = Pending<B>;
    type Response = Response<R>;
    type Error = BoxError;

    #[inline]
    fn method(request: &Pending<B>) -> &Method {
        &request.head.method
    }

    #[inline]
    fn headers(request: &Pending<B>) -> &HeaderMap {
        &request.head.headers
    }

    #[inline]
    fn origin(request: &Pending<B>) -> Origin<'_> {
        origin(&request.head.uri, &request.head.headers)
    }

    /// An `http::Request` carries no timeout.
    #[inline]
    fn timeout(_: &Pending<B>) -> Option<Duration> {
        None
    }

    /// No service reads a timeout off the request: the layer cuts the
    /// attempt itself.
    #[inline]
    fn carry_timeout(_: &mut Pending<B>, _: Option<Duration>) -> bool {
        false
    }

    /// A request whose body gives no copy is sent once.
    #[inline]
    fn try_clone(request: &Pending<B>) -> Option<Pending<B>> {
        let body = request.body.replay()?;
        Some(Pending { head: request.head.clone(), body })
    }

    #[inline]
    fn head(response: &Response<R>) -> Head<'_> {
        Head { status: response.status(), headers: response.headers() }
    }

    /// The layer reads no answer's body: every error is the attempt's.
    #[inline]
    fn failure(error: &BoxError, _: Option<&Pending<B>>, _: bool) -> Failure {
        let error: &(dyn StdError + 'static) = &**error;
        classify::failure(error, signs(error))
    }

    /// The answer is the request's own: redirects are followed outside the
    /// layer, each hop a call of its own.
    #[inline]
    fn answered(_: &Ended<Self>) -> Option<Origin<'_>> {
        None
    }

    #[inline]
    fn stopped_at_redirect(_: &Ended<Self>) -> bool {
        false
    }

    /// The predicate reads reqwest's types: a tower stack goes by the
    /// built-in rules.
    #[inline]
    fn verdict(_: &RetryConfig, _: &Pending<B>, _: u32, _: &Ended<Self>) -> Option<Verdict> {
        None
    }
}

/// The host a request goes to: its URI's scheme, host and port, or, for a
/// URI that is a path alone (as tonic and a server's requests have them),
/// its `Host` header's. A scheme's default port counts as none, as a URL
/// writes it; the host is compared as written. A port that is not a number
/// names none.
pub(crate) fn origin<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Origin<'a> {
    let scheme = uri.scheme_str().unwrap_or("http");
    let authority = match uri.authority() {
        Some(authority) => authority.as_str(),
        None => headers.get(HOST).and_then(|v| v.to_str().ok()).unwrap_or_default(),
    };
    let (host, port) = split(authority);
    let default = match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    Origin::new(scheme, host, port.filter(|&port| Some(port) != default))
}

/// An authority's host and port, by its bytes (`http`'s own accessors
/// parse it anew for each): what follows a user's `@` and precedes the
/// port's `:`. An IPv6 address keeps its brackets, as a URI writes it.
fn split(authority: &str) -> (&str, Option<u16>) {
    let at = |bytes: &[u8], byte: u8| bytes.iter().position(|&b| b == byte);
    let start = authority.bytes().rposition(|b| b == b'@').map_or(0, |at| at.saturating_add(1));
    let rest = &authority[start..];
    let end = match rest.as_bytes().first() {
        Some(b'[') => at(rest.as_bytes(), b']').map_or(rest.len(), |close| close.saturating_add(1)),
        _ => at(rest.as_bytes(), b':').unwrap_or(rest.len()),
    };
    let (host, port) = rest.split_at(end);
    (host, port.strip_prefix(':').and_then(|port| port.parse().ok()))
}

/// What the chain of a tower stack's error says that its messages do not:
/// hyper-util's connect error, a timer that fired (tower's `Elapsed`, an
/// I/O timeout, hyper's own), a refused connection whichever connector
/// met it, and whether hyper took part in sending. A
/// `legacy::Error` of another kind says nothing by itself: the request's
/// own faults (a URI without its host, an unsupported version) are final,
/// and the sending's carry hyper's error.
fn signs(error: &(dyn StdError + 'static)) -> Signs {
    let mut signs = Signs::default();
    for error in classify::sources(error) {
        if let Some(client) = error.downcast_ref::<hyper_util::client::legacy::Error>() {
            signs.connect |= client.is_connect();
        } else if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
            signs.request = true;
            signs.timeout |= hyper.is_timeout();
        } else if error.is::<::tower::timeout::error::Elapsed>() {
            signs.timeout = true;
        } else if let Some(io) = error.downcast_ref::<io::Error>() {
            signs.timeout |= io.kind() == io::ErrorKind::TimedOut;
            // A peer refuses only a connection: whatever client made the
            // attempt (tonic's own connector, a hand-made one), nothing
            // was sent.
            signs.connect |= io.kind() == io::ErrorKind::ConnectionRefused;
        }
    }
    signs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, host: Option<&str>) -> Request<()> {
        let mut request = Request::builder().uri(uri);
        if let Some(host) = host {
            request = request.header(HOST, host);
        }
        request.body(()).unwrap()
    }

    #[test]
    fn a_request_is_located_by_its_uri_or_else_its_host_header() {
        let cases = [
            ("http://127.0.0.1:8080/x", None, Origin::new("http", "127.0.0.1", Some(8080))),
            ("https://api.test:443/x", None, Origin::new("https", "api.test", None)),
            ("http://api.test:80/x", Some("other.test"), Origin::new("http", "api.test", None)),
            ("/svc/Method", Some("127.0.0.1:50051"), Origin::new("http", "127.0.0.1", Some(50051))),
            ("/x", Some("[::1]:9000"), Origin::new("http", "[::1]", Some(9000))),
            ("/x", Some("[::1]"), Origin::new("http", "[::1]", None)),
            ("/x", Some("api.test:nope"), Origin::new("http", "api.test", None)),
            ("http://user:pw@api.test:8443/x", None, Origin::new("http", "api.test", Some(8443))),
            ("http://[::1]:8080/x", None, Origin::new("http", "[::1]", Some(8080))),
            ("/x", None, Origin::new("http", "", None)),
        ];
        for (uri, host, expected) in cases {
            let request = request(uri, host);
            assert!(origin(request.uri(), request.headers()) == expected, "{uri} {host:?}");
        }
    }

    #[test]
    fn a_timer_anywhere_in_the_chain_is_a_timeout() {
        let elapsed: BoxError = Box::new(::tower::timeout::error::Elapsed::new());
        assert_eq!(signs(&*elapsed), Signs { timeout: true, ..Signs::default() });
        let io: BoxError = Box::new(io::Error::new(io::ErrorKind::TimedOut, "slow"));
        assert!(signs(&*io).timeout);
        let other: BoxError = Box::new(io::Error::other("no"));
        assert_eq!(signs(&*other), Signs::default());
    }

    #[test]
    fn a_refused_connection_is_one_never_made_whoever_wraps_it() {
        /// A client's own error around the connector's, as tonic's
        /// transport error is.
        #[derive(Debug)]
        struct Transport(io::Error);
        impl std::fmt::Display for Transport {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("transport error")
            }
        }
        impl StdError for Transport {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let refused: BoxError =
            Box::new(Transport(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert_eq!(signs(&*refused), Signs { connect: true, ..Signs::default() });
        assert_eq!(classify::failure(&*refused, signs(&*refused)), Failure::NeverReached);
        let reset: BoxError = Box::new(Transport(io::Error::from(io::ErrorKind::ConnectionReset)));
        assert_eq!(
            classify::failure(&*reset, signs(&*reset)),
            Failure::Final,
            "no sign it was sent"
        );
    }
}
