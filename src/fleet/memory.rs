//! A fleet's store in memory, for the unit tests: pauses kept as ends on a
//! clock of their own, as a store that measures time-to-live would.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{
    FleetHost, FleetStore, Heard, MemberTally, News, PauseLeft, ProbeClaim, StoreError,
    StoreFuture, Tally,
};
use crate::clock::{Clock, ManualClock};

/// Pauses in memory, measured on `clock`; `down` fails every call, and
/// `garbage` names hosts whose value is not a pause.
pub(super) struct MemoryStore {
    pub(super) clock: ManualClock,
    pub(super) ends: Mutex<HashMap<FleetHost, Instant>>,
    pub(super) claims: Mutex<HashMap<FleetHost, (String, Instant)>>,
    pub(super) down: Mutex<bool>,
    pub(super) garbage: Mutex<Vec<FleetHost>>,
    /// Each host's totals, member by member.
    pub(super) totals: Mutex<HashMap<FleetHost, BTreeMap<String, Tally>>>,
    /// Fails the pooling of answers alone.
    pub(super) tallies_down: Mutex<bool>,
    /// Adds the answers, then fails as if the reply were lost.
    pub(super) tallies_lost: Mutex<bool>,
    /// Yields after adding, before the reply: another round can run
    /// meanwhile.
    pub(super) tallies_slow: Mutex<bool>,
    /// Each pause written, as the feed tells it: the host's name, its
    /// length and its writer's token.
    pub(super) feed: tokio::sync::broadcast::Sender<(String, PauseLeft, String)>,
}

impl MemoryStore {
    pub(super) fn new(clock: &ManualClock) -> Self {
        Self {
            clock: clock.clone(),
            ends: Mutex::default(),
            claims: Mutex::default(),
            down: Mutex::new(false),
            garbage: Mutex::default(),
            totals: Mutex::default(),
            tallies_down: Mutex::new(false),
            tallies_lost: Mutex::new(false),
            tallies_slow: Mutex::new(false),
            feed: tokio::sync::broadcast::channel(64).0,
        }
    }

    fn up(&self) -> Result<(), StoreError> {
        if *self.down.lock().unwrap() { Err(StoreError::new("down", None)) } else { Ok(()) }
    }
}

impl FleetStore for std::sync::Arc<MemoryStore> {
    fn extend_pauses<'a>(
        &'a self,
        token: &'a str,
        pauses: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.up()?;
            let now = self.clock.now();
            let mut ends = self.ends.lock().unwrap();
            for (host, left) in pauses {
                let end = now + *left;
                let kept = ends.entry(host.clone()).or_insert(end);
                *kept = (*kept).max(end);
                // None listening is no failure.
                let news = (host.as_str().to_owned(), PauseLeft::Left(*left), token.to_owned());
                let _ = self.feed.send(news);
            }
            Ok(())
        })
    }

    fn pauses_left<'a>(&'a self, hosts: &'a [FleetHost]) -> StoreFuture<'a, Vec<PauseLeft>> {
        Box::pin(async move {
            self.up()?;
            let now = self.clock.now();
            let ends = self.ends.lock().unwrap();
            let garbage = self.garbage.lock().unwrap();
            let left = |host: &FleetHost| {
                if garbage.contains(host) {
                    return PauseLeft::Garbage;
                }
                match ends.get(host).map(|end| end.saturating_duration_since(now)) {
                    Some(left) if !left.is_zero() => PauseLeft::Left(left),
                    _ => PauseLeft::None,
                }
            };
            Ok(hosts.iter().map(left).collect())
        })
    }

    fn claim_probes<'a>(
        &'a self,
        token: &'a str,
        claims: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, Vec<ProbeClaim>> {
        Box::pin(async move {
            self.up()?;
            let now = self.clock.now();
            let mut held = self.claims.lock().unwrap();
            let claim = |(host, lasting): &(FleetHost, Duration)| match held.get(host) {
                Some((holder, end)) if holder == token && *end > now => ProbeClaim::Won,
                Some((_, end)) if *end > now => {
                    ProbeClaim::Lost(end.saturating_duration_since(now))
                }
                _ => {
                    held.insert(host.clone(), (token.to_owned(), now + *lasting));
                    ProbeClaim::Won
                }
            };
            Ok(claims.iter().map(claim).collect())
        })
    }

    fn listen<'a>(&'a self, heard: &'a Heard) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut feed = self.feed.subscribe();
            loop {
                let (host, left, writer) =
                    feed.recv().await.map_err(|_| StoreError::new("the feed broke", None))?;
                heard(News { host: &host, left, writer: &writer });
            }
        })
    }

    fn share_tallies<'a>(
        &'a self,
        member: &'a str,
        written: &'a [(FleetHost, Tally)],
    ) -> StoreFuture<'a, Vec<Option<Vec<MemberTally>>>> {
        Box::pin(async move {
            self.up()?;
            if *self.tallies_down.lock().unwrap() {
                return Err(StoreError::new("down", None));
            }
            let slow = std::mem::take(&mut *self.tallies_slow.lock().unwrap());
            let lost = *self.tallies_lost.lock().unwrap();
            let added: Vec<_> = {
                let mut totals = self.totals.lock().unwrap();
                let garbage = self.garbage.lock().unwrap();
                let add = |(host, tally): &(FleetHost, Tally)| {
                    if garbage.contains(host) {
                        return None;
                    }
                    let members = totals.entry(host.clone()).or_default();
                    members.insert(member.to_owned(), *tally);
                    let read = members.iter().map(|(member, tally)| MemberTally {
                        member: member.clone(),
                        tally: *tally,
                    });
                    Some(read.collect())
                };
                written.iter().map(add).collect()
            };
            if slow {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
            }
            if lost { Err(StoreError::new("the reply was lost", None)) } else { Ok(added) }
        })
    }
}

impl MemoryStore {
    /// Every member's totals for `host`, summed.
    pub(super) fn total(&self, host: &FleetHost) -> Tally {
        let totals = self.totals.lock().unwrap();
        let members = totals.get(host).into_iter().flat_map(BTreeMap::values);
        members.fold(Tally::default(), |sum, tally| Tally {
            accepted: sum.accepted + tally.accepted,
            rejected: sum.rejected + tally.rejected,
        })
    }
}
