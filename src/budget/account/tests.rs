//! The account's arithmetic: earning, spending, refunds and the window.

use std::sync::Arc;

use super::*;

/// A tenth of a retry per answer, a reserve of one retry.
const EARN: u64 = 100;
const CAP: u64 = 1000;

#[test]
fn unbooked_answers_are_booked_a_retry_at_a_time() {
    let a = Account::new(0);
    // The reserve refills first, at once, whatever the time.
    for n in 1..10 {
        assert_eq!(a.earn_unbooked(EARN, CAP), None, "answer {n}: into the reserve");
    }
    assert_eq!(a.earn_unbooked(EARN, CAP), None, "the tenth fills the reserve");
    assert!(a.try_spend_ok(0), "the reserve holds a retry");
    assert_eq!(a.earn_unbooked(EARN, CAP), None, "a tenth into the emptied reserve");
    // With the reserve full again, answers wait unbooked; the one that
    // makes up a retry hands it over.
    for _ in 0..9 {
        a.earn_unbooked(EARN, CAP);
    }
    assert_eq!(a.available(5), 1, "the reserve, refilled");
    for n in 1..10 {
        assert_eq!(a.earn_unbooked(EARN, CAP), None, "answer {n}: unbooked");
    }
    assert_eq!(a.available(5), 1, "nothing booked yet");
    let batch = a.earn_unbooked(EARN, CAP).expect("ten answers, one retry");
    assert_eq!(batch, RETRY_COST);
    a.book(5, batch);
    assert_eq!(a.available(5), 2);
    assert_eq!(a.last_used(), 5, "booking records the use");
    // Booked at slot 5, it lapses a window later, as any earning.
    assert_eq!(a.available(5 + SLOTS), 1);
}

#[test]
fn concurrent_unbooked_answers_are_all_booked_once() {
    let a = Arc::new(Account::new(0));
    // Fill the reserve, so every later answer goes to the window.
    while a.earn_unbooked(EARN, CAP).is_none() && a.available(0) == 0 {}
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    if let Some(batch) = a.earn_unbooked(EARN, CAP) {
                        a.book(0, batch);
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    // 4,000 answers: 400 retries earned, all booked but less than one,
    // and the reserve's one.
    let rest = a.unbooked.load(Ordering::Relaxed);
    assert!(rest < RETRY_COST, "{rest} left unbooked");
    assert_eq!(a.available(0), 1 + (400 * RETRY_COST - rest) / RETRY_COST);
}

#[test]
fn a_fresh_account_holds_its_reserve_and_no_more() {
    let a = Account::new(CAP);
    assert!(a.try_spend_ok(0));
    assert!(!a.try_spend_ok(0), "the reserve is spent and nothing was earned");
}

#[test]
fn ten_final_answers_pay_for_one_retry() {
    let a = Account::new(0);
    for _ in 0..9 {
        a.earn(0, EARN, 0);
    }
    assert!(!a.try_spend_ok(0), "nine tenths are not a retry");
    a.earn(0, EARN, 0);
    assert!(a.try_spend_ok(0));
    assert!(!a.try_spend_ok(0));
}

#[test]
fn earnings_lapse_after_the_window_and_grant_nothing_back() {
    let a = Account::new(0);
    for _ in 0..30 {
        a.earn(0, EARN, 0);
    }
    assert_eq!(a.available(9), 3);
    assert_eq!(a.available(10), 0, "a window later the earnings have lapsed");
    // Retries spent early do not come back when they leave the window:
    // no burst a window after an outage began.
    let b = Account::new(0);
    for _ in 0..30 {
        b.earn(0, EARN, 0);
    }
    while b.try_spend_ok(5) {}
    for later in 6..40 {
        assert!(!b.try_spend_ok(later), "slot {later}");
    }
}

#[test]
fn the_reserve_is_used_last_and_refilled_only_by_answers() {
    let a = Account::new(CAP);
    for _ in 0..10 {
        a.earn(0, EARN, CAP);
    }
    assert!(a.try_spend_ok(0), "paid from the window");
    assert!(a.try_spend_ok(0), "paid from the reserve");
    assert!(!a.try_spend_ok(0));
    // Time alone refills nothing.
    assert!(!a.try_spend_ok(1000));
    // Answers do: the reserve first, up to its cap, then the window.
    for _ in 0..25 {
        a.earn(2000, EARN, CAP);
    }
    assert_eq!(a.reserve.load(Ordering::Relaxed), CAP);
    assert_eq!(a.available(2000), 2, "1 in the reserve, 1.5 in the window");
    // Each answer earns once: a full reserve takes nothing more.
    let b = Account::new(CAP);
    b.earn(0, EARN, CAP);
    assert_eq!((b.reserve.load(Ordering::Relaxed), b.totals(0).0), (CAP, EARN));
    // One that tops the reserve up puts only the rest in the window.
    let c = Account::new(CAP);
    assert!(c.try_spend_ok(0));
    c.reserve.store(CAP - 30, Ordering::Relaxed);
    c.earn(0, EARN, CAP);
    assert_eq!((c.reserve.load(Ordering::Relaxed), c.totals(0).0), (CAP, 70));
}

#[test]
fn a_refund_returns_the_cost_where_it_was_taken_from() {
    let a = Account::new(CAP);
    for _ in 0..5 {
        a.earn(0, EARN, CAP);
    }
    // Half from the window's earnings, half from the reserve.
    let paid = a.try_spend(0).expect("half earned, half on credit");
    assert_eq!(paid, Paid { from_reserve: 500 });
    assert_eq!(a.available(0), 0);
    a.refund(1, paid, CAP);
    assert_eq!(a.reserve.load(Ordering::Relaxed), CAP);
    assert_eq!(a.totals(1), (5 * EARN + 500, 500), "the window's half is earned again");
    // A refund never fills the reserve past its cap.
    let full = Account::new(CAP);
    full.refund(0, Paid { from_reserve: RETRY_COST }, CAP);
    assert_eq!(full.reserve.load(Ordering::Relaxed), CAP);
}

#[test]
fn a_clock_that_steps_back_does_not_move_the_account_back() {
    let a = Account::new(0);
    for _ in 0..10 {
        a.earn(50, EARN, 0);
    }
    // The clock jumps back 40 slots: still slot 50 for the account,
    // so the earnings are neither lost nor counted twice.
    assert!(a.try_spend_ok(10));
    assert!(!a.try_spend_ok(10));
    for _ in 0..10 {
        a.earn(10, EARN, 0);
    }
    assert_eq!(a.available(50), 1);
    assert!(a.try_spend_ok(3));
    assert_eq!(a.available(59), 0);
}

#[test]
fn a_host_is_calm_a_window_after_its_last_failure() {
    let a = Account::new(CAP);
    assert!(a.is_calm(0));
    a.note_failure(20);
    assert!(!a.is_calm(20));
    assert!(!a.is_calm(29));
    assert!(a.is_calm(30));
    assert!(a.try_spend_ok(40));
    assert!(!a.is_calm(45), "a retry is trouble too");
}

#[test]
fn concurrent_use_keeps_the_books_exact() {
    let a = Arc::new(Account::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut granted = 0u64;
                for _ in 0..1000 {
                    a.earn(3, 500, 0);
                    granted += u64::from(a.try_spend_ok(3));
                }
                granted
            })
        })
        .collect();
    let granted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // 8000 answers at half a retry each pay for 4000 retries: every one
    // is either granted or still available, none lost or granted twice.
    assert!(granted > 3000, "{granted}");
    assert_eq!(granted + a.available(3), 4000);
}
