//! What a fleet has done so far: the state of its store, and its counts.

use std::sync::atomic::AtomicU64;

/// The fleet's states: no round yet, the last reached the store, the last
/// failed.
pub(super) const UNKNOWN: u8 = 0;
pub(super) const CONNECTED: u8 = 1;
pub(super) const DEGRADED: u8 = 2;

#[derive(Default)]
pub(super) struct Counts {
    pub(super) published: AtomicU64,
    pub(super) received: AtomicU64,
    pub(super) ignored: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) failed_rounds: AtomicU64,
    pub(super) held_for_probe: AtomicU64,
    pub(super) heard: AtomicU64,
    pub(super) pooled: AtomicU64,
    pub(super) throttled_by_fleet: AtomicU64,
}

/// What a fleet has done so far, for metrics and health checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FleetStatus {
    /// The last round reached the store.
    pub connected: bool,
    /// Pauses this process wrote to the store.
    pub published: u64,
    /// Pauses another process took on that this one took up (each host a
    /// round, while it is paused for longer than this process knew).
    pub received: u64,
    /// Of those, the pauses taken up the moment they were written, from
    /// the store's feed ([`FleetStore::listen`]), rather than read by a
    /// round.
    ///
    /// [`FleetStore::listen`]: super::FleetStore::listen
    pub heard: u64,
    /// Values read from the store and ignored: a pause of no length, one
    /// longer than the cap, or garbage.
    pub ignored: u64,
    /// Pauses dropped from a full queue before they reached the store.
    pub dropped: u64,
    /// Rounds the store failed, and writes of pauses between rounds.
    pub failed_rounds: u64,
    /// Pauses this process held past their end because another process
    /// claimed their probe.
    pub held_for_probe: u64,
    /// Answers of other processes this one's throttles took in.
    pub pooled: u64,
    /// Times the fleet's evidence had this process start throttling a
    /// host that its own answers had not.
    pub throttled_by_fleet: u64,
}
