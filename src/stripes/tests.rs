use super::*;

/// Counts `n` answers that earn and are accepted, from the thread in
/// `slot`; returns what the batches handed back held.
fn count(tallies: &Tallies, slot: usize, n: u32) -> Vec<(u32, u32)> {
    (0..n).filter_map(|_| tallies.count_at(slot, true, true, BATCH)).map(held).collect()
}

fn held(batch: Batch) -> (u32, u32) {
    (batch.earned, batch.accepted)
}

/// A host whose shared word filled twice in one slot: striped.
fn busy() -> Tallies {
    let tallies = Tallies::default();
    for _ in 0..2 {
        let batch = (0..BATCH).find_map(|_| tallies.count_at(0, true, true, BATCH)).unwrap();
        assert!(batch.shared);
        tallies.booked(batch, 7);
    }
    assert!(tallies.striped());
    tallies
}

#[test]
fn a_batch_is_handed_back_every_tenth_answer_of_a_thread() {
    for tallies in [Tallies::default(), busy()] {
        assert_eq!(count(&tallies, 0, BATCH - 1), []);
        assert_eq!(count(&tallies, 0, 1), [(BATCH, BATCH)]);
        assert_eq!(count(&tallies, 0, 2 * BATCH), [(BATCH, BATCH); 2]);
    }
}

#[test]
fn earned_and_accepted_answers_are_counted_apart() {
    let tallies = Tallies::default();
    for n in 1..BATCH {
        assert_eq!(tallies.count_at(0, true, n % 3 == 0, BATCH), None);
    }
    assert_eq!(tallies.count_at(0, false, true, BATCH), None, "nine earned, four accepted");
    assert_eq!(tallies.count_at(0, true, false, BATCH).map(held), Some((BATCH, 4)));
    for _ in 1..BATCH {
        assert_eq!(tallies.count_at(0, false, true, BATCH), None);
    }
    assert_eq!(
        tallies.count_at(0, false, true, BATCH).map(held),
        Some((0, BATCH)),
        "a batch is full when either count is"
    );
}

#[test]
fn answers_that_earn_are_booked_a_retry_s_worth_at_a_time() {
    let tallies = Tallies::default();
    // Two answers a retry (a ratio of a half).
    assert_eq!(tallies.count_at(0, true, false, 2), None);
    assert_eq!(tallies.count_at(0, true, false, 2).map(held), Some((2, 0)));
    // Accepted answers alone wait for a whole batch, whatever earns.
    for _ in 1..BATCH {
        assert_eq!(tallies.count_at(0, false, true, 2), None);
    }
    assert_eq!(tallies.count_at(0, false, true, 2).map(held), Some((0, BATCH)));
}

#[test]
fn a_host_filled_once_a_slot_or_less_counts_in_one_word() {
    let tallies = Tallies::default();
    for slot in 0..5 {
        // Two threads' answers make up one batch together.
        assert_eq!(count(&tallies, 0, BATCH / 2), []);
        let batch = (0..BATCH / 2).find_map(|_| tallies.count_at(1, true, true, BATCH));
        let batch = batch.expect("the shared word filled");
        assert!(batch.shared);
        tallies.booked(batch, slot);
    }
    assert!(!tallies.striped(), "one batch a slot: not busy");
    assert!(tallies.stripes.get().is_none());
}

#[test]
fn a_busy_host_counts_per_thread() {
    let tallies = busy();
    assert_eq!(count(&tallies, 0, BATCH - 1), []);
    assert_eq!(count(&tallies, 1, BATCH - 1), [], "not the other thread's nine");
    let batch = tallies.count_at(1, true, true, BATCH).expect("thread 1's tenth");
    assert!(!batch.shared);
    assert_eq!(count(&tallies, 0, 1), [(BATCH, BATCH)]);
}

#[test]
fn a_busy_host_has_a_power_of_two_of_stripes_within_the_bounds() {
    let n = stripes();
    assert!(n.is_power_of_two() && (MIN_STRIPES..=MAX_STRIPES).contains(&n), "{n}");
    assert_eq!(busy().stripes.get().map(|s| s.len()), Some(n));
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
