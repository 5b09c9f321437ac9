//! Faults on demand for tests (feature `chaos`): a middleware that answers
//! some calls with a failure instead of the server, by rules.
//!
//! Put [`Chaos`] where the faults should arise. Inside the retry layer,
//! with `.with(chaos)` on the builder [`RetryMiddleware::client`](crate::RetryMiddleware::client) returns,
//! each attempt meets the rules, and the retries see the faults as they
//! would see the real ones. Outside it, with [`Chaos::around`], the caller
//! meets them and the retries never do: the place to test a fallback.
//!
//! Nothing is injected unless a rule says so: a middleware with no rule,
//! or whose rules see no call, passes every request on untouched.
//!
//! # The faults, and what the retry layer makes of them
//!
//! Each fault is the outcome the real failure has, as reqwest returns it,
//! so the retry layer's classifier, and `is_connect()`, `is_timeout()` and
//! `is_request()` on the error, read it as the real one. The errors are
//! reqwest's own, met on loopback on purpose (reqwest's error type cannot be
//! built outside reqwest) and given the request's URL:
//!
//! | fault | what the caller gets | how it is made | retried for a request safe to repeat | for any other |
//! |---|---|---|---|---|
//! | [`Fault::status`] 502, 503, 504 | the status, no body | a response built in place of the server's | yes | no |
//! | [`Fault::status`] 429 | the status, its headers (`Retry-After`) | as above | yes | yes |
//! | [`Fault::status`] 500 and others | the status | as above | no | no |
//! | [`Fault::refused`] | a connect error (`is_connect()`), `io::ErrorKind::ConnectionRefused` in its chain | a request to a loopback port bound with no listener | yes | yes: the server never saw it |
//! | [`Fault::timeout`] | a timeout (`is_timeout()`, not `is_connect()`) | a request with reqwest's shortest timeout to a loopback port that never answers | yes | no: it may have been processed |
//! | [`Fault::reset`] | a request error (`is_request()`), `io::ErrorKind::ConnectionReset` in its chain | a loopback listener that reads the request's head, then resets | yes | no |
//! | [`Fault::cut_body`] | the server's response; reading its body fails after N bytes, `io::ErrorKind::UnexpectedEof` in the chain | the real response, its body wrapped | only with response buffering ([`BodyBuffering`](crate::BodyBuffering)), which reads the body inside the attempt | no |
//! | [`Fault::latency`] | the server's response, later; reqwest's timeout if the request's own is shorter | a wait on the middleware's [`Clock`] | as the answer | as the answer |
//!
//! Only the faults that pass the request on ([`Fault::sends_request`])
//! send it; a refused, timed-out or reset request never reaches its server,
//! so a test needs no server answering 503 to see a 503's retries.
//!
//! # Time
//!
//! Latency, and a timeout after a wait, wait on the middleware's [`Clock`]:
//! give it the retry layer's `ManualClock` (feature `test-util`) and
//! a 30 s slowdown takes no time, its wait recorded beside the retries'.
//! Rules' spans ([`Rule::starting_after`], [`Rule::lasting`]) read the same
//! clock, from when the middleware took it.
//!
//! # What it did
//!
//! [`Chaos::record`] hands out a [`ChaosRecord`] that reads, per rule, the
//! calls it saw, the faults it injected and the requests it injected into.
//! Each injection is also a debug-level `tracing` event (feature
//! `tracing`), target `reqwest_safe_retry::chaos`, naming the rule, the
//! fault, the method and the host.
//!
//! # Example
//!
//! ```
//! use http::StatusCode;
//! use reqwest_safe_retry::chaos::{Chaos, Fault, Rule};
//! use reqwest_safe_retry::clock::ManualClock;
//! use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Two 503s, then the server: no server needs to answer 503.
//! let clock = ManualClock::new();
//! let chaos = Chaos::new([Rule::new("two 503s", Fault::status(StatusCode::SERVICE_UNAVAILABLE)).first(2)])
//!     .unwrap()
//!     .with_clock(clock.clone());
//! let record = chaos.record();
//! let client = RetryMiddleware::new(RetryConfig::default())
//!     .with_clock(clock.clone())
//!     .client(reqwest::Client::builder())
//!     .unwrap()
//!     .with(chaos)
//!     .build();
//! # let server = wiremock::MockServer::start().await;
//! # wiremock::Mock::given(wiremock::matchers::any())
//! #     .respond_with(wiremock::ResponseTemplate::new(200)).mount(&server).await;
//! let response = client.get(server.uri()).send().await.unwrap();
//! assert_eq!(response.status(), 200);
//! assert_eq!(record.rule("two 503s").unwrap().injected, 2);
//! assert_eq!(clock.sleeps().len(), 2, "two waits before the retries");
//! # }
//! ```
//!
//! A fallback under test, through a dependency down for a minute:
//!
//! ```
//! # use std::time::Duration; use http::StatusCode;
//! # use reqwest_safe_retry::{chaos::{Chaos, Fault, Rule}, clock::ManualClock, RetryConfig, RetryMiddleware};
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! # let server = wiremock::MockServer::start().await;
//! # wiremock::Mock::given(wiremock::matchers::any())
//! #     .respond_with(wiremock::ResponseTemplate::new(200).set_body_string("42")).mount(&server).await;
//! # let url = server.uri();
//! let clock = ManualClock::new();
//! let down = Rule::new("down", Fault::status(StatusCode::SERVICE_UNAVAILABLE));
//! let chaos = Chaos::new([down.lasting(Duration::from_secs(60))]).unwrap().with_clock(clock.clone());
//! let record = chaos.record();
//! let client = RetryMiddleware::new(RetryConfig::default()).with_clock(clock.clone())
//!     .client(reqwest::Client::builder()).unwrap().with(chaos).build();
//! let price = async || match client.get(&url).send().await {
//!     Ok(response) if response.status().is_success() => response.text().await.unwrap(),
//!     _ => "cached".to_owned(), // the fallback under test
//! };
//! for _ in 0..30 {
//!     assert_eq!(price().await, "cached");
//!     clock.advance(Duration::from_secs(1));
//! }
//! // No more requests than calls: the retries stopped at the budget's
//! // reserve (5), then the throttle held calls back.
//! assert!(record.rule("down").unwrap().injected <= 30);
//! # clock.advance(Duration::from_secs(30));
//! # assert_eq!(price().await, "42", "the server is back");
//! # }
//! ```

mod cut;
mod fault;
mod forge;
mod record;
mod rule;

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::{Extensions, Method, StatusCode};
use rand::distr::Bernoulli;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use reqwest::{Request, Response, ResponseBuilderExt};
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next, Result};

use crate::clock::{Clock, TokioClock};

pub use fault::Fault;
pub use record::{ChaosRecord, Hit, RuleRecord};
pub use rule::Rule;

use fault::Kind;
use forge::Forge;
use rule::{Count, Step};

/// A per-request extension that overrides the rules for that request
/// (`RequestBuilder::with_extension`): every attempt of the call carries
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChaosOverride {
    /// No rule sees the request: it goes on untouched.
    Off,
    /// The rule of this name injects its fault, whatever its conditions;
    /// the call counts as seen and injected. A name no rule has fails the
    /// call with [`ChaosError::UnknownRule`].
    Force(Cow<'static, str>),
}

/// Why a [`Chaos`] middleware could not be built, or failed a call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChaosError {
    /// A rule's rate is not a share from 0 to 1.
    #[error("chaos rule `{rule}`: the rate {rate} is not between 0 and 1")]
    Rate {
        /// The rule's name.
        rule: String,
        /// The rate it was given.
        rate: f64,
    },
    /// A rule was told to inject into every 0th call.
    #[error("chaos rule `{rule}`: `every(0)` picks no call; use 1 for every call")]
    EveryZero {
        /// The rule's name.
        rule: String,
    },
    /// A rule's host condition names no host a URL can hold: a port, a
    /// path or a stray character in it.
    #[error("chaos rule `{rule}`: `{host}` is not a host a URL can name (no port, no path)")]
    Host {
        /// The rule's name.
        rule: String,
        /// The host it was given.
        host: String,
    },
    /// A rule's path condition does not start with `/`: no URL's path
    /// would match it.
    #[error("chaos rule `{rule}`: the path prefix `{prefix}` does not start with `/`")]
    Path {
        /// The rule's name.
        rule: String,
        /// The prefix it was given.
        prefix: String,
    },
    /// Two rules have the same name.
    #[error("two chaos rules are named `{0}`")]
    DuplicateName(String),
    /// A request forced a rule that does not exist.
    #[error("a request forced the chaos rule `{0}`, and no rule has that name")]
    UnknownRule(String),
    /// The loopback socket or client the errors are made with could not be
    /// set up.
    #[error("the chaos middleware could not make its fault on loopback")]
    Forge(#[source] std::io::Error),
}

/// A middleware that injects faults by [`Rule`]s, the first rule that
/// injects into a call winning. See the [module docs](self).
pub struct Chaos {
    rules: Arc<[Rule]>,
    clock: Arc<dyn Clock>,
    /// When the middleware took its clock: rules' spans count from here.
    start: Instant,
    state: Arc<Mutex<State>>,
    forge: OnceLock<Forge>,
}

/// What the rules did, and the random source behind their rates.
#[derive(Debug)]
struct State {
    seed: u64,
    random: StdRng,
    counts: Vec<Count>,
    hits: Vec<Vec<Hit>>,
}

impl State {
    fn new(rules: usize, seed: u64) -> Self {
        Self {
            seed,
            random: StdRng::seed_from_u64(seed),
            counts: vec![Count::default(); rules],
            hits: vec![Vec::new(); rules],
        }
    }
}

impl Chaos {
    /// A middleware with `rules`, tried in order, on the
    /// [`TokioClock`], with a seed drawn at random ([`Chaos::seed`] says
    /// which, [`Chaos::with_seed`] fixes it).
    ///
    /// Fails on a rate outside 0 to 1, `every(0)`, or two rules of one
    /// name.
    pub fn new(rules: impl IntoIterator<Item = Rule>) -> std::result::Result<Self, ChaosError> {
        let rules: Arc<[Rule]> = rules.into_iter().collect();
        if let Some(error) = rules.iter().find_map(Rule::invalid) {
            return Err(error);
        }
        for (at, rule) in rules.iter().enumerate() {
            if rules[..at].iter().any(|earlier| earlier.name == rule.name) {
                return Err(ChaosError::DuplicateName(rule.name.clone().into_owned()));
            }
        }
        let clock: Arc<dyn Clock> = Arc::new(TokioClock);
        let seed = rand::rng().random::<u64>();
        Ok(Self {
            start: clock.now(),
            clock,
            state: Arc::new(Mutex::new(State::new(rules.len(), seed))),
            rules,
            forge: OnceLock::new(),
        })
    }

    /// Waits, and counts the rules' spans, on `clock`, from now.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self.start = self.clock.now();
        self
    }

    /// Draws the rates from a source seeded with `seed`: the same seed and
    /// the same calls, in the same order, inject the same faults.
    pub fn with_seed(self, seed: u64) -> Self {
        *self.lock() = State::new(self.rules.len(), seed);
        self
    }

    /// The seed the rates are drawn with.
    pub fn seed(&self) -> u64 {
        self.lock().seed
    }

    /// A handle on what the rules did, which stays readable once the
    /// middleware is in a client.
    pub fn record(&self) -> ChaosRecord {
        ChaosRecord::new(Arc::clone(&self.rules), Arc::clone(&self.state))
    }

    /// A client builder whose calls meet the rules before `client`'s
    /// middlewares (its retries among them) see them, so what is injected
    /// reaches the caller as it is. Call `.build()` on it.
    ///
    /// Requests are built by the client it builds, so request initialisers
    /// of `client`'s (`with_init`) do not run: add them to the builder
    /// returned.
    pub fn around(self, client: ClientWithMiddleware) -> reqwest_middleware::ClientBuilder {
        let reqwest: reqwest::Client = client.as_ref().clone();
        reqwest_middleware::ClientBuilder::new(reqwest).with(self).with(Forward(client))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is counts: a panic elsewhere leaves them usable.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The rule that injects into a call for `request`, if one does, with
    /// the call counted.
    fn choose(
        &self,
        request: &Request,
        extensions: &Extensions,
    ) -> std::result::Result<Option<usize>, ChaosError> {
        let elapsed = self.clock.now().saturating_duration_since(self.start);
        let chosen = match extensions.get::<ChaosOverride>() {
            Some(ChaosOverride::Off) => return Ok(None),
            Some(ChaosOverride::Force(name)) => {
                let at = self.rules.iter().position(|rule| rule.name == *name);
                let at = at.ok_or_else(|| ChaosError::UnknownRule(name.clone().into_owned()))?;
                let mut state = self.lock();
                state.counts[at].seen = state.counts[at].seen.saturating_add(1);
                (Some(at), state)
            }
            None => {
                // Predicates run before the lock: one may read the record.
                let sees: Vec<bool> =
                    self.rules.iter().map(|rule| rule.sees(request, elapsed)).collect();
                let mut state = self.lock();
                (first_to_inject(&self.rules, &mut state, &sees), state)
            }
        };
        let (chosen, mut state) = chosen;
        if let Some(at) = chosen {
            state.counts[at].injected = state.counts[at].injected.saturating_add(1);
            let hits = &mut state.hits[at];
            if hits.len() < record::HITS_KEPT {
                hits.push(Hit::new(request, elapsed));
            }
        }
        Ok(chosen)
    }

    /// Injects `fault` into the call of `request`.
    async fn inject(
        &self,
        fault: &Fault,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let url = request.url().clone();
        match &fault.0 {
            Kind::Response { status, headers } => {
                let mut response = http::Response::builder().status(*status).url(url);
                if let Some(own) = response.headers_mut() {
                    own.extend(headers.clone());
                }
                let response = response.body(reqwest::Body::from(Vec::new()));
                Ok(Response::from(response.map_err(reqwest_middleware::Error::middleware)?))
            }
            Kind::Refused => Err(self.forge()?.refused(&url).await?.into()),
            Kind::Timeout { after } => {
                // reqwest would end the request at its own timeout.
                let own = request.timeout().copied();
                self.wait(own.map_or(*after, |own| own.min(*after))).await;
                Err(self.forge()?.timeout(&url).await?.into())
            }
            Kind::Reset => Err(self.forge()?.reset(&url).await?.into()),
            Kind::CutBody { after } => {
                let bodiless = request.method() == Method::HEAD;
                let response = next.run(request, extensions).await?;
                let status = response.status();
                let empty = status.is_informational()
                    || status == StatusCode::NO_CONTENT
                    || status == StatusCode::NOT_MODIFIED;
                Ok(if bodiless || empty { response } else { cut_body(response, *after) })
            }
            Kind::Latency { by } => self.late(*by, request, extensions, next).await,
        }
    }

    /// `request` passed on after `by`, its own timeout, if any, counting
    /// the wait in: when that timeout is not longer than `by`, reqwest's
    /// timeout error at the timeout, the request never sent.
    async fn late(
        &self,
        by: Duration,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        match request.timeout().copied() {
            Some(timeout) if timeout <= by => {
                self.wait(timeout).await;
                Err(self.forge()?.timeout(request.url()).await?.into())
            }
            own => {
                self.wait(by).await;
                if let Some(timeout) = own {
                    *request.timeout_mut() = Some(timeout.saturating_sub(by));
                }
                next.run(request, extensions).await
            }
        }
    }

    /// Waits `wait` on the clock; a zero wait is no sleep at all.
    async fn wait(&self, wait: Duration) {
        if !wait.is_zero() {
            self.clock.sleep(wait).await;
        }
    }

    /// The loopback machinery, set up on first use.
    fn forge(&self) -> std::result::Result<&Forge, ChaosError> {
        if let Some(forge) = self.forge.get() {
            return Ok(forge);
        }
        let forge = Forge::new()?;
        Ok(self.forge.get_or_init(|| forge))
    }

    async fn handle_call(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let Some(at) = self.choose(&request, extensions)? else {
            return next.run(request, extensions).await;
        };
        let rule = &self.rules[at];
        notify(rule, &request);
        self.inject(&rule.fault, request, extensions, next).await
    }
}

/// The first of `rules` whose conditions and rate pick a call that each
/// rule `sees` or not.
fn first_to_inject(rules: &[Rule], state: &mut State, sees: &[bool]) -> Option<usize> {
    let State { random, counts, .. } = state;
    let rules = rules.iter().zip(counts.iter_mut()).zip(sees);
    rules.into_iter().position(|((rule, count), sees)| {
        rule.step(count, *sees) == Step::Drawn
            && rule
                .rate
                .is_none_or(|rate| Bernoulli::new(rate).is_ok_and(|coin| random.sample(coin)))
    })
}

/// `response`, its body cut after `after` bytes.
fn cut_body(response: Response, after: usize) -> Response {
    let url = response.url().clone();
    let (mut parts, body) = http::Response::<reqwest::Body>::from(response).into_parts();
    // The URL travels in an extension only reqwest's builder can write.
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        parts.extensions.extend(carrier.into_parts().0.extensions);
    }
    let body = reqwest::Body::wrap(cut::Cut::new(body, after));
    Response::from(http::Response::from_parts(parts, body))
}

/// The event for an injection.
fn notify(rule: &Rule, request: &Request) {
    #[cfg(feature = "tracing")]
    tracing::event!(
        target: "reqwest_safe_retry::chaos",
        tracing::Level::DEBUG,
        chaos.rule = %rule.name,
        chaos.fault = rule.fault.label(),
        http.request.method = %request.method(),
        server.address = request.url().host_str().unwrap_or_default(),
        "fault injected"
    );
    let _ = (rule, request);
}

impl From<ChaosError> for reqwest_middleware::Error {
    fn from(error: ChaosError) -> Self {
        Self::middleware(error)
    }
}

impl fmt::Debug for Chaos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chaos")
            .field("rules", &self.rules)
            .field("clock", &self.clock)
            .field("seed", &self.seed())
            .finish_non_exhaustive()
    }
}

/// The trait's signature as `async_trait` would write it, around one
/// `async fn`.
impl Middleware for Chaos {
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
        Box::pin(self.handle_call(req, extensions, next))
    }
}

/// The end of [`Chaos::around`]'s chain: the wrapped client, with the
/// call's extensions.
#[derive(Debug)]
struct Forward(ClientWithMiddleware);

impl Middleware for Forward {
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        req: Request,
        extensions: &'life1 mut Extensions,
        _next: Next<'life2>,
    ) -> Pin<Box<dyn Future<Output = Result<Response>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.0.execute_with_extensions(req, extensions))
    }
}

#[cfg(test)]
mod tests;
