//! Whether a request is safe to repeat, whatever its outcome: the second of
//! the two questions a retry asks (the first, whether the outcome may be
//! retried at all, is the classifier's). The retry middleware asks it before
//! a retry, the hedge middleware before sending a second copy; both ask it
//! here.

use http::{Extensions, HeaderMap, HeaderName, Method};

use crate::extensions::SafeToRetry;

/// Why a request may be repeated, if it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Safety {
    /// Not safe to repeat.
    Unsafe,
    /// Only its idempotency key makes it safe: a promise of the origin the
    /// key was set for (see [`crate::redirect`]).
    ByKey,
    /// An idempotent method, or [`SafeToRetry`]: safe wherever it goes.
    Safe,
}

/// Which of the three a request, by its method and headers, is: [`SafeToRetry`] among its
/// extensions, an idempotent method (as [`http::Method::is_idempotent`]
/// says), or a value of `idempotency_header` that is not blank.
pub(crate) fn safety(
    (method, headers): (&Method, &HeaderMap),
    extensions: &Extensions,
    idempotency_header: &HeaderName,
) -> Safety {
    if extensions.get::<SafeToRetry>().is_some() || method.is_idempotent() {
        return Safety::Safe;
    }
    let key = headers.get(idempotency_header);
    match key.is_some_and(|key| key.as_bytes().iter().any(|b| !b.is_ascii_whitespace())) {
        true => Safety::ByKey,
        false => Safety::Unsafe,
    }
}
