//! One call's dealings with the budget: what its answers earn, what its
//! failures note, and the retries it pays for, given back when they turn
//! out free.

use std::sync::Arc;

use super::account::{Account, Paid};
use super::ledger::Ledger;
use crate::clock::Clock;
use crate::hosts::{Located, Origin};

/// A call's lease on the budget of the host it talks to. With no budget
/// configured, every retry is allowed and nothing is counted.
///
/// The host's account is looked up the first time the call needs it for
/// more than one answer: a call whose first answer is final only pays into
/// it, and holds nothing.
pub(crate) struct Lease<'a> {
    ledger: Option<&'a Ledger>,
    clock: &'a dyn Clock,
    account: Option<Arc<Account>>,
    /// The last retry paid for, until its outcome is known, and whether it
    /// went out.
    paid: Option<(Paid, Sent)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    No,
    Yes,
}

impl<'a> Lease<'a> {
    /// A lease on `ledger`, if there is a budget, reading time from `clock`.
    pub(crate) fn new(ledger: Option<&'a Ledger>, clock: &'a dyn Clock) -> Self {
        let ledger = ledger.filter(|ledger| ledger.budgeted());
        Self { ledger, clock, account: None, paid: None }
    }

    /// Holds the account of `url`'s host for the rest of the call: its
    /// request is about to go out with no copy left to name the host by.
    /// Past the bound of the table of hosts, a host that has not failed is
    /// not let in for it: its answer then earns nothing, as any answer of
    /// a host outside the table.
    pub(crate) fn hold(&mut self, url: &(impl Located + ?Sized)) {
        if let (Some(ledger), None) = (self.ledger, &self.account) {
            self.account = ledger.admitted(url, self.clock.now());
        }
    }

    /// Holds the account of `url`'s host for the rest of the call, letting
    /// the host in if it is new: a call that will pay for more copies of
    /// its request before it knows any outcome (a hedge).
    pub(crate) fn hold_to_pay(&mut self, url: &(impl Located + ?Sized)) {
        if let (Some(ledger), None) = (self.ledger, &self.account) {
            self.account = Some(ledger.account(url, self.clock.now()));
        }
    }

    /// A final answer from `url`'s host (`None`: the host held): it earns a
    /// share of a retry, and the retry that reached it costs nothing. An
    /// answer the host `accepted` (see [`crate::throttle`]) is counted in
    /// its throttle in the same lookup, where there is one: returns whether
    /// that lookup was made (an answer not accepted is not counted there).
    pub(crate) fn answered(&mut self, url: Option<Origin<'_>>, accepted: bool) -> bool {
        let Some(ledger) = self.ledger else { return false };
        match (&self.account, url) {
            (Some(account), _) => {
                let now = self.clock.now();
                if let Some((paid, _)) = self.paid.take() {
                    ledger.refund(account, paid, now);
                }
                ledger.earn(account, now);
                false
            }
            // The common case: nothing held, no reference counted, and no
            // time read but to book a retry's worth of answers.
            (None, Some(url)) => {
                ledger.earn_for(&url, accepted, || self.clock.now());
                true
            }
            (None, None) => false,
        }
    }

    /// A retryable outcome from `url`'s host (`None`: the host held): the
    /// host is failing now, and the retry that led here stays spent.
    pub(crate) fn failed(&mut self, url: Option<Origin<'_>>) {
        // A failing host is let in, making room among the calm ones.
        if let (Some(ledger), None, Some(url)) = (self.ledger, &self.account, url) {
            self.account = Some(ledger.account(&url, self.clock.now()));
        }
        self.paid = None;
        if let (Some(ledger), Some(account)) = (self.ledger, &self.account) {
            ledger.note_failure(account, self.clock.now());
        }
    }

    /// Pays for one more attempt from the account held, if the budget
    /// allows it; always, with no budget.
    pub(crate) fn spend(&mut self) -> bool {
        let (Some(ledger), Some(account)) = (self.ledger, &self.account) else {
            return self.ledger.is_none();
        };
        match ledger.try_spend(account, self.clock.now()) {
            Some(paid) => {
                self.paid = Some((paid, Sent::No));
                true
            }
            None => false,
        }
    }

    /// The attempt paid for went out: it is given back only if it reaches
    /// a final answer.
    pub(crate) fn sent(&mut self) {
        if let Some((_, sent)) = &mut self.paid {
            *sent = Sent::Yes;
        }
    }

    /// The attempt paid for went out, and its cost stands whatever it meets
    /// (a hedge's copy).
    pub(crate) fn keep(&mut self) {
        self.paid = None;
    }
}

impl Drop for Lease<'_> {
    /// A retry paid for but never sent (the call was cancelled during the
    /// wait, or its deadline passed first) is given back.
    fn drop(&mut self) {
        if let (Some((paid, Sent::No)), Some(ledger), Some(account)) =
            (self.paid, self.ledger, &self.account)
        {
            ledger.refund(account, paid, self.clock.now());
        }
    }
}

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::budget::RetryBudget;
    use crate::clock::ManualClock;

    fn url() -> reqwest::Url {
        reqwest::Url::parse("http://a.test/").unwrap()
    }

    /// A ledger whose hosts hold `reserve` retries, and a manual clock.
    fn ledger(reserve: u32) -> (Ledger, ManualClock) {
        (
            Ledger::new(Some(&RetryBudget::default().with_reserve(reserve)), 3, false, false)
                .unwrap(),
            ManualClock::new(),
        )
    }

    /// Retries the host's account allows now, found by spending them.
    fn left(ledger: &Ledger, clock: &ManualClock) -> u32 {
        let mut lease = Lease::new(Some(ledger), clock);
        lease.failed(Some(url().as_origin()));
        let mut n = 0;
        while lease.spend() {
            lease.keep();
            n += 1;
        }
        n
    }

    #[test]
    fn without_a_budget_every_retry_is_allowed() {
        let clock = ManualClock::new();
        let mut lease = Lease::new(None, &clock);
        lease.failed(Some(url().as_origin()));
        assert!(lease.spend() && lease.spend());
        lease.answered(None, false);
    }

    #[test]
    fn a_request_sent_with_no_copy_still_earns_for_its_host() {
        let (ledger, clock) = ledger(0);
        for _ in 0..10 {
            let mut lease = Lease::new(Some(&ledger), &clock);
            // The last attempt: no copy is left to name the host by.
            lease.hold(&url());
            lease.answered(None, false);
        }
        let mut failing = Lease::new(Some(&ledger), &clock);
        failing.hold(&url());
        failing.failed(None);
        assert!(failing.spend(), "ten answers earned a retry, and the host held pays it");
        assert!(!failing.spend(), "one");
    }

    #[test]
    fn a_retry_is_paid_for_only_with_the_host_held() {
        let (ledger, clock) = ledger(1);
        let mut lease = Lease::new(Some(&ledger), &clock);
        assert!(!lease.spend(), "no host held, nothing to pay from");
        lease.failed(Some(url().as_origin()));
        assert!(lease.spend());
        assert!(!lease.spend(), "a reserve of one");
    }

    #[test]
    fn each_way_a_paid_retry_ends_is_booked_as_it_should_be() {
        // (what happens to the paid retry, whether its cost is given back)
        type Ending = fn(&mut Lease<'_>);
        let endings: [(&str, Ending, bool); 5] = [
            (
                "sent, then a final answer",
                |l| {
                    l.sent();
                    l.answered(None, false);
                },
                true,
            ),
            (
                "sent, then a failure",
                |l| {
                    l.sent();
                    l.failed(None);
                },
                false,
            ),
            ("never sent: dropped during the wait", |_| {}, true),
            ("sent, then dropped in flight", |l| l.sent(), false),
            (
                "a hedge's copy, then a final answer",
                |l| {
                    l.keep();
                    l.answered(None, false);
                },
                false,
            ),
        ];
        for (name, ending, given_back) in endings {
            let (ledger, clock) = ledger(1);
            {
                let mut lease = Lease::new(Some(&ledger), &clock);
                lease.failed(Some(url().as_origin()));
                assert!(lease.spend(), "{name}");
                ending(&mut lease);
            }
            clock.advance(Duration::from_millis(1));
            // A final answer also earns a tenth, which the full reserve
            // cannot hold: only a refund brings a retry back.
            assert_eq!(left(&ledger, &clock) == 1, given_back, "{name}");
        }
    }

    #[test]
    fn a_call_that_only_answers_holds_no_account() {
        let (ledger, clock) = ledger(1);
        let mut lease = Lease::new(Some(&ledger), &clock);
        lease.answered(Some(url().as_origin()), false);
        assert!(lease.account.is_none());
        assert_eq!(left(&ledger, &clock), 1, "the host is known, its reserve full");
    }
}
