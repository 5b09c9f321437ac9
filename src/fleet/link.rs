//! The way from a member's books to the fleet's queue of pauses.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[cfg(feature = "tracing")]
use super::TARGET;
use super::{FleetHost, Inner, lock};
use crate::budget::Fleetward;

/// Pauses queued for the store at most; past it the oldest are dropped.
pub(super) const OUTBOX: usize = 1024;

/// How long a pause may wait in the queue before its wait says that no
/// round runs.
#[cfg(feature = "tracing")]
pub(super) const UNSENT: Duration = Duration::from_secs(10);

/// A pause waiting to be written: the host, the length asked, and when
/// (on its member's clock).
pub(super) struct Queued {
    pub(super) host: FleetHost,
    pub(super) asked: Duration,
    pub(super) at: Instant,
    pub(super) member: usize,
}

/// The way from one member's books to the fleet's queue.
pub(super) struct Link {
    pub(super) fleet: Weak<Inner>,
    pub(super) member: usize,
}

impl Fleetward for Link {
    fn paused(&self, scheme: &str, host: &str, port: Option<u16>, asked: Duration, at: Instant) {
        let Some(fleet) = self.fleet.upgrade() else { return };
        let host = FleetHost::new(scheme, host, port, fleet.host_key.as_ref());
        let mut outbox = lock(&fleet.outbox);
        if outbox.len() >= OUTBOX {
            outbox.pop_front();
            fleet.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
        // A round empties the queue, failed or not: a pause queued this
        // long ago says no round runs.
        #[cfg(feature = "tracing")]
        if outbox.front().is_some_and(|oldest| {
            oldest.member == self.member && at.saturating_duration_since(oldest.at) > UNSENT
        }) && !fleet.idle_told.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(target: TARGET, "pauses wait in the fleet's queue: no round runs (call Fleet::spawn)");
        }
        outbox.push_back(Queued { host, asked, at, member: self.member });
        drop(outbox);
        fleet.wake.notify_one();
    }
}
