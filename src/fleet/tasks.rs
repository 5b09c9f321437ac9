//! A fleet's background tasks, which [`Fleet::spawn`] starts: its rounds,
//! and its ear on the store's feed.

use std::sync::{Arc, Weak};
use std::time::Duration;

#[cfg(feature = "tracing")]
use super::TARGET;
use super::{Fleet, FleetStore, Inner, News};

/// How long after its feed failed a fleet listens again, and how often,
/// while it listens, it looks whether it is still there.
const LISTEN_AGAIN: Duration = Duration::from_secs(1);

/// The rounds of the fleet whose inner part `fleet` is, one every
/// interval, and the queued pauses written whenever `wake` is woken in
/// between; until the fleet is dropped.
pub(super) async fn rounds(fleet: Weak<Inner>, wake: Arc<tokio::sync::Notify>) {
    loop {
        let Some(inner) = fleet.upgrade() else { return };
        let fleet_now = Fleet { inner };
        // A failed round is counted and told; the next one tries again.
        let _ = fleet_now.sync().await;
        let now = tokio::time::Instant::now();
        // Never `now`: the interval is at most a day.
        let next = now.checked_add(fleet_now.interval()).unwrap_or(now);
        drop(fleet_now);
        // Writes between rounds never hold the next round back: pauses
        // queued faster than a write takes would, were the time not looked
        // at before each wait (a pending wake wins over a passed deadline).
        while tokio::time::Instant::now() < next
            && tokio::time::timeout_at(next, wake.notified()).await.is_ok()
        {
            let Some(inner) = fleet.upgrade() else { return };
            let _ = Fleet { inner }.flush().await;
        }
    }
}

/// Listens to `store`'s feed for the fleet whose inner part `fleet` is,
/// and listens again a while after the feed fails; until the fleet is
/// dropped, or the store has no feed.
pub(super) async fn listen(fleet: Weak<Inner>, store: Arc<dyn FleetStore>) {
    let hearer = fleet.clone();
    let heard = move |news: News<'_>| {
        if let Some(inner) = hearer.upgrade() {
            Fleet { inner }.hear(news);
        }
    };
    loop {
        let mut feed = store.listen(&heard);
        let ended = loop {
            match tokio::time::timeout(LISTEN_AGAIN, &mut feed).await {
                Ok(ended) => break ended,
                Err(_) if fleet.strong_count() == 0 => return,
                Err(_) => {}
            }
        };
        if ended.is_ok() {
            return;
        }
        #[cfg(feature = "tracing")]
        if let Err(error) = &ended {
            tracing::debug!(target: TARGET, %error, "the store's feed failed: pauses are shared by the rounds until it is back");
        }
        drop(feed);
        tokio::time::sleep(LISTEN_AGAIN).await;
        if fleet.strong_count() == 0 {
            return;
        }
    }
}

/// The fleet's background tasks: dropping it stops them.
#[derive(Debug)]
pub struct FleetTask {
    pub(super) rounds: tokio::task::JoinHandle<()>,
    pub(super) feed: tokio::task::JoinHandle<()>,
}

impl Drop for FleetTask {
    fn drop(&mut self) {
        self.rounds.abort();
        self.feed.abort();
    }
}
