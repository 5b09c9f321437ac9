//! The arithmetic of a wait: pure functions of the retry number, the
//! bounds, the previous wait and a random unit in `[0, 1]`, which no input
//! makes panic. The fuzz target `backoff` compiles this very file.

use std::time::Duration;

use super::Jitter;

/// The exponential ceiling for retry `retry` (0 for the first retry):
/// `min(max, initial × 2^retry)`, without overflow for any input.
pub(crate) fn ceiling(initial: Duration, max: Duration, retry: u32) -> Duration {
    let factor = match 1u32.checked_shl(retry) {
        Some(factor) => factor,
        None if initial.is_zero() => return Duration::ZERO,
        None => return max,
    };
    initial.checked_mul(factor).map_or(max, |d| d.min(max))
}

/// Scales `d` by `unit` (clamped to `[0, 1]`; NaN counts as 0) without
/// floating-point rounding past `d`, so the result never exceeds `d`.
pub(crate) fn scale(d: Duration, unit: f64) -> Duration {
    let unit = if unit.is_nan() { 0.0 } else { unit.clamp(0.0, 1.0) };
    // 2^32 steps of resolution is far finer than a nanosecond matters here.
    let steps = (unit * 4_294_967_296.0) as u128;
    // At most 2^64 s in nanoseconds (below 2^95) times 2^32: within a u128.
    let nanos = d.as_nanos().saturating_mul(steps) >> 32;
    nanos_to_duration(nanos)
}

fn nanos_to_duration(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos.checked_div(NANOS_PER_SEC).unwrap_or(0)).unwrap_or(u64::MAX);
    let subsec = nanos.checked_rem(NANOS_PER_SEC).unwrap_or(0) as u32;
    Duration::new(secs, subsec)
}

/// The wait before retry `retry` (0 for the first retry).
///
/// `previous` is the wait chosen before the last retry (or `initial` before
/// the first); only [`Jitter::Decorrelated`] reads it. `unit` is a random
/// value in `[0, 1]`. The result never exceeds `max`.
pub(crate) fn backoff(
    jitter: Jitter,
    initial: Duration,
    max: Duration,
    retry: u32,
    previous: Duration,
    unit: f64,
) -> Duration {
    match jitter {
        Jitter::Full => scale(ceiling(initial, max, retry), unit),
        Jitter::Equal => {
            let ceiling = ceiling(initial, max, retry);
            let half = ceiling.checked_div(2).unwrap_or(ceiling);
            // `ceiling - half` keeps the odd nanosecond, so the top is the ceiling.
            half.saturating_add(scale(ceiling.saturating_sub(half), unit))
        }
        Jitter::Decorrelated => {
            let low = initial.min(max);
            let high = previous.saturating_mul(3).min(max).max(low);
            low.saturating_add(scale(high.saturating_sub(low), unit))
        }
        // `Jitter::None`, spelt as a wildcard so that the fuzz target, which
        // compiles this file outside the crate, can match the non-exhaustive
        // enum: a kind added later must get an arm above.
        _ => ceiling(initial, max, retry),
    }
}
