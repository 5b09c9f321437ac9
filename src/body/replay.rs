//! The body the middleware sends or returns when it read only part of one:
//! the bytes read, the frame that stopped the reading, then the rest of the
//! original body, or the error it failed with. Both a streamed request body
//! ([`request`](super::request)) and a final response's body
//! ([`response`](super::response)) are put back this way.

use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body as HttpBody, Bytes, Frame, SizeHint};
use reqwest::Body;

/// Appends `data`, which fits within `limit`, growing the buffer by doubling
/// but never past the limit.
pub(super) fn append(prefix: &mut Vec<u8>, data: &[u8], limit: usize) {
    let needed = prefix.len().saturating_add(data.len());
    if needed > prefix.capacity() {
        let grown = prefix.capacity().saturating_mul(2).min(limit).max(needed);
        prefix.reserve_exact(grown.saturating_sub(prefix.len()));
    }
    prefix.extend_from_slice(data);
}

/// A body sent once: `prefix`, then `held`, then `tail`. Its length is
/// known when `tail` is the rest of a body whose length is.
pub(super) fn replay(prefix: Vec<u8>, held: Option<Frame<Bytes>>, tail: Tail<Body>) -> Body {
    Body::wrap(Replay::new(prefix, held, tail))
}

/// A body sent once: the bytes read, the frame that stopped the reading,
/// then the rest of the original body, `B`, or its error.
pub(crate) struct Replay<B: HttpBody> {
    prefix: Option<Bytes>,
    held: Option<Frame<Bytes>>,
    tail: Tail<B>,
}

impl<B: HttpBody> Replay<B> {
    /// `prefix`, then `held`, then `tail`.
    pub(crate) fn new(prefix: Vec<u8>, held: Option<Frame<Bytes>>, tail: Tail<B>) -> Self {
        let prefix = Some(Bytes::from(prefix)).filter(|prefix| !prefix.is_empty());
        Self { prefix, held, tail }
    }
}

/// Nothing in it is pinned: the body's error is only moved out.
impl<B: HttpBody + Unpin> Unpin for Replay<B> {}

impl<B: HttpBody> std::fmt::Debug for Replay<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefix = self.prefix.as_ref().map_or(0, Bytes::len);
        f.debug_struct("Replay").field("prefix", &prefix).finish_non_exhaustive()
    }
}

/// What follows the bytes read.
pub(crate) enum Tail<B: HttpBody> {
    /// The rest of the body they were read from.
    Rest(B),
    /// The error reading failed with, until it is yielded.
    Failed(Option<B::Error>),
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for Replay<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(prefix) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        if let Some(held) = this.held.take() {
            return Poll::Ready(Some(Ok(held)));
        }
        match &mut this.tail {
            Tail::Rest(body) => Pin::new(body).poll_frame(cx),
            Tail::Failed(error) => Poll::Ready(error.take().map(Err)),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let held = self.held.as_ref().and_then(Frame::data_ref).map_or(0, Bytes::len);
        let front = self.prefix.as_ref().map_or(0, Bytes::len).saturating_add(held) as u64;
        match &self.tail {
            Tail::Rest(body) => {
                let rest = body.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(front));
                if let Some(upper) = rest.upper().and_then(|upper| upper.checked_add(front)) {
                    hint.set_upper(upper);
                }
                hint
            }
            // Never exact: a body of known length would be sent with a
            // `Content-Length`, and could end, complete, before its error.
            Tail::Failed(_) => {
                let mut hint = SizeHint::new();
                hint.set_lower(front);
                hint
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none()
            && self.held.is_none()
            && match &self.tail {
                Tail::Rest(body) => body.is_end_stream(),
                Tail::Failed(error) => error.is_none(),
            }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use super::*;

    #[test]
    fn the_buffer_doubles_up_to_the_limit_and_an_append_that_fits_moves_nothing() {
        let mut prefix = Vec::new();
        let mut capacities = Vec::new();
        for _ in 0..10 {
            let (before, at) = (prefix.capacity(), prefix.as_ptr());
            let fits = prefix.len() + 10 <= before;
            append(&mut prefix, &[1; 10], 100);
            if fits {
                assert_eq!((prefix.capacity(), prefix.as_ptr()), (before, at), "reallocated");
            }
            capacities.push(prefix.capacity());
        }
        assert_eq!(prefix, [1; 100]);
        assert_eq!(capacities, [10, 20, 40, 40, 80, 80, 80, 80, 100, 100]);
    }

    #[tokio::test]
    async fn a_replay_ends_with_its_last_frame() {
        // A body that says it has ended after its last frame lets HTTP/2
        // end the stream on that frame rather than with an empty one.
        let held = Some(Frame::data(Bytes::from_static(b"cd")));
        let mut body = Replay::new(b"ab".to_vec(), held, Tail::Rest(Body::from(Vec::new())));
        let mut sent = Vec::new();
        while !body.is_end_stream() {
            let frame = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            sent.extend_from_slice(frame.unwrap().unwrap().data_ref().unwrap());
        }
        assert_eq!(sent, b"abcd");
        assert!(poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await.is_none());
    }
}
