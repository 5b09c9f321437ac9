//! The middleware: its settings, the client it builds, and its place in
//! `reqwest_middleware`; each call runs in the `call` module.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, Middleware, Next, RequestInitialiser, Result};

use crate::clock::Clock;
use crate::config::RetryConfig;
use crate::error::ClientError;
use crate::jitter::JitterSource;
use crate::redirect;
use crate::report::RetryEvent;
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
    /// The parts every request shares, for another adapter to use.
    #[cfg(feature = "tower")]
    pub(crate) fn shared(self) -> Arc<Shared> {
        self.shared
    }

    /// A middleware with this policy, the [`TokioClock`](crate::clock::TokioClock) and thread-local
    /// randomness.
    pub fn new(config: RetryConfig) -> Self {
        Self { shared: Arc::new(Shared::new(config)) }
    }

    /// Uses `clock` for every reading of the time and every wait.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        let shared = Arc::make_mut(&mut self.shared);
        shared.clock = Arc::new(clock);
        #[cfg(feature = "fleet")]
        if let Some((fleet, member)) = &shared.fleet {
            fleet.set_clock(*member, shared.clock.clone());
        }
        self
    }

    /// Puts the middleware's books in `fleet`: the pauses its servers ask
    /// for are shared with every process of the fleet, and theirs reach it
    /// (see [`fleet`](crate::fleet)). Clones of the middleware are in it
    /// too; a middleware is in one fleet, the first it is given.
    ///
    /// A middleware that keeps no books (no budget, no pause, no throttle)
    /// or does not pause hosts ([`RetryAfter::with_pause`](crate::RetryAfter::with_pause))
    /// has nothing to share, and stays out.
    #[cfg(feature = "fleet")]
    pub fn with_fleet(mut self, fleet: &crate::fleet::Fleet) -> Self {
        let shared = Arc::make_mut(&mut self.shared);
        if shared.fleet.is_some() || !shared.config.retry_after().pause() {
            return self;
        }
        let Some(ledger) = &shared.ledger else { return self };
        let cap = shared.config.retry_after().cap();
        if let Some(member) = fleet.join(ledger, shared.clock.clone(), cap) {
            shared.fleet = Some((fleet.clone(), member));
        }
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
    /// turned off (`reqwest::retry::never()`), unless
    /// [`with_reqwest_retry`](Self::with_reqwest_retry) gives a policy.
    /// Either replaces a retry policy set on the builder with
    /// `ClientBuilder::retry`: reqwest has no way to read one back, so it
    /// cannot be refused as a redirect policy is, and the setter is the
    /// one place for it, as for a redirect policy. That retry
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
        self,
        builder: reqwest::ClientBuilder,
    ) -> std::result::Result<reqwest_middleware::ClientBuilder, ClientError> {
        self.client_behind(builder, |outside| outside)
    }

    /// As [`client`](Self::client), with middlewares outside the retries:
    /// `outside` adds to the client's builder the middlewares a call meets
    /// once, before any retry (a span per call, a call's metrics), and the
    /// builder returned has the retries next: every `.with(..)` on it goes
    /// inside them, and runs once per attempt. The order reads as it runs,
    /// and the retries keep every rule of [`client`](Self::client).
    ///
    /// ```
    /// use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
    /// # #[derive(Debug)] struct PerCall; #[derive(Debug)] struct PerAttempt;
    /// # #[async_trait::async_trait]
    /// # impl reqwest_middleware::Middleware for PerCall {
    /// #     async fn handle(&self, r: reqwest::Request, e: &mut http::Extensions, n: reqwest_middleware::Next<'_>)
    /// #         -> reqwest_middleware::Result<reqwest::Response> { n.run(r, e).await }
    /// # }
    /// # #[async_trait::async_trait]
    /// # impl reqwest_middleware::Middleware for PerAttempt {
    /// #     async fn handle(&self, r: reqwest::Request, e: &mut http::Extensions, n: reqwest_middleware::Next<'_>)
    /// #         -> reqwest_middleware::Result<reqwest::Response> { n.run(r, e).await }
    /// # }
    ///
    /// // reqwest-tracing's `TracingMiddleware` in place of `PerCall` opens
    /// // one span per call, with the retries' events inside it.
    /// let client = RetryMiddleware::new(RetryConfig::default())
    ///     .client_behind(reqwest::Client::builder(), |outside| outside.with(PerCall))?
    ///     .with(PerAttempt)
    ///     .build();
    /// # let _ = client;
    /// # Ok::<(), reqwest_safe_retry::ClientError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`client`](Self::client).
    pub fn client_behind(
        mut self,
        builder: reqwest::ClientBuilder,
        outside: impl FnOnce(OutsideRetries) -> OutsideRetries,
    ) -> std::result::Result<reqwest_middleware::ClientBuilder, ClientError> {
        if redirect::has_own_policy(&builder) {
            return Err(ClientError::RedirectPolicySet);
        }
        let policy = redirect::policy(self.shared.redirect.clone());
        // reqwest's own retry would resend a refused stream below the
        // middleware, unseen by its backoff, budget and count; with the
        // `http2` feature the middleware retries those itself.
        let builder = match &self.shared.reqwest_retry {
            Some(make) => builder.retry(make()),
            #[cfg(feature = "http2")]
            None => builder.retry(reqwest::retry::never()),
            #[cfg(not(feature = "http2"))]
            None => builder,
        };
        let client = builder.redirect(policy).build().map_err(ClientError::Build)?;
        Arc::make_mut(&mut self.shared).bound = true;
        let OutsideRetries(outside) = outside(OutsideRetries(ClientBuilder::new(client)));
        Ok(outside.with(self))
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

    /// The retry policy of reqwest's own that the client built by
    /// [`client`](Self::client) gets, in place of `reqwest::retry::never()`
    /// (with the `http2` feature) or the builder's (without): `make` is
    /// called once per client built, since reqwest's policy cannot be
    /// cloned.
    ///
    /// reqwest's retry resends a request below the middleware, within one
    /// of its attempts, unseen by its backoff, budget and count: with a
    /// policy that resends up to `n` times, a call may send up to
    /// `(n + 1) × (max_retries + 1)` requests, and an attempt the report
    /// counts as one may be several. Use it for what the middleware does
    /// not retry, or to keep a policy a service's clients all share.
    ///
    /// ```
    /// use reqwest_safe_retry::RetryMiddleware;
    ///
    /// // reqwest's default: refused streams resent, within its budget.
    /// let client = RetryMiddleware::default()
    ///     .with_reqwest_retry(|| reqwest::retry::for_host("api.example.test"))
    ///     .client(reqwest::Client::builder())?
    ///     .build();
    /// # let _ = client;
    /// # Ok::<(), reqwest_safe_retry::ClientError>(())
    /// ```
    pub fn with_reqwest_retry(
        mut self,
        make: impl Fn() -> reqwest::retry::Builder + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.shared).reqwest_retry = Some(Arc::new(make));
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
            .field("ledger", &self.shared.ledger)
            .field("redirect_policy", &self.shared.redirect)
            .field("reqwest_retry", &self.shared.reqwest_retry.as_ref().map(|_| "<fn>"))
            .field("built_its_client", &self.shared.bound)
            .finish_non_exhaustive()
    }
}

/// The middlewares a call meets before the retries, in
/// [`RetryMiddleware::client_behind`]: added in the order they run, on the
/// client the retries' own builder made, which it cannot replace.
pub struct OutsideRetries(ClientBuilder);

impl fmt::Debug for OutsideRetries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutsideRetries").finish_non_exhaustive()
    }
}

impl OutsideRetries {
    /// Adds `middleware`, which each call meets once.
    pub fn with<M: Middleware>(self, middleware: M) -> Self {
        Self(self.0.with(middleware))
    }

    /// As [`with`](Self::with), for a middleware already shared.
    pub fn with_arc(self, middleware: Arc<dyn Middleware>) -> Self {
        Self(self.0.with_arc(middleware))
    }

    /// Adds a request initialiser, run as each request is built.
    pub fn with_init<I: RequestInitialiser>(self, initialiser: I) -> Self {
        Self(self.0.with_init(initialiser))
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
