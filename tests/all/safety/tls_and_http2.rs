//! Failures only a real server produces: TLS handshakes broken off or
//! rejected, and HTTP/2 streams refused, reset or turned away by GOAWAY, each
//! retried only when the server cannot have processed the request or it is
//! safe to repeat.

use crate::support;
use crate::support::calls::{
    bounded, chain, config, h2_client_without_reqwest_retry, send, with_retry,
};
use reqwest::Method;
use reqwest_safe_retry::Backoff;
use reqwest_safe_retry::{
    RetryConfig, RetryMiddleware, clock::ManualClock, jitter::FixedJitter, report::StopReason,
};
use support::tls_server::{Handshake, rustls_client, tls_server, trusting_builder};
use support::*;

#[tokio::test]
async fn interrupted_tls_handshake_is_retried_for_any_method() {
    // All four cases run before the verdict, so a failure shows each one.
    let mut wrong = Vec::new();
    for interruption in [Handshake::Eof, Handshake::Reset] {
        for method in [Method::GET, Method::POST] {
            let case = format!("{interruption:?} {method}");
            let (url, connections, answered) =
                tls_server(vec![interruption, Handshake::Complete]).await;
            let (client, clock) = with_retry(trusting_builder(), config(3));
            let (result, report) = send(&client, method, &url).await;
            let seen = (report.attempts, report.stop, connections.get(), answered.get());
            match result {
                Ok(response)
                    if response.status() == 200
                        && seen == (2, StopReason::NothingToRetry, 2, 1) =>
                {
                    assert_eq!(clock.sleeps(), [100 * MS], "{case}");
                }
                Ok(response) => wrong.push(format!("{case}: {} {seen:?}", response.status())),
                Err(e) => wrong.push(format!("{case}: {seen:?}\n  {}", chain(&e))),
            }
        }
    }
    assert!(wrong.is_empty(), "not retried to a 200 after 2 attempts:\n{}", wrong.join("\n"));
}

#[tokio::test]
async fn certificate_error_is_final() {
    let (url, connections, answered) = tls_server(vec![Handshake::Complete]).await;
    let (client, clock) = with_retry(rustls_client(), config(3));
    let (result, report) = send(&client, Method::GET, &url).await;
    let error = result.expect_err("the certificate is not trusted");
    assert!(error.is_connect(), "{}", chain(&error));
    assert_eq!((report.attempts, report.stop), (1, StopReason::NothingToRetry));
    assert_eq!((connections.get(), answered.get()), (1, 0));
    assert!(clock.sleeps().is_empty());
}

#[cfg(feature = "http2")]
#[tokio::test]
async fn refused_stream_is_retried_for_any_method() {
    use support::h2_server::{Answer, h2_server};

    for method in [Method::GET, Method::POST] {
        let refuse = Answer::Reset(h2::Reason::REFUSED_STREAM);
        let (url, streams, _) = h2_server(vec![refuse, refuse, Answer::Ok]).await;
        let (client, clock) = with_retry(h2_client_without_reqwest_retry(), config(3));
        let (result, report) = send(&client, method.clone(), &url).await;
        let response = result.unwrap_or_else(|e| panic!("{method}: {}", chain(&e)));
        assert_eq!(response.status(), 200, "{method}");
        assert_eq!(response.version(), http::Version::HTTP_2);
        assert_eq!((report.attempts, streams.get()), (3, 3), "{method}");
        assert_eq!(clock.sleeps(), [100 * MS, 200 * MS], "{method}");
    }
}

#[cfg(feature = "http2")]
#[tokio::test]
async fn graceful_goaway_is_retried() {
    use support::h2_server::{Answer, h2_server};

    for method in [Method::GET, Method::POST] {
        let (url, streams, connections) = h2_server(vec![Answer::GoAwayBefore, Answer::Ok]).await;
        let (client, clock) = with_retry(h2_client_without_reqwest_retry(), config(3));
        let (result, report) = send(&client, method.clone(), &url).await;
        let response = result.unwrap_or_else(|e| panic!("{method}: {}", chain(&e)));
        assert_eq!(response.status(), 200, "{method}");
        assert_eq!((report.attempts, streams.get()), (2, 2), "{method}");
        assert_eq!(connections.get(), 2, "{method}: the retry opened a new connection");
        assert_eq!(clock.sleeps(), [100 * MS], "{method}");
    }
}

/// The quick start's setup: the default redirect setting, and the inner
/// client built with the middleware's redirect policy.
#[cfg(feature = "http2")]
#[tokio::test]
async fn a_post_refused_by_http2_is_retried_through_the_quick_start_client() {
    use support::h2_server::{Answer, h2_client, h2_server};

    let refuse = Answer::Reset(h2::Reason::REFUSED_STREAM);
    for script in [vec![refuse, Answer::Ok], vec![Answer::GoAwayBefore, Answer::Ok]] {
        let (url, streams, _) = h2_server(script.clone()).await;
        let config = RetryConfig::builder()
            .with_backoff(Backoff::default().with_initial(100 * MS))
            .build()
            .unwrap();
        let clock = ManualClock::new();
        let middleware = RetryMiddleware::new(config)
            .with_clock(clock.clone())
            .with_jitter_source(FixedJitter::TOP);
        let client = middleware.client(h2_client().retry(reqwest::retry::never())).unwrap().build();
        let (result, report) = send(&client, Method::POST, &url).await;
        let response = result.unwrap_or_else(|e| panic!("{script:?}: {}", chain(&e)));
        assert_eq!(response.status(), 200, "{script:?}");
        assert_eq!((report.attempts, streams.get()), (2, 2), "{script:?}");
        assert_eq!(clock.sleeps(), [100 * MS], "{script:?}");
    }
}

#[cfg(feature = "http2")]
#[tokio::test]
async fn cancelled_stream_is_not_retried_for_post() {
    use support::h2_server::{Answer, h2_server};

    for reason in [h2::Reason::CANCEL, h2::Reason::INTERNAL_ERROR, h2::Reason::NO_ERROR] {
        let (url, streams, _) = h2_server(vec![Answer::Reset(reason), Answer::Ok]).await;
        let (client, clock) = with_retry(h2_client_without_reqwest_retry(), config(3));
        let (result, report) = send(&client, Method::POST, &url).await;
        let error = result.expect_err("the stream was reset");
        assert!(!error.is_connect(), "{reason:?}: {}", chain(&error));
        assert_eq!((report.attempts, report.stop), (1, StopReason::NotSafe), "{reason:?}");
        assert_eq!(streams.get(), 1, "{reason:?}");
        assert!(clock.sleeps().is_empty(), "{reason:?}");
    }
}

#[cfg(feature = "http2")]
#[tokio::test]
async fn goaway_after_the_stream_was_taken_is_not_retried_for_post() {
    use support::h2_server::{Answer, h2_server};

    let (url, streams, _) = h2_server(vec![Answer::GoAwayAfter, Answer::Ok]).await;
    let (client, clock) = with_retry(h2_client_without_reqwest_retry(), config(3));
    let (result, report) = send(&client, Method::POST, &url).await;
    // The GOAWAY names the stream as possibly processed; the client sees the
    // connection close under it (a broken pipe), not a GOAWAY error.
    let error = result.expect_err("the connection closed before an answer");
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotSafe), "{}", chain(&error));
    assert_eq!(streams.get(), 1);
    assert!(clock.sleeps().is_empty());
}

/// One stream at a time over HTTP/2: a request queued behind an open stream
/// when the connection closes is never written. hyper says only that its
/// dispatch task is gone, which proves nothing (a draining server may take
/// the queued stream first), so it is retried when safe to repeat and
/// returned otherwise.
#[cfg(feature = "http2")]
#[tokio::test]
async fn a_request_queued_on_a_closing_connection_is_retried_when_safe() {
    use std::sync::Arc;

    use support::h2_server::{h2_client, h2_one_stream_server};

    for (method, retried) in [(Method::GET, true), (Method::POST, false)] {
        let gate = Arc::new(tokio::sync::Notify::new());
        let (url, streams) = h2_one_stream_server(gate.clone()).await;
        let (client, clock) = with_retry(h2_client(), config(3));
        // The first request takes the only stream, and keeps it open.
        let first = bounded("the first GET", client.get(format!("{url}/a")).send()).await;
        let queued_url = format!("{url}/b");
        let queued = send(&client, method.clone(), &queued_url);
        let close = async {
            // Current-thread runtime: the client's tasks queue the request
            // within a few turns, with no I/O to wait for.
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
            assert_eq!(streams.get(), 1, "{method}: queued, not sent");
            gate.notify_one();
        };
        let ((result, report), ()) = tokio::join!(queued, close);
        drop(first);
        if retried {
            assert_eq!(result.unwrap().status(), 200);
            assert_eq!((report.attempts, streams.get()), (2, 2));
            assert_eq!(clock.sleeps(), [100 * MS]);
        } else {
            let error = result.expect_err("the POST is returned");
            assert!(chain(&error).contains("DispatchGone"), "{}", chain(&error));
            assert_eq!((report.attempts, report.stop), (1, StopReason::NotSafe));
            assert_eq!(streams.get(), 1);
        }
    }
}
