//! TLS on loopback: servers that break the handshake off, or complete it with
//! the self-signed `localhost` certificate in `tests/all/fixtures`, and clients
//! that do or do not trust that certificate.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Counter, OK_CLOSE};

/// Valid until 2126 for `localhost` and `127.0.0.1`; not a CA.
pub const CERT_PEM: &[u8] = include_bytes!("../fixtures/localhost.crt.pem");
pub const KEY_PEM: &[u8] = include_bytes!("../fixtures/localhost.key.pem");

/// How long a server task waits on a client before giving the connection up.
const PATIENCE: Duration = Duration::from_secs(10);

/// reqwest's rustls backend on its built-in provider: nothing process-wide is
/// installed, so tests sharing the process build their clients the same way.
pub fn rustls_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_rustls()
}

/// A client on reqwest's rustls backend that trusts the fixture certificate
/// (on top of the system's roots) and does not follow redirects.
pub fn trusting_client() -> reqwest::Client {
    trusting_builder().build().expect("a rustls client builds")
}

/// The builder of [`trusting_client`].
pub fn trusting_builder() -> reqwest::ClientBuilder {
    let cert = reqwest::Certificate::from_pem(CERT_PEM).expect("the fixture certificate parses");
    rustls_client().add_root_certificate(cert)
}

/// A client on reqwest's rustls backend that trusts only the system's roots,
/// so the fixture certificate is rejected.
pub fn untrusting_client() -> reqwest::Client {
    rustls_client().build().expect("a rustls client builds")
}

/// What the server does with one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// Read the ClientHello, then close cleanly: the client reads EOF.
    Eof,
    /// Read the ClientHello, then reset the connection (SO_LINGER 0).
    Reset,
    /// Complete the handshake, read one request, answer `200 ok` and close.
    Complete,
}

/// A TLS server following `script`, one entry per accepted connection (the
/// last repeats). Returns its base URL (`https://127.0.0.1:port`), the count
/// of connections accepted and the count of requests answered.
pub async fn tls_server(script: Vec<Handshake>) -> (String, Counter, Counter) {
    assert!(!script.is_empty());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config()));
    let (connections, answered) = (Counter::default(), Counter::default());
    let (count, answers) = (connections.clone(), answered.clone());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let behaviour = script[count.get().min(script.len() - 1)];
            count.bump();
            let (acceptor, answers) = (acceptor.clone(), answers.clone());
            tokio::spawn(async move {
                let _ = tokio::time::timeout(PATIENCE, serve(socket, behaviour, acceptor, answers))
                    .await;
            });
        }
    });
    (url, connections, answered)
}

async fn serve(
    mut socket: TcpStream,
    behaviour: Handshake,
    acceptor: tokio_rustls::TlsAcceptor,
    answered: Counter,
) {
    match behaviour {
        Handshake::Eof => {
            if read_client_hello(&mut socket).await {
                close_cleanly(socket).await;
            }
        }
        Handshake::Reset => {
            if read_client_hello(&mut socket).await {
                socket.set_zero_linger().expect("SO_LINGER can be set");
                drop(socket);
            }
        }
        Handshake::Complete => {
            // A client that rejects the certificate aborts the handshake here.
            let Ok(mut tls) = acceptor.accept(socket).await else { return };
            if read_http_request(&mut tls).await {
                answered.bump();
                let _ = tls.write_all(OK_CLOSE.as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        }
    }
}

/// A TLS server that answers every request with `status` and a `Location`
/// of `location`, closing each connection after it. Returns its base URL.
pub async fn tls_redirecting(status: u16, location: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config()));
    let answer = format!(
        "HTTP/1.1 {status} X\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (acceptor, answer) = (acceptor.clone(), answer.clone());
            tokio::spawn(async move {
                let serve = async {
                    let Ok(mut tls) = acceptor.accept(socket).await else { return };
                    if read_http_request(&mut tls).await {
                        let _ = tls.write_all(answer.as_bytes()).await;
                        let _ = tls.shutdown().await;
                    }
                };
                let _ = tokio::time::timeout(PATIENCE, serve).await;
            });
        }
    });
    url
}

fn server_config() -> rustls::ServerConfig {
    let certs = CertificateDer::pem_slice_iter(CERT_PEM)
        .collect::<Result<Vec<_>, _>>()
        .expect("the fixture certificate parses");
    let key = PrivateKeyDer::from_pem_slice(KEY_PEM).expect("the fixture key parses");
    rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("aws-lc-rs supports the default versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("the fixture key matches its certificate")
}

/// Reads one whole TLS record, which must be a handshake record (the
/// ClientHello); false if the connection ended first.
async fn read_client_hello(socket: &mut TcpStream) -> bool {
    let mut header = [0u8; 5];
    if socket.read_exact(&mut header).await.is_err() {
        return false;
    }
    assert_eq!(header[0], 0x16, "the client's first record is a handshake record");
    let mut body = vec![0u8; u16::from_be_bytes([header[3], header[4]]) as usize];
    socket.read_exact(&mut body).await.is_ok()
}

/// Sends FIN and waits for the client's, so nothing unread makes the kernel
/// answer with a reset instead.
pub async fn close_cleanly(mut socket: TcpStream) {
    let _ = socket.shutdown().await;
    let mut sink = [0u8; 1024];
    while let Ok(1..) = socket.read(&mut sink).await {}
}

/// Reads one HTTP/1.1 request head and its `Content-Length` body; false when
/// the connection ended first.
async fn read_http_request(stream: &mut (impl AsyncRead + AsyncWrite + Unpin)) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return true;
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}
