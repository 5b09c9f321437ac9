//! The combinators the crate needs: a future raced against a cut, and a
//! turn handed to the other tasks.
//!
//! The race bounds an attempt by the deadline, the reading of a streamed
//! body by the time it may take, and the drain of a retried response by the
//! wait.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;

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

/// Lets the executor run its other tasks once before this one goes on: a
/// call waiting on another's probe must not keep the thread from it, even
/// on a clock whose sleeps end at once.
pub(crate) async fn yield_once() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}
