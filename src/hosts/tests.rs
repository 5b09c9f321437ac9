//! The table: one entry per scheme, host and port, its bound, what it forgets and what it never does.

use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::Url;

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
    for u in ["http://a.test/x", "https://A.test:443/", "foo://a.test:80/", "http://[::1]:81/"] {
        let host = hosts.get_or_insert(&url(u), 0, probe);
        assert_eq!(hash(host.key()), hash(url(u).as_origin()));
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

/// A request's host named in no client's terms, as another adapter would.
struct Named(&'static str, &'static str, Option<u16>);

impl Located for Named {
    fn as_origin(&self) -> Origin<'_> {
        Origin::new(self.0, self.1, self.2)
    }
}

#[test]
fn a_host_is_found_by_its_origin_whoever_names_it() {
    let hosts = Hosts::new(8, 1_000, Probe::default());
    let made = hosts.get_or_insert(&url("http://a.test:8080/x"), 0, |_| Probe::default());
    let found = hosts.get(&Named("http", "a.test", Some(8080))).expect("the same host");
    assert!(Arc::ptr_eq(&made, &found));
    // Another scheme or port is another host; the default port is none.
    assert!(hosts.get(&Named("https", "a.test", Some(8080))).is_none());
    assert!(hosts.get(&Named("http", "a.test", None)).is_none());
    hosts.get_or_insert(&url("http://a.test:80/"), 0, |_| Probe::default());
    assert!(hosts.get(&Named("http", "a.test", None)).is_some(), "`Url` leaves out port 80");
}
