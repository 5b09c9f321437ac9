//! What the caller can learn about the attempts behind a result, and where
//! the middleware leaves it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Extensions, Method};
use reqwest::Response;
use reqwest_middleware::Result;

use crate::keys::MintedKey;

pub use crate::reason::{Decision, RetryReason, StopReason};

/// How a request went: attempts made, time spent waiting, why it stopped.
///
/// Read it from the final response with [`RetryReport::from_response`], or
/// from a [`ReportSlot`] the caller attached, which also works when the final
/// outcome is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryReport {
    /// Attempts sent, counting the first.
    pub attempts: u32,
    /// Total time spent waiting between attempts.
    pub total_wait: Duration,
    /// Why the middleware returned this outcome.
    pub stop: StopReason,
    /// Redirects the client followed within the attempts, all of them
    /// counted. Only the client built by
    /// [`RetryMiddleware::client`](crate::RetryMiddleware::client) records
    /// them; through another, this is 0.
    pub redirects: u32,
    /// The idempotency key the middleware minted for the call and sent on
    /// every attempt, if it minted one
    /// ([`with_minted_keys`](crate::RetryConfigBuilder::with_minted_keys),
    /// [`MintKey`](crate::MintKey)).
    pub minted_key: Option<MintedKey>,
}

impl RetryReport {
    /// The report of the call that produced `response`.
    ///
    /// The middleware stores a report in the response's extensions only when
    /// there is something to say: the common case — one attempt, no wait,
    /// a final outcome — costs no allocation and reads as that report here.
    ///
    /// ```
    /// use reqwest_safe_retry::{report::RetryReport, report::StopReason};
    ///
    /// let response: reqwest::Response = http::Response::new("").into();
    /// let report = RetryReport::from_response(&response);
    /// assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry));
    /// ```
    pub fn from_response(response: &Response) -> Self {
        Self::from_extensions(response.extensions())
    }

    /// The report of the call whose answer has these extensions: an
    /// `http::Response`'s, as a tower stack hands it back
    /// (the `tower` module). The same as [`from_response`](Self::from_response).
    pub fn from_extensions(extensions: &http::Extensions) -> Self {
        extensions.get::<Self>().copied().unwrap_or(Self::FIRST_AND_FINAL)
    }

    /// One attempt, no wait, a final outcome: the report a response without
    /// one in its extensions stands for.
    pub(crate) const FIRST_AND_FINAL: Self = Self {
        attempts: 1,
        total_wait: Duration::ZERO,
        stop: StopReason::NothingToRetry,
        redirects: 0,
        minted_key: None,
    };

    /// Requests sent before the last one, for any reason: attempts after
    /// the first and redirects followed. OpenTelemetry's
    /// `http.request.resend_count` of the request that gave the outcome.
    /// (reqwest-retry's retry count is `attempts - 1`.)
    pub fn resend_count(&self) -> u32 {
        self.attempts.saturating_sub(1).saturating_add(self.redirects)
    }
}

/// The number of the attempt under way, for middlewares placed after this
/// one (closer to the network) to read from the request extensions: one
/// per-attempt span or metric, say.
///
/// Set from the second attempt on; absent means the first attempt, which
/// keeps the common path free of an allocation.
///
/// An attempt is one request as a middleware inside sees it; the redirects
/// the client follows within it are below every middleware. So
/// [`resend_count`](Self::resend_count), OpenTelemetry's
/// `http.request.resend_count` of the attempt's first request, counts the
/// earlier attempts *and* the redirects they met, and is `get() - 1` only
/// when they met none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptNumber {
    number: u32,
    resend_count: u32,
}

impl AttemptNumber {
    pub(crate) fn new(number: u32, resend_count: u32) -> Self {
        Self { number, resend_count }
    }

    /// The attempt under way, from 2.
    pub fn get(&self) -> u32 {
        self.number
    }

    /// Requests the call sent before this attempt's first: earlier
    /// attempts and the redirects followed within them.
    pub fn resend_count(&self) -> u32 {
        self.resend_count
    }
}

/// A place for the middleware to leave the [`RetryReport`] of one request,
/// readable by the caller whatever the outcome.
///
/// Attach a clone to the request as an extension and keep the original:
///
/// ```no_run
/// use reqwest_safe_retry::{report::ReportSlot, RetryConfig, RetryMiddleware};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(RetryConfig::default()))
///     .build();
/// let slot = ReportSlot::new();
/// let result = client.get("http://127.0.0.1:9/").with_extension(slot.clone()).send().await;
/// if let Some(report) = slot.get() {
///     println!("{} attempts, stopped: {}", report.attempts, report.stop);
/// }
/// # let _ = result;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ReportSlot {
    report: Arc<Mutex<Option<RetryReport>>>,
}

impl ReportSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// The report, once the request has finished.
    pub fn get(&self) -> Option<RetryReport> {
        *self.report.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn set(&self, report: RetryReport) {
        *self.report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(report);
    }
}

/// What the middleware decided after one attempt, as a hook sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RetryEvent<'a> {
    /// The attempt just made, starting at 1; 0 when the deadline passed
    /// before anything was sent.
    pub attempt: u32,
    /// Requests sent before the last one of this attempt, redirects
    /// included: OpenTelemetry's `http.request.resend_count`.
    pub resend_count: u32,
    /// The request's method.
    pub method: &'a Method,
    /// What happens next.
    pub decision: Decision,
}

/// Leaves the report where the caller can find it: in the slot, and on the
/// response; and puts back the caller's own [`AttemptNumber`] (or none).
pub(crate) fn deliver(
    extensions: &mut Extensions,
    caller: &Extensions,
    outcome: &mut Result<Response>,
    report: RetryReport,
) {
    // Only a retry set an attempt's number.
    if report.attempts > 1 {
        match caller.get::<AttemptNumber>() {
            Some(theirs) => extensions.insert(*theirs),
            None => extensions.remove::<AttemptNumber>(),
        };
    }
    if let Some(slot) = extensions.get::<ReportSlot>() {
        slot.set(report);
    }
    // Absence reads as this report (`RetryReport::from_response`), so the
    // common case allocates nothing.
    if report != RetryReport::FIRST_AND_FINAL {
        if let Ok(response) = outcome {
            response.extensions_mut().insert(report);
        }
    }
}
