//! The head of an answer, as the rules read it: its status and headers, in
//! no client's terms. Each adapter makes one from its client's response.

use http::{HeaderMap, StatusCode};

/// An answer's status and headers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head<'a> {
    pub(crate) status: StatusCode,
    pub(crate) headers: &'a HeaderMap,
}

impl<'a> Head<'a> {
    /// The head of reqwest's `response`.
    pub(crate) fn of(response: &'a reqwest::Response) -> Self {
        Self { status: response.status(), headers: response.headers() }
    }
}
