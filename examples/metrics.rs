//! Retry metrics through the `metrics` facade, fed by the decision hook.
//!
//! Run with `cargo run --example metrics`; it starts its own scripted servers
//! on loopback and waits on a manual clock, so it finishes at once. The hook
//! and the recorder are in `metrics_wiring/mod.rs`, shared with
//! `tests/all/observability.rs`, which asserts these same numbers. In a service,
//! install your exporter (Prometheus, OpenTelemetry, StatsD ...) in place of
//! the small recorder, and leave out the manual clock and pinned jitter.

mod metrics_wiring;

use metrics_wiring::{Recorded, WARM_UP, exchange};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let recorder = Recorded::default();
    metrics::set_global_recorder(recorder.clone()).expect("no other recorder is installed");

    let (calls, throttled) = exchange().await;
    println!("calls:");
    let (warm_up, rest) = calls.split_at(WARM_UP);
    println!("  {:<18} x{WARM_UP}  status={}  attempts=1", warm_up[0].label, warm_up[0].status);
    for call in rest {
        let waits = call.report.total_wait.as_secs_f64();
        println!(
            "  {:<18}      status={}  attempts={}  waited={waits}s  stop: {}",
            call.label, call.status, call.report.attempts, call.report.stop
        );
    }

    println!(
        "  {:<18} x{throttled}  kept back by the throttle: stop: throttled",
        "GET (host down)"
    );

    println!("counters:");
    for (series, value) in recorder.counters() {
        println!("  {series} {value}");
    }
    // With the `fleet` feature: a process whose fleet's store is gone,
    // after a call and a round.
    #[cfg(feature = "fleet")]
    {
        let fleet = reqwest_safe_retry::fleet::Fleet::new(metrics_wiring::Gone);
        let server = wiremock::MockServer::start().await;
        let client = reqwest_safe_retry::RetryMiddleware::new(Default::default())
            .with_fleet(&fleet)
            .client(reqwest::Client::builder())
            .expect("a client")
            .build();
        let _ = client.get(server.uri()).send().await;
        let _ = fleet.sync().await;
        metrics_wiring::record_fleet(&fleet.status());
        println!("fleet (its store gone):");
        for (series, value) in recorder.counters() {
            if series.starts_with(metrics_wiring::FLEET) {
                println!("  {series} {value}");
            }
        }
    }
    println!("gauges:");
    for (series, value) in recorder.gauges() {
        println!("  {series} {value}");
    }
    println!("histograms:");
    for (series, samples) in recorder.histograms() {
        let sum: f64 = samples.iter().sum();
        let max = samples.iter().copied().fold(f64::NAN, f64::max);
        let min = samples.iter().copied().fold(f64::NAN, f64::min);
        println!(
            "  {series} count={} sum={sum} min={min} max={max} samples={samples:?}",
            samples.len()
        );
    }
}
