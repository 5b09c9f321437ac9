//! Random server scripts against random requests and policies, over a real
//! loopback connection: whatever happens, the safety invariants hold.
//!
//! Cases: 48 by default; set `PROPTEST_CASES` for longer runs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::Method;
use reqwest_safe_retry::{
    Decision, Jitter, ManualClock, ReportSlot, RetryBudget, RetryConfig, RetryMiddleware,
    RetryReason, SeededJitter,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The client gives up on an answer after this long.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(500);

/// What the server does with one request.
#[derive(Debug, Clone)]
enum Play {
    /// Answer with this status and, maybe, a `Retry-After` value.
    Answer(u16, Option<String>),
    /// Hold the request past the client's timeout.
    Slow,
    /// Close the connection without answering.
    Drop,
}

#[derive(Debug, Clone)]
struct Received {
    method: String,
    body: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Case {
    script: Vec<Play>,
    method: Method,
    key: Option<String>,
    body: Vec<u8>,
    max_retries: u32,
    initial: Duration,
    max: Duration,
    jitter: Jitter,
    max_retry_after: Duration,
    deadline: Option<Duration>,
    budget: bool,
    seed: u64,
}

/// The manual clock's starting wall time, so Retry-After dates can be made
/// relative to it.
fn wall_start() -> SystemTime {
    reqwest_safe_retry::Clock::wall_time(&ManualClock::new())
}

fn retry_after() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        2 => (0u64..4).prop_map(|s| Some(s.to_string())),
        1 => Just(Some("100000".to_owned())),
        1 => (0u64..4).prop_map(|s| Some(httpdate::fmt_http_date(wall_start() + Duration::from_secs(s)))),
        1 => prop_oneof![Just("-1"), Just("soon"), Just(""), Just("1.5")].prop_map(|s| Some(s.to_owned())),
    ]
}

fn play() -> impl Strategy<Value = Play> {
    let status = prop_oneof![
        Just(200u16),
        Just(201),
        Just(400),
        Just(404),
        Just(429),
        Just(500),
        Just(502),
        Just(503),
        Just(504)
    ];
    prop_oneof![
        10 => (status, retry_after()).prop_map(|(s, r)| Play::Answer(s, r)),
        1 => Just(Play::Slow),
        2 => Just(Play::Drop),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let method = prop_oneof![
        Just(Method::GET),
        Just(Method::PUT),
        Just(Method::DELETE),
        Just(Method::POST),
        Just(Method::PATCH)
    ];
    let jitter = prop_oneof![
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        Just(Jitter::None)
    ];
    (
        proptest::collection::vec(play(), 1..6),
        method,
        prop_oneof![3 => Just(None), 1 => Just(Some("k-1".to_owned())), 1 => Just(Some(String::new()))],
        proptest::collection::vec(any::<u8>(), 0..256),
        1u32..5,
        (0u64..300, 0u64..1000),
        jitter,
        0u64..3000,
        proptest::option::of(100u64..5000),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(
                script,
                method,
                key,
                body,
                max_retries,
                (initial, extra),
                jitter,
                cap,
                deadline,
                budget,
                seed,
            )| Case {
                script,
                method,
                key,
                body,
                max_retries,
                initial: Duration::from_millis(initial),
                max: Duration::from_millis(initial + extra),
                jitter,
                max_retry_after: Duration::from_millis(cap),
                deadline: deadline.map(Duration::from_millis),
                budget,
                seed,
            },
        )
}

/// A keep-alive HTTP/1.1 server that plays `script` in order of arrival
/// (the last entry repeats) and records every request it read.
async fn serve(script: Vec<Play>) -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/orders", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = received.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(connection(socket, script.clone(), log.clone()));
        }
    });
    (url, received)
}

async fn connection(mut socket: TcpStream, script: Vec<Play>, log: Arc<Mutex<Vec<Received>>>) {
    let mut buffer = Vec::new();
    loop {
        let Some(request) = read_request(&mut socket, &mut buffer).await else { return };
        let play = {
            let mut log = log.lock().unwrap();
            log.push(request);
            script[(log.len() - 1).min(script.len() - 1)].clone()
        };
        match play {
            Play::Answer(status, retry_after) => {
                let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: 4\r\n");
                if let Some(value) = retry_after {
                    head += &format!("Retry-After: {value}\r\n");
                }
                head += "\r\nbody";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
            }
            Play::Slow => {
                // Hold the request until the client gives up and hangs up.
                let mut rest = [0u8; 1024];
                while matches!(socket.read(&mut rest).await, Ok(n) if n > 0) {}
                return;
            }
            Play::Drop => return,
        }
    }
}

async fn read_request(socket: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Received> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            let method = head.split(' ').next().unwrap_or_default().to_owned();
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            while buffer.len() < end + 4 + length {
                match socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            }
            let body = buffer[end + 4..end + 4 + length].to_vec();
            buffer.drain(..end + 4 + length);
            return Some(Received { method, body });
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

fn config(case: &Case) -> RetryConfig {
    let mut builder = RetryConfig::builder()
        .with_max_retries(case.max_retries)
        .with_initial_backoff(case.initial)
        .with_max_backoff(case.max)
        .with_jitter(case.jitter)
        .with_max_retry_after(case.max_retry_after);
    if let Some(deadline) = case.deadline {
        builder = builder.with_deadline(deadline);
    }
    builder = if case.budget {
        builder.with_budget(RetryBudget::default())
    } else {
        builder.without_budget()
    };
    builder.build().expect("the generated policies are valid")
}

async fn check(case: Case) -> Result<(), TestCaseError> {
    let (url, received) = serve(case.script.clone()).await;
    let clock = ManualClock::new();
    let decisions = Arc::new(Mutex::new(Vec::new()));
    let log = decisions.clone();
    let middleware = RetryMiddleware::new(config(&case))
        .with_clock(clock.clone())
        .with_jitter_source(SeededJitter::new(case.seed))
        .on_decision(move |event| log.lock().unwrap().push(event.decision));
    let client =
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
    let slot = ReportSlot::new();
    let mut request =
        client.request(case.method.clone(), &url).timeout(CLIENT_TIMEOUT).body(case.body.clone());
    if let Some(key) = &case.key {
        request = request.header("Idempotency-Key", key);
    }
    let result = request.with_extension(slot.clone()).send().await;

    let report = slot.get().expect("a report for every request");
    let received = received.lock().unwrap().clone();
    let decisions = decisions.lock().unwrap().clone();
    let waits = clock.sleeps();
    let safe = case.method.is_idempotent() || case.key.as_deref().is_some_and(|k| !k.is_empty());

    // Attempts never exceed retries + 1, and the server saw no more than were made.
    prop_assert!(report.attempts <= case.max_retries + 1);
    prop_assert!(received.len() <= report.attempts as usize);
    prop_assert_eq!(waits.len(), report.attempts as usize - 1);

    // An unsafe request reaches the server again only after a 429.
    if !safe {
        for (earlier, _) in received.iter().enumerate().skip(1).map(|(i, r)| (i - 1, r)) {
            let answered = &case.script[earlier.min(case.script.len() - 1)];
            prop_assert!(
                matches!(answered, Play::Answer(429, _)),
                "unsafe request repeated after {:?}",
                answered
            );
        }
    }

    // The body is the same on every attempt, and the method too.
    for r in &received {
        prop_assert_eq!(&r.body, &case.body);
        prop_assert_eq!(r.method.as_str(), case.method.as_str());
    }

    // Every wait is within [0, max_backoff] or is an honoured Retry-After.
    for (attempt, decision) in decisions.iter().enumerate() {
        if let Decision::Retry { after, reason } = decision {
            prop_assert_eq!(*after, waits[attempt]);
            let header = match (reason, case.script.get(attempt).or(case.script.last())) {
                (RetryReason::Status(_), Some(Play::Answer(_, Some(value)))) => Some(value),
                _ => None,
            };
            let asked = header.and_then(|value| {
                let value = http::HeaderValue::from_str(value).unwrap();
                reqwest_safe_retry::parse_retry_after(&value, wall_start())
            });
            match (asked, header) {
                // Seconds are exact.
                (Some(asked), Some(value)) if value.bytes().all(|b| b.is_ascii_digit()) => {
                    prop_assert_eq!(*after, asked);
                    prop_assert!(asked <= case.max_retry_after);
                }
                // Dates are measured from the wall clock, which the waits so far
                // have moved on.
                (Some(asked), _) => prop_assert!(*after <= asked && asked <= case.max_retry_after),
                (None, _) => prop_assert!(*after <= case.max),
            }
        }
    }

    // Total waiting never exceeds the deadline.
    if let Some(deadline) = case.deadline {
        prop_assert!(clock.total_slept() <= deadline);
    }

    // What the caller got matches the server's last play, when it answered.
    if let (Ok(response), Some(Play::Answer(status, _))) =
        (&result, case.script.get(received.len() - 1).or(case.script.last()))
    {
        prop_assert_eq!(response.status().as_u16(), *status);
    }
    Ok(())
}

#[test]
fn retries_never_repeat_what_is_unsafe_and_stay_in_bounds() {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut runner =
        TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    runner.run(&case(), |case| runtime.block_on(check(case))).unwrap();
}
