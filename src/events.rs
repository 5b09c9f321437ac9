//! What the middleware tells the world after each attempt: a `tracing` event
//! (feature `tracing`), and the caller's hook.
//!
//! Event fields follow OpenTelemetry's HTTP semantic conventions where one
//! exists — `http.request.method`, `http.request.resend_count`,
//! `server.address`, `error.type` — and say the rest plainly: `attempt`,
//! `retry.reason` or `retry.stop` (the stable labels of
//! [`RetryReason::as_str`](crate::report::RetryReason::as_str) and
//! [`StopReason::as_str`](crate::report::StopReason::as_str)), `wait_ms`. Headers,
//! bodies, paths and queries are never logged.

use http::Method;

use crate::reason::Decision;
use crate::report::RetryEvent;
use crate::shared::Shared;

/// The host to name in events, read and copied only when an event could
/// be emitted.
pub(crate) fn server<'a>(shared: &Shared, host: impl FnOnce() -> &'a str) -> Option<Box<str>> {
    #[cfg(feature = "tracing")]
    if tracing::level_enabled!(shared.log_level) {
        let host = host();
        return (!host.is_empty()).then(|| Box::from(host));
    }
    let _ = (shared, host);
    None
}

/// Emits the event for one decision, and calls the hook.
/// `resend_count` counts the requests sent before the last one, redirects
/// included.
pub(crate) fn notify(
    shared: &Shared,
    attempt: u32,
    resend_count: u32,
    (method, server): (&Method, Option<&str>),
    decision: Decision,
) {
    #[cfg(feature = "tracing")]
    if !first_and_final(attempt, decision) {
        emit(
            shared.log_level,
            (attempt, resend_count),
            method,
            server.unwrap_or_default(),
            decision,
        );
    }
    let _ = server;
    if let Some(hook) = &shared.hook {
        hook(&RetryEvent { attempt, resend_count, method, decision });
    }
}

/// `tracing::event!` wants its level fixed at the call site.
#[cfg(feature = "tracing")]
macro_rules! event_at {
    ($level:expr, $($rest:tt)+) => {
        match $level {
            tracing::Level::TRACE => tracing::event!(tracing::Level::TRACE, $($rest)+),
            tracing::Level::DEBUG => tracing::event!(tracing::Level::DEBUG, $($rest)+),
            tracing::Level::INFO => tracing::event!(tracing::Level::INFO, $($rest)+),
            tracing::Level::WARN => tracing::event!(tracing::Level::WARN, $($rest)+),
            _ => tracing::event!(tracing::Level::ERROR, $($rest)+),
        }
    };
}

#[cfg(feature = "tracing")]
fn emit(
    level: tracing::Level,
    (attempt, resends): (u32, u32),
    method: &Method,
    server: &str,
    decision: Decision,
) {
    match decision {
        Decision::Retry { after, reason } => {
            let error_type = match &reason {
                crate::report::RetryReason::Status(status) => status.as_str(),
                other => other.as_str(),
            };
            event_at!(
                level,
                attempt,
                http.request.method = %method,
                http.request.resend_count = resends,
                server.address = server,
                error.type = error_type,
                retry.reason = reason.as_str(),
                wait_ms = after.as_millis() as u64,
                "retrying request: {reason}"
            )
        }
        // A first answer that is final is the common case, not news.
        Decision::Stop(crate::report::StopReason::NothingToRetry) if attempt == 1 => {}
        Decision::Stop(stop) => event_at!(
            stop_level(level, stop),
            attempt,
            http.request.method = %method,
            http.request.resend_count = resends,
            server.address = server,
            retry.stop = stop.as_str(),
            "not retrying request: {stop}"
        ),
    }
}

/// A first answer that is final: the common case, not news, and no event.
#[cfg(feature = "tracing")]
#[inline]
fn first_and_final(attempt: u32, decision: Decision) -> bool {
    attempt == 1 && decision == Decision::Stop(crate::report::StopReason::NothingToRetry)
}

/// The level of the event for a stop. A final answer after retries (a
/// recovery, most often) is no warning, whatever the configured level: it
/// is logged at debug, or at trace if that is the level. Every other stop
/// gives up on a failure, at `level`.
#[cfg(feature = "tracing")]
fn stop_level(level: tracing::Level, stop: crate::report::StopReason) -> tracing::Level {
    match stop {
        crate::report::StopReason::NothingToRetry if level != tracing::Level::TRACE => {
            tracing::Level::DEBUG
        }
        _ => level,
    }
}
