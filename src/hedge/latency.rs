//! Recent latencies per host, for a hedging delay that follows them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::Url;

/// Samples kept per host: the newest replace the oldest.
pub(crate) const SAMPLES: usize = 128;
/// Samples a host needs before its quantile is trusted over the fallback.
pub(crate) const MIN_SAMPLES: usize = 20;
/// Hosts tracked; past this, the table is cleared and starts again.
const MAX_HOSTS: usize = 1024;

/// A bounded ring of recent latencies for each scheme, host and port.
#[derive(Debug, Default)]
pub(crate) struct Latencies {
    hosts: Mutex<HashMap<Key, Ring>>,
}

type Key = (Box<str>, Box<str>, Option<u16>);

fn key(url: &Url) -> Key {
    (url.scheme().into(), url.host_str().unwrap_or_default().into(), url.port_or_known_default())
}

#[derive(Debug)]
struct Ring {
    samples: Vec<Duration>,
    next: usize,
}

impl Latencies {
    /// Records one latency of the host of `url`.
    pub(crate) fn record(&self, url: &Url, latency: Duration) {
        let mut hosts = self.hosts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if hosts.len() >= MAX_HOSTS && !hosts.contains_key(&key(url)) {
            hosts.clear();
        }
        let ring = hosts
            .entry(key(url))
            .or_insert_with(|| Ring { samples: Vec::with_capacity(SAMPLES), next: 0 });
        if ring.samples.len() < SAMPLES {
            ring.samples.push(latency);
        } else {
            ring.samples[ring.next] = latency;
        }
        ring.next = (ring.next + 1) % SAMPLES;
    }

    /// The `q`-quantile (nearest rank, rounding up) of the host's recent
    /// latencies; `None` until it has [`MIN_SAMPLES`].
    pub(crate) fn quantile(&self, url: &Url, q: f64) -> Option<Duration> {
        let mut sorted = {
            let hosts = self.hosts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let ring = hosts.get(&key(url))?;
            if ring.samples.len() < MIN_SAMPLES {
                return None;
            }
            ring.samples.clone()
        };
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        let (_, nth, _) = sorted.select_nth_unstable(rank - 1);
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
}
