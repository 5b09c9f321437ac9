//! Discarding the body of a response that is being retried, within the wait
//! before the retry, and racing an attempt against a deadline.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;

use reqwest::Response;
use reqwest_middleware::Result;

use crate::clock::Sleep;

/// Runs `work` until `cut` completes first: `None` when it was cut.
pub(crate) async fn first<T>(
    work: impl Future<Output = T>,
    cut: impl Future<Output = ()>,
) -> Option<T> {
    let (mut work, mut cut) = (pin!(work), pin!(cut));
    poll_fn(|cx| {
        if let Poll::Ready(done) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(done));
        }
        cut.as_mut().poll(cx).map(|()| None)
    })
    .await
}

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
