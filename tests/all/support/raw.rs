//! A raw HTTP/1 test server on loopback, for what a well-behaved server
//! cannot play: any bytes, a close or a reset at any point, a body that
//! trickles or stalls, an answer held back.
//!
//! [`RawServer::start`] takes a handler run once per accepted connection;
//! the handler reads requests with [`Conn::request`] and answers with
//! [`Conn::write`], [`Conn::hang`], [`Conn::reset`] or by returning (which closes the connection). The server counts the
//! connections it accepted and the requests it read, and stops accepting
//! when dropped. [`RawServer::on`] serves a listener the caller bound, on
//! another address than `127.0.0.1` or from synchronous code.
//!
//! A failed accept (out of file descriptors, most likely) is counted; the
//! server started with [`RawServer::start`] then stops accepting, and one
//! given to [`RawServer::on`] waits for its `after_error` before accepting
//! again. The server keeps no time of its own: a pace is its handler's. A request head, or a line of a
//! chunked body's framing, longer than [`MAX_HEAD`] is refused:
//! [`Conn::request`] gives `None`.
//!
//! Self-contained (tokio and std only), so that another crate can use it
//! with `#[path = "../tests/all/support/raw.rs"] mod raw;`.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The longest request head, or line of a chunked body's framing, that
/// [`Conn::request`] reads.
pub const MAX_HEAD: usize = 64 * 1024;

/// Room made in a connection's buffer before each read, at least.
const READ: usize = 1024;

/// A loopback server running a handler per connection.
#[derive(Debug)]
pub struct RawServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    accept_errors: Arc<AtomicUsize>,
    accepting: JoinHandle<()>,
}

impl RawServer {
    /// Listens on `127.0.0.1` and runs `handler` on every connection it
    /// accepts, each in a task of its own.
    pub async fn start<H, F>(handler: H) -> Self
    where
        H: Fn(Conn) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        // A test's server stops accepting on a failed accept.
        let stop = std::future::pending::<()>;
        Self::serve(listener, handler, stop).expect("a bound address")
    }

    /// Runs `handler` on every connection `listener` accepts, as
    /// [`RawServer::start`] does, and after a failed accept waits for
    /// `after_error` before accepting again; called in a tokio runtime.
    pub fn on<H, F, E, W>(
        listener: std::net::TcpListener,
        handler: H,
        after_error: E,
    ) -> io::Result<Self>
    where
        H: Fn(Conn) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
        E: Fn() -> W + Send + 'static,
        W: Future<Output = ()> + Send,
    {
        listener.set_nonblocking(true)?;
        Self::serve(TcpListener::from_std(listener)?, handler, after_error)
    }

    fn serve<H, F, E, W>(listener: TcpListener, handler: H, after_error: E) -> io::Result<Self>
    where
        H: Fn(Conn) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
        E: Fn() -> W + Send + 'static,
        W: Future<Output = ()> + Send,
    {
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let accept_errors = Arc::new(AtomicUsize::new(0));
        let (accepted, read, failed) =
            (connections.clone(), requests.clone(), accept_errors.clone());
        let accepting = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let index = accepted.fetch_add(1, Ordering::SeqCst);
                        let requests = read.clone();
                        let conn = Conn { stream, buffer: Vec::new(), index, requests };
                        tokio::spawn(handler(conn));
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        after_error().await;
                    }
                }
            }
        });
        Ok(Self { addr, connections, requests, accept_errors, accepting })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:port` followed by `path` (`""`, or starting with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests read so far, over all connections.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Accepts that failed so far.
    pub fn accept_errors(&self) -> usize {
        self.accept_errors.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// One request as read: its head and its body (chunked bodies decoded).
#[derive(Debug, Clone)]
pub struct Request {
    /// Its number among the requests the server read, from 0.
    pub index: usize,
    /// The request line's method, as sent.
    pub method: String,
    /// The request line's target, as sent.
    pub path: String,
    /// The header lines, as sent, without the request line.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Bytes the request took on the wire: head, framing and body.
    pub wire_len: usize,
}

impl Request {
    /// The first value of the header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// One accepted connection.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    buffer: Vec<u8>,
    index: usize,
    requests: Arc<AtomicUsize>,
}

impl Conn {
    /// Its number among the connections the server accepted, from 0.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Reads the next request, its body by `Content-Length` or chunked;
    /// `None` when the client closed the connection first, or sent a head,
    /// or a line of a chunked body's framing, longer than [`MAX_HEAD`].
    pub async fn request(&mut self) -> Option<Request> {
        let end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end;
            }
            if self.buffer.len() > MAX_HEAD {
                return None;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buffer[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut line = lines.next().unwrap_or_default().split(' ');
        let method = line.next().unwrap_or_default().to_owned();
        let path = line.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
            .collect();
        let value = |name: &str| {
            headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
        };
        let mut at = end + 4;
        let chunked = value("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let mut body = Vec::new();
        if chunked {
            loop {
                let line_end = loop {
                    if let Some(n) = find(&self.buffer[at..], b"\r\n") {
                        break at + n;
                    }
                    if self.buffer.len() > at + MAX_HEAD {
                        return None;
                    }
                    self.fill().await?;
                };
                let size_line = String::from_utf8_lossy(&self.buffer[at..line_end]).into_owned();
                let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
                at = line_end + 2;
                if size == 0 {
                    // Trailers, if any, end with an empty line.
                    loop {
                        if let Some(n) = find(&self.buffer[at..], b"\r\n") {
                            let empty = n == 0;
                            at += n + 2;
                            if empty {
                                break;
                            }
                        } else if self.buffer.len() > at + MAX_HEAD {
                            return None;
                        } else {
                            self.fill().await?;
                        }
                    }
                    break;
                }
                while self.buffer.len() < at + size + 2 {
                    self.fill().await?;
                }
                body.extend_from_slice(&self.buffer[at..at + size]);
                at += size + 2;
            }
        } else {
            let length = value("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            while self.buffer.len() < at + length {
                self.fill().await?;
            }
            body.extend_from_slice(&self.buffer[at..at + length]);
            at += length;
        }
        self.buffer.drain(..at);
        let index = self.requests.fetch_add(1, Ordering::SeqCst);
        Some(Request { index, method, path, headers, body, wire_len: at })
    }

    /// Waits until the client has sent at least one byte more than was
    /// read; `false` if it closed the connection instead.
    pub async fn arrived(&mut self) -> bool {
        !self.buffer.is_empty() || self.fill().await.is_some()
    }

    /// Writes `bytes`; an error means the client went away.
    pub async fn write(&mut self, bytes: impl AsRef<[u8]>) -> io::Result<()> {
        self.stream.write_all(bytes.as_ref()).await
    }

    /// Holds the connection open, sending nothing, until the client closes
    /// it. What the client sends meanwhile is kept for [`Conn::request`].
    pub async fn hang(&mut self) {
        while self.fill().await.is_some() {}
    }

    /// Resets the connection (`SO_LINGER` 0): the client gets an RST.
    pub fn reset(self) {
        self.stream.set_zero_linger().expect("SO_LINGER can be set");
    }

    /// Closes the connection after what was written (a FIN).
    pub async fn close(mut self) {
        let _ = self.stream.shutdown().await;
    }

    /// Reads what the client sent into the buffer; `None` at its end.
    /// Straight into the buffer's spare room: no read buffer in the
    /// connection's task, which stays small with thousands of them alive.
    async fn fill(&mut self) -> Option<()> {
        self.buffer.reserve(READ);
        match self.stream.read_buf(&mut self.buffer).await {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(()),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
