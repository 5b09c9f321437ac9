//! Adaptive admission of first attempts, per host: when a host turns most
//! of a process's requests away, the process stops sending it most of its
//! new calls, and gives them back as soon as the host answers again.
//!
//! It belongs to the family of Google's client-side throttling (the SRE
//! book's "Handling Overload"): each process counts its requests to a host
//! and the ones the host accepted, and refuses a share of new ones locally
//! when too few are accepted. That formula, `(requests − K × accepts) /
//! (requests + 1)` over two minutes, keeps a host in overload at K times
//! what it accepts; but it counts the calls it refused as requests, so
//! once a host has been down it takes minutes to trust it again, and two
//! minutes of healthy history make it slow to notice an outage. What is
//! kept here instead (the herd simulator measures both, see the README):
//!
//! - **A share of calls let through, moved by evidence.** Each answer to an
//!   attempt moves the share: down when fewer than one in
//!   [`ACCEPTS_WORTH`] attempts were accepted lately, up when more were.
//!   The share settles where the host accepts one attempt in
//!   `ACCEPTS_WORTH`, as the SRE formula's does; but it moves only when an
//!   answer arrives, so a share that is low, and sends little, is not
//!   driven lower by old answers alone, and recovers at the pace answers
//!   come back. An answer after a long silence weighs more (up to ten of
//!   a host answered every 100 ms), so a rarely called host is not slower
//!   to steer in time. The calls let through are spread evenly: each call
//!   kept back adds the share to a credit, and a call goes when the credit
//!   reaches one.
//! - **A window of samples, not of minutes.** Answers count for
//!   [`MIN_TAU_MS`] (an exponential decay), longer when the host is called
//!   rarely, so that the ratio always rests on about [`SAMPLES`] answers:
//!   a host failing half of its answers independently of load (a flaky
//!   backend, not an overloaded one) is not throttled by chance.
//! - **A total outage seen quickly.** [`STREAK`] rejections in a row, over
//!   at least [`STREAK_MS`], halve the share with each further rejection.
//!   A host that already turned most attempts away needs a run longer by
//!   as much ([`RUN_FACTOR`] times its answers per accepted one): there a
//!   run of ten comes by chance, and must not pass for an outage and its
//!   end for a recovery.
//!   The first accepted answer after such a run forgets the run's answers
//!   and lets every call through again; the share is then rebuilt from the
//!   answers that follow.
//! - **Traffic back when demand falls.** A share cut in an overload sends
//!   little once the calls fall to what the host can take, and a ratio
//!   over about forty answers would take long to move on so few. So each
//!   accepted answer also makes room for [`ROOM`] calls as it fades from
//!   the books, held for [`ROOM_MS`], and each rejected one takes as much
//!   back: calls that fell to what the host has just proved it accepts all
//!   go, whatever the share, unless the host is down. In a fleet, this
//!   process's part of the others' accepted answers makes room too as they
//!   fade, handed over with the fleet's next batch, net of the rejections
//!   in it: room made between the fleet's rounds and spent before the next
//!   round's rejections were told would let an overload leak.
//! - **An overload's end seen quickly.** A run of accepted answers (this
//!   process's and, in a fleet, the others') as long as [`RUN_FACTOR`]
//!   times the answers per rejected one before it, and spanning
//!   [`RECOVERY_MS`] with no rejection, comes by chance about once in e⁴
//!   runs: it means the host turns attempts away no longer. The rejections
//!   in the books are forgotten, and every call goes again.
//! - **Never below a probe.** While the host is down, a call goes when
//!   none went for [`PROBE_MS`], whatever the share, so a recovered host is
//!   seen; its first accepted answer lets every call through again.
//! - **Quiet callers are left alone.** A process sending fewer than
//!   [`QUIET_PER_SEC`] calls a second to a host is never throttled: its
//!   load cannot hurt, and its few answers prove nothing. The pace is
//!   measured over about ten seconds, so a burst counts at its own pace,
//!   and over the time the books have had while younger, so a process
//!   that starts at a steady pace is judged at it from its second call.
//! - **Old news is dropped.** Books that no call asked and no answer
//!   reached for [`STALE_MS`] start afresh: a host called again after a
//!   long silence is judged on what it answers now.
//!
//! Rejections are `429`, `502`, `503` and `504` answers, refused or
//! unreachable connections, and connect and read timeouts; every other
//! answer is accepted. Other errors count as neither.
//!
//! While a host has had no rejection for [`CALLS_TAU_MS`] and its share is
//! whole, nothing here is locked or timed: answers are tallied with one
//! atomic add, and the books are brought up to date every [`FOLD`] of them.
//! A busy host's answers are counted by each thread apart and added to the
//! tally ten at a time (see `stripes`); a rejection first takes in what
//! every thread counted, so the books judge on every answer before it.

use crate::rate_limit::Throttled;

/// The share settles where the host accepts one attempt in this many.
pub(crate) const ACCEPTS_WORTH: f64 = 2.7;
/// The shortest time constant of the decay of answers, in milliseconds.
pub(crate) const MIN_TAU_MS: f64 = 4_000.0;
/// The longest, for a host called rarely.
const MAX_TAU_MS: f64 = 60_000.0;
/// About how many answers the ratio rests on.
pub(crate) const SAMPLES: f64 = 40.0;
/// The time constant of the count of calls, in milliseconds: the rate of
/// calls is this count over it.
pub(crate) const CALLS_TAU_MS: f64 = 10_000.0;
/// Below this many calls a second to a host, a process is never throttled.
pub(crate) const QUIET_PER_SEC: f64 = 0.75;
/// An answer weighs as one per this many milliseconds since the last
/// (at least one, at most [`WEIGHT_CAP`]): a host answered rarely moves its
/// share as fast, in time, as one answered often.
const WEIGHT_MS: f64 = 100.0;
const WEIGHT_CAP: f64 = 10.0;
/// How far one answer moves the share down, per unit of shortfall.
const DOWN_GAIN: f64 = 0.1;
/// How far one answer moves the share up, per unit of excess.
const UP_GAIN: f64 = 0.1;
/// The least share let through.
pub(crate) const FLOOR: f64 = 0.05;
/// A call goes when none went for this long, in milliseconds.
pub(crate) const PROBE_MS: u64 = 2_500;
/// Books neither asked nor told anything for this long, in milliseconds,
/// are stale: they start afresh, and the host may be forgotten.
pub(crate) const STALE_MS: u64 = 60_000;
/// Rejections in a row that mean the host is down, at the least...
pub(crate) const STREAK: u32 = 10;
/// ...when they span at least this long since the last accepted answer...
pub(crate) const STREAK_MS: u64 = 6_000;
/// ...and, for a host that already turned most attempts away, this many
/// times the answers it took per accepted one before the run began: an
/// overloaded host that accepts one attempt in seven makes runs of ten
/// rejections one time in five, and such a run says nothing new. A run
/// this long comes by chance about once in e⁴ (one in 55).
pub(crate) const RUN_FACTOR: f64 = 4.0;
/// The longest run of rejections ever needed to call a host down, or of
/// accepted answers to call it through an overload.
pub(crate) const LONGEST_RUN: u32 = 100;
/// The shortest run of accepted answers that says an overload is over
/// (for a host that turned nearly every attempt away).
pub(crate) const RECOVERY_RUN: u32 = 5;
/// ...when it spans at least this long since the last rejection, in
/// milliseconds: a host answering dozens of attempts a second makes short
/// runs by chance many times a second, and a second with no rejection
/// at all is none of them.
pub(crate) const RECOVERY_MS: u64 = 1_000;
/// How much older than they are young books count as, in milliseconds,
/// when they take the pace of calls: a second, so that a first call alone
/// is not a burst.
const YOUNG_SLACK_MS: f64 = 1_000.0;
/// Answers the ratio must rest on before it moves the share down: a few
/// answers prove nothing.
pub(crate) const MIN_ANSWERS: f64 = 10.0;
/// The accepted answers a host's books start with, which decay like any:
/// a fresh process's first answers, in whatever order a burst of calls
/// gets them, do not throttle it.
pub(crate) const PRIOR: f64 = 10.0;
/// First attempts the host has room for, per answer it accepted, whatever
/// the share: each accepted answer makes room for this many calls as it
/// fades from the books, and each rejected one takes as many back, down to
/// none (room already spent is not owed). In a steady overload, where the
/// share holds the host at one accepted attempt in [`ACCEPTS_WORTH`] and
/// most answers are rejections, it is spent about as soon as it is made;
/// what it saves between bursts of calls goes on top of the share (see
/// BENCHMARKS). More than one, so that calls that fall to what the host
/// just took all go, with a margin for a process of a fleet whose part of
/// what the host took was small.
pub(crate) const ROOM: f64 = 2.5;
/// The room held at the most: this many milliseconds of it, and at least
/// what one accepted answer makes ([`ROOM`]). Seconds of it, so that calls
/// that come at random after a spike, two or three together at times, all
/// go; in an overload, rejections take it back as fast as it is made.
pub(crate) const ROOM_MS: f64 = 4_000.0;
/// Answers tallied before the books are brought up to date, while calm:
/// rarely, as a fold spreads what it brings in over the time since the
/// last, and a rejection folds first.
pub(crate) const FOLD: u32 = 256;

/// One host's books: decayed counts and the share let through. Times are
/// milliseconds on the ledger's timeline. Plain arithmetic, so that every
/// rule can be tested with times written down.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Books {
    /// When the counts were last decayed.
    at: u64,
    /// First attempts asked for, let through or not.
    calls: f64,
    /// Attempts whose answer counted, and how many of them were accepted.
    answered: f64,
    accepted: f64,
    /// What is left of [`PRIOR`] among the accepted answers, decayed as
    /// they are: it weighs in the ratio, but was never an answer, so it
    /// makes no room.
    prior: f64,
    /// The share of first attempts let through, from [`FLOOR`] to 1.
    share: f64,
    /// Rejections since the last accepted answer, and how many of them
    /// mean the host is down ([`RUN_FACTOR`]); and when that answer came.
    rejections: Streak,
    last_accepted: u64,
    /// Accepted answers since the last rejection, this process's and its
    /// fleet's (not those tallied while calm, which need no run), and how
    /// many of them mean the host turns attempts away no longer
    /// ([`RUN_FACTOR`]).
    acceptances: Streak,
    /// When a first attempt was last let through.
    last_sent: u64,
    /// When the first call was counted; `None` before it.
    first_call: Option<u64>,
    /// The share earned by calls kept back since the last one let through:
    /// a call goes once it reaches one, so that the calls let through are
    /// spread evenly, not drawn at random.
    credit: f64,
    /// When the last rejection came; `None` for never. And when the last
    /// batch of the fleet's answers with a rejection in it came: it ends a
    /// run of accepted answers, but leaves a calm host calm.
    last_rejected: Option<u64>,
    last_pooled_rejected: Option<u64>,
    /// When the last answer came.
    last_answer: u64,
    /// First attempts the host has proven room for: each accepted answer
    /// adds [`ROOM`] as it fades from the books, each rejected one takes
    /// as much back, each call let through takes one.
    room: f64,
    /// The room this process's part of the fleet's accepted answers made
    /// as they faded since the last batch: handed over, net, with the
    /// next. Held as the room is; own rejections take from it too.
    pooled_room: f64,
    /// Answers to the other processes of a fleet, and how many of them were
    /// accepted, decayed as this process's own are; and a count of them
    /// decayed as calls are, for their rate.
    pooled_answered: f64,
    pooled_accepted: f64,
    pooled_rate: f64,
    /// This process's answers booked since a fleet last took them:
    /// accepted, rejected.
    unshared: (u32, u32),
}

impl Default for Books {
    fn default() -> Self {
        Self {
            at: 0,
            calls: 0.0,
            answered: PRIOR,
            accepted: PRIOR,
            prior: PRIOR,
            share: 1.0,
            rejections: Streak::new(STREAK),
            last_accepted: 0,
            acceptances: Streak::new(LONGEST_RUN),
            last_sent: 0,
            first_call: None,
            credit: 0.0,
            last_rejected: None,
            last_pooled_rejected: None,
            last_answer: 0,
            room: 0.0,
            pooled_room: 0.0,
            pooled_answered: 0.0,
            pooled_accepted: 0.0,
            pooled_rate: 0.0,
            unshared: (0, 0),
        }
    }
}

impl Books {
    /// Decays the counts to `now`; a time before the last is taken as it.
    fn advance(&mut self, now: u64) {
        let Some(elapsed) = now.checked_sub(self.at) else { return };
        let elapsed = elapsed as f64;
        let tau = self.tau();
        let answers = (-elapsed / tau).exp();
        // Accepted answers make room as they fade: this process's own at
        // once, its part of the fleet's with the next batch (`pool`).
        let faded = 1.0 - answers;
        self.pooled_room += ROOM * self.part() * self.pooled_accepted * faded;
        let own = (self.accepted - self.prior).max(0.0) * faded;
        self.answered *= answers;
        self.accepted *= answers;
        self.prior *= answers;
        self.pooled_answered *= answers;
        self.pooled_accepted *= answers;
        // Neither holds more than the answers lately proved.
        let most = self.most_room(tau);
        self.room = (self.room + ROOM * own).min(most);
        self.pooled_room = self.pooled_room.min(most);
        let calls = (-elapsed / CALLS_TAU_MS).exp();
        self.calls *= calls;
        self.pooled_rate *= calls;
        self.at = now;
    }

    /// The most room held, with answers decayed over `tau`: what was
    /// accepted lately, at `accepted / tau` a millisecond, makes room for
    /// [`ROOM`] times as many calls, held for [`ROOM_MS`] at that rate; at
    /// least what one accepted answer makes. The fleet's accepted answers
    /// count for this process's part of them: its part of the answers
    /// lately.
    fn most_room(&self, tau: f64) -> f64 {
        let accepted = (self.accepted - self.prior).max(0.0) + self.part() * self.pooled_accepted;
        (ROOM * accepted * ROOM_MS / tau).max(ROOM)
    }

    /// This process's part of the answers its fleet got lately: 1 alone.
    fn part(&self) -> f64 {
        let all = self.answered + self.pooled_answered;
        if all <= 0.0 { 1.0 } else { self.answered / all }
    }

    /// Calls a second lately.
    fn rate(&self) -> f64 {
        self.calls * 1000.0 / CALLS_TAU_MS
    }

    /// Calls a second as the call just counted finds them. Right after a
    /// call, the decayed count overstates a steady pace by about half a
    /// call (right before one, it understates it by as much), so half a
    /// call is taken off. Books younger than the count's time constant
    /// have had less time to count calls in: the count is taken over the
    /// time they had, with a second more, so that a first call alone is not
    /// a burst, and a caller that starts at a steady pace is judged at it
    /// from its second call, not after [`CALLS_TAU_MS`].
    fn pace(&self) -> f64 {
        let age = self
            .first_call
            .map_or(f64::INFINITY, |first| self.at.saturating_sub(first) as f64 + YOUNG_SLACK_MS);
        let counted = 1.0 - (-age / CALLS_TAU_MS).exp();
        (self.calls - 0.5).max(0.0) * 1000.0 / (CALLS_TAU_MS * counted)
    }

    /// Whether no call asked and no answer came for [`STALE_MS`]: what
    /// the books hold says nothing of the host now.
    pub(crate) fn stale(&self, now: u64) -> bool {
        now.saturating_sub(self.at) >= STALE_MS
    }

    /// Starts stale books afresh at `now`.
    fn refresh(&mut self, now: u64) {
        if self.stale(now) {
            // As a host first seen now: its prior fades from now, and a run
            // of rejections spans the time since.
            let unshared = self.unshared;
            *self = Self { at: now, last_accepted: now, unshared, ..Self::default() };
        }
    }

    /// The time constant of the answers' decay: long enough to hold about
    /// [`SAMPLES`] of them at the current rate of calls, this process's
    /// and, in a fleet, the answers pooled from the others.
    fn tau(&self) -> f64 {
        let rate = self.rate() + self.pooled_rate * 1000.0 / CALLS_TAU_MS;
        if rate <= 0.0 {
            return MAX_TAU_MS;
        }
        (SAMPLES * 1000.0 / rate).clamp(MIN_TAU_MS, MAX_TAU_MS)
    }

    /// Whether rejections in a row have lasted long enough to call the
    /// host down.
    fn down(&self, now: u64) -> bool {
        self.rejections.long() && now.saturating_sub(self.last_accepted) >= STREAK_MS
    }

    /// How many rejections in a row, from now, would mean the host is
    /// down: [`STREAK`], or [`RUN_FACTOR`] times the answers per accepted
    /// one in the books (this process's and its fleet's) if that is more,
    /// up to [`LONGEST_RUN`]. Books with too few answers to say
    /// ([`MIN_ANSWERS`]) need [`STREAK`].
    fn rejections_needed(&self) -> u32 {
        let answered = self.answered + self.pooled_answered;
        if answered < MIN_ANSWERS {
            return STREAK;
        }
        streak::needed(answered, self.accepted + self.pooled_accepted, STREAK)
    }

    /// How many accepted answers in a row, from now, would mean the host
    /// turns attempts away no longer: [`RUN_FACTOR`] times the answers per
    /// rejected one in the books (with the fleet's), at least
    /// [`RECOVERY_RUN`], at most [`LONGEST_RUN`]. However few answers the
    /// books hold: a share cut by them is what the run would give back.
    fn acceptances_needed(&self) -> u32 {
        let answered = self.answered + self.pooled_answered;
        let rejected = answered - self.accepted - self.pooled_accepted;
        streak::needed(answered, rejected, RECOVERY_RUN)
    }

    /// The share of first attempts let through at `now`.
    pub(crate) fn share(&self, now: u64) -> f64 {
        if !self.down(now) {
            return self.share;
        }
        let halvings = self.rejections.past();
        let streak = 0.5_f64.powi(i32::try_from(halvings).unwrap_or(i32::MAX));
        self.share.min(streak).max(FLOOR)
    }

    /// A first attempt asks to go at `now`. Returns whether it goes. The
    /// call counts either way.
    pub(crate) fn ask(&mut self, now: u64) -> bool {
        self.refresh(now);
        self.advance(now);
        self.first_call.get_or_insert(now);
        self.calls += 1.0;
        let share = self.share(now);
        let goes = if share >= 1.0
            || self.pace() < QUIET_PER_SEC
            || (self.down(now) && now.saturating_sub(self.last_sent) >= PROBE_MS)
        {
            true
        } else {
            self.credit += share;
            self.credit >= 1.0 || (!self.down(now) && self.room >= 1.0)
        };
        if goes {
            self.credit = (self.credit - 1.0).max(0.0);
            self.room = (self.room - 1.0).max(0.0);
            self.last_sent = now;
        }
        goes
    }

    /// What a call kept back is told: about how many answers the books
    /// hold (with those pooled from a fleet), and how many were accepted.
    pub(crate) fn kept_back(&self) -> Throttled {
        let count = |n: f64| n.round().clamp(0.0, f64::from(u32::MAX)) as u32;
        let accepted = self.accepted + self.pooled_accepted;
        Throttled::new(count(accepted), count(self.answered + self.pooled_answered))
    }

    /// Takes in the answer to an attempt at `now`.
    pub(crate) fn observe(&mut self, now: u64, answer: Answer) {
        self.refresh(now);
        self.advance(now);
        match answer {
            Answer::Accepted => {
                self.back_if_down(now);
                self.rejections.end();
                self.acceptances.extend(1, self.acceptances_needed());
                self.last_accepted = now;
                self.accepted += 1.0;
                self.unshared.0 = self.unshared.0.saturating_add(1);
            }
            Answer::Rejected => {
                // What the room held could not pay, from the fleet's.
                let unpaid = (ROOM - self.room).max(0.0);
                self.room = (self.room - ROOM).max(0.0);
                self.pooled_room = (self.pooled_room - unpaid).max(0.0);
                self.rejections.extend(1, self.rejections_needed());
                self.acceptances.end();
                self.last_rejected = Some(now);
                self.unshared.1 = self.unshared.1.saturating_add(1);
            }
        }
        self.answered += 1.0;
        self.through_if_long(now);
        self.steer_now(now);
    }

    /// An accepted answer at `now`: if the host was down, it is back, and
    /// what it said while down is stale.
    fn back_if_down(&mut self, now: u64) {
        if self.down(now) {
            self.answered = 0.0;
            self.accepted = 0.0;
            self.prior = 0.0;
            self.pooled_answered = 0.0;
            self.pooled_accepted = 0.0;
            self.pooled_room = 0.0;
            self.share = 1.0;
        }
    }

    /// At `now`, at the end of a run of accepted answers long for the
    /// ratio before it and spanning [`RECOVERY_MS`]: the host turns
    /// attempts away no longer, and the rejections in the books are news of
    /// an overload that is over. They are forgotten, and every call goes
    /// again.
    fn through_if_long(&mut self, now: u64) {
        let quiet = [self.last_rejected, self.last_pooled_rejected]
            .iter()
            .flatten()
            .all(|&at| now.saturating_sub(at) >= RECOVERY_MS);
        if self.acceptances.long() && quiet && self.share < 1.0 {
            self.rejections.end();
            self.answered = self.accepted;
            self.pooled_answered = self.pooled_accepted;
            self.share = 1.0;
        }
    }

    /// Steers by the latest ratio as an answer at `now` does: weighing as
    /// more than one after a silence.
    fn steer_now(&mut self, now: u64) {
        let since = now.saturating_sub(self.last_answer) as f64;
        self.last_answer = now;
        self.steer((since / WEIGHT_MS).clamp(1.0, WEIGHT_CAP));
    }

    /// Takes in, at `now`, the answers the other processes of a fleet got
    /// from the host since the fleet last told: `accepted` and `rejected`.
    /// They count towards the ratio the share is steered by, and its
    /// window, as this process's own answers do; the share is steered once
    /// for them all, as by one answer after the time since the last, so a
    /// fleet's evidence moves the share no faster than a busy host's
    /// answers do. The room this process's part of their accepted answers
    /// made as they faded is handed over with the next batch, net of its
    /// rejections (the module's rules): a spike's end gives traffic back in a
    /// fleet too, and an overload gets about none (BENCHMARKS). They add
    /// nothing to a run of rejections, which stays this process's own
    /// evidence. But an
    /// accepted answer among them ends such a run's claim that the host is
    /// down, as one of its own would: the host takes calls, so it is back,
    /// or overloaded, and is then steered by its share without the floor of
    /// a probe per process ([`PROBE_MS`]), which at a call a second is four
    /// times what a host overloaded tenfold takes.
    #[cfg(any(feature = "fleet", test))]
    pub(crate) fn pool(&mut self, now: u64, accepted: u32, rejected: u32) {
        let answers = f64::from(accepted) + f64::from(rejected);
        if answers <= 0.0 {
            return;
        }
        self.refresh(now);
        self.advance(now);
        if accepted > 0 {
            // The host takes the fleet's calls: back if it was down, and
            // overloaded, maybe, but not down.
            self.back_if_down(now);
            self.last_accepted = now;
        }
        // The room made since the last batch, less this batch's part of
        // rejections: not spent before the rejections that came with it.
        let taken = ROOM * self.part() * f64::from(rejected);
        let net = std::mem::take(&mut self.pooled_room) - taken;
        self.room = (self.room + net).clamp(0.0, self.most_room(self.tau()));
        // In what order the fleet's answers came is not told: any rejection
        // among them ends a run of accepted answers.
        if rejected > 0 {
            self.acceptances.end();
            self.last_pooled_rejected = Some(now);
        } else {
            self.acceptances.extend(accepted, self.acceptances_needed());
        }
        self.pooled_answered += answers;
        self.pooled_accepted += f64::from(accepted);
        self.pooled_rate += answers;
        self.through_if_long(now);
        self.steer_now(now);
    }

    /// This process's answers booked since this was last asked, accepted
    /// and rejected, for its fleet; the count starts again.
    #[cfg(any(feature = "fleet", test))]
    pub(crate) fn take_unshared(&mut self) -> (u32, u32) {
        std::mem::take(&mut self.unshared)
    }

    /// Moves the share by the latest ratio of accepted answers, as much as
    /// an answer of `weight` does: down in proportion to the shortfall
    /// below one in [`ACCEPTS_WORTH`], up in proportion to the excess; never
    /// down before the ratio rests on [`MIN_ANSWERS`]. The ratio is over
    /// this process's answers and those pooled from its fleet.
    fn steer(&mut self, weight: f64) {
        let answered = self.answered + self.pooled_answered;
        let error = ACCEPTS_WORTH * (self.accepted + self.pooled_accepted) / answered - 1.0;
        let error = if answered < MIN_ANSWERS { error.max(0.0) } else { error };
        let step = DOWN_GAIN * error.min(0.0) + UP_GAIN * error.max(0.0);
        self.share = (self.share * (weight * step).exp()).clamp(FLOOR, 1.0);
    }

    /// Takes in `answers` accepted answers to first attempts, tallied while
    /// the host was calm, at `now`. They came since the books were last
    /// brought up to date, evenly as far as the books know: each counts as
    /// decayed by the average over that time, so that a batch does not
    /// count as a burst.
    pub(crate) fn fold(&mut self, now: u64, answers: u32) {
        self.unshared.0 = self.unshared.0.saturating_add(answers);
        // Their calls were counted from the books' last update on.
        self.first_call.get_or_insert(self.at);
        let spread = now.saturating_sub(self.at) as f64;
        let tau = self.tau();
        self.advance(now);
        let answers = f64::from(answers);
        let decayed = |tau: f64| {
            if spread <= 0.0 { 1.0 } else { tau / spread * (1.0 - (-spread / tau).exp()) }
        };
        self.calls += answers * decayed(CALLS_TAU_MS);
        self.answered += answers * decayed(tau);
        self.accepted += answers * decayed(tau);
        self.last_accepted = now;
    }

    /// Whether nothing here needs watching: the share is whole, no
    /// rejection is in a run, and none came for [`CALLS_TAU_MS`].
    pub(crate) fn calm(&self, now: u64) -> bool {
        self.share >= 1.0
            && self.rejections.length == 0
            && self.last_rejected.is_none_or(|at| now.saturating_sub(at) as f64 >= CALLS_TAU_MS)
    }
}

mod answer;
mod host;
mod streak;

pub(crate) use answer::{Answer, answer};
pub(crate) use host::Throttle;
use streak::Streak;

#[cfg(test)]
mod tests;
