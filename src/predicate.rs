//! What a custom predicate sees of one finished attempt.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::{Request, Response};

use crate::reason::Retryability;

/// A custom retry predicate; see
/// [`RetryConfigBuilder::with_predicate`](crate::RetryConfigBuilder::with_predicate).
#[derive(Clone)]
pub(crate) struct Predicate(pub(crate) Arc<PredicateFn>);

type PredicateFn = dyn Fn(&Attempt<'_>) -> Option<Verdict> + Send + Sync;

impl std::ops::Deref for Predicate {
    type Target = PredicateFn;

    fn deref(&self) -> &PredicateFn {
        &*self.0
    }
}

impl std::fmt::Debug for Predicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<fn>")
    }
}

/// A predicate's answer about one attempt: how far its outcome may be
/// retried and, if the predicate chooses, how long to wait first.
///
/// A predicate may return a bare [`Retryability`] (it converts into a verdict
/// that leaves the wait to the policy) or a verdict with a wait, of one of two
/// kinds:
///
/// - [`server_asked`](Self::server_asked) (or
///   [`server_asked_until`](Self::server_asked_until)): a wait the *server*
///   named in a header the crate does not read itself, such as a rate
///   limit's reset time. It is treated exactly like `Retry-After`: capped by
///   the [`RetryAfter`](crate::RetryAfter) cap
///   (over the cap, the response is returned with
///   [`StopReason::RetryAfterTooLong`](crate::report::StopReason::RetryAfterTooLong),
///   or the cap is waited, as
///   its [`over_cap`](crate::RetryAfter::with_over_cap)
///   says), spread upwards like `Retry-After`, and priced like it by the
///   budget.
/// - [`after`](Self::after): a wait the *predicate* chose. It is waited
///   exactly: no cap, no spread, and the budget pays for the retry.
///
/// Both still end where the deadline would be passed, and neither makes a
/// request repeatable that is not.
///
/// ```
/// use std::time::Duration;
/// use reqwest_safe_retry::{Outcome, RetryConfig, Retryability, Verdict};
///
/// // A 409 means a lock is held: try again in exactly 250 ms, if safe.
/// let config = RetryConfig::builder()
///     .with_predicate(|attempt| match attempt.outcome {
///         Outcome::Response(r) if r.status() == 409 => {
///             Some(Verdict::new(Retryability::WhenSafe).after(Duration::from_millis(250)))
///         }
///         _ => None,
///     })
///     .build()?;
/// # Ok::<(), reqwest_safe_retry::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    retryability: Retryability,
    wait: Wait,
}

/// Where the wait before a predicate's retry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The policy's own: the backoff, or the server's `Retry-After`.
    Policy,
    /// The predicate's, waited as it is.
    Exactly(Duration),
    /// The server's, as a `Retry-After` of seconds would give it.
    Asked(Duration),
    /// The server's, as a `Retry-After` date would give it.
    AskedUntil(SystemTime),
}

impl Verdict {
    /// Retry as far as `retryability` allows, after the policy's own wait.
    pub fn new(retryability: Retryability) -> Self {
        Self { retryability, wait: Wait::Policy }
    }

    /// Wait exactly `wait` before the retry, instead of the backoff or the
    /// server's `Retry-After`. The wait is the predicate's choice, so no rule
    /// about the server's waits applies: it is not capped by
    /// the [`RetryAfter`](crate::RetryAfter) cap, not spread, and the budget pays for the retry. The
    /// deadline still applies, and so do the rules of safety: a wait does not
    /// make a request repeatable.
    ///
    /// For a wait the server named, use [`server_asked`](Self::server_asked).
    pub fn after(mut self, wait: Duration) -> Self {
        self.wait = Wait::Exactly(wait);
        self
    }

    /// The server asked for `wait` before the retry, in a form the crate does
    /// not read itself (a rate limit's reset header, say). It is treated as a
    /// `Retry-After` of that length, replacing the response's own: capped,
    /// spread, and priced as the [type's documentation](Self) says. The first
    /// retry of a call is free of the budget, as after a 429's
    /// `Retry-After`, when the outcome is a response that is a 429 or that
    /// the predicate answers [`Retryability::AnyMethod`] (the server refused
    /// before acting, and named a time), the wait is within the cap and not
    /// zero, and it is spread. After an error, or a response answered
    /// `WhenSafe`, the budget pays.
    pub fn server_asked(mut self, wait: Duration) -> Self {
        self.wait = Wait::Asked(wait);
        self
    }

    /// The server asked for no retry before `at` (a reset time given as a
    /// Unix timestamp, say). It is treated as a `Retry-After` date:
    /// measured against the response's `Date` when it has a valid one, else
    /// against the [`Clock`](crate::clock::Clock)'s wall time, and then as
    /// [`server_asked`](Self::server_asked). An instant in the past asks for
    /// no wait.
    pub fn server_asked_until(mut self, at: SystemTime) -> Self {
        self.wait = Wait::AskedUntil(at);
        self
    }

    /// How far the outcome may be retried.
    pub fn retryability(&self) -> Retryability {
        self.retryability
    }

    /// The wait the predicate chose with [`after`](Self::after), if any.
    /// (A wait the server asked for is not the predicate's choice: compare
    /// verdicts to check one.)
    pub fn wait(&self) -> Option<Duration> {
        match self.wait {
            Wait::Exactly(wait) => Some(wait),
            _ => None,
        }
    }

    /// Where the wait comes from.
    pub(crate) fn source(&self) -> Wait {
        self.wait
    }
}

impl From<Retryability> for Verdict {
    fn from(retryability: Retryability) -> Self {
        Self::new(retryability)
    }
}

/// The result of one attempt, as a custom predicate sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Outcome<'a> {
    /// The server answered; the body has not been read, unless
    /// [response buffering](crate::BodyBuffering::with_response)
    /// read it into memory.
    Response(&'a Response),
    /// The attempt failed without a response, or its body failed while
    /// response buffering read it.
    Error(&'a reqwest_middleware::Error),
}

impl<'a> Outcome<'a> {
    pub(crate) fn of(result: &'a reqwest_middleware::Result<Response>) -> Self {
        match result {
            Ok(response) => Outcome::Response(response),
            Err(error) => Outcome::Error(error),
        }
    }
}

/// One finished attempt, handed to a custom predicate.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Attempt<'a> {
    /// The request as the caller built it.
    pub request: &'a Request,
    /// Which attempt this was, starting at 1: the first attempt is 1, the
    /// first retry 2. (A `ShouldRetry(attempt, ...)` predicate counted from
    /// 0 sees `number - 1`.)
    pub number: u32,
    /// What came back.
    pub outcome: Outcome<'a>,
}
