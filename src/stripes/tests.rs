use super::*;

/// Counts `n` answers that earn and are accepted, from the thread in
/// `slot`; returns what the batches handed back held.
fn count(stripes: &Stripes, slot: usize, n: u32) -> Vec<(u32, u32)> {
    (0..n).filter_map(|_| stripes.count_at(slot, true, true, BATCH)).map(held).collect()
}

fn held(batch: Batch) -> (u32, u32) {
    (batch.earned, batch.accepted)
}

/// A host whose shared words filled twice in one slot.
fn busy() -> Tallies {
    let tallies = Tallies::default();
    tallies.filled(Word::Earnings, 7);
    tallies.filled(Word::Earnings, 7);
    tallies
}

#[test]
fn a_host_whose_words_fill_twice_in_one_slot_is_busy() {
    let tallies = Tallies::default();
    for slot in 0..5 {
        tallies.filled(Word::Earnings, slot);
        tallies.filled(Word::Tally, slot);
    }
    assert!(tallies.striped().is_none(), "each word once a slot: not busy");
    tallies.filled(Word::Tally, 4);
    assert!(tallies.striped().is_some(), "the tally twice in slot 4");
    assert_eq!(tallies.striped().map(Stripes::len), Some(stripes()));
}

#[test]
fn a_batch_is_handed_back_every_tenth_answer_of_a_thread() {
    let tallies = busy();
    let stripes = tallies.striped().unwrap();
    assert_eq!(count(stripes, 0, BATCH - 1), []);
    assert_eq!(count(stripes, 0, 1), [(BATCH, BATCH)]);
    assert_eq!(count(stripes, 0, 2 * BATCH), [(BATCH, BATCH); 2]);
}

#[test]
fn each_thread_counts_its_own() {
    let tallies = busy();
    let stripes = tallies.striped().unwrap();
    assert_eq!(count(stripes, 0, BATCH - 1), []);
    assert_eq!(count(stripes, 1, BATCH - 1), [], "not the other thread's nine");
    assert_eq!(count(stripes, 1, 1), [(BATCH, BATCH)]);
    assert_eq!(count(stripes, 0, 1), [(BATCH, BATCH)]);
}

#[test]
fn earned_and_accepted_answers_are_counted_apart() {
    let tallies = busy();
    let stripes = tallies.striped().unwrap();
    for n in 1..BATCH {
        assert_eq!(stripes.count_at(0, true, n % 3 == 0, BATCH), None);
    }
    assert_eq!(stripes.count_at(0, false, true, BATCH), None, "nine earned, four accepted");
    assert_eq!(stripes.count_at(0, true, false, BATCH).map(held), Some((BATCH, 4)));
    for _ in 1..BATCH {
        assert_eq!(stripes.count_at(0, false, true, BATCH), None);
    }
    assert_eq!(
        stripes.count_at(0, false, true, BATCH).map(held),
        Some((0, BATCH)),
        "a batch is full when either count is"
    );
}

#[test]
fn answers_that_earn_are_booked_a_retry_s_worth_at_a_time() {
    let tallies = busy();
    let stripes = tallies.striped().unwrap();
    // Two answers a retry (a ratio of a half).
    assert_eq!(stripes.count_at(0, true, false, 2), None);
    assert_eq!(stripes.count_at(0, true, false, 2).map(held), Some((2, 0)));
    // Accepted answers alone wait for a whole batch, whatever earns.
    for _ in 1..BATCH {
        assert_eq!(stripes.count_at(0, false, true, 2), None);
    }
    assert_eq!(stripes.count_at(0, false, true, 2).map(held), Some((0, BATCH)));
}

#[test]
fn a_sweep_takes_what_every_thread_has_not_booked() {
    let tallies = busy();
    let stripes = tallies.striped().unwrap();
    count(stripes, 0, 3);
    count(stripes, 1, BATCH + 4);
    assert_eq!(held(stripes.sweep()), (7, 7));
    assert!(stripes.sweep().is_empty(), "nothing twice");
    assert_eq!(count(stripes, 1, BATCH - 1), [], "the threads start afresh");
}

#[test]
fn a_busy_host_has_a_power_of_two_of_stripes_within_the_bounds() {
    let n = stripes();
    assert!(n.is_power_of_two() && (MIN_STRIPES..=MAX_STRIPES).contains(&n), "{n}");
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
fn an_ended_thread_s_slot_is_given_back() {
    static MINE: Mutex<Slots> = Mutex::new(Slots { next: 0, free: BinaryHeap::new() });
    let first = Slot::take(&MINE);
    let second = Slot::take(&MINE);
    assert_eq!((first.at, second.at), (0, 1));
    drop(first);
    assert_eq!(Slot::take(&MINE).at, 0, "the slot of the one that ended");
}

#[test]
fn threads_past_the_stripes_share_them() {
    let tallies = busy();
    let stripes = tallies.striped().unwrap();
    let n = stripes.len();
    // Slots n and n + 1 count with slots 0 and 1.
    assert_eq!(count(stripes, n, BATCH - 1), []);
    assert_eq!(count(stripes, 0, 1), [(BATCH, BATCH)], "slot n shares slot 0's stripe");
    assert_eq!(count(stripes, n + 1, BATCH - 1), []);
    assert_eq!(count(stripes, 1, 1), [(BATCH, BATCH)], "slot n + 1 shares slot 1's stripe");
}
