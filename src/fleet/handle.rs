//! The [`Fleet`] handle, and the state its clones share.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{
    CONNECTED, Counts, FleetHost, FleetStatus, FleetStore, FleetTask, HostKey, Known, Link, Pool,
    Queued, StoreError, UNKNOWN, listen, lock, millis, rounds,
};
use crate::budget::{HostInUse, Ledger};
use crate::clock::Clock;

/// A fleet of processes sharing their hosts' pauses through a
/// [`FleetStore`]. Cheap to clone: clones are one fleet.
///
/// Give it to [`RetryMiddleware::with_fleet`](crate::RetryMiddleware::with_fleet),
/// and run its rounds with [`spawn`](Self::spawn) (or [`sync`](Self::sync)).
#[derive(Clone)]
pub struct Fleet {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) store: Arc<dyn FleetStore>,
    /// Woken when a pause is queued, for the background task to write it
    /// at once.
    pub(super) wake: Arc<tokio::sync::Notify>,
    /// Names this process's claims in the store: random, as process ids
    /// repeat from one container to the next.
    pub(super) token: String,
    /// The key host names are hashed under, if they are kept from the
    /// store.
    pub(super) host_key: Option<HostKey>,
    /// The interval between rounds, in milliseconds.
    pub(super) interval_ms: AtomicU64,
    pub(super) outbox: Mutex<VecDeque<Queued>>,
    pub(super) members: Mutex<Vec<Member>>,
    /// Each member's pooling of evidence, by its number.
    pub(super) pools: Mutex<HashMap<usize, Pool>>,
    /// Each member's hosts in use, by the names the store knows them by:
    /// what the store's feed is heard for.
    pub(super) known: Mutex<HashMap<usize, Known>>,
    /// News heard from the store's feed since the last round.
    pub(super) news: AtomicU64,
    /// The tasks of the last [`Fleet::spawn`], stopped by the next.
    pub(super) tasks: Mutex<Option<[tokio::task::AbortHandle; 2]>>,
    /// Whether a pause queued longer than [`UNSENT`] was told of.
    ///
    /// [`UNSENT`]: super::link::UNSENT
    #[cfg(feature = "tracing")]
    pub(super) idle_told: std::sync::atomic::AtomicBool,
    /// Whether the last round reached the store; [`UNKNOWN`] before the
    /// first.
    pub(super) state: AtomicU8,
    pub(super) counts: Counts,
    /// The drops an event has told of.
    #[cfg(feature = "tracing")]
    pub(super) dropped_told: AtomicU64,
}

/// A member whose middleware is still there: its books, its clock and its
/// cap.
pub(super) type Live = (Arc<Ledger>, Arc<dyn Clock>, Duration);

/// A middleware in the fleet: its books, its clock and its cap.
pub(super) struct Member {
    ledger: Weak<Ledger>,
    pub(super) clock: Arc<dyn Clock>,
    cap: Duration,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet").field("status", &self.status()).finish_non_exhaustive()
    }
}

impl Fleet {
    /// The interval [`spawn`](Self::spawn) is usually given: every process
    /// holds a host's calls within it and a round trip of the first pause.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);

    /// A fleet sharing through `store`.
    pub fn new(store: impl FleetStore) -> Self {
        Self::with_host_key(store, None)
    }

    /// A fleet sharing through `store` that keeps its hosts' names from
    /// it: each is written as a keyed hash (SipHash-2-4, 128 bits) of
    /// `scheme://name:port` under `key`, so the store holds no host name,
    /// and only a holder of the key can tell which host a key is for (host
    /// names are few and guessable: a hash without a secret key would hide
    /// none of them). Every process of the fleet must be given the same
    /// key, as it must the same prefix: processes with other keys share
    /// nothing with them. Take 16 random bytes from where the fleet keeps
    /// its secrets.
    pub fn with_hashed_hosts(store: impl FleetStore, key: [u8; 16]) -> Self {
        Self::with_host_key(store, Some(HostKey(key)))
    }

    fn with_host_key(store: impl FleetStore, host_key: Option<HostKey>) -> Self {
        let inner = Inner {
            store: Arc::new(store),
            wake: Arc::new(tokio::sync::Notify::new()),
            token: format!("{:016x}", rand::random::<u64>()),
            host_key,
            interval_ms: AtomicU64::new(millis(Self::DEFAULT_INTERVAL)),
            outbox: Mutex::new(VecDeque::new()),
            members: Mutex::new(Vec::new()),
            pools: Mutex::default(),
            known: Mutex::default(),
            news: AtomicU64::new(0),
            tasks: Mutex::new(None),
            #[cfg(feature = "tracing")]
            idle_told: std::sync::atomic::AtomicBool::new(false),
            state: AtomicU8::new(UNKNOWN),
            counts: Counts::default(),
            #[cfg(feature = "tracing")]
            dropped_told: AtomicU64::new(0),
        };
        Self { inner: Arc::new(inner) }
    }

    /// What the fleet has done so far.
    pub fn status(&self) -> FleetStatus {
        let counts = &self.inner.counts;
        let read = |count: &AtomicU64| count.load(Ordering::Relaxed);
        FleetStatus {
            connected: self.inner.state.load(Ordering::Relaxed) == CONNECTED,
            published: read(&counts.published),
            received: read(&counts.received),
            ignored: read(&counts.ignored),
            dropped: read(&counts.dropped),
            failed_rounds: read(&counts.failed_rounds),
            held_for_probe: read(&counts.held_for_probe),
            heard: read(&counts.heard),
            pooled: read(&counts.pooled),
            throttled_by_fleet: read(&counts.throttled_by_fleet),
        }
    }

    /// Runs a round every `interval` (at least 10 ms, at most a day) on
    /// the current Tokio runtime, until the returned task is dropped or
    /// the fleet is (every clone of it).
    /// A pause this process takes on is written at once, between rounds;
    /// and, with a store that has a feed ([`FleetStore::listen`]), so is
    /// every pause another process writes taken up here the moment it is
    /// written. A fleet runs one such loop: calling `spawn` again stops
    /// the last one's tasks and starts new ones.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as `tokio::spawn` does.
    pub fn spawn(&self, interval: Duration) -> FleetTask {
        let interval = interval.clamp(Duration::from_millis(10), Duration::from_secs(86_400));
        self.inner.interval_ms.store(millis(interval), Ordering::Relaxed);
        let mut tasks = lock(&self.inner.tasks);
        for task in tasks.iter().flatten() {
            task.abort();
        }
        let rounds = tokio::spawn(rounds(Arc::downgrade(&self.inner), self.inner.wake.clone()));
        let feed = tokio::spawn(listen(Arc::downgrade(&self.inner), self.inner.store.clone()));
        *tasks = Some([rounds.abort_handle(), feed.abort_handle()]);
        FleetTask { rounds, feed }
    }

    /// One round: writes the pauses queued since the last one, then takes
    /// up what the fleet knows of the hosts this process called lately.
    ///
    /// # Errors
    ///
    /// The store's, when it fails: the queued pauses are lost (another
    /// `429` from the host queues its pause again), and nothing read is
    /// taken up.
    ///
    /// Events (target `reqwest_safe_retry::fleet`, with the `tracing`
    /// feature) tell when the fleet connects (info) or degrades (warn, once
    /// until it connects again), when pauses were dropped from a full
    /// queue (warn), and each pause taken up from the fleet or held for
    /// another process's probe (debug).
    pub async fn sync(&self) -> Result<(), StoreError> {
        self.inner.news.store(0, Ordering::Relaxed);
        let round = self.round().await;
        self.settle(round)
    }

    /// A host the books know, as the fleet names it.
    pub(super) fn host(&self, host: &HostInUse) -> FleetHost {
        FleetHost::new(&host.scheme, &host.name, host.port, self.inner.host_key.as_ref())
    }

    /// The interval between rounds.
    pub(super) fn interval(&self) -> Duration {
        Duration::from_millis(self.inner.interval_ms.load(Ordering::Relaxed))
    }

    /// [`members`](Self::members), each with its number.
    pub(super) fn members_numbered(&self) -> Vec<(usize, Live)> {
        let members = lock(&self.inner.members);
        members
            .iter()
            .enumerate()
            .filter_map(|(n, member)| {
                Some((n, (member.ledger.upgrade()?, member.clock.clone(), member.cap)))
            })
            .collect()
    }

    /// Adds a middleware's books to the fleet: the pauses it takes on are
    /// told to the fleet, and the fleet's reach it. `false` if its books
    /// are in a fleet already.
    /// Returns its number among the members.
    pub(crate) fn join(
        &self,
        ledger: &Arc<Ledger>,
        clock: Arc<dyn Clock>,
        cap: Duration,
    ) -> Option<usize> {
        let mut members = lock(&self.inner.members);
        let member = members.len();
        let link = Link { fleet: Arc::downgrade(&self.inner), member };
        if !ledger.join_fleet(Arc::new(link)) {
            return None;
        }
        members.push(Member { ledger: Arc::downgrade(ledger), clock, cap });
        Some(member)
    }

    /// A member's middleware reads the time from `clock` from now.
    pub(crate) fn set_clock(&self, member: usize, clock: Arc<dyn Clock>) {
        if let Some(member) = lock(&self.inner.members).get_mut(member) {
            member.clock = clock;
        }
    }
}
