//! What the soak (`cargo run --release --example soak`) found, each as the
//! smallest reproduction: a raw loopback server, the quick start's client.
//!
//! A request whose body is a stream is sent once: it cannot be copied, so
//! it is never retried, and a redirect that must carry the body on (a 307
//! or 308, or a 301 or 302 of anything but a POST) is handed back to the
//! caller (`redirect::next_hop`'s `has_body`). With the middleware
//! following redirects, the hop is built from the request's bodiless copy,
//! which has no body to say it needs one: the PUT goes on to the next hop
//! with an empty body, and that empty PUT is then retried like any other.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_safe_retry::{ManualClock, RetryConfig, RetryMiddleware};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request as the server read it: method, path and body.
type Seen = (String, String, Vec<u8>);

/// A server whose `/first` answers `status` with `Location: /next`, and
/// whose `/next` answers 503 twice, then 200. Chunked bodies are read
/// whole. Returns its URL and the requests it read.
async fn server(status: u16) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/first", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // A head, then a body by Content-Length or chunks.
                    let end = loop {
                        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            break end;
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                    buffer.drain(..end + 4);
                    let mut line = head.split(' ');
                    let method = line.next().unwrap_or_default().to_ascii_uppercase();
                    let path = line.next().unwrap_or_default().to_owned();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    let chunked = head.contains("transfer-encoding: chunked");
                    let body = loop {
                        let complete = if chunked {
                            buffer.windows(5).position(|w| w == b"0\r\n\r\n").map(|at| at + 5)
                        } else {
                            (buffer.len() >= length).then_some(length)
                        };
                        if let Some(at) = complete {
                            break buffer.drain(..at).collect::<Vec<u8>>();
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let answer = {
                        let mut log = log.lock().unwrap();
                        log.push((method, path.clone(), body));
                        let hops = log.iter().filter(|(_, p, _)| p == "/next").count();
                        if path == "/first" {
                            format!(
                                "HTTP/1.1 {status} X\r\nLocation: /next\r\nContent-Length: 0\r\n\r\n"
                            )
                        } else if hops <= 2 {
                            "HTTP/1.1 503 X\r\nContent-Length: 0\r\n\r\n".to_owned()
                        } else {
                            "HTTP/1.1 200 X\r\nContent-Length: 0\r\n\r\n".to_owned()
                        }
                    };
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

/// Sends a PUT with a streamed body through the quick start's client;
/// returns the status the caller got and what the server read.
async fn streamed_put(status: u16) -> (u16, Vec<Seen>) {
    let (url, seen) = server(status).await;
    let retry = RetryMiddleware::new(RetryConfig::default()).with_clock(ManualClock::new());
    let client = retry.client(reqwest::Client::builder()).unwrap().build();
    let chunks = ["order", "=1"].map(|c| Ok::<_, std::io::Error>(bytes::Bytes::from(c)));
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let response = tokio::time::timeout(Duration::from_secs(5), client.put(&url).body(body).send())
        .await
        .expect("the call ends")
        .expect("an answer");
    let seen = seen.lock().unwrap().clone();
    (response.status().as_u16(), seen)
}

#[tokio::test]
async fn a_streamed_body_is_not_dropped_on_a_redirect_that_keeps_the_method() {
    let mut failures = Vec::new();
    for status in [301, 302, 307, 308] {
        let (got, seen) = streamed_put(status).await;
        let described: Vec<String> =
            seen.iter().map(|(m, p, b)| format!("{m} {p} ({} body bytes)", b.len())).collect();
        // The stream went to /first, once; then either the redirect is
        // handed back (nothing is left to send on), or the hop gets the
        // body, once. Never a PUT without its body, and never that again.
        let first = seen.iter().filter(|(_, p, _)| p == "/first").count();
        let hops: Vec<&Seen> = seen.iter().filter(|(_, p, _)| p == "/next").collect();
        let bodiless = hops.iter().any(|(_, _, body)| body.is_empty());
        if first != 1 || bodiless || hops.len() > 1 {
            failures.push(format!("{status}: the caller got {got}; the server read {described:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The other side of the rule above: a redirect that turns the request into
/// a GET needs no body, so reqwest follows a 303 of the streamed PUT with a
/// GET. The call cannot be sent again (the stream is gone), so the GET's
/// 503 is the caller's, and nothing is sent twice.
#[tokio::test]
async fn a_streamed_body_answered_303_is_followed_with_a_get() {
    let (got, seen) = streamed_put(303).await;
    let requests: Vec<(&str, &str)> =
        seen.iter().map(|(m, p, _)| (m.as_str(), p.as_str())).collect();
    assert_eq!(got, 503, "{requests:?}");
    assert_eq!(requests, [("PUT", "/first"), ("GET", "/next")]);
    // The server keeps a chunked body as it came: the stream, whole.
    assert_eq!(seen[0].2, b"5\r\norder\r\n2\r\n=1\r\n0\r\n\r\n");
}
