//! A fleet's round: the queued pauses written, what the store holds of
//! the hosts in use taken up, and the probes of pauses that end soon
//! claimed.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{
    CONNECTED, DEGRADED, Fleet, FleetHost, Known, PauseLeft, ProbeClaim, Queued, StoreError, lock,
};
#[cfg(feature = "tracing")]
use super::{TARGET, millis};
use crate::budget::Ledger;
use crate::clock::Clock;

impl Fleet {
    /// Writes the pauses queued since the last round, as a round does
    /// first.
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        let flushed = self.write_queued().await;
        self.settle(flushed)
    }

    /// Takes the state a round (or a flush) leaves, `Ok(true)` if it asked
    /// the store anything, and tells of a change.
    pub(super) fn settle(&self, round: Result<bool, StoreError>) -> Result<(), StoreError> {
        let state = match round {
            // Nothing to write or read: the store was not asked, and the
            // state stands.
            Ok(false) => return Ok(()),
            Ok(true) => CONNECTED,
            Err(_) => DEGRADED,
        };
        let was = self.inner.state.swap(state, Ordering::Relaxed);
        if round.is_err() {
            self.inner.counts.failed_rounds.fetch_add(1, Ordering::Relaxed);
        }
        #[cfg(feature = "tracing")]
        match &round {
            Ok(_) if was != CONNECTED => {
                tracing::info!(target: TARGET, "the fleet's store is reached: pauses are shared")
            }
            Err(error) if was != DEGRADED => {
                tracing::warn!(target: TARGET, %error, "the fleet's store failed: each process keeps its own pauses until a round succeeds")
            }
            _ => {}
        }
        #[cfg(not(feature = "tracing"))]
        let _ = was;
        round.map(drop)
    }

    /// A round; `Ok(true)` if it asked the store anything.
    pub(super) async fn round(&self) -> Result<bool, StoreError> {
        let mut asked = self.write_queued().await?;
        for (member, (ledger, clock, cap)) in self.members_numbered() {
            let books = ledger.host_count();
            let hosts: Vec<FleetHost> =
                ledger.hosts_in_use(clock.now()).iter().map(|host| self.host(host)).collect();
            let names = hosts.iter().map(|host| (host.as_str().to_owned(), host.clone()));
            lock(&self.inner.known).insert(member, Known { names: names.collect(), books });
            if hosts.is_empty() {
                continue;
            }
            // The time left is measured when the store reads it: the
            // pause is held from before the reply's trip, not after.
            let asked_at = clock.now();
            asked = true;
            let left = self.inner.store.pauses_left(&hosts).await?;
            for (host, left) in hosts.iter().zip(left) {
                self.take_up(&ledger, asked_at, cap, host, left);
            }
            self.claim_probes(&ledger, &*clock, cap).await?;
        }
        for (member, (ledger, clock, _)) in self.members_numbered() {
            asked |= self.pool(member, &ledger, &*clock).await?;
        }
        Ok(asked)
    }

    /// Writes the queued pauses to the store; `Ok(true)` if there were any.
    async fn write_queued(&self) -> Result<bool, StoreError> {
        let queued: Vec<Queued> = lock(&self.inner.outbox).drain(..).collect();
        #[cfg(feature = "tracing")]
        {
            let dropped = self.inner.counts.dropped.load(Ordering::Relaxed);
            let told = self.inner.dropped_told.swap(dropped, Ordering::Relaxed);
            if dropped > told {
                let lost = dropped.saturating_sub(told);
                tracing::warn!(target: TARGET, lost, "pauses dropped from the fleet's full queue before they reached the store");
            }
        }
        let pauses = self.left_of(queued);
        if pauses.is_empty() {
            return Ok(false);
        }
        self.inner.store.extend_pauses(&self.inner.token, &pauses).await?;
        let published = u64::try_from(pauses.len()).unwrap_or(u64::MAX);
        self.inner.counts.published.fetch_add(published, Ordering::Relaxed);
        Ok(true)
    }

    /// How long a probe's claim lasts past the end of its pause: long
    /// enough for the probe's answer to be written and read by every
    /// process (two rounds), and for the probe itself.
    fn probe_window(&self) -> Duration {
        self.interval().saturating_mul(3).max(Duration::from_secs(2))
    }

    /// Claims the probes of the pauses that end before the round after
    /// next, so that one process of the fleet sends each: the others hold
    /// their calls until the claim ends.
    async fn claim_probes(
        &self,
        ledger: &Ledger,
        clock: &dyn Clock,
        cap: Duration,
    ) -> Result<(), StoreError> {
        let soon = self.interval().saturating_mul(2);
        let window = self.probe_window();
        let ending: Vec<(FleetHost, Duration)> = ledger
            .hosts_in_use(clock.now())
            .iter()
            .filter_map(|host| {
                let left = host.paused.filter(|left| *left <= soon)?;
                Some((self.host(host), left.saturating_add(window)))
            })
            .collect();
        if ending.is_empty() {
            return Ok(());
        }
        let asked_at = clock.now();
        let claims = self.inner.store.claim_probes(&self.inner.token, &ending).await?;
        // Another member claims what this one would: a probe's window past
        // a pause's end, the pause it read from the store. A claim that
        // outlasts ours by more than a round is no probe's.
        let slack = self.interval();
        for ((host, asked), claim) in ending.iter().zip(claims) {
            let ProbeClaim::Lost(left) = claim else { continue };
            let plausible =
                left <= asked.saturating_add(slack) && left <= cap.saturating_add(window);
            if !plausible {
                self.inner.counts.ignored.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if ledger.pause_from_fleet(host, left, asked_at) {
                self.inner.counts.held_for_probe.fetch_add(1, Ordering::Relaxed);
                #[cfg(feature = "tracing")]
                tracing::debug!(target: TARGET, host = %host, held_ms = millis(left), "held for another process's probe");
            }
        }
        Ok(())
    }

    /// What is left of each queued pause now, on its member's clock: the
    /// time the store is told.
    fn left_of(&self, queued: Vec<Queued>) -> Vec<(FleetHost, Duration)> {
        let members = lock(&self.inner.members);
        queued
            .into_iter()
            .filter_map(|queued| {
                let now = members.get(queued.member)?.clock.now();
                let left = queued.asked.checked_sub(now.saturating_duration_since(queued.at))?;
                (!left.is_zero()).then_some((queued.host, left))
            })
            .collect()
    }

    /// Takes up what the store holds of `host`'s pause at `now`; `true`
    /// if it is a longer pause than this process knew.
    pub(super) fn take_up(
        &self,
        ledger: &Ledger,
        now: Instant,
        cap: Duration,
        host: &FleetHost,
        left: PauseLeft,
    ) -> bool {
        let counts = &self.inner.counts;
        let left = match left {
            PauseLeft::None => return false,
            PauseLeft::Left(left) if !left.is_zero() && left <= cap => left,
            PauseLeft::Left(_) | PauseLeft::Garbage => {
                counts.ignored.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        };
        let longer = ledger.pause_from_fleet(host, left, now);
        if longer {
            counts.received.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "tracing")]
            tracing::debug!(target: TARGET, host = %host, left_ms = millis(left), "a pause from the fleet");
        }
        longer
    }
}
