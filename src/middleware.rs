//! The middleware: one loop of attempt, decide, wait.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, Method};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next, Result};

use crate::budget::Budget;
use crate::clock::{Clock, TokioClock};
use crate::config::RetryConfig;
use crate::decision::{Decision, StopReason};
use crate::overrides::NoRetry;
use crate::policy::{Plan, Policy, Progress};
use crate::random::{JitterSource, ThreadRngJitter};
use crate::report::{AttemptNumber, ReportSlot, RetryReport};

type Hook = Arc<dyn Fn(&RetryEvent<'_>) + Send + Sync>;

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
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    policy: Policy,
    hook: Option<Hook>,
}

/// What the middleware decided after one attempt, as a hook sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RetryEvent<'a> {
    /// The attempt just made, starting at 1.
    pub attempt: u32,
    /// The request's method.
    pub method: &'a Method,
    /// What happens next.
    pub decision: Decision,
}

impl Default for RetryMiddleware {
    fn default() -> Self {
        Self::new(RetryConfig::default())
    }
}

impl RetryMiddleware {
    /// A middleware with this policy, the [`TokioClock`] and thread-local
    /// randomness.
    pub fn new(config: RetryConfig) -> Self {
        let budget = config.budget().map(|budget| Arc::new(Budget::new(budget)));
        let policy = Policy {
            config,
            clock: Arc::new(TokioClock),
            jitter: Arc::new(ThreadRngJitter),
            budget,
        };
        let inner = Inner { policy, hook: None };
        Self { inner: Arc::new(inner) }
    }

    /// Uses `clock` for every reading of the time and every wait.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        Arc::make_mut(&mut self.inner).policy.clock = Arc::new(clock);
        self
    }

    /// Uses `source` for the randomness behind jitter.
    pub fn with_jitter_source(mut self, source: impl JitterSource + 'static) -> Self {
        Arc::make_mut(&mut self.inner).policy.jitter = Arc::new(source);
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
        Arc::make_mut(&mut self.inner).hook = Some(Arc::new(hook));
        self
    }

    /// The policy in force.
    pub fn config(&self) -> &RetryConfig {
        &self.inner.policy.config
    }
}

impl fmt::Debug for RetryMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryMiddleware")
            .field("config", &self.inner.policy.config)
            .field("clock", &self.inner.policy.clock)
            .field("hook", &self.inner.hook.as_ref().map(|_| "<fn>"))
            .field("budget", &self.inner.policy.budget)
            .finish_non_exhaustive()
    }
}

/// Written out rather than through `async_trait`, whose extra async block
/// would hold a second copy of the request in every request's future.
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
        self.inner.execute(req, extensions, next)
    }
}

type BoxFuture<'a> = Pin<Box<dyn Future<Output = Result<Response>> + Send + 'a>>;

/// One logical request: its settings, its progress, its method for the logs.
struct Call {
    plan: Plan,
    progress: Progress,
    method: Method,
}

/// After an attempt: the wait and the request to send next, or why to stop.
type AfterAttempt = std::result::Result<(Duration, Request), StopReason>;

impl Inner {
    /// Reads the overrides and copies the request before anything is
    /// awaited, then sends the first attempt inline and hands any retries to
    /// a boxed loop, so the common case (no retry) carries neither the loop's
    /// state nor a second copy of the request in its future.
    fn execute<'a>(
        &'a self,
        req: Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> BoxFuture<'a> {
        if extensions.get::<NoRetry>().is_some() {
            let method = req.method().clone();
            return Box::pin(async move {
                let outcome = next.run(req, extensions).await;
                self.notify(1, &method, Decision::Stop(StopReason::Disabled));
                let report = RetryReport {
                    attempts: 1,
                    total_wait: Duration::ZERO,
                    stop: StopReason::Disabled,
                };
                finish(extensions, outcome, report)
            });
        }
        let (plan, progress) = self.policy.plan(&req, extensions);
        let mut call = Call { plan, progress, method: req.method().clone() };
        call.progress.attempts = 1;
        let (attempt, kept) = self.split(&call, req);
        Box::pin(async move {
            let outcome = next.clone().run(attempt, extensions).await;
            match self.conclude(&mut call, kept, &outcome) {
                Err(stop) => finish(extensions, outcome, call.report(stop)),
                Ok((after, template)) => {
                    Box::pin(self.retries(call, outcome, after, template, extensions, next)).await
                }
            }
        })
    }

    /// Waits and attempts again until an attempt says stop.
    async fn retries(
        &self,
        mut call: Call,
        mut outcome: Result<Response>,
        mut after: Duration,
        mut template: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        loop {
            if let Ok(response) = outcome {
                drain(response, self.policy.config.drain_limit()).await;
            }
            self.policy.clock.sleep(after).await;
            call.progress.total_wait = call.progress.total_wait.saturating_add(after);
            call.progress.attempts += 1;
            extensions.insert(AttemptNumber(call.progress.attempts));
            let (attempt, kept) = self.split(&call, template);
            outcome = next.clone().run(attempt, extensions).await;
            match self.conclude(&mut call, kept, &outcome) {
                Err(stop) => return finish(extensions, outcome, call.report(stop)),
                Ok((wait, request)) => (after, template) = (wait, request),
            }
        }
    }

    /// The request to send and the original to keep for the next attempt. No
    /// copy is made when no retry can follow and no predicate needs to see
    /// the request; a body that cannot be copied is sent as it is, once.
    fn split(&self, call: &Call, template: Request) -> (Request, Option<Request>) {
        let last = call.progress.attempts > call.plan.max_retries;
        if last && self.policy.config.predicate().is_none() {
            return (template, None);
        }
        match template.try_clone() {
            Some(copy) => (copy, Some(template)),
            None => (template, None),
        }
    }

    /// Decides what follows an attempt, and tells the hook and the logs.
    fn conclude(
        &self,
        call: &mut Call,
        kept: Option<Request>,
        outcome: &Result<Response>,
    ) -> AfterAttempt {
        let decision = self.policy.decide(kept.as_ref(), outcome, &call.plan, &mut call.progress);
        self.notify(call.progress.attempts, &call.method, decision);
        match (decision, kept) {
            (Decision::Retry { after, .. }, Some(request)) => Ok((after, request)),
            (Decision::Stop(stop), _) => Err(stop),
            // `decide` never retries without a kept request.
            (Decision::Retry { .. }, None) => Err(StopReason::NotReplayable),
        }
    }

    fn notify(&self, attempt: u32, method: &Method, decision: Decision) {
        #[cfg(feature = "tracing")]
        match decision {
            Decision::Retry { after, reason } => tracing::debug!(
                attempt,
                method = %method,
                reason = %reason,
                wait_ms = after.as_millis() as u64,
                "retrying request"
            ),
            Decision::Stop(StopReason::Final) if attempt == 1 => {}
            Decision::Stop(reason) => tracing::debug!(
                attempt,
                method = %method,
                reason = %reason,
                "not retrying request"
            ),
        }
        if let Some(hook) = &self.hook {
            hook(&RetryEvent { attempt, method, decision });
        }
    }
}

impl Call {
    fn report(&self, stop: StopReason) -> RetryReport {
        RetryReport { attempts: self.progress.attempts, total_wait: self.progress.total_wait, stop }
    }
}

/// Records the report where the caller can find it and returns the outcome.
fn finish(
    extensions: &mut Extensions,
    mut outcome: Result<Response>,
    report: RetryReport,
) -> Result<Response> {
    if let Some(slot) = extensions.get::<ReportSlot>() {
        slot.set(report);
    }
    if let Ok(response) = &mut outcome {
        response.extensions_mut().insert(report);
    }
    outcome
}

/// Reads and discards up to `limit` bytes of a response that is being
/// retried, so its connection can go back to the pool; a longer body is
/// dropped, which closes the connection instead of reading it all.
async fn drain(mut response: Response, limit: usize) {
    if response.content_length().is_some_and(|len| len > limit as u64) {
        return;
    }
    let mut read = 0usize;
    while read < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => read = read.saturating_add(chunk.len()),
            Ok(None) | Err(_) => break,
        }
    }
}
