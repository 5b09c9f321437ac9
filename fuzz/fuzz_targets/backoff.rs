//! Backoff for any configuration, retry number, previous wait and random
//! draw: never a panic, never above the cap.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use reqwest_safe_retry::{Backoff, Jitter, RetryConfig};

// The arithmetic is crate-private; fuzz the very file the crate compiles
// (it names `super::Jitter`, this crate's import of the crate's own).
#[allow(dead_code, unreachable_pub)]
#[path = "../../src/backoff/curve.rs"]
mod backoff;

fuzz_target!(|input: (u64, u32, u64, u32, u8, u32, u64, u32, f64)| {
    let (a_s, a_n, b_s, b_n, kind, retry, p_s, p_n, unit) = input;
    let a = Duration::new(a_s, a_n % 1_000_000_000);
    let b = Duration::new(b_s, b_n % 1_000_000_000);
    let previous = Duration::new(p_s, p_n % 1_000_000_000);
    let jitter = [Jitter::Full, Jitter::Equal, Jitter::Decorrelated, Jitter::None][usize::from(kind % 4)];
    let settings = Backoff::default().with_initial(a).with_max(b).with_jitter(jitter);
    match RetryConfig::builder().with_backoff(settings).build() {
        Ok(config) => {
            let wait = backoff::backoff(config.backoff().jitter(), a, b, retry, previous, unit);
            assert!(wait <= b);
        }
        Err(error) => {
            assert!(a > b);
            assert_eq!(error.field(), "backoff.initial");
        }
    }
});
