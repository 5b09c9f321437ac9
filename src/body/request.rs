//! Reading a streamed request body into memory before the first attempt, so
//! that the request can be sent again. What a caller gets is stated once, on
//! [request body buffering](crate::BodyBuffering::with_request).

use std::future::poll_fn;
use std::pin::Pin;
use std::time::{Duration, Instant};

use hyper::body::{Body as HttpBody, Bytes, Frame};
use reqwest::{Body, Request};

use super::replay::{Replay, Tail, append};
use crate::clock::Clock;
use crate::deadline::{tightest, visible_timeout};
use crate::future::first;

/// A streamed body to read before the first attempt.
pub(crate) struct RequestBuffer<'a> {
    request: &'a mut Request,
    limit: usize,
    clock: &'a dyn Clock,
    /// When to stop waiting on the stream: the deadline, or the attempt's
    /// visible timeout from now, whichever comes first.
    cut_at: Option<Instant>,
}

impl<'a> RequestBuffer<'a> {
    /// The body to read, if stream buffering is on (a `limit`), a retry
    /// may follow and the request's body is a stream. Reading stops at the
    /// call's `deadline`, or once the attempt's visible timeout (the
    /// request's own, or `attempt_timeout`) has passed from now.
    pub(crate) fn new(
        pending: &'a mut Option<Request>,
        limit: Option<usize>,
        may_retry: bool,
        deadline: Option<Instant>,
        attempt_timeout: Option<Duration>,
        clock: &'a dyn Clock,
    ) -> Option<Self> {
        let limit = limit?;
        let request = pending.as_mut().filter(|_| may_retry)?;
        request.body().filter(|body| body.as_bytes().is_none())?;
        let timeout = visible_timeout(request.timeout().copied(), attempt_timeout);
        let timeout_at = timeout.and_then(|timeout| clock.now().checked_add(timeout));
        let cut_at = tightest(deadline, timeout_at);
        Some(Self { request, limit, clock, cut_at })
    }

    /// Reads the body until it ends, goes over the limit, fails, or the time
    /// to wait for it is up, and puts back the body to send.
    pub(crate) async fn run(self) {
        let Some(body) = self.request.body_mut().take() else { return };
        let mut reader = Reader::new(body, self.limit);
        let end = match self.cut_at {
            None => reader.read().await,
            Some(at) => {
                first(reader.read(), self.clock.sleep_until(at)).await.unwrap_or(End::Stopped(None))
            }
        };
        *self.request.body_mut() = Some(reader.into_body(end));
    }
}

/// How reading a body ended.
#[derive(Debug)]
pub(crate) enum End<E> {
    /// The body ended within the limit.
    Whole,
    /// Reading stopped with the body unfinished: with the frame that went
    /// over the limit, or trailers, or nothing when the time was up.
    Stopped(Option<Frame<Bytes>>),
    /// The body failed.
    Failed(E),
}

/// What a body read comes to.
pub(crate) enum Read<B: HttpBody> {
    /// All of it, in memory.
    Whole(Bytes),
    /// The bytes read, then what was not read, to be sent once.
    Once(Replay<B>),
}

/// A body being read into memory: any client's, as `http-body` frames it.
pub(crate) struct Reader<B> {
    body: B,
    prefix: Vec<u8>,
    limit: usize,
}

impl<B: HttpBody<Data = Bytes> + Unpin> Reader<B> {
    pub(crate) fn new(body: B, limit: usize) -> Self {
        Self { body, prefix: Vec::new(), limit }
    }

    /// Reads frames while they fit. Cancel-safe: a frame is kept as soon as
    /// it arrives, and the body and the bytes read stay here.
    pub(crate) async fn read(&mut self) -> End<B::Error> {
        if self.body.size_hint().lower() > self.limit as u64 {
            // Declared longer than the limit: reading would be wasted.
            return End::Stopped(None);
        }
        loop {
            let frame = poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            let data = match frame {
                None => return End::Whole,
                Some(Err(error)) => return End::Failed(error),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(trailers) => return End::Stopped(Some(trailers)),
                },
            };
            if data.len() > self.limit.saturating_sub(self.prefix.len()) {
                return End::Stopped(Some(Frame::data(data)));
            }
            self.append(&data);
        }
    }

    fn append(&mut self, data: &[u8]) {
        append(&mut self.prefix, data, self.limit);
    }

    /// What to send after reading ended with `end`.
    pub(crate) fn finish(self, end: End<B::Error>) -> Read<B> {
        let (held, tail) = match end {
            End::Whole => return Read::Whole(Bytes::from(self.prefix)),
            End::Stopped(held) => (held, Tail::Rest(self.body)),
            End::Failed(error) => (None, Tail::Failed(Some(error))),
        };
        Read::Once(Replay::new(self.prefix, held, tail))
    }
}

impl Reader<Body> {
    /// The body to send after reading ended with `end`: the bytes read,
    /// then what was not read, sent once, unless the body ended within the
    /// limit.
    fn into_body(self, end: End<reqwest::Error>) -> Body {
        match self.finish(end) {
            Read::Whole(whole) => Body::from(whole),
            Read::Once(once) => Body::wrap(once),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use http::HeaderMap;

    use super::*;

    /// Yields its frames, counting the data bytes handed out, then ends or
    /// fails.
    struct Counting {
        frames: VecDeque<Frame<Bytes>>,
        fail: bool,
        polled: Arc<AtomicUsize>,
        /// The length it declares, if any.
        declared: Option<u64>,
    }

    impl Counting {
        fn chunks(count: usize, size: usize) -> (Self, Arc<AtomicUsize>) {
            let frames = (0..count).map(|i| Frame::data(Bytes::from(vec![i as u8; size])));
            let polled = Arc::new(AtomicUsize::new(0));
            let body = Self {
                frames: frames.collect(),
                fail: false,
                polled: polled.clone(),
                declared: None,
            };
            (body, polled)
        }
    }

    impl HttpBody for Counting {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            let this = self.get_mut();
            match this.frames.pop_front() {
                Some(frame) => {
                    let len = frame.data_ref().map_or(0, Bytes::len);
                    this.polled.fetch_add(len, Ordering::SeqCst);
                    Poll::Ready(Some(Ok(frame)))
                }
                None if std::mem::take(&mut this.fail) => {
                    Poll::Ready(Some(Err(std::io::Error::other("producer failed"))))
                }
                None => Poll::Ready(None),
            }
        }

        fn size_hint(&self) -> hyper::body::SizeHint {
            self.declared.map_or_else(hyper::body::SizeHint::new, hyper::body::SizeHint::with_exact)
        }
    }

    async fn read(body: Body, limit: usize) -> Body {
        let mut reader = Reader::new(body, limit);
        let end = reader.read().await;
        reader.into_body(end)
    }

    /// Every frame of `body`: data as bytes, trailers as their header count,
    /// an error as its message.
    async fn frames(mut body: Body) -> Vec<Result<Result<Bytes, usize>, String>> {
        let mut out = Vec::new();
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            out.push(match frame {
                Ok(frame) => Ok(frame.into_data().map_err(|t| t.trailers_ref().unwrap().len())),
                Err(error) => {
                    let error: &(dyn std::error::Error + 'static) = &error;
                    let chain = std::iter::successors(Some(error), |e| e.source());
                    Err(chain.map(ToString::to_string).collect::<Vec<_>>().join(": "))
                }
            });
        }
        out
    }

    fn concat(frames: &[Result<Result<Bytes, usize>, String>]) -> Vec<u8> {
        frames.iter().filter_map(|f| f.as_ref().ok()?.as_ref().ok()).flatten().copied().collect()
    }

    #[tokio::test]
    async fn a_body_within_the_limit_becomes_bytes() {
        let (body, polled) = Counting::chunks(4, 1000);
        let body = read(Body::wrap(body), 4000).await;
        let expected: Vec<u8> = (0..4u8).flat_map(|i| [i; 1000]).collect();
        assert_eq!(body.as_bytes(), Some(&expected[..]));
        assert_eq!(polled.load(Ordering::SeqCst), 4000);
    }

    #[tokio::test]
    async fn a_longer_body_is_read_to_the_limit_plus_one_chunk_and_sent_whole() {
        let (limit, chunk) = (64 * 1024, 16 * 1024);
        let (body, polled) = Counting::chunks(256, chunk); // 4 MiB
        let body = read(Body::wrap(body), limit).await;
        assert_eq!(polled.load(Ordering::SeqCst), limit + chunk, "held at most limit + a chunk");
        assert!(body.as_bytes().is_none(), "sent once");
        let sent = concat(&frames(body).await);
        let expected: Vec<u8> = (0..256usize).flat_map(|i| [i as u8; 16 * 1024]).collect();
        assert_eq!(polled.load(Ordering::SeqCst), 256 * chunk);
        assert!(sent == expected, "every byte, in order");
    }

    #[tokio::test]
    async fn the_buffer_never_grows_past_the_limit() {
        let (body, _) = Counting::chunks(1000, 7);
        let mut reader = Reader::new(Body::wrap(body), 5000);
        let end = reader.read().await;
        assert!(matches!(end, End::Stopped(Some(_))));
        assert_eq!(reader.prefix.len(), 4998);
        assert!(reader.prefix.capacity() <= 5000, "{}", reader.prefix.capacity());
    }

    #[tokio::test]
    async fn a_failing_body_replays_what_was_read_then_fails() {
        let (mut body, _) = Counting::chunks(2, 3);
        body.fail = true;
        let body = read(Body::wrap(body), 1024).await;
        assert!(body.as_bytes().is_none());
        assert!(HttpBody::size_hint(&body).exact().is_none(), "never sent with a length");
        let frames = frames(body).await;
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert_eq!(concat(&frames), [0, 0, 0, 1, 1, 1]);
        assert!(frames[1].as_ref().unwrap_err().contains("producer failed"), "{frames:?}");
    }

    #[tokio::test]
    async fn trailers_are_sent_once_as_they_came() {
        let (mut body, _) = Counting::chunks(2, 3);
        let mut trailers = HeaderMap::new();
        trailers.insert("checksum", "abc".parse().unwrap());
        body.frames.push_back(Frame::trailers(trailers));
        let body = read(Body::wrap(body), 1024).await;
        assert!(body.as_bytes().is_none(), "a bytes body has no trailers");
        let frames = frames(body).await;
        assert_eq!(frames, [Ok(Ok(Bytes::from_static(&[0, 0, 0, 1, 1, 1]))), Ok(Err(1))]);
    }

    #[tokio::test]
    async fn a_body_declared_longer_than_the_limit_is_not_read() {
        let body = Body::wrap(http_body_util::Full::new(Bytes::from(vec![7u8; 100])));
        let body = read(body, 99).await;
        assert!(body.as_bytes().is_none());
        assert_eq!(HttpBody::size_hint(&body).exact(), Some(100));
    }

    #[tokio::test]
    async fn a_stream_declared_longer_than_the_limit_is_not_polled() {
        let (mut body, polled) = Counting::chunks(1, 100);
        body.declared = Some(100);
        let body = read(Body::wrap(body), 99).await;
        assert_eq!(polled.load(Ordering::SeqCst), 0, "read before it was sent");
        assert_eq!(concat(&frames(body).await), [0; 100]);
    }

    #[tokio::test]
    async fn a_stream_declared_as_long_as_the_limit_becomes_bytes() {
        let (mut body, _) = Counting::chunks(1, 99);
        body.declared = Some(99);
        let body = read(Body::wrap(body), 99).await;
        assert_eq!(body.as_bytes(), Some(&[0; 99][..]));
    }

    #[tokio::test]
    async fn bytes_read_before_the_time_ran_out_are_sent_first() {
        let (body, _) = Counting::chunks(1, 4);
        let mut reader = Reader::new(Body::wrap(body), 99);
        reader.prefix.extend_from_slice(b"abc");
        let body = reader.into_body(End::Stopped(None));
        assert!(body.as_bytes().is_none(), "sent once");
        assert_eq!(concat(&frames(body).await), b"abc\0\0\0\0");
    }

    #[tokio::test]
    async fn the_length_of_a_replayed_body_stays_known() {
        let mut reader =
            Reader::new(Body::wrap(http_body_util::Full::new(Bytes::from(vec![1; 10]))), 99);
        reader.prefix.extend_from_slice(b"abc");
        let body = reader.into_body(End::Stopped(Some(Frame::data(Bytes::from_static(b"de")))));
        assert_eq!(HttpBody::size_hint(&body).exact(), Some(15));
        assert_eq!(concat(&frames(body).await).len(), 15);
    }
}
