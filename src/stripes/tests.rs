use super::*;

/// Counts `n` answers that earn and are accepted, from the thread in
/// `slot`; returns the batches handed back.
fn count(tallies: &Tallies, slot: usize, n: u32) -> Vec<Batch> {
    (0..n).filter_map(|_| tallies.count_at(slot, true, true, BATCH)).collect()
}

#[test]
fn a_batch_is_handed_back_every_tenth_answer_of_a_thread() {
    let tallies = Tallies::default();
    assert_eq!(count(&tallies, 0, BATCH - 1), []);
    let full = Batch { earned: BATCH, accepted: BATCH };
    assert_eq!(count(&tallies, 0, 1), [full]);
    assert_eq!(count(&tallies, 0, 2 * BATCH), [full, full]);
}

#[test]
fn earned_and_accepted_answers_are_counted_apart() {
    let tallies = Tallies::default();
    for n in 1..BATCH {
        assert_eq!(tallies.count_at(0, true, n % 3 == 0, BATCH), None);
    }
    assert_eq!(tallies.count_at(0, false, true, BATCH), None, "nine earned, four accepted");
    assert_eq!(tallies.count_at(0, true, false, BATCH), Some(Batch { earned: BATCH, accepted: 4 }));
    for _ in 1..BATCH {
        assert_eq!(tallies.count_at(0, false, true, BATCH), None);
    }
    assert_eq!(
        tallies.count_at(0, false, true, BATCH),
        Some(Batch { earned: 0, accepted: BATCH }),
        "a batch is full when either count is"
    );
}

#[test]
fn a_host_counts_in_one_word_until_its_first_batch_then_per_thread() {
    let tallies = Tallies::default();
    // Before: two threads' answers make up one batch together.
    assert_eq!(count(&tallies, 0, BATCH / 2), []);
    assert!(!tallies.striped());
    assert_eq!(count(&tallies, 1, BATCH / 2).len(), 1);
    assert!(tallies.striped(), "the first batch gives the host its stripes");
    // After: each thread's own.
    assert_eq!(count(&tallies, 0, BATCH - 1), []);
    assert_eq!(count(&tallies, 1, BATCH - 1), [], "not the other thread's nine");
    assert_eq!(count(&tallies, 1, 1).len(), 1);
    assert_eq!(count(&tallies, 0, 1).len(), 1);
}

#[test]
fn a_busy_host_has_a_power_of_two_of_stripes_within_the_bounds() {
    let n = stripes();
    assert!(n.is_power_of_two() && (MIN_STRIPES..=MAX_STRIPES).contains(&n), "{n}");
    let tallies = Tallies::default();
    count(&tallies, 0, BATCH);
    assert_eq!(tallies.stripes.get().map(|s| s.len()), Some(n));
}

#[test]
fn threads_take_the_lowest_free_slot() {
    let mut slots = Slots::default();
    assert_eq!([slots.take(), slots.take(), slots.take()], [0, 1, 2]);
    slots.give_back(1);
    slots.give_back(0);
    assert_eq!([slots.take(), slots.take(), slots.take()], [0, 1, 3]);
}

#[test]
fn threads_alive_at_once_hold_distinct_slots() {
    let barrier = std::sync::Barrier::new(4);
    let held: Vec<usize> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let slot = slot();
                    barrier.wait();
                    slot
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut distinct = held.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), held.len(), "{held:?}");
}

#[test]
fn answers_that_earn_are_booked_a_retry_s_worth_at_a_time() {
    let tallies = Tallies::default();
    // Two answers a retry (a ratio of a half).
    assert_eq!(tallies.count_at(0, true, false, 2), None);
    assert_eq!(tallies.count_at(0, true, false, 2), Some(Batch { earned: 2, accepted: 0 }));
    // Accepted answers alone wait for a whole batch, whatever earns.
    for _ in 1..BATCH {
        assert_eq!(tallies.count_at(0, false, true, 2), None);
    }
    assert_eq!(tallies.count_at(0, false, true, 2), Some(Batch { earned: 0, accepted: BATCH }));
}
