//! Prints one row per scenario of the two source tables: the final status or
//! error, the attempts made and how many reached the server, and the waits
//! the middleware asked for.
//!
//! Every row runs `RetryConfig::default()` on the quick start's client (the
//! inner client built with the middleware's redirect policy), through one
//! middleware per table, as one process would: the retry budget is in play.
//! Only the clock and the jitter are injected: a manual clock records the
//! waits instead of sleeping, and the jitter is pinned, so the output is
//! exact and instant.
//!
//! Run with `cargo run --example demo`.

mod scenarios;

use reqwest_safe_retry::jitter::FixedJitter;

#[tokio::main]
async fn main() {
    println!("Retrying transport table (RetryConfig::default(); jitter at the top of its range):");
    let table = scenarios::roundtripper_table();
    for row in scenarios::run_shared(FixedJitter::TOP, &table).await {
        println!("  {row}");
        if row.label.contains("Idempotency-Key") {
            println!(
                "    body the server saw on the last attempt: {:?}",
                row.last_body.unwrap_or_default()
            );
        }
    }
    println!();
    println!("API client table (RetryConfig::default(); jitter at half its range):");
    let table = scenarios::api_client_table();
    for row in scenarios::run_shared(FixedJitter::new(0.5), &table).await {
        println!("  {row}");
    }
}
