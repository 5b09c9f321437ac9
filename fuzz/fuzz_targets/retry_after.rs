//! Retry-After parsing on arbitrary bytes and clock readings: never a panic,
//! and a parsed delay-seconds value is always exactly what was sent.
#![no_main]

use std::time::{Duration, SystemTime};

use http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use reqwest_safe_retry::rate_limit::parse_retry_after;

fuzz_target!(|input: (u64, &[u8])| {
    let (now_secs, bytes) = input;
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_secs % 253_402_300_799);
    let Ok(value) = HeaderValue::from_bytes(bytes) else { return };
    let parsed = parse_retry_after(&value, now);
    if let Ok(text) = std::str::from_utf8(bytes) {
        // HTTP's optional white space is spaces and tabs only.
        let text = text.trim_matches([' ', '\t']);
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            let want = text.parse::<u64>().map_or(Duration::from_secs(u64::MAX), Duration::from_secs);
            assert_eq!(parsed, Some(want));
        }
    }
});
