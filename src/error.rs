//! The crate's own errors: invalid configuration, a client the middleware
//! could not build, and a deadline that ran out where reqwest could not
//! report it as a timeout.

use std::io;
use std::time::Duration;

/// An invalid setting, rejected when the configuration is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: `{field}` {message}")]
pub struct ConfigError {
    field: &'static str,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(field: &'static str, message: String) -> Self {
        Self { field, message }
    }

    /// The name of the offending setting, as the user typed it: the name
    /// of its setter on [`RetryConfigBuilder`](crate::RetryConfigBuilder)
    /// without `with_` (`deadline` for `with_deadline`), and for a setting of
    /// a value type, a dot and the name of that type's setter without
    /// `with_` (`backoff.initial` for `with_backoff(Backoff::default().with_initial(..))`,
    /// `budget.reserve`, `body_buffering.request`).
    pub fn field(&self) -> &'static str {
        self.field
    }
}

/// Why [`RetryMiddleware::client`](crate::RetryMiddleware::client) built no
/// client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The builder has a redirect policy of its own (set with
    /// `reqwest::ClientBuilder::redirect`). The middleware installs the
    /// policy that records redirects, which would replace it without a word:
    /// a hop limit or a filter the user relies on would be lost. Give the
    /// policy to
    /// [`with_redirect_policy`](crate::RetryMiddleware::with_redirect_policy)
    /// instead.
    #[error(
        "the client builder has a redirect policy of its own, which the middleware's would \
         replace: give it to `RetryMiddleware::with_redirect_policy` instead"
    )]
    RedirectPolicySet,
    /// reqwest could not build the client.
    #[error("the client could not be built")]
    Build(#[source] reqwest::Error),
}

/// The call's deadline passed, and reqwest could not say so itself.
///
/// Where it can, the middleware lets reqwest report a deadline: it cuts the
/// attempt's own timeout to the time left, so the error is a `reqwest::Error`
/// whose `is_timeout()` is true. It cannot when the attempt has no timeout
/// the middleware can see (setting one would replace the client's own
/// default, which may be shorter), nor when the time ran out during a wait,
/// after the previous outcome was discarded, or while a streamed body was
/// read before the first attempt (see
/// [request body buffering](crate::BodyBuffering::with_request)).
/// Then the caller gets this error,
/// inside [`reqwest_middleware::Error::Middleware`]:
///
/// ```
/// # fn check(error: &reqwest_middleware::Error) -> bool {
/// use reqwest_safe_retry::DeadlineExceeded;
///
/// let timed_out = error.is_timeout()
///     || matches!(error, reqwest_middleware::Error::Middleware(e) if e.is::<DeadlineExceeded>());
/// # timed_out
/// # }
/// ```
///
/// When the deadline is the request's own timeout
/// (`RequestBuilder::timeout`, which bounds the whole call), the caller
/// gets reqwest's own kind of error instead, as from reqwest alone: a
/// `reqwest::Error` with the request's URL, whose `is_timeout()` is true and
/// whose source chain holds this error inside an `io::Error` of kind
/// `TimedOut`.
///
/// The body of a response returned under such a deadline is bounded by it
/// too: a read still going when it passes fails with a `reqwest::Error`
/// whose `is_timeout()` is true, and whose source is an `io::Error` of kind
/// `TimedOut` holding this error (`io::Error::get_ref`).
///
/// Where a redirect answered the request before the deadline passed, the
/// request was processed: [`redirected`](Self::redirected) says so, and so
/// does the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "retry deadline of {deadline:?} exceeded after {attempts} attempt(s){}",
    if *redirected { ", the request answered with a redirect: it was processed" } else { "" }
)]
pub struct DeadlineExceeded {
    deadline: Duration,
    attempts: u32,
    redirected: bool,
}

impl DeadlineExceeded {
    pub(crate) fn new(deadline: Duration, attempts: u32, redirected: bool) -> Self {
        Self { deadline, attempts, redirected }
    }

    /// The deadline that passed, measured from when the middleware first saw
    /// the request.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Attempts sent before it passed, counting one cut short.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether a server answered the request with a redirect before the
    /// deadline passed, in this attempt or an earlier one: the request was
    /// processed, even though no final answer came back in time.
    pub fn redirected(&self) -> bool {
        self.redirected
    }

    /// This error as reqwest's own timeout for `url`: a `reqwest::Error`
    /// whose `is_timeout()` is true, holding this error inside an
    /// `io::Error` of kind `TimedOut`. reqwest's errors are made only by
    /// reqwest: this one is the error reqwest gives for a response body that
    /// fails so, read at once from a body that does.
    pub(crate) fn as_reqwest_timeout(self, url: &reqwest::Url) -> reqwest_middleware::Error {
        let failing = reqwest::Body::wrap(TimedOutBody(Some(self)));
        let read = reqwest::Response::from(http::Response::new(failing)).bytes();
        let mut read = std::pin::pin!(read);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match read.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Err(error)) => error.with_url(url.clone()).into(),
            // The body fails on its first read: unreachable, and this error
            // still says what happened.
            _ => reqwest_middleware::Error::middleware(self),
        }
    }
}

/// A body whose first read fails with a timeout holding the deadline.
struct TimedOutBody(Option<DeadlineExceeded>);

impl hyper::body::Body for TimedOutBody {
    type Data = hyper::body::Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let error = self.0.take().map(|cause| io::Error::new(io::ErrorKind::TimedOut, cause));
        std::task::Poll::Ready(error.map(Err))
    }
}
