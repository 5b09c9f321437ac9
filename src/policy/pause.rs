//! The policy's part in what holds a host's requests back: whether a
//! request may go to its host now (its pause, and for a first attempt its
//! throttle), and what an answer makes of the pause (see [`crate::pause`]
//! and [`crate::throttle`]).

use std::time::Duration;

use http::Extensions;

use super::Policy;
use super::steps::{self, Retryable};
use crate::backoff::{Jitter, scale};
use crate::budget::{HostHandle, Ledger, Passage};
use crate::exchange::{Ended, Exchange};
use crate::future::yield_once;
use crate::head::Head;
use crate::hosts::Origin;
use crate::rate_limit::{HostPaused, ReturnIfPaused, SkipThrottling, Throttled};
use crate::shared::Shared;

/// Why a request did not go to its host.
#[derive(Debug)]
pub(crate) enum HeldBack {
    /// The host is paused and the call did not wait.
    Paused(HostPaused),
    /// The host's throttle kept the call's first attempt back.
    Throttled(Throttled),
}

/// The least a call waits before it looks again at a host whose probe is
/// in flight.
const MIN_LOOK_AGAIN: Duration = Duration::from_millis(10);

impl<'a, E: Exchange> Policy<'a, E> {
    /// Waits while the request's host is paused at its server's request,
    /// unless the call does not wait or its throttle keeps it back (see
    /// [`passage`](Self::passage)): the one wait a policy does itself, for
    /// every adapter's loop alike. `request` is the copy kept to send, if
    /// one is.
    ///
    /// The wait holds the request's host, not the request: a body need
    /// not be `Sync` for the call to be `Send`. The host is read only when
    /// some host may be holding calls back.
    pub(crate) fn pass<'s>(
        &'s mut self,
        request: Option<&'s E::Request>,
        extensions: &'s Extensions,
    ) -> impl Future<Output = Result<(), HeldBack>> + 's {
        let may_hold = self.shared.ledger.as_deref().is_some_and(Ledger::may_hold);
        let origin = request.filter(|_| may_hold).map(E::origin);
        async move {
            let Some(origin) = origin else { return Ok(()) };
            let clock = &*self.shared.clock;
            while let Some(wait) = self.passage(origin, extensions)? {
                let before = clock.now();
                clock.sleep(wait).await;
                // A clock whose time a sleep does not move would hold the
                // call forever: it goes.
                if clock.now() <= before {
                    break;
                }
                // The probe may be another task of this thread's, and a
                // sleep may end at once (a test's clock): it gets its turn.
                yield_once().await;
            }
            Ok(())
        }
    }

    /// Whether a request to `origin` may go to its host now (`None`), or must first
    /// wait out the host's pause for the time returned, then ask again.
    /// When this request's attempt is the probe the pause's end lets
    /// through, the call holds the turn until its outcome settles it.
    ///
    /// # Errors
    ///
    /// When the call does not wait: the wait would outlast the deadline, or
    /// the request carries [`ReturnIfPaused`] (in `extensions`); or when
    /// the host's throttle keeps the call's first attempt back, unless the
    /// request carries [`SkipThrottling`].
    #[inline]
    pub(crate) fn passage(
        &mut self,
        origin: Origin<'_>,
        extensions: &Extensions,
    ) -> Result<Option<Duration>, HeldBack> {
        let shared: &'a Shared = self.shared;
        match shared.ledger.as_deref() {
            Some(ledger) if ledger.may_hold() => self.wait_for_host(ledger, origin, extensions),
            _ => Ok(None),
        }
    }

    /// [`passage`](Self::passage), once some host may be paused.
    #[cold]
    fn wait_for_host(
        &mut self,
        ledger: &'a Ledger,
        origin: Origin<'_>,
        extensions: &Extensions,
    ) -> Result<Option<Duration>, HeldBack> {
        let clock = &*self.shared.clock;
        let first = self.attempts == 0 && extensions.get::<SkipThrottling>().is_none();
        let passage = ledger.gate(&origin, || clock.now(), first);
        let for_pause = matches!(passage, Passage::Paused(_));
        let wait = match passage {
            Passage::Open => return Ok(None),
            Passage::Throttled(throttled) => return Err(HeldBack::Throttled(throttled)),
            Passage::Probe(turn) => {
                self.turn = Some(turn);
                return Ok(None);
            }
            Passage::Paused(left) => left.saturating_add(self.spread()),
            Passage::Probing => self.spread().max(MIN_LOOK_AGAIN),
        };
        // Only the wait for a pause's end counts towards the most a call
        // waits on pauses: a probe of this process's own in flight ends
        // with its answer, and nothing outside the process can renew it.
        let paused_wait = match for_pause {
            true => self.paused_for(wait),
            false => Some(self.paused_wait),
        };
        let own_choice = extensions.get::<ReturnIfPaused>().is_some();
        let Some(paused_wait) = paused_wait.filter(|_| !own_choice) else {
            return Err(HeldBack::Paused(HostPaused::new(wait, self.attempts)));
        };
        if steps::fits_deadline(self.spent(), wait).is_err() {
            return Err(HeldBack::Paused(HostPaused::new(wait, self.attempts)));
        }
        self.paused_wait = paused_wait;
        self.total_wait = self.total_wait.saturating_add(wait);
        Ok(Some(wait))
    }

    /// What the call will have waited on its host's pauses once it waits
    /// `wait` more, if that is within the most it may: the `Retry-After`
    /// cap, and one spread, for the pauses its own answers set, the ones
    /// it found and their renewals together. A pause renewed without end,
    /// or a fleet's probe claimed and never settled (by a member gone, or
    /// by anyone who can write to the store), holds a call no longer than
    /// one honoured `Retry-After` would.
    pub(super) fn paused_for(&self, wait: Duration) -> Option<Duration> {
        let config = &self.shared.config;
        let most = config.retry_after.cap().saturating_add(config.backoff.ceiling(0));
        Some(self.paused_wait.saturating_add(wait)).filter(|total| *total <= most)
    }

    /// A call's own spread after a pause, as for `Retry-After`: a random
    /// part of the first retry's backoff ceiling; all of it when waits are
    /// not spread, so that a call looking again for a probe's outcome
    /// still waits.
    fn spread(&self) -> Duration {
        let config = &self.shared.config;
        let ceiling = config.backoff.ceiling(0);
        if config.retry_after.spread() && config.backoff.jitter() != Jitter::None {
            scale(ceiling, self.shared.jitter.unit())
        } else {
            ceiling
        }
    }

    /// Takes in the pause an answer asks of its host: pauses the host that
    /// answered, or, when the attempt was the probe, settles the pause with
    /// it. Returns how the answer holds the host: a retry waits at least
    /// that long, and one that waits out a pause the server asked for is
    /// bounded by it. `head` is the answer's, if the attempt got one;
    /// `origin`, the request's host, if a copy of it was kept.
    #[inline]
    pub(super) fn pause_host(
        &mut self,
        retryable: Option<&Retryable>,
        head: Option<Head<'_>>,
        (outcome, origin): (&Ended<E>, Option<Origin<'_>>),
    ) -> Held {
        if self.turn.is_none() && !steps::may_pause(&self.shared.config, retryable, head) {
            return Held::No;
        }
        self.settle_pause(retryable, head, (outcome, origin))
    }

    /// [`pause_host`](Self::pause_host), for an answer that may pause its
    /// host or an attempt that was the probe.
    #[cold]
    fn settle_pause(
        &mut self,
        retryable: Option<&Retryable>,
        head: Option<Head<'_>>,
        (outcome, origin): (&Ended<E>, Option<Origin<'_>>),
    ) -> Held {
        let Some(ledger) = self.shared.ledger.as_deref() else { return Held::No };
        let clock = &*self.shared.clock;
        let config = &self.shared.config;
        let asked = steps::pause_asked(config, retryable, head, || clock.wall_time());
        let now = clock.now();
        if let Some(turn) = self.turn.take() {
            // A probe refused again with no time named (or none honoured)
            // holds the host for a backoff step, so that the calls waiting
            // do not all go to a server still refusing; its own retry waits
            // that step too.
            let refused = steps::may_pause(config, retryable, head);
            let step = refused.then(|| config.backoff.ceiling(0));
            ledger.settle(turn, asked, step, now);
            return match (asked, step) {
                (Some(_), _) => Held::Paused,
                (None, Some(step)) => Held::Probe(step),
                (None, None) => Held::No,
            };
        }
        // The host that answered: the last hop's, after a redirect, where
        // the outcome names one; else the request's, by its copy or the
        // entry the call holds.
        let held = self.host.as_ref().map(HostHandle::origin);
        let answered = outcome.as_ref().ok().and(E::answered(outcome).or(origin).or(held));
        match (asked, answered) {
            (Some(asked), Some(host)) if ledger.pause(&host, asked, now) => Held::Paused,
            _ => Held::No,
        }
    }
}

/// How an answer holds its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// Not at all.
    No,
    /// Paused for the time the server asked, which the retry waits.
    Paused,
    /// A refused probe holds the host for this backoff step.
    Probe(Duration),
}

impl Held {
    /// The least a retry after the answer waits.
    pub(super) fn floor(self) -> Duration {
        match self {
            Held::Probe(step) => steps::whole_millis(step),
            Held::No | Held::Paused => Duration::ZERO,
        }
    }
}
