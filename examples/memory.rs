//! Allocations per request on the happy path, and peak heap for a 32 MiB PUT
//! answered 503, 503, 200 over loopback, for each stack, measured with dhat's
//! counting allocator. Each peak is measured in a fresh process, since a peak
//! cannot be reset.
//!
//! `cargo run --release --example memory`

#[path = "../benches/support/mod.rs"]
mod support;

use bytes::Bytes;
use support::{Scripted, Stack, loopback_server};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const REQUESTS: u64 = 1000;
const BODY: usize = 32 << 20;

fn allocations() {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    println!(
        "Allocations per request, 200 on the first attempt, in process ({REQUESTS} requests):"
    );
    println!("  {:<20} {:>8} {:>10}", "stack", "blocks", "bytes");
    for stack in Stack::ALL {
        let client = stack.build(reqwest::Client::builder(), Some(Scripted::new(&[200])));
        runtime.block_on(async {
            // Warm up: first-use allocations (pools, caches) are not per request.
            for _ in 0..10 {
                let _ = client.get("http://bench.test/").send().await;
            }
            let before = dhat::HeapStats::get();
            for _ in 0..REQUESTS {
                let _ = client.get("http://bench.test/").send().await;
            }
            let after = dhat::HeapStats::get();
            let blocks = (after.total_blocks - before.total_blocks) as f64 / REQUESTS as f64;
            let bytes = (after.total_bytes - before.total_bytes) as f64 / REQUESTS as f64;
            println!("  {:<20} {:>8.1} {:>10.1}", stack.name(), blocks, bytes);
        });
    }
}

/// The pieces of our happy path that allocate, counted one by one.
fn breakdown() {
    let count = |f: &dyn Fn()| {
        let before = dhat::HeapStats::get().total_blocks;
        f();
        dhat::HeapStats::get().total_blocks - before
    };
    let client = reqwest::Client::new();
    let request = client.get("http://bench.test/").build().expect("a request");
    println!("Where ours allocates on that path:");
    println!(
        "  {:>2} blocks  copying the request for a possible retry (Request::try_clone; the peer does it too)",
        count(&|| drop(request.try_clone()))
    );
    println!(
        "   0 blocks  the report: a first answer that is final carries none \
         (RetryReport::from_response reads absence as one attempt, no wait)"
    );
    println!("   1 block   the middleware's future (every middleware's is boxed; the peer's too)");
}

/// In its own process: the heap peak while one large PUT is retried twice.
fn peak(stack: Stack) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let addr = loopback_server(&[503, 503, 200]).await;
        let client = stack.build(reqwest::Client::builder(), None);
        let url = format!("http://{addr}/put");
        let base = dhat::HeapStats::get().max_bytes;
        let body = Bytes::from(vec![7u8; BODY]);
        let response = client.put(&url).body(body).send().await.expect("the server answers");
        assert_eq!(response.status(), 200, "three attempts reach the 200");
        let peak = dhat::HeapStats::get().max_bytes.saturating_sub(base);
        println!("{peak}");
    });
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, stack] = args.as_slice() {
        if flag == "--peak" {
            let stack = Stack::ALL
                .into_iter()
                .chain([Stack::OursNoBudget])
                .find(|s| s.name() == stack)
                .expect("a known stack");
            return peak(stack);
        }
    }
    allocations();
    println!();
    breakdown();
    println!();
    println!(
        "Peak heap for one PUT of a {} MiB body over loopback, answered 503, 503, 200:",
        BODY >> 20
    );
    println!("  {:<20} {:>12} {:>14}", "stack", "peak (MiB)", "peak / body");
    let me = std::env::current_exe().expect("own path");
    // Without the budget: a fresh process's budget allows one retry, and
    // this measures two.
    for stack in [Stack::Peer, Stack::OursNoBudget] {
        let output = std::process::Command::new(&me)
            .args(["--peak", stack.name()])
            .output()
            .expect("a child");
        let text = String::from_utf8_lossy(&output.stdout);
        let Some(peak) = text.trim().parse::<u64>().ok() else {
            println!("  {:<20} failed: {}", stack.name(), String::from_utf8_lossy(&output.stderr));
            continue;
        };
        println!(
            "  {:<20} {:>12.1} {:>14.2}",
            stack.name(),
            peak as f64 / (1 << 20) as f64,
            peak as f64 / BODY as f64
        );
    }
}
