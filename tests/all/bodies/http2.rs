//! On HTTP/2, an error body dropped for the retry resets only its own
//! stream: the connection goes on serving the retry.

use crate::support;
use crate::support::calls::{bounded, config, send, with_retry};
use reqwest::Method;
use std::time::Duration;

#[cfg(feature = "http2")]
#[tokio::test]
async fn on_http2_a_dropped_error_body_resets_only_its_stream() {
    use support::h2_server::{Answer, h2_client, h2_server_counting_resets};

    let (url, streams, connections, resets) =
        h2_server_counting_resets(vec![Answer::StalledBody, Answer::Ok]).await;
    let inner = h2_client().retry(reqwest::retry::never());
    let (client, clock) = with_retry(inner, config(3));
    let (result, report) = send(&client, Method::GET, &url).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!((report.attempts, clock.sleeps()), (2, vec![Duration::from_millis(100)]));
    // The stalled body was dropped when the wait ended: its stream was
    // cancelled and the retry went out on the same connection.
    assert_eq!((streams.get(), connections.get()), (2, 1));
    bounded("the stream's reset", async {
        while resets.get() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}
