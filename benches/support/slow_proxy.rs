//! A TCP proxy on loopback before a server (Redis, for the fleet): requests
//! go through at once, and each chunk of a reply reaches the client a
//! delay after it came, in order (a slow server, or a slow network to it),
//! or, while the proxy holds them, only once it lets them go. The fleet's
//! latency benchmark delays replies; the fleet's tests hold them, so that
//! no test waits on a timer of its own.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, watch};

/// A running proxy; it stops with the runtime it was started on.
pub struct SlowProxy {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    delay_ms: AtomicU64,
    /// Whether replies may go (false while held).
    open: watch::Sender<bool>,
    /// Chunks that came while the proxy held them, and a wake for each.
    held: AtomicUsize,
    came: Notify,
}

impl SlowProxy {
    /// A proxy to the server at `127.0.0.1:target`, delaying each reply by
    /// `delay`.
    pub async fn start(target: u16, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            delay_ms: AtomicU64::new(delay.as_millis() as u64),
            open: watch::Sender::new(true),
            held: AtomicUsize::new(0),
            came: Notify::new(),
        });
        let relayed = shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else { continue };
                tokio::spawn(relay(client, server, relayed.clone()));
            }
        });
        Self { port, shared }
    }

    /// The port to connect to instead of the server's.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Holds every reply from now on, until [`release`](Self::release).
    pub fn hold(&self) {
        self.shared.open.send_replace(false);
    }

    /// Lets the held replies go, and the next ones.
    pub fn release(&self) {
        self.shared.open.send_replace(true);
    }

    /// Waits until a reply has come while held.
    pub async fn reply_held(&self) {
        loop {
            let came = self.shared.came.notified();
            if self.shared.held.load(Ordering::Acquire) > 0 {
                return;
            }
            came.await;
        }
    }
}

/// Client to server at once; server to client each chunk a delay after
/// it came, and not while held.
async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let (chunks, mut queued) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = shared.clone();
    tokio::spawn(async move {
        let mut open = writer.open.subscribe();
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if open.wait_for(|open| *open).await.is_err()
                || client_write.write_all(&chunk).await.is_err()
            {
                return;
            }
        }
    });
    let mut buffer = vec![0; 16 * 1024];
    while let Ok(n @ 1..) = server_read.read(&mut buffer).await {
        if !*shared.open.borrow() {
            shared.held.fetch_add(1, Ordering::AcqRel);
            shared.came.notify_waiters();
        }
        let delay = Duration::from_millis(shared.delay_ms.load(Ordering::Relaxed));
        if chunks.send((tokio::time::Instant::now() + delay, buffer[..n].to_vec())).is_err() {
            return;
        }
    }
}
