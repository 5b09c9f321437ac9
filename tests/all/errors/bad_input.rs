//! Arbitrary configurations build or say which field is wrong, and any
//! response head, however garbled, ends the call within its bound.

use crate::support::RawServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use reqwest_safe_retry::Backoff;
use reqwest_safe_retry::hedge::HedgeConfig;
use reqwest_safe_retry::{
    BodyBuffering, BudgetScope, Jitter, RetryAfter, RetryAfterOverCap, RetryBudget, RetryConfig,
    RetryMiddleware, clock::ManualClock, jitter::FixedJitter,
};
use std::time::Duration;

/// Any duration, the edges included.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_nanos(1)),
        (0u64..100_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_secs),
    ]
}

/// Any ratio: NaN, infinities, negative, huge, and the valid range.
fn ratio() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        any::<f64>(),
        0.0..=1.0f64,
    ]
}

/// A header name as a user might write one: valid, empty, with spaces or
/// bytes no header name may hold.
fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Idempotency-Key".to_owned()),
        Just(String::new()),
        Just("two words".to_owned()),
        Just("é".to_owned()),
        "[ -~]{0,12}",
    ]
}

fn budget() -> impl Strategy<Value = RetryBudget> {
    (ratio(), proptest::option::of(any::<u32>()), duration(), any::<bool>()).prop_map(
        |(ratio, reserve, window, global)| {
            let mut budget = RetryBudget::default().with_ratio(ratio).with_window(window);
            if let Some(reserve) = reserve {
                budget = budget.with_reserve(reserve);
            }
            if global { budget.with_scope(BudgetScope::Global) } else { budget }
        },
    )
}

#[test]
fn any_retry_configuration_builds_or_says_what_is_wrong() {
    let jitter = prop_oneof![
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        Just(Jitter::None)
    ];
    let settings = (
        (any::<u32>(), duration(), duration(), jitter),
        (proptest::collection::vec(any::<u16>(), 0..4), header_name(), any::<bool>()),
        (duration(), any::<bool>(), any::<bool>()),
        (proptest::option::of(duration()), proptest::option::of(duration())),
        (any::<usize>(), proptest::option::of(budget())),
        (proptest::option::of(any::<usize>()), proptest::option::of(any::<usize>())),
    );
    let mut runner = TestRunner::new(Config { cases: 512, ..Config::default() });
    let outcome = runner.run(&settings, |settings| {
        let (
            (retries, initial, max, jitter),
            (statuses, header, any_method),
            rest,
            times,
            more,
            bodies,
        ) = settings;
        let (cap, wait_the_cap, spread) = rest;
        let mut builder = RetryConfig::builder()
            .with_max_retries(retries)
            .with_backoff(
                Backoff::default().with_initial(initial).with_max(max).with_jitter(jitter),
            )
            .with_idempotency_header(header.as_str())
            .with_retry_429_any_method(any_method)
            .with_retry_after(
                RetryAfter::default().with_cap(cap).with_spread(spread).with_over_cap(
                    match wait_the_cap {
                        true => RetryAfterOverCap::WaitTheCap,
                        false => RetryAfterOverCap::ReturnResponse,
                    },
                ),
            )
            .with_drain_limit(more.0);
        if !statuses.is_empty() {
            let statuses =
                statuses.iter().filter_map(|code| http::StatusCode::from_u16(*code).ok());
            builder = builder.with_retryable_statuses(statuses.collect::<Vec<_>>());
        }
        if let Some(deadline) = times.0 {
            builder = builder.with_deadline(deadline);
        }
        if let Some(timeout) = times.1 {
            builder = builder.with_attempt_timeout(timeout);
        }
        builder = builder.with_budget(more.1);
        let mut buffering = BodyBuffering::default();
        if let Some(limit) = bodies.0 {
            buffering = buffering.with_request(limit);
        }
        if let Some(limit) = bodies.1 {
            buffering = buffering.with_response(limit);
        }
        builder = builder.with_body_buffering(buffering);
        match builder.build() {
            // A valid configuration makes a middleware, and its budget.
            Ok(config) => drop(RetryMiddleware::new(config)),
            Err(error) => {
                prop_assert!(!error.field().is_empty());
                prop_assert!(error.to_string().contains(error.field()), "{error}");
            }
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

#[test]
fn any_hedge_configuration_builds_or_says_what_is_wrong() {
    let settings = (
        duration(),
        ratio(),
        duration(),
        any::<u32>(),
        proptest::option::of(budget()),
        header_name(),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(Config { cases: 512, ..Config::default() });
    let outcome =
        runner.run(&settings, |(delay, quantile, fallback, copies, budget, header, fixed)| {
            let mut builder = HedgeConfig::builder()
                .with_fallback_delay(fallback)
                .with_max_copies(copies)
                .with_idempotency_header(header.as_str());
            builder = if fixed {
                builder.with_delay(delay)
            } else {
                builder.with_latency_quantile(quantile)
            };
            builder = match budget {
                Some(budget) => builder.with_budget(budget),
                None => builder.with_budget(None),
            };
            match builder.build() {
                Ok(config) => drop(reqwest_safe_retry::hedge::HedgeMiddleware::new(config)),
                Err(error) => {
                    prop_assert!(!error.field().is_empty());
                    prop_assert!(error.to_string().contains(error.field()), "{error}");
                }
            }
            Ok(())
        });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

/// Bytes a server might put in a header's value: numbers of every size and
/// sign, dates, garbage, invalid UTF-8.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        Just(b"99999999999999999999999999".to_vec()),
        Just(b"Wed, 21 Oct 2015 07:28:00 GMT".to_vec()),
        Just(b"Fri, 31 Dec 9999 23:59:59 GMT".to_vec()),
        Just(b"1.5".to_vec()),
        Just(Vec::new()),
        proptest::collection::vec(prop_oneof![0x21u8..0x7f, 0x80u8..=0xff], 0..24),
    ]
}

/// A response head: a status line and a few headers, any of them repeated.
fn head() -> impl Strategy<Value = Vec<u8>> {
    let status = prop_oneof![
        Just(b"200".to_vec()),
        Just(b"429".to_vec()),
        Just(b"503".to_vec()),
        Just(b"302".to_vec()),
        (100u16..1000).prop_map(|s| s.to_string().into_bytes()),
        Just(b"abc".to_vec()),
    ];
    let name = prop_oneof![
        Just(&b"Retry-After"[..]),
        Just(&b"Date"[..]),
        Just(&b"Content-Length"[..]),
        Just(&b"Location"[..]),
    ];
    (status, proptest::collection::vec((name, value()), 0..6)).prop_map(|(status, headers)| {
        let mut head = b"HTTP/1.1 ".to_vec();
        head.extend(status);
        head.extend(b" X\r\n");
        for (name, value) in headers {
            head.extend(name);
            head.extend(b": ");
            head.extend(value);
            head.extend(b"\r\n");
        }
        head.extend(b"Connection: close\r\n\r\n");
        head
    })
}

/// A server that answers every request with `head` and closes.
async fn answering(head: Vec<u8>) -> RawServer {
    let head = std::sync::Arc::new(head);
    RawServer::start(move |mut conn| {
        let head = head.clone();
        async move {
            if conn.request().await.is_some() {
                let _ = conn.write(&*head).await;
            }
        }
    })
    .await
}

#[test]
fn any_response_head_ends_the_call_within_its_bound() {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut runner = TestRunner::new(Config { cases: 128, ..Config::default() });
    let outcome = runner.run(&head(), |head| {
        runtime.block_on(async {
            let server = answering(head.clone()).await;
            let url = server.url("/r");
            let retry = RetryMiddleware::new(RetryConfig::default())
                .with_clock(ManualClock::new())
                .with_jitter_source(FixedJitter::TOP);
            let builder = reqwest::Client::builder().timeout(Duration::from_secs(2));
            let client = retry.client(builder).unwrap().build();
            // Every attempt is bounded by the client's timeout, its
            // redirects included, waits take no time, and there are at most
            // 4 attempts.
            let call = tokio::time::timeout(Duration::from_secs(30), client.get(&url).send());
            let answered = call.await;
            prop_assert!(answered.is_ok(), "no outcome within 30 s for {:?}", head.escape_ascii());
            Ok(())
        })
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}
