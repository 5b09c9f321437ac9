//! What [`HedgeMiddleware`](crate::hedge::HedgeMiddleware) tells the caller.

use std::sync::{Arc, Mutex};

use reqwest::Response;

/// How a hedged call went: copies sent, and which one's outcome was
/// returned.
///
/// [`HedgeMiddleware`](crate::hedge::HedgeMiddleware) puts it in the extensions of
/// the response it returns, and into a [`HedgeSlot`] the caller attached,
/// which also works when the outcome is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HedgeReport {
    /// Copies sent, counting the first: 1 when no hedge was sent.
    pub copies: u32,
    /// The copy whose outcome was returned, from 1 (the first) in the order
    /// they were sent.
    pub winner: u32,
}

impl HedgeReport {
    /// The report in `response`'s extensions, if a hedge middleware left
    /// one.
    pub fn from_response(response: &Response) -> Option<Self> {
        response.extensions().get::<Self>().copied()
    }
}

/// A place for [`HedgeMiddleware`](crate::hedge::HedgeMiddleware) to leave the
/// [`HedgeReport`] of one request, whatever the outcome: attach a clone as an
/// extension, keep the original, read it after the call.
///
/// ```no_run
/// use reqwest_safe_retry::hedge::{HedgeMiddleware, HedgeSlot};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(HedgeMiddleware::default())
///     .build();
/// let slot = HedgeSlot::new();
/// let result = client.get("http://127.0.0.1:9/").with_extension(slot.clone()).send().await;
/// if let Some(report) = slot.get() {
///     println!("{} copies, copy {} answered", report.copies, report.winner);
/// }
/// # let _ = result;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct HedgeSlot {
    report: Arc<Mutex<Option<HedgeReport>>>,
}

impl HedgeSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// The report, once the request has finished.
    pub fn get(&self) -> Option<HedgeReport> {
        *self.report.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn set(&self, report: HedgeReport) {
        *self.report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(report);
    }
}
