//! An HTTP/2 server over plain TCP (prior knowledge) that answers each
//! stream from a script: refuse it, reset it, go away, or answer 200.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::Counter;
use super::tls_server::close_cleanly;

/// How long a server task waits on a client before giving the connection up.
const PATIENCE: Duration = Duration::from_secs(10);

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;

/// What the server does with one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// RST_STREAM with this reason, without reading the request.
    Reset(h2::Reason),
    /// GOAWAY(NO_ERROR) whose last stream id is below this stream, then close
    /// the connection: the server tells the client it did not process it.
    /// Only possible for the first stream of a connection.
    GoAwayBefore,
    /// Take the stream (GOAWAY's last stream id then covers it), send
    /// GOAWAY(NO_ERROR) and close without answering: the stream may have
    /// been processed.
    GoAwayAfter,
    /// `200` with the body `ok`.
    Ok,
    /// `503` with one chunk of body, then nothing: the stream stays open
    /// until the client resets it, which the server counts.
    StalledBody,
    /// `200` with one chunk of body; once the gate opens (the client has
    /// the headers), RST_STREAM(INTERNAL_ERROR): the stream is lost halfway
    /// through the answer, the connection is not.
    ResetMidBody,
}

/// A client that speaks HTTP/2 with prior knowledge and follows no
/// redirects, with reqwest's own retries left as they are by default.
pub fn h2_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder().http2_prior_knowledge()
}

/// An HTTP/2 server following `script`, one entry per stream received
/// across all connections (the last repeats). Returns its base URL, the
/// count of streams received and the count of connections accepted.
pub async fn h2_server(script: Vec<Answer>) -> (String, Counter, Counter) {
    let (url, streams, connections, _) = h2_server_counting_resets(script).await;
    (url, streams, connections)
}

/// As [`h2_server`], also counting the streams the client reset with CANCEL
/// while the server was still sending.
pub async fn h2_server_counting_resets(script: Vec<Answer>) -> (String, Counter, Counter, Counter) {
    h2_server_gated(script, Arc::default()).await
}

/// As [`h2_server_counting_resets`], with the gate that
/// [`Answer::ResetMidBody`] waits on.
pub async fn h2_server_gated(
    script: Vec<Answer>,
    gate: Arc<Notify>,
) -> (String, Counter, Counter, Counter) {
    assert!(!script.is_empty());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (streams, connections, resets) =
        (Counter::default(), Counter::default(), Counter::default());
    let (stream_count, connection_count, reset_count) =
        (streams.clone(), connections.clone(), resets.clone());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            connection_count.bump();
            let (script, streams, resets) =
                (script.clone(), stream_count.clone(), reset_count.clone());
            let gate = gate.clone();
            tokio::spawn(async move {
                let served = serve(socket, script, streams, resets, gate);
                let _ = tokio::time::timeout(PATIENCE, served).await;
            });
        }
    });
    (url, streams, connections, resets)
}

async fn serve(
    mut socket: TcpStream,
    script: Vec<Answer>,
    streams: Counter,
    resets: Counter,
    gate: Arc<Notify>,
) {
    let upcoming = |streams: &Counter| script[streams.get().min(script.len() - 1)];
    // Read up to the first HEADERS frame ourselves, then hand those bytes
    // and the rest of the socket to h2: its handshake reads only the
    // preface, so a GOAWAY sent right after it names no stream as processed
    // although the client's first stream has certainly arrived.
    let Some(seen) = read_to_first_headers(&mut socket).await else { return };
    {
        let (read, write) = socket.split();
        let io = tokio::io::join(std::io::Cursor::new(seen).chain(read), write);
        let Ok(mut connection) = h2::server::handshake(io).await else { return };
        if upcoming(&streams) == Answer::GoAwayBefore {
            streams.bump();
            connection.abrupt_shutdown(h2::Reason::NO_ERROR);
            while let Some(Ok(_)) = connection.accept().await {}
        } else {
            while let Some(Ok((request, mut respond))) = connection.accept().await {
                let answer = upcoming(&streams);
                streams.bump();
                match answer {
                    Answer::Reset(reason) => respond.send_reset(reason),
                    Answer::GoAwayBefore => {
                        panic!("GoAwayBefore only fits a connection's first stream")
                    }
                    Answer::GoAwayAfter => {
                        connection.abrupt_shutdown(h2::Reason::NO_ERROR);
                        while let Some(Ok(_)) = connection.accept().await {}
                        break;
                    }
                    // In a task of its own: the body arrives only while
                    // the connection is polled.
                    Answer::Ok => drop(tokio::spawn(answer_ok(request, respond))),
                    Answer::StalledBody => drop(tokio::spawn(stall(respond, resets.clone()))),
                    Answer::ResetMidBody => {
                        drop(tokio::spawn(reset_mid_body(respond, gate.clone())))
                    }
                }
            }
        }
    }
    close_cleanly(socket).await;
}

/// Reads the request body to its end, then answers `200 ok`.
async fn answer_ok(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let mut body = request.into_body();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let response = http::Response::builder().status(200).body(()).unwrap();
    if let Ok(mut body) = respond.send_response(response, false) {
        let _ = body.send_data(Bytes::from_static(b"ok"), true);
    }
}

/// Answers `200` and one chunk, waits for the gate to open (said after the
/// chunk: an earlier word does not count), then resets the stream.
async fn reset_mid_body(mut respond: h2::server::SendResponse<Bytes>, gate: Arc<Notify>) {
    let word = gate.notified();
    tokio::pin!(word);
    word.as_mut().enable();
    let response = http::Response::builder().status(200).body(()).unwrap();
    let Ok(mut body) = respond.send_response(response, false) else { return };
    let _ = body.send_data(Bytes::from_static(b"par"), false);
    // Bounded: a missed word resets anyway, and the test says what it saw.
    let _ = tokio::time::timeout(PATIENCE, word).await;
    body.send_reset(h2::Reason::INTERNAL_ERROR);
}

/// Answers `503` and one chunk, then waits for the client to reset the
/// stream, and counts a CANCEL.
async fn stall(mut respond: h2::server::SendResponse<Bytes>, resets: Counter) {
    let response = http::Response::builder().status(503).body(()).unwrap();
    let Ok(mut body) = respond.send_response(response, false) else { return };
    let _ = body.send_data(Bytes::from_static(b"busy."), false);
    if let Ok(h2::Reason::CANCEL) = std::future::poll_fn(|cx| body.poll_reset(cx)).await {
        resets.bump();
    }
}

/// Reads the client preface and frames up to and including the first
/// HEADERS frame's header; None if the connection ended first.
async fn read_to_first_headers(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if seen.len() >= PREFACE.len() {
            assert_eq!(&seen[..PREFACE.len()], PREFACE, "the client speaks HTTP/2");
            let mut at = PREFACE.len();
            while at + 9 <= seen.len() {
                if seen[at + 3] == HEADERS {
                    return Some(seen);
                }
                let length = u32::from_be_bytes([0, seen[at], seen[at + 1], seen[at + 2]]);
                at += 9 + length as usize;
            }
        }
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// A server that allows one stream at a time. On its first connection it
/// answers the first stream's headers, keeps that stream open, and once
/// `gate` opens closes the connection: a request the client queued behind
/// that stream is never written. Every later connection answers each stream
/// `200 ok`. Returns its base URL and the count of streams received.
pub async fn h2_one_stream_server(gate: Arc<Notify>) -> (String, Counter) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let streams = Counter::default();
    let count = streams.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((socket, _)) = listener.accept().await {
            let (streams, gate, closing) = (count.clone(), gate.clone(), first);
            first = false;
            tokio::spawn(tokio::time::timeout(PATIENCE, async move {
                let mut builder = h2::server::Builder::new();
                let Ok(mut connection) = builder.max_concurrent_streams(1).handshake(socket).await
                else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    streams.bump();
                    if !closing {
                        drop(tokio::spawn(answer_ok(request, respond)));
                        continue;
                    }
                    let head = http::Response::builder().status(200).body(()).unwrap();
                    let _open = respond.send_response(head, false);
                    // The connection is polled while the gate is shut, so
                    // the client gets the headers; then it is dropped.
                    let shut = gate.notified();
                    tokio::pin!(shut);
                    shut.as_mut().enable();
                    tokio::select! {
                        _ = shut => {}
                        _ = connection.accept() => {}
                    }
                    return;
                }
            }));
        }
    });
    (url, streams)
}
