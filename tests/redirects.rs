//! Redirects are followed inside `reqwest`, below every middleware: the
//! middleware sees only how the last hop ended, while the request it would
//! repeat is the original one. A request that is not safe to repeat must
//! therefore reach its first hop once, however a later hop ends; one that is
//! safe to repeat is retried as usual.
//!
//! Every cell counts how often the FIRST hop received the original request.
//! For 307 and 308 `reqwest` itself sends the body on to the later hop: that
//! is the redirect, not a retry, and is not counted.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use reqwest_middleware::{ClientWithMiddleware, RequestBuilder};
use reqwest_safe_retry::{
    FixedJitter, ManualClock, ReportSlot, RetryConfig, RetryMiddleware, StopReason,
};
use support::hops::{BOUND, Blackhole, Hop, Later, SHORT, later_hop, refusing_port};
use support::*;
use wiremock::matchers::{any, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The redirect statuses a first hop answers with.
const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

/// A client as users build it: `reqwest` follows redirects (its default).
/// Only a hop behind a name adds its resolver, with a connect timeout; no
/// proxy is taken from the environment, so every request stays on loopback.
fn following_client(resolver: Option<Arc<Blackhole>>) -> (ClientWithMiddleware, ManualClock) {
    let mut inner = reqwest::Client::builder().no_proxy();
    if let Some(resolver) = resolver {
        inner = inner.dns_resolver(resolver).connect_timeout(SHORT);
    }
    let config = RetryConfig::builder().with_initial_backoff(100 * MS).without_budget();
    let clock = ManualClock::new();
    let middleware = RetryMiddleware::new(config.build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP);
    let inner = inner.build().expect("the client builds");
    (reqwest_middleware::ClientBuilder::new(inner).with(middleware).build(), clock)
}

/// A first hop that answers every request with `status` and `Location`.
async fn first_hop(status: u16, location: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(any())
        .respond_with(ResponseTemplate::new(status).insert_header("Location", location))
        .mount(&server)
        .await;
    server
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    PostWithoutKey,
    PatchWithoutKey,
    PostWithKey,
    Get,
}

impl Kind {
    fn request(self, client: &ClientWithMiddleware, url: &str) -> RequestBuilder {
        match self {
            Kind::PostWithoutKey => client.post(url).body("item=1"),
            Kind::PatchWithoutKey => client.patch(url).body("item=1"),
            Kind::PostWithKey => {
                client.post(url).header("Idempotency-Key", "order-1").body("item=1")
            }
            Kind::Get => client.get(url),
        }
    }

    /// First-hop arrivals, report and waits every cell must show.
    fn expected(self) -> (usize, u32, StopReason, Vec<Duration>) {
        match self {
            Kind::PostWithoutKey | Kind::PatchWithoutKey => (1, 1, StopReason::NotSafe, vec![]),
            Kind::PostWithKey | Kind::Get => {
                (4, 4, StopReason::RetriesExhausted, vec![100 * MS, 200 * MS, 400 * MS])
            }
        }
    }
}

/// One cell of the matrix, its servers started and its client built.
struct Setup {
    first: u16,
    later: Later,
    hop: Hop,
    server: MockServer,
    client: ClientWithMiddleware,
    clock: ManualClock,
}

async fn set_up(first: u16, later: Later) -> Setup {
    let hop = later_hop(later).await;
    let server = first_hop(first, &hop.url).await;
    let (client, clock) = following_client(hop.resolver.clone());
    Setup { first, later, hop, server, client, clock }
}

/// One cell of the matrix, run: how often the first hop was reached, and
/// what was wrong.
struct Cell {
    first: u16,
    later: Later,
    first_hop: usize,
    problems: Vec<String>,
}

async fn run(kind: Kind, Setup { first, later, hop, server, client, clock }: Setup) -> Cell {
    let slot = ReportSlot::new();
    let url = format!("{}/orders", server.uri());
    let mut request = kind.request(&client, &url).with_extension(slot.clone());
    if later == Later::Stall {
        request = request.timeout(SHORT);
    }
    let mut problems = Vec::new();
    match tokio::time::timeout(BOUND, request.send()).await {
        Err(_) => problems.push(format!("no outcome within {BOUND:?}")),
        Ok(outcome) => problems.extend(later.check(&outcome).err()),
    }
    let first_hop = hits(&server).await;
    // Where the later hop counts arrivals, every attempt must have got
    // there: for the stall and the unresolvable name this shows the timer
    // fired at the later hop, not before it, which would count something else.
    if let Some(arrivals) = hop.arrivals.map(|a| a.get()).filter(|&a| a != first_hop) {
        problems.push(format!(
            "setup: the later hop was reached {arrivals} times, the first {first_hop}"
        ));
    }
    let (hits, attempts, stop, sleeps) = kind.expected();
    if first_hop != hits {
        problems.push(format!("first hop reached {first_hop} times, expected {hits}"));
    }
    match slot.get() {
        None => problems.push("no report in the slot".into()),
        Some(report) if (report.attempts, report.stop) != (attempts, stop) => {
            problems.push(format!(
                "stopped {:?} after {} attempts, expected {stop:?} after {attempts}",
                report.stop, report.attempts
            ))
        }
        Some(_) => {}
    }
    if clock.sleeps() != sleeps {
        problems.push(format!("waited {:?}, expected {sleeps:?}", clock.sleeps()));
    }
    Cell { first, later, first_hop, problems }
}

/// Runs every cell for `kind`, each with its own servers and client, and
/// fails with the whole matrix when any cell is wrong.
///
/// The cells run concurrently, but the stalled ones only among themselves:
/// their per-request timeout starts with the first hop, and 40 requests
/// started at once on one thread took up to 110 ms to get through their
/// first hops (debug build, 2 cores), so the timer could fire before the
/// later hop. The check on the later hop's arrivals catches that.
async fn matrix(kind: Kind) {
    let cells = REDIRECTS.iter().flat_map(|&first| Later::ALL.map(move |later| (first, later)));
    let setups = join_all(cells.map(|(first, later)| set_up(first, later))).await;
    let (stalled, others): (Vec<_>, Vec<_>) =
        setups.into_iter().partition(|setup| setup.later == Later::Stall);
    let mut cells = join_all(others.into_iter().map(|setup| run(kind, setup))).await;
    cells.extend(join_all(stalled.into_iter().map(|setup| run(kind, setup))).await);
    cells.sort_by_key(|cell| {
        let column = Later::ALL.iter().position(|&later| later == cell.later);
        (cell.first, column)
    });
    let failed: Vec<&Cell> = cells.iter().filter(|c| !c.problems.is_empty()).collect();
    if failed.is_empty() {
        return;
    }
    let mut message = format!(
        "{kind:?}: {} of {} cells failed. First-hop arrivals (expected {} everywhere; \
         * marks a failing cell):\n\n{:>6}",
        failed.len(),
        cells.len(),
        kind.expected().0,
        "",
    );
    for later in Later::ALL {
        message += &format!("{:>17}", later.to_string());
    }
    for first in REDIRECTS {
        message += &format!("\n{first:>6}");
        for cell in cells.iter().filter(|c| c.first == first) {
            let mark = if cell.problems.is_empty() { " " } else { "*" };
            message += &format!("{:>16}{mark}", cell.first_hop);
        }
    }
    message += "\n";
    for cell in failed {
        message += &format!("\n{} then {}: {}", cell.first, cell.later, cell.problems.join("; "));
    }
    panic!("{message}");
}

#[tokio::test]
async fn post_without_key_reaches_its_first_hop_once_however_the_redirect_ends() {
    matrix(Kind::PostWithoutKey).await;
}

#[tokio::test]
async fn patch_without_key_reaches_its_first_hop_once_however_the_redirect_ends() {
    matrix(Kind::PatchWithoutKey).await;
}

#[tokio::test]
async fn post_with_idempotency_key_is_retried_when_the_redirect_ends_retryably() {
    matrix(Kind::PostWithKey).await;
}

#[tokio::test]
async fn get_is_retried_when_the_redirect_ends_retryably() {
    matrix(Kind::Get).await;
}

/// `POST /orders` creates the order and answers 303; the order page then
/// answers 429. A 429 alone may be retried for any method, but here the
/// retry would create the order again.
#[tokio::test]
async fn post_whose_303_meets_a_429_is_sent_once() {
    let later = MockServer::start().await;
    script_statuses(&later, "/orders/1", &[429]).await;
    let orders = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/orders"))
        .respond_with(
            ResponseTemplate::new(303)
                .insert_header("Location", format!("{}/orders/1", later.uri()).as_str()),
        )
        .mount(&orders)
        .await;
    let (client, clock) = following_client(None);
    let slot = ReportSlot::new();
    let send = client
        .post(format!("{}/orders", orders.uri()))
        .body("item=1")
        .with_extension(slot.clone())
        .send();
    let response = tokio::time::timeout(BOUND, send).await.expect("the request ends").unwrap();
    assert_eq!(response.status(), 429, "the client followed the 303");
    assert_eq!(hits(&orders).await, 1, "the order was created once");
    assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe);
    assert!(clock.sleeps().is_empty());
}

/// `POST /orders` creates the order and answers 303 to a host that refuses
/// the connection. A refused connection alone may be retried for any method
/// (the server never saw that request), but the order was already created.
#[tokio::test]
async fn post_whose_303_meets_a_refused_connection_is_sent_once() {
    let (refused, _port) = refusing_port();
    let orders = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/orders"))
        .respond_with(
            ResponseTemplate::new(303).insert_header("Location", format!("{refused}/orders/1")),
        )
        .mount(&orders)
        .await;
    let (client, clock) = following_client(None);
    let slot = ReportSlot::new();
    let send = client
        .post(format!("{}/orders", orders.uri()))
        .body("item=1")
        .with_extension(slot.clone())
        .send();
    let error = tokio::time::timeout(BOUND, send).await.expect("the request ends").unwrap_err();
    assert!(error.is_connect(), "the redirected request was refused: {error:?}");
    assert_eq!(hits(&orders).await, 1, "the order was created once");
    assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe);
    assert!(clock.sleeps().is_empty());
}
