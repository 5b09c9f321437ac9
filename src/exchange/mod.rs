//! What the rules read of a client: the one seam between the decisions and
//! an adapter.
//!
//! The policy of a call (`policy::Policy`) is written once, on this trait.
//! Each client gives it a request (its method, headers, host, a copy for
//! the next attempt) and an attempt's end (an answer's head, or what its
//! failure says) through an [`Exchange`] of its own: reqwest's in
//! `from_reqwest.rs`, tower's in `crate::tower`. Nothing here names a
//! client.

use std::time::Duration;

use http::{HeaderMap, Method};

use crate::classify::Failure;
use crate::config::RetryConfig;
use crate::head::Head;
use crate::hosts::Origin;
use crate::predicate::Verdict;

mod from_reqwest;

pub(crate) use from_reqwest::Reqwest;

/// How an attempt ended, in the client's own types.
pub(crate) type Ended<E> = Result<<E as Exchange>::Response, <E as Exchange>::Error>;

/// A client's requests and answers, as the rules read them.
pub(crate) trait Exchange {
    /// The request the client sends.
    type Request;
    /// The answer it gives back.
    type Response;
    /// The error an attempt fails with.
    type Error;

    /// The request's method.
    fn method(request: &Self::Request) -> &Method;

    /// The request's headers.
    fn headers(request: &Self::Request) -> &HeaderMap;

    /// The host the request goes to.
    fn origin(request: &Self::Request) -> Origin<'_>;

    /// The request's own timeout, if the client keeps one on it.
    fn timeout(request: &Self::Request) -> Option<Duration>;

    /// Puts `timeout` on the request for the client to enforce. `false`
    /// when the client reads no timeout there: the adapter cuts the
    /// attempt itself.
    fn carry_timeout(request: &mut Self::Request, timeout: Option<Duration>) -> bool;

    /// A copy of the request for another attempt, if its body can be
    /// copied.
    fn try_clone(request: &Self::Request) -> Option<Self::Request>;

    /// An answer's status and headers.
    fn head(response: &Self::Response) -> Head<'_>;

    /// What a failed attempt of `request` (the copy kept, if one was) says
    /// about it; `body_failed` when the error is the one its answer's body
    /// failed with while the adapter read it.
    fn failure(error: &Self::Error, request: Option<&Self::Request>, body_failed: bool) -> Failure;

    /// The host that answered, where the outcome names one (the last
    /// hop's, after redirects the client followed).
    fn answered(ended: &Ended<Self>) -> Option<Origin<'_>>;

    /// Whether the client's redirects stopped at the outcome: a redirect
    /// answer left alone, or the error the client's redirect policy chose.
    fn stopped_at_redirect(ended: &Ended<Self>) -> bool;

    /// The verdict of the configured predicate on attempt `number` of
    /// `request`, if the adapter has one and it gives one.
    fn verdict(
        config: &RetryConfig,
        request: &Self::Request,
        number: u32,
        ended: &Ended<Self>,
    ) -> Option<Verdict>;
}
