//! Reading the body of a final response inside the attempt, so that a body
//! that breaks while it is read is retried like any other failed attempt.
//! What a caller gets is stated once, on
//! [`BodyBuffering::with_response`](crate::BodyBuffering::with_response).

use hyper::body::Frame;
use reqwest::{Response, ResponseBuilderExt};
use reqwest_middleware::{Error, Result};

use super::replay::{Tail, append, replay};
use crate::classify;
use crate::config::RetryConfig;

/// Reads the body of `outcome`, when it is a response the built-in status
/// rules take as final, up to `limit`. Returns the outcome to decide on,
/// whether it is the error the body failed with, and whether the response's
/// whole body is in memory.
///
/// A status the rules would retry is left as it is: its body is discarded
/// during the wait if it is retried, and handed over as it streams if not.
pub(crate) async fn read_whole(
    config: &RetryConfig,
    outcome: Result<Response>,
    limit: usize,
) -> (Result<Response>, bool, bool) {
    let response = match outcome {
        Ok(response)
            if classify::classify_status(
                response.status(),
                &config.retryable_statuses,
                config.retry_429_any_method,
            )
            .is_none() =>
        {
            response
        }
        outcome => return (outcome, false, false),
    };
    match read(response, limit).await {
        Ok((response, whole)) => (Ok(response), false, whole),
        Err(error) => (Err(Error::Reqwest(error)), true, false),
    }
}

/// The response with its body read, and whether it is whole: in memory when
/// it ended within `limit`, else the bytes read, then the chunk that went
/// over, then the rest. Or the error reading failed with.
///
/// Read with [`Response::chunk`], as the caller would read it: a failure is
/// the very error the caller's own `chunk`, `bytes` or `text` would have met
/// (`bytes` and `text` add the URL; so does this).
async fn read(
    mut response: Response,
    limit: usize,
) -> std::result::Result<(Response, bool), reqwest::Error> {
    if response.content_length().is_some_and(|length| length > limit as u64) {
        // Declared longer than the limit: returned as it is, unread.
        return Ok((response, false));
    }
    let mut prefix = Vec::new();
    let held = loop {
        match response.chunk().await {
            Ok(None) => break None,
            Ok(Some(chunk)) if chunk.len() > limit.saturating_sub(prefix.len()) => {
                break Some(chunk);
            }
            Ok(Some(chunk)) => append(&mut prefix, &chunk, limit),
            Err(error) => return Err(error.with_url(response.url().clone())),
        }
    };
    let whole = held.is_none();
    let response = map_body(response, |rest| match held {
        None => reqwest::Body::from(prefix),
        Some(chunk) => replay(prefix, Some(Frame::data(chunk)), Tail::Rest(rest)),
    });
    Ok((response, whole))
}

/// `response` with its body replaced by what `body` makes of the body not
/// yet read; its status, version, headers, extensions and URL kept.
pub(super) fn map_body(
    response: Response,
    body: impl FnOnce(reqwest::Body) -> reqwest::Body,
) -> Response {
    let url = response.url().clone();
    // Status, version, headers and extensions stay in `parts`, and what was
    // not read in `rest`. reqwest keeps the URL beside them: it goes back as
    // the extension its `From<http::Response<_>>` takes it from.
    let (mut parts, rest) = http::Response::<reqwest::Body>::from(response).into_parts();
    // Building a response without a status or header to check cannot fail.
    let (marker, ()) = http::Response::builder().url(url).body(()).unwrap_or_default().into_parts();
    parts.extensions.extend(marker.extensions);
    Response::from(http::Response::from_parts(parts, body(rest)))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_response_within_the_limit_keeps_its_parts() {
        let url = reqwest::Url::parse("http://example.test/a?b=c").unwrap();
        let http = http::Response::builder()
            .status(201)
            .header("x-kept", "yes")
            .url(url.clone())
            .body(reqwest::Body::wrap(http_body_util::Full::new(bytes_of("hello"))))
            .unwrap();
        let mut response = Response::from(http);
        response.extensions_mut().insert(7u8);
        let (response, whole) = read(response, 64).await.unwrap();
        assert!(whole);
        assert_eq!(response.status(), 201);
        assert_eq!(response.url(), &url);
        assert_eq!(response.headers()["x-kept"], "yes");
        assert_eq!(response.extensions().get::<u8>(), Some(&7));
        assert_eq!(response.content_length(), Some(5));
        assert_eq!(response.bytes().await.unwrap(), "hello");
    }

    /// A body that yields `chunks`, declaring their length if `declared`,
    /// and ends; with no chunks, it never yields. `taken` tells whether a
    /// chunk was.
    struct Chunks {
        length: Option<u64>,
        chunks: VecDeque<hyper::body::Bytes>,
        taken: Arc<AtomicBool>,
    }

    impl Chunks {
        fn body(declared: bool, chunks: &[&'static str]) -> (reqwest::Body, Arc<AtomicBool>) {
            let taken = Arc::new(AtomicBool::new(false));
            let length = declared.then(|| chunks.iter().map(|c| c.len() as u64).sum());
            let chunks = chunks.iter().copied().map(bytes_of).collect();
            (reqwest::Body::wrap(Self { length, chunks, taken: taken.clone() }), taken)
        }

        fn silent(length: u64) -> reqwest::Body {
            let taken = Arc::new(AtomicBool::new(false));
            reqwest::Body::wrap(Self { length: Some(length), chunks: VecDeque::new(), taken })
        }
    }

    impl hyper::body::Body for Chunks {
        type Data = hyper::body::Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<std::result::Result<Frame<Self::Data>, Self::Error>>> {
            let this = self.get_mut();
            match this.chunks.pop_front() {
                Some(chunk) => {
                    this.taken.store(true, Ordering::SeqCst);
                    Poll::Ready(Some(Ok(Frame::data(chunk))))
                }
                None if this.taken.load(Ordering::SeqCst) => Poll::Ready(None),
                None => Poll::Pending,
            }
        }

        fn size_hint(&self) -> hyper::body::SizeHint {
            self.length.map_or_else(hyper::body::SizeHint::new, hyper::body::SizeHint::with_exact)
        }
    }

    fn response(body: reqwest::Body) -> Response {
        let url = reqwest::Url::parse("http://example.test/").unwrap();
        Response::from(http::Response::builder().url(url).body(body).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_declared_longer_than_the_limit_is_returned_unread() {
        let silent = response(Chunks::silent(100));
        let read = tokio::time::timeout(Duration::from_secs(1), read(silent, 99)).await;
        let (read, whole) = read.expect("waited on its body").unwrap();
        assert_eq!((read.content_length(), whole), (Some(100), false));
    }

    #[tokio::test]
    async fn a_response_as_long_as_the_limit_is_read_before_it_is_returned() {
        let (body, taken) = Chunks::body(true, &["hello"]);
        let (read, whole) = read(response(body), 5).await.unwrap();
        assert!(taken.load(Ordering::SeqCst) && whole, "returned unread");
        assert_eq!(read.bytes().await.unwrap(), "hello");
    }

    #[tokio::test]
    async fn a_chunk_that_fills_the_limit_exactly_is_kept_in_memory() {
        // In memory, the body's length is known; the length of a body
        // handed on as it streams is not.
        let (body, _) = Chunks::body(false, &["he", "llo"]);
        let (read, whole) = read(response(body), 5).await.unwrap();
        assert_eq!((read.content_length(), whole), (Some(5), true));
        assert_eq!(read.bytes().await.unwrap(), "hello");
    }

    #[tokio::test]
    async fn a_chunk_past_the_limit_is_handed_on_with_the_rest() {
        let (body, _) = Chunks::body(false, &["abc", "def", "g"]);
        let (read, whole) = read(response(body), 4).await.unwrap();
        assert!(!whole);
        assert_eq!(read.content_length(), None, "held in memory past its limit");
        assert_eq!(read.bytes().await.unwrap(), "abcdefg");
    }

    fn bytes_of(text: &'static str) -> hyper::body::Bytes {
        hyper::body::Bytes::from_static(text.as_bytes())
    }
}
