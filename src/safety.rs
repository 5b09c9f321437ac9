//! Whether a request is safe to repeat, whatever its outcome: the second of
//! the two questions a retry asks (the first, whether the outcome may be
//! retried at all, is the classifier's). The retry middleware asks it before
//! a retry, the hedge middleware before sending a second copy; both ask it
//! here.

use http::{Extensions, HeaderName};
use reqwest::Request;

use crate::extensions::SafeToRetry;

/// An idempotent method (as [`http::Method::is_idempotent`] says), a value
/// of `idempotency_header` that is not blank, or [`SafeToRetry`] among the
/// request's extensions.
pub(crate) fn is_safe(
    request: &Request,
    extensions: &Extensions,
    idempotency_header: &HeaderName,
) -> bool {
    extensions.get::<SafeToRetry>().is_some()
        || request.method().is_idempotent()
        || request
            .headers()
            .get(idempotency_header)
            .is_some_and(|key| key.as_bytes().iter().any(|b| !b.is_ascii_whitespace()))
}
