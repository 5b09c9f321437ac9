//! The ledger: which account a request draws on, and the table of hosts.

use std::time::Duration;

use reqwest::Url;

use super::*;
use crate::throttle::STALE_MS;

fn url(s: &str) -> Url {
    Url::parse(s).unwrap()
}

fn budget(scope: BudgetScope) -> Ledger {
    Ledger::new(Some(&RetryBudget::default().with_scope(scope).with_reserve(1)), 3, false, false)
        .unwrap()
}

fn len(b: &Ledger) -> usize {
    b.hosts.len()
}

#[test]
fn hosts_are_isolated_and_paths_are_not() {
    let b = budget(BudgetScope::PerHost);
    let t0 = Instant::now();
    let a = b.account(&url("http://a.test/x"), t0);
    assert!(b.try_spend(&a, t0).is_some());
    let same = b.account(&url("http://a.test/other?q=1"), t0);
    assert!(b.try_spend(&same, t0).is_none(), "one host, one reserve");
    for other in ["http://b.test/", "https://a.test/", "http://a.test:8080/"] {
        let account = b.account(&url(other), t0);
        assert!(b.try_spend(&account, t0).is_some(), "{other}");
    }
}

#[test]
fn answers_earn_for_their_own_host_and_budget() {
    let (b, other) = (budget(BudgetScope::PerHost), budget(BudgetScope::PerHost));
    let t0 = Instant::now();
    let a = b.account(&url("http://a.test/"), t0);
    let c = b.account(&url("http://c.test/"), t0);
    assert!(b.try_spend(&a, t0).is_some() && b.try_spend(&c, t0).is_some(), "reserves spent");
    // The same thread records answers for one host in two budgets.
    for _ in 0..10 {
        b.earn_for(&url("http://a.test/p"), true, || t0);
        other.earn_for(&url("http://a.test/p"), true, || t0);
    }
    // Ten tenths: the reserve is full again, the window empty.
    assert_eq!(a.available(0), 1, "ten answers from a.test");
    assert_eq!(c.available(0), 0, "c.test earned nothing");
    // Hosts taking turns, and a URL naming a user.
    for _ in 0..10 {
        b.earn_for(&url("http://c.test/"), true, || t0);
        b.earn_for(&url("http://user@a.test/"), true, || t0);
    }
    assert_eq!((a.available(0), c.available(0)), (2, 1));
    // One host over and over, after a first URL that named a user.
    b.earn_for(&url("http://user@d.test/"), true, || t0);
    let d = b.account(&url("http://d.test/"), t0);
    assert!(b.try_spend(&d, t0).is_some(), "the reserve");
    for _ in 0..19 {
        b.earn_for(&url("http://d.test/q"), true, || t0);
    }
    // The first answer went to the window (the reserve was full); the
    // retry took that 0.1 and 0.9 of the reserve; nine answers refilled
    // the reserve and ten earned a retry in the window: 1.0 + 1.0.
    assert_eq!(d.available(0), 2);
    let fresh = other.account(&url("http://a.test/"), t0);
    assert_eq!(fresh.available(0), 2, "the other budget's own account");
}

#[test]
fn past_the_bound_answers_alone_let_no_host_in() {
    let b = budget(BudgetScope::PerHost);
    let t0 = Instant::now();
    for n in 0..MAX_HOSTS * 4 {
        b.earn_for(&url(&format!("http://h{n}.test/")), true, || t0);
    }
    assert_eq!(len(&b), MAX_HOSTS, "answers fill every shard up to its bound, and no further");
    let hosts = &b.hosts;
    let new = url("http://new.test/");
    b.earn_for(&new, true, || t0);
    assert!(hosts.with(&new, |_| ()).is_none(), "an answer alone does not let it in");
    // A failure lets a host in, making room among the calm ones.
    let failing = b.account(&new, t0);
    b.note_failure(&failing, t0);
    assert!(hosts.with(&new, |_| ()).is_some());
    assert!(len(&b) <= MAX_HOSTS);
}

#[test]
fn global_scope_shares_one_account() {
    let b = budget(BudgetScope::Global);
    let t0 = Instant::now();
    let a = b.account(&url("http://a.test/"), t0);
    assert!(b.try_spend(&a, t0).is_some());
    assert!(b.try_spend(&b.account(&url("http://b.test/"), t0), t0).is_none());
}

/// Fills the shard of `new`'s host with hosts h0, h1, ... used at `at(n)`,
/// each at a second of its own; returns those that went into the shard.
fn fill_shard_of(b: &Ledger, new: &Url, at: impl Fn(u64) -> Instant) -> Vec<Url> {
    let mut shard = Vec::new();
    for n in 0u64.. {
        let (len, limit) = b.hosts.shard_len(new);
        if len == limit {
            break;
        }
        let host = url(&format!("http://h{n}.test/"));
        let before = b.hosts.shard_len(new).0;
        drop(b.account(&host, at(n)));
        if b.hosts.shard_len(new).0 > before {
            shard.push(host);
        }
    }
    shard
}

#[test]
fn the_table_forgets_the_least_recently_used_calm_hosts() {
    let b = budget(BudgetScope::PerHost);
    let hosts = &b.hosts;
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    // Fill the shard of new.test, each host used at a time of its own.
    let new = url("http://new.test/");
    let shard = fill_shard_of(&b, &new, at);
    drop(b.account(&new, at(100_000)));
    let (len, limit) = hosts.shard_len(&new);
    assert_eq!(len, limit - limit / 8, "an eighth of the shard went, and new.test came in");
    // The least recently used went, the most recent stayed.
    let kept = |u: &Url| hosts.with(u, |_| ()).is_some();
    let gone = limit / 8 + 1;
    assert!(shard[..gone].iter().all(|u| !kept(u)), "the oldest went");
    assert!(shard[gone..].iter().all(kept), "the rest stayed");
    assert!(kept(&new));
}

#[test]
fn a_failing_host_is_never_forgotten() {
    let b = budget(BudgetScope::PerHost);
    let t0 = Instant::now();
    let failing = b.account(&url("http://down.test/"), t0);
    b.note_failure(&failing, t0);
    assert!(b.try_spend(&failing, t0).is_some());
    drop(failing);
    for n in 0..(MAX_HOSTS * 3) {
        drop(b.account(&url(&format!("http://h{n}.test/")), t0));
    }
    assert!(len(&b) <= MAX_HOSTS);
    // Still the same account: its spent reserve was not handed back.
    let again = b.account(&url("http://down.test/"), t0);
    assert!(b.try_spend(&again, t0).is_none());
}

#[test]
fn a_host_that_only_failed_is_not_forgotten_either() {
    let b = budget(BudgetScope::PerHost);
    let t0 = Instant::now();
    b.note_failure(&b.account(&url("http://down.test/"), t0), t0);
    for n in 0..(MAX_HOSTS * 3) {
        drop(b.account(&url(&format!("http://h{n}.test/")), t0));
    }
    let hosts = &b.hosts;
    assert!(hosts.with(&url("http://down.test/"), |_| ()).is_some());
}

#[test]
fn a_host_past_a_table_of_failing_hosts_never_gets_a_fresh_reserve() {
    // A budget whose shard for new.test is full of failing hosts.
    let b = budget(BudgetScope::PerHost);
    let hosts = &b.hosts;
    let t0 = Instant::now();
    let new = url("http://new.test/");
    for n in 0.. {
        let (len, limit) = hosts.shard_len(&new);
        if len == limit {
            break;
        }
        let account = b.account(&url(&format!("http://f{n}.test/")), t0);
        b.note_failure(&account, t0);
    }
    // It shares the overflow account, whose reserve starts empty.
    let shared = b.account(&new, t0);
    assert!(b.try_spend(&shared, t0).is_none(), "no fresh reserve for a new host");
    let (len, limit) = hosts.shard_len(&new);
    assert_eq!(len, limit, "the shard stays at its bound");
    drop(shared);
    // A window later the old hosts are calm and may go: the new host
    // gets an account of its own, still with an empty reserve, as it
    // may have been failing all along.
    let later = t0 + Duration::from_secs(10);
    let own = b.account(&new, later);
    assert!(hosts.with(&new, |_| ()).is_some());
    assert!(b.try_spend(&own, later).is_none());
    // Its own answers earn it retries, as for any host.
    for _ in 0..10 {
        b.earn(&own, later);
    }
    assert!(b.try_spend(&own, later).is_some());
}

#[test]
fn a_budget_prints_its_rates_in_thousandths() {
    let printed = format!("{:?}", budget(BudgetScope::Global));
    assert!(printed.starts_with("Ledger { earn: 100, reserve: "), "{printed}");
    assert!(printed.contains("slot_ms: 1000"), "{printed}");
}

#[test]
fn a_host_in_use_is_never_forgotten() {
    let b = budget(BudgetScope::PerHost);
    let t0 = Instant::now();
    let held = b.account(&url("http://busy.test/"), t0);
    for n in 0..(MAX_HOSTS * 2) {
        drop(b.account(&url(&format!("http://h{n}.test/")), t0));
    }
    assert!(Arc::ptr_eq(&held, &b.account(&url("http://busy.test/"), t0)));
}

/// A ledger with the default budget, pauses and throttling.
fn watching() -> Ledger {
    Ledger::new(Some(&RetryBudget::default()), 3, true, true).unwrap()
}

/// Pauses `host` for 100 ms from now; returns a time after it ended.
fn pause_over(b: &Ledger, host: &Url) -> Instant {
    let t0 = Instant::now();
    assert!(b.pause(host, Duration::from_millis(100), t0));
    t0 + Duration::from_secs(1)
}

#[test]
fn a_probe_turn_and_a_held_host_print_what_they_are() {
    let (b, host) = (watching(), url("http://paused.test/"));
    let later = pause_over(&b, &host);
    let Passage::Probe(turn) = b.gate(&host, || later, true) else {
        panic!("the pause is over: the call probes");
    };
    assert_eq!(format!("{turn:?}"), "Turn { settled: false, .. }");
    let held = b.handle(&host, later).expect("a paused host is in the table");
    assert_eq!(format!("{held:?}"), "HostHandle { .. }");
}

#[test]
fn without_a_budget_answers_alone_keep_no_host() {
    let b = Ledger::new(None, 3, true, true).unwrap();
    let t0 = Instant::now();
    b.earn_for(&url("http://calm.test/"), true, || t0);
    b.earn_for(&url("http://calm.test/"), false, || t0);
    assert_eq!(len(&b), 0, "no account to keep, and no rejection to watch");
}

#[test]
fn a_probe_dropped_unsettled_gives_its_turn_to_the_next_call() {
    let (b, host) = (watching(), url("http://paused.test/"));
    let later = pause_over(&b, &host);
    let Passage::Probe(turn) = b.gate(&host, || later, true) else {
        panic!("the pause is over: the call probes");
    };
    assert!(matches!(b.gate(&host, || later, true), Passage::Probing));
    // Cancelled, or cut by its deadline: no outcome to settle with.
    drop(turn);
    assert_eq!(b.probes.load(Ordering::Acquire), 0);
    let Passage::Probe(turn) = b.gate(&host, || later, true) else {
        panic!("the next call probes in its place");
    };
    b.settle(turn, None, None, later);
    assert!(matches!(b.gate(&host, || later, true), Passage::Open), "settled: open again");
}

#[test]
fn a_throttled_host_is_still_looked_at_after_a_silence() {
    // Whatever the budget's window, even one far shorter than the gaps
    // between calls.
    for window in [Duration::from_secs(10), Duration::from_millis(100)] {
        let budget = RetryBudget::default().with_window(window);
        let b = Ledger::new(Some(&budget), 3, true, true).unwrap();
        let (host, t0) = (url("http://down.test/"), Instant::now());
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Ten seconds of refusals at ten calls a second.
        for i in 0..100 {
            if matches!(b.gate(&host, || at(i * 100), true), Passage::Open) {
                b.observe(&host, Answer::Rejected, || at(i * 100));
            }
        }
        // Then 11.6 s of silence, and a burst of fifty.
        let burst = at(21_600);
        let kept = (0..50)
            .filter(|_| matches!(b.gate(&host, || burst, true), Passage::Throttled(_)))
            .count();
        assert!(kept >= 40, "{window:?}: {kept} of 50 kept back");
    }
}

#[test]
fn hosts_refused_once_and_left_alone_make_room_in_time() {
    let b = watching();
    let t0 = Instant::now();
    for n in 0..MAX_HOSTS * 2 {
        b.observe(&url(&format!("http://dead{n}.test/")), Answer::Rejected, || t0);
    }
    let later = t0 + Duration::from_millis(STALE_MS);
    for n in 0..200 {
        let host = b.record(&url(&format!("http://new{n}.test/")), b.slot_number(later));
        assert!(!b.hosts.is_overflow(&host), "new{n}.test found no room");
    }
}

#[test]
fn calls_answered_at_once_from_many_threads_write_nothing_shared_but_their_batches() {
    for scope in [BudgetScope::PerHost, BudgetScope::Global] {
        ten_thousand_calls_to_one_host_from_eight_threads(scope);
    }
}

fn ten_thousand_calls_to_one_host_from_eight_threads(scope: BudgetScope) {
    const THREADS: u64 = 8;
    const CALLS: u64 = 10_000;
    let budget = RetryBudget::default().with_scope(scope);
    let ledger = Ledger::new(Some(&budget), 3, true, true).unwrap();
    let host = url("http://busy.test/orders");
    let t0 = Instant::now();
    // Another host's pause has every call look its host up before it goes.
    assert!(ledger.pause(&url("http://paused.test/"), Duration::from_secs(3600), t0));
    let writes: u64 = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    let before = crate::stripes::shared_writes();
                    for _ in 0..CALLS / THREADS {
                        // What a call that ends on its first attempt does
                        // with the books: asks before it sends, and books
                        // its final answer, which the host accepted.
                        assert!(matches!(ledger.gate(&host, || t0, true), Passage::Open));
                        ledger.earn_for(&host, true, || t0);
                    }
                    crate::stripes::shared_writes() - before
                })
            })
            .collect();
        threads.into_iter().map(|thread| thread.join().unwrap()).sum()
    });
    // A thread books its batch of answers: the batch taken, the account's
    // earning, the throttle's tally, and its books every FOLD answers. The
    // host's first answers, before it is known busy, are counted in one
    // shared word: four a batch covers them.
    let batches = CALLS / u64::from(crate::stripes::BATCH);
    let most = 4 * batches;
    assert!(writes <= most, "{scope:?}: {writes} shared writes for {CALLS} calls (at most {most})");
    assert!(writes >= batches, "{scope:?}: {writes}: each booking is counted");
    // What the answers earned is there (a retry per batch, and the
    // reserve), less at most a batch held by each thread or left in the
    // shared word when the host got its stripes.
    let available = ledger.account(&host, t0).available(0);
    let earned = 5 + batches;
    assert!(
        (earned - THREADS - 1..=earned).contains(&available),
        "{scope:?}: {available} of {earned}"
    );
}

#[test]
fn a_busy_host_s_threads_each_book_at_most_one_retry_of_older_answers_into_the_window() {
    // The bound's `+ stripes` term: each thread's stripe may hold less
    // than a retry's worth of answers from long before, booked with its
    // next answer.
    const THREADS: usize = 8;
    let (ledger, host, t0) = busy_host(5);
    // Each thread counts nine answers, then, an hour later, a tenth.
    let t1 = t0 + Duration::from_secs(3600);
    let barrier = std::sync::Barrier::new(THREADS);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..9 {
                    ledger.earn_for(&host, true, || t0);
                }
                // All alive at once: distinct stripes.
                barrier.wait();
                ledger.earn_for(&host, true, || t1);
            });
        }
    });
    // An outage starts at t1: what the window allows.
    let account = ledger.account(&host, t1);
    let mut retries = 0;
    while ledger.try_spend(&account, t1).is_some() {
        retries += 1;
    }
    // Eight answers in the window earn 0.8 of a retry; the reserve holds
    // five. Each thread's batch of old answers adds at most one.
    let reserve = 5;
    assert!(retries > reserve, "the threads' batches were booked: {retries}");
    assert!(retries <= reserve + THREADS + 1, "{retries} retries");
}

#[test]
fn a_busy_host_s_batches_count_as_use_so_it_is_not_forgotten_first() {
    // A host counts as used when it books a retry's worth of answers or
    // fails, in a thread's batch too.
    let b = budget(BudgetScope::PerHost);
    let hosts = &b.hosts;
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let new = url("http://new.test/");
    let shard = fill_shard_of(&b, &new, at);
    // The oldest-inserted host answers 1,000 calls much later: 100 retries' worth booked.
    for _ in 0..1000 {
        b.earn_for(&shard[0], true, || at(50_000));
    }
    // Busy by now: these are booked by this thread's batches alone.
    assert!(hosts.with(&shard[0], |r| r.tallies.striped().is_some()).unwrap());
    for _ in 0..100 {
        b.earn_for(&shard[0], true, || at(60_000));
    }
    let used = hosts.with(&shard[0], |r| r.account.as_ref().unwrap().last_used());
    assert_eq!(used, Some(b.slot_number(at(60_000))), "a batch counts as use");
    drop(b.account(&new, at(100_000)));
    let kept = |u: &Url| hosts.with(u, |_| ()).is_some();
    assert!(kept(&shard[0]), "the busiest host was forgotten first (last used {used:?})");
}

#[test]
fn a_host_never_busy_holds_one_retry_of_older_answers_at_most() {
    // ratio 0.3: earn 300, per_retry 4; reserve 5 (5000).
    let b = Ledger::new(Some(&RetryBudget::default().with_ratio(0.3)), 3, false, false).unwrap();
    let h = url("http://quiet.test/");
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let acc = b.account(&h, at(0));
    // Three stale answers in the shared word (reserve full).
    for _ in 0..3 {
        b.earn_for(&h, true, || at(0));
    }
    // Four cycles: a retry from the reserve, four answers refill it, 200 left unbooked.
    for k in 1..=4u64 {
        let t = at(100 * k);
        assert!(b.try_spend(&acc, t).is_some());
        for _ in 0..4 {
            b.earn_for(&h, true, || t);
        }
    }
    // Four held answers (1,200 in the window), two retries: the reserve
    // down 800, three answers refill it, 100 more left unbooked: 900.
    let t = at(600);
    for _ in 0..4 {
        b.earn(&acc, t);
    }
    assert!(b.try_spend(&acc, t).is_some() && b.try_spend(&acc, t).is_some());
    for _ in 0..3 {
        b.earn_for(&h, true, || t);
    }
    // Three held answers and a retry: the reserve down 100.
    let t = at(700);
    for _ in 0..3 {
        b.earn(&acc, t);
    }
    assert!(b.try_spend(&acc, t).is_some());
    assert!(!b.hosts.with(&h, |r| r.tallies.striped().is_some()).unwrap(), "never busy");
    // An hour later: two answers, then a total outage.
    let t1 = at(3600);
    b.earn_for(&h, true, || t1);
    b.earn_for(&h, true, || t1);
    assert!(!b.hosts.with(&h, |r| r.tallies.striped().is_some()).unwrap(), "never busy");
    let mut retries = 0;
    while b.try_spend(&acc, t1).is_some() {
        retries += 1;
    }
    // Documented: ratio × answers in window + reserve + 1 + s, s = 0.
    let bound = 0.3 * 2.0 + 5.0 + 1.0;
    assert!(f64::from(retries) <= bound, "{retries} retries > {bound}");
}

/// A busy host's accepted answers from `threads` threads, then only
/// rejections: the rejections before the first call kept back, and what
/// the books said then.
fn first_refusal(threads: usize) -> (u32, u32, u32) {
    let b = Ledger::new(None, 3, false, true).unwrap();
    let h = url("http://throttled.test/");
    let t0 = Instant::now();
    let ms = |m: u64| t0 + Duration::from_millis(m);
    b.observe(&h, Answer::Rejected, || ms(0));
    // Calm again after 11 s; two folds of its tally in one slot: busy.
    for _ in 0..=2 * crate::throttle::FOLD {
        b.observe(&h, Answer::Accepted, || ms(11_000));
    }
    assert!(b.hosts.with(&h, |r| r.tallies.striped().is_some()).unwrap());
    assert!(!b.hosts.with(&h, |r| r.throttle.watched()).unwrap());
    // 72 more accepted answers, from `threads` threads.
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..72 / threads {
                    b.observe(&h, Answer::Accepted, || ms(11_500));
                }
                barrier.wait();
            });
        }
    });
    // Overload: every answer a rejection, a call asking every 10 ms.
    for i in 0..10_000u64 {
        let now = ms(12_000 + 10 * i);
        if let Passage::Throttled(t) = b.gate(&h, || now, true) {
            return (i as u32, t.accepted(), t.answered());
        }
        b.observe(&h, Answer::Rejected, || now);
    }
    panic!("never throttled");
}

#[test]
fn the_throttle_judges_on_every_answer_whatever_the_threads_that_counted_them() {
    let one = first_refusal(1);
    let eight = first_refusal(8);
    // A rejection books what every thread counted first.
    assert_eq!(one, eight, "(rejections before the first refusal, accepted, answered)");
}

/// A per-host ledger with throttling and a reserve of `reserve`, and a
/// host made busy at the time returned: a retry's worth of its answers
/// booked twice within one slot.
fn busy_host(reserve: u32) -> (Ledger, Url, Instant) {
    let budget = RetryBudget::default().with_reserve(reserve);
    let ledger = Ledger::new(Some(&budget), 3, true, true).unwrap();
    let host = url("http://busy.test/");
    let t0 = Instant::now();
    for _ in 0..30 {
        ledger.earn_for(&host, true, || t0);
    }
    assert!(ledger.hosts.with(&host, |r| r.tallies.striped().is_some()).unwrap(), "busy");
    (ledger, host, t0)
}

/// Accepted answers the host's throttle holds, in its books and tallied.
fn accepted(ledger: &Ledger, host: &Url) -> f64 {
    let (books, tallied) = ledger.hosts.with(host, |r| r.throttle.accepted()).unwrap();
    books + f64::from(tallied)
}

#[test]
fn a_busy_host_refills_its_reserve_answer_by_answer() {
    let (ledger, host, t0) = busy_host(1);
    // An hour on, the window's earnings are gone: a retry takes the reserve.
    let t1 = t0 + Duration::from_secs(3600);
    let account = ledger.account(&host, t1);
    assert!(ledger.try_spend(&account, t1).is_some());
    assert!(ledger.try_spend(&account, t1).is_none(), "the reserve is spent");
    // Ten answers from two threads, five each: fewer than a thread's batch.
    // Both alive at once, so that they count into stripes of their own.
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..5 {
                    ledger.earn_for(&host, true, || t1);
                }
                barrier.wait();
            });
        }
    });
    assert_eq!(account.available(ledger.slot_number(t1)), 1, "each answer refilled a tenth");
}

#[test]
fn a_busy_host_s_accepted_answers_reach_its_throttle_and_no_others() {
    let (ledger, host, t0) = busy_host(5);
    let before = accepted(&ledger, &host);
    for _ in 0..50 {
        ledger.earn_for(&host, false, || t0);
    }
    assert_eq!(accepted(&ledger, &host), before, "answers not accepted are not tallied");
    for _ in 0..50 {
        ledger.earn_for(&host, true, || t0);
    }
    assert_eq!(accepted(&ledger, &host), before + 50.0, "five batches of ten");
}

#[test]
fn a_rejection_on_a_held_host_takes_in_what_the_threads_counted() {
    let (ledger, host, t0) = busy_host(5);
    let before = accepted(&ledger, &host);
    for _ in 0..5 {
        ledger.earn_for(&host, true, || t0);
    }
    assert_eq!(accepted(&ledger, &host), before, "five in this thread's stripe");
    let held = ledger.handle(&host, t0).expect("a known host");
    ledger.observe_held(&held, Answer::Rejected, t0);
    assert_eq!(accepted(&ledger, &host), before + 5.0);
    assert!(ledger.hosts.with(&host, |r| r.throttle.watched()).unwrap(), "the rejection booked");
}

#[test]
fn a_watched_busy_host_books_each_accepted_answer_at_once() {
    let (ledger, host, t0) = busy_host(5);
    ledger.observe(&host, Answer::Rejected, || t0);
    let (books, tallied) = ledger.hosts.with(&host, |r| r.throttle.accepted()).unwrap();
    ledger.earn_for(&host, true, || t0 + Duration::from_millis(1));
    let (after, tallied_after) = ledger.hosts.with(&host, |r| r.throttle.accepted()).unwrap();
    assert!(after > books + 0.99, "in the books: {books} then {after}");
    assert_eq!(tallied_after, tallied);
}

#[test]
fn a_host_answering_now_and_then_is_never_busy() {
    // One answer every ten seconds, for hours: a retry's worth booked every
    // ten, the tally folded every 256, and now and then one answer that
    // does both; never a word filled twice in one slot. The host is first
    // known through a retry's account, or through its answer, with one
    // answer not accepted among them.
    for known_first in [true, false] {
        let ledger = Ledger::new(Some(&RetryBudget::default()), 3, false, true).unwrap();
        let host = url("http://quiet.test/");
        let t0 = Instant::now();
        if known_first {
            drop(ledger.account(&host, t0));
        }
        for n in 1..=3000u64 {
            let at = t0 + Duration::from_secs(10 * n);
            ledger.earn_for(&host, known_first || n != 2, || at);
            let busy = ledger.hosts.with(&host, |r| r.tallies.striped().is_some());
            assert_eq!(busy, Some(false), "busy at answer {n} (known first: {known_first})");
        }
    }
}
