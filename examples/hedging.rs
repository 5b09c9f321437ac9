//! Hedging against a slow tail, measured.
//!
//! A loopback server answers in 1 ms 95% of the time and in 200 ms 5% of
//! the time, the choice made per request from a seeded generator. The same
//! 2000 GETs, 16 at a time, are sent once without hedging and once with
//! [`HedgeMiddleware`] at its defaults (a hedge after the host's p95
//! latency, paid from a budget of a tenth of the answers). Real time, on
//! loopback: run it in release mode.
//!
//! ```text
//! cargo run --release --example hedging
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::hedge::{HedgeMiddleware, HedgeReport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REQUESTS: usize = 2000;
const CONCURRENCY: usize = 16;
const SEED: u64 = 0x5eed;
const FAST: Duration = Duration::from_millis(1);
const SLOW: Duration = Duration::from_millis(200);

fn main() {
    let (url, received) = serve();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    println!(
        "{REQUESTS} GETs, {CONCURRENCY} at a time; the server answers in 1 ms (95%) or 200 ms (5%)\n"
    );
    println!("| client | p50 | p95 | p99 | max | copies sent | extra requests |");
    println!("|---|---|---|---|---|---|---|");
    let plain = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).build();
    let hedge = HedgeMiddleware::default();
    let hedged =
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(hedge.clone()).build();
    for (name, client) in [("no hedging", &plain), ("hedged at p95", &hedged)] {
        let before = received.load(Ordering::Relaxed);
        let run = runtime.block_on(run(client, &url));
        let read = received.load(Ordering::Relaxed) - before;
        // As the hedge reports count them; a copy cancelled before it was
        // written never reaches the server.
        let copies = if run.hedged_copies > 0 { run.hedged_copies } else { read };
        let extra = copies as f64 / REQUESTS as f64 - 1.0;
        println!(
            "| {name} | {} | {} | {} | {} | {copies} | {:.1}% |",
            ms(run.quantile(0.50)),
            ms(run.quantile(0.95)),
            ms(run.quantile(0.99)),
            ms(run.quantile(1.0)),
            extra * 100.0,
        );
    }
    let delay = hedge.delay_for(&url.parse().unwrap());
    println!("\nthe hedging delay the last answers give: {}", ms(delay));
}

struct Run {
    latencies: Vec<Duration>,
    /// Copies the hedge reports counted (0 without hedging).
    hedged_copies: u64,
}

impl Run {
    fn quantile(&self, q: f64) -> Duration {
        let rank = ((q * self.latencies.len() as f64).ceil() as usize).max(1);
        self.latencies[rank - 1]
    }
}

async fn run(client: &ClientWithMiddleware, url: &str) -> Run {
    let next = Arc::new(AtomicU64::new(0));
    let copies = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (client, url, next, copies) =
            (client.clone(), url.to_owned(), next.clone(), copies.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < REQUESTS as u64 {
                let start = Instant::now();
                let response = client.get(&url).send().await.expect("loopback answers");
                if let Some(report) = HedgeReport::from_response(&response) {
                    copies.fetch_add(u64::from(report.copies), Ordering::Relaxed);
                }
                response.bytes().await.expect("a body");
                latencies.push(start.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::with_capacity(REQUESTS);
    for worker in workers {
        latencies.extend(worker.await.unwrap());
    }
    latencies.sort();
    Run { latencies, hedged_copies: copies.load(Ordering::Relaxed) }
}

/// Starts the server on its own thread; returns its URL and a count of the
/// requests it has read.
fn serve() -> (String, Arc<AtomicU64>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}/item", listener.local_addr().unwrap());
    let received = Arc::new(AtomicU64::new(0));
    let count = received.clone();
    std::thread::spawn(move || {
        runtime.block_on(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(connection(socket, count));
            }
        });
    });
    (url, received)
}

/// Answers each request on a keep-alive connection after 1 ms or 200 ms.
async fn connection(mut socket: tokio::net::TcpStream, count: Arc<AtomicU64>) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let end = seen.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        seen.drain(..end);
        let n = count.fetch_add(1, Ordering::Relaxed);
        let delay = if splitmix(SEED ^ n) % 100 < 5 { SLOW } else { FAST };
        tokio::time::sleep(delay).await;
        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        if socket.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}
