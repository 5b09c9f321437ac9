//! The steps of a decision after a failed attempt, each a plain function of
//! what it needs: whether the outcome may be retried at all, whether this
//! request may be repeated now, how long to wait, and whether the wait fits
//! the deadline. The budget, the last step, is the call's
//! [`Lease`](crate::budget::Lease).

use std::time::{Duration, SystemTime};

use http::StatusCode;

use crate::backoff::{Jitter, scale};
use crate::classify::{self, Failure, Reach};
use crate::config::RetryConfig;
use crate::deadline::MIN_ATTEMPT;
use crate::exchange::{Ended, Exchange};
use crate::head::Head;
use crate::jitter::JitterSource;
use crate::predicate::Wait;
use crate::reason::{RetryReason, StopReason};
use crate::retry_after::RetryAfterOverCap;

/// An outcome that may be retried: how far, why, and whose wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Retryable {
    pub(super) reach: Reach,
    pub(super) reason: RetryReason,
    pub(super) wait: Wait,
}

/// Step one: the predicate's verdict on the outcome if it gives one, else
/// the built-in rules' on what the attempt came back with (`came`). `None`:
/// the outcome is final. `number` is the attempt's.
#[inline]
pub(super) fn classify<E: Exchange>(
    config: &RetryConfig,
    request: Option<&E::Request>,
    number: u32,
    outcome: &Ended<E>,
    came: Result<Head<'_>, Failure>,
) -> Option<Retryable> {
    if let Some(verdict) = request.and_then(|request| E::verdict(config, request, number, outcome))
    {
        let reach = Reach::of(verdict.retryability())?;
        return Some(Retryable { reach, reason: RetryReason::Custom, wait: verdict.source() });
    }
    built_in(config, came)
}

/// What an attempt of `request` (the copy kept, if one was) came back
/// with, in no client's terms: the answer's head, or what its failure says
/// (`body_failed`: the error its answer's body failed with while the
/// adapter read it).
#[inline]
pub(super) fn came<'a, E: Exchange>(
    outcome: &'a Ended<E>,
    request: Option<&E::Request>,
    body_failed: bool,
) -> Result<Head<'a>, Failure> {
    match outcome {
        Ok(response) => Ok(E::head(response)),
        Err(error) => Err(E::failure(error, request, body_failed)),
    }
}

/// Step one's built-in rules, for an answer by its head and for a failed
/// attempt by what its failure says.
pub(super) fn built_in(config: &RetryConfig, came: Result<Head<'_>, Failure>) -> Option<Retryable> {
    let (reach, reason) = match came {
        Ok(head) => classify_response(config, head),
        Err(failure) => failure.class(),
    }?;
    Some(Retryable { reach, reason, wait: Wait::Policy })
}

/// Step one for a response: the server's word on its own answer first
/// (its hint), then a 403 the settings take as a rate limit, weighed as a
/// 429, then the status.
fn classify_response(config: &RetryConfig, head: Head<'_>) -> classify::Class {
    let Head { status, headers } = head;
    let hint = config.retry_after.should_retry(status, headers);
    if hint == Some(false) {
        return None;
    }
    let statuses = (&config.retryable_statuses, config.retry_429_any_method);
    if config.retry_after.takes_as_429(status, headers) {
        let (reach, _) =
            classify::classify_status(StatusCode::TOO_MANY_REQUESTS, statuses.0, statuses.1)?;
        return Some((reach, RetryReason::Status(StatusCode::FORBIDDEN)));
    }
    let rules = classify::classify_status(status, statuses.0, statuses.1);
    match hint {
        Some(true) => rules.or(Some((Reach::WhenSafe, RetryReason::Status(status)))),
        _ => rules,
    }
}

/// What step two weighs: whether this request may be sent again now.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admission {
    /// The deadline has passed.
    pub(super) expired: bool,
    pub(super) reach: Reach,
    /// The request is safe to repeat: its method, a key or `SafeToRetry`.
    pub(super) safe: bool,
    /// The outcome is provably the answer to the request sent, not to a
    /// later hop of a redirect.
    pub(super) own_outcome: bool,
    /// Attempts made, and the retries allowed.
    pub(super) attempts: u32,
    pub(super) max_retries: u32,
    /// A copy of the request is kept to send.
    pub(super) replayable: bool,
}

/// Step two: the request may be repeated, in this order of reasons not
/// to: the deadline passed (whatever else is true, that is why this is the
/// end), it is not safe to, the retries are spent, or nothing is left to
/// send.
pub(super) fn admissible(a: Admission) -> Result<(), StopReason> {
    if a.expired {
        return Err(StopReason::DeadlineExceeded);
    }
    let safe_to_repeat = match a.reach {
        Reach::WhenSafe => a.safe,
        // The server did not act on the last request of the attempt; that
        // proves the attempt unprocessed only if no redirect answered it
        // first. A predicate's `AnyMethod` is held to the same proof.
        Reach::AnyMethod => a.safe || a.own_outcome,
    };
    if !safe_to_repeat {
        return Err(StopReason::NotSafe);
    }
    if a.attempts > a.max_retries {
        return Err(StopReason::RetriesExhausted);
    }
    if !a.replayable {
        return Err(StopReason::NotReplayable);
    }
    Ok(())
}

/// The wait chosen in step three.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Chosen {
    pub(super) after: Duration,
    /// The server asked for this retry and set its time: the budget does
    /// not pay for it.
    pub(super) paced: bool,
    /// The backoff picked, if the wait is one: decorrelated jitter grows
    /// the next from it.
    pub(super) backoff: Option<Duration>,
}

/// Where a wait is chosen: the settings, the randomness, which retry this
/// is (0 for the first), the backoff picked before it, and whether the
/// outcome paused its host.
pub(super) struct Pacing<'a> {
    pub(super) config: &'a RetryConfig,
    pub(super) jitter: &'a dyn JitterSource,
    pub(super) retry: u32,
    pub(super) previous: Duration,
    pub(super) paused: bool,
}

/// Step three: the wait before the retry that follows an attempt whose
/// answer had `head` (none for an error); or why there is none: the server
/// asked for more than the cap.
///
/// A wait the predicate chose is taken as it is. A wait the server asked
/// for (its `Retry-After`, or one a predicate read from another header) is
/// capped, then spread upwards: clients told the same thing come back
/// spread over this retry's backoff ceiling. Otherwise, the backoff.
pub(super) fn wait(
    pacing: &Pacing<'_>,
    retryable: Retryable,
    head: Option<Head<'_>>,
    wall_time: impl FnOnce() -> SystemTime,
) -> Result<Chosen, StopReason> {
    let config = pacing.config;
    let headers = head.map(|head| head.headers);
    let asked = match retryable.wait {
        Wait::Exactly(after) => return Ok(Chosen { after, paced: false, backoff: None }),
        Wait::Policy => headers
            .and_then(|headers| crate::retry_after::asked(&config.retry_after, headers, wall_time)),
        Wait::Asked(wait) => Some(wait),
        Wait::AskedUntil(at) => Some(crate::retry_after::until(at, headers, wall_time)),
    };
    let Some(asked) = asked else {
        let after = config.backoff.wait(pacing.retry, pacing.previous, pacing.jitter.unit());
        return Ok(Chosen { after, paced: false, backoff: Some(after) });
    };
    let rules = config.retry_after;
    let within_cap = asked <= rules.cap();
    let honoured = rules.honours(asked);
    let asked = match rules.over_cap() {
        _ if within_cap => asked,
        RetryAfterOverCap::ReturnResponse => return Err(StopReason::RetryAfterTooLong(asked)),
        RetryAfterOverCap::WaitTheCap => rules.cap(),
    };
    // The host's pause ends at the wait rounded up to a whole millisecond
    // (see `Ledger::pause`): a retry that waits it out waits as long, and
    // finds it over.
    let asked = if pacing.paused { whole_millis(asked) } else { asked };
    let spread = rules.spread() && config.backoff.jitter() != Jitter::None;
    // A retry gated by its host's pause is bounded by it, one a pause.
    let paced = pacing.paused
        || (spread && pacing.retry == 0 && honoured && refused_before_work(retryable, head));
    if !spread {
        return Ok(Chosen { after: asked, paced, backoff: None });
    }
    // The server's word is a floor, not an appointment.
    let ceiling = config.backoff.ceiling(pacing.retry);
    let after = asked.saturating_add(scale(ceiling, pacing.jitter.unit()));
    Ok(Chosen { after, paced, backoff: None })
}

/// `wait` rounded up to a whole millisecond, saturating.
pub(super) fn whole_millis(wait: Duration) -> Duration {
    let millis = wait.as_nanos().div_ceil(1_000_000);
    u64::try_from(millis).map_or(Duration::MAX, Duration::from_millis)
}

/// Whether the server turned the request away before doing any work: a
/// 429, or an answer a predicate calls `AnyMethod` while handing on the
/// server's wait. Only such an answer, on a call's first retry, with a
/// wait the server set (within the cap, above zero, spread), makes the
/// retry free of the budget:
/// - only with an answer: a predicate cannot exempt a refused connection
///   or an error;
/// - not over the cap, where the server asked for more than it gets; not
///   for an ask of zero, which sets no time (a limiter answering every
///   request so would get twice its load);
/// - only the first: a server that refuses the same call again is
///   shedding load, and further retries are paid for like any other.
fn refused_before_work(retryable: Retryable, head: Option<Head<'_>>) -> bool {
    head.is_some_and(|head| {
        head.status == StatusCode::TOO_MANY_REQUESTS
            || retryable.reason == RetryReason::Status(StatusCode::FORBIDDEN)
            || (retryable.wait != Wait::Policy && retryable.reach == Reach::AnyMethod)
    })
}

/// Whether an outcome may ask for a pause: an answer that is a `429` or
/// `503`, a `403` when rate-limit headers are read, or one a predicate
/// hands a server's wait on for. Every answer meets this test; it reads
/// no header.
#[inline]
pub(super) fn may_pause(
    config: &RetryConfig,
    retryable: Option<&Retryable>,
    head: Option<Head<'_>>,
) -> bool {
    let Some(head) = head else { return false };
    match head.status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => true,
        StatusCode::FORBIDDEN if config.retry_after.rate_limit_headers() => true,
        _ => retryable.is_some_and(|r| matches!(r.wait, Wait::Asked(_) | Wait::AskedUntil(_))),
    }
}

/// The pause an answer asks of its host, whatever follows for this call,
/// when pauses are on: the wait a predicate hands on as the server's
/// ([`Verdict::server_asked`](crate::Verdict::server_asked)), or else a
/// `429`'s or `503`'s `Retry-After`; if the settings honour it in full.
pub(super) fn pause_asked(
    config: &RetryConfig,
    retryable: Option<&Retryable>,
    head: Option<Head<'_>>,
    wall_time: impl FnOnce() -> SystemTime,
) -> Option<Duration> {
    let rules = config.retry_after;
    let Head { status, headers } = head.filter(|_| rules.pause())?;
    let asked = match retryable.map(|retryable| retryable.wait) {
        Some(Wait::Exactly(_)) => return None,
        Some(Wait::Asked(wait)) => wait,
        Some(Wait::AskedUntil(at)) => crate::retry_after::until(at, Some(headers), wall_time),
        Some(Wait::Policy) | None => {
            let limited =
                matches!(status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE)
                    || rules.takes_as_429(status, headers);
            if !limited {
                return None;
            }
            crate::retry_after::asked(&rules, headers, wall_time)?
        }
    };
    Some(asked).filter(|&asked| rules.honours(asked))
}

/// Step four: a wait must leave time to send. One that ends within
/// [`MIN_ATTEMPT`] of the deadline would trade the answer in hand for a
/// certain timeout (timers fire a little late). `spent` is how long the
/// call has taken and may take, if it has a deadline.
pub(super) fn fits_deadline(
    spent: Option<(Duration, Duration)>,
    after: Duration,
) -> Result<(), StopReason> {
    match spent {
        Some((elapsed, limit))
            if elapsed.saturating_add(after).saturating_add(MIN_ATTEMPT) > limit =>
        {
            Err(StopReason::DeadlineExceeded)
        }
        _ => Ok(()),
    }
}
