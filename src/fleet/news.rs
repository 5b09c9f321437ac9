//! News from the store's feed: a pause another process wrote, taken up
//! the moment it is heard.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::{Fleet, FleetHost, News, PauseLeft, lock};
use crate::budget::Ledger;
use crate::clock::Clock;

/// News from the store's feed taken up between two rounds at most; past
/// it, news is ignored (and counted) until the next round: a feed that
/// floods costs the process little.
pub(super) const MOST_NEWS: u64 = 1_000;

/// A member's hosts in use as the store names them, and how many hosts
/// its books held when they were listed.
#[derive(Default)]
pub(super) struct Known {
    pub(super) names: HashMap<String, FleetHost>,
    pub(super) books: usize,
}

impl Fleet {
    /// Takes up a pause the store's feed told of, written by another
    /// process, for every member that called the host lately.
    pub(super) fn hear(&self, news: News<'_>) {
        let counts = &self.inner.counts;
        if self.inner.news.fetch_add(1, Ordering::Relaxed) >= MOST_NEWS {
            counts.ignored.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if news.left == PauseLeft::Garbage {
            counts.ignored.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // This process's own pause, back: it holds already, from when it
        // was taken on, not from when the news came back.
        if news.writer == self.inner.token {
            return;
        }
        for (member, (ledger, clock, cap)) in self.members_numbered() {
            let Some(host) = self.known(member, &ledger, &*clock, news.host) else { continue };
            if self.take_up(&ledger, clock.now(), cap, &host, news.left) {
                counts.heard.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The host `name` names among member `member`'s hosts in use. The
    /// list the last round made is listed again first if the books have
    /// gained or lost a host since: a host called since the round is heard
    /// for too, and a name no host of this process has costs a lookup.
    fn known(
        &self,
        member: usize,
        ledger: &Ledger,
        clock: &dyn Clock,
        name: &str,
    ) -> Option<FleetHost> {
        let mut known = lock(&self.inner.known);
        let known = known.entry(member).or_default();
        let books = ledger.host_count();
        if !known.names.contains_key(name) && known.books != books {
            let hosts = ledger.hosts_in_use(clock.now());
            let hosts = hosts.iter().map(|host| self.host(host));
            known.names = hosts.map(|host| (host.as_str().to_owned(), host)).collect();
            known.books = books;
        }
        known.names.get(name).cloned()
    }
}
