//! The stacks compared by the benchmarks, the in-process server they
//! call when no network is wanted, and a hyper server on loopback when it is.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Extensions;
use http_body_util::{BodyExt, Full};
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_safe_retry::Backoff;
use reqwest_safe_retry::{RetryAfter, RetryConfig, RetryConfigBuilder, RetryMiddleware};

/// Which retry layer sits in the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    None,
    Peer,
    Ours,
    /// Ours with the retry budget off, to show what the budget costs.
    OursNoBudget,
    /// Ours with no books kept per host (no budget, no throttle, no shared
    /// pause), to show what the call's path costs without them.
    OursNoBooks,
}

impl Stack {
    pub const ALL: [Stack; 3] = [Stack::None, Stack::Peer, Stack::Ours];

    pub fn name(self) -> &'static str {
        match self {
            Stack::None => "no retry",
            Stack::Peer => "reqwest-retry",
            Stack::Ours => "reqwest-safe-retry",
            Stack::OursNoBudget => "reqwest-safe-retry, no budget",
            Stack::OursNoBooks => "reqwest-safe-retry, no books",
        }
    }

    /// The stack over a client built from `client`, with zero-length waits,
    /// then `last` if given. Ours is set up as the quick start shows: the
    /// client built by the middleware.
    pub fn build(
        self,
        client: reqwest::ClientBuilder,
        last: Option<Scripted>,
    ) -> ClientWithMiddleware {
        let builder = match self {
            Stack::None => ClientBuilder::new(client.build().expect("a client")),
            Stack::Peer => ClientBuilder::new(client.build().expect("a client")).with(
                RetryTransientMiddleware::new_with_policy(
                    ExponentialBackoff::builder()
                        .retry_bounds(Duration::ZERO, Duration::ZERO)
                        .build_with_max_retries(3),
                ),
            ),
            Stack::Ours | Stack::OursNoBudget => {
                ours(self == Stack::Ours).client(client).expect("a client")
            }
            Stack::OursNoBooks => no_books().client(client).expect("a client"),
        };
        match last {
            Some(last) => builder.with(last).build(),
            None => builder.build(),
        }
    }
}

/// Ours, the default with zero-length waits, and with its budget or none.
pub fn ours(budget: bool) -> RetryMiddleware {
    let mut config = zero_waits();
    if !budget {
        config = config.with_budget(None);
    }
    RetryMiddleware::new(config.build().expect("a valid configuration"))
}

/// Ours with zero-length waits and no books per host: no budget, no
/// throttle, no pause shared by a host's calls.
fn no_books() -> RetryMiddleware {
    let config = zero_waits()
        .with_budget(None)
        .with_throttling(false)
        .with_retry_after(RetryAfter::default().with_pause(false));
    RetryMiddleware::new(config.build().expect("a valid configuration"))
}

/// The default settings with zero-length waits.
fn zero_waits() -> RetryConfigBuilder {
    RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(Duration::ZERO).with_max(Duration::ZERO))
}

#[cfg(feature = "fleet")]
pub mod at_once {
    use std::future::ready;
    use std::time::Duration;

    use reqwest_safe_retry::fleet::{
        FleetHost, FleetStore, MemberTally, PauseLeft, ProbeClaim, StoreFuture, Tally,
    };

    /// A fleet's store that answers every command at once: no host paused,
    /// every probe this process's, each tally the first.
    pub struct AtOnce;

    impl FleetStore for AtOnce {
        fn extend_pauses<'a>(
            &'a self,
            _: &'a str,
            _: &'a [(FleetHost, Duration)],
        ) -> StoreFuture<'a, ()> {
            Box::pin(ready(Ok(())))
        }

        fn pauses_left<'a>(&'a self, hosts: &'a [FleetHost]) -> StoreFuture<'a, Vec<PauseLeft>> {
            Box::pin(ready(Ok(vec![PauseLeft::None; hosts.len()])))
        }

        fn claim_probes<'a>(
            &'a self,
            _: &'a str,
            claims: &'a [(FleetHost, Duration)],
        ) -> StoreFuture<'a, Vec<ProbeClaim>> {
            Box::pin(ready(Ok(vec![ProbeClaim::Won; claims.len()])))
        }

        fn share_tallies<'a>(
            &'a self,
            member: &'a str,
            tallies: &'a [(FleetHost, Tally)],
        ) -> StoreFuture<'a, Vec<Option<Vec<MemberTally>>>> {
            let own =
                |tally: &Tally| vec![MemberTally { member: member.to_owned(), tally: *tally }];
            Box::pin(ready(Ok(tallies.iter().map(|(_, tally)| Some(own(tally))).collect())))
        }
    }
}

/// The last middleware: answers at once without a network, cycling through
/// `statuses` call by call.
pub struct Scripted {
    statuses: &'static [u16],
    calls: AtomicU64,
}

impl Scripted {
    pub fn new(statuses: &'static [u16]) -> Self {
        Self { statuses, calls: AtomicU64::new(0) }
    }
}

#[async_trait::async_trait]
impl Middleware for Scripted {
    async fn handle(
        &self,
        _: Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) as usize;
        let status = self.statuses[n % self.statuses.len()];
        Ok(http::Response::builder().status(status).body(Bytes::new()).expect("valid").into())
    }
}

/// A hyper server on loopback that reads each request body to the end (and
/// drops it) and answers `hello` with the next of `statuses`, in a cycle.
pub async fn loopback_server(statuses: &'static [u16]) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    let served = std::sync::Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let served = served.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let n = served.fetch_add(1, Ordering::Relaxed) as usize;
                        async move {
                            let mut body = request.into_body();
                            while let Some(frame) = body.frame().await {
                                if frame.is_err() {
                                    break;
                                }
                            }
                            let status = http::StatusCode::from_u16(statuses[n % statuses.len()])
                                .expect("valid statuses");
                            let mut response =
                                hyper::Response::new(Full::new(Bytes::from_static(b"hello")));
                            *response.status_mut() = status;
                            Ok::<_, Infallible>(response)
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    addr
}
