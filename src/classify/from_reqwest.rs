//! The reqwest adapter's reading of its errors: the signs only
//! `reqwest::Error` gives, and the error that is this request's own when
//! an inner middleware wrapped it.

use std::error::Error as StdError;

use super::{Failure, Signs, body_failure, failure, sources};

/// What a failed attempt of the request to `url` says about it.
pub(crate) fn failure_of(error: &reqwest_middleware::Error, url: Option<&reqwest::Url>) -> Failure {
    let Some(error) = reqwest_error(error, url) else { return Failure::Final };
    let signs = Signs {
        connect: error.is_connect(),
        timeout: error.is_timeout(),
        request: error.is_request(),
    };
    failure(error, signs)
}

/// What a body that failed while the middleware read it says (see
/// [`body_failure`]); only reqwest's own errors are read, and another is
/// final.
pub(crate) fn body_failure_of(error: &reqwest_middleware::Error) -> Failure {
    let reqwest_middleware::Error::Reqwest(error) = error else { return Failure::Final };
    body_failure(error, error.is_timeout())
}

/// The `reqwest::Error` behind an outcome, also when an inner middleware
/// wrapped it in [`reqwest_middleware::Error::Middleware`] — but only one
/// about this request: an inner middleware may have made calls of its own
/// (an audit log, a token refresh), and their failures say nothing about
/// whether this request was processed.
fn reqwest_error<'a>(
    error: &'a reqwest_middleware::Error,
    url: Option<&reqwest::Url>,
) -> Option<&'a reqwest::Error> {
    match error {
        reqwest_middleware::Error::Reqwest(error) => Some(error),
        reqwest_middleware::Error::Middleware(error) => {
            let error: &(dyn StdError + 'static) = &**error;
            let wrapped = sources(error).find_map(|e| e.downcast_ref::<reqwest::Error>())?;
            match (wrapped.url(), url) {
                (Some(theirs), Some(ours)) if theirs != ours => None,
                _ => Some(wrapped),
            }
        }
    }
}
