//! Redirects: a request whose redirect ends retryably is sent again whole
//! when it is safe to repeat and reaches its first hop once when it is not,
//! through every kind of client.

mod chains;
mod credentials;
mod every_client;

use crate::support;
use futures_util::future::join_all;
use reqwest_middleware::{ClientWithMiddleware, RequestBuilder};
use reqwest_safe_retry::Backoff;
use reqwest_safe_retry::{
    RetryConfig, RetryMiddleware, clock::ManualClock, jitter::FixedJitter, report::ReportSlot,
    report::RetryReport, report::StopReason,
};
use std::sync::Arc;
use std::time::Duration;
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
    client_for(Client::Following, resolver, None)
}

/// The two clients of the matrix: reqwest following redirects below a
/// middleware put on it by hand, or the client the middleware builds, whose
/// redirects it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Following,
    Handing,
}

fn client_for(
    kind: Client,
    resolver: Option<Arc<Blackhole>>,
    attempt_timeout: Option<Duration>,
) -> (ClientWithMiddleware, ManualClock) {
    let mut inner = reqwest::Client::builder().no_proxy();
    if let Some(resolver) = resolver {
        inner = inner.dns_resolver(resolver).connect_timeout(SHORT);
    }
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(100 * MS))
        .with_attempt_timeout(attempt_timeout)
        .with_budget(None);
    let clock = ManualClock::new();
    let middleware = RetryMiddleware::new(config.build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP);
    let client = match kind {
        Client::Handing => middleware.client(inner).expect("the client builds").build(),
        Client::Following => {
            reqwest_middleware::ClientBuilder::new(inner.build().expect("the client builds"))
                .with(middleware)
                .build()
        }
    };
    (client, clock)
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

    /// First-hop arrivals, report and waits the cell must show, with the
    /// client that follows redirects below the middleware, unseen by it:
    /// every later hop is on another origin, and an answer there, named by
    /// its URL, takes a key's safety away, whatever the redirect. An error
    /// there is named by the request's own URL (reqwest's way), so the
    /// middleware cannot tell it from one at the first hop.
    fn expected(self, later: Later) -> (usize, u32, StopReason, Vec<Duration>) {
        match (self, later) {
            (Kind::PostWithoutKey | Kind::PatchWithoutKey, _)
            | (Kind::PostWithKey, Later::Status(_)) => (1, 1, StopReason::NotSafe, vec![]),
            (Kind::PostWithKey | Kind::Get, _) => Self::retried(),
        }
    }

    /// Every retry made, at the waits of the top of the jitter.
    fn retried() -> (usize, u32, StopReason, Vec<Duration>) {
        (4, 4, StopReason::RetriesExhausted, vec![100 * MS, 200 * MS, 400 * MS])
    }

    /// The same through the client the middleware builds, which knows each
    /// redirect: a 307 or 308 takes a keyed POST, method and body, to the
    /// other origin, where its key means nothing, and it is not retried;
    /// what a redirect turned into a GET is, the POST repeated only where
    /// its key was set.
    fn expected_handing(self, first: u16, later: Later) -> (usize, u32, StopReason, Vec<Duration>) {
        match (self, first) {
            (Kind::PostWithKey, 307 | 308) => (1, 1, StopReason::NotSafe, vec![]),
            (Kind::PostWithKey, _) => Self::retried(),
            _ => self.expected(later),
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

async fn set_up(client: Client, first: u16, later: Later) -> Setup {
    let hop = later_hop(later).await;
    let server = first_hop(first, &hop.url).await;
    // A stalled hop is cut by each attempt's timeout.
    let stall = (later == Later::Stall).then_some(SHORT);
    let (client, clock) = client_for(client, hop.resolver.clone(), stall);
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

async fn run(
    kind: Kind,
    handing: bool,
    Setup { first, later, hop, server, client, clock }: Setup,
) -> Cell {
    let slot = ReportSlot::new();
    let url = format!("{}/orders", server.uri());
    let request = kind.request(&client, &url).with_extension(slot.clone());
    let mut problems = Vec::new();
    match tokio::time::timeout(BOUND, request.send()).await {
        Err(_) => problems.push(format!("no outcome within {BOUND:?}")),
        Ok(outcome) => problems.extend(later.check(&outcome).err()),
    }
    let first_hop = hits(&server).await;
    let (hits, attempts, stop, sleeps) =
        if handing { kind.expected_handing(first, later) } else { kind.expected(later) };
    // Where the later hop counts arrivals, every attempt must have got
    // there: for the stall and the unresolvable name this shows the timer
    // fired at the later hop, not before it, which would count something else.
    let later_attempts = first_hop;
    if let Some(arrivals) = hop.arrivals.map(|a| a.get()).filter(|&a| a != later_attempts) {
        problems.push(format!(
            "setup: the later hop was reached {arrivals} times, expected {later_attempts}"
        ));
    }
    if first_hop != hits {
        problems.push(format!("first hop reached {first_hop} times, expected {hits}"));
    }
    match slot.get() {
        None => problems.push("no report in the slot".into()),
        Some(report)
            if (report.attempts, report.stop, report.redirects)
                != (attempts, stop, if handing { attempts } else { 0 }) =>
        {
            problems.push(format!(
                "stopped {:?} after {} attempts and {} redirects, expected {stop:?} after \
                 {attempts}",
                report.stop, report.attempts, report.redirects
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
    matrix_with(kind, Client::Following).await;
}

async fn matrix_with(kind: Kind, client: Client) {
    let handing = client == Client::Handing;
    let cells = REDIRECTS.iter().flat_map(|&first| Later::ALL.map(move |later| (first, later)));
    let setups = join_all(cells.map(|(first, later)| set_up(client, first, later))).await;
    let (stalled, others): (Vec<_>, Vec<_>) =
        setups.into_iter().partition(|setup| setup.later == Later::Stall);
    let mut cells = join_all(others.into_iter().map(|setup| run(kind, handing, setup))).await;
    cells.extend(join_all(stalled.into_iter().map(|setup| run(kind, handing, setup))).await);
    cells.sort_by_key(|cell| {
        let column = Later::ALL.iter().position(|&later| later == cell.later);
        (cell.first, column)
    });
    let failed: Vec<&Cell> = cells.iter().filter(|c| !c.problems.is_empty()).collect();
    if failed.is_empty() {
        return;
    }
    let mut message = format!(
        "{kind:?} with {client:?}: {} of {} cells failed. First-hop arrivals (* marks a \
         failing cell):\n\n{:>6}",
        failed.len(),
        cells.len(),
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
async fn post_with_idempotency_key_by_hand_is_retried_unless_answered_at_another_origin() {
    matrix(Kind::PostWithKey).await;
}

#[tokio::test]
async fn get_is_retried_when_the_redirect_ends_retryably() {
    matrix(Kind::Get).await;
}

// The same matrix through the quick start's client, which records every
// redirect: a POST without a key still reaches its first hop once, and a
// keyed POST that a 307 or 308 took to another origin is not retried there.

#[tokio::test]
async fn post_without_key_is_sent_once_through_the_quick_start() {
    matrix_with(Kind::PostWithoutKey, Client::Handing).await;
}

#[tokio::test]
async fn patch_without_key_is_sent_once_through_the_quick_start() {
    matrix_with(Kind::PatchWithoutKey, Client::Handing).await;
}

#[tokio::test]
async fn post_with_key_is_retried_through_the_quick_start_unless_taken_to_another_origin() {
    matrix_with(Kind::PostWithKey, Client::Handing).await;
}

#[tokio::test]
async fn get_is_retried_through_the_quick_start() {
    matrix_with(Kind::Get, Client::Handing).await;
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
    for (client, clock) in [following_client(None), handing_client()] {
        let response = post_once(&client, &clock, &orders).await.unwrap();
        assert_eq!(response.status(), 429, "the client followed the 303");
    }
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
    for (client, clock) in [following_client(None), handing_client()] {
        let error = post_once(&client, &clock, &orders).await.unwrap_err();
        assert!(error.is_connect(), "the redirected request was refused: {error:?}");
    }
}

/// POSTs an order through `client` and checks that it was created once, not
/// retried and never waited for; returns what the caller got.
async fn post_once(
    client: &ClientWithMiddleware,
    clock: &ManualClock,
    orders: &MockServer,
) -> reqwest_middleware::Result<reqwest::Response> {
    let before = hits(orders).await;
    let slot = ReportSlot::new();
    let send = client
        .post(format!("{}/orders", orders.uri()))
        .body("item=1")
        .with_extension(slot.clone())
        .send();
    let outcome = tokio::time::timeout(BOUND, send).await.expect("the request ends");
    assert_eq!(hits(orders).await - before, 1, "the order was created once");
    assert_eq!(slot.get().unwrap().stop, StopReason::NotSafe);
    assert!(clock.sleeps().is_empty());
    outcome
}

/// The quick start's client: built by the middleware, which records its
/// redirects.
fn handing_client() -> (ClientWithMiddleware, ManualClock) {
    client_for(Client::Handing, None, None)
}

/// `POST /orders` creates the order and answers 303 back to `/orders`, which
/// answers the GET with 429. Comparing URLs cannot tell this hop from the
/// first; the record of the quick start's client can: the 429 is the GET's,
/// and the POST is not repeated.
#[tokio::test]
async fn post_whose_303_leads_back_to_its_own_url_is_sent_once() {
    let server = MockServer::start().await;
    let url = format!("{}/orders", server.uri());
    Mock::given(method("POST"))
        .and(path("/orders"))
        .respond_with(ResponseTemplate::new(303).insert_header("Location", "/orders"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/orders"))
        .respond_with(ResponseTemplate::new(429))
        .mount(&server)
        .await;
    for (client, clock, handing) in
        [(following_client(None), false), (handing_client(), true)].map(|((c, k), h)| (c, k, h))
    {
        let posts = || async {
            let received = server.received_requests().await.unwrap();
            received.iter().filter(|r| r.method.as_str() == "POST").count()
        };
        let before = posts().await;
        let slot = ReportSlot::new();
        let send = client.post(&url).body("item=1").with_extension(slot.clone()).send();
        let response = tokio::time::timeout(BOUND, send).await.expect("the call ends").unwrap();
        assert_eq!((response.status().as_u16(), posts().await - before), (429, 1));
        let report = slot.get().unwrap();
        let redirects = u32::from(handing);
        assert_eq!(
            (report.attempts, report.redirects, report.stop),
            (1, redirects, StopReason::NotSafe)
        );
        assert_eq!(report.resend_count(), redirects, "the GET was sent after the POST");
        assert!(clock.sleeps().is_empty());
    }
}

/// A chain of hops across two hosts, the last answering 503 then 200: a PUT
/// is safe to repeat, so the whole chain is sent again, by reqwest, as its
/// own following would send it.
#[tokio::test]
async fn a_chain_of_redirects_is_sent_again_whole_when_safe() {
    let (a, b) = (MockServer::start().await, MockServer::start().await);
    let to = |server: &MockServer, at: &str| format!("{}{at}", server.uri());
    for (server, at, next) in
        [(&a, "/orders", to(&b, "/1")), (&b, "/1", to(&a, "/2")), (&a, "/2", to(&b, "/3"))]
    {
        Mock::given(path(at))
            .respond_with(ResponseTemplate::new(307).insert_header("Location", next.as_str()))
            .mount(server)
            .await;
    }
    script_statuses(&b, "/3", &[503, 200]).await;
    let (client, clock) = handing_client();
    let slot = ReportSlot::new();
    let response = client
        .put(to(&a, "/orders"))
        .body("item=1")
        .with_extension(slot.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.url().path(), "/3");
    let paths = |requests: Vec<wiremock::Request>| {
        requests
            .into_iter()
            .map(|r| (r.method.to_string(), r.url.path().to_owned(), r.body))
            .collect::<Vec<_>>()
    };
    let put = |at: &str| ("PUT".to_owned(), at.to_owned(), b"item=1".to_vec());
    assert_eq!(
        paths(a.received_requests().await.unwrap()),
        [put("/orders"), put("/2"), put("/orders"), put("/2")]
    );
    assert_eq!(
        paths(b.received_requests().await.unwrap()),
        [put("/1"), put("/3"), put("/1"), put("/3")]
    );
    let report = slot.get().unwrap();
    assert_eq!(
        (report.attempts, report.redirects, report.stop),
        (2, 6, StopReason::NothingToRetry)
    );
    assert_eq!(report.resend_count(), 7, "eight requests in all");
    assert_eq!(clock.sleeps(), [100 * MS]);
}

/// A redirect loop ends after ten redirects with reqwest's own error; the
/// POST that started it was sent once.
#[tokio::test]
async fn a_redirect_loop_ends_with_reqwests_too_many_redirects() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(303).insert_header("Location", "/a"))
        .mount(&server)
        .await;
    Mock::given(path("/a"))
        .respond_with(ResponseTemplate::new(302).insert_header("Location", "/b"))
        .mount(&server)
        .await;
    Mock::given(path("/b"))
        .respond_with(ResponseTemplate::new(302).insert_header("Location", "/a"))
        .mount(&server)
        .await;
    let (client, _) = handing_client();
    let slot = ReportSlot::new();
    let send =
        client.post(format!("{}/orders", server.uri())).body("x").with_extension(slot.clone());
    let error = tokio::time::timeout(BOUND, send.send()).await.expect("the loop ends").unwrap_err();
    assert!(error.is_redirect(), "reqwest's own error: {error:?}");
    let received = server.received_requests().await.unwrap();
    assert_eq!(received.iter().filter(|r| r.method.as_str() == "POST").count(), 1);
    assert_eq!(received.len(), 11, "the POST and ten hops");
    let report = slot.get().unwrap();
    assert_eq!(
        (report.attempts, report.redirects, report.stop),
        (1, 10, StopReason::NothingToRetry)
    );
}

/// A redirect to another host drops the credentials, as reqwest does.
#[tokio::test]
async fn credentials_do_not_follow_a_redirect_to_another_host() {
    let (a, b) = (MockServer::start().await, MockServer::start().await);
    Mock::given(any())
        .respond_with(
            ResponseTemplate::new(302).insert_header("Location", format!("{}/x", b.uri())),
        )
        .mount(&a)
        .await;
    script_statuses(&b, "/x", &[200]).await;
    let (client, _) = handing_client();
    let response =
        client.get(a.uri()).header("Authorization", "Bearer secret").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let at_a = a.received_requests().await.unwrap();
    let at_b = b.received_requests().await.unwrap();
    assert!(at_a[0].headers.contains_key("authorization"));
    assert!(!at_b[0].headers.contains_key("authorization"));
    assert_eq!(at_b[0].headers["referer"], format!("{}/", a.uri()).as_str());
}

/// A redirect starts a new request, not a new deadline: the waits of every
/// hop together stay within the call's one deadline.
#[tokio::test]
async fn the_hops_of_a_call_share_its_deadline() {
    let server = MockServer::start().await;
    Mock::given(path("/first"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(path("/first"))
        .respond_with(ResponseTemplate::new(303).insert_header("Location", "/next"))
        .mount(&server)
        .await;
    Mock::given(path("/next")).respond_with(ResponseTemplate::new(503)).mount(&server).await;
    let deadline = Duration::from_secs(2);
    let config = RetryConfig::builder()
        .with_backoff(Backoff::default().with_initial(500 * MS))
        .with_max_retries(10)
        .with_deadline(deadline)
        .with_budget(None);
    let clock = ManualClock::new();
    let middleware = RetryMiddleware::new(config.build().unwrap())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::TOP);
    let client = middleware.client(reqwest::Client::builder().no_proxy()).unwrap().build();
    let slot = ReportSlot::new();
    let call = client.get(format!("{}/first", server.uri())).with_extension(slot.clone()).send();
    let _ = tokio::time::timeout(BOUND, call).await.expect("the call ends");
    assert_eq!(slot.get().map(|report| report.redirects), Some(1));
    // 500 ms and 1 s before the 303; what is left of the 2 s after it.
    assert_eq!(clock.sleeps()[..2], [500 * MS, 1000 * MS]);
    assert!(clock.total_slept() <= deadline, "{:?}", clock.sleeps());
}

// ---- A client the middleware did not build ----

/// A keyed POST whose first origin answers 307 to `to`, through a client
/// the middleware was put on by hand: the requests each origin saw, and
/// the report.
async fn keyed_post_by_hand(to_other_origin: bool) -> (usize, usize, RetryReport) {
    let (first, second) = (MockServer::start().await, MockServer::start().await);
    let target = if to_other_origin { second.uri() } else { first.uri() };
    Mock::given(path("/pay"))
        .respond_with(
            ResponseTemplate::new(307).insert_header("Location", format!("{target}/charged")),
        )
        .mount(&first)
        .await;
    for server in [&first, &second] {
        Mock::given(path("/charged")).respond_with(ResponseTemplate::new(503)).mount(server).await;
    }
    let config = RetryConfig::builder().with_budget(None).build().unwrap();
    let middleware = RetryMiddleware::new(config)
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::TOP);
    let client =
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
    let slot = ReportSlot::new();
    let response = client
        .post(format!("{}/pay", first.uri()))
        .header("Idempotency-Key", "pay-1")
        .body("amount=5")
        .with_extension(slot.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    (hits(&first).await, hits(&second).await, slot.get().unwrap())
}

#[tokio::test]
async fn by_hand_a_keyed_post_answered_at_another_origin_is_not_retried_at_either() {
    let (first, second, report) = keyed_post_by_hand(true).await;
    assert_eq!((first, second), (1, 1));
    assert_eq!((report.attempts, report.stop), (1, StopReason::NotSafe));
}

#[tokio::test]
async fn by_hand_a_keyed_post_answered_at_its_own_origin_is_retried() {
    let (first, second, report) = keyed_post_by_hand(false).await;
    assert_eq!((first, second), (8, 0), "four attempts of two requests");
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
}

/// Below the retries, answers 503 itself, with a response built without a
/// URL, as a mock or a cache would.
struct Unavailable;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Unavailable {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let response = http::Response::builder().status(503).body("").unwrap();
        Ok(reqwest::Response::from(response))
    }
}

#[tokio::test]
async fn by_hand_a_response_built_without_a_url_names_no_other_origin() {
    let config = RetryConfig::builder().with_budget(None).build().unwrap();
    let middleware = RetryMiddleware::new(config)
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::TOP);
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .with(Unavailable)
        .build();
    let slot = ReportSlot::new();
    let response = client
        .post("http://127.0.0.1:9/pay")
        .header("Idempotency-Key", "pay-2")
        .with_extension(slot.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (4, StopReason::RetriesExhausted));
}
