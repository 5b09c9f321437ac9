//! The pooling of answers: a member's answers from each host added to its
//! running totals in the store, and the other members' taken into its
//! throttles.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[cfg(feature = "tracing")]
use super::TARGET;
use super::{Fleet, FleetHost, StoreError, Tally, lock, tally};
use crate::budget::Ledger;
use crate::clock::Clock;

/// The least time between two poolings of a member's evidence.
const POOL_EVERY: Duration = Duration::from_secs(1);

/// A member's pooling: when it last pooled, the fleet's totals for each
/// host read then, and whether a pooling is under way.
#[derive(Default)]
pub(super) struct Pool {
    at: Option<Instant>,
    /// The other members' totals for each host, as last read.
    totals: HashMap<FleetHost, HashMap<String, Tally>>,
    /// This member's own running totals for each host in its books.
    own: HashMap<FleetHost, Tally>,
    busy: bool,
}

/// Marks a member's pooling done when it ends, finished or dropped.
struct Done<'a> {
    fleet: &'a Fleet,
    member: usize,
}

impl Drop for Done<'_> {
    fn drop(&mut self) {
        if let Some(pool) = lock(&self.fleet.inner.pools).get_mut(&self.member) {
            pool.busy = false;
        }
    }
}

impl Fleet {
    /// Pools a member's evidence with the fleet's, at most once a
    /// [`POOL_EVERY`] (or a round, if rounds are further apart): adds the
    /// answers it got from each host since it last did to its running
    /// totals, writes them to the store, and takes in, for each host, the other members' answers
    /// since then, as their totals read back tell them ([`tally::read`]:
    /// the first reading of a host's only sets where the next counts from).
    /// Returns whether it asked the store.
    pub(super) async fn pool(
        &self,
        member: usize,
        ledger: &Ledger,
        clock: &dyn Clock,
    ) -> Result<bool, StoreError> {
        let now = clock.now();
        let every = POOL_EVERY.max(self.interval());
        {
            let mut pools = lock(&self.inner.pools);
            let pool = pools.entry(member).or_default();
            // One pooling at a time (two rounds may run at once): another
            // would read this one's addition as other processes' answers.
            if pool.busy || pool.at.is_some_and(|at| now.saturating_duration_since(at) < every) {
                return Ok(false);
            }
            pool.busy = true;
        }
        let _done = Done { fleet: self, member };
        let added: Vec<(FleetHost, Tally)> = ledger
            .take_evidence(now)
            .into_iter()
            .map(|(host, (accepted, rejected))| {
                (self.host(&host), Tally { accepted: accepted.into(), rejected: rejected.into() })
            })
            .collect();
        if added.is_empty() {
            lock(&self.inner.pools).entry(member).or_default().at = Some(now);
            return Ok(false);
        }
        // This member's running totals, kept for the hosts in its books.
        let totals: Vec<(FleetHost, Tally)> = {
            let mut pools = lock(&self.inner.pools);
            let own = &mut pools.entry(member).or_default().own;
            let mut kept = HashMap::with_capacity(added.len());
            let totals = added.iter().map(|(host, tally)| {
                let total = own.get(host).copied().unwrap_or_default().plus(*tally);
                kept.insert(host.clone(), total);
                (host.clone(), total)
            });
            let totals = totals.collect();
            *own = kept;
            totals
        };
        let name = format!("{}-{member}", self.inner.token);
        let read = self.inner.store.share_tallies(&name, &totals).await;
        let now = clock.now();
        let mut pools = lock(&self.inner.pools);
        let pool = pools.entry(member).or_default();
        // Hosts the books no longer hold are dropped with them; after a
        // failure, every host is, and the next reading counts from itself:
        // the answers of the others since are lost to it, never counted
        // twice. Its own are in the totals it writes next.
        let mut before = std::mem::take(&mut pool.totals);
        let read = read?;
        pool.at = Some(now);
        let ignored = &self.inner.counts.ignored;
        for ((host, added), members) in added.iter().zip(read) {
            let Some(members) = members else {
                ignored.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let reading = tally::read(before.remove(host).as_ref(), members, &name, *added);
            ignored.fetch_add(reading.ignored, Ordering::Relaxed);
            pool.totals.insert(host.clone(), reading.totals);
            self.take_in(ledger, now, host, reading.others);
        }
        Ok(true)
    }

    /// Takes the other processes' answers from `host` into its throttle.
    fn take_in(&self, ledger: &Ledger, now: Instant, host: &FleetHost, others: Tally) {
        if others == Tally::default() {
            return;
        }
        let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        let (accepted, rejected) = (count(others.accepted), count(others.rejected));
        let counts = &self.inner.counts;
        counts.pooled.fetch_add(others.accepted.saturating_add(others.rejected), Ordering::Relaxed);
        let (was, is) = ledger.pool_from_fleet(host, (accepted, rejected), now);
        if is && !was {
            counts.throttled_by_fleet.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "tracing")]
            tracing::debug!(target: TARGET, host = %host, accepted, rejected, "the fleet's answers have this process throttle a host");
        }
    }
}
