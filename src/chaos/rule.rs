//! When a rule injects its fault: which requests, which of the calls it
//! sees, how often, in which span of the clock's time, how many times.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};
use reqwest::Request;

use super::Fault;

/// A fault and the conditions under which it is injected. With no
/// condition, a rule injects into every call it sees.
///
/// A rule *sees* a call when no rule before it injected into the call, the
/// call's request matches every request condition ([`method`](Self::method),
/// [`host`](Self::host), [`path`](Self::path), [`header`](Self::header),
/// [`matching`](Self::matching)) and the clock is inside the rule's span
/// ([`starting_after`](Self::starting_after), [`lasting`](Self::lasting)).
/// Of the calls it sees, it injects into those its script picks
/// ([`first`](Self::first), [`every`](Self::every),
/// [`sequence`](Self::sequence); all of them if none is set), then those
/// its [`rate`](Self::rate) draws, until its [`limit`](Self::limit).
///
/// ```
/// use std::time::Duration;
/// use http::{Method, StatusCode};
/// use reqwest_safe_retry::chaos::{Fault, Rule};
///
/// // Every third POST to /orders fails with a 503, for the first minute.
/// let rule = Rule::new("orders down", Fault::status(StatusCode::SERVICE_UNAVAILABLE))
///     .method(Method::POST)
///     .path("/orders")
///     .every(3)
///     .lasting(Duration::from_secs(60));
/// # let _ = rule;
/// ```
#[derive(Clone)]
pub struct Rule {
    pub(super) name: Cow<'static, str>,
    pub(super) fault: Fault,
    matchers: Vec<Matcher>,
    script: Script,
    pub(super) rate: Option<f64>,
    start_after: Duration,
    lasting: Option<Duration>,
    limit: Option<u64>,
}

/// A condition on the request.
#[derive(Clone)]
enum Matcher {
    Method(Method),
    /// The host as a URL writes it, or what was given if no URL can
    /// hold it (refused when the middleware is built).
    Host(Result<String, String>),
    Path(String),
    Header(HeaderName),
    Custom(Arc<dyn Fn(&Request) -> bool + Send + Sync>),
}

/// Which of the calls a rule sees it picks, by their number (0 for the
/// first it saw).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Script {
    All,
    First(u64),
    Every(u64),
    Sequence(Box<[bool]>),
}

impl Script {
    /// Whether the call numbered `seen` is picked.
    fn picks(&self, seen: u64) -> bool {
        match self {
            Self::All => true,
            Self::First(n) => seen < *n,
            Self::Every(k) => seen.checked_add(1).and_then(|nth| nth.checked_rem(*k)) == Some(0),
            Self::Sequence(pattern) => {
                usize::try_from(seen).ok().and_then(|at| pattern.get(at)).copied().unwrap_or(false)
            }
        }
    }
}

/// What a rule has done so far: the calls it saw, the faults it injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Count {
    pub(super) seen: u64,
    pub(super) injected: u64,
}

/// How far a call went through a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// The request or the time is outside the rule: it did not see the call.
    Unseen,
    /// Seen, and not picked by the script or past the limit.
    Spared,
    /// Seen and picked: the rate, if any, decides.
    Drawn,
}

impl Rule {
    /// A rule named `name` (in records, events and
    /// [`ChaosOverride::Force`](super::ChaosOverride::Force); names are
    /// unique within one middleware) that injects `fault`.
    pub fn new(name: impl Into<Cow<'static, str>>, fault: Fault) -> Self {
        Self {
            name: name.into(),
            fault,
            matchers: Vec::new(),
            script: Script::All,
            rate: None,
            start_after: Duration::ZERO,
            lasting: None,
            limit: None,
        }
    }

    /// Only requests of `method`.
    pub fn method(self, method: Method) -> Self {
        self.with_matcher(Matcher::Method(method))
    }

    /// Only requests to `host`, whatever the scheme and port: a name, an
    /// IPv4 address or an IPv6 one (with or without brackets), compared as
    /// a URL writes it (lowercase, an international name in punycode). A
    /// host no URL can hold, a port among them, is refused when the
    /// middleware is built.
    pub fn host(self, host: &str) -> Self {
        self.with_matcher(Matcher::Host(url_host(host).ok_or_else(|| host.to_owned())))
    }

    /// Only requests whose path starts with `prefix`, which starts with
    /// `/` (a prefix that does not is refused when the middleware is
    /// built).
    pub fn path(self, prefix: &str) -> Self {
        self.with_matcher(Matcher::Path(prefix.to_owned()))
    }

    /// Only requests that carry the header `name`.
    pub fn header(self, name: HeaderName) -> Self {
        self.with_matcher(Matcher::Header(name))
    }

    /// Only requests for which `predicate` holds.
    pub fn matching(self, predicate: impl Fn(&Request) -> bool + Send + Sync + 'static) -> Self {
        self.with_matcher(Matcher::Custom(Arc::new(predicate)))
    }

    /// Injects into the first `n` calls the rule sees, then into none.
    pub fn first(mut self, n: u64) -> Self {
        self.script = Script::First(n);
        self
    }

    /// Injects into every `k`-th call the rule sees: the `k`-th, the
    /// `2k`-th, … (`k` of 0 is refused when the middleware is built).
    pub fn every(mut self, k: u64) -> Self {
        self.script = Script::Every(k);
        self
    }

    /// Injects into the `n`-th call the rule sees when the pattern's `n`-th
    /// entry is `true`; into none past the pattern's end.
    pub fn sequence(mut self, pattern: impl IntoIterator<Item = bool>) -> Self {
        self.script = Script::Sequence(pattern.into_iter().collect());
        self
    }

    /// Of the calls the script picks, injects into a share `rate` (from 0
    /// to 1), drawn from the middleware's seeded source.
    pub fn rate(mut self, rate: f64) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Sees no call until `after` has passed on the middleware's clock,
    /// counted from when the middleware took the clock.
    pub fn starting_after(mut self, after: Duration) -> Self {
        self.start_after = after;
        self
    }

    /// Sees no call once `span` has passed since the rule's start.
    pub fn lasting(mut self, span: Duration) -> Self {
        self.lasting = Some(span);
        self
    }

    /// Injects at most `hits` times.
    pub fn limit(mut self, hits: u64) -> Self {
        self.limit = Some(hits);
        self
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fault the rule injects.
    pub fn fault(&self) -> &Fault {
        &self.fault
    }

    fn with_matcher(mut self, matcher: Matcher) -> Self {
        self.matchers.push(matcher);
        self
    }

    /// Whether `request` meets every request condition.
    fn matches(&self, request: &Request) -> bool {
        self.matchers.iter().all(|matcher| match matcher {
            Matcher::Method(method) => request.method() == method,
            Matcher::Host(host) => host.as_deref().ok() == request.url().host_str(),
            Matcher::Path(prefix) => request.url().path().starts_with(prefix.as_str()),
            Matcher::Header(name) => request.headers().contains_key(name),
            Matcher::Custom(predicate) => predicate(request),
        })
    }

    /// Whether `elapsed`, the time since the middleware took its clock, is
    /// inside the rule's span.
    fn in_span(&self, elapsed: Duration) -> bool {
        let ended =
            self.lasting.is_some_and(|span| elapsed.saturating_sub(self.start_after) >= span);
        elapsed >= self.start_after && !ended
    }

    /// Whether the rule sees a call for `request` at `elapsed`: its
    /// request conditions and its span hold.
    pub(super) fn sees(&self, request: &Request, elapsed: Duration) -> bool {
        self.in_span(elapsed) && self.matches(request)
    }

    /// Takes a call the rule `sees` (or not) through its conditions before
    /// its rate, counting it as seen if it is.
    pub(super) fn step(&self, count: &mut Count, sees: bool) -> Step {
        if !sees {
            return Step::Unseen;
        }
        let number = count.seen;
        count.seen = count.seen.saturating_add(1);
        let spent = self.limit.is_some_and(|limit| count.injected >= limit);
        if spent || !self.script.picks(number) { Step::Spared } else { Step::Drawn }
    }

    /// Why the rule cannot be used, if it cannot.
    pub(super) fn invalid(&self) -> Option<super::ChaosError> {
        let name = self.name.clone().into_owned();
        if let Some(rate) = self.rate.filter(|rate| !(0.0..=1.0).contains(rate)) {
            return Some(super::ChaosError::Rate { rule: name, rate });
        }
        if self.script == Script::Every(0) {
            return Some(super::ChaosError::EveryZero { rule: name });
        }
        self.matchers.iter().find_map(|matcher| match matcher {
            Matcher::Host(Err(host)) => {
                Some(super::ChaosError::Host { rule: name.clone(), host: host.clone() })
            }
            Matcher::Path(prefix) if !prefix.starts_with('/') => {
                Some(super::ChaosError::Path { rule: name.clone(), prefix: prefix.clone() })
            }
            _ => None,
        })
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("fault", &self.fault)
            .field("conditions", &self.matchers)
            .field("script", &self.script)
            .field("rate", &self.rate)
            .field("start_after", &self.start_after)
            .field("lasting", &self.lasting)
            .field("limit", &self.limit)
            .finish()
    }
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Method(method) => write!(f, "method {method}"),
            Self::Host(Ok(host) | Err(host)) => write!(f, "host {host}"),
            Self::Path(prefix) => write!(f, "path {prefix}…"),
            Self::Header(name) => write!(f, "header {name}"),
            Self::Custom(_) => f.write_str("predicate"),
        }
    }
}

/// `host` as a URL's host writes it, if a URL can hold it with no port.
fn url_host(host: &str) -> Option<String> {
    let bracketed = host.contains(':') && !host.starts_with('[');
    let host = if bracketed { format!("[{host}]") } else { host.to_owned() };
    let url = reqwest::Url::parse(&format!("http://{host}/")).ok()?;
    let plain = url.port().is_none()
        && url.path() == "/"
        && url.username().is_empty()
        && url.query().is_none()
        && url.fragment().is_none();
    plain.then(|| url.host_str().map(str::to_owned)).flatten()
}
