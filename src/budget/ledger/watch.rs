//! The ledger's watch over hosts before a request goes: the pauses servers
//! asked for, and the throttles of hosts that turn requests away.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Lazy, Ledger, Record, SLOTS};
use crate::hosts::{Host, Located, Origin};
use crate::pause::Gate;
use crate::rate_limit::Throttled;
use crate::stripes::{Word, note_shared_write};
use crate::throttle::{Answer, STALE_MS, Throttle};

/// How much later than the end a process knew a pause read from its
/// fleet must end to count as another process's.
#[cfg(feature = "fleet")]
const FLEET_SLACK_MS: u64 = 50;

impl Ledger {
    /// Asks `throttle` whether a first attempt goes at `now`; while it is
    /// watched, the call keeps every call looking its host up.
    fn ask(&self, throttle: &Throttle, now: u64) -> Passage<'_> {
        let asked = throttle.ask(now);
        if throttle.watched() {
            self.look_until(now.saturating_add(STALE_MS));
        }
        match asked {
            Ok(()) => Passage::Open,
            Err(throttled) => Passage::Throttled(throttled),
        }
    }

    /// Books how `url`'s host answered an attempt at `now`: a rejection
    /// lets the host into the table, as a failure does, and has calls look
    /// it up before they send. Nothing, unless first attempts are
    /// throttled.
    pub(crate) fn observe(
        &self,
        url: &(impl Located + ?Sized),
        answer: Answer,
        now: impl FnOnce() -> Instant,
    ) {
        if !self.throttling {
            return;
        }
        let mut now = Lazy::new(now);
        if answer == Answer::Accepted {
            // A host the table does not know has nothing to throttle.
            let _ =
                self.hosts.with_or_full(url, |record| self.count(record, false, true, &mut now));
            return;
        }
        let at = now.get();
        let host = self.record(url, self.slot_number(at));
        if !self.hosts.is_overflow(&host) {
            self.sweep(&host.value, at);
            self.book(&host.value.throttle, answer, self.ms(at));
        }
    }

    /// The entry of `url`'s host, for a call whose request goes out with no
    /// copy left to name the host by: its throttle hears the answer there,
    /// and a pause the answer asks for is taken there when the outcome
    /// names no host (a tower stack's). Only if first attempts are
    /// throttled or pauses kept; made at `now` if the table has none, and
    /// none past its bound.
    pub(crate) fn handle(&self, url: &(impl Located + ?Sized), now: Instant) -> Option<HostHandle> {
        if !(self.throttling || self.pauses) {
            return None;
        }
        let host = self.record(url, self.slot_number(now));
        Some(host).filter(|host| !self.hosts.is_overflow(host)).map(HostHandle)
    }

    /// [`observe`](Self::observe) for the host a call holds.
    pub(crate) fn observe_held(&self, host: &HostHandle, answer: Answer, now: Instant) {
        if answer != Answer::Accepted {
            self.sweep(&host.0.value, now);
        }
        self.book(&host.0.value.throttle, answer, self.ms(now));
    }

    /// Counts an accepted answer in the throttle of `record`'s host, which
    /// is not busy: in the tally its calls share, folded into the books
    /// every [`FOLD`](crate::throttle::FOLD) of them, or booked now, with its
    /// time, while the host is watched.
    pub(super) fn tally_now(&self, record: &Record, now: &mut Lazy<impl FnOnce() -> Instant>) {
        if record.throttle.watched() {
            self.book_now(record, now);
        } else if record.throttle.tally(1) {
            let at = now.get();
            record.throttle.fold(self.ms(at));
            record.tallies.filled(Word::Tally, self.slot_number(at));
        }
    }

    /// Whether a busy host's accepted answer waits for its thread's batch
    /// to reach `record`'s throttle: unless the host is watched, when it
    /// is booked now, with its time.
    #[inline]
    pub(super) fn tallies_in_batch(
        &self,
        record: &Record,
        now: &mut Lazy<impl FnOnce() -> Instant>,
    ) -> bool {
        if !record.throttle.watched() {
            return true;
        }
        self.book_now(record, now);
        false
    }

    /// Books what every thread counted for `record`'s host and has not
    /// booked yet, at `now`: before a rejection, so that the throttle
    /// judges on every answer that came before it, whatever the threads
    /// that counted them.
    fn sweep(&self, record: &Record, now: Instant) {
        let Some(stripes) = record.tallies.striped() else { return };
        let batch = stripes.sweep();
        if !batch.is_empty() {
            let books = (record.account.as_deref(), Some(&record.throttle));
            self.book_batch(books, batch, &mut Lazy::new(|| now));
        }
    }

    /// Books an accepted answer into `record`'s throttle, the time read now.
    #[cold]
    fn book_now(&self, record: &Record, now: &mut Lazy<impl FnOnce() -> Instant>) {
        let now = self.ms(now.get());
        self.book(&record.throttle, Answer::Accepted, now);
    }

    /// Books an answer into a host's throttle at `now`: at once while it
    /// is watched or for a rejection, else by bringing the tally up to
    /// date.
    pub(super) fn book(&self, throttle: &Throttle, answer: Answer, now: u64) {
        if answer == Answer::Accepted && !throttle.watched() {
            throttle.fold(now);
        } else if throttle.observe(now, answer) {
            self.look_until(now.saturating_add(STALE_MS));
        }
    }

    /// Where `url`'s host stands for a request about to go at `now`: its
    /// pause, then, for a `first` attempt, its throttle. While no host has been
    /// paused or throttled within a window, it reads neither the clock nor
    /// the table.
    pub(crate) fn gate(
        &self,
        url: &(impl Located + ?Sized),
        now: impl FnOnce() -> Instant,
        first: bool,
    ) -> Passage<'_> {
        let horizon = self.watch_until.load(Ordering::Acquire);
        if horizon == 0 {
            return Passage::Open;
        }
        let now = self.ms(now());
        if now >= horizon && self.probes.load(Ordering::Acquire) == 0 {
            // Every pause ended a window ago, every throttle watched then
            // has been stale for a window (it starts afresh when next
            // asked), and no probe is in flight: look no host up until the
            // next pause or rejection. One meanwhile moved the horizon on,
            // and the exchange fails.
            let _ =
                self.watch_until.compare_exchange(horizon, 0, Ordering::AcqRel, Ordering::Relaxed);
            return Passage::Open;
        }
        // The host's entry is looked up, not held: a call that goes counts
        // no reference on it, only the probe keeps one.
        self.hosts.with_entry(url, |host| self.passage(host, now, first)).unwrap_or(Passage::Open)
    }

    /// Where `host` stands for a request about to go at `now`: its pause,
    /// then, for a `first` attempt, its throttle.
    fn passage(&self, host: &Arc<Host<Record>>, now: u64, first: bool) -> Passage<'_> {
        match host.value.pause.check(now) {
            Gate::Open => {}
            Gate::Probe => {
                self.probes.fetch_add(1, Ordering::AcqRel);
                self.look_until(now);
                return Passage::Probe(Turn { host: host.clone(), ledger: self, settled: false });
            }
            Gate::Until(end) => {
                return Passage::Paused(Duration::from_millis(end.saturating_sub(now)));
            }
            Gate::Probing => return Passage::Probing,
        }
        if first && self.throttling { self.ask(&host.value.throttle, now) } else { Passage::Open }
    }

    /// Pauses `url`'s host for `asked` from `now`, as its server asked.
    /// Returns whether it did: no pause is kept for a host that finds no
    /// room in the table.
    pub(crate) fn pause(
        &self,
        url: &(impl Located + ?Sized),
        asked: Duration,
        now: Instant,
    ) -> bool {
        let Some((host, _)) = self.hold(url, asked, now) else { return false };
        #[cfg(feature = "fleet")]
        self.tell_fleet(&host, asked, now);
        #[cfg(not(feature = "fleet"))]
        let _ = host;
        true
    }

    /// Pauses `url`'s host for `asked` from `now`, unless pauses are off
    /// or the host finds no room in the table; returns its entry if it did.
    /// With it, whether the pause ends later than it did.
    fn hold(
        &self,
        url: &(impl Located + ?Sized),
        asked: Duration,
        now: Instant,
    ) -> Option<(Arc<Host<Record>>, bool)> {
        if !self.pauses {
            return None;
        }
        let host = self.record(url, self.slot_number(now));
        if self.hosts.is_overflow(&host) {
            return None;
        }
        let until = self.until(asked, now);
        let later = host.value.pause.pause(until);
        self.look_until(until);
        Some((host, later))
    }

    /// Joins a fleet, which is told every pause this process takes on from
    /// now. A ledger joins one fleet: `false` if it is in one already.
    #[cfg(feature = "fleet")]
    pub(crate) fn join_fleet(&self, fleet: Arc<dyn super::Fleetward>) -> bool {
        self.fleet.set(fleet).is_ok()
    }

    /// Tells the fleet, if any, that `host` was paused for `asked`.
    #[cfg(feature = "fleet")]
    fn tell_fleet(&self, host: &Host<Record>, asked: Duration, now: Instant) {
        if let Some(fleet) = self.fleet.get() {
            let (scheme, name, port) = host.parts();
            fleet.paused(scheme, name, port, asked, now);
        }
    }

    /// Pauses `url`'s host for what is `left` of a pause another process
    /// of the fleet took on, as if this one had (a later pause of its own
    /// holds); the fleet is not told again. Returns whether the host's
    /// pause now ends later than this process knew: the pause came from
    /// another.
    ///
    /// An end within [`FLEET_SLACK_MS`] of the one this process knew is
    /// its own pause come back (the store's clock and the round trip move
    /// it a little), not another's.
    #[cfg(feature = "fleet")]
    pub(crate) fn pause_from_fleet(
        &self,
        url: &(impl Located + ?Sized),
        left: Duration,
        now: Instant,
    ) -> bool {
        let before = self.hosts.with(url, |record| record.pause.end()).flatten();
        let Some((host, _)) = self.hold(url, left, now) else { return false };
        let after = host.value.pause.end().unwrap_or_default();
        before.is_none_or(|before| after > before.saturating_add(FLEET_SLACK_MS))
    }

    /// How many hosts the books know.
    #[cfg(feature = "fleet")]
    pub(crate) fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// Every host the books know (the hosts this process called lately):
    /// its scheme, name and port, and what is left at `now` of a pause in
    /// force, if one is.
    #[cfg(feature = "fleet")]
    pub(crate) fn hosts_in_use(&self, now: Instant) -> Vec<HostInUse> {
        let now = self.ms(now);
        let mut hosts = Vec::new();
        self.hosts.for_each(|host| {
            let (scheme, name, port) = host.parts();
            let paused = host.value.pause.ends(now).map(|end| end.saturating_sub(now));
            hosts.push(HostInUse {
                scheme: scheme.to_owned(),
                name: name.to_owned(),
                port,
                paused: paused.map(Duration::from_millis),
            });
        });
        hosts
    }

    /// Every host the books know, with this process's answers from it
    /// since this was last asked (accepted, rejected), for a fleet to pool:
    /// what each thread counted and has not booked yet is booked first.
    /// None while first attempts are not throttled.
    #[cfg(feature = "fleet")]
    pub(crate) fn take_evidence(&self, now: Instant) -> Vec<(HostInUse, (u32, u32))> {
        if !self.throttling {
            return Vec::new();
        }
        let at = self.ms(now);
        let mut evidence = Vec::new();
        self.hosts.for_each(|host| {
            self.sweep(&host.value, now);
            let answers = host.value.throttle.take_unshared(at);
            let (scheme, name, port) = host.parts();
            let host =
                HostInUse { scheme: scheme.to_owned(), name: name.to_owned(), port, paused: None };
            evidence.push((host, answers));
        });
        evidence
    }

    /// Takes in, at `now`, the answers the other processes of a fleet got
    /// from `url`'s host: `accepted` and `rejected`. Returns whether the
    /// host's throttle was watched before them and is after them (the
    /// fleet's evidence cut its share, or its own had). Nothing for a host
    /// the books do not know.
    #[cfg(feature = "fleet")]
    pub(crate) fn pool_from_fleet(
        &self,
        url: &(impl Located + ?Sized),
        (accepted, rejected): (u32, u32),
        now: Instant,
    ) -> (bool, bool) {
        if !self.throttling {
            return (false, false);
        }
        let at = self.ms(now);
        let pooled = self.hosts.with(url, |record| {
            let throttle = &record.throttle;
            (throttle.watched(), throttle.pool(at, accepted, rejected))
        });
        let (was, is) = pooled.unwrap_or((false, false));
        if is {
            self.look_until(at.saturating_add(STALE_MS));
        }
        (was, is)
    }

    /// The end of a pause of `asked` from `now`, on the books' timeline:
    /// rounded up, so that a probe never goes before the time the server
    /// named, and saturating for a wait no clock can hold.
    fn until(&self, asked: Duration, now: Instant) -> u64 {
        let asked = u64::try_from(asked.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        self.ms(now).saturating_add(asked)
    }

    /// Has calls look their hosts up until a window after `until`, a
    /// pause's end: by then its probe has gone, or the host may be
    /// forgotten.
    fn look_until(&self, until: u64) {
        note_shared_write();
        let window = self.slot_ms.saturating_mul(SLOTS);
        let horizon = until.saturating_add(window).saturating_add(1);
        self.watch_until.fetch_max(horizon, Ordering::AcqRel);
    }

    /// The probe's outcome: the server asked for a new pause, of `asked`
    /// from `now`; or it refused again with no time named, and the host is
    /// held for a backoff `step`; or the host is open again. Only a pause
    /// the server asked for is told to a fleet.
    pub(crate) fn settle(
        &self,
        mut turn: Turn<'_>,
        asked: Option<Duration>,
        step: Option<Duration>,
        now: Instant,
    ) {
        turn.settled = true;
        let until = asked.or(step).map(|held| self.until(held, now));
        turn.host.value.pause.settle(until);
        if let Some(until) = until {
            self.look_until(until);
        }
        #[cfg(feature = "fleet")]
        if let Some(asked) = asked {
            self.tell_fleet(&turn.host, asked, now);
        }
    }
}

/// A host the books know, as a fleet sees it.
#[cfg(feature = "fleet")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostInUse {
    pub(crate) scheme: String,
    pub(crate) name: String,
    pub(crate) port: Option<u16>,
    /// What is left of a pause in force.
    pub(crate) paused: Option<Duration>,
}

/// Where a host stands for a request about to go to it.
#[derive(Debug)]
pub(crate) enum Passage<'a> {
    /// No pause: send.
    Open,
    /// The pause is over and the request is its probe: send, and settle
    /// the pause with the outcome.
    Probe(Turn<'a>),
    /// Paused for this much longer.
    Paused(Duration),
    /// The pause is over and another call's probe is in flight.
    Probing,
    /// The host's throttle keeps this first attempt back: it is not sent,
    /// and the call is told this.
    Throttled(Throttled),
}

/// A call's turn to probe a host whose pause ended: the pause is settled
/// by its outcome, or, when it has none (the call was dropped, or its
/// deadline cut the attempt), given back for the next call to take.
pub(crate) struct Turn<'a> {
    host: Arc<Host<Record>>,
    ledger: &'a Ledger,
    settled: bool,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.host.value.pause.give_back();
        }
        self.ledger.probes.fetch_sub(1, Ordering::AcqRel);
    }
}

impl fmt::Debug for Turn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn").field("settled", &self.settled).finish_non_exhaustive()
    }
}

/// A host's entry, held by a call that can no longer name it by its
/// request.
pub(crate) struct HostHandle(Arc<Host<Record>>);

impl HostHandle {
    /// The host it is the entry of.
    pub(crate) fn origin(&self) -> Origin<'_> {
        self.0.key()
    }
}

impl fmt::Debug for HostHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostHandle").finish_non_exhaustive()
    }
}
