//! reqwest-middleware's requests and answers, as the rules read them.

use std::time::Duration;

use http::{HeaderMap, Method};
use reqwest::{Request, Response};

use super::{Ended, Exchange};
use crate::classify::{self, Failure};
use crate::config::RetryConfig;
use crate::head::Head;
use crate::hosts::{Located, Origin};
use crate::predicate::{Attempt, Outcome, Verdict};

/// The host of the URL reqwest gives a response built from an
/// `http::Response` with none (`http://no.url.provided.local`).
const NO_URL_HOST: &str = "no.url.provided.local";

/// The adapter for reqwest-middleware.
#[derive(Debug)]
pub(crate) struct Reqwest;

impl Exchange for Reqwest {
    type Request = Request;
    type Response = Response;
    type Error = reqwest_middleware::Error;

    #[inline]
    fn method(request: &Request) -> &Method {
        request.method()
    }

    #[inline]
    fn headers(request: &Request) -> &HeaderMap {
        request.headers()
    }

    #[inline]
    fn origin(request: &Request) -> Origin<'_> {
        request.url().as_origin()
    }

    #[inline]
    fn timeout(request: &Request) -> Option<Duration> {
        request.timeout().copied()
    }

    /// reqwest enforces the timeout a request carries. It is written only
    /// when it changes: reqwest keeps it in the request's extensions, and
    /// writing one there allocates their map.
    #[inline]
    fn carry_timeout(request: &mut Request, timeout: Option<Duration>) -> bool {
        if request.timeout().copied() != timeout {
            *request.timeout_mut() = timeout;
        }
        true
    }

    #[inline]
    fn try_clone(request: &Request) -> Option<Request> {
        request.try_clone()
    }

    #[inline]
    fn head(response: &Response) -> Head<'_> {
        Head::of(response)
    }

    #[inline]
    fn failure(error: &Self::Error, request: Option<&Request>, body_failed: bool) -> Failure {
        match body_failed {
            true => classify::body_failure_of(error),
            false => classify::failure_of(error, request.map(Request::url)),
        }
    }

    /// The URL of the response, or the one reqwest's error names. A
    /// response built by a middleware without a URL carries reqwest's
    /// stand-in, which names no host.
    fn answered(ended: &Ended<Self>) -> Option<Origin<'_>> {
        let url = match ended {
            Ok(response) if response.url().host_str() == Some(NO_URL_HOST) => None,
            Ok(response) => Some(response.url()),
            Err(reqwest_middleware::Error::Reqwest(error)) => error.url(),
            Err(reqwest_middleware::Error::Middleware(_)) => None,
        };
        url.map(Located::as_origin)
    }

    /// A redirect answer reqwest left alone (its policy stopped there), or
    /// the error its policy chose.
    fn stopped_at_redirect(ended: &Ended<Self>) -> bool {
        match ended {
            Ok(response) => {
                crate::redirect::is_redirect(response.status())
                    && response.headers().contains_key(http::header::LOCATION)
            }
            Err(reqwest_middleware::Error::Reqwest(error)) => error.is_redirect(),
            Err(reqwest_middleware::Error::Middleware(_)) => false,
        }
    }

    #[inline]
    fn verdict(
        config: &RetryConfig,
        request: &Request,
        number: u32,
        ended: &Ended<Self>,
    ) -> Option<Verdict> {
        let predicate = config.predicate()?;
        predicate(&Attempt { request, number, outcome: Outcome::of(ended) })
    }
}
