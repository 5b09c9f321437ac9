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

use std::sync::Mutex;
use std::time::Duration;

mod handle;
mod host;
mod link;
#[cfg(all(test, feature = "test-util"))]
mod memory;
mod news;
mod pool;
#[cfg(feature = "redis")]
mod redis;
mod round;
mod status;
mod store;
mod tally;
mod tasks;
#[cfg(all(test, feature = "test-util"))]
mod tests;

pub use self::handle::Fleet;
pub use self::host::FleetHost;
#[cfg(feature = "redis")]
pub use self::redis::RedisStore;
pub use self::status::FleetStatus;
pub use self::store::{FleetStore, Heard, News, PauseLeft, ProbeClaim, StoreError, StoreFuture};
pub use self::tally::{MemberTally, Tally};
pub use self::tasks::FleetTask;

use self::handle::Inner;
use self::host::HostKey;
use self::link::{Link, Queued};
use self::news::Known;
use self::pool::Pool;
use self::status::{CONNECTED, Counts, DEGRADED, UNKNOWN};
use self::tasks::{listen, rounds};

// Besides the items above, what the unit tests take through `super::*`.
#[cfg(all(test, feature = "test-util"))]
use {
    self::link::OUTBOX, self::news::MOST_NEWS, crate::budget::Fleetward, crate::clock::Clock,
    reqwest::Url,
};

/// The target of the fleet's events.
#[cfg(feature = "tracing")]
const TARGET: &str = "reqwest_safe_retry::fleet";

/// Milliseconds of `duration`, saturating.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A lock that a panic elsewhere does not poison for good: each holder
/// leaves the data whole.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
