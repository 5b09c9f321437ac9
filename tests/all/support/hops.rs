//! The far end of a redirect: servers and names that make the request a
//! client sends after following a redirect end in one chosen way.

use std::fmt;
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpSocket;
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::Counter;
use super::raw::RawServer;

/// Both the per-request timeout that ends a stalled request and the connect
/// timeout that ends an unanswered name lookup.
pub const SHORT: Duration = Duration::from_millis(100);

/// The host the [`Blackhole`] resolver never answers for.
pub const BLACKHOLE_HOST: &str = "blackhole.test";

/// How the request sent after the redirect ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Later {
    /// Nothing listens: the connection is refused.
    Refused,
    /// The host name never resolves; the client's connect timeout ends it.
    ConnectTimeout,
    /// The server answers with this status.
    Status(u16),
    /// The server reads the request, then resets the connection.
    Reset,
    /// The server reads the request and never answers; each attempt's
    /// timeout ends it.
    Stall,
}

impl Later {
    /// Every later-hop outcome the redirect tests cover.
    pub const ALL: [Later; 8] = [
        Later::Refused,
        Later::ConnectTimeout,
        Later::Status(429),
        Later::Status(502),
        Later::Status(503),
        Later::Status(504),
        Later::Reset,
        Later::Stall,
    ];

    /// Checks that the caller's outcome is the one this hop was set up to
    /// give, so a cell cannot pass by testing something else.
    pub fn check(
        self,
        outcome: &reqwest_middleware::Result<reqwest::Response>,
    ) -> Result<(), String> {
        let error = match (self, outcome) {
            (Later::Status(code), Ok(response)) if response.status().as_u16() == code => {
                return Ok(());
            }
            (_, Ok(response)) => return Err(format!("the caller got a {}", response.status())),
            (Later::Status(_), Err(error)) => return Err(format!("the caller got `{error}`")),
            (_, Err(reqwest_middleware::Error::Reqwest(error))) => error,
            (_, Err(error)) => return Err(format!("the caller got a middleware error `{error}`")),
        };
        let (connect, timeout) = (error.is_connect(), error.is_timeout());
        let expected = match self {
            Later::Refused => connect && !timeout && caused_by(error, ErrorKind::ConnectionRefused),
            Later::ConnectTimeout => connect && timeout,
            Later::Reset => !connect && !timeout && caused_by(error, ErrorKind::ConnectionReset),
            Later::Stall => !connect && timeout,
            Later::Status(_) => unreachable!("handled above"),
        };
        if expected {
            Ok(())
        } else {
            Err(format!(
                "the caller got `{error:?}` (connect: {connect}, timeout: {timeout}), \
                 not a {self}"
            ))
        }
    }
}

/// Whether an I/O error of `kind` is among the causes of `error`.
fn caused_by(error: &(dyn std::error::Error + 'static), kind: ErrorKind) -> bool {
    std::iter::successors(Some(error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == kind)
}

impl fmt::Display for Later {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Later::Refused => f.write_str("refused"),
            Later::ConnectTimeout => f.write_str("connect timeout"),
            Later::Status(code) => write!(f, "{code}"),
            Later::Reset => f.write_str("reset"),
            Later::Stall => f.write_str("timeout"),
        }
    }
}

/// A running later hop: where to redirect to, and what keeps it alive.
pub struct Hop {
    /// The URL to put in `Location`.
    pub url: String,
    /// Requests read by the hop (look-ups, for the name that never
    /// resolves), where counting them is easy: for a hop that a client-side
    /// timer ends, this tells whether the timer fired there or earlier.
    pub arrivals: Option<Counter>,
    /// The resolver a client needs to reach this hop.
    pub resolver: Option<Arc<Blackhole>>,
    _server: Option<MockServer>,
    _port: Option<TcpSocket>,
    _raw: Option<RawServer>,
}

impl Hop {
    fn at(url: String) -> Self {
        Self { url, arrivals: None, resolver: None, _server: None, _port: None, _raw: None }
    }

    fn serving(self, server: RawServer) -> Self {
        Self { _raw: Some(server), ..self }
    }
}

/// A loopback port that refuses connections for as long as the socket
/// lives: bound, never listening. Unlike a dropped listener's port, no
/// server started meanwhile (by a concurrent test) can be given it.
pub fn refusing_port() -> (String, TcpSocket) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    (format!("http://{}", socket.local_addr().unwrap()), socket)
}

/// Starts a later hop that ends the way `later` says.
pub async fn later_hop(later: Later) -> Hop {
    match later {
        Later::Refused => {
            let (url, socket) = refusing_port();
            Hop { _port: Some(socket), ..Hop::at(format!("{url}/later")) }
        }
        Later::ConnectTimeout => {
            let blackhole = Blackhole::default();
            Hop {
                arrivals: Some(blackhole.lookups.clone()),
                resolver: Some(Arc::new(blackhole)),
                ..Hop::at(format!("http://{BLACKHOLE_HOST}:80/later"))
            }
        }
        Later::Status(code) => {
            let server = MockServer::start().await;
            Mock::given(any()).respond_with(ResponseTemplate::new(code)).mount(&server).await;
            let url = format!("{}/later", server.uri());
            Hop { _server: Some(server), ..Hop::at(url) }
        }
        Later::Reset => serve(Then::Reset).await,
        Later::Stall => serve(Then::Stall).await,
    }
}

/// What a raw later hop does once it has read the request.
#[derive(Debug, Clone, Copy)]
enum Then {
    /// Close with `SO_LINGER` 0: the peer gets a RST.
    Reset,
    /// Keep the connection open, silent, until the client goes away.
    Stall,
}

/// Accepts connections on loopback, reads a request from each, counts it
/// and does `then`.
async fn serve(then: Then) -> Hop {
    let arrivals = Counter::default();
    let count = arrivals.clone();
    let server = RawServer::start(move |mut conn| {
        let count = count.clone();
        async move {
            if conn.request().await.is_none() {
                return;
            }
            count.bump();
            match then {
                Then::Reset => conn.reset(),
                Then::Stall => conn.hang().await,
            }
        }
    })
    .await;
    Hop { arrivals: Some(arrivals), ..Hop::at(server.url("/later")).serving(server) }
}

/// A resolver under which [`BLACKHOLE_HOST`] never resolves, like a name
/// server that does not answer, and any other name fails at once (the tests
/// use IP addresses, which are never looked up). Counts the look-ups.
#[derive(Default)]
pub struct Blackhole {
    lookups: Counter,
}

impl reqwest::dns::Resolve for Blackhole {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        if name.as_str() == BLACKHOLE_HOST {
            self.lookups.bump();
            Box::pin(std::future::pending())
        } else {
            let message = format!("the tests look up no name but {BLACKHOLE_HOST}, not {name:?}");
            Box::pin(async move { Err(message.into()) })
        }
    }
}

/// Long enough for any cell on a loaded machine; a cell that takes longer
/// is stuck, and fails saying so.
pub const BOUND: Duration = Duration::from_secs(20);
