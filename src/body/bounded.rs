//! The body of a response returned under a deadline that no timeout of
//! reqwest's carries: it cannot be read past the deadline.
//!
//! When the attempt has a timeout the middleware can see, the deadline goes
//! on the request as a shorter timeout, and reqwest bounds the body with it.
//! When it has none, the middleware cannot set one without replacing the
//! client's own (which it cannot see, and which may be shorter): the attempt
//! is raced against the deadline instead, and its body is bounded here.

use std::io;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

use hyper::body::{Body as HttpBody, Bytes, Frame, SizeHint};
use reqwest::Response;

use super::response::map_body;
use crate::clock::Sleep;
use crate::error::DeadlineExceeded;

/// `response`, whose body ends with an error once `expiry` completes: an
/// [`io::Error`] of kind `TimedOut` (so reqwest's `is_timeout()` is true on
/// the error the caller reads), holding `error`.
pub(crate) fn bounded(response: Response, expiry: Sleep, error: DeadlineExceeded) -> Response {
    map_body(response, |body| {
        reqwest::Body::wrap(Bounded {
            body,
            expiry: Some(Mutex::new(expiry)),
            expired: false,
            error,
        })
    })
}

struct Bounded {
    body: reqwest::Body,
    /// The deadline, until it has passed or the body has ended. In a mutex
    /// only so that the body is `Sync`, as reqwest asks; polling reaches it
    /// through `&mut` alone.
    expiry: Option<Mutex<Sleep>>,
    /// The deadline passed: every read from now on fails with its error.
    expired: bool,
    error: DeadlineExceeded,
}

impl HttpBody for Bounded {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let timed_out = || {
            let error = io::Error::new(io::ErrorKind::TimedOut, this.error);
            Poll::Ready(Some(Err(Box::new(error) as Self::Error)))
        };
        if this.expired {
            // As reqwest's own timeout: the error again, not a clean end.
            return timed_out();
        }
        if this.body.is_end_stream() {
            // Nothing is left to read (an empty body, a HEAD's): no deadline
            // can cut it.
            this.expiry = None;
            return Poll::Ready(None);
        }
        // The deadline first, as reqwest's own timeout: a body that always
        // has data ready is cut at the deadline too.
        if let Some(expiry) = this.expiry.as_mut() {
            let expiry = expiry.get_mut().unwrap_or_else(PoisonError::into_inner);
            if expiry.as_mut().poll(cx).is_ready() {
                (this.expiry, this.expired) = (None, true);
                return timed_out();
            }
        }
        let frame = std::task::ready!(Pin::new(&mut this.body).poll_frame(cx));
        if frame.is_none() {
            // The body is over: its timer goes. (After an error it stays: a
            // body may yield more, and the deadline still bounds it.)
            this.expiry = None;
        }
        Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn bounded_body(text: &'static str, expiry: Sleep) -> Bounded {
        let error = DeadlineExceeded::new(Duration::from_secs(1), 1, false);
        Bounded {
            body: reqwest::Body::from(text),
            expiry: Some(Mutex::new(expiry)),
            expired: false,
            error,
        }
    }

    type Polled = Poll<Option<Result<Frame<Bytes>, <Bounded as HttpBody>::Error>>>;

    fn poll(body: &mut Bounded) -> Polled {
        Pin::new(body).poll_frame(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_bounded_body_keeps_its_size_and_ends_with_its_body() {
        let mut body = bounded_body("hello", Box::pin(std::future::pending()));
        assert_eq!(body.size_hint().exact(), Some(5));
        assert!(!body.is_end_stream());
        let Poll::Ready(Some(Ok(frame))) = poll(&mut body) else { panic!("the data") };
        assert_eq!(frame.into_data().unwrap(), "hello");
        assert!(matches!(poll(&mut body), Poll::Ready(None)));
        assert!(body.is_end_stream());
        assert!(body.expiry.is_none(), "the timer goes with the body");
    }

    #[test]
    fn past_its_deadline_a_body_ends_with_the_deadline_error() {
        let mut body = bounded_body("hello", Box::pin(std::future::ready(())));
        let Poll::Ready(Some(Err(error))) = poll(&mut body) else { panic!("the error first") };
        let io = error.downcast_ref::<io::Error>().expect("an io::Error");
        assert_eq!(io.kind(), io::ErrorKind::TimedOut);
        assert!(io.get_ref().is_some_and(|inner| inner.is::<DeadlineExceeded>()));
        assert!(body.is_end_stream());
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Err(_)))), "the error again");
    }

    #[test]
    fn a_body_with_nothing_left_ends_whatever_the_deadline() {
        let mut body = bounded_body("", Box::pin(std::future::ready(())));
        assert!(matches!(poll(&mut body), Poll::Ready(None)));
    }
}
