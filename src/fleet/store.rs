//! What a fleet asks of its store: the [`FleetStore`] trait, and what its
//! methods take and give back.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{FleetHost, MemberTally, Tally};

/// A future a store returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where a fleet keeps what its processes share. [`RedisStore`] (the
/// `redis` feature) is one; another store is one more implementation.
///
/// The fleet calls a store from its background task alone, one round at
/// a time: never from a call.
///
/// [`RedisStore`]: super::RedisStore
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
