//! Bodies under the deadline: a response body read after the call ends at
//! the deadline, and a request stream that stalls is cut by the deadline or
//! the attempt timeout, whichever is nearer.

use crate::support;

use bytes::Bytes;

use futures_util::stream;

use futures_util::stream::StreamExt;

use reqwest_safe_retry::BodyBuffering;
use reqwest_safe_retry::{
    DeadlineExceeded, RetryConfig, RetryConfigBuilder, RetryMiddleware, clock::ManualClock,
    jitter::FixedJitter, report::ReportSlot, report::RetryReport, report::StopReason,
};

use std::time::Duration;

use support::*;

/// The quick start's client on `builder` with `config`, on `clock`.
fn client(
    builder: reqwest::ClientBuilder,
    config: RetryConfigBuilder,
    clock: &ManualClock,
) -> reqwest_middleware::ClientWithMiddleware {
    let middleware = RetryMiddleware::new(config.build().unwrap()).with_clock(clock.clone());
    middleware.client(builder).unwrap().build()
}

/// Reads the stalled body, the clock moved past a deadline of 1 s once the
/// read is under way. Returns the read's error.
async fn read_until_the_deadline(
    client: &reqwest_middleware::ClientWithMiddleware,
    clock: &ManualClock,
    timeout: Option<Duration>,
) -> reqwest::Error {
    let (url, _) = raw_server(vec![Raw::StalledOk]).await;
    let mut request = client.get(&url);
    if let Some(timeout) = timeout {
        request = request.timeout(timeout);
    }
    let response = request.send().await.expect("the headers arrive");
    assert_eq!(RetryReport::from_response(&response).attempts, 1);
    past_the_deadline(response.bytes(), clock).await.expect_err("the body stalls")
}

/// Runs `work`, moving `clock` past a deadline of 1 s once it is under way;
/// bounded at 10 s.
async fn past_the_deadline<T>(
    work: impl std::future::Future<Output = T>,
    clock: &ManualClock,
) -> T {
    let deadline = async {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        clock.advance(Duration::from_secs(1));
    };
    let both = async { tokio::join!(work, deadline) };
    tokio::time::timeout(Duration::from_secs(10), both).await.expect("bounded").0
}

/// The crate's deadline error inside a body error.
fn deadline_inside(error: &reqwest::Error) -> Option<DeadlineExceeded> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(level) = next {
        if let Some(io) = level.downcast_ref::<std::io::Error>() {
            return io.get_ref().and_then(|inner| inner.downcast_ref()).copied();
        }
        next = level.source();
    }
    None
}

#[tokio::test]
async fn with_no_timeout_anywhere_the_body_ends_at_the_deadline() {
    let clock = ManualClock::new();
    let config = RetryConfig::builder().with_deadline(Duration::from_secs(1));
    let client = client(reqwest::Client::builder(), config, &clock);
    let error = read_until_the_deadline(&client, &clock, None).await;
    assert!(error.is_timeout(), "{error:?}");
    let deadline = deadline_inside(&error).expect("the deadline error is inside");
    assert_eq!(deadline.deadline(), Duration::from_secs(1));
}

#[tokio::test]
async fn with_a_client_timeout_the_body_ends_at_the_earlier_deadline() {
    // The client's 60 s are not replaced; the deadline comes first.
    let clock = ManualClock::new();
    let builder = reqwest::Client::builder().timeout(Duration::from_secs(60));
    let config = RetryConfig::builder().with_deadline(Duration::from_secs(1));
    let client = client(builder, config, &clock);
    let error = read_until_the_deadline(&client, &clock, None).await;
    assert!(error.is_timeout() && deadline_inside(&error).is_some(), "{error:?}");
}

#[tokio::test]
async fn with_response_buffering_the_read_inside_the_attempt_ends_at_the_deadline() {
    let clock = ManualClock::new();
    let config = RetryConfig::builder()
        .with_deadline(Duration::from_secs(1))
        .with_body_buffering(BodyBuffering::default().with_response(1024));
    let client = client(reqwest::Client::builder(), config, &clock);
    let (url, _) = raw_server(vec![Raw::StalledOk]).await;
    let sent = past_the_deadline(client.get(&url).send(), &clock).await;
    match sent.expect_err("the deadline passed while the body was read") {
        reqwest_middleware::Error::Middleware(error) => {
            assert!(error.is::<DeadlineExceeded>(), "{error}")
        }
        other => panic!("{other:?}"),
    }
}

/// A timeout the middleware can see carries the deadline, shorter, to
/// reqwest: its timer ends the read, with its own timeout error.
#[tokio::test]
async fn with_a_request_or_attempt_timeout_the_deadline_goes_on_the_request() {
    let long = Duration::from_secs(60);
    let deadline = Duration::from_millis(100);
    for attempt_timeout in [false, true] {
        let clock = ManualClock::new();
        let mut config = RetryConfig::builder().with_deadline(deadline);
        if attempt_timeout {
            config = config.with_attempt_timeout(long);
        }
        let client = client(reqwest::Client::builder(), config, &clock);
        let (url, _) = raw_server(vec![Raw::StalledOk]).await;
        let mut request = client.get(&url);
        if !attempt_timeout {
            request = request.timeout(long);
        }
        let response = request.send().await.expect("the headers arrive");
        let read = tokio::time::timeout(Duration::from_secs(10), response.bytes()).await;
        let error = read.expect("reqwest's timer ends the read").unwrap_err();
        assert!(error.is_timeout(), "attempt timeout {attempt_timeout}: {error:?}");
    }
}

/// A body that always has data ready is cut at the deadline all the same:
/// the deadline is looked at before the body, as reqwest's own timeout is.
#[tokio::test]
async fn a_body_that_streams_faster_than_it_is_read_ends_at_the_deadline() {
    let clock = ManualClock::new();
    let config = RetryConfig::builder().with_deadline(Duration::from_secs(1));
    let client = client(reqwest::Client::builder(), config, &clock);
    let (url, _) = raw_server(vec![Raw::EndlessOk]).await;
    let mut response = client.get(&url).send().await.expect("the headers arrive");
    let read = async {
        for _ in 0..3 {
            assert!(response.chunk().await.expect("data before the deadline").is_some());
        }
        clock.advance(Duration::from_secs(1));
        // The server keeps sending: data is ready, and the deadline wins.
        let error = response.chunk().await.expect_err("the deadline passed");
        assert!(error.is_timeout() && deadline_inside(&error).is_some(), "{error:?}");
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("bounded");
}

/// A body response buffering has read whole is in memory: reading it after
/// the deadline takes no time, and does not fail.
#[tokio::test]
async fn a_body_read_whole_within_the_deadline_can_be_read_after_it() {
    let clock = ManualClock::new();
    let config = RetryConfig::builder()
        .with_deadline(Duration::from_secs(1))
        .with_body_buffering(BodyBuffering::default().with_response(1024));
    let client = client(reqwest::Client::builder(), config, &clock);
    let (url, _) = raw_server(vec![Raw::Reply(OK_CLOSE)]).await;
    let response = client.get(&url).send().await.expect("answered");
    clock.advance(Duration::from_secs(5));
    assert_eq!(response.text().await.expect("in memory"), "ok");
}

const KIB: usize = 1024;

/// A streamed body that yields `first`, then nothing ever again.
fn stalled(first: &'static [u8]) -> reqwest::Body {
    let first = stream::once(async move { Ok::<_, std::io::Error>(Bytes::from_static(first)) });
    reqwest::Body::wrap_stream(first.chain(stream::pending()))
}

/// On tokio's clock, paused: the stream never ends, and the deadline, which
/// counts the time spent reading it, ends the call without sending anything.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_under_a_deadline_ends_at_the_deadline() {
    let (url, connections) = raw_server(vec![Raw::Reply(OK_CLOSE)]).await;
    let config = policy()
        .with_body_buffering(BodyBuffering::default().with_request(64 * KIB))
        .with_deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let client = wrap(RetryMiddleware::new(config).with_jitter_source(FixedJitter::TOP));
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client.put(&url).body(stalled(b"order=")).with_extension(slot.clone()).send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the deadline ends the wait for the stream")
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    match &error {
        reqwest_middleware::Error::Middleware(e) => {
            assert!(e.is::<DeadlineExceeded>(), "{e}")
        }
        other => panic!("{other}"),
    }
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (0, StopReason::DeadlineExceeded));
    assert_eq!(connections.get(), 0, "nothing was sent");
}

/// On tokio's clock, paused: reading waits no longer than the attempt
/// timeout; then the request goes out once, and reqwest times the attempt
/// out as it would have without buffering.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_under_an_attempt_timeout_is_sent_once_and_times_out() {
    let (url, connections) = raw_server(vec![Raw::Stall]).await;
    let config = policy()
        .with_body_buffering(BodyBuffering::default().with_request(64 * KIB))
        .with_attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let client = wrap(RetryMiddleware::new(config).with_jitter_source(FixedJitter::TOP));
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client.put(&url).body(stalled(b"order=")).with_extension(slot.clone()).send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the attempt timeout bounds the wait for the stream")
        .unwrap_err();
    assert!(error.is_timeout(), "{error}");
    let elapsed = start.elapsed();
    assert!(elapsed <= Duration::from_secs(2) + 100 * MS, "{elapsed:?}");
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotReplayable));
    assert!(connections.get() <= 1);
}

/// On tokio's clock, paused: a request's own timeout bounds the whole call,
/// the wait for the stream included: one shorter than the attempt timeout
/// ends the call while the stream stalls, nothing sent, with reqwest's kind
/// of timeout; a deadline further off does not stretch it.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_waits_no_longer_than_the_requests_own_shorter_timeout() {
    let (url, connections) = raw_server(vec![Raw::Stall]).await;
    let config = policy()
        .with_body_buffering(BodyBuffering::default().with_request(64 * KIB))
        .with_attempt_timeout(Duration::from_secs(5))
        .with_deadline(Duration::from_secs(30))
        .build()
        .unwrap();
    let client = wrap(RetryMiddleware::new(config).with_jitter_source(FixedJitter::TOP));
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client
        .put(&url)
        .timeout(Duration::from_secs(1))
        .body(stalled(b"order="))
        .with_extension(slot.clone())
        .send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the request's timeout bounds the wait for the stream")
        .unwrap_err();
    assert!(error.is_timeout(), "{error}");
    // One second, reading: not five, nor thirty.
    let elapsed = start.elapsed();
    assert!(elapsed <= Duration::from_secs(1) + 100 * MS, "{elapsed:?}");
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (0, StopReason::DeadlineExceeded));
    assert_eq!(connections.get(), 0);
}

/// On tokio's clock, paused: a deadline nearer than the attempt timeout ends
/// the wait for the stream at the deadline, with nothing sent.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_stops_at_a_deadline_nearer_than_the_attempt_timeout() {
    let (url, connections) = raw_server(vec![Raw::Reply(OK_CLOSE)]).await;
    let config = policy()
        .with_body_buffering(BodyBuffering::default().with_request(64 * KIB))
        .with_attempt_timeout(Duration::from_secs(10))
        .with_deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let client = wrap(RetryMiddleware::new(config).with_jitter_source(FixedJitter::TOP));
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let send = client.put(&url).body(stalled(b"order=")).with_extension(slot.clone()).send();
    let error = tokio::time::timeout(Duration::from_secs(60), send)
        .await
        .expect("the deadline ends the wait for the stream")
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    match &error {
        reqwest_middleware::Error::Middleware(e) => {
            assert!(e.is::<DeadlineExceeded>(), "{e}")
        }
        other => panic!("{other}"),
    }
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (0, StopReason::DeadlineExceeded));
    assert_eq!(connections.get(), 0, "nothing was sent");
}
