//! A response body that fails part way, as one whose connection closed.

use std::error::Error as StdError;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::body::{Body, Bytes, Frame, SizeHint};

/// The error a cut body ends with: the one an `io` read of a connection
/// closed too early gives.
fn closed_early() -> Box<dyn StdError + Send + Sync> {
    Box::new(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the connection closed before the body ended (injected fault)",
    ))
}

/// `inner`, cut after `left` bytes: the bytes up to the cut arrive, then
/// an error. A body that ends before the cut fails at its end.
pub(super) struct Cut<B> {
    inner: B,
    left: usize,
    failed: bool,
}

impl<B> Cut<B> {
    pub(super) fn new(inner: B, after: usize) -> Self {
        Self { inner, left: after, failed: false }
    }
}

impl<B> Body for Cut<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn StdError + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        if self.left == 0 {
            self.failed = true;
            return Poll::Ready(Some(Err(closed_early())));
        }
        let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            None => {
                self.failed = true;
                return Poll::Ready(Some(Err(closed_early())));
            }
            Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
            Some(Ok(frame)) => frame,
        };
        let Ok(mut data) = frame.into_data() else {
            // Trailers come after the body's end, which a cut body never
            // reaches.
            self.failed = true;
            return Poll::Ready(Some(Err(closed_early())));
        };
        data.truncate(self.left);
        self.left = self.left.saturating_sub(data.len());
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    /// The body's own: a cut body still declares what the server sent,
    /// as a body whose connection closed does.
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
