//! What a fleet's store costs a call: call latency through the quick
//! start's client with no fleet, and in a fleet on a real `redis-server`
//! reached directly, through a proxy that holds each reply 50 ms, and
//! through one that holds it 5 s (past the store's patience: every round
//! fails). Interleaved rounds, one table; a second column with no fleet
//! shows the noise.
//!
//! `cargo bench --features redis --bench fleet_latency` (Debian's
//! `redis-server` on the PATH).

use std::time::{Duration, Instant};

use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::fleet::{Fleet, FleetTask, RedisStore};
use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
use wiremock::{Mock, MockServer, ResponseTemplate, matchers::any};

#[path = "support/slow_proxy.rs"]
mod slow_proxy;
// The tests' own.
#[allow(dead_code, unreachable_pub)]
#[path = "../tests/all/support/redis_server.rs"]
mod redis_server;

use redis_server::RedisServer;
use slow_proxy::SlowProxy;

const ROUNDS: usize = 41;
const CALLS: usize = 300;

/// One column: its name, its client, and its fleet's rounds if it has one.
struct Setup {
    name: &'static str,
    client: ClientWithMiddleware,
    _rounds: Option<FleetTask>,
    latencies: Vec<Duration>,
}

fn setup(name: &'static str, redis: Option<String>) -> Setup {
    let mut middleware = RetryMiddleware::new(RetryConfig::default());
    let mut rounds = None;
    if let Some(url) = redis {
        let fleet = Fleet::new(RedisStore::new(&url, name).expect("a Redis URL"));
        middleware = middleware.with_fleet(&fleet);
        rounds = Some(fleet.spawn(Fleet::DEFAULT_INTERVAL));
    }
    let client = middleware.client(reqwest::Client::builder()).expect("a client").build();
    Setup { name, client, _rounds: rounds, latencies: Vec::new() }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let redis = RedisServer::start();
        let server = MockServer::start().await;
        Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&server).await;
        let url = server.uri();
        let slow = SlowProxy::start(redis.port(), Duration::from_millis(50)).await;
        let stuck = SlowProxy::start(redis.port(), Duration::from_secs(5)).await;
        let through = |proxy: &SlowProxy| format!("redis://127.0.0.1:{}/", proxy.port());
        let mut setups = vec![
            setup("no fleet", None),
            // The same again: the noise between two columns that differ in
            // nothing.
            setup("no fleet, again", None),
            setup("fleet, Redis direct", Some(redis.url())),
            setup("fleet, Redis +50 ms a reply", Some(through(&slow))),
            setup("fleet, Redis +5 s a reply", Some(through(&stuck))),
        ];
        // Every client has called the host, so that each fleet's rounds read
        // its pause and pool its answers while the calls are timed.
        for setup in &setups {
            setup.client.get(&url).send().await.expect("a loopback call");
        }
        for round in 0..ROUNDS {
            for k in 0..setups.len() {
                let n = setups.len();
                let setup = &mut setups[(round + k) % n];
                for _ in 0..CALLS {
                    let start = Instant::now();
                    let response = setup.client.get(&url).send().await.expect("a loopback call");
                    setup.latencies.push(start.elapsed());
                    assert_eq!(response.status(), 200);
                }
            }
        }
        println!(
            "{ROUNDS} interleaved rounds of {CALLS} calls each (loopback, 2 worker threads); \
             rounds every {:?}:",
            Fleet::DEFAULT_INTERVAL
        );
        println!(
            "  {:<30} {:>10} {:>10} {:>10} {:>14}",
            "setup", "p50", "p99", "max", "p99 ÷ none"
        );
        let base = {
            let mut sorted = setups[0].latencies.clone();
            sorted.sort();
            percentile(&sorted, 0.99)
        };
        for setup in &setups {
            let mut sorted = setup.latencies.clone();
            sorted.sort();
            let p99 = percentile(&sorted, 0.99);
            println!(
                "  {:<30} {:>7.0} µs {:>7.0} µs {:>7.0} µs {:>14.2}",
                setup.name,
                percentile(&sorted, 0.5).as_secs_f64() * 1e6,
                p99.as_secs_f64() * 1e6,
                sorted[sorted.len() - 1].as_secs_f64() * 1e6,
                p99.as_secs_f64() / base.as_secs_f64(),
            );
        }
    });
}
