//! The retry rules for tower stacks: a [`Layer`] over any
//! `Service<http::Request<B>>` that answers `http::Response<R>` (feature
//! `tower`).
//!
//! The same rules and defaults as [`RetryMiddleware`]: a request is
//! repeated only when that is safe (an idempotent method, an
//! `Idempotency-Key`, [`SafeToRetry`](crate::SafeToRetry)), or when the
//! server provably never saw it (a connection never made, HTTP/2
//! REFUSED_STREAM) or answered `429`; with jittered backoff, `Retry-After`
//! up to its cap, the retry budget, host pauses and throttles, and the
//! deadline.
//!
//! ```
//! use reqwest_safe_retry::tower::RetryLayer;
//! use tower::ServiceBuilder;
//!
//! # fn stack<S>(client: S) -> reqwest_safe_retry::tower::Retry<S> {
//! // `client`: hyper-util's legacy `Client`, or any service below.
//! let service = ServiceBuilder::new().layer(RetryLayer::default()).service(client);
//! # service
//! # }
//! ```
//!
//! # Requests and bodies
//!
//! Each attempt sends a copy of the request, so its body must say how to
//! copy it ([`Replay`]): every `Clone` body does (`http_body_util::Full`,
//! `Empty`). A body that is not (hyper's `Incoming`, axum's `Body`, a
//! stream) goes through [`BodyBufferLayer`] above the layer, which reads it
//! into memory up to a limit; one that was longer is sent once, never
//! retried, never an error. Without it, such a stack does not build:
//!
//! ```compile_fail
//! # use reqwest_safe_retry::tower::RetryLayer;
//! # use tower::{Layer, Service, service_fn};
//! struct Streamed; // a body that cannot be copied
//! # fn check<S: Service<http::Request<Streamed>>>(_: S) {}
//! let client = service_fn(|_: http::Request<Streamed>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(()))
//! });
//! check(RetryLayer::default().layer(client));
//! ```
//!
//! (The same stack with `#[derive(Clone)] struct Streamed;` builds.)
//!
//! ```
//! # use reqwest_safe_retry::tower::RetryLayer;
//! # use tower::{Layer, Service, service_fn};
//! #[derive(Clone)]
//! struct Streamed;
//! # fn check<S: Service<http::Request<Streamed>>>(_: S) {}
//! let client = service_fn(|_: http::Request<Streamed>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(()))
//! });
//! check(RetryLayer::default().layer(client));
//! ```
//!
//! The request's
//! extensions carry the per-request overrides ([`MaxRetries`](crate::MaxRetries),
//! [`RetryDeadline`](crate::RetryDeadline), [`SafeToRetry`](crate::SafeToRetry),
//! [`MintKey`](crate::MintKey), [`ReturnIfPaused`](crate::rate_limit::ReturnIfPaused),
//! [`SkipThrottling`](crate::rate_limit::SkipThrottling)) and a
//! [`ReportSlot`](crate::report::ReportSlot); a retry's request carries its
//! [`AttemptNumber`](crate::report::AttemptNumber). The final answer
//! carries the [`RetryReport`](crate::report::RetryReport) when there is
//! more to say than one final attempt
//! ([`RetryReport::from_extensions`](crate::report::RetryReport::from_extensions)).
//!
//! # Errors
//!
//! The service's errors come back as they came, boxed. An attempt the
//! [attempt timeout](crate::RetryConfigBuilder::with_attempt_timeout) cut
//! fails with tower's [`Elapsed`](::tower::timeout::error::Elapsed), as
//! under tower's own `Timeout`; a call the deadline ended with no answer,
//! with [`DeadlineExceeded`](crate::DeadlineExceeded); one a paused or
//! throttled host kept back, with [`HostPaused`](crate::rate_limit::HostPaused)
//! or [`Throttled`](crate::rate_limit::Throttled). An error is read along
//! its `source()` chain, which tower's `Buffer` and `Timeout` keep:
//! hyper-util's `legacy::Error::is_connect` for a connection never made,
//! hyper's own errors for a connection lost, h2's REFUSED_STREAM, and
//! tower's `Elapsed`, an I/O timeout or hyper's for a timeout.
//!
//! A retry waits for the service to be ready, no later than the deadline;
//! a service that fails to become ready ends the call with its error and
//! [`StopReason::ServiceFailed`](crate::report::StopReason::ServiceFailed).
//!
//! # Hosts
//!
//! The budget, pauses and throttles are kept per host: the request URI's
//! scheme, host and port (a scheme's default port counts as none). A URI
//! that is a path alone (a server's requests, tonic's) is placed by its
//! `Host` header, with the scheme `http`; with neither, every such request
//! shares one entry. Hosts are compared as written: `API.test` and
//! `api.test` are two.
//!
//! # Where it goes in a stack
//!
//! - **Below `FollowRedirect`**: each hop is then a call of its own, retried
//!   by its own method's rules (a POST answered `303` is not sent again; the
//!   GET it turns into may be). Above it, an answer could be a later hop's,
//!   which the layer cannot tell from the request's own. tower-http 0.6
//!   does not carry a request's extensions to the next hop: its overrides
//!   and [`ReportSlot`](crate::report::ReportSlot) reach the first hop
//!   alone, and later hops go by the layer's settings.
//! - **Above `Timeout`** to bound one attempt (or use the attempt timeout);
//!   a `Timeout` above the layer bounds the whole call.
//! - **Above `Buffer`, rate and concurrency limits**, so that each attempt
//!   takes its own place. The layer waits for the service to be ready
//!   before each retry, as before the first.
//! - **Never with another retry** (`tower::retry`, a client's own): the
//!   attempts multiply.
//!
//! The [predicate](crate::RetryConfigBuilder::with_predicate) reads
//! reqwest's types and is not consulted here: a tower stack goes by the
//! built-in rules.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::tower::{Layer, Service};

use crate::RetryMiddleware;
use crate::config::RetryConfig;
use crate::shared::Shared;

mod call;
mod exchange;
mod replay;

pub use replay::{BodyBuffer, BodyBufferFuture, BodyBufferLayer, BufferedBody, Replay};

use exchange::BoxError;

/// Adds the retry rules to a service: see the [module](self).
#[derive(Clone)]
pub struct RetryLayer {
    shared: Arc<Shared>,
}

impl Default for RetryLayer {
    fn default() -> Self {
        Self::new(RetryConfig::default())
    }
}

impl RetryLayer {
    /// A layer with this policy, the [`TokioClock`](crate::clock::TokioClock)
    /// and thread-local randomness.
    pub fn new(config: RetryConfig) -> Self {
        Self::from(RetryMiddleware::new(config))
    }
}

/// The layer of a middleware's policy, clock, randomness, hook and fleet:
/// the middleware's builders set them up for both.
///
/// ```
/// use reqwest_safe_retry::{RetryMiddleware, clock::ManualClock, tower::RetryLayer};
///
/// let clock = ManualClock::new();
/// let layer = RetryLayer::from(RetryMiddleware::default().with_clock(clock.clone()));
/// # let _ = layer;
/// ```
impl From<RetryMiddleware> for RetryLayer {
    fn from(middleware: RetryMiddleware) -> Self {
        let mut shared = middleware.shared();
        // The service below follows no redirect (`FollowRedirect` goes
        // above): each answer is the request's own.
        Arc::make_mut(&mut shared).bound = true;
        Self { shared }
    }
}

impl fmt::Debug for RetryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer").field("config", &self.shared.config).finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry { inner, shared: self.shared.clone() }
    }
}

/// A service with the retry rules: made by [`RetryLayer`].
#[derive(Clone)]
pub struct Retry<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: fmt::Debug> fmt::Debug for Retry<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry").field("inner", &self.inner).finish_non_exhaustive()
    }
}

/// The future of a call through [`Retry`].
pub type ResponseFuture<R> =
    Pin<Box<dyn Future<Output = Result<http::Response<R>, BoxError>> + Send + 'static>>;

impl<S, B, R> Service<http::Request<B>> for Retry<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    B: Replay + Send + 'static,
    R: Send + 'static,
{
    type Response = http::Response<R>;
    type Error = BoxError;
    type Future = ResponseFuture<R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    /// The call goes to the service made ready; a clone of it stays for
    /// the next call to make ready.
    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let start = call::Start::new(&self.shared, request);
        Box::pin(call::run(self.shared.clone(), inner, start))
    }
}
