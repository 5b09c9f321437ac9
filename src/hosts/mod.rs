//! State per scheme, host and port, in a table of at most `limit` hosts
//! that forgets the least recently used hosts that are free to go, an
//! eighth of its limit at a time, and never one that is not. A new host
//! that finds no room shares one overflow entry with every other such
//! host, so neither the table's memory nor the cost of a new host grows
//! with the number of hosts that may not go (failing, or held by a call).
//! A table may be cut into shards by hash, each with its share of the
//! limit and a lock of its own, so that calls to different hosts on
//! different threads seldom meet on one lock; each shard makes its own
//! room, as a table of its size would.
//!
//! Both the retry budget's accounts and the hedge's latency rings live in
//! one of these; what "recently used" and "free to go" mean is the state's
//! to say ([`HostState`]).
//!
//! # Why a table of its own, on `hashbrown`
//!
//! The cache crates were weighed first; none keeps this table's promises:
//!
//! - `quick_cache` (0.7): its `Lifecycle::is_pinned` would keep a failing
//!   or held host, and its lookups take a borrowed key, but it evicts by
//!   its own clock (CLOCK-Pro, scan resistant), one entry per insert,
//!   within each shard's share of the capacity. Filled with 1,024 keys and
//!   given one more, it kept the first in, least recently used, and stayed
//!   full, where this table forgets the oldest eighth; in 8 shards (its
//!   default on two cores) it held 1,003 of the 1,024. And `is_pinned` is
//!   not told the time, which "calm" needs.
//! - `moka`: TinyLFU admission and no pinning (a weight is fixed when an
//!   entry goes in, so it cannot follow a host that starts failing): a
//!   failing host could be evicted and handed a fresh reserve. Its
//!   housekeeping and dependencies are also far heavier than this needs.
//! - `papaya` (0.2): a lock-free map with borrowed lookups, but no
//!   eviction, and a reader may copy a value after an eviction checked
//!   that no call holds it, so "never forget a host in use" would need a
//!   lock of its own.
//! - `dashmap`: no eviction either; its release (6.x) looks keys up
//!   through `Borrow`, which a key of three borrowed parts only gets
//!   through a trait-object detour (7.0 takes `Equivalent`, but is a
//!   release candidate).
//!
//! What the table needs from a crate is a hash table that finds an entry by
//! a hash and a comparison the caller writes: `hashbrown`'s [`HashTable`]
//! (the table behind the standard library's map, from the Rust project,
//! with no dependencies of its own). Lookups hash and compare the URL's own
//! scheme, host and port, so finding a known host allocates nothing, and
//! hosts whose hashes collide are told apart by their exact keys.
//!
//! # Why a lock per thread for lookups
//!
//! Every call looks its host up, and a lookup must not write memory that
//! another thread writes too: with a plain `RwLock`, each read takes and
//! gives back the lock by writing its one word, and calls on two worker
//! threads hand that word's cache line to and fro (64 callers over 50,000
//! hosts on two threads cost 1.03 × reqwest-retry with it, 1.00 without;
//! see BENCHMARKS.md). `crossbeam-utils`' [`ShardedLock`] keeps a lock per
//! thread slot, each on a line of its own: a lookup takes its own thread's,
//! and a change (a new host, an eviction, which checks that no one else
//! holds a host) takes them all. Changes are rare: a new host, or a
//! failing one past the bound.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::stripes::note_shared_write;

/// What a table needs to know of the state it keeps for a host.
pub(crate) trait HostState {
    /// When the host was last used, on the owner's own clock: the least
    /// recent go first.
    fn last_used(&self) -> u64;

    /// Whether the host may be forgotten at `now` (the owner's clock), as
    /// far as the state can tell: calm, and held by no one. The table adds
    /// its own condition: no one holds the host's entry.
    fn may_forget(&self, now: u64) -> bool;
}

/// A scheme, host and port, borrowed: the key lookups use, in no client's
/// terms. A host's name is compared as given: each adapter hands it over
/// as its client writes it (reqwest's `Url`: lowercase).
///
/// The port is the one the request names (none for the scheme's default),
/// so with the scheme it settles the port, default or not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin<'a> {
    host: &'a str,
    port: Option<u16>,
    scheme: &'a str,
}

impl<'a> Origin<'a> {
    /// The origin of `scheme`, `host` and `port` (none for the scheme's
    /// default).
    #[inline]
    pub(crate) fn new(scheme: &'a str, host: &'a str, port: Option<u16>) -> Self {
        Self { host, port, scheme }
    }

    /// The host's name, as the adapter gave it.
    #[inline]
    pub(crate) fn host(&self) -> &'a str {
        self.host
    }
}

/// Anything a request names its host by: the table's lookups take it.
pub(crate) trait Located {
    /// The scheme, host and port it names.
    fn as_origin(&self) -> Origin<'_>;
}

impl Located for Origin<'_> {
    #[inline]
    fn as_origin(&self) -> Origin<'_> {
        *self
    }
}

/// Hashes the host and port: hosts that differ only by scheme share a
/// hash and are told apart by their keys.
impl Hash for Origin<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(self.host.as_bytes());
        state.write_u32(self.port.map_or(u32::MAX, u32::from));
    }
}

/// One host and its state. The key is the URL's scheme, host (lowercase,
/// as `Url` writes it) and the port it names.
pub(crate) struct Host<V> {
    scheme: Box<str>,
    host: Box<str>,
    port: Option<u16>,
    /// The state kept for the host.
    pub(crate) value: V,
}

impl<V> Host<V> {
    fn new(url: &(impl Located + ?Sized), value: V) -> Self {
        let key = url.as_origin();
        Self { scheme: key.scheme.into(), host: key.host.into(), port: key.port, value }
    }

    /// The host's scheme, name (as `Url` writes it) and the port its URL
    /// names (none for the scheme's default).
    #[cfg(feature = "fleet")]
    pub(crate) fn parts(&self) -> (&str, &str, Option<u16>) {
        (&self.scheme, &self.host, self.port)
    }

    /// The owned key, borrowed: hashed and compared as a URL's is.
    pub(crate) fn key(&self) -> Origin<'_> {
        Origin { scheme: &self.scheme, host: &self.host, port: self.port }
    }
}

/// State per scheme, host and port, bounded: past `limit` hosts, the least
/// recently used that may be forgotten are; when none may, a new host gets
/// the overflow entry.
///
/// The table is cut into shards by hash, each with an even share of the
/// limit and a lock of its own, so that lookups of hosts in different
/// shards share no lock; each shard makes its own room.
pub(crate) struct Hosts<V> {
    /// The hosts one shard holds at most.
    limit: usize,
    /// On the owner's clock: how long a scan that could not make room for
    /// an eighth of the limit holds off the next one; a shard that turned a
    /// host away counts as crowded for twice as long.
    pause: u64,
    shards: Box<[ShardedLock<Table<V>>]>,
    /// The entry of every host that found no room. It has no key: no URL
    /// names it.
    overflow: Arc<Host<V>>,
}

struct Table<V> {
    hosts: HashTable<Arc<Host<V>>>,
    /// No scan before this time: the last one could not make room.
    next_scan: u64,
    /// Until this time, new hosts are told the table is crowded: one was
    /// turned away to the overflow entry.
    crowded_until: u64,
}

impl<V: HostState> Hosts<V> {
    /// An empty table of at most `limit` hosts, scanning for room at most
    /// once every `pause` of the owner's clock while it finds none, with
    /// `overflow` for the hosts that find none.
    pub(crate) fn new(limit: usize, pause: u64, overflow: V) -> Self {
        Self::sharded(limit, 1, pause, overflow)
    }

    /// As [`new`](Self::new), in `shards` shards (at least one) of
    /// `limit / shards` hosts each.
    pub(crate) fn sharded(limit: usize, shards: usize, pause: u64, overflow: V) -> Self {
        let shards = shards.max(1);
        let table =
            || ShardedLock::new(Table { hosts: HashTable::new(), next_scan: 0, crowded_until: 0 });
        let overflow = Arc::new(Host {
            scheme: Box::default(),
            host: Box::default(),
            port: None,
            value: overflow,
        });
        Self {
            limit: limit.checked_div(shards).unwrap_or(limit),
            pause,
            shards: (0..shards).map(|_| table()).collect(),
            overflow,
        }
    }

    /// The shard of the host whose key hashes to `hashed`.
    fn shard(&self, hashed: u64) -> &ShardedLock<Table<V>> {
        // The high half: the table inside uses the low bits and the top
        // seven.
        let at = usize::try_from(hashed >> 32).unwrap_or_default();
        &self.shards[at.checked_rem(self.shards.len()).unwrap_or_default()]
    }

    /// Runs `f` on every host the table knows (not the overflow entry),
    /// one shard at a time, each shared while `f` runs on its hosts.
    #[cfg(feature = "fleet")]
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Host<V>)) {
        for shard in &self.shards {
            read(shard).hosts.iter().for_each(|host| f(host));
        }
    }

    /// Runs `f` on the state of `url`'s host, if the table knows it, with
    /// the table shared: no allocation, no reference counted.
    pub(crate) fn with<R>(
        &self,
        url: &(impl Located + ?Sized),
        f: impl FnOnce(&V) -> R,
    ) -> Option<R> {
        self.with_entry(url, |host| f(&host.value))
    }

    /// As [`with`](Self::with), with the host's entry: for `f` to keep a
    /// reference to it only when it needs one.
    pub(crate) fn with_entry<R>(
        &self,
        url: &(impl Located + ?Sized),
        f: impl FnOnce(&Arc<Host<V>>) -> R,
    ) -> Option<R> {
        let key = url.as_origin();
        let hashed = hash(key);
        let table = read(self.shard(hashed));
        table.hosts.find(hashed, |host| host.key() == key).map(f)
    }

    /// Runs `f` on the state of `url`'s host, if the table knows it; when
    /// it does not, says whether the host's shard is full: a new host would
    /// have to make room, or share the overflow entry.
    pub(crate) fn with_or_full<R>(
        &self,
        url: &(impl Located + ?Sized),
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, bool> {
        let key = url.as_origin();
        let hashed = hash(key);
        let table = read(self.shard(hashed));
        match table.hosts.find(hashed, |host| host.key() == key) {
            Some(host) => Ok(f(&host.value)),
            None => Err(table.hosts.len() >= self.limit),
        }
    }

    /// The entry of `url`'s host, if the table knows it.
    #[cfg(test)]
    pub(crate) fn get(&self, url: &(impl Located + ?Sized)) -> Option<Arc<Host<V>>> {
        // A reference counted on the entry.
        note_shared_write();
        let key = url.as_origin();
        let hashed = hash(key);
        read(self.shard(hashed)).hosts.find(hashed, |host| host.key() == key).cloned()
    }

    /// The entry of `url`'s host, made by `make` if the table does not know
    /// it yet; making room first, at `now` (the owner's clock), if the table
    /// is full. `make` is told whether the table is crowded: it turned a
    /// host away within the last two `pause`s, so the new host may be one
    /// that shared the overflow entry until now.
    ///
    /// When no room can be made, the overflow entry, shared by every host
    /// that found none. A scan that cannot make room for an eighth of the
    /// limit holds off the next for `pause`, so a flood of new hosts meets
    /// at most one scan per `pause`, whatever the number of hosts that may
    /// not go.
    pub(crate) fn get_or_insert(
        &self,
        url: &(impl Located + ?Sized),
        now: u64,
        make: impl FnOnce(bool) -> V,
    ) -> Arc<Host<V>> {
        note_shared_write();
        let key = url.as_origin();
        let hashed = hash(key);
        let mut table = write(self.shard(hashed));
        if let Some(host) = table.hosts.find(hashed, |host| host.key() == key) {
            return host.clone();
        }
        if table.hosts.len() >= self.limit && now >= table.next_scan {
            self.forget(&mut table.hosts, now);
            if self.limit.saturating_sub(table.hosts.len()) < self.slack() {
                table.next_scan = now.saturating_add(self.pause);
            }
        }
        if table.hosts.len() >= self.limit {
            // Past the next scan, and a pause more: a host turned away now
            // and let in by that scan is told.
            table.crowded_until = now.saturating_add(self.pause.saturating_mul(2));
            return self.overflow.clone();
        }
        let host = Arc::new(Host::new(url, make(now < table.crowded_until)));
        table.hosts.insert_unique(hashed, host.clone(), |host| hash(host.key()));
        host
    }

    /// Hosts that a scan makes room for: an eighth of the limit, and the
    /// one that asked.
    fn slack(&self) -> usize {
        (self.limit / 8).saturating_add(1)
    }

    /// Forgets the least recently used hosts that may be forgotten, enough
    /// to leave an eighth of the limit free, if that many may go.
    fn forget(&self, table: &mut HashTable<Arc<Host<V>>>, now: u64) {
        let mut used: Vec<u64> = table
            .iter()
            .filter(|host| may_forget(host, now))
            .map(|host| host.value.last_used())
            .collect();
        let wanted = table.len().saturating_add(self.slack());
        let excess = wanted.saturating_sub(self.limit).min(used.len());
        if excess == 0 {
            return;
        }
        // The `excess` least recently used: all used before `cut`, and as
        // many used at `cut` as make up the number.
        let (before, &mut cut, _) = used.select_nth_unstable(excess.saturating_sub(1));
        let mut at_cut = before.iter().filter(|&&used| used == cut).count().saturating_add(1);
        table.retain(|host| {
            if !may_forget(host, now) {
                return true;
            }
            let used = host.value.last_used();
            if used < cut {
                return false;
            }
            if used == cut && at_cut > 0 {
                at_cut = at_cut.saturating_sub(1);
                return false;
            }
            true
        });
    }

    /// Hosts in the table.
    #[cfg(any(test, feature = "fleet"))]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| read(shard).hosts.len()).sum()
    }

    /// Hosts in the shard of `url`'s host, and the most it holds.
    #[cfg(test)]
    pub(crate) fn shard_len(&self, url: &(impl Located + ?Sized)) -> (usize, usize) {
        (read(self.shard(hash(url.as_origin()))).hosts.len(), self.limit)
    }

    /// Whether `host` is the overflow entry.
    pub(crate) fn is_overflow(&self, host: &Arc<Host<V>>) -> bool {
        Arc::ptr_eq(host, &self.overflow)
    }
}

/// The hash a host's key is found by.
fn hash(key: Origin<'_>) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Only the table holds the entry, and its state may go.
fn may_forget<V: HostState>(host: &Arc<Host<V>>, now: u64) -> bool {
    Arc::strong_count(host) == 1 && host.value.may_forget(now)
}

fn read<T>(lock: &ShardedLock<T>) -> ShardedLockReadGuard<'_, T> {
    // Every change to the table completes before its guard drops: a panic
    // elsewhere leaves it whole.
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &ShardedLock<T>) -> ShardedLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<V> fmt::Debug for Hosts<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hosts").field("limit", &self.limit).finish_non_exhaustive()
    }
}

mod from_reqwest;
#[cfg(test)]
pub(crate) mod tests;
