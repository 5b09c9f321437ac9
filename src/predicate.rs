//! What a custom predicate sees of one finished attempt.

use std::sync::Arc;

use reqwest::{Request, Response};

use crate::reason::Retryability;

/// A custom retry predicate; see
/// [`RetryConfigBuilder::with_predicate`](crate::RetryConfigBuilder::with_predicate).
pub(crate) type Predicate = Arc<dyn Fn(&Attempt<'_>) -> Option<Retryability> + Send + Sync>;

/// The result of one attempt, as a custom predicate sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Outcome<'a> {
    /// The server answered; the body has not been read.
    Response(&'a Response),
    /// The attempt failed without a response.
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
    /// Which attempt this was, starting at 1.
    pub number: u32,
    /// What came back.
    pub outcome: Outcome<'a>,
}
