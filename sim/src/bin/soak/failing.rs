//! The failing-hosts phase: one call to each of 20,000 distinct hosts where
//! nothing listens (a refused connection, on loopback addresses no listener
//! uses), through the quick start's client, timed per call. The retry
//! budget keeps every failing host it meets while its table has room, and
//! turns the rest to its overflow account: a call to a new host must cost
//! the same whether the table holds ten failing hosts or is full of them.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use reqwest_safe_retry::{RetryConfig, RetryMiddleware};

/// Distinct failing hosts met.
pub(crate) const HOSTS: usize = 20_000;
/// Hosts per slice whose cost per call is compared.
pub(crate) const SLICE: usize = 5_000;

/// The median time per call of each slice of [`SLICE`] hosts, in order.
pub(crate) async fn run(refused_port: u16) -> Vec<Duration> {
    // No retry: each call is one refused connection, and its host one the
    // budget notes as failing.
    let config = RetryConfig::builder().with_max_retries(0).build().expect("a valid config");
    let client =
        RetryMiddleware::new(config).client(reqwest::Client::builder()).expect("a client").build();
    let mut slices = Vec::new();
    let mut times = Vec::with_capacity(SLICE);
    for n in 0..HOSTS {
        // 127.128.0.0 and up: addresses of the loopback network that no
        // listener of the soak binds.
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 128, 0, 0)) + n as u32);
        let url = format!("http://{}/", SocketAddr::from((ip, refused_port)));
        let start = Instant::now();
        let result = client.get(&url).send().await;
        times.push(start.elapsed());
        assert!(result.is_err(), "nothing listens at {url}");
        if times.len() == SLICE {
            times.sort();
            slices.push(times[SLICE / 2]);
            times.clear();
        }
    }
    slices
}
