//! The settings of the bodies the middleware reads into memory.

use crate::error::ConfigError;

/// Which bodies the middleware reads into memory, and up to how many bytes:
/// a streamed request body, so that it can be sent again, and a final
/// response's body, so that one that breaks while it is read is retried.
/// Both are off by default.
///
/// ```
/// use reqwest_safe_retry::{BodyBuffering, RetryConfig};
///
/// // Streams of up to 256 KiB can be retried, and responses of up to
/// // 1 MiB come back in memory, retried when they break.
/// let buffering = BodyBuffering::default().with_request(256 * 1024).with_response(1024 * 1024);
/// let config = RetryConfig::builder().with_body_buffering(buffering).build()?;
/// assert_eq!(config.body_buffering().request(), Some(256 * 1024));
/// # Ok::<(), reqwest_safe_retry::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BodyBuffering {
    request: Option<usize>,
    response: Option<usize>,
}

impl BodyBuffering {
    /// Reads a streamed request body into memory, up to `max_bytes`, before
    /// the first attempt, so that it can be sent again.
    ///
    /// A body given as bytes is shared by every attempt. One given as a
    /// stream (`reqwest::Body::wrap_stream`, `reqwest::Body::wrap`) cannot be
    /// copied: by default it is sent once and its outcome returned, with
    /// [`StopReason::NotReplayable`](crate::report::StopReason::NotReplayable)
    /// when it would have been retried. With this on:
    ///
    /// - a stream that ends within `max_bytes` is replaced by the bytes read,
    ///   and the request is retried like any other;
    /// - a longer stream is still sent whole, once: the bytes read, then the
    ///   rest of the stream as it comes. It is not retried (`NotReplayable`).
    ///   At most `max_bytes` plus the one chunk that went over are held;
    /// - a stream that fails while it is read is sent as far as it got, then
    ///   fails the same way, so reqwest reports the body error as it would
    ///   without the middleware. It is not retried;
    /// - a stream with trailers is sent once, as it came, trailers included.
    ///
    /// Reading waits on whatever produces the stream, before the first
    /// attempt. That time counts against the deadline, measured from when
    /// the middleware gets the request: if it passes while the stream is
    /// read, nothing is sent and the caller gets
    /// [`DeadlineExceeded`](crate::DeadlineExceeded). Reading also waits no
    /// longer than the attempt's timeout, if the middleware can see one (the
    /// request's own or the attempt timeout): then it stops, and the body is
    /// sent once as it is, the attempt timed from when it is sent. The
    /// client's timeout cannot be seen, and starts only then.
    ///
    /// Nothing is read for a request that cannot be retried anyway (no
    /// retries allowed, for the config or by
    /// [`MaxRetries`](crate::MaxRetries)), nor for a body that says it is
    /// longer than `max_bytes`. A body read whole is an ordinary bytes body
    /// to reqwest too, which then also follows a 307 or 308 redirect with
    /// it.
    pub fn with_request(mut self, max_bytes: usize) -> Self {
        self.request = Some(max_bytes);
        self
    }

    /// Reads the body of a final response into memory, up to `max_bytes`,
    /// inside the attempt, so that a body that breaks while it is read is
    /// retried like any other failed attempt.
    ///
    /// Without it, the middleware returns a response as soon as its headers
    /// arrive: a connection reset, a timeout or a message cut short while
    /// the caller reads the body reaches the caller, and is never retried.
    /// With it, for a request a body failure could be retried for (safe to
    /// repeat, retries allowed, a body that can be sent again), the
    /// middleware reads the body of a response whose status the built-in
    /// rules would not retry, before it decides (a predicate is asked after
    /// the read, about the response in memory or the body's error):
    ///
    /// - a body that ends within `max_bytes` comes back in memory: the same
    ///   status, headers, extensions and URL, with the bytes read as its
    ///   body. Reading it cannot fail any more;
    /// - a body that breaks while it is read makes the attempt a failure:
    ///   a reset or a message cut short as
    ///   [`RetryReason::ConnectionLost`](crate::report::RetryReason::ConnectionLost),
    ///   a timeout as [`RetryReason::Timeout`](crate::report::RetryReason::Timeout).
    ///   It is retried as those are before the headers, with the same
    ///   backoff, and counts against the retry budget as a failure (a body
    ///   read whole counts as a final answer). When it is not retried (the
    ///   last attempt, the deadline too close, the budget spent), the call
    ///   fails with the very `reqwest::Error` the caller's own
    ///   `response.bytes()` would have met, in
    ///   `reqwest_middleware::Error::Reqwest`: `is_decode()`, `is_timeout()`
    ///   and the source chain answer as they would, and `url()` is the
    ///   response's. A predicate sees it as the attempt's error. A body that
    ///   fails for another reason (a malformed chunk) is final, returned the
    ///   same way;
    /// - a body longer than `max_bytes` (by its `Content-Length`, or once
    ///   read past it) is returned as it streams: the bytes read, then the
    ///   rest as it comes. Its answer is final, and an error later in the
    ///   body is the caller's, as without this option. At most `max_bytes`
    ///   plus one chunk is held.
    ///
    /// The read is part of the attempt: the attempt's timeout (the
    /// request's own, the attempt timeout, or the client's, which reqwest
    /// applies to the body too) and the deadline bound it. When the
    /// deadline is raced on the middleware's clock, the read is inside the
    /// race, and the caller gets
    /// [`DeadlineExceeded`](crate::DeadlineExceeded) if it passes.
    ///
    /// Nothing changes for a request that cannot be retried after a body
    /// failure: one not safe to repeat (a POST without an idempotency key),
    /// one allowed no retries, or a streamed body sent once. Nor for a
    /// response the rules would retry (a 503, say) that is returned because
    /// no retry may follow: it comes back as it streams.
    pub fn with_response(mut self, max_bytes: usize) -> Self {
        self.response = Some(max_bytes);
        self
    }

    /// The most bytes of a streamed request body read, if any are.
    pub fn request(&self) -> Option<usize> {
        self.request
    }

    /// The most bytes of a final response's body read, if any are.
    pub fn response(&self) -> Option<usize> {
        self.response
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (limit, field) in
            [(self.request, "body_buffering.request"), (self.response, "body_buffering.response")]
        {
            if limit == Some(0) {
                return Err(ConfigError::new(
                    field,
                    "must be greater than zero; leave it unset for none".to_owned(),
                ));
            }
        }
        Ok(())
    }
}
