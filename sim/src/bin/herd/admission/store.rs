//! The fleet's store as the herd models it: shared by the simulated
//! processes of a run, in the run's paused time, each command delayed and,
//! now and then, lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_safe_retry::fleet::{
    FleetHost, FleetStore, Heard, MemberTally, News, PauseLeft, ProbeClaim, StoreError,
    StoreFuture, Tally,
};
use tokio::sync::broadcast;
use tokio::time::Instant;

/// A store's delay on each command, and the share of commands lost, in
/// thousandths; and whether it tells the fleet of each pause written (as
/// Redis's publish and subscribe does), each news as delayed and as often
/// lost as a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreModel {
    pub(crate) delay: Duration,
    pub(crate) lost_per_mille: u32,
    pub(crate) feed: bool,
}

impl StoreModel {
    pub(crate) fn name(self) -> String {
        let lost = f64::from(self.lost_per_mille) / 10.0;
        let feed = if self.feed { "" } else { ", no feed" };
        format!("+{} ms, {lost}% lost{feed}", self.delay.as_millis())
    }
}

/// What a run's processes share.
#[derive(Default)]
struct Held {
    ends: HashMap<FleetHost, Instant>,
    claims: HashMap<FleetHost, (String, Instant)>,
    /// Each host's totals, member by member.
    totals: HashMap<FleetHost, HashMap<String, Tally>>,
}

/// One run's store; every process's fleet holds a clone.
#[derive(Clone)]
pub(crate) struct SimStore {
    model: StoreModel,
    held: Arc<Mutex<Held>>,
    commands: Arc<AtomicU64>,
    news: broadcast::Sender<(String, Duration, String)>,
}

impl SimStore {
    pub(crate) fn new(model: StoreModel) -> Self {
        let news = broadcast::channel(1024).0;
        Self { model, held: Arc::default(), commands: Arc::default(), news }
    }

    /// Waits the model's delay, then fails if this command is one of those
    /// lost.
    async fn reach(&self) -> Result<std::sync::MutexGuard<'_, Held>, StoreError> {
        tokio::time::sleep(self.model.delay).await;
        if self.lost() {
            return Err(StoreError::new("lost", None));
        }
        Ok(self.held.lock().expect("no panics while held"))
    }

    /// Whether the next command (or news) is one of those lost: drawn from
    /// a count of them, so every run loses the same.
    fn lost(&self) -> bool {
        let n = self.commands.fetch_add(1, Ordering::Relaxed);
        let mut h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 32;
        h % 1000 < u64::from(self.model.lost_per_mille)
    }
}

impl FleetStore for SimStore {
    fn extend_pauses<'a>(
        &'a self,
        token: &'a str,
        pauses: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut held = self.reach().await?;
            let now = Instant::now();
            for (host, left) in pauses {
                let end = now + *left;
                let kept = held.ends.entry(host.clone()).or_insert(end);
                *kept = (*kept).max(end);
                // None listening is no failure.
                let _ = self.news.send((host.as_str().to_owned(), *left, token.to_owned()));
            }
            Ok(())
        })
    }

    fn pauses_left<'a>(&'a self, hosts: &'a [FleetHost]) -> StoreFuture<'a, Vec<PauseLeft>> {
        Box::pin(async move {
            let held = self.reach().await?;
            let now = Instant::now();
            let left = |host: &FleetHost| match held.ends.get(host).map(|end| *end - now) {
                Some(left) if !left.is_zero() => PauseLeft::Left(left),
                _ => PauseLeft::None,
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
            let mut held = self.reach().await?;
            let now = Instant::now();
            let mut claim = |(host, lasting): &(FleetHost, Duration)| match held.claims.get(host) {
                Some((holder, end)) if holder == token && *end > now => ProbeClaim::Won,
                Some((_, end)) if *end > now => ProbeClaim::Lost(*end - now),
                _ => {
                    held.claims.insert(host.clone(), (token.to_owned(), now + *lasting));
                    ProbeClaim::Won
                }
            };
            Ok(claims.iter().map(&mut claim).collect())
        })
    }

    fn listen<'a>(&'a self, heard: &'a Heard) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if !self.model.feed {
                return Ok(());
            }
            let mut news = self.news.subscribe();
            loop {
                let (host, left, writer) =
                    news.recv().await.map_err(|_| StoreError::new("news lagged", None))?;
                // On its way: each news reaches each process after the
                // model's delay, or never. (Later news waits behind it, as
                // on one connection.)
                tokio::time::sleep(self.model.delay).await;
                if !self.lost() {
                    let left = PauseLeft::Left(left.saturating_sub(self.model.delay));
                    heard(News { host: &host, left, writer: &writer });
                }
            }
        })
    }

    fn share_tallies<'a>(
        &'a self,
        member: &'a str,
        totals: &'a [(FleetHost, Tally)],
    ) -> StoreFuture<'a, Vec<Option<Vec<MemberTally>>>> {
        Box::pin(async move {
            let mut held = self.reach().await?;
            let mut add = |(host, tally): &(FleetHost, Tally)| {
                let members = held.totals.entry(host.clone()).or_default();
                members.insert(member.to_owned(), *tally);
                let read = members
                    .iter()
                    .map(|(member, tally)| MemberTally { member: member.clone(), tally: *tally });
                Some(read.collect())
            };
            Ok(totals.iter().map(&mut add).collect())
        })
    }
}
