//! The policy's part in a host's pause: whether a request may go to its
//! host now, and what an answer makes of the pause (see
//! [`crate::pause`]).

use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response, Url};
use reqwest_middleware::Result;

use super::Policy;
use super::steps::{self, Retryable};
use crate::backoff::{Jitter, scale};
use crate::budget::{Ledger, Passage};
use crate::rate_limit::{HostPaused, ReturnIfPaused};

/// The least a call waits before it looks again at a host whose probe is
/// in flight.
const MIN_LOOK_AGAIN: Duration = Duration::from_millis(10);

impl Policy<'_> {
    /// Whether `request` may go to its host now (`None`), or must first
    /// wait out the host's pause for the time returned, then ask again.
    /// When this request's attempt is the probe the pause's end lets
    /// through, the call holds the turn until its outcome settles it.
    ///
    /// # Errors
    ///
    /// When the call does not wait: the wait would outlast the deadline, or
    /// the request carries [`ReturnIfPaused`] (in `extensions`).
    #[inline]
    pub(crate) fn passage(
        &mut self,
        request: &Request,
        extensions: &Extensions,
    ) -> std::result::Result<Option<Duration>, HostPaused> {
        match self.shared.ledger.as_deref() {
            Some(ledger) if ledger.may_be_paused() => {
                self.wait_for_host(ledger, request, extensions)
            }
            _ => Ok(None),
        }
    }

    /// [`passage`](Self::passage), once some host may be paused.
    #[cold]
    fn wait_for_host(
        &mut self,
        ledger: &Ledger,
        request: &Request,
        extensions: &Extensions,
    ) -> std::result::Result<Option<Duration>, HostPaused> {
        let clock = &*self.shared.clock;
        let wait = match ledger.gate(request.url(), || clock.now()) {
            Passage::Open => return Ok(None),
            Passage::Probe(turn) => {
                self.turn = Some(turn);
                return Ok(None);
            }
            Passage::Paused(left) => left.saturating_add(self.spread()),
            Passage::Probing => self.spread().max(MIN_LOOK_AGAIN),
        };
        let own_choice = extensions.get::<ReturnIfPaused>().is_some();
        if own_choice || steps::fits_deadline(self.spent(), wait).is_err() {
            return Err(HostPaused::new(wait, self.attempts));
        }
        self.total_wait = self.total_wait.saturating_add(wait);
        Ok(Some(wait))
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

    /// Takes in the pause an answer asks of its host: pauses the host, or,
    /// when the attempt was the probe, settles the pause with it. Returns
    /// whether the host is paused by it.
    #[inline]
    pub(super) fn pause_host(
        &mut self,
        url: Option<&Url>,
        retryable: Option<&Retryable>,
        outcome: &Result<Response>,
    ) -> bool {
        if self.turn.is_none() && !steps::may_pause(&self.shared.config, retryable, outcome) {
            return false;
        }
        self.settle_pause(url, retryable, outcome)
    }

    /// [`pause_host`](Self::pause_host), for an answer that may pause its
    /// host or an attempt that was the probe.
    #[cold]
    fn settle_pause(
        &mut self,
        url: Option<&Url>,
        retryable: Option<&Retryable>,
        outcome: &Result<Response>,
    ) -> bool {
        let Some(ledger) = self.shared.ledger.as_deref() else { return false };
        let clock = &*self.shared.clock;
        let config = &self.shared.config;
        let asked = steps::pause_asked(config, retryable, outcome, || clock.wall_time());
        let turn = self.turn.take();
        if asked.is_none() && turn.is_none() {
            return false;
        }
        let now = clock.now();
        let until = asked.map(|asked| now.checked_add(asked).unwrap_or(now));
        match (turn, until, url.or(self.taken.as_deref())) {
            (Some(turn), _, _) => ledger.settle(turn, until, now),
            (None, Some(until), Some(url)) => ledger.pause(url, until, now),
            _ => {}
        }
        asked.is_some()
    }
}
