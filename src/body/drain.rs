//! Discarding the body of a response that is being retried, within the wait
//! before the retry, so that its connection can be reused; see
//! [`with_drain_limit`](crate::RetryConfigBuilder::with_drain_limit).

use reqwest::Response;
use reqwest_middleware::Result;

use crate::clock::Sleep;
use crate::future::first;

/// Waits `wait` while reading and discarding the body of a response being
/// retried, so its connection can go back to the pool. What has not arrived
/// when the wait ends is dropped with the response (closing an HTTP/1
/// connection, resetting only the stream on HTTP/2): a body that stalls never
/// delays the next attempt.
pub(crate) async fn discard(outcome: Result<Response>, mut wait: Sleep, limit: usize) {
    if let Ok(response) = outcome {
        if first(drain(response, limit), wait.as_mut()).await.is_none() {
            return;
        }
    }
    wait.await;
}

/// Reads and discards the body if it is at most `limit` bytes long; a body
/// declared longer is dropped at once rather than read, one found longer is
/// dropped as soon as it passes the limit.
async fn drain(mut response: Response, limit: usize) {
    if response.content_length().is_some_and(|len| len > limit as u64) {
        return;
    }
    let mut left = limit;
    while let Ok(Some(chunk)) = response.chunk().await {
        match left.checked_sub(chunk.len()) {
            Some(rest) => left = rest,
            None => return,
        }
    }
}
