//! The integration tests, in one binary: one link instead of one per file,
//! and one copy of `support`. Nothing here needs a process of its own: log
//! and span captures are per thread (`support::capture_logs`,
//! `support::interest_anchor`), the metrics recorder is per thread, and no
//! test installs a process-wide default.

mod support;

mod apis;
mod bodies;
mod budget;
#[cfg(feature = "chaos")]
mod chaos;
mod deadline;
mod docs_agree;
mod errors;
#[cfg(feature = "redis")]
mod fleet;
mod hedge;
mod interop;
mod migration;
mod observability;
mod outside;
mod pause;
mod properties;
mod redirects;
mod retry_after;
mod safety;
#[cfg(feature = "tower")]
mod tower;
mod waits;
