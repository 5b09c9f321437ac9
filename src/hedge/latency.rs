//! Recent latencies per host, for a hedging delay that follows them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use reqwest::Url;

use crate::hosts::{HostState, Hosts};

/// Samples kept per host: the newest replace the oldest.
pub(crate) const SAMPLES: usize = 128;
/// Samples a host needs before its quantile is trusted over the fallback.
pub(crate) const MIN_SAMPLES: usize = 20;
/// Hosts tracked; past this, the least recently recorded are forgotten,
/// an eighth of them at a time. Should none be free to go (each is read
/// only under the table's lock, so none stays held), further hosts would
/// share one ring.
const MAX_HOSTS: usize = 1024;

/// A bounded ring of recent latencies for each scheme, host and port.
#[derive(Debug)]
pub(crate) struct Latencies {
    hosts: Hosts<Mutex<Ring>>,
    /// Latencies recorded so far: the clock that dates each host's last.
    recorded: AtomicU64,
}

impl Default for Latencies {
    fn default() -> Self {
        // A futile scan holds off the next for an eighth of the table's
        // worth of latencies.
        let pause = (MAX_HOSTS / 8) as u64;
        Self { hosts: Hosts::new(MAX_HOSTS, pause, Ring::new()), recorded: AtomicU64::new(0) }
    }
}

struct Ring {
    /// Grown as samples come, up to [`SAMPLES`]: a host called a few
    /// times holds a few, not a full ring's worth of memory.
    samples: Vec<Duration>,
    next: usize,
    /// When the last sample came, counted in latencies recorded.
    used: u64,
}

impl Ring {
    fn new() -> Mutex<Self> {
        Mutex::new(Self { samples: Vec::new(), next: 0, used: 0 })
    }

    fn push(&mut self, latency: Duration, now: u64) {
        if self.samples.len() < SAMPLES {
            self.samples.push(latency);
        } else {
            self.samples[self.next] = latency;
        }
        self.next = self.next.saturating_add(1).checked_rem(SAMPLES).unwrap_or(0);
        self.used = self.used.max(now);
    }
}

impl HostState for Mutex<Ring> {
    fn last_used(&self) -> u64 {
        lock(self).used
    }

    /// A ring is only ever read under the table's lock: any may go.
    fn may_forget(&self, _now: u64) -> bool {
        true
    }
}

fn lock(ring: &Mutex<Ring>) -> MutexGuard<'_, Ring> {
    // Every change to a ring is whole before its guard drops.
    ring.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Latencies {
    /// Records one latency of the host of `url`.
    pub(crate) fn record(&self, url: &Url, latency: Duration) {
        let now = self.recorded.fetch_add(1, Ordering::Relaxed);
        let push = |ring: &Mutex<Ring>| lock(ring).push(latency, now);
        if self.hosts.with(url, push).is_none() {
            push(&self.hosts.get_or_insert(url, now, |_| Ring::new()).value);
        }
    }

    /// The `q`-quantile (nearest rank, rounding up) of the host's recent
    /// latencies; `None` until it has [`MIN_SAMPLES`].
    pub(crate) fn quantile(&self, url: &Url, q: f64) -> Option<Duration> {
        // A copy to select in, on the stack: the ring keeps its order.
        let mut copy = [Duration::ZERO; SAMPLES];
        let len = self.hosts.with(url, |ring| {
            let ring = lock(ring);
            copy[..ring.samples.len()].copy_from_slice(&ring.samples);
            ring.samples.len()
        })?;
        if len < MIN_SAMPLES {
            return None;
        }
        let sorted = &mut copy[..len];
        let rank = ((q * len as f64).ceil() as usize).clamp(1, len);
        let (_, nth, _) = sorted.select_nth_unstable(rank.saturating_sub(1));
        Some(*nth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_quantile_is_the_nearest_rank_of_recent_samples() {
        let latencies = Latencies::default();
        let a: Url = "http://a.test/x".parse().unwrap();
        let b: Url = "http://b.test/x".parse().unwrap();
        for ms in 1..MIN_SAMPLES as u32 {
            latencies.record(&a, ms * MS);
        }
        assert_eq!(latencies.quantile(&a, 0.95), None, "too few samples");
        for ms in MIN_SAMPLES as u32..=100 {
            latencies.record(&a, ms * MS);
        }
        assert_eq!(latencies.quantile(&a, 0.95), Some(95 * MS));
        assert_eq!(latencies.quantile(&a, 0.5), Some(50 * MS));
        assert_eq!(latencies.quantile(&a, 1.0), Some(100 * MS));
        assert_eq!(latencies.quantile(&b, 0.5), None, "hosts are apart");
    }

    #[test]
    fn old_samples_make_way_for_new_ones() {
        let latencies = Latencies::default();
        let a: Url = "http://a.test/".parse().unwrap();
        for _ in 0..SAMPLES {
            latencies.record(&a, 500 * MS);
        }
        for _ in 0..SAMPLES {
            latencies.record(&a, 2 * MS);
        }
        assert_eq!(latencies.quantile(&a, 0.99), Some(2 * MS));
    }

    #[test]
    fn a_full_table_forgets_the_least_recently_recorded_hosts_not_all() {
        let latencies = Latencies::default();
        let host = |n: usize| -> Url { format!("http://h{n}.test/").parse().unwrap() };
        for n in 0..MAX_HOSTS {
            for _ in 0..MIN_SAMPLES {
                latencies.record(&host(n), MS);
            }
        }
        // h0 is the least recently recorded, h1023 the most.
        latencies.record(&host(MAX_HOSTS), MS);
        let known = (0..MAX_HOSTS).filter(|&n| latencies.quantile(&host(n), 0.5).is_some());
        assert_eq!(known.count(), MAX_HOSTS - MAX_HOSTS / 8 - 1);
        assert_eq!(latencies.quantile(&host(0), 0.5), None, "the oldest went");
        assert_eq!(latencies.quantile(&host(MAX_HOSTS - 1), 0.5), Some(MS), "the newest stayed");
    }

    #[test]
    fn a_ring_holds_memory_for_the_samples_it_has_not_a_full_ring() {
        let latencies = Latencies::default();
        let a: Url = "http://a.test/".parse().unwrap();
        let held = || latencies.hosts.with(&a, |ring| lock(ring).samples.capacity()).unwrap();
        for _ in 0..3 {
            latencies.record(&a, MS);
        }
        assert!(held() < MIN_SAMPLES, "three samples hold {} places", held());
        for _ in 0..SAMPLES * 2 {
            latencies.record(&a, MS);
        }
        assert_eq!(held(), SAMPLES, "a full ring grows no further");
    }
}
