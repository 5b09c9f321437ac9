//! What a custom predicate sees of one finished attempt.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Request, Response};

use crate::reason::Retryability;

/// A custom retry predicate; see
/// [`RetryConfigBuilder::with_predicate`](crate::RetryConfigBuilder::with_predicate).
pub(crate) type Predicate = Arc<dyn Fn(&Attempt<'_>) -> Option<Verdict> + Send + Sync>;

/// A predicate's answer about one attempt: how far its outcome may be
/// retried and, if the predicate chooses, how long to wait first.
///
/// A predicate may return a bare [`Retryability`] (it converts into a verdict
/// that leaves the wait to the policy) or a verdict with a wait:
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
    wait: Option<Duration>,
}

impl Verdict {
    /// Retry as far as `retryability` allows, after the policy's own wait.
    pub fn new(retryability: Retryability) -> Self {
        Self { retryability, wait: None }
    }

    /// Wait exactly `wait` before the retry, instead of the backoff or the
    /// server's `Retry-After`. The deadline and the budget still apply, and
    /// so do the rules of safety: a wait does not make a request repeatable.
    pub fn after(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// How far the outcome may be retried.
    pub fn retryability(&self) -> Retryability {
        self.retryability
    }

    /// The wait the predicate chose, if any.
    pub fn wait(&self) -> Option<Duration> {
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
    /// [response buffering](crate::RetryConfigBuilder::with_response_body_buffering)
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
