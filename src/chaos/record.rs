//! What the rules did, readable while the middleware works.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::Method;
use reqwest::{Request, Url};

use super::{Rule, State};

/// The injections kept per rule, the first ones; the counts go on.
pub(super) const HITS_KEPT: usize = 1024;

/// A handle on what a [`Chaos`](super::Chaos) middleware's rules did, from
/// [`Chaos::record`](super::Chaos::record).
#[derive(Clone)]
pub struct ChaosRecord {
    rules: Arc<[Rule]>,
    state: Arc<Mutex<State>>,
}

/// What one rule did so far.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleRecord {
    /// The rule's name.
    pub name: String,
    /// The calls the rule saw: its request conditions and span held, and no
    /// rule before it injected.
    pub seen: u64,
    /// The faults it injected.
    pub injected: u64,
    /// The requests it injected into, the first 1,024 of them.
    pub hits: Vec<Hit>,
}

/// One request a rule injected into.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hit {
    /// The request's method.
    pub method: Method,
    /// The request's URL.
    pub url: Url,
    /// When, on the middleware's clock, counted from when it took the
    /// clock.
    pub at: Duration,
}

impl Hit {
    pub(super) fn new(request: &Request, at: Duration) -> Self {
        Self { method: request.method().clone(), url: request.url().clone(), at }
    }
}

impl ChaosRecord {
    pub(super) fn new(rules: Arc<[Rule]>, state: Arc<Mutex<State>>) -> Self {
        Self { rules, state }
    }

    /// Every rule's record, in the rules' order.
    pub fn rules(&self) -> Vec<RuleRecord> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let records = self.rules.iter().zip(&state.counts).zip(&state.hits);
        records
            .map(|((rule, count), hits)| RuleRecord {
                name: rule.name.clone().into_owned(),
                seen: count.seen,
                injected: count.injected,
                hits: hits.clone(),
            })
            .collect()
    }

    /// The record of the rule named `name`, if there is one.
    pub fn rule(&self, name: &str) -> Option<RuleRecord> {
        self.rules().into_iter().find(|record| record.name == name)
    }

    /// The faults injected by every rule together.
    pub fn injected(&self) -> u64 {
        self.rules().iter().map(|record| record.injected).sum()
    }

    /// The seed the rates are drawn with.
    pub fn seed(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).seed
    }
}

impl std::fmt::Debug for ChaosRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.rules()).finish()
    }
}
