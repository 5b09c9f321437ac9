//! The integration tests, in one binary: one link instead of one per file,
//! and one copy of `support`. Nothing here needs a process of its own: log
//! and span captures are per thread (`support::capture_logs`,
//! `support::interest_anchor`), the metrics recorder is per thread, and no
//! test installs a process-wide default.

mod support;

mod api;
mod bad_input;
mod bodies;
mod body_read;
mod budget;
mod caller;
mod custom_clock;
mod deadline_body;
mod hedge;
mod hedge_idempotency_header;
mod interop;
mod load;
mod metrics_hook;
mod migration;
mod no_panic;
mod orders_scenarios;
mod properties;
mod real_servers;
mod real_world;
mod redirect_floor;
mod redirects;
mod reqwest_tracing;
mod rewind;
mod safety;
mod scenarios;
mod soak_findings;
mod tracing_events;
mod waits;
mod what_is_retried;
