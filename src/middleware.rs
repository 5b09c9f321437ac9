//! The middleware: one loop of copy, send, decide, wait while discarding the
//! old body, repeat.

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Extensions, Method};
use reqwest::{Request, Response};
use reqwest_middleware::{Error, Middleware, Next, Result};

use crate::body::{self, RequestBuffer};
use crate::clock::Clock;
use crate::config::RetryConfig;
use crate::error::ClientError;
use crate::events;
use crate::future::first;
use crate::jitter::JitterSource;
use crate::policy::Policy;
use crate::reason::{Decision, StopReason};
use crate::redirect::{self, Seen};
use crate::report::{AttemptNumber, RetryEvent, deliver};
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
    /// A middleware with this policy, the [`TokioClock`](crate::clock::TokioClock) and thread-local
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
    /// use reqwest_safe_retry::{report::Decision, RetryMiddleware};
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
    ///
    /// It applies to each retry and to each stop where the crate gave up on
    /// a failure it could have retried (retries or budget exhausted, the
    /// deadline, a request not safe to repeat, a `Retry-After` over the cap,
    /// ...). A call that ends on a final answer after retries is logged at
    /// debug whatever the level (at trace, if that is the level): most often
    /// it recovered, and raises no warning; reqwest-retry logs nothing then.
    /// (A final answer that is a failure, a 500 after a 503, is the caller's
    /// to log, as after a first attempt.) A first answer that is final logs
    /// nothing. The events'
    /// target is `reqwest_safe_retry::events` (reqwest-retry's is
    /// `reqwest_retry::middleware`): a filter such as `reqwest_retry=warn`
    /// does not match it, `reqwest_safe_retry=warn` does.
    #[cfg(feature = "tracing")]
    pub fn with_log_level(mut self, level: tracing::Level) -> Self {
        Arc::make_mut(&mut self.shared).log_level = level;
        self
    }

    /// Builds `builder` into the client this middleware sends through, and
    /// puts the middleware on it: the quick start.
    ///
    /// The client follows redirects itself, as reqwest does without the
    /// middleware, so everything the builder says still holds on every hop:
    /// default headers and cookies, credentials dropped on the way to
    /// another origin, `referer`, `https_only`, and a request's timeout
    /// bounding the whole chain. The redirect policy is the one
    /// [`with_redirect_policy`](Self::with_redirect_policy) gives
    /// (reqwest's default, at most 10 redirects, unless set); the crate's
    /// own wraps it to record every redirect for the call in flight. A
    /// builder that has a redirect policy of its own (set with
    /// `ClientBuilder::redirect`) is refused rather than have its policy
    /// replaced without a word.
    ///
    /// Through this client the middleware knows whether an outcome is the
    /// answer to the request it sent or to a later hop, so every rule
    /// applies to every request: a POST without an idempotency key is
    /// retried after a 429 or a connection never made, and never once a
    /// server has answered it with a redirect. A middleware put on a client
    /// by hand (`ClientBuilder::new(client).with(middleware)`) cannot know
    /// what its client follows, and stays on the safe side: a request that
    /// is not safe to repeat is then never retried.
    ///
    /// With the `http2` feature, the client also has reqwest's own retry
    /// turned off (`reqwest::retry::never()`, replacing any retry policy
    /// the builder has: reqwest has no way to read one back). That retry
    /// resends a stream the server refused at once, up to twice, below the
    /// middleware, so each attempt the middleware counts could be three
    /// streams, and the stated bound of `max_retries + 1` requests a call
    /// (and the budget's) would not hold. With the feature the middleware
    /// recognises a refused stream and a graceful GOAWAY and retries them
    /// itself, with backoff and budget, for any method. The feature is on by
    /// default. Without it, reqwest's retry is left as it is, since the
    /// middleware could not resend a refused stream in its place: each
    /// attempt may then be up to three streams, and a GET into a refusal
    /// storm up to `3 × (max_retries + 1)`.
    ///
    /// Middlewares added to the returned builder run inside this one, once
    /// per attempt.
    ///
    /// ```
    /// use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
    ///
    /// let client = RetryMiddleware::new(RetryConfig::default())
    ///     .client(reqwest::Client::builder())?
    ///     .build();
    /// # let _ = client;
    /// # Ok::<(), reqwest_safe_retry::ClientError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClientError::RedirectPolicySet`] when `builder` has a redirect
    /// policy of its own; [`ClientError::Build`] with the error of
    /// [`reqwest::ClientBuilder::build`] when the client cannot be built.
    pub fn client(
        mut self,
        builder: reqwest::ClientBuilder,
    ) -> std::result::Result<reqwest_middleware::ClientBuilder, ClientError> {
        if redirect::has_own_policy(&builder) {
            return Err(ClientError::RedirectPolicySet);
        }
        let policy = redirect::policy(self.shared.redirect.clone());
        // reqwest's own retry would resend a refused stream below the
        // middleware, unseen by its backoff, budget and count; with the
        // `http2` feature the middleware retries those itself.
        #[cfg(feature = "http2")]
        let builder = builder.retry(reqwest::retry::never());
        let client = builder.redirect(policy).build().map_err(ClientError::Build)?;
        Arc::make_mut(&mut self.shared).bound = true;
        Ok(reqwest_middleware::ClientBuilder::new(client).with(self))
    }

    /// The redirect policy the client built by [`client`](Self::client)
    /// follows: a hop limit, or a filter that refuses some targets. reqwest's
    /// default (at most 10 redirects) unless set.
    ///
    /// ```
    /// use reqwest::redirect::Policy;
    /// use reqwest_safe_retry::RetryMiddleware;
    ///
    /// // At most 2 redirects, and none to another host.
    /// let policy = Policy::custom(|attempt| match attempt.url().host_str() {
    ///     Some("127.0.0.1") if attempt.previous().len() <= 2 => attempt.follow(),
    ///     Some("127.0.0.1") => attempt.error("too many redirects"),
    ///     _ => attempt.stop(),
    /// });
    /// let client = RetryMiddleware::default()
    ///     .with_redirect_policy(policy)
    ///     .client(reqwest::Client::builder())?
    ///     .build();
    /// # let _ = client;
    /// # Ok::<(), reqwest_safe_retry::ClientError>(())
    /// ```
    pub fn with_redirect_policy(mut self, policy: reqwest::redirect::Policy) -> Self {
        Arc::make_mut(&mut self.shared).redirect = Arc::new(policy);
        self
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
            .field("redirect_policy", &self.shared.redirect)
            .field("built_its_client", &self.shared.bound)
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

/// An attempt's end: its outcome, unless the deadline cut it first, and
/// the redirects the client met within it.
struct Ended {
    sent: Option<Sent>,
    seen: Seen,
}

/// An attempt's outcome: whether it is the error its response's body
/// failed with while the middleware read it, and whether that body is all
/// in memory.
struct Sent {
    outcome: Result<Response>,
    body_failed: bool,
    whole: bool,
}

/// What a call's events name: its method, and its server's host if the
/// events are logged.
type What<'a> = (&'a Method, Option<&'a str>);

impl Shared {
    /// One call: copy, send, decide, wait while discarding the old body,
    /// repeat. reqwest follows the redirects of each attempt; the
    /// middleware records them (see [`crate::redirect`]).
    ///
    /// The request lives once, in `pending`, until the last attempt takes
    /// it.
    fn send<'a>(
        &'a self,
        request: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> impl Future<Output = Result<Response>> + Send + 'a {
        let method = request.method().clone();
        let server = events::server(self, &request);
        let mut pending = Some(request);
        async move {
            let request = pending.as_ref().expect("the request");
            let mut policy = Policy::new(self, request, extensions);
            self.buffer_request_body(&mut pending, &policy).await;
            let reading = self.reading(&policy, pending.as_ref());
            let what = (&method, server.as_deref());
            // What the caller attached: every attempt starts from it, so
            // nothing an attempt added below this middleware leaks into the
            // next one.
            let mut caller: Option<Extensions> = None;
            loop {
                let Ok((attempt, cut_at)) = policy.start(&mut pending) else {
                    return self.expired(&policy, what, extensions, caller.as_ref());
                };
                if pending.is_some() && caller.is_none() {
                    caller = Some(extensions.clone());
                }
                let sent = next.clone().run(attempt, extensions);
                let Ended { sent, seen } = self.attempt(sent, reading, cut_at).await;
                let Some(Sent { outcome, body_failed, whole }) = sent else {
                    policy.cut(seen);
                    return self.expired(&policy, what, extensions, caller.as_ref());
                };
                let decision = policy.decide(pending.as_ref(), &outcome, body_failed, seen);
                events::notify(self, policy.attempts(), policy.resend_count(), what, decision);
                // `decide` retries only while a copy is kept in `pending`.
                let after = match decision {
                    Decision::Retry { after, .. } => after,
                    Decision::Stop(stop) => {
                        let outcome = self.bound_body(outcome, whole, cut_at, &policy);
                        return deliver(extensions, caller.as_ref(), outcome, policy.report(stop));
                    }
                };
                self.pause(outcome, after).await;
                next_attempt(&policy, extensions, caller.as_ref());
            }
        }
    }

    /// Reads a streamed request body into memory, if body buffering asks
    /// for it and a retry may follow, so that the request can be sent
    /// again.
    async fn buffer_request_body(&self, pending: &mut Option<Request>, policy: &Policy<'_>) {
        if let Some(buffer) = RequestBuffer::new(
            pending,
            self.config.body_buffering.request(),
            policy.may_retry(),
            policy.deadline_at(),
            self.config.attempt_timeout,
            &*self.clock,
        ) {
            Box::pin(buffer.run()).await;
        }
    }

    /// One attempt: the request `sent`, the body of its response read if
    /// `reading` says so, and both cut at `cut_at` if it is set. The body
    /// is read inside the attempt, so that the cut bounds it too.
    async fn attempt(
        &self,
        sent: impl Future<Output = Result<Response>>,
        reading: Option<usize>,
        cut_at: Option<Instant>,
    ) -> Ended {
        let config = &self.config;
        let sent = async move {
            let outcome = sent.await;
            match reading {
                None => Sent { outcome, body_failed: false, whole: false },
                Some(limit) => {
                    let (outcome, body_failed, whole) =
                        Box::pin(body::read_whole(config, outcome, limit)).await;
                    Sent { outcome, body_failed, whole }
                }
            }
        };
        let mut seen = Seen::NONE;
        let mut sent = pin!(sent);
        let sent = match cut_at {
            None => Some(redirect::recorded(sent.as_mut(), &mut seen).await),
            Some(at) => {
                let race = first(sent.as_mut(), self.clock.sleep_until(at));
                Box::pin(redirect::recorded(race, &mut seen)).await
            }
        };
        Ended { sent, seen }
    }

    /// The outcome to hand back. Where no timeout of reqwest's carries the
    /// deadline (`cut_at` is set), the body the caller reads is bounded by
    /// it here, unless it is all in memory already.
    fn bound_body(
        &self,
        outcome: Result<Response>,
        whole: bool,
        cut_at: Option<Instant>,
        policy: &Policy<'_>,
    ) -> Result<Response> {
        match cut_at.filter(|_| !whole) {
            None => outcome,
            Some(at) => outcome.map(|response| {
                let expiry = self.clock.sleep_until(at);
                body::bounded(response, expiry, policy.deadline_exceeded())
            }),
        }
    }

    /// Waits `after` before the next attempt, discarding the retried
    /// response's body meanwhile so that its connection can be reused.
    async fn pause(&self, outcome: Result<Response>, after: Duration) {
        let wait = self.clock.sleep(after);
        Box::pin(body::discard(outcome, wait, self.config.drain_limit)).await;
    }

    /// How much of a final response's body to read inside the attempt, if
    /// any: only where its failure could be retried (the request is safe to
    /// repeat, retries are allowed, and its body can be sent again).
    fn reading(&self, policy: &Policy<'_>, request: Option<&Request>) -> Option<usize> {
        self.config.body_buffering.response().filter(|_| {
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
        what: What<'_>,
        extensions: &mut Extensions,
        caller: Option<&Extensions>,
    ) -> Result<Response> {
        let stop = StopReason::DeadlineExceeded;
        events::notify(self, policy.attempts(), policy.resend_count(), what, Decision::Stop(stop));
        let error = Error::middleware(policy.deadline_exceeded());
        deliver(extensions, caller, Err(error), policy.report(stop))
    }
}

/// Sets the extensions up for the next attempt: the caller's again, and
/// the attempt's number.
fn next_attempt(policy: &Policy<'_>, extensions: &mut Extensions, caller: Option<&Extensions>) {
    if let Some(caller) = caller {
        extensions.clone_from(caller);
    }
    let attempt = policy.attempts().saturating_add(1);
    let resend_count = policy.resend_count().saturating_add(1);
    extensions.insert(AttemptNumber::new(attempt, resend_count));
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
