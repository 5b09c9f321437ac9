//! Response buffering: a body that breaks while the middleware reads it is
//! retried like any other failed attempt when the request is safe to repeat,
//! and handed to the caller otherwise.

use crate::support;
use reqwest_safe_retry::BodyBuffering;
use reqwest_safe_retry::{
    DeadlineExceeded, Outcome, RetryMiddleware, clock::TokioClock, jitter::FixedJitter,
    report::Decision, report::ReportSlot, report::RetryReason, report::RetryReport,
    report::StopReason,
};
use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{MS, policy};

use crate::support::broken_bodies::{
    BODY, Go, Reasons, Step, bounded, buffering, chain, client, client_over, kinds, reqwest_error,
    server,
};

#[tokio::test]
async fn a_get_whose_body_breaks_is_retried_and_comes_back_in_memory() {
    let go = Go::default();
    let (url, requests) = server(vec![Step::ResetMidBody, Step::Whole], go.clone()).await;
    let (client, clock, reasons) = client(buffering(), &go);
    let response = bounded("the GET", client.get(&url).send()).await.unwrap();
    assert_eq!(*requests.lock().unwrap(), 2);
    assert_eq!(*reasons.lock().unwrap(), [RetryReason::ConnectionLost]);
    assert_eq!(clock.sleeps(), [100 * MS]);
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (2, StopReason::NothingToRetry));
    // The response as it came, its body in memory.
    assert_eq!(response.status(), 200);
    assert_eq!(response.url().as_str(), url);
    assert_eq!(response.headers()["x-kept"], "yes");
    assert_eq!(response.headers()["content-length"], BODY.len().to_string().as_str());
    assert_eq!(response.content_length(), Some(BODY.len() as u64));
    assert!(response.remote_addr().is_some(), "the connection's extensions are kept");
    assert_eq!(response.text().await.unwrap(), BODY);
}

#[tokio::test]
async fn a_body_that_breaks_on_the_last_attempt_is_the_callers_error() {
    let go = Go::default();
    let (url, requests) = server(vec![Step::ResetMidBody], go.clone()).await;
    let (client, _, reasons) = client(buffering().with_max_retries(1), &go);
    let slot = ReportSlot::new();
    let call = client.get(&url).with_extension(slot.clone()).send();
    let error = bounded("the GET", call).await.unwrap_err();
    let error = reqwest_error(&error);
    // What the caller's own `bytes()` meets without the option (see
    // `without_the_option_nothing_changes`).
    assert_eq!(kinds(error), (false, true, false), "{error:?}");
    assert!(chain(error).contains("reset"), "{error:?}");
    assert_eq!(error.url().map(|u| u.as_str()), Some(url.as_str()));
    assert_eq!(*requests.lock().unwrap(), 2);
    assert_eq!(*reasons.lock().unwrap(), [RetryReason::ConnectionLost]);
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (2, StopReason::RetriesExhausted));
}

#[tokio::test]
async fn a_post_without_a_key_is_not_read_nor_retried() {
    let go = Go::default();
    let (url, requests) = server(vec![Step::ResetMidBody, Step::Whole], go.clone()).await;
    let (client, clock, _) = client(buffering(), &go);
    let response = bounded("the POST", client.post(&url).body("order").send()).await.unwrap();
    assert_eq!(response.status(), 200);
    let error = bounded("its body", response.bytes()).await.unwrap_err();
    assert_eq!(kinds(&error), (false, true, false), "{error:?}");
    assert_eq!(*requests.lock().unwrap(), 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn a_post_with_a_key_is_retried() {
    let go = Go::default();
    let (url, requests) = server(vec![Step::ResetMidBody, Step::Whole], go.clone()).await;
    let (client, _, reasons) = client(buffering(), &go);
    let call = client.post(&url).header("Idempotency-Key", "k-1").body("order").send();
    let response = bounded("the POST", call).await.unwrap();
    assert_eq!(response.text().await.unwrap(), BODY);
    assert_eq!(*requests.lock().unwrap(), 2);
    assert_eq!(*reasons.lock().unwrap(), [RetryReason::ConnectionLost]);
}

#[tokio::test]
async fn over_the_limit_the_response_streams_and_a_later_error_is_the_callers() {
    let go = Go::default();
    let (url, requests) = server(vec![Step::ChunksThenReset, Step::Whole], go.clone()).await;
    // Read 5 bytes, then a 20-byte chunk goes over the limit: returned.
    let (client, clock, _) = client(
        policy().with_body_buffering(BodyBuffering::default().with_response(10)),
        &Go::default(),
    );
    let mut response = bounded("the GET", client.get(&url).send()).await.unwrap();
    assert_eq!(RetryReport::from_response(&response).stop, StopReason::NothingToRetry);
    assert_eq!(response.url().as_str(), url);
    // What was read comes first, then the rest of the body as it comes.
    assert_eq!(bounded("a chunk", response.chunk()).await.unwrap().unwrap(), "aaaaa");
    assert_eq!(bounded("a chunk", response.chunk()).await.unwrap().unwrap(), "b".repeat(20));
    go.go();
    let error = bounded("the rest", response.chunk()).await.unwrap_err();
    assert_eq!(kinds(&error), (false, true, false), "{error:?}");
    assert_eq!(*requests.lock().unwrap(), 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn a_body_declared_longer_than_the_limit_is_not_read() {
    let go = Go::default();
    let (url, requests) = server(vec![Step::ResetMidBody, Step::Whole], go.clone()).await;
    let (client, _, _) =
        client(policy().with_body_buffering(BodyBuffering::default().with_response(4)), &go);
    let response = bounded("the GET", client.get(&url).send()).await.unwrap();
    assert_eq!(response.content_length(), Some(BODY.len() as u64));
    assert!(bounded("its body", response.bytes()).await.is_err());
    assert_eq!(*requests.lock().unwrap(), 1);
}

#[tokio::test]
async fn without_the_option_nothing_changes() {
    let go = Go::default();
    let (url, requests) = server(vec![Step::ResetMidBody, Step::Whole], go.clone()).await;
    let (client, clock, _) = client(policy(), &go);
    let response = bounded("the GET", client.get(&url).send()).await.unwrap();
    let report = RetryReport::from_response(&response);
    assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry));
    let error = bounded("its body", response.bytes()).await.unwrap_err();
    assert_eq!(kinds(&error), (false, true, false), "{error:?}");
    assert_eq!(*requests.lock().unwrap(), 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stalls_under_an_attempt_timeout_is_retried() {
    let (url, requests) = server(vec![Step::StallMidBody, Step::Whole], Go::default()).await;
    let reasons = Reasons::default();
    let seen = reasons.clone();
    let config = buffering().with_attempt_timeout(Duration::from_secs(2)).build().unwrap();
    let middleware = RetryMiddleware::new(config)
        .with_clock(TokioClock)
        .with_jitter_source(FixedJitter::TOP)
        .on_decision(move |event| {
            if let Decision::Retry { reason, .. } = event.decision {
                seen.lock().unwrap().push(reason);
            }
        });
    let client = support::wrap(middleware);
    let start = tokio::time::Instant::now();
    let response = bounded("the GET", client.get(&url).send()).await.unwrap();
    // The attempt timeout, then the 100 ms wait, then the whole answer.
    assert_eq!(start.elapsed(), Duration::from_secs(2) + 100 * MS);
    assert_eq!(*reasons.lock().unwrap(), [RetryReason::Timeout]);
    assert_eq!(*requests.lock().unwrap(), 2);
    assert_eq!(response.text().await.unwrap(), BODY);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_on_the_last_attempt_is_reqwests_timeout() {
    let (url, _) = server(vec![Step::StallMidBody], Go::default()).await;
    let config = buffering().with_max_retries(0).build().unwrap();
    // No retries allowed: nothing is read, the caller's read times out.
    let middleware = RetryMiddleware::new(config).with_clock(TokioClock);
    let call = support::wrap(middleware).get(&url).timeout(Duration::from_secs(1)).send();
    let response = bounded("the GET", call).await.unwrap();
    let theirs = bounded("its body", response.bytes()).await.unwrap_err();
    assert!(theirs.is_timeout());
    // With retries, the last attempt's timeout reaches the caller from the
    // call itself, as reqwest made it.
    let config = buffering().with_max_retries(1).build().unwrap();
    let middleware = RetryMiddleware::new(config).with_clock(TokioClock);
    let call = support::wrap(middleware).get(&url).timeout(Duration::from_secs(1)).send();
    let error = bounded("the GET", call).await.unwrap_err();
    let error = reqwest_error(&error);
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(kinds(error), kinds(&theirs), "answers as the caller's own read would");
    assert_eq!(format!("{:?}", error.source()), format!("{:?}", theirs.source()));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_read_when_no_timeout_is_visible() {
    let (url, requests) = server(vec![Step::StallMidBody], Go::default()).await;
    let config = buffering().with_deadline(Duration::from_secs(3)).build().unwrap();
    let middleware = RetryMiddleware::new(config).with_clock(TokioClock);
    let slot = ReportSlot::new();
    let start = tokio::time::Instant::now();
    let call = support::wrap(middleware).get(&url).with_extension(slot.clone()).send();
    let error = bounded("the GET", call).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    match &error {
        reqwest_middleware::Error::Middleware(e) => {
            assert!(e.downcast_ref::<DeadlineExceeded>().is_some(), "{e:?}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(slot.get().unwrap().stop, StopReason::DeadlineExceeded);
    assert_eq!(*requests.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_status_that_would_be_retried_is_not_read() {
    // A 503 with no retries left comes back as it streams: its body is not
    // read by the middleware.
    let (url, _) = support::raw_server(vec![support::Raw::StalledBody]).await;
    let (client, _, _) = client(buffering().with_max_retries(1), &Go::default());
    let response = bounded("the GET", client.get(&url).send()).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(RetryReport::from_response(&response).stop, StopReason::RetriesExhausted);
}

#[tokio::test]
async fn a_predicate_sees_the_body_in_memory_or_its_error() {
    let go = Go::default();
    let (url, requests) = server(vec![Step::ResetMidBody, Step::Whole], go.clone()).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let config = buffering().with_predicate(move |attempt| {
        record.lock().unwrap().push(match attempt.outcome {
            Outcome::Response(response) => format!("{:?}", response.content_length()),
            _ => "error".to_owned(),
        });
        None::<reqwest_safe_retry::Retryability>
    });
    let (client, _, reasons) = client(config, &go);
    let response = bounded("the GET", client.get(&url).send()).await.unwrap();
    assert_eq!(response.text().await.unwrap(), BODY);
    assert_eq!(*seen.lock().unwrap(), ["error".to_owned(), format!("Some({})", BODY.len())]);
    assert_eq!(*reasons.lock().unwrap(), [RetryReason::ConnectionLost]);
    assert_eq!(*requests.lock().unwrap(), 2);
}

/// A body cut short by a clean close (no reset) is retried like one reset;
/// a body the HTTP stack cannot parse would be the same next time: final.
#[tokio::test]
async fn a_body_cut_short_is_retried_and_a_malformed_one_is_final() {
    use support::{OK_CLOSE, Raw, raw_server};
    const SHORT: &str = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf";
    const MALFORMED: &str =
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";

    let (url, connections) = raw_server(vec![Raw::Reply(SHORT), Raw::Reply(OK_CLOSE)]).await;
    let (retrying, clock, reasons) = client(buffering(), &Go::default());
    let response = bounded("the short body", retrying.get(&url).send()).await.unwrap();
    assert_eq!(connections.get(), 2);
    assert_eq!(*reasons.lock().unwrap(), [RetryReason::ConnectionLost]);
    assert_eq!(clock.sleeps(), [100 * MS]);
    assert_eq!(response.bytes().await.unwrap(), "ok");

    let (url, connections) = raw_server(vec![Raw::Reply(MALFORMED), Raw::Reply(OK_CLOSE)]).await;
    let (retrying, clock, reasons) = client(buffering(), &Go::default());
    let slot = ReportSlot::new();
    let error =
        bounded("the malformed body", retrying.get(&url).with_extension(slot.clone()).send())
            .await
            .unwrap_err();
    assert_eq!(connections.get(), 1);
    assert!(reasons.lock().unwrap().is_empty());
    assert!(clock.sleeps().is_empty());
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry));
    let error = reqwest_error(&error);
    assert!(error.is_body() || error.is_decode(), "{}", chain(error));
    assert!(chain(error).contains("chunk size"), "{}", chain(error));
}

/// An HTTP/2 stream reset halfway through a final answer's body: the
/// stream was lost, the connection was not. A GET is retried; a POST
/// without a key, perhaps processed, is not: its body is left to its
/// caller, who meets the error.
#[cfg(feature = "http2")]
#[tokio::test]
async fn a_stream_reset_mid_body_is_retried_when_safe() {
    use reqwest::Method;
    use support::h2_server::{Answer, h2_client, h2_server_gated};

    for (method, attempts) in [(Method::GET, 2u32), (Method::POST, 1)] {
        let go = Go::default();
        let script = vec![Answer::ResetMidBody, Answer::Ok];
        let (url, streams, _, _) = h2_server_gated(script, go.0.clone()).await;
        let inner = h2_client().retry(reqwest::retry::never()).build().unwrap();
        let (client, clock, reasons) = client_over(inner, buffering(), &go);
        let slot = ReportSlot::new();
        let call = client.request(method.clone(), &url).with_extension(slot.clone()).send();
        let outcome = tokio::time::timeout(Duration::from_secs(10), call).await.expect("ends");
        let report = slot.get().unwrap();
        assert_eq!((report.attempts, streams.get()), (attempts, attempts as usize), "{method}");
        if method == Method::GET {
            assert_eq!(outcome.unwrap().text().await.unwrap(), "ok");
            assert_eq!(*reasons.lock().unwrap(), [RetryReason::ConnectionLost]);
            assert_eq!(clock.sleeps().len(), 1);
        } else {
            // Nothing would be retried, so nothing is read: the caller reads
            // the body, and meets its error.
            let error = outcome.unwrap().bytes().await.unwrap_err();
            assert!(error.is_body() || error.is_decode(), "{}", chain(&error));
            assert_eq!(report.stop, StopReason::NothingToRetry);
            assert!(clock.sleeps().is_empty());
        }
    }
}
