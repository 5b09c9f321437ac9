//! A TCP proxy on loopback that holds each reply from the server it stands
//! before for a delay: a slow Redis, or a slow network to it. Requests go
//! through at once; each chunk the server sends reaches the client `delay`
//! after it came, in order. Shared by the fleet's tests and its latency
//! benchmark.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A running proxy; it stops with the runtime it was started on.
pub struct DelayProxy {
    port: u16,
    delay_ms: Arc<AtomicU64>,
}

impl DelayProxy {
    /// A proxy to the server at `127.0.0.1:target`, holding each reply
    /// for `delay`.
    pub async fn start(target: u16, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let held = delay_ms.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else { continue };
                tokio::spawn(relay(client, server, held.clone()));
            }
        });
        Self { port, delay_ms }
    }

    /// The port to connect to instead of the server's.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Holds each reply from now on for `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(delay.as_millis() as u64, Ordering::Relaxed);
    }
}

/// Client to server at once; server to client each chunk `delay` after it
/// came.
async fn relay(client: TcpStream, server: TcpStream, delay_ms: Arc<AtomicU64>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let (chunks, mut held) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((due, chunk)) = held.recv().await {
            tokio::time::sleep_until(due).await;
            if client_write.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buffer = vec![0; 16 * 1024];
    while let Ok(n @ 1..) = server_read.read(&mut buffer).await {
        let delay = Duration::from_millis(delay_ms.load(Ordering::Relaxed));
        if chunks.send((tokio::time::Instant::now() + delay, buffer[..n].to_vec())).is_err() {
            return;
        }
    }
}
