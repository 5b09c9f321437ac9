//! A loopback server whose responses' bodies break on cue: whole, reset
//! mid-body once the client has the headers, chunked then reset when the
//! test says so, or stalled mid-body. For the tests of response buffering
//! and of what such bodies do to the budget.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::{Conn, RawServer};

pub const BODY: &str = "the whole body, every byte of it";

/// What the server does with one request.
#[derive(Clone)]
pub enum Step {
    /// 200 with [`BODY`], `Content-Length`, an `X-Kept` header; keep-alive.
    Whole,
    /// 200 announcing [`BODY`]'s length, half of it, then (once the client
    /// has the headers) a reset.
    ResetMidBody,
    /// 200, chunked: 5 bytes, then 20, then (once the test says so) a reset.
    ChunksThenReset,
    /// 200 announcing [`BODY`]'s length, half of it, then nothing: the
    /// connection held open.
    StallMidBody,
}

/// Tells the server when to reset: when the client has the headers (below
/// the retry middleware) or when the test says so.
#[derive(Clone, Default)]
pub struct Go(pub Arc<Notify>);

impl Go {
    /// Writes `bytes`, waits for the word (said after the write: a word said
    /// for an earlier answer does not count), then resets the connection.
    pub async fn write_then_reset(&self, mut conn: Conn, bytes: &[u8]) {
        let word = self.0.notified();
        tokio::pin!(word);
        word.as_mut().enable();
        let _ = conn.write(bytes).await;
        // Bounded: a missed word resets anyway, and the test says what it saw.
        let _ = tokio::time::timeout(Duration::from_secs(5), word).await;
        conn.reset();
    }

    pub fn go(&self) {
        self.0.notify_waiters();
    }
}

/// A loopback server following `script` (the last step repeats), counting
/// the requests it gets.
pub async fn server(script: Vec<Step>, go: Go) -> (String, Arc<Mutex<usize>>) {
    let requests = Arc::new(Mutex::new(0usize));
    let count = requests.clone();
    let server =
        RawServer::start(move |conn| serve(conn, script.clone(), count.clone(), go.clone())).await;
    let url = server.url("/resource?q=1");
    // Serves until the test ends.
    std::mem::forget(server);
    (url, requests)
}

/// Plays `script` on one connection.
async fn serve(mut conn: Conn, script: Vec<Step>, count: Arc<Mutex<usize>>, go: Go) {
    while conn.request().await.is_some() {
        let step = {
            let mut n = count.lock().unwrap();
            *n += 1;
            script[(*n - 1).min(script.len() - 1)].clone()
        };
        let half = &BODY[..BODY.len() / 2];
        let head = |length: usize| {
            format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nX-Kept: yes\r\n\r\n")
        };
        match step {
            Step::Whole => {
                let answer = format!("{}{BODY}", head(BODY.len()));
                if conn.write(answer).await.is_err() {
                    return;
                }
            }
            Step::ResetMidBody => {
                let answer = format!("{}{half}", head(BODY.len()));
                go.write_then_reset(conn, answer.as_bytes()).await;
                return;
            }
            Step::ChunksThenReset => {
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}\r\n14\r\n{}\r\n",
                    "a".repeat(5),
                    "b".repeat(20)
                );
                go.write_then_reset(conn, answer.as_bytes()).await;
                return;
            }
            Step::StallMidBody => {
                let _ = conn.write(format!("{}{half}", head(BODY.len()))).await;
                conn.hang().await;
                return;
            }
        }
    }
}
