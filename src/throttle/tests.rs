use super::*;

/// A small deterministic generator of uniform draws.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What a stretch of calls came to: calls made, first attempts sent, and
/// how many the server accepted.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    calls: u32,
    sent: u32,
    accepted: u32,
}

/// Calls at `per_sec` a second from `from` for `secs` seconds, each sent
/// once if the books let it go and answered by `server(ms, n)`, `n`
/// counting the sent attempts.
fn drive(
    books: &mut Books,
    from: u64,
    secs: u64,
    per_sec: u64,
    mut server: impl FnMut(u64, u32) -> Answer,
) -> Run {
    drive_every(books, (from, from + secs * 1000), 1000 / per_sec, &mut server)
}

fn accept(_: u64, _: u32) -> Answer {
    Answer::Accepted
}

fn reject(_: u64, _: u32) -> Answer {
    Answer::Rejected
}

/// One answer in two rejected, at random.
fn flaky(seed: u64) -> impl FnMut(u64, u32) -> Answer {
    let mut draws = Draws(seed);
    move |_, _| if draws.next() < 0.5 { Answer::Rejected } else { Answer::Accepted }
}

#[test]
fn a_fresh_hosts_first_rejections_do_not_throttle_it() {
    // A burst whose failing calls are answered first: a dozen rejections
    // in an instant leave the share whole, as ten accepted answers are
    // presumed; without them, the share would already be falling.
    let mut books = Books::default();
    let mut bare = Books { answered: 0.0, accepted: 0.0, ..Books::default() };
    for _ in 0..12 {
        books.observe(0, Answer::Rejected);
        bare.observe(0, Answer::Rejected);
    }
    assert_eq!(books.share(0), 1.0);
    assert!(bare.share(0) < 1.0);
}

#[test]
fn a_healthy_host_gets_every_call() {
    let mut books = Books::default();
    let run = drive(&mut books, 0, 60, 10, accept);
    assert_eq!(run.sent, run.calls);
    assert_eq!(books.share(60_000), 1.0);
    assert!(books.calm(60_000));
}

#[test]
fn an_outage_is_shed_within_ten_seconds_and_held_at_the_floor() {
    let mut books = Books::default();
    drive(&mut books, 0, 60, 10, accept);
    let first = drive(&mut books, 60_000, 10, 10, reject);
    let next = drive(&mut books, 70_000, 10, 10, reject);
    let after = drive(&mut books, 80_000, 100, 10, reject);
    assert!(f64::from(next.sent) < 0.5 * f64::from(next.calls), "{first:?} then {next:?}");
    assert!(f64::from(after.sent) <= 0.10 * f64::from(after.calls), "{after:?}");
    assert!(after.sent > 0, "probes still go");
    assert_eq!(books.share(180_000), FLOOR);
}

#[test]
fn a_host_that_answers_again_gets_its_calls_back_at_once() {
    let mut books = Books::default();
    drive(&mut books, 0, 60, 10, accept);
    drive(&mut books, 60_000, 120, 10, reject);
    let back = drive(&mut books, 180_000, 5, 10, accept);
    let later = drive(&mut books, 185_000, 60, 10, accept);
    // A call goes within 2.5 s (a share of a twentieth at ten a second, or
    // the probe), and its answer lets every call through.
    assert!(back.sent + 25 >= back.calls, "{back:?}");
    assert_eq!(later.sent, later.calls);
    assert_eq!(books.share(245_000), 1.0);
}

#[test]
fn a_host_failing_half_its_answers_independently_of_load_is_not_throttled() {
    for per_sec in [1, 10, 100] {
        let mut books = Books::default();
        let run = drive(&mut books, 0, 600, per_sec, flaky(5));
        let kept = f64::from(run.sent) / f64::from(run.calls);
        assert!(kept >= 0.99, "{per_sec}/s: {run:?}");
    }
}

#[test]
fn an_overloaded_host_is_sent_about_accepts_worth_times_what_it_takes() {
    // The server takes one call a second from ten offered: a token bucket
    // holding one second's worth.
    let mut books = Books::default();
    drive(&mut books, 0, 30, 10, accept);
    let mut server = bucket(1.0, 1.0, 30_000);
    drive(&mut books, 30_000, 20, 10, &mut server);
    let settled = drive(&mut books, 50_000, 120, 10, &mut server);
    let ratio = f64::from(settled.sent) / f64::from(settled.accepted);
    assert!((2.0..=3.2).contains(&ratio), "{settled:?}: {ratio}");
    // A one-token server loses the seconds in which no call came; most
    // seconds had one.
    assert!(settled.accepted >= 80, "{settled:?}");
}

#[test]
fn a_quiet_caller_is_never_throttled() {
    let mut books = Books::default();
    // One call every two seconds, each rejected, for ten minutes.
    for i in 0..300 {
        let now = i * 2000;
        assert!(books.ask(now), "call {i}");
        books.observe(now, Answer::Rejected);
    }
    assert!(books.share(600_000) < 1.0);
}

#[test]
fn a_call_goes_when_none_went_for_a_probes_time() {
    let mut books = Books::default();
    drive(&mut books, 0, 60, 10, reject);
    assert_eq!(books.share(60_000), FLOOR);
    let last = books.last_sent;
    // Calls every 500 ms, with no credit left: the floor's share alone
    // would let the twentieth through, 10 s on; the probe's rule lets one
    // through each 2.5 s.
    books.credit = 0.0;
    let mut goes = Vec::new();
    for i in 1..=12 {
        let now = last + i * 500;
        if books.ask(now) {
            goes.push(now - last);
        }
    }
    assert_eq!(goes, [PROBE_MS, 2 * PROBE_MS]);
}

#[test]
fn rejections_in_a_row_mean_down_only_once_they_span_the_streak_time() {
    let mut books = Books::default();
    books.observe(1_000, Answer::Accepted);
    for i in 0..STREAK {
        books.observe(1_000 + u64::from(i), Answer::Rejected);
    }
    assert!(!books.down(1_000 + u64::from(STREAK)));
    assert!(books.down(1_000 + STREAK_MS));
    // Each rejection past the streak halves the share.
    let before = books.share(1_000 + STREAK_MS);
    books.observe(1_000 + STREAK_MS, Answer::Rejected);
    assert_eq!(books.share(1_000 + STREAK_MS), (before / 2.0).max(FLOOR));
}

#[test]
fn the_first_answer_after_a_host_was_down_forgets_the_outage() {
    let mut books = Books::default();
    for i in 0..40 {
        books.observe(i * 500, Answer::Rejected);
    }
    assert!(books.down(20_000));
    books.observe(20_000, Answer::Accepted);
    assert_eq!(books.rejections.length, 0);
    assert_eq!((books.answered, books.accepted), (1.0, 1.0));
    assert_eq!(books.share(20_000), 1.0);
}

#[test]
fn time_that_goes_back_is_taken_as_the_last_time() {
    let mut books = Books::default();
    books.observe(10_000, Answer::Rejected);
    let before = books;
    books.advance(5_000);
    assert_eq!(books, before);
    assert!(books.ask(5_000) || books.share(5_000) < 1.0);
}

#[test]
fn the_window_holds_about_its_samples_at_every_rate() {
    // 100 calls over the calls' time constant of 10 s: 10 a second.
    let mut books = Books { calls: 100.0, ..Books::default() };
    assert_eq!(books.tau(), MIN_TAU_MS);
    books.calls = 20.0;
    assert_eq!(books.tau(), SAMPLES * 1000.0 / 2.0);
    books.calls = 1.0;
    assert_eq!(books.tau(), MAX_TAU_MS);
    books.calls = 0.0;
    assert_eq!(books.tau(), MAX_TAU_MS);
}

#[test]
fn a_calm_host_tallies_without_the_books_and_folds_every_so_often() {
    let throttle = Throttle::default();
    for _ in 1..FOLD {
        assert!(!throttle.tally(1));
    }
    assert!(throttle.tally(1), "the books are brought up to date every FOLD answers");
    throttle.fold(1_000);
    // Spread over the second since the books began, each counts as decayed
    // by the average over it.
    let spread = CALLS_TAU_MS / 1_000.0 * (1.0 - (-1_000.0 / CALLS_TAU_MS).exp());
    assert_eq!(throttle.books().calls, f64::from(FOLD) * spread);
    assert!(throttle.ask(1_000).is_ok());
    assert_eq!(
        throttle.books().calls,
        f64::from(FOLD) * spread,
        "a calm host's asks are not booked"
    );
}

#[test]
fn a_rejection_has_the_host_watched_until_it_is_calm_again() {
    let throttle = Throttle::default();
    assert!(throttle.observe(0, Answer::Rejected));
    assert!(throttle.tally(1), "a batch that meets a watched host is folded at once");
    assert!(throttle.observe(1_000, Answer::Accepted));
    assert!(!throttle.idle(2_000));
    assert!(throttle.ask(20_000).is_ok());
    assert!(throttle.idle(20_000), "calm ten seconds after its last rejection");
}

#[test]
fn a_watched_host_left_alone_for_a_while_may_be_forgotten() {
    let throttle = Throttle::default();
    assert!(throttle.observe(1_000, Answer::Rejected));
    assert!(!throttle.idle(1_000 + STALE_MS - 1), "watched, and the news is fresh");
    assert!(throttle.idle(1_000 + STALE_MS), "watched, but nothing came for a while");
    assert!(throttle.watched(), "until it is next asked");
}

#[test]
fn an_answer_after_a_silence_weighs_as_more_than_one() {
    // Ten rejections 100 ms apart, then one more: 100 ms after the last it
    // moves the share as one answer does; 1 s after, as ten; 5 s after, as
    // ten still (the weight is capped). No prior: only rejections.
    let mut books = Books { answered: 0.0, accepted: 0.0, ..Books::default() };
    for i in 0..10 {
        books.observe(i * 100, Answer::Rejected);
    }
    let step = |books: &mut Books, at: u64| {
        let before = books.share;
        books.observe(at, Answer::Rejected);
        (books.share / before).ln()
    };
    let after_100ms = step(&mut books.clone(), 1_000);
    let after_1s = step(&mut books.clone(), 1_900);
    let after_5s = step(&mut books.clone(), 5_900);
    // Every answer was a rejection: the shortfall is whole.
    let single = -DOWN_GAIN;
    assert!((after_100ms - single).abs() < 1e-9, "{after_100ms} {single}");
    assert!((after_1s - WEIGHT_CAP * single).abs() < 1e-9, "{after_1s}");
    assert!((after_5s - WEIGHT_CAP * single).abs() < 1e-9, "{after_5s}");
}

#[test]
fn a_caller_at_the_quiet_rate_is_throttled_and_one_below_it_is_not() {
    // Books at a share of a twentieth, a call asking with no credit and no
    // probe due: at 0.75 calls a second (7.5 over the 10 s constant, half
    // of this call included) it is kept back; just under, it goes.
    // Books that have counted calls for long.
    let now = 100 * CALLS_TAU_MS as u64;
    let at = |calls: f64| Books {
        calls: calls - 0.5,
        share: FLOOR,
        last_sent: now,
        at: now,
        first_call: Some(0),
        ..Books::default()
    };
    let quiet_calls = QUIET_PER_SEC * CALLS_TAU_MS / 1000.0;
    assert!(!at(quiet_calls).ask(now));
    assert!(at(quiet_calls - 0.01).ask(now));
}

#[test]
fn the_share_moves_down_only_once_ten_answers_are_in() {
    // No prior: rejections at one instant. Nine leave the share whole;
    // the tenth moves it.
    let mut books = Books { answered: 0.0, accepted: 0.0, ..Books::default() };
    for _ in 0..9 {
        books.observe(0, Answer::Rejected);
    }
    assert_eq!(books.share(0), 1.0);
    books.observe(0, Answer::Rejected);
    assert_eq!(books.share(0), (-DOWN_GAIN).exp());
}

#[test]
fn a_fold_counts_each_answer_decayed_by_the_average_over_its_span() {
    let mut books = Books { answered: 0.0, accepted: 0.0, ..Books::default() };
    books.fold(10_000, 100);
    let tau = MAX_TAU_MS;
    let over = |tau: f64| tau / 10_000.0 * (1.0 - (-10_000.0 / tau).exp());
    assert!((books.answered - 100.0 * over(tau)).abs() < 1e-9, "{}", books.answered);
    assert!((books.accepted - 100.0 * over(tau)).abs() < 1e-9, "{}", books.accepted);
    assert!((books.calls - 100.0 * over(CALLS_TAU_MS)).abs() < 1e-9, "{}", books.calls);
    assert_eq!(books.last_accepted, 10_000);
}

#[test]
fn nothing_tallied_folds_nothing() {
    // Neither a fold nor an answer with nothing tallied counts answers the
    // host did not give, or moves the time of its last accepted one.
    let throttle = Throttle::default();
    throttle.fold(5_000);
    assert_eq!(*throttle.books(), Books::default());
    throttle.observe(6_000, Answer::Rejected);
    assert_eq!(throttle.books().last_accepted, 0);
    // What was tallied is folded before an answer is taken in.
    let fresh = Throttle::default();
    assert!(!fresh.tally(5));
    fresh.observe(6_000, Answer::Rejected);
    assert_eq!(fresh.books().last_accepted, 6_000);
    let spread = CALLS_TAU_MS / 6_000.0 * (1.0 - (-6_000.0 / CALLS_TAU_MS).exp());
    assert!((fresh.books().calls - 5.0 * spread).abs() < 1e-9, "{}", fresh.books().calls);
}

#[test]
fn a_steady_caller_just_under_the_quiet_rate_is_never_throttled() {
    // Every call rejected, for ten minutes, at a steady pace: at 0.74 a
    // second each goes; at 0.8 a second, once the host is down, some are
    // kept back.
    let kept_back = |gap: u64| {
        let mut books = Books::default();
        let mut kept = 0;
        for i in 0..600_000 / gap {
            let now = i * gap;
            if books.ask(now) {
                books.observe(now, Answer::Rejected);
            } else {
                kept += 1;
            }
        }
        assert!(books.share(600_000) < 1.0);
        kept
    };
    assert_eq!(kept_back(1_350), 0);
    assert!(kept_back(1_250) > 100);
}

#[test]
fn books_left_alone_for_a_while_start_afresh() {
    let mut books = Books::default();
    drive(&mut books, 0, 60, 10, reject);
    let last = books.at;
    assert_eq!(books.share(last), FLOOR);
    assert!(!books.stale(last + STALE_MS - 1));
    let mut before = books;
    before.ask(last + STALE_MS - 1);
    assert_eq!(before.share(last + STALE_MS - 1), FLOOR, "still the old books");
    let now = last + STALE_MS;
    assert!(books.stale(now));
    assert!(books.ask(now));
    assert_eq!(books.share(now), 1.0);
    assert!(books.calm(now), "nothing left to watch");
    assert_eq!(books.accepted, PRIOR, "the prior, fading from now");
    // The fresh books count from now: ten rejections a moment later are
    // ten, and span too little to call the host down.
    for ms in 1..=STREAK {
        books.observe(now + u64::from(ms), Answer::Rejected);
    }
    assert_eq!(books.rejections.length, STREAK);
    assert!(!books.down(now + 10));
}

/// A server taking `per_sec` attempts a second from `from`: a token bucket
/// holding `depth`, full at first.
fn bucket(per_sec: f64, depth: f64, from: u64) -> impl FnMut(u64, u32) -> Answer {
    let (mut tokens, mut last) = (depth, from);
    move |now, _| {
        tokens = (tokens + now.saturating_sub(last) as f64 * per_sec / 1000.0).min(depth);
        last = now;
        if tokens >= 1.0 {
            tokens -= 1.0;
            Answer::Accepted
        } else {
            Answer::Rejected
        }
    }
}

/// Calls every `gap` ms from `from` until `to`, as [`drive`] makes them.
fn drive_every(
    books: &mut Books,
    (from, to): (u64, u64),
    gap: u64,
    server: &mut impl FnMut(u64, u32) -> Answer,
) -> Run {
    drive_at(books, (from..to).step_by(gap as usize), server)
}

/// Calls at each of `times`, each sent once if the books let it go and
/// answered by `server(ms, n)`, `n` counting the sent attempts.
fn drive_at(
    books: &mut Books,
    times: impl IntoIterator<Item = u64>,
    server: &mut impl FnMut(u64, u32) -> Answer,
) -> Run {
    let mut run = Run::default();
    for now in times {
        run.calls += 1;
        if books.ask(now) {
            let answer = server(now, run.sent);
            run.sent += 1;
            run.accepted += u32::from(answer == Answer::Accepted);
            books.observe(now, answer);
        }
    }
    run
}

#[test]
fn calls_come_back_when_a_spike_ends() {
    // A host taking ten attempts a second is offered a hundred for 20 s;
    // then the calls fall to what it takes, half of it, a tenth of it, or
    // one every two seconds. From 2 s after the spike, every call goes.
    for gap in [100, 200, 1_000, 2_000] {
        let mut books = Books::default();
        let mut server = bucket(10.0, 20.0, 30_000);
        drive_every(&mut books, (0, 30_000), 100, &mut server);
        let spike = drive_every(&mut books, (30_000, 50_000), 10, &mut server);
        let ratio = f64::from(spike.sent) / f64::from(spike.accepted);
        assert!(ratio <= 3.2, "throttled in the spike: {spike:?}");
        let settling = drive_every(&mut books, (50_000, 52_000), gap, &mut server);
        let after = drive_every(&mut books, (52_000, 80_000), gap, &mut server);
        assert_eq!(after.sent, after.calls, "a call every {gap} ms: {settling:?} then {after:?}");
    }
}

/// Calls at random from `from` until `to`, `per_sec` a second on average
/// (exponential gaps drawn from `draws`), as [`drive`] makes them.
fn drive_at_random(
    books: &mut Books,
    (from, to): (u64, u64),
    per_sec: f64,
    draws: &mut Draws,
    server: &mut impl FnMut(u64, u32) -> Answer,
) -> Run {
    let mut at = from as f64;
    let times = std::iter::from_fn(|| {
        at += -1000.0 / per_sec * (1.0 - draws.next()).ln();
        Some(at as u64)
    });
    drive_at(books, times.take_while(|&now| now < to), server)
}

#[test]
fn calls_that_come_at_random_come_back_when_a_spike_ends() {
    // As above, but the calls come at random, as users' requests do: after
    // the spike two may come in the same moment, and the room must hold
    // more than one. A tenth of a fleet's spike and its fall, for one
    // process: a host taking one attempt a second is offered ten, then
    // half of one or a quarter, and takes them all.
    for (seed, per_sec) in [(1, 0.5), (2, 0.5), (3, 0.25), (4, 0.25), (5, 0.5), (6, 0.25)] {
        let mut draws = Draws(seed);
        let mut books = Books::default();
        let mut spike = bucket(1.0, 1.0, 0);
        let mut server = |now, n| if now < 30_000 { spike(now, n) } else { Answer::Accepted };
        drive_at_random(&mut books, (0, 10_000), per_sec, &mut draws, &mut server);
        drive_at_random(&mut books, (10_000, 30_000), 10.0, &mut draws, &mut server);
        drive_at_random(&mut books, (30_000, 32_000), per_sec, &mut draws, &mut server);
        let after = drive_at_random(&mut books, (32_000, 40_000), per_sec, &mut draws, &mut server);
        assert_eq!(after.sent, after.calls, "{per_sec} a second (seed {seed}): {after:?}");
    }
}

#[test]
fn an_accepted_answer_makes_room_for_calls_as_it_fades() {
    // At the floor's share with no credit, calls go only by the room: 40
    // accepted answers over a 4 s window fade by 1 - e^-1/20 in 200 ms,
    // which makes room for `ROOM` times that.
    let mut books = Books {
        calls: 100.0,
        share: FLOOR,
        accepted: 40.0,
        prior: 0.0,
        answered: 100.0,
        last_sent: 1_000,
        at: 1_000,
        ..Books::default()
    };
    assert_eq!(books.tau(), MIN_TAU_MS);
    let mut kept = books;
    books.advance(1_200);
    let faded = 40.0 * (1.0 - (-200.0 / MIN_TAU_MS).exp());
    assert!((books.room - ROOM * faded).abs() < 1e-9, "{}", books.room);
    let room = books.room;
    assert!(books.ask(1_200), "a call goes by the room");
    assert!((books.room - (room - 1.0)).abs() < 1e-9, "and takes one of it");
    // Without the room, the share's credit keeps it back.
    kept.advance(1_000);
    assert!(!kept.ask(1_000));
}

#[test]
fn the_room_holds_its_time_of_itself_or_what_one_answer_makes() {
    // 40 accepted answers in a 4 s window: ten a second, room for `ROOM`
    // times that a second, held for `ROOM_MS`.
    let mut books =
        Books { calls: 100.0, accepted: 40.0, answered: 40.0, prior: 0.0, ..Books::default() };
    books.advance(4_000);
    let held = ROOM * books.accepted * ROOM_MS / MIN_TAU_MS;
    assert!((books.room - held).abs() < 1e-9, "{} {held}", books.room);
    // Next to nothing accepted: the room held is what one accepted answer
    // makes, so that two calls that come together after a quiet spell go.
    let mut idle = Books { accepted: 0.01, answered: 0.01, room: 5.0, ..Books::default() };
    idle.advance(60_000);
    assert_eq!(idle.room, ROOM);
}

#[test]
fn a_host_that_is_down_gets_no_calls_by_its_room() {
    let mut books = Books::default();
    drive(&mut books, 0, 20, 10, reject);
    assert!(books.down(20_000));
    books.room = 5.0;
    books.credit = 0.0;
    books.last_sent = 20_000;
    books.at = 20_000;
    assert!(!books.ask(20_100), "only the probe goes");
    books.last_accepted = 19_000;
    assert!(!books.down(20_200));
    assert!(books.ask(20_200), "not down, and the room lets it go");
}

#[test]
fn a_rejection_takes_back_the_room_an_accepted_answer_makes() {
    let mut books =
        Books { calls: 100.0, accepted: 40.0, answered: 40.0, room: 3.0, ..Books::default() };
    books.observe(0, Answer::Rejected);
    assert_eq!(books.room, 3.0 - ROOM);
    books.observe(0, Answer::Rejected);
    assert_eq!(books.room, 0.0, "never below none");
}

#[test]
fn a_call_kept_back_is_told_the_hosts_tally() {
    let books = Books { accepted: 4.4, answered: 26.6, ..Books::default() };
    let told = books.kept_back();
    assert_eq!((told.accepted(), told.answered()), (4, 27));
    let text = told.to_string();
    assert!(text.contains("accepted about 4 of the 27 attempts"), "{text}");
    assert!(text.contains("with_throttling(false)"), "{text}");
    assert!(text.contains("SkipThrottling"), "{text}");
}

#[test]
fn with_no_room_the_share_lets_its_part_of_calls_through_evenly() {
    // No accepted answer to make room, a busy caller, a quarter share:
    // every fourth call goes.
    let mut books =
        Books { calls: 100.0, accepted: 0.0, answered: 40.0, share: 0.25, ..Books::default() };
    let goes: Vec<bool> = (0..12).map(|_| books.ask(0)).collect();
    let expected = [false, false, false, true].repeat(3);
    assert_eq!(goes, expected);
}

#[test]
fn a_call_kept_back_after_the_evidence_faded_is_told_so() {
    let books = Books { accepted: 0.2, answered: 0.4, ..Books::default() };
    let text = books.kept_back().to_string();
    assert!(text.contains("turned most attempts away, and has answered none lately"), "{text}");
    assert!(!text.contains("about 0 of the 0"), "{text}");
    assert!(text.contains("SkipThrottling"), "{text}");
}

/// One process calling once a second, every answer a rejection, with
/// `others` other processes' answers pooled each second, `accepted` of
/// them accepted: the share after `secs` seconds.
fn pooled_share(others: u32, accepted: u32, secs: u64) -> f64 {
    let mut books = Books::default();
    for t in 1..=secs {
        let now = t * 1000;
        let _ = books.ask(now);
        books.observe(now, Answer::Rejected);
        books.pool(now, accepted, others - accepted);
    }
    books.share(secs * 1000)
}

#[test]
fn a_fleet_s_answers_steer_the_share_within_seconds_where_one_process_s_take_many() {
    // Alone at a call a second, the prior and the rule of ten answers
    // hold the share whole for more than five seconds.
    assert_eq!(pooled_share(0, 0, 5), 1.0);
    // Nine others in a host's overload (one in ten accepted) cut it by then.
    let share = pooled_share(9, 1, 5);
    assert!(share < 0.8, "{share}");
    // And a fleet whose answers are mostly accepted keeps it whole.
    assert_eq!(pooled_share(9, 8, 5), 1.0);
}

#[test]
fn a_fleet_s_answers_add_no_run_of_rejections_and_are_not_shared_again() {
    let mut books = Books::default();
    books.pool(1000, 0, 50);
    assert_eq!(books.rejections.length, 0, "a run of rejections is the process's own");
    assert_eq!(books.take_unshared(), (0, 0), "pooled answers are not this process's to share");
}

#[test]
fn a_fleet_s_accepted_answers_make_room_for_this_process_s_part_of_them() {
    // A process with no answer of its own has no part of the fleet's.
    let mut bare = Books { answered: 0.0, accepted: 0.0, ..Books::default() };
    bare.pool(1000, 50, 0);
    bare.advance(2000);
    assert!(bare.pooled_accepted < 50.0, "faded");
    assert_eq!(bare.room, 0.0);
    // One with ten answers of its own, beside ninety of the fleet's, has a
    // tenth of them: the room of its own ten as they fade, and nine of the
    // fleet's, made as they fade too, but handed over with the next batch.
    let mut own = Books { answered: 10.0, accepted: 10.0, prior: 0.0, ..Books::default() };
    let mut pooled = own;
    pooled.pooled_answered = 90.0;
    pooled.pooled_accepted = 90.0;
    own.advance(100);
    pooled.advance(100);
    assert!(own.room > 0.0);
    assert_eq!(pooled.room, own.room, "the fleet's part waits for its next batch");
    assert!((pooled.pooled_room - 0.9 * own.room).abs() < 1e-9, "{}", pooled.pooled_room);
    // And that batch's rejections take back its part of them, first from
    // the room the fleet made, then from the room it holds.
    pooled.room = 3.0;
    pooled.advance(200);
    let (before, made) = (pooled.room, pooled.pooled_room);
    let part = pooled.answered / (pooled.answered + pooled.pooled_answered);
    pooled.pool(200, 0, 2);
    let taken = ROOM * part * 2.0;
    assert!(taken > made && before > taken - made);
    assert!((before + made - taken - pooled.room).abs() < 1e-9, "{before} → {}", pooled.room);
    assert_eq!(pooled.pooled_room, 0.0);
}

#[test]
fn a_fleet_s_accepted_answer_says_a_host_that_was_down_is_back() {
    let mut books = Books::default();
    for t in 0..=u64::from(STREAK) {
        books.observe(t * 1000, Answer::Rejected);
    }
    let now = u64::from(STREAK) * 1000;
    assert!(books.down(now));
    assert!(books.share(now) < 1.0);
    books.pool(now, 0, 5);
    assert!(books.down(now), "the fleet's rejections leave it down");
    books.pool(now + 1, 1, 5);
    assert!(!books.down(now + 1));
    assert_eq!(books.share(now + 1), 1.0, "back, as after an accepted answer of its own");
    assert_eq!(books.last_accepted, now + 1);
}

#[test]
fn the_process_s_own_answers_are_counted_for_its_fleet_once() {
    let mut books = Books::default();
    books.observe(100, Answer::Accepted);
    books.observe(200, Answer::Rejected);
    books.fold(300, 7);
    assert_eq!(books.take_unshared(), (8, 1));
    assert_eq!(books.take_unshared(), (0, 0), "taken once");
    books.observe(400, Answer::Rejected);
    // Books that start afresh keep what is not shared yet.
    books.refresh(400 + STALE_MS);
    assert_eq!(books.take_unshared(), (0, 1));
}

#[test]
fn pooled_answers_shorten_the_window_as_a_busier_host_s_do() {
    let mut books = Books::default();
    let _ = books.ask(1000);
    let alone = books.tau();
    books.pool(1000, 100, 0);
    assert!(books.tau() < alone, "{} < {alone}", books.tau());
    assert_eq!(books.tau(), MIN_TAU_MS, "a hundred answers a tenth of the calls' time constant");
}

#[test]
fn a_host_back_from_down_forgets_the_fleet_s_answers_too() {
    let mut books = Books::default();
    books.pool(0, 0, 40);
    let mut now = 0;
    while !books.down(now) && now < 200_000 {
        books.observe(now, Answer::Rejected);
        now += 1000;
    }
    assert!(books.down(now));
    books.observe(now + 1000, Answer::Accepted);
    assert_eq!((books.pooled_answered, books.pooled_accepted), (0.0, 0.0));
    assert_eq!(books.share(now + 1000), 1.0);
}

#[test]
fn a_fleet_s_answers_fade_as_the_process_s_own_do() {
    let mut books = Books { answered: 20.0, accepted: 10.0, ..Books::default() };
    books.pooled_answered = 40.0;
    books.pooled_accepted = 20.0;
    books.pooled_rate = 40.0;
    let tau = books.tau();
    books.advance(tau.round() as u64);
    let faded = (-(tau.round()) / tau).exp();
    assert!((books.answered - 20.0 * faded).abs() < 1e-9);
    assert!((books.pooled_answered - 40.0 * faded).abs() < 1e-9, "{}", books.pooled_answered);
    assert!((books.pooled_accepted - 20.0 * faded).abs() < 1e-9, "{}", books.pooled_accepted);
    let calls = (-(tau.round()) / CALLS_TAU_MS).exp();
    assert!((books.pooled_rate - 40.0 * calls).abs() < 1e-9, "{}", books.pooled_rate);
}

#[test]
fn a_call_kept_back_is_told_the_fleet_s_answers_too() {
    let mut books = Books { answered: 12.0, accepted: 3.0, ..Books::default() };
    books.pooled_answered = 30.0;
    books.pooled_accepted = 5.0;
    let told = books.kept_back();
    assert_eq!((told.accepted(), told.answered()), (8, 42));
}

#[test]
fn the_window_holds_about_its_samples_of_the_fleet_s_answers_and_the_process_s_calls() {
    // A call a second of its own, and nine of the fleet's answers a
    // second: forty answers are four seconds' worth.
    let mut books = Books { calls: 10.0, ..Books::default() };
    books.pooled_rate = 90.0;
    let rate = (10.0 + 90.0) * 1000.0 / CALLS_TAU_MS;
    assert!((books.tau() - SAMPLES * 1000.0 / rate).abs() < 1e-9, "{}", books.tau());
    books.pooled_rate = 20.0;
    let rate = (10.0 + 20.0) * 1000.0 / CALLS_TAU_MS;
    assert!((books.tau() - SAMPLES * 1000.0 / rate).abs() < 1e-9, "{}", books.tau());
}

#[cfg(feature = "fleet")]
#[test]
fn taking_a_host_s_answers_for_the_fleet_brings_in_its_tally_and_nothing_else() {
    let throttle = Throttle::default();
    for t in 0..=u64::from(STREAK) {
        throttle.observe(t * 1000, Answer::Rejected);
    }
    let now = u64::from(STREAK) * 1000;
    assert!(throttle.books().down(now));
    // Nothing tallied: the books are not touched (an empty fold would
    // count as an accepted answer now, and the host as up).
    assert_eq!(throttle.take_unshared(now + 500), (0, STREAK + 1));
    assert!(throttle.books().down(now + 500));
    let calm = Throttle::default();
    assert!(!calm.tally(3), "a calm host's answers wait in the tally");
    assert!(!calm.tally(2));
    assert_eq!(calm.take_unshared(600), (5, 0), "the tally, folded in");
    assert_eq!(calm.accepted().1, 0);
}

#[test]
fn a_run_of_rejections_means_down_only_once_long_for_the_ratio_before_it() {
    // One attempt in seven accepted: a run of ten rejections comes one time
    // in five by chance; it takes four times seven in a row.
    let mut books = Books { answered: 70.0, accepted: 10.0, prior: 0.0, ..Books::default() };
    let needed = (RUN_FACTOR * 7.0).ceil() as u64;
    for i in 0..needed - 1 {
        books.observe(i * 1000, Answer::Rejected);
    }
    assert_eq!(books.rejections.needed, needed as u32, "set as the run began");
    assert!(!books.down(needed * 1000), "{} rejections say nothing new", needed - 1);
    books.observe(needed * 1000, Answer::Rejected);
    assert!(books.down(needed * 1000));
    // A host that accepted all it was sent needs the streak alone.
    assert_eq!(Books::default().rejections_needed(), STREAK);
    // And one that accepted nothing, at most the longest run.
    let none = Books { answered: 50.0, accepted: 0.0, prior: 0.0, ..Books::default() };
    assert_eq!(none.rejections_needed(), LONGEST_RUN);
}

#[test]
fn a_caller_that_starts_at_a_steady_pace_is_judged_at_it_from_its_second_call() {
    // At a twentieth of calls let through, one a second: the first call
    // alone is quiet, the second is at a call a second, and kept back.
    let mut books = Books { share: FLOOR, ..Books::default() };
    assert!(books.ask(0), "a first call is no burst");
    assert!(!books.ask(1000), "pace {}", books.pace());
    assert!((books.pace() - 0.78).abs() < 0.01, "{}", books.pace());
}

#[test]
fn the_prior_makes_no_room() {
    let mut fresh = Books::default();
    fresh.advance(10_000);
    assert_eq!(fresh.room, 0.0);
    let mut answered = Books { prior: 0.0, ..Books::default() };
    answered.advance(10_000);
    assert!(answered.room >= 1.0, "{}", answered.room);
}

#[test]
fn calls_folded_in_count_their_pace_from_when_they_began() {
    // Half a call a second for a minute, tallied while calm, then watched:
    // the next call is judged at about that pace, so quiet, whatever the
    // share.
    let mut books = Books { share: FLOOR, ..Books::default() };
    books.fold(60_000, 30);
    assert_eq!(books.first_call, Some(0));
    assert!(books.ask(61_000), "pace {}", books.pace());
    assert!(books.pace() < QUIET_PER_SEC, "{}", books.pace());
}

/// Books cut by an overload that accepted one attempt in three, whose last
/// rejection came at 0.
fn cut_by_an_overload() -> Books {
    Books {
        answered: 30.0,
        accepted: 10.0,
        prior: 0.0,
        share: 0.2,
        last_rejected: Some(0),
        ..Books::default()
    }
}

#[test]
fn a_run_of_accepted_answers_long_for_the_ratio_before_it_lets_every_call_through() {
    // Two answers in three were rejected: six accepted in a row (4 × 30 /
    // 20) come by chance about once in 700 runs.
    let mut books = cut_by_an_overload();
    for n in 1..6 {
        books.observe(1_000 + n * 100, Answer::Accepted);
        assert_eq!(books.acceptances.needed, 6);
        assert!(books.share(1_000 + n * 100) < 1.0, "{n} in a row say nothing yet");
    }
    books.observe(1_600, Answer::Accepted);
    assert_eq!(books.share(1_600), 1.0);
    assert_eq!(books.answered, books.accepted, "the overload's rejections are forgotten");
    // A rejection ends a run: the next needs its own length again.
    let mut broken = cut_by_an_overload();
    for n in 1..6 {
        broken.observe(1_000 + n * 100, Answer::Accepted);
    }
    broken.observe(1_550, Answer::Rejected);
    broken.observe(2_600, Answer::Accepted);
    assert_eq!(broken.acceptances.length, 1);
    assert!(broken.share(2_600) < 1.0);
}

#[test]
fn a_run_of_accepted_answers_says_nothing_within_a_second_of_a_rejection() {
    // A host answering dozens a second makes such runs by chance: the run
    // must also span a second with no rejection.
    let mut books = cut_by_an_overload();
    for n in 1..=8 {
        books.observe(n * 100, Answer::Accepted);
    }
    assert!(books.share(800) < 1.0, "eight in 800 ms after a rejection");
    books.observe(RECOVERY_MS, Answer::Accepted);
    assert_eq!(books.share(RECOVERY_MS), 1.0, "and the next, a second after it");
}

#[test]
fn a_fleet_s_answers_make_or_end_a_run_of_accepted_ones() {
    // The fleet's answers come in batches, in no order told: one with a
    // rejection in it ends the run; one with none adds all its answers.
    let mut books = cut_by_an_overload();
    books.pool(1_100, 4, 0);
    assert_eq!(books.acceptances.length, 4);
    books.pool(1_200, 3, 1);
    assert_eq!(books.acceptances.length, 0, "a rejection among them");
    assert_eq!(books.last_pooled_rejected, Some(1_200));
    books.pool(2_300, 5, 0);
    assert!(books.share(2_300) < 1.0);
    books.observe(2_400, Answer::Accepted);
    books.pool(2_500, 4, 0);
    assert_eq!(books.share(2_500), 1.0, "ten in a row, the fleet's and its own");
}

#[test]
fn a_fleet_s_stray_rejection_leaves_calm_books_calm() {
    // One rejection among thirty of the fleet's answers cuts nothing: the
    // host stays calm, on the path that takes no lock.
    let mut books = Books::default();
    books.pool(1_000, 30, 1);
    assert_eq!(books.share(1_000), 1.0);
    assert!(books.calm(1_000));
}

#[test]
fn an_overload_s_end_seen_through_the_fleet_ends_the_process_s_run_of_rejections() {
    // Forty rejections of its own make this process's run long; the
    // fleet's accepted answers then show the overload over. The run is
    // forgotten with the rejections, so the host is not down again later.
    let mut books = Books { calls: 50.0, first_call: Some(0), ..Books::default() };
    for n in 0..40 {
        books.observe(n * 50, Answer::Rejected);
    }
    books.share = 0.2;
    for s in 1..=4 {
        books.pool(2_000 + s * 1_000, 20, 0);
    }
    assert_eq!(books.share(6_000), 1.0);
    assert_eq!(books.rejections.length, 0);
    assert!(!books.down(12_000));
}

#[test]
fn the_room_the_fleet_s_answers_make_comes_with_its_next_batch_net_of_its_rejections() {
    // None of its own answers accepted, a quarter of the fleet's answers
    // lately; the fleet's accepted answers fade for 3 s, then a batch
    // with `rejected` in it comes.
    let room_after = |rejected| {
        let mut books =
            Books { at: 1_000, answered: 10.0, accepted: 0.0, prior: 0.0, ..Books::default() };
        books.pooled_answered = 30.0;
        books.pooled_accepted = 30.0;
        books.advance(4_000);
        assert_eq!(books.room, 0.0, "nothing is handed over between batches");
        let made = books.pooled_room;
        let part = books.part();
        books.pool(4_000, 0, rejected);
        (books.room, made - ROOM * part * f64::from(rejected))
    };
    // A stray rejection near the host's capacity costs only its own room.
    let (room, net) = room_after(1);
    assert!(net > 0.0 && (room - net).abs() < 1e-9, "{room} against {net}");
    // Rejections that outnumber what faded leave none.
    let (room, net) = room_after(20);
    assert!(net < 0.0 && room == 0.0, "{room} against {net}");
}

#[test]
fn the_fleet_s_room_in_an_overload_does_not_depend_on_how_far_apart_batches_come() {
    // The fleet's answers at one accepted in three, 30 a second, for a
    // minute: told a second apart, or three.
    let room_made = |every: u64| {
        let mut books = Books::default();
        let mut made = 0.0;
        for at in (every..=60).step_by(every as usize) {
            let before = books.room;
            books.pool(at * 1_000, 10 * every as u32, 20 * every as u32);
            made += (books.room - before).max(0.0);
            // Brought up to date four times a second until the next batch.
            for quarter in 1..4 * every {
                let before = books.room;
                books.advance(at * 1_000 + quarter * 250);
                made += (books.room - before).max(0.0);
            }
        }
        made
    };
    assert_eq!(room_made(1), 0.0);
    assert_eq!(room_made(3), 0.0);
}

#[test]
fn the_room_waiting_for_the_fleet_s_next_batch_is_held_to_what_answers_lately_prove() {
    // A process at ten calls a second in an overload, whose fleet told a
    // batch of many accepted answers and then fell silent.
    let mut books = Books::default();
    books.pool(1_000, 200, 100);
    let mut held = 0.0_f64;
    for tenth in 11..=300 {
        let now = tenth * 100;
        books.observe(now, if tenth % 3 == 0 { Answer::Accepted } else { Answer::Rejected });
        held = held.max(books.pooled_room);
        assert!(books.pooled_room <= books.most_room(books.tau()) + 1e-9, "{now}");
    }
    // Its own rejections, twice its accepted answers, took it back.
    assert!(held > 0.0);
    assert!(books.pooled_room < held / 2.0, "{} of {held}", books.pooled_room);
}
