//! No synchronized return: a thousand clients told "Retry-After: 5" at the
//! same moment should not all come back at the same moment.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use reqwest_safe_retry::RetryAfter;
use reqwest_safe_retry::{
    RetryBudget, RetryConfig, RetryConfigBuilder, RetryMiddleware, jitter::SeededJitter,
};
use tokio::time::Instant;

use crate::sim::{SEED, answer, base_client, runtime};

const CLIENTS: usize = 1000;
const BUCKET_MS: u64 = 100;
const FROM_MS: u64 = 4900;
const TO_MS: u64 = 6500;

/// Answers each client's first call `429` with `Retry-After: 5`, and every
/// later call `200`, noting when it came.
#[derive(Clone)]
struct RefuseOnce {
    start: Instant,
    seen: Arc<Mutex<HashSet<String>>>,
    later: Arc<Mutex<Vec<Duration>>>,
}

#[async_trait::async_trait]
impl Middleware for RefuseOnce {
    async fn handle(
        &self,
        request: Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let client = request.url().path().to_owned();
        if self.seen.lock().expect("no panics while counting").insert(client) {
            let mut response = answer(429);
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("5"));
            return Ok(response);
        }
        self.later.lock().expect("no panics while counting").push(self.start.elapsed());
        Ok(answer(200))
    }
}

/// When the retries arrived, for one configuration: all clients in one
/// process, each sending one GET at t = 0.
fn arrivals(config: RetryConfig) -> Vec<Duration> {
    runtime().block_on(async move {
        let server =
            RefuseOnce { start: Instant::now(), seen: Arc::default(), later: Arc::default() };
        let middleware = RetryMiddleware::new(config).with_jitter_source(SeededJitter::new(SEED));
        let client =
            ClientBuilder::new(base_client()).with(middleware).with(server.clone()).build();
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|n| {
                let client = client.clone();
                tokio::spawn(async move {
                    let _ = client.get(format!("http://sim.test/clients/{n}")).send().await;
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("request tasks do not panic");
        }
        let mut later = server.later.lock().expect("no panics while counting").clone();
        later.sort();
        later
    })
}

/// The most arrivals in any 100 ms, not only the histogram's buckets.
fn peak(arrivals: &[Duration]) -> usize {
    let window = Duration::from_millis(BUCKET_MS);
    let mut peak = 0;
    let mut first = 0;
    for (last, at) in arrivals.iter().enumerate() {
        while *at - arrivals[first] >= window {
            first += 1;
        }
        peak = peak.max(last + 1 - first);
    }
    peak
}

fn histogram(arrivals: &[Duration]) -> Vec<usize> {
    let mut buckets = vec![0; ((TO_MS - FROM_MS) / BUCKET_MS) as usize];
    for at in arrivals {
        let ms = at.as_millis() as u64;
        if (FROM_MS..TO_MS).contains(&ms) {
            buckets[((ms - FROM_MS) / BUCKET_MS) as usize] += 1;
        }
    }
    buckets
}

/// The spread and the exact configuration built from `base`.
fn pair(base: RetryConfigBuilder) -> [RetryConfig; 2] {
    let spread = base.clone().build().expect("a valid policy");
    let exact = base
        .with_retry_after(RetryAfter::default().with_spread(false))
        .build()
        .expect("a valid policy");
    [spread, exact]
}

pub(crate) fn run() {
    println!(
        "No synchronized return: {CLIENTS} clients in one process each send one GET at t = 0; \
         the server answers each client's first call 429 with Retry-After: 5, later calls 200."
    );
    println!(
        "\"spread\" is RetryConfig::default(), \"exact\" adds with_retry_after_spread(false) \
         (wait exactly what the server asked); \"no budget\" adds without_budget() to both."
    );
    let [spread, exact] = pair(RetryConfig::builder()).map(arrivals);
    let [free_spread, free_exact] = pair(RetryConfig::builder().with_budget(None)).map(arrivals);
    println!(
        "Retries taken: {} (spread), {} (exact), {} and {} with no budget.",
        spread.len(),
        exact.len(),
        free_spread.len(),
        free_exact.len()
    );
    for (name, taken) in [("spread", &spread), ("exact", &exact)] {
        if taken.len() < CLIENTS {
            println!(
                "With the default budget, {name}: {} retries refused. The process has only just \
                 started, has earned nothing, and spends its reserve of {} (max_retries + 2) on \
                 retries whose wait the budget pays for; a spread wait after a 429, within the \
                 cap, is the server's pace and costs the budget nothing.",
                CLIENTS - taken.len(),
                RetryBudget::default().reserve_for(3)
            );
        }
    }
    let all = [&spread, &exact, &free_spread, &free_exact];
    println!(
        "\n  {:<13} {:>7} {:>7} {:>18} {:>18}",
        "arrival", "spread", "exact", "spread, no budget", "exact, no budget"
    );
    let counts = all.map(|a| histogram(a));
    for (i, first) in counts[0].iter().enumerate() {
        let from = (FROM_MS + i as u64 * BUCKET_MS) as f64 / 1000.0;
        let to = from + BUCKET_MS as f64 / 1000.0;
        println!(
            "  {from:.1}–{to:.1} s    {:>7} {:>7} {:>18} {:>18}",
            first, counts[1][i], counts[2][i], counts[3][i]
        );
    }
    let outside: Vec<usize> =
        all.iter().zip(&counts).map(|(a, c)| a.len() - c.iter().sum::<usize>()).collect();
    if outside.iter().any(|n| *n > 0) {
        println!(
            "  {:<13} {:>7} {:>7} {:>18} {:>18}",
            "elsewhere", outside[0], outside[1], outside[2], outside[3]
        );
    }
    println!(
        "peak retries in any 100 ms (default budget): {} (spread) vs {} (exact)",
        peak(&spread),
        peak(&exact)
    );
    println!(
        "peak retries in any 100 ms: {} (spread) vs {} (exact), with no budget",
        peak(&free_spread),
        peak(&free_exact)
    );
}
