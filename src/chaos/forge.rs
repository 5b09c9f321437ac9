//! Real transport errors, made on loopback: reqwest's error types cannot be
//! built outside reqwest, so each is what reqwest itself returns for the
//! same failure, met on purpose, then given the request's URL.
//!
//! - **Refused:** a request to a port bound on 127.0.0.1 where nothing
//!   listens. The kernel refuses the connection; reqwest returns its
//!   connect error (`is_connect()`), with the `io::Error` of kind
//!   `ConnectionRefused` in its chain. hyper's `ConnectError` in that chain
//!   names the loopback address it was made on, which its `Debug` text
//!   shows; the error's URL is the request's.
//! - **Timeout:** a request with reqwest's shortest timeout to a loopback
//!   port that listens and never answers: reqwest returns its timeout error
//!   (`is_timeout()`, not `is_connect()`). reqwest's timer fires at its
//!   next tick, about a millisecond of real time (none under
//!   `tokio::time::pause`).
//! - **Reset:** a request to a loopback listener that reads the request,
//!   then resets the connection. reqwest returns hyper's error for a
//!   connection lost while it waited for the answer (`is_request()`), with
//!   an `io::Error` of kind `ConnectionReset` in its chain.

use std::future::{Future, poll_fn};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::time::Duration;

use reqwest::{Client, Url};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket};

use super::ChaosError;

/// The client and the ports the errors are made with.
#[derive(Debug)]
pub(super) struct Forge {
    client: Client,
    /// Bound and never listening: connections to it are refused, and no
    /// other socket can take its port while it lives.
    _refusing: TcpSocket,
    refusing_at: SocketAddr,
    /// Listening, never accepting: a request to it waits for an answer
    /// that never comes.
    _silent: std::net::TcpListener,
    silent_at: SocketAddr,
}

impl Forge {
    /// A client that sends straight to loopback (no proxy, no pooled
    /// connections) and a refusing port.
    pub(super) fn new() -> Result<Self, ChaosError> {
        let client = Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|error| ChaosError::Forge(io::Error::other(error)))?;
        let refusing = TcpSocket::new_v4().map_err(ChaosError::Forge)?;
        refusing.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).map_err(ChaosError::Forge)?;
        let refusing_at = refusing.local_addr().map_err(ChaosError::Forge)?;
        let silent =
            std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ChaosError::Forge)?;
        let silent_at = silent.local_addr().map_err(ChaosError::Forge)?;
        Ok(Self { client, _refusing: refusing, refusing_at, _silent: silent, silent_at })
    }

    /// reqwest's error for a connection refused, for `url`.
    pub(super) async fn refused(&self, url: &Url) -> Result<reqwest::Error, ChaosError> {
        let sent = self.client.get(format!("http://{}/", self.refusing_at)).send().await;
        failed(sent, url, Made::Refused)
    }

    /// reqwest's error for a request that timed out, for `url`.
    pub(super) async fn timeout(&self, url: &Url) -> Result<reqwest::Error, ChaosError> {
        let request = self.client.get(format!("http://{}/", self.silent_at));
        failed(request.timeout(Duration::from_nanos(1)).send().await, url, Made::Timeout)
    }

    /// reqwest's error for a connection reset after the request was read,
    /// for `url`.
    pub(super) async fn reset(&self, url: &Url) -> Result<reqwest::Error, ChaosError> {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.map_err(ChaosError::Forge)?;
        let at = listener.local_addr().map_err(ChaosError::Forge)?;
        let sent = self.client.get(format!("http://{at}/")).send();
        let reset = async {
            // A listener that fails leaves the request to end on its own.
            let _ = reset_after_head(listener).await;
        };
        failed(alongside(sent, reset).await, url, Made::Reset)
    }
}

/// The error each maker means to meet.
#[derive(Clone, Copy, Debug)]
pub(super) enum Made {
    Refused,
    Timeout,
    Reset,
}

impl Made {
    /// Whether `error` is the one meant.
    pub(super) fn is(self, error: &reqwest::Error) -> bool {
        let (connect, timeout) = (error.is_connect(), error.is_timeout());
        match self {
            Self::Refused => connect && !timeout,
            Self::Timeout => timeout && !connect,
            Self::Reset => error.is_request() && !connect && !timeout,
        }
    }
}

/// The error of `sent`, if it is the one `made` means, with `url` for its
/// own.
pub(super) fn failed(
    sent: reqwest::Result<reqwest::Response>,
    url: &Url,
    made: Made,
) -> Result<reqwest::Error, ChaosError> {
    let unexpected = match sent {
        Err(error) if made.is(&error) => return Ok(error.with_url(url.clone())),
        Err(error) => format!("a loopback request meant to fail as {made:?} failed with {error:?}"),
        Ok(response) => {
            format!(
                "a loopback request meant to fail as {made:?} was answered {}",
                response.status()
            )
        }
    };
    Err(ChaosError::Forge(io::Error::other(unexpected)))
}

/// Takes one connection, reads what the client sent (all of the small
/// request it sends, in one read) and resets the connection.
async fn reset_after_head(listener: TcpListener) -> io::Result<()> {
    let (mut stream, _) = listener.accept().await?;
    // How much arrived does not matter: the request was sent.
    let _arrived = stream.read(&mut [0_u8; 1024]).await?;
    // A linger of zero makes the close a reset, and never blocks.
    #[allow(deprecated)]
    stream.set_linger(Some(Duration::ZERO))?;
    drop(stream);
    Ok(())
}

/// Runs `main` until it is done, with `helper` polled beside it on this
/// task until then (or until it is done first).
async fn alongside<T>(main: impl Future<Output = T>, helper: impl Future<Output = ()>) -> T {
    let (mut main, mut helper) = (pin!(main), pin!(helper));
    let mut helping = true;
    poll_fn(|cx| {
        if helping && helper.as_mut().poll(cx).is_ready() {
            helping = false;
        }
        main.as_mut().poll(cx)
    })
    .await
}
