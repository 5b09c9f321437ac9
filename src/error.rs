//! The crate's own errors: invalid configuration, a client the middleware
//! could not build, and a deadline that ran out where reqwest could not
//! report it as a timeout.

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
}
