//! A typed client for an orders API, built on the middleware: options (its
//! own HTTP client, the retries, the clock, the jitter), one method per
//! operation — `get_order`, `create_order`, `create_order_once`,
//! `cancel_order`, `orders` — an error with a code to match on and the
//! request id, bounded reads, and pagination as a `Stream`.
//!
//! Run with `cargo run --example orders_client`. It plays each scenario
//! against a scripted server on loopback, with a manual clock that records
//! the waits instead of sleeping and the jitter pinned at half the ceiling,
//! so the output is exact and instant. `tests/all/interop/orders.rs` asserts
//! the same rows.

mod client;
mod scenarios;

use scenarios::Row;

#[tokio::main]
async fn main() {
    let rows = scenarios::run_table().await;
    let (notes, more): (Vec<_>, Vec<_>) = rows.iter().partition(|(s, _)| s.from_notes);

    println!("The design notes' table (200 ms initial backoff, full jitter at half the ceiling):");
    for (_, row) in notes {
        println!("  {}", indent(row));
    }
    println!();
    println!("The rest of the client:");
    for (_, row) in more {
        println!("  {}", indent(row));
    }
    println!();

    let (ids, requests) = scenarios::list_orders().await;
    println!("orders(): {} — listed {} orders over {requests} requests", ids.join(" "), ids.len());
}

fn indent(row: &Row) -> String {
    row.to_string().replace('\n', "\n  ")
}
