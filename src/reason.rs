//! Decisions as values: what may be retried, what the middleware did after an
//! attempt, and why.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

/// How far an outcome may be retried, before the request's safety is weighed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retryability {
    /// Final: return it to the caller.
    Never,
    /// Retry only if the request is safe to repeat (idempotent method or an
    /// idempotency key): the server may already have done the work.
    WhenSafe,
    /// Retry whatever the method: the server provably did not act on the
    /// request (it was never delivered, or the server refused it up front).
    AnyMethod,
}

/// Why an outcome was considered worth retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryReason {
    /// The server answered with a status in the retryable set.
    Status(StatusCode),
    /// The connection could not be established (refused, unreachable, connect
    /// timeout, a TLS handshake the peer cut off): the server never saw the
    /// request.
    NotConnected,
    /// The connection closed before the request was written, and the HTTP
    /// stack handed the request back unsent.
    NotSent,
    /// HTTP/2 REFUSED_STREAM or a graceful GOAWAY: the server did not process
    /// the request.
    RefusedStream,
    /// The request was sent but no response came in time, or (with
    /// response buffering) its body stopped arriving.
    Timeout,
    /// The connection broke after the request was sent (reset, closed early,
    /// incomplete response).
    ConnectionLost,
    /// A custom predicate asked for the retry.
    Custom,
}

/// Why the middleware stopped and handed the last outcome to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// No rule retries the outcome: a success, or a failure that retrying
    /// will not fix (404, 500 by default, a TLS error, ...).
    NothingToRetry,
    /// The outcome was retryable, but the request is not safe to repeat: its
    /// method is not idempotent and it carries no idempotency key.
    NotSafe,
    /// Every allowed retry was used.
    RetriesExhausted,
    /// The body cannot be cloned (a stream), so the request was sent once.
    NotReplayable,
    /// The server's `Retry-After` asked for longer than the [`RetryAfter`](crate::RetryAfter) cap.
    RetryAfterTooLong(Duration),
    /// The deadline left no time for another wait and attempt, or passed
    /// while an attempt was in flight.
    DeadlineExceeded,
    /// The retry budget for this host is spent.
    BudgetExhausted,
    /// The host is paused at its server's request and the call did not
    /// wait: its deadline would pass first, or it carries `ReturnIfPaused`.
    /// See [`RetryAfter::with_pause`](crate::RetryAfter::with_pause).
    HostPaused,
    /// The host has been turning most requests away and the call's first
    /// attempt was kept back, unsent: the call's error is the `rate_limit`
    /// module's `Throttled`.
    Throttled,
    /// A retry was due, but the service below a tower layer failed to
    /// become ready for it: the call's error is the service's (see the
    /// `tower` module).
    ServiceFailed,
}

/// What the middleware does after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Wait `after`, then send the request again.
    Retry {
        /// How long to wait first.
        after: Duration,
        /// Why the outcome was retryable.
        reason: RetryReason,
    },
    /// Return the outcome to the caller.
    Stop(StopReason),
}

impl fmt::Display for RetryReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryReason::Status(status) => write!(f, "status {}", status.as_u16()),
            RetryReason::NotConnected => f.write_str("connection not established"),
            RetryReason::NotSent => f.write_str("request not sent"),
            RetryReason::RefusedStream => f.write_str("stream refused by the server"),
            RetryReason::Timeout => f.write_str("timed out"),
            RetryReason::ConnectionLost => f.write_str("connection lost"),
            RetryReason::Custom => f.write_str("custom predicate"),
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::NothingToRetry => f.write_str("nothing to retry"),
            StopReason::NotSafe => f.write_str("request not safe to repeat"),
            StopReason::RetriesExhausted => f.write_str("retries exhausted"),
            StopReason::NotReplayable => f.write_str("body cannot be replayed"),
            // Not "retry-after": the wait may come from `retry-after-ms`, a
            // rate-limit header or a predicate.
            StopReason::RetryAfterTooLong(d) => {
                write!(f, "the server asked for a wait of {d:?}, over the cap")
            }
            StopReason::DeadlineExceeded => f.write_str("deadline reached"),
            StopReason::BudgetExhausted => f.write_str("retry budget exhausted"),
            StopReason::HostPaused => f.write_str("host paused at its server's request"),
            StopReason::Throttled => {
                f.write_str("throttled: not sent to a host turning requests away")
            }
            StopReason::ServiceFailed => f.write_str("the service failed before a retry"),
        }
    }
}

impl RetryReason {
    /// A stable, low-cardinality label for metrics and logs: `status`,
    /// `not_connected`, `not_sent`, `refused_stream`, `timeout`,
    /// `connection_lost` or `custom`. The status code is not in it; read it
    /// from [`RetryReason::Status`] if you want it as a label of its own.
    pub fn as_str(&self) -> &'static str {
        match self {
            RetryReason::Status(_) => "status",
            RetryReason::NotConnected => "not_connected",
            RetryReason::NotSent => "not_sent",
            RetryReason::RefusedStream => "refused_stream",
            RetryReason::Timeout => "timeout",
            RetryReason::ConnectionLost => "connection_lost",
            RetryReason::Custom => "custom",
        }
    }
}

impl StopReason {
    /// A stable, low-cardinality label for metrics and logs:
    /// `nothing_to_retry`, `not_safe`, `retries_exhausted`, `not_replayable`,
    /// `retry_after_too_long`, `deadline_exceeded`, `budget_exhausted`,
    /// `host_paused` or `throttled`. No duration is ever part of it.
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::NothingToRetry => "nothing_to_retry",
            StopReason::NotSafe => "not_safe",
            StopReason::RetriesExhausted => "retries_exhausted",
            StopReason::NotReplayable => "not_replayable",
            StopReason::RetryAfterTooLong(_) => "retry_after_too_long",
            StopReason::DeadlineExceeded => "deadline_exceeded",
            StopReason::BudgetExhausted => "budget_exhausted",
            StopReason::HostPaused => "host_paused",
            StopReason::Throttled => "throttled",
            StopReason::ServiceFailed => "service_failed",
        }
    }
}

impl fmt::Display for Retryability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Retryability::Never => "final",
            Retryability::WhenSafe => "retryable when safe to repeat",
            Retryability::AnyMethod => "retryable for any method",
        })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Retry { after, reason } => write!(f, "retry after {after:?} ({reason})"),
            Decision::Stop(reason) => write!(f, "stop ({reason})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_read_as_sentences() {
        let retry = Decision::Retry {
            after: Duration::from_millis(250),
            reason: RetryReason::Status(StatusCode::SERVICE_UNAVAILABLE),
        };
        assert_eq!(retry.to_string(), "retry after 250ms (status 503)");
        let stop = Decision::Stop(StopReason::NotSafe);
        assert_eq!(stop.to_string(), "stop (request not safe to repeat)");
    }

    #[test]
    fn retryability_reads_as_a_phrase() {
        let all = [Retryability::Never, Retryability::WhenSafe, Retryability::AnyMethod];
        let text: Vec<String> = all.iter().map(ToString::to_string).collect();
        assert_eq!(text, ["final", "retryable when safe to repeat", "retryable for any method"]);
    }

    /// One of each reason.
    const REASONS: [RetryReason; 7] = [
        RetryReason::Status(StatusCode::BAD_GATEWAY),
        RetryReason::NotConnected,
        RetryReason::NotSent,
        RetryReason::RefusedStream,
        RetryReason::Timeout,
        RetryReason::ConnectionLost,
        RetryReason::Custom,
    ];

    #[test]
    fn metric_labels_are_stable_and_distinct() {
        let retry: Vec<&str> = REASONS.iter().map(RetryReason::as_str).collect();
        assert_eq!(
            retry,
            [
                "status",
                "not_connected",
                "not_sent",
                "refused_stream",
                "timeout",
                "connection_lost",
                "custom"
            ]
        );
        let stop: Vec<&str> = [
            StopReason::NothingToRetry,
            StopReason::NotSafe,
            StopReason::RetriesExhausted,
            StopReason::NotReplayable,
            StopReason::RetryAfterTooLong(Duration::from_secs(90)),
            StopReason::DeadlineExceeded,
            StopReason::BudgetExhausted,
            StopReason::HostPaused,
            StopReason::Throttled,
            StopReason::ServiceFailed,
        ]
        .iter()
        .map(StopReason::as_str)
        .collect();
        assert_eq!(
            stop,
            [
                "nothing_to_retry",
                "not_safe",
                "retries_exhausted",
                "not_replayable",
                "retry_after_too_long",
                "deadline_exceeded",
                "budget_exhausted",
                "host_paused",
                "throttled",
                "service_failed",
            ]
        );
        // The same label whatever the duration: no durations in labels.
        assert_eq!(
            StopReason::RetryAfterTooLong(Duration::from_secs(1)).as_str(),
            StopReason::RetryAfterTooLong(Duration::MAX).as_str()
        );
    }

    #[test]
    fn every_label_is_distinct() {
        let labels: Vec<String> =
            [Retryability::Never, Retryability::WhenSafe, Retryability::AnyMethod]
                .iter()
                .map(ToString::to_string)
                .chain(
                    [
                        RetryReason::Status(StatusCode::BAD_GATEWAY),
                        RetryReason::NotConnected,
                        RetryReason::NotSent,
                        RetryReason::RefusedStream,
                        RetryReason::Timeout,
                        RetryReason::ConnectionLost,
                        RetryReason::Custom,
                    ]
                    .iter()
                    .map(ToString::to_string),
                )
                .collect();
        assert_eq!(
            labels[..3],
            ["final", "retryable when safe to repeat", "retryable for any method"]
        );
        let mut unique = labels.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), labels.len(), "{labels:?}");
    }

    #[test]
    fn a_wait_over_the_cap_is_named_by_its_length_not_by_one_header() {
        let stop = StopReason::RetryAfterTooLong(std::time::Duration::from_secs(3600));
        assert_eq!(stop.to_string(), "the server asked for a wait of 3600s, over the cap");
    }
}
