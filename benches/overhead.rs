//! What the retry layer costs: ours, reqwest-retry, and no retry layer, side
//! by side in one run.
//!
//! `cargo bench --bench overhead`

mod support;

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use support::{Scripted, Stack, loopback_server};

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

/// Only the middleware's own work: the last middleware answers at once.
fn in_process(c: &mut Criterion) {
    let runtime = current_thread();
    let mut group = c.benchmark_group("in_process");
    for stack in Stack::ALL.into_iter().chain([Stack::OursNoBudget]) {
        let client = stack.build(reqwest::Client::builder(), Some(Scripted::new(&[200])));
        group.bench_function(BenchmarkId::new("200 first time", stack.name()), |b| {
            b.iter(|| {
                runtime.block_on(async { black_box(client.get("http://bench.test/").send().await) })
            })
        });
    }
    // The retry path without the budget: a busy loop of failures would
    // spend it, and the bench would time calls that stop at the first 503.
    for stack in [Stack::Peer, Stack::OursNoBudget] {
        let client = stack.build(reqwest::Client::builder(), Some(Scripted::new(&[503, 200])));
        runtime.block_on(expect_200(&client));
        group.bench_function(BenchmarkId::new("503 then 200", stack.name()), |b| {
            b.iter(|| {
                runtime.block_on(async { black_box(client.get("http://bench.test/").send().await) })
            })
        });
    }
    group.finish();
}

/// Checks that a call through `client` is retried up to its 200: what the
/// retry benches mean to time.
async fn expect_200(client: &reqwest_middleware::ClientWithMiddleware) {
    let response = client.get("http://bench.test/").send().await.expect("an answer");
    assert_eq!(response.status(), 200, "the retries reach the 200");
}

/// A real GET over loopback to a hyper server.
fn loopback(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let addr = runtime.block_on(loopback_server(&[200]));
    let url = format!("http://{addr}/orders/1");
    let mut group = c.benchmark_group("loopback");
    for stack in Stack::ALL {
        let client = stack.build(reqwest::Client::builder(), None);
        group.bench_function(BenchmarkId::new("GET 200", stack.name()), |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let response = client.get(&url).send().await.expect("the server answers");
                    black_box(response.bytes().await.expect("a body"))
                })
            })
        });
    }
    group.finish();
}

/// A PUT answered 503, 503, 200 with zero-length waits: the time per request
/// must not grow with the body, which is shared between attempts, not copied.
fn large_body(c: &mut Criterion) {
    let runtime = current_thread();
    let mut group = c.benchmark_group("put_503_503_200");
    for size in [1 << 10, 32 << 20] {
        let body = Bytes::from(vec![7u8; size]);
        group.throughput(Throughput::Elements(1));
        for stack in [Stack::Peer, Stack::OursNoBudget] {
            let client =
                stack.build(reqwest::Client::builder(), Some(Scripted::new(&[503, 503, 200])));
            runtime.block_on(expect_200(&client));
            let id = BenchmarkId::new(stack.name(), format!("{} KiB", size >> 10));
            group.bench_with_input(id, &body, |b, body| {
                b.iter(|| {
                    runtime.block_on(async {
                        black_box(client.put("http://bench.test/").body(body.clone()).send().await)
                    })
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, in_process, loopback, large_body);
criterion_main!(benches);
