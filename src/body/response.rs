//! Reading the body of a final response inside the attempt, so that a body
//! that breaks while it is read is retried like any other failed attempt.
//! What a caller gets is stated once, on
//! [`with_response_body_buffering`](crate::RetryConfigBuilder::with_response_body_buffering).

use hyper::body::Frame;
use reqwest::{Response, ResponseBuilderExt};
use reqwest_middleware::{Error, Result};

use super::replay::{Tail, append, replay};
use crate::classify;
use crate::config::RetryConfig;

/// Reads the body of `outcome`, when it is a response the built-in status
/// rules take as final, up to `limit`. Returns the outcome to decide on, and
/// whether it is the error the body failed with.
///
/// A status the rules would retry is left as it is: its body is discarded
/// during the wait if it is retried, and handed over as it streams if not.
pub(crate) async fn settle(
    config: &RetryConfig,
    outcome: Result<Response>,
    limit: usize,
) -> (Result<Response>, bool) {
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
        outcome => return (outcome, false),
    };
    match read(response, limit).await {
        Ok(response) => (Ok(response), false),
        Err(error) => (Err(Error::Reqwest(error)), true),
    }
}

/// The response with its body read: in memory when it ended within `limit`,
/// else the bytes read, then the chunk that went over, then the rest. Or the
/// error reading failed with.
///
/// Read with [`Response::chunk`], as the caller would read it: a failure is
/// the very error the caller's own `chunk`, `bytes` or `text` would have met
/// (`bytes` and `text` add the URL; so does this).
async fn read(
    mut response: Response,
    limit: usize,
) -> std::result::Result<Response, reqwest::Error> {
    if response.content_length().is_some_and(|length| length > limit as u64) {
        // Declared longer than the limit: returned as it is, unread.
        return Ok(response);
    }
    let mut prefix = Vec::new();
    let held = loop {
        match response.chunk().await {
            Ok(None) => break None,
            Ok(Some(chunk)) if chunk.len() > limit - prefix.len() => break Some(chunk),
            Ok(Some(chunk)) => append(&mut prefix, &chunk, limit),
            Err(error) => return Err(error.with_url(response.url().clone())),
        }
    };
    let url = response.url().clone();
    // Status, version, headers and extensions stay in `parts`, and what was
    // not read in `rest`. reqwest keeps the URL beside them: it goes back as
    // the extension its `From<http::Response<_>>` takes it from.
    let (mut parts, rest) = http::Response::<reqwest::Body>::from(response).into_parts();
    let body = match held {
        None => reqwest::Body::from(prefix),
        Some(chunk) => replay(prefix, Some(Frame::data(chunk)), Tail::Rest(rest)),
    };
    // Building a response without a status or header to check cannot fail.
    let (marker, ()) = http::Response::builder().url(url).body(()).unwrap_or_default().into_parts();
    parts.extensions.extend(marker.extensions);
    Ok(Response::from(http::Response::from_parts(parts, body)))
}

#[cfg(test)]
mod tests {
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
        let response = read(response, 64).await.unwrap();
        assert_eq!(response.status(), 201);
        assert_eq!(response.url(), &url);
        assert_eq!(response.headers()["x-kept"], "yes");
        assert_eq!(response.extensions().get::<u8>(), Some(&7));
        assert_eq!(response.content_length(), Some(5));
        assert_eq!(response.bytes().await.unwrap(), "hello");
    }

    fn bytes_of(text: &'static str) -> hyper::body::Bytes {
        hyper::body::Bytes::from_static(text.as_bytes())
    }
}
