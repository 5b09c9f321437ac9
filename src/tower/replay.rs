//! Request bodies the layer can send again: any `Clone` body, a body whose
//! type says how ([`Replay`]), and a body read into memory up to a limit
//! by [`BodyBufferLayer`].

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::tower::{Layer, Service};
use http::Request;
use hyper::body::{Body, Bytes, Frame, SizeHint};

use crate::body::{Read, Reader, Replay as Once};

/// A request body the retry layer can send again, or not: the copy for
/// another attempt, or `None`, and the request is sent once.
///
/// Every `Clone` body is one (`http_body_util::Full`, `Empty`, `String`,
/// ...), and so is [`BufferedBody`]. A body type of your own that can be
/// copied only sometimes implements it by hand.
pub trait Replay: Sized {
    /// A copy to send on another attempt, or `None` if this body can be
    /// sent only once.
    fn replay(&self) -> Option<Self>;
}

impl<T: Clone> Replay for T {
    #[inline]
    fn replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

/// A request body read into memory before the first attempt, up to
/// [`BodyBufferLayer`]'s limit, so that it can be sent again; or, when it
/// was longer, failed, had trailers, or said it was longer than the limit,
/// the original body, sent once: the bytes read, then the rest as it
/// comes, or its error. Such a request is never retried, and never turned
/// into an error of the layer's.
pub struct BufferedBody<B: Body> {
    kind: Kind<B>,
}

enum Kind<B: Body> {
    /// All of it, and whether it has been handed out.
    Whole { data: Bytes, sent: bool },
    /// Sent once.
    Once(Once<B>),
}

impl<B: Body<Data = Bytes> + Unpin> BufferedBody<B> {
    /// Reads `body` into memory, up to `limit` bytes.
    pub async fn read(body: B, limit: usize) -> Self {
        if body.is_end_stream() {
            return Self::whole(Bytes::new());
        }
        let mut reader = Reader::new(body, limit);
        let end = reader.read().await;
        match reader.finish(end) {
            Read::Whole(data) => Self::whole(data),
            Read::Once(once) => Self { kind: Kind::Once(once) },
        }
    }
}

impl<B: Body> BufferedBody<B> {
    fn whole(data: Bytes) -> Self {
        Self { kind: Kind::Whole { data, sent: false } }
    }

    /// Whether the body is all in memory, to be sent again.
    pub fn is_replayable(&self) -> bool {
        matches!(self.kind, Kind::Whole { .. })
    }
}

impl<B: Body> fmt::Debug for BufferedBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Whole { data, .. } => {
                f.debug_struct("BufferedBody").field("len", &data.len()).finish()
            }
            Kind::Once(once) => f.debug_tuple("BufferedBody").field(once).finish(),
        }
    }
}

impl<B: Body> Replay for BufferedBody<B> {
    fn replay(&self) -> Option<Self> {
        match &self.kind {
            Kind::Whole { data, .. } => Some(Self::whole(data.clone())),
            Kind::Once(_) => None,
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for BufferedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Whole { data, sent } => {
                if *sent || data.is_empty() {
                    return Poll::Ready(None);
                }
                *sent = true;
                Poll::Ready(Some(Ok(Frame::data(data.clone()))))
            }
            Kind::Once(once) => Pin::new(once).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Whole { data, sent } => *sent || data.is_empty(),
            Kind::Once(once) => once.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Whole { data, sent } => {
                SizeHint::with_exact(if *sent { 0 } else { data.len() as u64 })
            }
            Kind::Once(once) => once.size_hint(),
        }
    }
}

/// Nothing in it is pinned.
impl<B: Body + Unpin> Unpin for BufferedBody<B> {}

/// Reads each request's body into memory, up to a limit, before the
/// service below sees it, so that the retry layer under it can send it
/// again: for bodies that are not `Clone` (hyper's `Incoming`, axum's
/// `Body`, a stream). Goes above [`RetryLayer`](super::RetryLayer):
///
/// ```
/// use reqwest_safe_retry::tower::{BodyBufferLayer, BufferedBody, RetryLayer};
/// use tower::ServiceBuilder;
///
/// # fn stack<S, B>(client: S) -> impl Clone
/// # where S: Clone, B: hyper::body::Body {
/// // `client` takes `http::Request<BufferedBody<B>>`.
/// let service = ServiceBuilder::new()
///     .layer(BodyBufferLayer::new(64 * 1024))
///     .layer(RetryLayer::default())
///     .service(client);
/// # service
/// # }
/// ```
///
/// The body is read before the first attempt, as it comes: reading waits
/// on whatever produces it (put a `Timeout` above to bound that). A body
/// that ends within the limit is sent from memory on every attempt. One
/// that says it is longer, is longer, fails or has trailers is sent once,
/// as it came ([`BufferedBody`]); at most the limit and the one frame that
/// went over it are held.
#[derive(Debug, Clone, Copy)]
pub struct BodyBufferLayer {
    limit: usize,
}

impl BodyBufferLayer {
    /// Reads bodies of up to `max_bytes` into memory.
    pub fn new(max_bytes: usize) -> Self {
        Self { limit: max_bytes }
    }
}

impl<S> Layer<S> for BodyBufferLayer {
    type Service = BodyBuffer<S>;

    fn layer(&self, inner: S) -> BodyBuffer<S> {
        BodyBuffer { inner, limit: self.limit }
    }
}

/// A service whose requests' bodies are read into memory first: made by
/// [`BodyBufferLayer`].
#[derive(Debug, Clone)]
pub struct BodyBuffer<S> {
    inner: S,
    limit: usize,
}

/// The future of a call through [`BodyBuffer`].
pub type BodyBufferFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<S, B> Service<Request<B>> for BodyBuffer<S>
where
    S: Service<Request<BufferedBody<B>>> + Clone + Send + 'static,
    S::Future: Send,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Send,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BodyBufferFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    /// The call goes to the service made ready, once the body is read.
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = self.limit;
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = BufferedBody::read(body, limit).await;
            inner.call(Request::from_parts(parts, body)).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::future::poll_fn;
    use std::io;

    use http::HeaderMap;

    use super::*;

    /// Yields its frames, then fails if told to.
    struct Frames {
        frames: VecDeque<Frame<Bytes>>,
        fail: bool,
    }

    impl Body for Frames {
        type Data = Bytes;
        type Error = io::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
            let this = self.get_mut();
            match this.frames.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None if std::mem::take(&mut this.fail) => {
                    Poll::Ready(Some(Err(io::Error::other("producer failed"))))
                }
                None => Poll::Ready(None),
            }
        }
    }

    fn chunks(chunks: &[&'static [u8]], fail: bool) -> Frames {
        let frames = chunks.iter().map(|chunk| Frame::data(Bytes::from_static(chunk))).collect();
        Frames { frames, fail }
    }

    /// Every frame: data as bytes, trailers as `TRAILERS`, an error as its
    /// message.
    async fn sent<B: Body<Data = Bytes, Error = io::Error> + Unpin>(mut body: B) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            out.push(match frame.map(Frame::into_data) {
                Ok(Ok(data)) => String::from_utf8(data.to_vec()).unwrap(),
                Ok(Err(_)) => "TRAILERS".to_owned(),
                Err(error) => format!("error: {error}"),
            });
        }
        out
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_sent_whole_on_every_attempt() {
        let body = BufferedBody::read(chunks(&[b"ab", b"cd"], false), 4).await;
        assert!(body.is_replayable());
        assert_eq!(body.size_hint().exact(), Some(4));
        let copy = body.replay().expect("a copy");
        assert_eq!(sent(body).await, ["abcd"]);
        assert_eq!(sent(copy).await, ["abcd"], "the copy is whole too");
    }

    #[tokio::test]
    async fn a_longer_body_is_sent_once_as_it_came() {
        let body = BufferedBody::read(chunks(&[b"ab", b"cd", b"ef"], false), 3).await;
        assert!(!body.is_replayable());
        assert!(body.replay().is_none(), "sent once");
        assert_eq!(sent(body).await.concat(), "abcdef");
    }

    #[tokio::test]
    async fn a_failing_body_is_sent_as_far_as_it_got_then_fails_the_same_way() {
        let body = BufferedBody::read(chunks(&[b"ab"], true), 100).await;
        assert!(body.replay().is_none());
        assert_eq!(sent(body).await, ["ab", "error: producer failed"]);
    }

    #[tokio::test]
    async fn a_body_with_trailers_is_sent_once_trailers_included() {
        let mut frames = chunks(&[b"ab"], false);
        frames.frames.push_back(Frame::trailers(HeaderMap::new()));
        let body = BufferedBody::read(frames, 100).await;
        assert!(body.replay().is_none());
        assert_eq!(sent(body).await, ["ab", "TRAILERS"]);
    }

    #[tokio::test]
    async fn an_empty_body_is_whole_and_reads_as_ended() {
        let body = BufferedBody::read(chunks(&[], false), 0).await;
        assert!(body.is_replayable() && body.is_end_stream());
        assert!(sent(body).await.is_empty());
    }
}
