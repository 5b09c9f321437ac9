//! A fleet of processes that share what each learns of a host: the pause
//! its server asked for, and the answers its throttle judges it by. (The
//! `fleet` feature; the `redis` feature adds the store most fleets already
//! run, [`RedisStore`].)
//!
//! # What is shared, and how
//!
//! When a process pauses a host at its server's request (a `429` or `503`
//! with a `Retry-After` within the cap, a predicate's
//! [`server_asked`](crate::Verdict::server_asked), the rate-limit headers),
//! the pause is queued for the fleet. The fleet's background tasks,
//! started by [`Fleet::spawn`], write it to the store at once, extending
//! the host's shared pause, never shortening it; and with a store that has
//! a feed ([`FleetStore::listen`]: Redis's publish and subscribe), every
//! other process that called the host lately (see below) takes the pause
//! up the moment the news reaches it, for the length written: so it holds
//! the host a little longer than asked, by the news's way from the store.
//! The feed is the quick way, not the only one: a round runs every
//! interval (500 ms by default), and
//!
//! 1. it writes the pauses still queued (the store failed, or the rounds
//!    run by [`Fleet::sync`] alone);
//! 2. it reads, for every host this process called lately, the time left
//!    of the host's shared pause, and pauses the host here for that long,
//!    as if this process had been told (a longer pause of its own holds).
//!    The hosts called lately are those in the books: with the default
//!    per-host budget, every host that answered in the last minute or so;
//!    with a global budget, or none, only the hosts this process has
//!    itself paused or throttled, so a fleet's pause reaches it for those
//!    alone;
//! 3. for every host whose pause ends before the round after next, it
//!    claims the pause's probe for this process: the first process to
//!    claim it sends the probe when the pause ends, and the others hold
//!    their calls to the host until the claim ends, three intervals (at
//!    least two seconds) past the pause, by when the probe's answer, if it
//!    asked for another pause, has reached them.
//!
//! 4. once a second at most, it adds this process's answers from each host
//!    in the books (accepted, and rejected, as the throttle counts them)
//!    to running totals of its own in the store, and reads back every
//!    member's: what each other member's grew by is its answers since this
//!    one last looked. Each host's throttle takes them in beside its own
//!    (see below).
//!
//! So every process holds new calls to a host within a round trip or two of
//! the first `429` (within an interval and a round trip, when the feed is
//! down or the store has none), and waits as long as the server asked,
//! measured by the store (and by the news's way from it, when the feed
//! told it first): no two processes' clocks need to agree. When the
//! pause ends, one request goes from the whole fleet, not one from each
//! process; the price is the claim's time, which the other processes wait
//! even when the probe is answered at once. (A process that won a claim
//! and has no call to send leaves the others to probe when it ends.)
//!
//! # The throttle on a fleet's evidence
//!
//! A process that calls a host once a second needs some twenty answers,
//! twenty seconds, before its throttle can tell an overloaded host from one
//! that fails now and then; a fleet of ten such processes has them in two.
//! The answers pooled from the other processes count, in each process's
//! throttle, towards the ratio of accepted answers its share of calls is
//! steered by, and shorten its window as a busier host's answers would.
//! They are steered on once per pooling, as one answer after the time
//! since the last, so a fleet's evidence moves a share no faster than a
//! busy host's own answers do. The fleet's accepted answers make room for
//! calls, this process's part of them, as its own do (so calls come back
//! as soon when a spike ends), and an accepted answer of any process tells
//! every process's throttle that the host is up: overloaded, perhaps, but
//! not down, so no process probes it on its own. What stays this process's
//! own: a run of rejections that says the host is down, and the rule that a
//! process calling less than about once a second is never throttled.
//! [`FleetStatus::pooled`] counts the answers taken in, and
//! [`FleetStatus::throttled_by_fleet`] the times they had a process start
//! throttling a host its own answers had not.
//!
//! Each member is believed no further than one process's plausible word:
//! what another member's totals grew by in a pooling counts for at most
//! twice this member's own answers in it, and two more, so a writer in the
//! store moves the pooled share no further than one more process answered
//! at this one's rate could. A member whose totals went back (they were
//! lost, or a restarted store started them again) counts from the new
//! reading, and is counted as ignored; a member new since the last reading
//! counts from its first; 256 members are read at most. A writer who makes
//! up many members counts as many: the bound is one member's word, not the
//! fleet's.
//!
//! What reaches the store is a host's scheme, name and port, a length of
//! time and counts of answers: no request, no header, no body, no path.
//! [`Fleet::with_hashed_hosts`] keeps even the host from it: a keyed hash
//! stands for `scheme://name:port`.
//!
//! # Never on a call's path
//!
//! A call never waits for the store, and never meets its errors. A pause
//! this process takes is queued (at most 1,024 of them; the oldest are
//! dropped first, and counted) and the call goes on. What the fleet knows
//! reaches a call as any pause does, from the books in memory. When the
//! store is slow, down or answers garbage, the rounds fail or ignore what
//! they read, and every call behaves as it does without a fleet: the
//! process's own pauses hold as always. Sharing resumes with the next
//! round that succeeds.
//!
//! A time left that is zero, or longer than the middleware's
//! [`RetryAfter`](crate::RetryAfter) cap, is ignored and counted
//! ([`FleetStatus::ignored`]): a store is bounded as a header is. With
//! pauses off ([`RetryAfter::with_pause`](crate::RetryAfter::with_pause)),
//! the middleware neither tells nor heeds the fleet.
//!
//! ```
//! # #[cfg(feature = "fleet")]
//! # async fn run(store: impl reqwest_safe_retry::fleet::FleetStore) -> Result<(), reqwest_safe_retry::ClientError> {
//! use reqwest_safe_retry::fleet::Fleet;
//! use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
//!
//! let fleet = Fleet::new(store);
//! let _task = fleet.spawn(Fleet::DEFAULT_INTERVAL);
//! let client = RetryMiddleware::new(RetryConfig::default())
//!     .with_fleet(&fleet)
//!     .client(reqwest::Client::builder())?
//!     .build();
//! # let _ = client;
//! # Ok(())
//! # }
//! ```

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use reqwest::Url;

use crate::budget::{Fleetward, HostInUse, Ledger};
use crate::clock::Clock;

#[cfg(all(test, feature = "test-util"))]
mod memory;
#[cfg(feature = "redis")]
mod redis;
mod tally;
#[cfg(all(test, feature = "test-util"))]
mod tests;

#[cfg(feature = "redis")]
pub use self::redis::RedisStore;
pub use self::tally::{MemberTally, Tally};

/// A host as a fleet names it in its store: `scheme://name:port`, the port
/// written even when it is the scheme's default, so that every process
/// names a host alike; or, for a fleet that keeps host names from its
/// store ([`Fleet::with_hashed_hosts`]), a keyed hash of that.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FleetHost {
    /// The name in the store.
    name: String,
    /// `scheme://name:port`, as this process calls the host.
    local: String,
}

impl FleetHost {
    /// The host of `scheme`, `name` (as `Url` writes it) and `port` (none
    /// for the scheme's default), its name hashed under `key` if given.
    pub(crate) fn new(scheme: &str, name: &str, port: Option<u16>, key: Option<&HostKey>) -> Self {
        let port = port.or_else(|| default_port(scheme));
        let local = match port {
            Some(port) => format!("{scheme}://{name}:{port}"),
            None => format!("{scheme}://{name}"),
        };
        let name = match key {
            Some(key) => key.hash(&local),
            None => local.clone(),
        };
        Self { name, local }
    }

    /// The name in the store: `scheme://name:port`, or its hash.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// A URL of the host, to find its entry in the books by.
    fn url(&self) -> Option<Url> {
        Url::parse(&self.local).ok()
    }
}

/// As the process calls the host, `scheme://name:port`, whatever the store
/// holds: for its own events.
impl fmt::Display for FleetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.local)
    }
}

/// The key a fleet hashes its host names under.
#[derive(Clone)]
pub(crate) struct HostKey([u8; 16]);

impl HostKey {
    /// `host:` and the 128 bits of SipHash-2-4 of `local` under the key,
    /// in hex.
    fn hash(&self, local: &str) -> String {
        use siphasher::sip128::Hasher128;
        use std::hash::Hasher;
        let mut hasher = siphasher::sip128::SipHasher24::new_with_key(&self.0);
        hasher.write(local.as_bytes());
        format!("host:{:032x}", hasher.finish128().as_u128())
    }
}

/// Milliseconds of `duration`, saturating.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// A future a store returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where a fleet keeps what its processes share. [`RedisStore`] (the
/// `redis` feature) is one; another store is one more implementation.
///
/// The fleet calls a store from its background task alone, one round at
/// a time: never from a call.
pub trait FleetStore: Send + Sync + 'static {
    /// Extends the pause of each host to at least its length from now,
    /// measured by the store; a longer pause already there is kept. The
    /// process that `token` names wrote them: a store with a feed tells
    /// who ([`News::writer`]).
    fn extend_pauses<'a>(
        &'a self,
        token: &'a str,
        pauses: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, ()>;

    /// What is left of each host's pause, in the order asked.
    fn pauses_left<'a>(&'a self, hosts: &'a [FleetHost]) -> StoreFuture<'a, Vec<PauseLeft>>;

    /// Claims, for the process that `token` names, the probe of each
    /// host's pause, for the length given (the claim's own time-to-live):
    /// the first process to claim a host's probe holds it until the claim
    /// ends, and claiming it again wins for that process alone. Returns, in
    /// the order asked, whether `token` holds the claim, or what is left of
    /// the claim another holds.
    fn claim_probes<'a>(
        &'a self,
        token: &'a str,
        claims: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, Vec<ProbeClaim>>;

    /// Sets `member`'s running totals for each host (every answer it has
    /// counted from the host since it joined; `member` is a name of its
    /// own in the fleet), kept as long as some member writes the host's,
    /// every few minutes at least; and returns every member's totals for
    /// the host just after, its own included, in the order given: `None`
    /// for a host whose totals cannot be read (a key something else
    /// wrote), which is ignored, and counted. A member whose totals are
    /// not counts is left out of the reading. Writing the same totals
    /// twice changes nothing, so a round whose reply was lost costs
    /// nothing.
    fn share_tallies<'a>(
        &'a self,
        member: &'a str,
        totals: &'a [(FleetHost, Tally)],
    ) -> StoreFuture<'a, Vec<Option<Vec<MemberTally>>>>;

    /// Listens for the pauses every process of the fleet writes with
    /// [`extend_pauses`](Self::extend_pauses), this one's too, and tells
    /// `heard` of each as it is written ([`News`]). So a pause reaches
    /// every process in a round trip, not at its next round. The future
    /// runs as long as the store can listen; an error ends it, and the
    /// fleet listens again a second later.
    ///
    /// A store that cannot listen keeps this default, which ends at once
    /// with `Ok(())` (and so should nothing else): its pauses are shared
    /// by the rounds alone.
    fn listen<'a>(&'a self, heard: &'a Heard) -> StoreFuture<'a, ()> {
        let _ = heard;
        Box::pin(std::future::ready(Ok(())))
    }
}

/// What a store's feed tells of each pause written
/// ([`FleetStore::listen`]).
pub type Heard = dyn Fn(News<'_>) + Send + Sync;

/// A pause as a store's feed tells of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct News<'a> {
    /// The host, as the store names it ([`FleetHost::as_str`]).
    pub host: &'a str,
    /// The pause's length when it was written; [`PauseLeft::Garbage`]
    /// (with any host and writer) for news the store could not read.
    pub left: PauseLeft,
    /// The token of the process that wrote it.
    pub writer: &'a str,
}

/// Who sends the probe when a host's pause ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeClaim {
    /// This process, now or since an earlier round: its next call to the
    /// host is the probe.
    Won,
    /// Another process, whose claim lasts this much longer: this one holds
    /// its calls until then, by when the probe's answer has reached it.
    Lost(Duration),
    /// The store could not tell: this process goes as it would alone.
    Unknown,
}

/// What a store holds of one host's pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseLeft {
    /// No pause.
    None,
    /// This much of a pause is left.
    Left(Duration),
    /// Something that is not a pause: a value with no end, or one the
    /// store could not read as a time. Ignored, and counted.
    Garbage,
}

/// A store's failure: the round is lost, and the process goes on alone
/// until the next one succeeds.
#[derive(Debug, thiserror::Error)]
#[error("the fleet's store failed: {message}")]
pub struct StoreError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl StoreError {
    /// An error with `message`, and the error behind it if any.
    pub fn new(
        message: impl Into<String>,
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self { message: message.into(), source }
    }
}

/// The target of the fleet's events.
#[cfg(feature = "tracing")]
const TARGET: &str = "reqwest_safe_retry::fleet";

/// The fleet's states: no round yet, the last reached the store, the last
/// failed.
const UNKNOWN: u8 = 0;
const CONNECTED: u8 = 1;
const DEGRADED: u8 = 2;

/// Pauses queued for the store at most; past it the oldest are dropped.
const OUTBOX: usize = 1024;

/// The least time between two poolings of a member's evidence.
const POOL_EVERY: Duration = Duration::from_secs(1);

/// How long a pause may wait in the queue before its wait says that no
/// round runs.
#[cfg(feature = "tracing")]
const UNSENT: Duration = Duration::from_secs(10);

/// How long after its feed failed a fleet listens again, and how often,
/// while it listens, it looks whether it is still there.
const LISTEN_AGAIN: Duration = Duration::from_secs(1);

/// News from the store's feed taken up between two rounds at most; past
/// it, news is ignored (and counted) until the next round: a feed that
/// floods costs the process little.
const MOST_NEWS: u64 = 1_000;

/// A fleet of processes sharing their hosts' pauses through a
/// [`FleetStore`]. Cheap to clone: clones are one fleet.
///
/// Give it to [`RetryMiddleware::with_fleet`](crate::RetryMiddleware::with_fleet),
/// and run its rounds with [`spawn`](Self::spawn) (or [`sync`](Self::sync)).
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn FleetStore>,
    /// Woken when a pause is queued, for the background task to write it
    /// at once.
    wake: Arc<tokio::sync::Notify>,
    /// Names this process's claims in the store: random, as process ids
    /// repeat from one container to the next.
    token: String,
    /// The key host names are hashed under, if they are kept from the
    /// store.
    host_key: Option<HostKey>,
    /// The interval between rounds, in milliseconds.
    interval_ms: AtomicU64,
    outbox: Mutex<VecDeque<Queued>>,
    members: Mutex<Vec<Member>>,
    /// Each member's pooling of evidence, by its number.
    pools: Mutex<HashMap<usize, Pool>>,
    /// Each member's hosts in use, by the names the store knows them by:
    /// what the store's feed is heard for.
    known: Mutex<HashMap<usize, Known>>,
    /// News heard from the store's feed since the last round.
    news: AtomicU64,
    /// The tasks of the last [`Fleet::spawn`], stopped by the next.
    tasks: Mutex<Option<[tokio::task::AbortHandle; 2]>>,
    /// Whether a pause queued longer than [`UNSENT`] was told of.
    #[cfg(feature = "tracing")]
    idle_told: std::sync::atomic::AtomicBool,
    /// Whether the last round reached the store; [`UNKNOWN`] before the
    /// first.
    state: AtomicU8,
    counts: Counts,
    /// The drops an event has told of.
    #[cfg(feature = "tracing")]
    dropped_told: AtomicU64,
}

/// A member's hosts in use as the store names them, and how many hosts
/// its books held when they were listed.
#[derive(Default)]
struct Known {
    names: HashMap<String, FleetHost>,
    books: usize,
}

/// A pause waiting to be written: the host, the length asked, and when
/// (on its member's clock).
struct Queued {
    host: FleetHost,
    asked: Duration,
    at: Instant,
    member: usize,
}

/// A member whose middleware is still there: its books, its clock and its
/// cap.
type Live = (Arc<Ledger>, Arc<dyn Clock>, Duration);

/// A middleware in the fleet: its books, its clock and its cap.
struct Member {
    ledger: Weak<Ledger>,
    clock: Arc<dyn Clock>,
    cap: Duration,
}

/// A member's pooling: when it last pooled, the fleet's totals for each
/// host read then, and whether a pooling is under way.
#[derive(Default)]
struct Pool {
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

#[derive(Default)]
struct Counts {
    published: AtomicU64,
    received: AtomicU64,
    ignored: AtomicU64,
    dropped: AtomicU64,
    failed_rounds: AtomicU64,
    held_for_probe: AtomicU64,
    heard: AtomicU64,
    pooled: AtomicU64,
    throttled_by_fleet: AtomicU64,
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

    /// Writes the pauses queued since the last round, as a round does
    /// first.
    async fn flush(&self) -> Result<(), StoreError> {
        let flushed = self.write_queued().await;
        self.settle(flushed)
    }

    /// Takes the state a round (or a flush) leaves, `Ok(true)` if it asked
    /// the store anything, and tells of a change.
    fn settle(&self, round: Result<bool, StoreError>) -> Result<(), StoreError> {
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
    async fn round(&self) -> Result<bool, StoreError> {
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

    /// Takes up a pause the store's feed told of, written by another
    /// process, for every member that called the host lately.
    fn hear(&self, news: News<'_>) {
        let counts = &self.inner.counts;
        if self.inner.news.fetch_add(1, Ordering::Relaxed) >= MOST_NEWS {
            counts.ignored.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if news.left == PauseLeft::Garbage {
            counts.ignored.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // This process's own pause, back: it holds already, from when it
        // was taken on, not from when the news came back.
        if news.writer == self.inner.token {
            return;
        }
        for (member, (ledger, clock, cap)) in self.members_numbered() {
            let Some(host) = self.known(member, &ledger, &*clock, news.host) else { continue };
            if self.take_up(&ledger, clock.now(), cap, &host, news.left) {
                counts.heard.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The host `name` names among member `member`'s hosts in use. The
    /// list the last round made is listed again first if the books have
    /// gained or lost a host since: a host called since the round is heard
    /// for too, and a name no host of this process has costs a lookup.
    fn known(
        &self,
        member: usize,
        ledger: &Ledger,
        clock: &dyn Clock,
        name: &str,
    ) -> Option<FleetHost> {
        let mut known = lock(&self.inner.known);
        let known = known.entry(member).or_default();
        let books = ledger.host_count();
        if !known.names.contains_key(name) && known.books != books {
            let hosts = ledger.hosts_in_use(clock.now());
            let hosts = hosts.iter().map(|host| self.host(host));
            known.names = hosts.map(|host| (host.as_str().to_owned(), host)).collect();
            known.books = books;
        }
        known.names.get(name).cloned()
    }

    /// Pools a member's evidence with the fleet's, at most once a
    /// [`POOL_EVERY`] (or a round, if rounds are further apart): adds the
    /// answers it got from each host since it last did to its running
    /// totals, writes them to the store, and takes in, for each host, the other members' answers
    /// since then, as their totals read back tell them ([`tally::read`]:
    /// the first reading of a host's only sets where the next counts from).
    /// Returns whether it asked the store.
    async fn pool(
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
        let Some(url) = host.url() else { return };
        let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        let (accepted, rejected) = (count(others.accepted), count(others.rejected));
        let counts = &self.inner.counts;
        counts.pooled.fetch_add(others.accepted.saturating_add(others.rejected), Ordering::Relaxed);
        let (was, is) = ledger.pool_from_fleet(&url, (accepted, rejected), now);
        if is && !was {
            counts.throttled_by_fleet.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "tracing")]
            tracing::debug!(target: TARGET, host = %host, accepted, rejected, "the fleet's answers have this process throttle a host");
        }
    }

    /// A host the books know, as the fleet names it.
    fn host(&self, host: &HostInUse) -> FleetHost {
        FleetHost::new(&host.scheme, &host.name, host.port, self.inner.host_key.as_ref())
    }

    /// The interval between rounds.
    fn interval(&self) -> Duration {
        Duration::from_millis(self.inner.interval_ms.load(Ordering::Relaxed))
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
            let Some(url) = host.url().filter(|_| plausible) else {
                self.inner.counts.ignored.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if ledger.pause_from_fleet(&url, left, asked_at) {
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

    /// [`members`](Self::members), each with its number.
    fn members_numbered(&self) -> Vec<(usize, Live)> {
        let members = lock(&self.inner.members);
        members
            .iter()
            .enumerate()
            .filter_map(|(n, member)| {
                Some((n, (member.ledger.upgrade()?, member.clock.clone(), member.cap)))
            })
            .collect()
    }

    /// Takes up what the store holds of `host`'s pause at `now`; `true`
    /// if it is a longer pause than this process knew.
    fn take_up(
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
        let Some(url) = host.url() else { return false };
        let longer = ledger.pause_from_fleet(&url, left, now);
        if longer {
            counts.received.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "tracing")]
            tracing::debug!(target: TARGET, host = %host, left_ms = millis(left), "a pause from the fleet");
        }
        longer
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

/// The way from one member's books to the fleet's queue.
struct Link {
    fleet: Weak<Inner>,
    member: usize,
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

/// The rounds of the fleet whose inner part `fleet` is, one every
/// interval, and the queued pauses written whenever `wake` is woken in
/// between; until the fleet is dropped.
async fn rounds(fleet: Weak<Inner>, wake: Arc<tokio::sync::Notify>) {
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
async fn listen(fleet: Weak<Inner>, store: Arc<dyn FleetStore>) {
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
    rounds: tokio::task::JoinHandle<()>,
    feed: tokio::task::JoinHandle<()>,
}

impl Drop for FleetTask {
    fn drop(&mut self) {
        self.rounds.abort();
        self.feed.abort();
    }
}

/// A lock that a panic elsewhere does not poison for good: each holder
/// leaves the data whole.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
