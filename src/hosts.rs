//! State per scheme, host and port, in a table of at most `limit` hosts
//! that forgets the least recently used hosts that are free to go, an
//! eighth of its limit at a time, and never one that is not. A new host
//! that finds no room shares one overflow entry with every other such
//! host, so neither the table's memory nor the cost of a new host grows
//! with the number of hosts that may not go (failing, or held by a call).
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
//! hosts whose hashes collide are told apart by their exact keys. A
//! [`RwLock`] guards it: lookups share it, and an eviction, which checks
//! that no one else holds a host, has it alone.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;
use reqwest::Url;
use rustc_hash::FxBuildHasher;

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

/// A scheme, host and port, borrowed from a URL: the key lookups use.
///
/// The port is the one the URL names: `Url` leaves out a port that is its
/// scheme's default, so with the scheme it settles the port, default or not.
#[derive(Clone, Copy, PartialEq, Eq)]
struct HostRef<'a> {
    host: &'a str,
    port: Option<u16>,
    scheme: &'a str,
}

impl<'a> HostRef<'a> {
    #[inline]
    fn of(url: &'a Url) -> Self {
        Self { host: url.host_str().unwrap_or_default(), port: url.port(), scheme: url.scheme() }
    }
}

/// Hashes the host and port: hosts that differ only by scheme share a
/// hash and are told apart by their keys.
impl Hash for HostRef<'_> {
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
    fn new(url: &Url, value: V) -> Self {
        let key = HostRef::of(url);
        Self { scheme: key.scheme.into(), host: key.host.into(), port: key.port, value }
    }

    /// The owned key, borrowed: hashed and compared as a URL's is.
    fn key(&self) -> HostRef<'_> {
        HostRef { scheme: &self.scheme, host: &self.host, port: self.port }
    }
}

/// State per scheme, host and port, bounded: past `limit` hosts, the least
/// recently used that may be forgotten are; when none may, a new host gets
/// the overflow entry.
pub(crate) struct Hosts<V> {
    limit: usize,
    /// On the owner's clock: how long a scan that could not make room for
    /// an eighth of the limit holds off the next one; a table that turned a
    /// host away counts as crowded for twice as long.
    pause: u64,
    table: RwLock<Table<V>>,
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
        let table = Table { hosts: HashTable::new(), next_scan: 0, crowded_until: 0 };
        let overflow = Arc::new(Host {
            scheme: Box::default(),
            host: Box::default(),
            port: None,
            value: overflow,
        });
        Self { limit, pause, table: RwLock::new(table), overflow }
    }

    /// Runs `f` on the state of `url`'s host, if the table knows it, with
    /// the table shared: no allocation, no reference counted.
    pub(crate) fn with<R>(&self, url: &Url, f: impl FnOnce(&V) -> R) -> Option<R> {
        let key = HostRef::of(url);
        let hashed = hash(key);
        read(&self.table).hosts.find(hashed, |host| host.key() == key).map(|host| f(&host.value))
    }

    /// The entry of `url`'s host, if the table knows it.
    #[cfg(test)]
    pub(crate) fn get(&self, url: &Url) -> Option<Arc<Host<V>>> {
        let key = HostRef::of(url);
        let hashed = hash(key);
        read(&self.table).hosts.find(hashed, |host| host.key() == key).cloned()
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
        url: &Url,
        now: u64,
        make: impl FnOnce(bool) -> V,
    ) -> Arc<Host<V>> {
        let key = HostRef::of(url);
        let hashed = hash(key);
        let mut table = write(&self.table);
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
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        read(&self.table).hosts.len()
    }

    /// Whether `host` is the overflow entry.
    #[cfg(test)]
    pub(crate) fn is_overflow(&self, host: &Arc<Host<V>>) -> bool {
        Arc::ptr_eq(host, &self.overflow)
    }
}

/// The hash a host's key is found by.
fn hash(key: HostRef<'_>) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Only the table holds the entry, and its state may go.
fn may_forget<V: HostState>(host: &Arc<Host<V>>, now: u64) -> bool {
    Arc::strong_count(host) == 1 && host.value.may_forget(now)
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // Every change to the table completes before its guard drops: a panic
    // elsewhere leaves it whole.
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<V> fmt::Debug for Hosts<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hosts").field("limit", &self.limit).finish_non_exhaustive()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// A state whose use and calm the test sets, and which counts how often
    /// a scan asks whether it may go.
    #[derive(Default)]
    struct Probe {
        used: AtomicU64,
        failing: bool,
        asked: Arc<AtomicU64>,
    }

    impl HostState for Probe {
        fn last_used(&self) -> u64 {
            self.used.load(Ordering::Relaxed)
        }
        fn may_forget(&self, _now: u64) -> bool {
            self.asked.fetch_add(1, Ordering::Relaxed);
            !self.failing
        }
    }

    /// The owner's clock units a futile scan holds off the next.
    const PAUSE: u64 = 10;

    fn table(limit: usize) -> Hosts<Probe> {
        Hosts::new(limit, PAUSE, Probe::default())
    }

    fn probe(_crowded: bool) -> Probe {
        Probe::default()
    }

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn the_borrowed_key_hashes_and_compares_as_the_owned_one() {
        let hosts = table(8);
        for u in ["http://a.test/x", "https://A.test:443/", "foo://a.test:80/", "http://[::1]:81/"]
        {
            let host = hosts.get_or_insert(&url(u), 0, probe);
            assert_eq!(hash(host.key()), hash(HostRef::of(&url(u))));
            assert!(Arc::ptr_eq(&host, &hosts.get(&url(u)).unwrap()), "{u}");
        }
        assert_eq!(hosts.len(), 4);
    }

    /// One host per scheme, host and port, whatever else the URL says; a
    /// user name, a path or an explicit default port change nothing.
    #[test]
    fn a_host_is_its_scheme_host_and_port() {
        let hosts = table(64);
        let urls = [
            ("http://a.test/x", 0),
            ("http://a.test:80/y?q", 0),
            ("http://A.TEST/", 0),
            ("http://user:pw@a.test/", 0),
            ("http://a.test:8080/", 1),
            ("https://a.test/", 2),
            ("https://a.test:443/z", 2),
            ("http://a.test.evil.test/", 3),
            ("foo://a.test:80/x", 4),
            ("foo://a.test/x", 5),
            ("http://[::1]:8080/", 6),
            ("http://[0:0::1]:8080/p", 6),
        ];
        let mut made: Vec<Arc<Host<Probe>>> = Vec::new();
        for (u, host) in urls {
            let got = hosts.get_or_insert(&url(u), 0, probe);
            match made.get(host) {
                Some(known) => assert!(Arc::ptr_eq(known, &got), "{u}"),
                None => {
                    assert!(!made.iter().any(|m| Arc::ptr_eq(m, &got)), "{u} is new");
                    made.push(got);
                }
            }
        }
        assert_eq!(hosts.len(), 7);
    }

    /// Many hosts in one table: their hashes share buckets and tags, and
    /// each is still found as itself.
    #[test]
    fn hosts_whose_hashes_meet_are_told_apart() {
        let hosts = table(4096);
        let names: Vec<String> = (0..3000).map(|n| format!("http://h{n}.test/")).collect();
        let made: Vec<_> = names.iter().map(|u| hosts.get_or_insert(&url(u), 0, probe)).collect();
        for (u, host) in names.iter().zip(&made) {
            assert!(Arc::ptr_eq(host, &hosts.get(&url(u)).unwrap()), "{u}");
        }
        assert_eq!(hosts.len(), 3000);
    }

    #[test]
    fn a_full_table_forgets_an_eighth_the_least_recently_used_first() {
        let hosts = table(64);
        for n in 0..64u64 {
            let host = hosts.get_or_insert(&url(&format!("http://h{n}.test/")), n, probe);
            // Used in the order 63, 62, … 0: h63 least recently.
            host.value.used.store(63 - n, Ordering::Relaxed);
        }
        hosts.get_or_insert(&url("http://new.test/"), 100, probe);
        // Nine go, leaving an eighth of the limit free.
        assert_eq!(hosts.len(), 64 - 8);
        for n in 0..64 {
            let kept = hosts.get(&url(&format!("http://h{n}.test/"))).is_some();
            assert_eq!(kept, n < 55, "h{n}");
        }
    }

    #[test]
    fn of_hosts_used_at_the_same_time_only_as_many_go_as_must() {
        // Hosts are mostly touched in the same second, so the cut falls
        // among equals: the count, not the time, decides.
        let hosts = table(16);
        for n in 0..16 {
            let host = hosts.get_or_insert(&url(&format!("http://h{n}.test/")), 5, probe);
            host.value.used.store(5, Ordering::Relaxed);
        }
        hosts.get_or_insert(&url("http://new.test/"), 5, probe);
        // Three go (an eighth of the limit free, counting the new one).
        assert_eq!(hosts.len(), 16 - 3 + 1);
        assert!(hosts.get(&url("http://new.test/")).is_some());
    }

    #[test]
    fn the_table_names_its_limit_when_printed() {
        let printed = format!("{:?}", table(16));
        assert!(printed.starts_with("Hosts") && printed.contains("limit: 16"), "{printed}");
    }

    #[test]
    fn hosts_that_may_not_go_stay_and_new_ones_share_the_overflow() {
        let hosts = table(16);
        let held = hosts.get_or_insert(&url("http://held.test/"), 0, probe);
        let failing = |_| Probe { failing: true, ..Probe::default() };
        for n in 0..15 {
            hosts.get_or_insert(&url(&format!("http://f{n}.test/")), 0, failing);
        }
        let turned_away = hosts.get_or_insert(&url("http://new.test/"), 0, probe);
        assert!(hosts.is_overflow(&turned_away), "no host may go: no room");
        assert_eq!(hosts.len(), 16, "the table stays at its limit");
        for n in 0..15 {
            assert!(hosts.get(&url(&format!("http://f{n}.test/"))).is_some());
        }
        assert!(Arc::ptr_eq(&held, &hosts.get(&url("http://held.test/")).unwrap()));
        drop(held);
        // A pause later, the next scan lets the held host go, and the new
        // host in; it is told the table was crowded.
        let mut crowded = None;
        let admitted = hosts.get_or_insert(&url("http://next.test/"), PAUSE, |c| {
            crowded = Some(c);
            Probe::default()
        });
        assert!(!hosts.is_overflow(&admitted));
        assert!(hosts.get(&url("http://held.test/")).is_none(), "free to go once let go");
        assert_eq!(crowded, Some(true));
        // Two pauses after the last host turned away, it is not.
        drop(admitted);
        let mut crowded = None;
        hosts.get_or_insert(&url("http://later.test/"), 3 * PAUSE, |c| {
            crowded = Some(c);
            Probe::default()
        });
        assert_eq!(crowded, Some(false));
    }

    #[test]
    fn a_scan_that_makes_room_does_not_hold_off_the_next() {
        // Hosts that may go: every new host finds room, a scan at a time,
        // with the time standing still.
        let hosts = table(16);
        for n in 0..16 {
            hosts.get_or_insert(&url(&format!("http://h{n}.test/")), 5, probe);
        }
        for n in 0..40 {
            let host = hosts.get_or_insert(&url(&format!("http://n{n}.test/")), 5, probe);
            assert!(!hosts.is_overflow(&host), "n{n} found no room");
        }
    }

    #[test]
    fn a_flood_of_new_hosts_meets_one_scan_a_pause_whatever_fails() {
        // A full table of failing hosts, then 50,000 new hosts with time
        // standing still: one scan of the table, then none until the pause
        // is over; every new host shares the overflow entry.
        let limit = 1024;
        let hosts = table(limit);
        let asked = Arc::new(AtomicU64::new(0));
        for n in 0..limit {
            hosts.get_or_insert(&url(&format!("http://f{n}.test/")), 0, |_| Probe {
                failing: true,
                asked: asked.clone(),
                ..Probe::default()
            });
        }
        assert_eq!(asked.load(Ordering::Relaxed), 0, "no scan below the limit");
        for n in 0..50_000 {
            let host = hosts.get_or_insert(&url(&format!("http://n{n}.test/")), 1, probe);
            assert!(hosts.is_overflow(&host));
        }
        assert_eq!(asked.load(Ordering::Relaxed), limit as u64, "one scan in all");
        assert_eq!(hosts.len(), limit);
        hosts.get_or_insert(&url("http://after.test/"), 1 + PAUSE, probe);
        assert_eq!(asked.load(Ordering::Relaxed), 2 * limit as u64, "the next, a pause later");
    }
}
