//! Two processes (two middlewares, each with a fleet of its own) sharing
//! one store in memory, on one manual clock; calls answered in process by
//! a middleware at the end of the chain, no network.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response, ResponseBuilderExt};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};

use super::memory::MemoryStore;
use super::*;
use crate::clock::ManualClock;
use crate::rate_limit::{HostPaused, ReturnIfPaused};
use crate::{RetryAfter, RetryConfig, RetryMiddleware};

const URL: &str = "http://api.fleet.test/v1";

/// Answers each request with the next status of its script (the last one
/// once the script runs out), a 429 asking for 2 s; counts the requests.
#[derive(Clone)]
struct Server {
    statuses: Arc<Mutex<Vec<u16>>>,
    seen: Arc<AtomicUsize>,
}

impl Server {
    fn new(statuses: &[u16]) -> Self {
        let statuses = statuses.iter().rev().copied().collect();
        Self { statuses: Arc::new(Mutex::new(statuses)), seen: Arc::default() }
    }

    fn then(&self, statuses: &[u16]) {
        *self.statuses.lock().unwrap() = statuses.iter().rev().copied().collect();
    }

    fn seen(&self) -> usize {
        self.seen.load(Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl Middleware for Server {
    async fn handle(
        &self,
        request: Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        self.seen.fetch_add(1, Ordering::Relaxed);
        let status = {
            let mut statuses = self.statuses.lock().unwrap();
            if statuses.len() > 1 { statuses.pop().unwrap() } else { statuses[0] }
        };
        let response = http::Response::builder().status(status).url(request.url().clone());
        let response = if status == 429 { response.header("retry-after", "2") } else { response };
        Ok(Response::from(response.body("").unwrap()))
    }
}

/// One process: its client, its fleet and its server's count.
struct Process {
    client: ClientWithMiddleware,
    fleet: Fleet,
    server: Server,
}

/// A process with `config`, in a fleet of its own on `store`, calling a
/// server that answers `statuses`. The fleet is joined before the clock
/// is set: the order does not matter.
fn process(
    store: &Arc<MemoryStore>,
    clock: &ManualClock,
    config: RetryConfig,
    statuses: &[u16],
) -> Process {
    let fleet = Fleet::new(store.clone());
    let server = Server::new(statuses);
    // No spread: the waits a paused host names are exact.
    let middleware = RetryMiddleware::new(config)
        .with_fleet(&fleet)
        .with_clock(clock.clone())
        .with_jitter_source(crate::jitter::FixedJitter::BOTTOM);
    let client = ClientBuilder::new(reqwest::Client::new()).with(middleware).with(server.clone());
    Process { client: client.build(), fleet, server }
}

/// A call that returns a pause rather than wait for it: the status, or
/// the pause it met before sending.
async fn call(process: &Process) -> Result<u16, Duration> {
    match process.client.get(URL).with_extension(ReturnIfPaused).send().await {
        Ok(response) => Ok(response.status().as_u16()),
        Err(reqwest_middleware::Error::Middleware(error)) => {
            Err(error.downcast_ref::<HostPaused>().expect("a paused host").wait())
        }
        Err(error) => panic!("{error}"),
    }
}

fn setup() -> (Arc<MemoryStore>, ManualClock) {
    let clock = ManualClock::new();
    (Arc::new(MemoryStore::new(&clock)), clock)
}

#[tokio::test]
async fn a_pause_one_process_takes_holds_the_others_calls_after_a_round_each() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200, 429]);
    let b = process(&store, &clock, RetryConfig::default(), &[200]);
    // Both called the host before: it is in use in each.
    assert_eq!((call(&a).await, call(&b).await), (Ok(200), Ok(200)));
    assert_eq!(call(&a).await, Ok(429), "A is asked to keep away for 2 s");
    assert_eq!(call(&b).await, Ok(200), "B does not know yet");
    clock.advance(Duration::from_millis(300));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!(call(&b).await, Err(Duration::from_millis(1700)), "B holds the call, unsent");
    assert_eq!(b.server.seen(), 2);
    let (sa, sb) = (a.fleet.status(), b.fleet.status());
    assert_eq!((sa.published, sa.received, sb.published, sb.received), (1, 0, 0, 1));
    assert!(sa.connected && sb.connected);
    // When the pause ends, B's next call is its probe, and goes.
    clock.advance(Duration::from_millis(1700));
    assert_eq!(call(&b).await, Ok(200));
    assert_eq!(b.server.seen(), 3);
}

#[tokio::test]
async fn the_store_is_told_what_is_left_of_a_pause_when_the_round_runs() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[429]);
    assert_eq!(call(&a).await, Ok(429));
    clock.advance(Duration::from_millis(500));
    a.fleet.sync().await.unwrap();
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    let left = store.pauses_left(std::slice::from_ref(&host)).await.unwrap();
    assert_eq!(left, [PauseLeft::Left(Duration::from_millis(1500))]);
    assert_eq!(host.as_str(), "http://api.fleet.test:80");
    // A pause queued and over before the round is not written.
    let b = process(&store, &clock, RetryConfig::default(), &[429]);
    let other = "http://other.fleet.test/";
    let _ = b.client.get(other).with_extension(ReturnIfPaused).send().await.unwrap();
    clock.advance(Duration::from_secs(3));
    b.fleet.sync().await.unwrap();
    assert_eq!(b.fleet.status().published, 0);
}

#[tokio::test]
async fn a_store_that_fails_costs_a_call_nothing_and_sharing_resumes_after() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200, 429]);
    let b = process(&store, &clock, RetryConfig::default(), &[200]);
    assert_eq!((call(&a).await, call(&b).await), (Ok(200), Ok(200)));
    *store.down.lock().unwrap() = true;
    assert_eq!(call(&a).await, Ok(429));
    assert!(a.fleet.sync().await.is_err());
    assert!(b.fleet.sync().await.is_err());
    // Each process as alone: A holds its own pause, B knows nothing.
    assert_eq!(call(&a).await, Err(Duration::from_secs(2)));
    assert_eq!(call(&b).await, Ok(200));
    let status = a.fleet.status();
    assert_eq!((status.connected, status.failed_rounds, status.published), (false, 1, 0));
    // Back up: the next pause is shared again.
    *store.down.lock().unwrap() = false;
    clock.advance(Duration::from_secs(2));
    a.server.then(&[429]);
    assert_eq!(call(&a).await, Ok(429), "the probe, told to wait again");
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!(call(&b).await, Err(Duration::from_secs(2)));
    assert!(b.fleet.status().connected);
}

#[tokio::test]
async fn what_the_store_holds_past_the_cap_or_not_a_pause_is_ignored_and_counted() {
    let (store, clock) = setup();
    let cap = Duration::from_secs(10);
    let config = RetryConfig::builder()
        .with_retry_after(RetryAfter::default().with_cap(cap))
        .build()
        .unwrap();
    let b = process(&store, &clock, config, &[200]);
    assert_eq!(call(&b).await, Ok(200));
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    store.extend_pauses("another", &[(host.clone(), Duration::from_secs(3600))]).await.unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!(call(&b).await, Ok(200), "an hour is over the cap: ignored");
    store.garbage.lock().unwrap().push(host);
    b.fleet.sync().await.unwrap();
    assert_eq!(call(&b).await, Ok(200));
    assert_eq!((b.fleet.status().ignored, b.fleet.status().received), (2, 0));
}

#[tokio::test]
async fn a_middleware_that_does_not_pause_stays_out_and_one_joins_one_fleet() {
    let (store, clock) = setup();
    let off = RetryConfig::builder()
        .with_retry_after(RetryAfter::default().with_pause(false))
        .build()
        .unwrap();
    let a = process(&store, &clock, off, &[429]);
    assert_eq!(call(&a).await, Ok(429));
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().published, 0);
    assert!(store.ends.lock().unwrap().is_empty());

    let first = Fleet::new(store.clone());
    let second = Fleet::new(store.clone());
    let middleware = RetryMiddleware::default().with_fleet(&first).with_fleet(&second);
    assert_eq!(lock(&first.inner.members).len(), 1);
    assert!(lock(&second.inner.members).is_empty());
    drop(middleware);
    first.sync().await.unwrap();
}

#[test]
fn the_queue_keeps_the_newest_pauses_and_counts_what_it_drops() {
    let (store, clock) = setup();
    let (fleet, _ledger, member) = member_of(Fleet::new(store), &clock);
    let link = Link { fleet: Arc::downgrade(&fleet.inner), member };
    let now = clock.now();
    for n in 0..OUTBOX + 6 {
        link.paused("http", &format!("h{n}.test"), None, Duration::from_secs(1), now);
    }
    assert_eq!(fleet.status().dropped, 6);
    let outbox = lock(&fleet.inner.outbox);
    assert_eq!(outbox.len(), OUTBOX);
    assert_eq!(outbox.front().unwrap().host.as_str(), "http://h6.test:80");
}

#[test]
fn a_host_is_named_alike_by_every_process() {
    assert_eq!(FleetHost::new("https", "a.test", None, None).as_str(), "https://a.test:443");
    assert_eq!(FleetHost::new("https", "a.test", Some(443), None).as_str(), "https://a.test:443");
    assert_eq!(FleetHost::new("http", "[::1]", Some(8080), None).as_str(), "http://[::1]:8080");
    assert_eq!(FleetHost::new("ws", "a.test", None, None).as_str(), "ws://a.test");
    // Keyed in the books as reqwest's `Url` names it, hashed or not.
    use crate::hosts::Located;
    let url = |s: &str| reqwest::Url::parse(s).unwrap();
    let key = HostKey([7; 16]);
    for (scheme, name, port, named) in [
        ("http", "[::1]", Some(8080), "http://[::1]:8080/"),
        ("https", "a.test", Some(443), "https://a.test/"),
        ("http", "a.test", None, "http://a.test:80/"),
        ("ws", "a.test", Some(80), "ws://a.test/"),
    ] {
        for key in [None, Some(&key)] {
            let host = FleetHost::new(scheme, name, port, key);
            assert!(host.as_origin() == url(named).as_origin(), "{host} against {named}");
        }
    }
    assert_eq!(FleetHost::new("https", "a.test", None, None).to_string(), "https://a.test:443");
}

#[tokio::test]
async fn when_a_shared_pause_ends_one_process_of_the_fleet_probes_and_the_others_wait_for_it() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200, 429, 200]);
    let b = process(&store, &clock, RetryConfig::default(), &[200]);
    assert_eq!((call(&a).await, call(&b).await), (Ok(200), Ok(200)));
    assert_eq!(call(&a).await, Ok(429));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    // Half a second before the end, within two rounds of it: A claims the
    // probe first, and B holds until A's claim ends, 2 s past the pause.
    clock.advance(Duration::from_millis(1500));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!((a.fleet.status().held_for_probe, b.fleet.status().held_for_probe), (0, 1));
    clock.advance(Duration::from_millis(500));
    assert_eq!(call(&a).await, Ok(200), "A's probe");
    assert_eq!(call(&b).await, Err(Duration::from_secs(2)), "B waits for it");
    assert_eq!(b.server.seen(), 1);
    // Another round changes nothing: the claim is the same.
    b.fleet.sync().await.unwrap();
    assert_eq!(b.fleet.status().held_for_probe, 1);
    clock.advance(Duration::from_secs(2));
    assert_eq!(call(&b).await, Ok(200));
}

#[tokio::test]
async fn a_store_that_cannot_tell_who_probes_leaves_each_process_as_alone() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200, 429, 200]);
    assert_eq!(call(&a).await, Ok(200));
    assert_eq!(call(&a).await, Ok(429));
    clock.advance(Duration::from_millis(1500));
    // Another process holds the claim for an hour: past the cap, ignored.
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    let far = clock.now() + Duration::from_secs(3600);
    store.claims.lock().unwrap().insert(host, ("another".to_owned(), far));
    a.fleet.sync().await.unwrap();
    assert_eq!((a.fleet.status().held_for_probe, a.fleet.status().ignored), (0, 1));
    clock.advance(Duration::from_millis(500));
    assert_eq!(call(&a).await, Ok(200), "A probes, as alone");
}

/// A claim within the cap, but longer than a probe of the pause this
/// process reads would claim by more than a round: no probe's, ignored;
/// one a round long past what it would claim is held to.
#[tokio::test]
async fn a_claim_that_outlasts_the_probe_s_own_by_more_than_a_round_is_ignored() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200, 429, 200]);
    assert_eq!(call(&a).await, Ok(200));
    assert_eq!(call(&a).await, Ok(429), "a 2 s pause");
    clock.advance(Duration::from_millis(1500));
    // A's own claim would last 0.5 s + the 2 s window; another's lasts 5 s.
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    let claim = |left: Duration| {
        let end = clock.now() + left;
        store.claims.lock().unwrap().insert(host.clone(), ("another".to_owned(), end));
    };
    claim(Duration::from_millis(5_000));
    a.fleet.sync().await.unwrap();
    assert_eq!((a.fleet.status().held_for_probe, a.fleet.status().ignored), (0, 1));
    // One round past what A would claim: another's probe, held to.
    claim(Duration::from_millis(3_000));
    a.fleet.sync().await.unwrap();
    assert_eq!((a.fleet.status().held_for_probe, a.fleet.status().ignored), (1, 1));
    clock.advance(Duration::from_millis(500));
    assert_eq!(call(&a).await, Err(Duration::from_millis(2_500)), "held for the other's probe");
}

#[tokio::test]
async fn the_process_that_holds_a_probe_s_claim_is_not_held_by_it_however_many_rounds_it_runs() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[429, 200]);
    assert_eq!(call(&a).await, Ok(429));
    // A round every half second through the pause and past its end.
    for _ in 0..4 {
        a.fleet.sync().await.unwrap();
        clock.advance(Duration::from_millis(500));
    }
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().held_for_probe, 0);
    assert_eq!(call(&a).await, Ok(200), "A's probe goes when the pause ends");
}

#[tokio::test]
async fn a_probe_refused_with_no_time_named_is_not_told_to_the_fleet_as_a_server_s_pause() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[429, 503]);
    assert_eq!(call(&a).await, Ok(429));
    a.fleet.sync().await.unwrap();
    clock.advance(Duration::from_secs(2));
    // The probe is refused, no time named, and so are its retries: A
    // holds the host a backoff step, its own guess, which the fleet is
    // not told.
    assert_eq!(call(&a).await, Ok(503));
    assert!(a.server.seen() > 2, "the probe was refused and retried");
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().published, 1);
}

/// The fleet's events while `run` runs, as text.
#[cfg(feature = "tracing")]
async fn events_of(run: impl std::future::Future<Output = ()>) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    run.await;
    drop(guard);
    String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
}

#[cfg(feature = "tracing")]
#[tokio::test]
async fn the_fleet_tells_each_change_of_its_store_once_and_what_its_queue_dropped() {
    let (store, clock) = setup();
    let (fleet, ledger, member) = member_of(Fleet::new(store.clone()), &clock);
    let link = Link { fleet: Arc::downgrade(&fleet.inner), member };
    // A host in the books, so that every round reads the store.
    let host = Url::parse("http://a.test/").unwrap();
    assert!(ledger.pause(&host, Duration::from_secs(30), clock.now()));
    let events = events_of(async {
        fleet.sync().await.unwrap();
        fleet.sync().await.unwrap();
        *store.down.lock().unwrap() = true;
        assert!(fleet.sync().await.is_err());
        assert!(fleet.sync().await.is_err());
        *store.down.lock().unwrap() = false;
        for n in 0..OUTBOX + 3 {
            link.paused("http", &format!("h{n}.test"), None, Duration::from_secs(1), clock.now());
        }
        fleet.sync().await.unwrap();
        fleet.sync().await.unwrap();
    })
    .await;
    assert_eq!(events.matches("the fleet's store is reached").count(), 2, "{events}");
    assert_eq!(events.matches("each process keeps its own pauses").count(), 1, "{events}");
    assert_eq!(events.matches("pauses dropped").count(), 1, "{events}");
    assert!(events.contains("lost=3"), "{events}");
    assert!(format!("{fleet:?}").starts_with("Fleet { status: FleetStatus { connected: true"));
}

#[tokio::test(start_paused = true)]
async fn rounds_run_every_interval_while_the_task_is_kept_and_stop_when_it_is_dropped() {
    let (fleet, _ledger) = failing_rounds();
    let task = fleet.spawn(Duration::from_millis(100));
    // Tokio's paused time: rounds at 0, 100, 200 and 300 ms.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(fleet.status().failed_rounds, 4);
    drop(task);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fleet.status().failed_rounds, 4, "no round once the task is dropped");
}

#[tokio::test]
async fn a_pause_read_back_within_50_ms_of_the_process_s_own_end_is_its_own() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[429]);
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    assert_eq!(call(&a).await, Ok(429), "A's own pause, 2 s");
    // The store's end is 50 ms past A's: A's own pause come back.
    store.extend_pauses("another", &[(host.clone(), Duration::from_millis(2050))]).await.unwrap();
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().received, 0);
    // More than 50 ms past what A knows now is another process's.
    store.extend_pauses("another", &[(host, Duration::from_millis(2101))]).await.unwrap();
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().received, 1);
}

/// A POST (never retried), its status or `None` when the throttle kept it
/// back.
async fn post(process: &Process) -> Option<u16> {
    match process.client.post(URL).send().await {
        Ok(response) => Some(response.status().as_u16()),
        Err(reqwest_middleware::Error::Middleware(error)) => {
            assert!(error.is::<crate::rate_limit::Throttled>(), "{error}");
            None
        }
        Err(error) => panic!("{error}"),
    }
}

/// Calls kept back from `slow`, a process calling once a second, over
/// `secs` seconds of a host turning every attempt away, while each of
/// `others` calls it once a second too; rounds run each second when
/// `rounds`. Before, 20 s of the host accepting them all: long enough for
/// `slow` to be called often enough to be throttled at all.
async fn kept_back(
    slow: &Process,
    others: &[Process],
    secs: u32,
    clock: &ManualClock,
    rounds: bool,
) -> u32 {
    let mut kept = 0;
    for t in 0..20 + secs {
        if t == 20 {
            for process in std::iter::once(slow).chain(others) {
                process.server.then(&[503]);
            }
        }
        clock.advance(Duration::from_secs(1));
        for other in others {
            let _ = post(other).await;
        }
        kept += u32::from(post(slow).await.is_none());
        if rounds {
            for process in std::iter::once(slow).chain(others) {
                process.fleet.sync().await.unwrap();
            }
        }
    }
    kept
}

/// `n` processes on `store`, served 200s.
fn processes(store: &Arc<MemoryStore>, clock: &ManualClock, n: usize) -> Vec<Process> {
    (0..n).map(|_| process(store, clock, RetryConfig::default(), &[200])).collect()
}

#[tokio::test]
async fn a_process_calling_once_a_second_throttles_on_the_fleet_s_answers_within_seconds() {
    // Ten processes, each calling once a second: a fleet's evidence comes
    // ten times as fast as one's own.
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200]);
    let others = processes(&store, &clock, 9);
    let pooled = kept_back(&a, &others, 12, &clock, true).await;
    let (alone_store, alone_clock) = setup();
    let c = process(&alone_store, &alone_clock, RetryConfig::default(), &[200]);
    let alone_others = processes(&alone_store, &alone_clock, 9);
    let alone = kept_back(&c, &alone_others, 12, &alone_clock, false).await;
    // Deterministic (one manual clock, no spread): 2 against 1.
    assert!(alone <= 1, "alone, twelve answers prove little: {alone} kept back");
    assert!(pooled > alone, "with the fleet's: {pooled} kept back, {alone} alone");
    assert!(a.fleet.status().pooled >= 100, "{:?}", a.fleet.status());
    assert!(
        others[0].fleet.status().pooled >= 20,
        "A's reached the others: {:?}",
        others[0].fleet.status()
    );
}

#[tokio::test]
async fn the_fleet_s_rejections_can_throttle_a_process_that_was_turned_away_by_none() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200]);
    let b = processes(&store, &clock, 1);
    let _ = kept_back(&a, &b, 0, &clock, true).await;
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    // Ten others, each turned away 3 times a second (one member is heard
    // up to 4 answers a pooling, beside A's one); A is served.
    let others = |rejected: u64| {
        let mut totals = store.totals.lock().unwrap();
        let members = totals.entry(host.clone()).or_default();
        for n in 0..10 {
            members.entry(format!("other-{n}")).or_default().rejected += rejected;
        }
    };
    others(0);
    clock.advance(Duration::from_secs(1));
    a.fleet.sync().await.unwrap();
    for _ in 0..10 {
        clock.advance(Duration::from_secs(1));
        others(3);
        // A's own answers, all accepted, make room for its calls: they go.
        assert_eq!(post(&a).await, Some(200));
        a.fleet.sync().await.unwrap();
    }
    let status = a.fleet.status();
    assert_eq!(status.throttled_by_fleet, 1, "{status:?}");
    assert!(status.pooled >= 300, "{status:?}");
}

/// A process served 200s, its host in the books with one answer counted
/// and pooled: the host's first answer puts it there, the next ones count.
async fn pooling() -> (Arc<MemoryStore>, ManualClock, Process, FleetHost) {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200]);
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    assert_eq!(post(&a).await, Some(200));
    assert_eq!(post(&a).await, Some(200));
    a.fleet.sync().await.unwrap();
    (store, clock, a, host)
}

/// Sets `member`'s totals for `host` in `store`.
fn set_member(store: &MemoryStore, host: &FleetHost, member: &str, tally: Tally) {
    store.totals.lock().unwrap().entry(host.clone()).or_default().insert(member.to_owned(), tally);
}

#[tokio::test]
async fn a_member_s_totals_that_went_back_are_ignored_and_a_jump_counts_as_one_member_s_word() {
    let (store, clock, a, host) = pooling().await;
    let tally = |accepted, rejected| Tally { accepted, rejected };
    assert_eq!(store.total(&host), tally(1, 0), "A's answer, added");
    // Another member's totals, first read: where the next reading counts
    // from. Then they go back (lost, and started again): ignored.
    set_member(&store, &host, "other", tally(5, 0));
    clock.advance(Duration::from_secs(1));
    a.fleet.sync().await.unwrap();
    set_member(&store, &host, "other", tally(2, 0));
    clock.advance(Duration::from_secs(1));
    a.fleet.sync().await.unwrap();
    assert_eq!((a.fleet.status().ignored, a.fleet.status().pooled), (1, 0), "went back");
    // A million rejections in a second, from one member, while A had
    // three answers: one member is believed for twice A's and two more.
    set_member(&store, &host, "other", tally(2, 1_000_000));
    for _ in 0..3 {
        assert_eq!(post(&a).await, Some(200));
    }
    clock.advance(Duration::from_secs(1));
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().pooled, 8, "{:?}", a.fleet.status());
    store.garbage.lock().unwrap().push(host);
    clock.advance(Duration::from_secs(1));
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().ignored, 3, "not counts (and not a pause either)");
    assert_eq!(a.fleet.status().pooled, 8);
    assert_eq!(post(&a).await, Some(200), "and the calls go as ever");
}

#[tokio::test]
async fn answers_are_pooled_once_a_second_however_often_rounds_run() {
    let (store, clock, a, host) = pooling().await;
    assert_eq!(post(&a).await, Some(200));
    clock.advance(Duration::from_millis(999));
    a.fleet.sync().await.unwrap();
    assert_eq!(store.total(&host).accepted, 1, "not a second yet");
    clock.advance(Duration::from_millis(1));
    a.fleet.sync().await.unwrap();
    assert_eq!(store.total(&host).accepted, 2);
}

#[tokio::test]
async fn a_pooling_whose_reply_is_lost_counts_nothing_twice() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200]);
    let b = process(&store, &clock, RetryConfig::default(), &[200]);
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    for p in [&a, &b] {
        assert_eq!(post(p).await, Some(200));
        p.fleet.sync().await.unwrap();
    }
    // A's replies are lost for ten seconds: Redis added its answers, A
    // cannot know it did. B is as busy, so that it believes all of A's.
    let mut sent = 0;
    for _ in 0..10 {
        clock.advance(Duration::from_secs(1));
        for _ in 0..10 {
            assert_eq!(post(&a).await, Some(200));
            assert_eq!(post(&b).await, Some(200));
            sent += 1;
        }
        *store.tallies_lost.lock().unwrap() = true;
        assert!(a.fleet.sync().await.is_err());
        *store.tallies_lost.lock().unwrap() = false;
        b.fleet.sync().await.unwrap();
    }
    assert_eq!(store.total(&host).accepted, 2 * sent, "each answer added once");
    assert_eq!(b.fleet.status().pooled, sent, "and taken in once by B");
    // A's next pooling reads from itself: it takes none of its own in.
    clock.advance(Duration::from_secs(1));
    a.fleet.sync().await.unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(post(&a).await, Some(200));
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().pooled, 0, "{:?}", a.fleet.status());
}

#[tokio::test]
async fn two_rounds_at_once_pool_once() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200]);
    assert_eq!(post(&a).await, Some(200));
    a.fleet.sync().await.unwrap();
    for _ in 0..10 {
        assert_eq!(post(&a).await, Some(200));
    }
    clock.advance(Duration::from_secs(1));
    *store.tallies_slow.lock().unwrap() = true;
    let (first, second) = tokio::join!(a.fleet.sync(), a.fleet.sync());
    first.unwrap();
    second.unwrap();
    let status = a.fleet.status();
    assert_eq!((status.pooled, status.ignored), (0, 0), "its own answers are its own: {status:?}");
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    assert_eq!(store.total(&host).accepted, 10);
}

/// A process as [`process`] makes it, its fleet hashing host names under
/// `key`.
fn hashing_process(store: &Arc<MemoryStore>, clock: &ManualClock, key: [u8; 16]) -> Process {
    let fleet = Fleet::with_hashed_hosts(store.clone(), key);
    let server = Server::new(&[200, 429]);
    let middleware = RetryMiddleware::new(RetryConfig::default())
        .with_fleet(&fleet)
        .with_clock(clock.clone())
        .with_jitter_source(crate::jitter::FixedJitter::BOTTOM);
    let client = ClientBuilder::new(reqwest::Client::new()).with(middleware).with(server.clone());
    Process { client: client.build(), fleet, server }
}

#[tokio::test]
async fn a_fleet_that_hashes_host_names_shares_pauses_and_the_store_holds_no_name() {
    let (store, clock) = setup();
    let key = *b"0123456789abcdef";
    let (a, b) = (hashing_process(&store, &clock, key), hashing_process(&store, &clock, key));
    let other = hashing_process(&store, &clock, *b"fedcba9876543210");
    assert_eq!((call(&a).await, call(&b).await, call(&other).await), (Ok(200), Ok(200), Ok(200)));
    assert_eq!(call(&a).await, Ok(429));
    for process in [&a, &b, &other] {
        process.fleet.sync().await.unwrap();
    }
    assert_eq!(call(&b).await, Err(Duration::from_secs(2)), "the same key: shared");
    assert_eq!(call(&other).await, Ok(429), "another key: another fleet");
    let names: Vec<String> =
        store.ends.lock().unwrap().keys().map(|h| h.as_str().to_owned()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("host:") && names[0].len() == 5 + 32, "{names:?}");
    assert!(!names[0].contains("fleet.test"), "{names:?}");
    let totals = store.totals.lock().unwrap();
    assert!(totals.keys().all(|host| !host.as_str().contains("fleet.test")));
    // What the store holds is the host's own hash, the same in every
    // process.
    let host = FleetHost::new("http", "api.fleet.test", None, Some(&HostKey(key)));
    assert_eq!(names[0], host.as_str());
    assert_eq!(host.to_string(), "http://api.fleet.test:80", "events name the host as called");
}

#[test]
fn host_names_are_hashed_as_siphash_2_4_128_s_reference_vector_says() {
    // The first of the reference vectors (key 00 to 0f, no message):
    // a3 81 7f ... 02 93, written as the little-endian number it is.
    let key: [u8; 16] = std::array::from_fn(|i| i as u8);
    assert_eq!(HostKey(key).hash(""), "host:930255c71472f66de6a825ba047f81a3");
}

#[tokio::test]
async fn a_round_with_nothing_to_ask_the_store_says_nothing_of_it() {
    let (store, clock) = setup();
    *store.down.lock().unwrap() = true;
    let a = process(&store, &clock, RetryConfig::default(), &[200]);
    // No pause queued, no host in the books: the store is not asked.
    a.fleet.sync().await.unwrap();
    let status = a.fleet.status();
    assert!(!status.connected && status.failed_rounds == 0, "{status:?}");
    // With a host in the books, it is, and its failure is told.
    assert_eq!(call(&a).await, Ok(200));
    assert!(a.fleet.sync().await.is_err());
    assert_eq!(a.fleet.status().failed_rounds, 1);
}

/// `fleet`, with one member: books of their own on `clock`, a cap of a
/// minute. Returns the fleet, the books and the member's number.
fn member_of(fleet: Fleet, clock: &ManualClock) -> (Fleet, Arc<crate::budget::Ledger>, usize) {
    let ledger = Arc::new(crate::budget::Ledger::new(None, 3, true, false).unwrap());
    let member = fleet.join(&ledger, Arc::new(clock.clone()), Duration::from_secs(60)).unwrap();
    (fleet, ledger, member)
}

/// A fleet on a store that is down, with one member whose books hold a
/// host paused for 30 s: every round asks the store, and fails (counted
/// in `failed_rounds`). Keep the books: the fleet holds them weakly.
fn failing_rounds() -> (Fleet, Arc<crate::budget::Ledger>) {
    let (store, clock) = setup();
    *store.down.lock().unwrap() = true;
    let (fleet, ledger, _) = member_of(Fleet::new(store), &clock);
    let host = Url::parse("http://a.test/").unwrap();
    assert!(ledger.pause(&host, Duration::from_secs(30), clock.now()));
    (fleet, ledger)
}

/// Yields until `done` holds, a thousand times at most: for a spawned
/// task, on this test's one thread, to get as far as it can go.
async fn until(done: impl Fn() -> bool) -> bool {
    for _ in 0..1000 {
        if done() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    done()
}

/// Long enough that no round but a task's first runs in a test.
const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn a_pause_is_written_when_it_is_taken_on_not_at_the_next_round() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200, 429]);
    assert_eq!(call(&a).await, Ok(200));
    // The task's first round: the host is in use, so it asks the store.
    let _task = a.fleet.spawn(HOUR);
    assert!(until(|| a.fleet.status().connected).await);
    assert_eq!(call(&a).await, Ok(429));
    assert!(until(|| a.fleet.status().published == 1).await, "{:?}", a.fleet.status());
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    let left = store.pauses_left(std::slice::from_ref(&host)).await.unwrap();
    assert_eq!(left, [PauseLeft::Left(Duration::from_secs(2))]);
}

#[tokio::test]
async fn a_pause_reaches_the_others_from_the_store_s_feed_the_moment_it_is_written() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200, 429]);
    let b = process(&store, &clock, RetryConfig::default(), &[200]);
    let c = process(&store, &clock, RetryConfig::default(), &[200]);
    assert_eq!((call(&a).await, call(&b).await), (Ok(200), Ok(200)));
    // B's task: its first round finds the host in use, then it listens.
    let _task = b.fleet.spawn(HOUR);
    assert!(until(|| b.fleet.status().connected && store.feed.receiver_count() == 1).await);
    // C has not called the host: the news is not for it.
    let _other = c.fleet.spawn(HOUR);
    assert!(until(|| store.feed.receiver_count() == 2).await);
    assert_eq!(call(&a).await, Ok(429));
    clock.advance(Duration::from_millis(300));
    a.fleet.sync().await.unwrap();
    assert!(until(|| b.fleet.status().heard == 1).await, "{:?}", b.fleet.status());
    assert_eq!(call(&b).await, Err(Duration::from_millis(1700)), "held with no round of B's");
    assert_eq!(b.server.seen(), 1);
    assert_eq!(b.fleet.status().received, 1);
    assert_eq!(call(&c).await, Ok(200));
    assert_eq!(c.fleet.status().heard, 0);
}

/// News of a pause another process wrote.
fn news(host: &str, left: PauseLeft) -> News<'_> {
    News { host, left, writer: "another" }
}

#[tokio::test]
async fn news_that_is_garbage_past_the_cap_or_a_flood_is_ignored_and_counted() {
    let (store, clock) = setup();
    let b = process(&store, &clock, RetryConfig::default(), &[200]);
    assert_eq!(call(&b).await, Ok(200));
    b.fleet.sync().await.unwrap();
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    b.fleet.hear(news("", PauseLeft::Garbage));
    b.fleet.hear(news(host.as_str(), PauseLeft::Left(Duration::from_secs(3600))));
    b.fleet.hear(news(host.as_str(), PauseLeft::None));
    b.fleet.hear(news("http://unknown.test:80", PauseLeft::Left(Duration::from_secs(2))));
    assert_eq!((b.fleet.status().ignored, b.fleet.status().heard), (2, 0));
    assert_eq!(call(&b).await, Ok(200));
    // News past the most a round takes is ignored until the next round.
    for _ in 4..MOST_NEWS {
        b.fleet.hear(news("http://unknown.test:80", PauseLeft::Left(Duration::from_secs(2))));
    }
    b.fleet.hear(news(host.as_str(), PauseLeft::Left(Duration::from_secs(2))));
    assert_eq!((b.fleet.status().ignored, b.fleet.status().heard), (3, 0));
    assert_eq!(call(&b).await, Ok(200));
    b.fleet.sync().await.unwrap();
    // Its own pause, back from the feed: held already, not heard again.
    let token = b.fleet.inner.token.clone();
    let own = PauseLeft::Left(Duration::from_secs(2));
    b.fleet.hear(News { host: host.as_str(), left: own, writer: &token });
    assert_eq!(call(&b).await, Ok(200));
    b.fleet.hear(news(host.as_str(), PauseLeft::Left(Duration::from_secs(2))));
    assert_eq!(b.fleet.status().heard, 1);
    assert_eq!(call(&b).await, Err(Duration::from_secs(2)));
}

#[tokio::test(start_paused = true)]
async fn the_feed_is_listened_to_again_after_it_fails_and_left_when_the_fleet_is_dropped() {
    let (store, clock) = setup();
    let (fleet, ledger, _) = member_of(Fleet::new(store.clone()), &clock);
    let feed = tokio::spawn(listen(Arc::downgrade(&fleet.inner), fleet.inner.store.clone()));
    assert!(until(|| store.feed.receiver_count() == 1).await);
    // Overrun: the receiver lags, its feed fails, and it listens again a
    // second later.
    for n in 0..100 {
        let _ = store.feed.send((format!("h{n}"), PauseLeft::None, "other".to_owned()));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(store.feed.receiver_count(), 0, "the failed feed is left");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.feed.receiver_count(), 1, "and listened to again");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(store.feed.receiver_count(), 1, "a quiet feed is listened to on");
    drop((fleet, ledger));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(feed.is_finished(), "no fleet, no listening");
    assert_eq!(store.feed.receiver_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_second_spawn_stops_the_first_one_s_tasks() {
    let (fleet, _ledger) = failing_rounds();
    let first = fleet.spawn(Duration::from_millis(100));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(fleet.status().failed_rounds, 1);
    let _second = fleet.spawn(Duration::from_millis(100));
    // One loop: rounds at 50, 150, 250 and 350 ms, none of the first's.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(fleet.status().failed_rounds, 5);
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fleet.status().failed_rounds, 6, "the first's handle stops nothing now");
}

#[cfg(feature = "tracing")]
#[tokio::test]
async fn a_pause_left_ten_seconds_in_the_queue_tells_that_no_round_runs() {
    let (store, clock) = setup();
    let (fleet, _ledger, member) = member_of(Fleet::new(store), &clock);
    let link = Link { fleet: Arc::downgrade(&fleet.inner), member };
    let pause = |host: &str| {
        link.paused("http", host, None, Duration::from_secs(30), clock.now());
    };
    let first = events_of(async {
        pause("a.test");
        clock.advance(Duration::from_secs(10));
        pause("b.test");
        assert!(!fleet.inner.idle_told.load(Ordering::Relaxed), "ten seconds is not yet long");
        clock.advance(Duration::from_millis(1));
        pause("c.test");
    })
    .await;
    assert_eq!(first.matches("no round runs").count(), 1, "{first}");
    let then = events_of(async {
        pause("d.test");
        fleet.sync().await.unwrap();
        clock.advance(Duration::from_secs(11));
        pause("e.test");
    })
    .await;
    assert_eq!(then.matches("no round runs").count(), 0, "told once: {then}");
}

/// A store whose writes take 50 ms of Tokio's time, counting its reads
/// (one a round).
struct SlowWrites {
    inner: Arc<MemoryStore>,
    reads: Arc<AtomicUsize>,
}

impl FleetStore for SlowWrites {
    fn extend_pauses<'a>(
        &'a self,
        token: &'a str,
        pauses: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.inner.extend_pauses(token, pauses).await
        })
    }

    fn pauses_left<'a>(&'a self, hosts: &'a [FleetHost]) -> StoreFuture<'a, Vec<PauseLeft>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.pauses_left(hosts)
    }

    fn claim_probes<'a>(
        &'a self,
        token: &'a str,
        claims: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, Vec<ProbeClaim>> {
        self.inner.claim_probes(token, claims)
    }

    fn share_tallies<'a>(
        &'a self,
        member: &'a str,
        totals: &'a [(FleetHost, Tally)],
    ) -> StoreFuture<'a, Vec<Option<Vec<MemberTally>>>> {
        self.inner.share_tallies(member, totals)
    }
}

#[tokio::test(start_paused = true)]
async fn pauses_queued_faster_than_they_are_written_hold_no_round_back() {
    let (store, clock) = setup();
    let reads = Arc::new(AtomicUsize::new(0));
    let (fleet, ledger, _) =
        member_of(Fleet::new(SlowWrites { inner: store, reads: reads.clone() }), &clock);
    let _task = fleet.spawn(Duration::from_millis(100));
    // 25 pauses a second for two seconds, each written in 50 ms.
    for n in 0..50 {
        let host = Url::parse(&format!("http://h{n}.test/")).unwrap();
        assert!(ledger.pause(&host, Duration::from_secs(30), clock.now()));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let rounds = reads.load(Ordering::Relaxed);
    assert!(rounds >= 10, "two seconds at an interval of 100 ms: {rounds} round(s)");
    assert!(fleet.status().published >= 45, "{:?}", fleet.status());
}

#[tokio::test]
async fn a_host_first_called_since_the_last_round_is_heard_for() {
    let (store, clock) = setup();
    let a = process(&store, &clock, RetryConfig::default(), &[200, 429]);
    let b = process(&store, &clock, RetryConfig::default(), &[200]);
    assert_eq!(call(&a).await, Ok(200));
    // B's task: its first round finds no host in use; then it listens.
    let _task = b.fleet.spawn(HOUR);
    assert!(until(|| store.feed.receiver_count() == 1).await);
    assert_eq!(call(&b).await, Ok(200), "B calls the host: it is in B's books now");
    assert_eq!(call(&a).await, Ok(429));
    a.fleet.sync().await.unwrap();
    assert!(until(|| b.fleet.status().heard == 1).await, "{:?}", b.fleet.status());
    assert_eq!(call(&b).await, Err(Duration::from_secs(2)));
}

#[tokio::test]
async fn hashed_host_names_are_heard_from_the_feed() {
    let (store, clock) = setup();
    let hashed = |statuses: &[u16]| {
        let fleet = Fleet::with_hashed_hosts(store.clone(), [9; 16]);
        let server = Server::new(statuses);
        let middleware = RetryMiddleware::new(RetryConfig::default())
            .with_fleet(&fleet)
            .with_clock(clock.clone())
            .with_jitter_source(crate::jitter::FixedJitter::BOTTOM);
        let client =
            ClientBuilder::new(reqwest::Client::new()).with(middleware).with(server.clone());
        Process { client: client.build(), fleet, server }
    };
    let (a, b) = (hashed(&[200, 429]), hashed(&[200]));
    assert_eq!((call(&a).await, call(&b).await), (Ok(200), Ok(200)));
    let (_ta, _tb) = (a.fleet.spawn(HOUR), b.fleet.spawn(HOUR));
    assert!(until(|| b.fleet.status().connected && store.feed.receiver_count() == 2).await);
    assert_eq!(call(&a).await, Ok(429));
    assert!(until(|| b.fleet.status().heard == 1).await, "{:?}", b.fleet.status());
    assert_eq!(call(&b).await, Err(Duration::from_secs(2)));
    assert_eq!(a.fleet.status().received, 0, "A's own pause, back, is not another's");
}

#[tokio::test]
async fn names_are_listed_again_only_when_the_books_gained_or_lost_a_host() {
    let (store, clock) = setup();
    let b = process(&store, &clock, RetryConfig::default(), &[200]);
    assert_eq!(call(&b).await, Ok(200));
    b.fleet.sync().await.unwrap();
    let host = FleetHost::new("http", "api.fleet.test", None, None);
    // A list that misses a host of the same books is not made again for
    // the news (so a flood of names no host has costs a lookup each).
    lock(&b.fleet.inner.known).get_mut(&0).unwrap().names.clear();
    b.fleet.hear(news(host.as_str(), PauseLeft::Left(Duration::from_secs(2))));
    assert_eq!(b.fleet.status().heard, 0);
    // Books that changed are listed again.
    lock(&b.fleet.inner.known).get_mut(&0).unwrap().books = 0;
    b.fleet.hear(news(host.as_str(), PauseLeft::Left(Duration::from_secs(2))));
    assert_eq!(b.fleet.status().heard, 1);
}
