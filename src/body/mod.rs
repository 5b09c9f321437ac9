//! The bodies the middleware reads itself, each up to a limit: a streamed
//! request body, so that the request can be sent again ([`RequestBuffer`]); a final
//! response's body, so that a failure while reading it can be retried
//! ([`read_whole`]); and a retried response's body, drained during the wait so
//! that its connection can be reused ([`discard`]). And one it does not
//! read: the body of a response returned under a deadline that no timeout
//! of reqwest's carries, bounded by it ([`bounded`]).
//!
//! This code takes plain values (limits, instants, "may a retry follow")
//! and knows nothing of the policy, which decides what is read and when.

mod bounded;
mod buffering;
mod drain;
mod replay;
mod request;
mod response;

pub(crate) use bounded::bounded;
pub use buffering::BodyBuffering;
pub(crate) use drain::discard;
#[cfg(feature = "tower")]
pub(crate) use replay::Replay;
pub(crate) use request::RequestBuffer;
#[cfg(feature = "tower")]
pub(crate) use request::{Read, Reader};
pub(crate) use response::read_whole;
