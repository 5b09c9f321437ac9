//! Retries for [`reqwest_middleware`] that only repeat what is safe to repeat.
//!
//! # Quick start
//!
//! ```no_run
//! use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = RetryMiddleware::new(RetryConfig::default())
//!     .client(reqwest::Client::builder())?
//!     .build();
//! let response = client.get("http://127.0.0.1:8080/orders/1").send().await?;
//! # let _ = response;
//! # Ok(())
//! # }
//! ```
//!
//! # The rules, and why
//!
//! ## Only repeat what is safe to repeat
//!
//! The question after a failure is not "did it fail?" but "might it already
//! have worked?". A timeout after the request was written, a reset, a 502 from
//! a proxy: the server may have done the work and failed only to answer. So
//! those outcomes are retried only for requests that are *safe to repeat*: an
//! idempotent method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE, as
//! [`http::Method::is_idempotent`] says), or a request with a non-blank
//! `Idempotency-Key` header, which tells the server to answer a repeat with the
//! first result. A key makes a repeat safe only where the server deduplicates
//! by it; the middleware cannot tell whether it does, and a server that
//! ignores keys (GitHub's API does) does the work again. Outcomes where the server provably did nothing — a refused
//! connection, a TLS handshake the peer cut off, an HTTP/2 stream the server
//! refused, a 429 — are retried for any method, but only where the middleware
//! can know the outcome belongs to the request it sent. See [`Retryability`]
//! for the two halves of the decision.
//!
//! That proof needs the outcome to be the request's own, which it is not
//! once a redirect answered the request: a POST answered `303 See Other` has
//! been processed, and the 429 or refused connection of the next hop says
//! nothing about it — and a 303 may lead back to the very URL that was
//! POSTed. reqwest follows redirects inside the client, below every
//! middleware, so the quick start builds the client with
//! [`RetryMiddleware::client`]: the client still follows every redirect
//! itself, with all of reqwest's own protections (credentials stay with
//! their origin, the builder's `referer`, `https_only` and the request's
//! timeout hold), and a redirect policy of the crate's records each redirect
//! for the middleware. An attempt that met one is never repeated unless the
//! request is safe to repeat. A middleware put on a client by hand cannot
//! know what the client follows and stays on the safe side: a request that
//! is not safe to repeat is never retried, and a keyed one answered from
//! another origin is not retried on the strength of its key. A hop limit or filter goes to
//! [`RetryMiddleware::with_redirect_policy`]; a builder with a redirect
//! policy of its own is refused ([`ClientError::RedirectPolicySet`]) rather
//! than have it replaced.
//!
//! A key makes a repeat safe only where the server deduplicates requests by
//! it: many do (payment APIs, for a start), some ignore it, and then a
//! retried POST is done twice. Set a key only for a server that honours it.
//! For such a server the middleware can mint one per call
//! ([`RetryConfigBuilder::with_minted_keys`], or [`MintKey`] on one
//! request), sent on every attempt and named in the call's report.
//! A key is also only trusted at the origin it was sent to: after a 307 or
//! 308 took the request to another origin, it is no longer retried on the
//! strength of its key.
//!
//! ```no_run
//! # async fn run(client: reqwest_middleware::ClientWithMiddleware) -> reqwest_middleware::Result<()> {
//! // Retried on a 503: the key lets the server deduplicate.
//! client.post("http://127.0.0.1:8080/payments")
//!     .header("Idempotency-Key", "pay-5c1e")
//!     .send()
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Back off, with jitter
//!
//! Waits grow exponentially — the ceiling before retry *n* is
//! `min(max, initial × 2ⁿ)` of the [`Backoff`] — so a struggling server gets more
//! room each time. Growth alone keeps clients that failed together in lock-step;
//! [`Jitter::Full`], the default, draws each wait uniformly under the ceiling so
//! they arrive spread out. The arithmetic cannot overflow for any retry number.
//!
//! ```
//! use std::time::Duration;
//! use reqwest_safe_retry::{Backoff, Jitter, RetryConfig};
//!
//! let backoff = Backoff::default()
//!     .with_initial(Duration::from_millis(100))
//!     .with_max(Duration::from_secs(5))
//!     .with_jitter(Jitter::Equal);
//! let config = RetryConfig::builder().with_backoff(backoff).build()?;
//! # Ok::<(), reqwest_safe_retry::ConfigError>(())
//! ```
//!
//! ## Make retries earn their keep
//!
//! Backoff protects a server from one client; a fleet of clients that each
//! retry three times still quadruples the load of an outage. A
//! [`RetryBudget`], on by default, makes every retry to a host be paid for by
//! answers the host gave: each final answer earns a tenth of a retry, and a
//! reserve of one call's retries and two more, refilled by answers, covers a
//! quiet or fresh client. A retry that works is given back. Nothing is
//! granted for time passing, so the extra load of an outage stays bounded for
//! any number of processes (1.12 at a request a second over a minute), with
//! no coordination between them. When the budget is spent the outcome is
//! returned as it is, with [`StopReason::BudgetExhausted`](crate::report::StopReason::BudgetExhausted).
//!
//! ```
//! use std::time::Duration;
//! use reqwest_safe_retry::{RetryBudget, RetryConfig};
//!
//! let config = RetryConfig::builder()
//!     .with_budget(RetryBudget::default().with_ratio(0.2).with_window(Duration::from_secs(30)))
//!     .build()?;
//! # Ok::<(), reqwest_safe_retry::ConfigError>(())
//! ```
//!
//! ## Honour Retry-After, within a cap
//!
//! A server that says when to come back knows more than our backoff does, so
//! its `Retry-After` replaces the backoff on a retryable response — as a
//! floor: the wait is spread upwards by a random part of the retry's backoff
//! ceiling, so that clients told the same thing do not return in the same
//! instant. A date is measured against the response's `Date` header, so a
//! client whose clock is off still waits what the server meant. A server
//! must not be able to park a caller for an hour: above
//! the [`RetryAfter`] cap (30 s by default) the response is handed
//! back at once with [`StopReason::RetryAfterTooLong`](crate::report::StopReason::RetryAfterTooLong), and the caller decides.
//! A malformed value is ignored and the backoff used.
//!
//! A `429` or `503` whose wait is within the cap pauses the host for every
//! call of the middleware: they wait for the time the server named, then
//! one request goes first and the rest follow only if it is not told to
//! wait again (see [`RetryAfter::with_pause`] and the [`rate_limit`]
//! module). A rate limiter gets one request a pause from the process, and
//! those retries cost the budget nothing.
//!
//! And a host that turns most requests away (an outage, an overload) gets
//! only a share of the process's new calls, settling where it accepts about
//! one attempt in 2.7, and all of them again once it answers: the calls kept
//! back end at once, unsent, with [`rate_limit::Throttled`]. Quiet callers
//! and hosts failing half their answers at random are left alone (see the
//! [`rate_limit`] module; [`RetryConfigBuilder::with_throttling`] turns it
//! off).
//!
//! ## Respect the caller's time
//!
//! An optional deadline bounds the whole call: every attempt, the one in
//! flight included, and every wait. A request's own timeout
//! (`RequestBuilder::timeout`) is such a deadline, as it bounds the whole
//! request in reqwest alone: each attempt gets what remains of it, a retry
//! that cannot fit is not started, and the caller gets reqwest's own kind
//! of timeout error (`is_timeout()`). reqwest starts an attempt's timer when
//! it runs the request: a middleware inside the retries that holds the
//! request first (a hedge's delay) delays the end by as much. A wait that would leave no time to send
//! is not started. An attempt in flight is cut through its own timeout where
//! the middleware can see one, so reqwest reports it (`is_timeout()`), and
//! otherwise on the clock, with the crate's [`DeadlineExceeded`] error. An
//! optional attempt timeout bounds each attempt. A retried response's body is
//! drained only while the wait runs, so a body that stalls cannot hold the
//! call. Dropping the request future cancels everything, including a wait in
//! progress. Per-request [`RetryDeadline`], [`MaxRetries`] (`0` for none) and
//! [`SafeToRetry`] extensions adjust one request.
//!
//! Four limits can bound a call; each is optional:
//!
//! | limit | set with | bounds | when it passes |
//! |---|---|---|---|
//! | client timeout | `reqwest::ClientBuilder::timeout` | each attempt that has no timeout of its own, its redirects included, from sending to the end of the body | `reqwest::Error`, `is_timeout()`; retried when safe |
//! | request timeout | `RequestBuilder::timeout` | the whole call, as a deadline: each attempt gets what remains, and a retry that cannot fit is not started | `reqwest::Error`, `is_timeout()` (when no attempt was in flight, one holding [`DeadlineExceeded`]); stop reason [`StopReason::DeadlineExceeded`](crate::report::StopReason::DeadlineExceeded) |
//! | attempt timeout | [`RetryConfigBuilder::with_attempt_timeout`] | each attempt: put on the request as its timeout, cut to what remains of a deadline | `reqwest::Error`, `is_timeout()`; retried when safe |
//! | deadline | [`RetryConfigBuilder::with_deadline`], or [`RetryDeadline`] per request | the whole call: every attempt and its redirects, the one in flight included, and every wait | a timeout, or [`DeadlineExceeded`]; stop reason [`StopReason::DeadlineExceeded`](crate::report::StopReason::DeadlineExceeded) |
//!
//! The middleware cannot see the client's timeout, and reqwest lets a
//! request's timeout replace it, so an attempt timeout, once set, replaces
//! the client's for requests without their own: keep it no longer than the
//! client's. The deadline never replaces a timeout it cannot see.
//!
//! Requests one call can send: at most `max_retries + 1` attempts, and
//! within each the redirects the client's policy follows — with the
//! defaults, 4 attempts of up to 11 requests (a first one and 10
//! redirects), 44 in all. reqwest's own retry of HTTP/2 refused streams is
//! turned off in the client [`RetryMiddleware::client`] builds when the
//! `http2` feature lets the middleware retry them itself; without the
//! feature, or in a client put under the middleware by hand, it may resend
//! the request of an attempt up to twice more.
//!
//! ## Be honest with the caller
//!
//! The caller gets the last response as it came, or the last error exactly as
//! reqwest (or an inner middleware) produced it — `is_timeout()`,
//! `is_connect()` and `status()` answer as without the middleware. The
//! crate's own errors are for calls it ended itself: [`DeadlineExceeded`],
//! for a deadline reqwest could not report, and, for a call never sent,
//! [`rate_limit::HostPaused`] (its host paused, the call not waiting) and
//! [`rate_limit::Throttled`] (its host turning most requests away). A [`RetryReport`](crate::report::RetryReport) says how many attempts were made,
//! how long was spent waiting and why the middleware stopped: read it with
//! [`RetryReport::from_response`](crate::report::RetryReport::from_response), or through a [`ReportSlot`](crate::report::ReportSlot) when the
//! outcome is an error.
//!
//! ```no_run
//! use reqwest_safe_retry::{report::ReportSlot, report::RetryReport};
//!
//! # async fn run(client: reqwest_middleware::ClientWithMiddleware) {
//! let slot = ReportSlot::new();
//! let result = client.get("http://127.0.0.1:8080/orders").with_extension(slot.clone()).send().await;
//! if let Ok(response) = &result {
//!     let report = RetryReport::from_response(response);
//!     println!("{} attempts, stopped: {}", report.attempts, report.stop);
//! }
//! if let Some(report) = slot.get() {
//!     println!("{} attempts, {:?} waiting: {}", report.attempts, report.total_wait, report.stop);
//! }
//! # }
//! ```
//!
//! # Testing
//!
//! Time comes only through a [`Clock`](crate::clock::Clock) and randomness only through a
//! [`JitterSource`](crate::jitter::JitterSource). The default [`TokioClock`](crate::clock::TokioClock) follows tokio's paused time; with
//! the `test-util` feature, `ManualClock` returns from every wait at once and
//! records it, and `FixedJitter` pins the draw, so waits are exact:
//!
//! ```
//! # #[cfg(feature = "test-util")] {
//! use reqwest_safe_retry::{jitter::FixedJitter, clock::ManualClock, RetryMiddleware};
//!
//! let clock = ManualClock::new();
//! let middleware = RetryMiddleware::default()
//!     .with_clock(clock.clone())
//!     .with_jitter_source(FixedJitter::TOP);
//! // ... send requests, then assert on `clock.sleeps()`.
//! # let _ = middleware;
//! # }
//! ```
//!
//! # Observability
//!
//! With the `tracing` feature (on by default), every retry decision is one
//! event with the target `reqwest_safe_retry::events`, at debug level, with
//! OpenTelemetry's HTTP field names where one exists.
//! [`RetryMiddleware::with_log_level`] changes the level of retries and of
//! the stops where the crate gave up on a failure it could have retried; a
//! call that ends on a final answer after retries (most often a recovery)
//! stays at debug, so that it raises no warning.
//!
//! | field | in | value |
//! |---|---|---|
//! | `http.request.method` | every event | `GET`, `POST`, ... |
//! | `http.request.resend_count` | every event | requests sent before the last of this attempt: earlier attempts and the redirects followed |
//! | `server.address` | every event | the host, and nothing else of the URL |
//! | `attempt` | every event | the attempt just made, from 1 (0: the deadline passed before anything was sent) |
//! | `error.type` | retries | the status (`"503"`), or the reason's label |
//! | `retry.reason` | retries | [`RetryReason::as_str`](crate::report::RetryReason::as_str): `status`, `timeout`, ... |
//! | `wait_ms` | retries | the wait before the next attempt |
//! | `retry.stop` | stops | [`StopReason::as_str`](crate::report::StopReason::as_str): `retries_exhausted`, `budget_exhausted`, ... |
//!
//! Retries, as reqwest-retry counts them, are `attempt - 1`;
//! `http.request.resend_count` adds the redirects followed, so a GET answered
//! 302 and then 200 is attempt 1 with a resend count of 1.
//!
//! A first answer that is final — nearly every call — emits nothing, and
//! headers, bodies, paths and queries are never logged. The labels of
//! [`RetryReason::as_str`](crate::report::RetryReason::as_str) and [`StopReason::as_str`](crate::report::StopReason::as_str) are stable across
//! releases and carry no duration or status code.
//!
//! The crate depends on no metrics library: [`RetryMiddleware::on_decision`]
//! calls a hook after every attempt, from which any facade can be fed. With
//! the `metrics` crate:
//!
//! ```
//! use reqwest_safe_retry::{report::Decision, RetryMiddleware, report::StopReason};
//!
//! let middleware = RetryMiddleware::default().on_decision(|event| match event.decision {
//!     Decision::Retry { after, reason } => {
//!         metrics::counter!("http_client_retries_total", "reason" => reason.as_str())
//!             .increment(1);
//!         metrics::histogram!("http_client_retry_wait_seconds").record(after.as_secs_f64());
//!     }
//!     // A first answer that is final is every ordinary call: not news.
//!     Decision::Stop(StopReason::NothingToRetry) if event.attempt == 1 => {}
//!     Decision::Stop(stop) => {
//!         metrics::counter!("http_client_retry_stops_total", "stop" => stop.as_str())
//!             .increment(1);
//!     }
//!     _ => {}
//! });
//! # let _ = middleware;
//! ```
//!
//! Where a tracing middleware such as reqwest-tracing's goes decides what its
//! span covers: outside this one, one span per call, holding the retries'
//! events; inside it, one per attempt, which can read the attempt under way
//! from the request's [`AttemptNumber`](crate::report::AttemptNumber)
//! extension (absent on the first attempt). [`RetryMiddleware::client_behind`]
//! builds the client with middlewares on both sides, every rule kept.
//!
//! # Examples
//!
//! The repository's `examples/` run against local servers:
//!
//! | command | shows |
//! |---|---|
//! | `cargo run --example demo` | two scenario tables, a retrying transport's and an API client's, with the defaults |
//! | `cargo run --example orders_client` | a typed API client on the middleware: its own options, error codes with the request id, pagination as a `Stream` |
//! | `cargo run --example custom_policy` | another status set, a predicate, per-request overrides |
//! | `cargo run --example tracing` | the retry events through `tracing-subscriber`, inside a span per call, and a span per attempt |
//! | `cargo run --example metrics` | the decision hook feeding the `metrics` facade |
//! | `cargo run --release --example hedging` | hedged requests against a server that is slow 5% of the time |
//!
//! Retry storms are simulated in `sim/`, in virtual time: the fleet grid,
//! partial failures, `Retry-After` spread, contention
//! (`cargo run --release -p reqwest-safe-retry-sim --bin herd`).
//!
//! # Features
//!
//! - `tracing` (default): a debug-level event per retry decision with the
//!   attempt, method, reason and wait. Headers, bodies and URLs are never logged.
//! - `test-util`: `ManualClock` and `FixedJitter`.
//! - `chaos`: `chaos::Chaos`, a middleware that injects faults by seeded
//!   rules for tests of the code around the retries: statuses, refused
//!   connections, timeouts, resets, bodies cut short, latency on the
//!   crate's clock.
//! - `fleet`: `fleet::Fleet`, a host's pause shared by every process of
//!   a fleet through a store, read and written by a background task, never
//!   on a call's path. `redis` adds the store on Redis,
//!   `fleet::RedisStore` (redis-rs 1.x: 1.2 builds on the crate's MSRV,
//!   its latest releases need Rust 1.88).
//! - `http2` (default): turn on reqwest's HTTP/2, and recognise REFUSED_STREAM and a
//!   graceful GOAWAY (through the `h2` crate) as failures where the server
//!   did not process the request (RFC 9113 §8.7: it may have read part of it).
//!
//! # Beyond retries
//!
//! [`hedge::HedgeMiddleware`] sends a backup copy of a slow request that is safe to
//! repeat and returns the first final answer; [response body buffering](BodyBuffering::with_response)
//! retries a response whose body breaks mid-read; [request body buffering](BodyBuffering::with_request)
//! lets a streamed request body be retried.
// Times, durations, counts and budgets saturate or are checked: no
// arithmetic in the crate can overflow, wrap or divide by zero, whatever
// clock, server or setting it meets. (Tests are free to add.)
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The fleet's rounds run on a Tokio task of their own, which a browser's
// wasm32 has no runtime for.
#[cfg(all(feature = "fleet", target_arch = "wasm32"))]
compile_error!("the `fleet` feature needs a native target: its rounds run on a Tokio task");

mod backoff;
mod body;
mod budget;
mod builder;
mod call;
#[cfg(all(feature = "chaos", not(target_arch = "wasm32")))]
pub mod chaos;
mod classify;
pub mod clock;
mod config;
mod deadline;
mod error;
mod events;
mod exchange;
mod extensions;
#[cfg(feature = "fleet")]
pub mod fleet;
mod future;
mod head;
pub mod hedge;
mod hosts;
pub mod jitter;
mod keys;
mod middleware;
mod pause;
mod policy;
mod predicate;
pub mod rate_limit;
mod reason;
mod redirect;
pub mod report;
mod retry_after;
mod safety;
mod shared;
mod stripes;
mod throttle;
#[cfg(feature = "tower")]
pub mod tower;

pub use backoff::{Backoff, Jitter};
pub use body::BodyBuffering;
pub use budget::{BudgetScope, RetryBudget};
pub use builder::RetryConfigBuilder;
pub use config::RetryConfig;
pub use error::{ClientError, ConfigError, DeadlineExceeded};
pub use extensions::{MaxRetries, RetryDeadline, SafeToRetry};
pub use keys::{MintKey, MintedKey};
pub use middleware::{OutsideRetries, RetryMiddleware};
pub use predicate::{Attempt, Outcome, Verdict};
pub use reason::Retryability;
pub use retry_after::{RetryAfter, RetryAfterOverCap};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
