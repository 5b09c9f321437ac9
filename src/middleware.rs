//! The middleware: one loop of copy, send, decide, wait while discarding the
//! old body, repeat.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::{Extensions, Method};
use reqwest::{Request, Response};
use reqwest_middleware::{Error, Middleware, Next, Result};

use crate::body::{self, Rewind};
use crate::clock::Clock;
use crate::config::RetryConfig;
use crate::events;
use crate::future::first;
use crate::jitter::JitterSource;
use crate::policy::Policy;
use crate::reason::{Decision, StopReason};
use crate::redirect::{self, TooManyRedirects};
use crate::report::{AttemptNumber, Hops, RetryEvent, finish};
use crate::shared::Shared;

/// The retry middleware for `reqwest_middleware`.
///
/// Cheap to clone: clones share the configuration, clock, jitter source,
/// hook and retry budget.
///
/// ```
/// use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
///
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(RetryConfig::default()))
///     .build();
/// # let _ = client;
/// ```
#[derive(Clone)]
pub struct RetryMiddleware {
    shared: Arc<Shared>,
}

impl Default for RetryMiddleware {
    fn default() -> Self {
        Self::new(RetryConfig::default())
    }
}

impl RetryMiddleware {
    /// A middleware with this policy, the [`TokioClock`](crate::TokioClock) and thread-local
    /// randomness.
    pub fn new(config: RetryConfig) -> Self {
        Self { shared: Arc::new(Shared::new(config)) }
    }

    /// Uses `clock` for every reading of the time and every wait.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        Arc::make_mut(&mut self.shared).clock = Arc::new(clock);
        self
    }

    /// Uses `source` for the randomness behind jitter.
    pub fn with_jitter_source(mut self, source: impl JitterSource + 'static) -> Self {
        Arc::make_mut(&mut self.shared).jitter = Arc::new(source);
        self
    }

    /// Calls `hook` after every attempt with the decision taken, e.g. to
    /// count retries for metrics. It runs inline: keep it quick.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use reqwest_safe_retry::{Decision, RetryMiddleware};
    ///
    /// let retries = Arc::new(AtomicU64::new(0));
    /// let counter = retries.clone();
    /// let middleware = RetryMiddleware::default().on_decision(move |event| {
    ///     if let Decision::Retry { .. } = event.decision {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// });
    /// # let _ = middleware;
    /// ```
    pub fn on_decision<F>(mut self, hook: F) -> Self
    where
        F: Fn(&RetryEvent<'_>) + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.shared).hook = Some(Arc::new(hook));
        self
    }

    /// The level of the `tracing` events for retry decisions: debug by
    /// default. (reqwest-retry users know this as `with_retry_log_level`.)
    #[cfg(feature = "tracing")]
    pub fn with_log_level(mut self, level: tracing::Level) -> Self {
        Arc::make_mut(&mut self.shared).log_level = level;
        self
    }

    /// The redirect policy to build the inner client with, so that the
    /// middleware follows redirects itself, above its retry loop.
    ///
    /// With it, every outcome the middleware sees is the outcome of the
    /// request it holds, so all the rules apply to every client request:
    /// a POST without an idempotency key is retried after a 429 or a
    /// connection that was never made, and never repeated once a server
    /// has answered it, even by a redirect back to the same URL. Each hop
    /// is a request of its own, retried by its own method (a GET after a
    /// POST's `303 See Other` can be retried without repeating the POST),
    /// under the call's one deadline. Hops follow reqwest's own rules, at
    /// most 10 of them; the [`RetryReport`](crate::RetryReport) counts them in
    /// [`redirects`](crate::RetryReport::redirects).
    ///
    /// The policy itself hands every redirect up to the middleware (it is
    /// [`reqwest::redirect::Policy::none`]); taking it tells this middleware
    /// and its clones that the client they wrap was built with it. A
    /// middleware whose policy was not taken assumes the client may follow
    /// redirects below it, as `reqwest::Client::new()` does, and stays on the
    /// safe side of that: see [`Redirects`](crate::Redirects).
    ///
    /// ```
    /// use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
    ///
    /// let retry = RetryMiddleware::new(RetryConfig::default());
    /// let inner = reqwest::Client::builder().redirect(retry.redirect_policy()).build()?;
    /// let client = reqwest_middleware::ClientBuilder::new(inner).with(retry).build();
    /// # let _ = client;
    /// # Ok::<(), reqwest::Error>(())
    /// ```
    pub fn redirect_policy(&self) -> reqwest::redirect::Policy {
        self.shared.follows.store(true, Ordering::Relaxed);
        reqwest::redirect::Policy::none()
    }

    /// The policy in force.
    pub fn config(&self) -> &RetryConfig {
        &self.shared.config
    }
}

impl fmt::Debug for RetryMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryMiddleware")
            .field("config", &self.shared.config)
            .field("clock", &self.shared.clock)
            .field("hook", &self.shared.hook.as_ref().map(|_| "<fn>"))
            .field("budget", &self.shared.budget)
            .finish_non_exhaustive()
    }
}

/// The trait's signature as `async_trait` would write it, around one
/// `async fn`.
impl Middleware for RetryMiddleware {
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        req: Request,
        extensions: &'life1 mut Extensions,
        next: Next<'life2>,
    ) -> Pin<Box<dyn Future<Output = Result<Response>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.shared.send(req, extensions, next))
    }
}

impl Shared {
    /// One call: copy, send, decide, wait while discarding the old body,
    /// repeat. Through a client that hands its redirects up, a redirect
    /// ends one request and starts the next, a request of its own, retried
    /// by its own rules under the call's one deadline (see
    /// [`crate::redirect`]).
    ///
    /// Not an `async fn`: its arguments would be kept in the future beside
    /// the loop's own state, and a request is 264 bytes. The request lives
    /// once, in `pending`, until the last attempt takes it.
    fn send<'a>(
        &'a self,
        request: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> impl Future<Output = Result<Response>> + Send + 'a {
        let mut method = request.method().clone();
        let mut server = events::server(self, &request);
        // What a redirect is followed with when no copy of a streamed body
        // could be kept: the request without it. Boxed: only a stream pays.
        let follows = self.follows();
        let mut bodiless =
            may_need_bodiless(follows, &request).then(|| Box::new(redirect::bodiless(&request)));
        let mut pending = Some(request);
        async move {
            let request = pending.as_ref().expect("the request");
            let mut policy = Policy::new(self, request, extensions, None);
            if let Some(rewind) = Rewind::new(
                &mut pending,
                self.config.stream_buffering,
                policy.may_retry(),
                policy.deadline_at(),
                self.config.attempt_timeout,
                &*self.clock,
            ) {
                // Boxed: only a streamed body, with stream buffering on, pays.
                Box::pin(rewind.run()).await;
            }
            let mut reading = self.reading(&policy, pending.as_ref());
            // What the caller attached: every attempt starts from it, so
            // nothing an attempt added below this middleware leaks into the
            // next one.
            let mut caller: Option<Extensions> = None;
            // The attempts, waits and redirects of the hops before this one.
            let mut before = Hops::default();
            loop {
                let Ok((attempt, cut_at)) = policy.start(&mut pending) else {
                    let what = (&method, server.as_deref());
                    return self.expired(&policy, what, extensions, caller.as_ref(), before);
                };
                if pending.is_some() && caller.is_none() {
                    caller = Some(extensions.clone());
                }
                let sent = next.clone().run(attempt, extensions);
                // The body is read inside the attempt, so the deadline's race
                // below bounds it too.
                let config = &self.config;
                let sent = async move {
                    let outcome = sent.await;
                    match reading {
                        None => (outcome, false),
                        // Boxed: only calls that read bodies pay for it.
                        Some(limit) => Box::pin(body::settle(config, outcome, limit)).await,
                    }
                };
                let (outcome, body_failed) = match cut_at {
                    None => sent.await,
                    // Boxed: only calls with a deadline and no visible
                    // timeout pay for the race's state.
                    Some(at) => match Box::pin(first(sent, self.clock.sleep_until(at))).await {
                        Some(outcome) => outcome,
                        None => {
                            let what = (&method, server.as_deref());
                            return self.expired(
                                &policy,
                                what,
                                extensions,
                                caller.as_ref(),
                                before,
                            );
                        }
                    },
                };
                let decision = policy.decide(pending.as_ref(), &outcome, body_failed);
                events::notify(self, policy.attempts(), &method, server.as_deref(), decision);
                // `decide` retries only while a copy is kept in `pending`.
                let after = match decision {
                    Decision::Retry { after, .. } => after,
                    Decision::Stop(stop) => {
                        let report = before.report(policy.report(stop));
                        let hop = match &outcome {
                            Ok(response) if follows && response.status().is_redirection() => {
                                let (left, has_body) = match pending.take() {
                                    Some(left) => (Some(left), true),
                                    None => (bodiless.take().map(|copy| *copy), false),
                                };
                                left.and_then(|left| redirect::next_hop(response, left, has_body))
                            }
                            _ => None,
                        };
                        let Some(hop) = hop else {
                            return finish(extensions, caller.as_ref(), outcome, report);
                        };
                        if report.redirects == redirect::MAX_REDIRECTS {
                            let error = TooManyRedirects::new(report.redirects, hop.url().clone());
                            let outcome = Err(Error::middleware(error));
                            return finish(extensions, caller.as_ref(), outcome, report);
                        }
                        // The redirect's body is not the caller's to read:
                        // dropped. The next hop starts from what the caller
                        // attached, as every attempt does.
                        drop(outcome);
                        before = Hops::after(report);
                        if let Some(caller) = &caller {
                            extensions.clone_from(caller);
                        }
                        method = hop.method().clone();
                        server = events::server(self, &hop);
                        policy = Policy::new(self, &hop, extensions, policy.started());
                        reading = self.reading(&policy, Some(&hop));
                        pending = Some(hop);
                        continue;
                    }
                };
                // Boxed, as only a retry needs it: the drain holds the old
                // response, kept out of every request's future.
                let wait = self.clock.sleep(after);
                Box::pin(body::discard(outcome, wait, self.config.drain_limit)).await;
                if let Some(caller) = &caller {
                    extensions.clone_from(caller);
                }
                extensions.insert(AttemptNumber(policy.attempts() + 1));
            }
        }
    }

    /// How much of a final response's body to read inside the attempt, if
    /// any: only where its failure could be retried (the request is safe to
    /// repeat, retries are allowed, and its body can be sent again).
    fn reading(&self, policy: &Policy<'_>, request: Option<&Request>) -> Option<usize> {
        self.config.response_buffering.filter(|_| {
            policy.may_retry_body_failures()
                && request.is_some_and(|request| {
                    request.body().is_none_or(|body| body.as_bytes().is_some())
                })
        })
    }

    /// Stops because the deadline passed with no outcome to return: before
    /// an attempt could be sent, or while one was in flight.
    fn expired(
        &self,
        policy: &Policy<'_>,
        (method, server): (&Method, Option<&str>),
        extensions: &mut Extensions,
        caller: Option<&Extensions>,
        before: Hops,
    ) -> Result<Response> {
        let stop = StopReason::DeadlineExceeded;
        events::notify(self, policy.attempts(), method, server, Decision::Stop(stop));
        let error = Error::middleware(policy.deadline_exceeded());
        finish(extensions, caller, Err(error), before.report(policy.report(stop)))
    }
}

/// Whether a redirect may have to be followed without the request's body:
/// the middleware follows redirects and the body is a stream, of which no
/// copy may be kept. Made for every request, the bodiless request would go
/// unused: the same answers, one allocation more, which only counting
/// allocations shows (`.cargo/mutants.toml` names the two mutants that do
/// that).
fn may_need_bodiless(follows: bool, request: &Request) -> bool {
    follows && request.body().is_some_and(|body| body.as_bytes().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future every request carries, whatever its outcome.
    fn call_future_size() -> usize {
        fn size<'a, F: Future>(
            _: fn(&'a Shared, Request, &'a mut Extensions, Next<'a>) -> F,
        ) -> usize {
            std::mem::size_of::<F>()
        }
        size(Shared::send)
    }

    #[test]
    fn the_middleware_shows_its_configuration() {
        let config = RetryConfig::builder().with_max_retries(7).build().unwrap();
        let middleware = RetryMiddleware::new(config).on_decision(|_| {});
        assert_eq!(middleware.config().max_retries(), 7);
        let debug = format!("{middleware:?}");
        for part in ["RetryMiddleware", "max_retries: 7", "TokioClock", "hook: Some(\"<fn>\")"] {
            assert!(debug.contains(part), "{part} missing from {debug}");
        }
    }

    #[test]
    fn the_call_future_stays_small() {
        // 616 bytes on x86_64, in debug and release builds alike: the
        // request kept for a retry (264), the per-request policy (96), the
        // last outcome (136), and pointers. A regression past this bound
        // means something large joined every request's future.
        let size = call_future_size();
        assert!(size <= 768, "the per-request future grew to {size} bytes");
    }
}
