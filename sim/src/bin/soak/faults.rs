//! The faults: what a handler does with a request, written into the URL's
//! path, so that a server needs no script of its own and any listener can
//! play any call.
//!
//! A path is `/p/STEP/STEP/...` for the URL a caller asked for, and
//! `/h/STEP/...` for the hop a redirect leads to. The handler plays the first
//! step; a redirect sends the client on with the steps after it. A step that
//! fails does so for the first `n` requests of the call that reach that
//! handler with that method, then answers 200, so retries can get through:
//!
//! | step | plays |
//! |---|---|
//! | `ok` | 200 with a small body |
//! | `st-CODE-N-RA` | status CODE (503 or 429), `Retry-After: RA` (`n` for none) |
//! | `reset-N` | reads the request, then resets the connection (linger 0) |
//! | `stall-N-c` / `stall-N-l` | the head and part of a chunked / sized body, then nothing |
//! | `trickle-N-MS-BYTES` | a sized body, one byte every MS milliseconds |
//! | `slow-N-MS` | answers 200 only after MS milliseconds |
//! | `rd-CODE-same` / `-other` / `-refused` | a redirect to the rest of the path on the same listener, on another, or where nothing listens |
//! | `rd-303-back` | a 303 back to this very URL, where a request that follows it (it has a `Referer`) is served the rest of the path |
//! | `loop-CODE-N` | a redirect to this very URL, N times, then 200 (above 10: too many redirects) |
//!
//! A call whose first hop is a port where nothing listens is planned by the
//! traffic, not here: it has no handler.

use rand::RngExt;
use rand::rngs::StdRng;

/// Where a redirect leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The same listener, at the rest of the path.
    Same,
    /// Another live listener, at the rest of the path.
    Other,
    /// A port on loopback where nothing listens.
    Refused,
    /// This very URL (a 303 only: the request comes back as a GET).
    Back,
}

/// One step of a path, as the handler plays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Ok,
    Status { code: u16, times: u32, retry_after: Option<u32> },
    Reset { times: u32 },
    Stall { times: u32, chunked: bool },
    Trickle { times: u32, every_ms: u64, bytes: usize },
    Slow { times: u32, ms: u64 },
    Redirect { code: u16, to: Target },
    Loop { code: u16, times: u32 },
}

impl Step {
    /// Parses one path segment.
    pub(crate) fn parse(segment: &str) -> Option<Step> {
        let mut parts = segment.split('-');
        let name = parts.next()?;
        let mut number = || parts.next().and_then(|p| p.parse::<u64>().ok());
        let step = match name {
            "ok" => Step::Ok,
            "st" => {
                let code = u16::try_from(number()?).ok()?;
                let times = u32::try_from(number()?).ok()?;
                let retry_after = number().and_then(|ra| u32::try_from(ra).ok());
                Step::Status { code, times, retry_after }
            }
            "reset" => Step::Reset { times: u32::try_from(number()?).ok()? },
            "stall" => {
                let times = u32::try_from(number()?).ok()?;
                Step::Stall { times, chunked: segment.ends_with("-c") }
            }
            "trickle" => {
                let times = u32::try_from(number()?).ok()?;
                let every_ms = number()?;
                let bytes = usize::try_from(number()?).ok()?;
                Step::Trickle { times, every_ms, bytes }
            }
            "slow" => {
                let times = u32::try_from(number()?).ok()?;
                Step::Slow { times, ms: number()? }
            }
            "rd" => {
                let code = u16::try_from(number()?).ok()?;
                let to = match segment.rsplit('-').next()? {
                    "same" => Target::Same,
                    "other" => Target::Other,
                    "refused" => Target::Refused,
                    "back" => Target::Back,
                    _ => return None,
                };
                Step::Redirect { code, to }
            }
            "loop" => {
                let code = u16::try_from(number()?).ok()?;
                Step::Loop { code, times: u32::try_from(number()?).ok()? }
            }
            _ => return None,
        };
        Some(step)
    }

    /// The step as a path segment.
    fn segment(self) -> String {
        match self {
            Step::Ok => "ok".to_owned(),
            Step::Status { code, times, retry_after } => {
                let ra = retry_after.map_or("n".to_owned(), |ra| ra.to_string());
                format!("st-{code}-{times}-{ra}")
            }
            Step::Reset { times } => format!("reset-{times}"),
            Step::Stall { times, chunked } => {
                format!("stall-{times}-{}", if chunked { "c" } else { "l" })
            }
            Step::Trickle { times, every_ms, bytes } => {
                format!("trickle-{times}-{every_ms}-{bytes}")
            }
            Step::Slow { times, ms } => format!("slow-{times}-{ms}"),
            Step::Redirect { code, to } => {
                let to = match to {
                    Target::Same => "same",
                    Target::Other => "other",
                    Target::Refused => "refused",
                    Target::Back => "back",
                };
                format!("rd-{code}-{to}")
            }
            Step::Loop { code, times } => format!("loop-{code}-{times}"),
        }
    }
}

/// What a handler does with the request in hand: the step played for the
/// `receipt`-th request of a call that reached it with this method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Play {
    Answer {
        code: u16,
        retry_after: Option<u32>,
    },
    Reset,
    Stall {
        chunked: bool,
    },
    Trickle {
        every_ms: u64,
        bytes: usize,
    },
    Slow {
        ms: u64,
    },
    Redirect {
        code: u16,
        to: Target,
    },
    /// A redirect to this very URL.
    Loop {
        code: u16,
    },
}

impl Play {
    /// The play of `step` for the `receipt`-th request (from 1).
    pub(crate) fn of(step: Step, receipt: u32) -> Play {
        let ok = Play::Answer { code: 200, retry_after: None };
        match step {
            Step::Ok => ok,
            Step::Status { code, times, retry_after } if receipt <= times => {
                Play::Answer { code, retry_after }
            }
            Step::Reset { times } if receipt <= times => Play::Reset,
            Step::Stall { times, chunked } if receipt <= times => Play::Stall { chunked },
            Step::Trickle { times, every_ms, bytes } if receipt <= times => {
                Play::Trickle { every_ms, bytes }
            }
            Step::Slow { times, ms } if receipt <= times => Play::Slow { ms },
            Step::Redirect { code, to } => Play::Redirect { code, to },
            Step::Loop { code, times } if receipt <= times => Play::Loop { code },
            _ => ok,
        }
    }

    /// Whether the server may have acted on the request: anything but a
    /// 429, as `tests/properties.rs` counts it. A redirect, a reset after
    /// the request was read, a stalled or slow answer all count.
    pub(crate) fn processed(self) -> bool {
        !matches!(self, Play::Answer { code: 429, .. })
    }

    /// The fault's name in the printed table.
    pub(crate) fn kind(self) -> Kind {
        match self {
            Play::Answer { code: 503, retry_after: None } => Kind::Busy,
            Play::Answer { code: 503, retry_after: Some(_) } => Kind::BusyRetryAfter,
            Play::Answer { code: 429, .. } => Kind::TooMany,
            Play::Answer { .. } => Kind::Answer,
            Play::Reset => Kind::Reset,
            Play::Stall { .. } => Kind::Stall,
            Play::Trickle { .. } => Kind::Trickle,
            Play::Slow { .. } => Kind::Slow,
            Play::Redirect { to: Target::Same, .. } => Kind::RedirectSame,
            Play::Redirect { to: Target::Other, .. } => Kind::RedirectOther,
            Play::Redirect { to: Target::Refused, .. } => Kind::RedirectRefused,
            Play::Redirect { to: Target::Back, .. } => Kind::RedirectBack,
            Play::Loop { .. } => Kind::Loop,
        }
    }
}

/// The faults as the servers count them, in the order of [`Kind::ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Answer,
    Busy,
    BusyRetryAfter,
    TooMany,
    Reset,
    Stall,
    Trickle,
    Slow,
    RedirectSame,
    RedirectOther,
    RedirectRefused,
    RedirectBack,
    Loop,
}

impl Kind {
    pub(crate) const ALL: [Kind; 13] = [
        Kind::Answer,
        Kind::Busy,
        Kind::BusyRetryAfter,
        Kind::TooMany,
        Kind::Reset,
        Kind::Stall,
        Kind::Trickle,
        Kind::Slow,
        Kind::RedirectSame,
        Kind::RedirectOther,
        Kind::RedirectRefused,
        Kind::RedirectBack,
        Kind::Loop,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Answer => "answered (200 or other)",
            Kind::Busy => "503, no Retry-After",
            Kind::BusyRetryAfter => "503 with Retry-After",
            Kind::TooMany => "429 with Retry-After",
            Kind::Reset => "reset after reading",
            Kind::Stall => "stalled body",
            Kind::Trickle => "trickling body",
            Kind::Slow => "slower than the attempt timeout",
            Kind::RedirectSame => "redirect, same host",
            Kind::RedirectOther => "redirect, other host",
            Kind::RedirectRefused => "redirect, to a refused port",
            Kind::RedirectBack => "303 back to the same URL",
            Kind::Loop => "redirect loop (to itself)",
        }
    }
}

/// A redirect status, any of the five.
fn redirect_code(rng: &mut StdRng) -> u16 {
    [301, 302, 303, 307, 308][rng.random_range(0..5)]
}

/// A step that leads nowhere else.
fn terminal(rng: &mut StdRng, attempt_timeout_ms: u64) -> Step {
    let times = rng.random_range(1..=3);
    match rng.random_range(0..100) {
        0..25 => Step::Ok,
        25..35 => Step::Status { code: 503, times, retry_after: None },
        35..43 => {
            // 0 or 1 s: within a deadline; 120 s: above the cap, handed back.
            let retry_after = [0, 1, 1, 120][rng.random_range(0..4)];
            Step::Status { code: 503, times, retry_after: Some(retry_after) }
        }
        43..55 => {
            let retry_after = [0, 1, 1, 120][rng.random_range(0..4)];
            Step::Status { code: 429, times, retry_after: Some(retry_after) }
        }
        55..65 => Step::Reset { times },
        65..73 => Step::Stall { times, chunked: rng.random_bool(0.5) },
        73..83 => {
            // 24 bytes at 5 or 8 ms a byte end within a 300 ms attempt;
            // at 20 ms a byte they do not.
            let every_ms = [5, 8, 20][rng.random_range(0..3)];
            Step::Trickle { times, every_ms, bytes: 24 }
        }
        _ => {
            let ms = attempt_timeout_ms + rng.random_range(50..300);
            Step::Slow { times, ms }
        }
    }
}

/// A redirect step, to where it leads.
fn redirect(rng: &mut StdRng) -> Step {
    let to = match rng.random_range(0..10) {
        0..4 => Target::Same,
        4..8 => Target::Other,
        _ => Target::Refused,
    };
    Step::Redirect { code: redirect_code(rng), to }
}

/// The path of a call's first hop: a random mix of every fault, with
/// chains of up to two redirects.
pub(crate) fn plan(rng: &mut StdRng, attempt_timeout_ms: u64) -> String {
    let mut steps = Vec::new();
    match rng.random_range(0..100) {
        0..70 => {}
        70..82 => steps.push(redirect(rng)),
        82..88 => {
            steps.push(redirect(rng));
            steps.push(redirect(rng));
        }
        88..92 => steps.push(Step::Redirect { code: 303, to: Target::Back }),
        _ => {
            // Ends within the 10 redirects followed, or does not.
            let times = [1, 3, 12][rng.random_range(0..3)];
            steps.push(Step::Loop { code: redirect_code(rng), times });
        }
    }
    // A redirect to a refused port has no handler after it.
    if !matches!(steps.last(), Some(Step::Redirect { to: Target::Refused, .. })) {
        steps.push(terminal(rng, attempt_timeout_ms));
    }
    let mut path = "/p".to_owned();
    for step in steps {
        path.push('/');
        path.push_str(&step.segment());
    }
    path
}
