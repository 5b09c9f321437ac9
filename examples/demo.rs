//! Prints one row per scenario of the two source tables: the final status or
//! error, the attempts the server saw, and the waits the middleware asked
//! for. A manual clock records the waits instead of sleeping and the jitter
//! is pinned, so the output is exact and instant.
//!
//! Run with `cargo run --example demo`.

mod scenarios;

use reqwest_safe_retry::FixedJitter;

#[tokio::main]
async fn main() {
    println!("Retrying transport table (equal jitter, top of range; initial 100 ms):");
    for row in scenarios::run_table(scenarios::roundtripper_table(), FixedJitter::TOP).await {
        println!("  {row}");
        if row.label.contains("Idempotency-Key") {
            println!(
                "    body the server saw on the last attempt: {:?}",
                row.last_body.unwrap_or_default()
            );
        }
    }
    println!();
    println!("API client table (full jitter, half the ceiling; initial 200 ms):");
    for row in scenarios::run_table(scenarios::api_client_table(), FixedJitter::new(0.5)).await {
        println!("  {row}");
    }
}
