//! The fleet on a real `redis-server`: processes (middlewares, each with a
//! fleet and a store of its own) that share a host's pause through it, and
//! go on alone when it is gone.

use std::time::Duration;

use reqwest_middleware::ClientWithMiddleware;
use reqwest_safe_retry::clock::ManualClock;
use reqwest_safe_retry::fleet::{Fleet, RedisStore};
use reqwest_safe_retry::jitter::FixedJitter;
use reqwest_safe_retry::rate_limit::{HostPaused, ReturnIfPaused};
use reqwest_safe_retry::{RetryConfig, RetryMiddleware};
use wiremock::{MockServer, ResponseTemplate};

use crate::support::redis_server::RedisServer;
use crate::support::slow_proxy::SlowProxy;

use crate::support::*;

/// One process of a fleet named `prefix` on `redis`, calling through the
/// quick start's client on a manual clock, its waits unspread.
struct Process {
    client: ClientWithMiddleware,
    fleet: Fleet,
    clock: ManualClock,
}

fn process(redis: &RedisServer, prefix: &str) -> Process {
    process_on(RedisStore::new(&redis.url(), prefix).unwrap())
}

/// A process as [`process`] makes it, on a store that waits `patience`.
fn patient_process(url: &str, patience: Duration) -> Process {
    process_on(RedisStore::with_patience(url, "fleet-1", patience).unwrap())
}

fn process_on(store: RedisStore) -> Process {
    process_on_fleet(Fleet::new(store))
}

fn process_on_fleet(fleet: Fleet) -> Process {
    let clock = ManualClock::new();
    let client = RetryMiddleware::new(RetryConfig::default())
        .with_clock(clock.clone())
        .with_jitter_source(FixedJitter::BOTTOM)
        .with_fleet(&fleet)
        .client(reqwest::Client::builder())
        .unwrap()
        .build();
    Process { client, fleet, clock }
}

/// A call to `server` that returns a pause rather than wait for it.
async fn call(process: &Process, server: &MockServer) -> Result<u16, Duration> {
    let request = process.client.get(format!("{}/r", server.uri())).with_extension(ReturnIfPaused);
    match request.send().await {
        Ok(response) => Ok(response.status().as_u16()),
        Err(reqwest_middleware::Error::Middleware(error)) => {
            Err(error.downcast_ref::<HostPaused>().expect("a paused host").wait())
        }
        Err(error) => panic!("{error}"),
    }
}

/// A server answering 200, 200, then a 429 asking for 2 s, then 200.
async fn limiter() -> MockServer {
    let server = MockServer::start().await;
    let limited = ResponseTemplate::new(429).insert_header("retry-after", "2");
    let ok = ResponseTemplate::new(200);
    script(&server, "/r", vec![ok.clone(), ok.clone(), limited, ok]).await;
    server
}

/// A server answering 200, 200, then a 429 asking for 2 s twice (the
/// second for the probe), then 200.
async fn limiter_twice() -> MockServer {
    let server = MockServer::start().await;
    let limited = ResponseTemplate::new(429).insert_header("retry-after", "2");
    let ok = ResponseTemplate::new(200);
    script(&server, "/r", vec![ok.clone(), ok.clone(), limited.clone(), limited, ok]).await;
    server
}

/// `held` is a pause of at most 2 s and more than 1.5 s: Redis measures
/// the pause in real time, the processes on their manual clocks.
fn is_the_pause(held: Result<u16, Duration>) -> bool {
    held.is_err_and(|wait| wait > Duration::from_millis(1500) && wait <= Duration::from_secs(2))
}

#[tokio::test]
async fn a_pause_one_process_takes_holds_the_others_calls_through_redis() {
    let redis = RedisServer::start();
    let server = limiter().await;
    let (a, b) = (process(&redis, "fleet-1"), process(&redis, "fleet-1"));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    assert_eq!(call(&a, &server).await, Ok(429));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    let held = call(&b, &server).await;
    assert!(is_the_pause(held), "{held:?}");
    assert_eq!(hits(&server).await, 3, "B's call was not sent");
    assert_eq!((a.fleet.status().published, b.fleet.status().received), (1, 1));
    // The end: B's next call is its probe.
    b.clock.advance(Duration::from_secs(2));
    assert_eq!(call(&b, &server).await, Ok(200));
}

#[tokio::test]
async fn two_fleets_on_one_redis_share_nothing() {
    let redis = RedisServer::start();
    let server = limiter().await;
    let (a, b) = (process(&redis, "fleet-1"), process(&redis, "fleet-2"));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    assert_eq!(call(&a, &server).await, Ok(429));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!(call(&b, &server).await, Ok(200));
    assert_eq!(b.fleet.status().received, 0);
}

#[tokio::test]
async fn with_redis_gone_each_process_goes_on_alone_and_sharing_resumes_when_it_is_back() {
    let logs = capture_logs(tracing::Level::DEBUG);
    let mut redis = RedisServer::start();
    let server = limiter().await;
    let (a, b) = (process(&redis, "fleet-1"), process(&redis, "fleet-1"));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    redis.stop();
    assert_eq!(call(&a, &server).await, Ok(429));
    assert!(a.fleet.sync().await.is_err());
    assert!(b.fleet.sync().await.is_err());
    assert_eq!(call(&a, &server).await, Err(Duration::from_secs(2)), "A's own pause holds");
    assert_eq!(call(&b, &server).await, Ok(200), "B is as it would be alone");
    let status = a.fleet.status();
    assert!(!status.connected && status.failed_rounds == 1, "{status:?}");

    redis.restart();
    let limited = ResponseTemplate::new(429).insert_header("retry-after", "2");
    server.reset().await;
    script(&server, "/r", vec![limited, ResponseTemplate::new(200)]).await;
    a.clock.advance(Duration::from_secs(2));
    assert_eq!(call(&a, &server).await, Ok(429), "A's probe, asked to wait again");
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    let held = call(&b, &server).await;
    assert!(is_the_pause(held), "{held:?}");
    assert!(a.fleet.status().connected);
    // Each process: degraded once, reached again once; B took A's pause up.
    let text = logs.text();
    assert_eq!(text.matches("each process keeps its own pauses").count(), 2, "{text}");
    assert_eq!(text.matches("the fleet's store is reached").count(), 2, "{text}");
    assert_eq!(text.matches("a pause from the fleet").count(), 1, "{text}");
}

#[tokio::test]
async fn a_key_that_is_not_a_pause_is_ignored_and_counted() {
    let redis = RedisServer::start();
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[200]).await;
    let b = process(&redis, "fleet-1");
    assert_eq!(call(&b, &server).await, Ok(200));
    let host = format!("http://127.0.0.1:{}", server.address().port());
    let mut conn = raw(&redis).await;
    // No time-to-live: not a pause.
    let key = format!("fleet-1:pause:{{{host}}}");
    redis::cmd("SET").arg(&key).arg("forever").query_async::<()>(&mut conn).await.unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!(call(&b, &server).await, Ok(200));
    // An hour: over the cap of 30 s.
    redis::cmd("SET")
        .arg(&key)
        .arg(1)
        .arg("PX")
        .arg(3_600_000)
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!(call(&b, &server).await, Ok(200));
    let status = b.fleet.status();
    assert_eq!((status.ignored, status.received), (2, 0));
}

#[tokio::test]
async fn through_redis_one_process_claims_the_probe_and_the_others_hold_until_its_claim_ends() {
    let redis = RedisServer::start();
    let server = MockServer::start().await;
    let ok = ResponseTemplate::new(200);
    let limited = ResponseTemplate::new(429).insert_header("retry-after-ms", "300");
    script(&server, "/r", vec![ok.clone(), ok.clone(), limited, ok]).await;
    let (a, b) = (process(&redis, "fleet-1"), process(&redis, "fleet-1"));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    assert_eq!(call(&a, &server).await, Ok(429));
    // A pause of 300 ms ends before the round after next: A, first to
    // look, claims its probe for the pause and two seconds more.
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!((a.fleet.status().held_for_probe, b.fleet.status().held_for_probe), (0, 1));
    let held = call(&b, &server).await;
    let claim = Duration::from_millis(2300);
    assert!(held.is_err_and(|wait| wait > Duration::from_secs(2) && wait <= claim), "{held:?}");
    // A round more: A still holds its claim, and is not held by it.
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().held_for_probe, 0);
    a.clock.advance(Duration::from_millis(300));
    assert_eq!(call(&a, &server).await, Ok(200), "A's probe");
    assert_eq!(hits(&server).await, 4);
}

#[tokio::test]
async fn a_password_is_given_in_the_url_and_a_wrong_one_fails_the_round_not_a_call() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let server = limiter().await;
    let a = patient_process(&redis.url_with_password("s3cret"), Duration::from_secs(1));
    let b = patient_process(&redis.url_with_password("wrong"), Duration::from_secs(1));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    assert_eq!(call(&a, &server).await, Ok(429));
    a.fleet.sync().await.unwrap();
    assert!(b.fleet.sync().await.is_err(), "the wrong password");
    assert_eq!(call(&b, &server).await, Ok(200), "B goes on alone");
    assert_eq!(a.fleet.status().published, 1);
}

#[tokio::test]
async fn a_frozen_redis_fails_the_round_within_its_patience_and_calls_go_on_as_alone() {
    let redis = RedisServer::start();
    let server = limiter().await;
    let patience = Duration::from_millis(100);
    let (a, b) = (patient_process(&redis.url(), patience), patient_process(&redis.url(), patience));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    a.fleet.sync().await.unwrap();
    redis.freeze();
    assert_eq!(call(&a, &server).await, Ok(429));
    // The round gives up; it does not wait for the thaw.
    assert!(a.fleet.sync().await.is_err());
    assert_eq!(call(&a, &server).await, Err(Duration::from_secs(2)), "A's own pause holds");
    assert_eq!(call(&b, &server).await, Ok(200), "B goes on alone");
    redis.thaw();
    // The pause queued before was lost with the failed round; the next
    // 429 is shared again.
    let limited = ResponseTemplate::new(429).insert_header("retry-after", "2");
    server.reset().await;
    script(&server, "/r", vec![limited, ResponseTemplate::new(200)]).await;
    a.clock.advance(Duration::from_secs(2));
    assert_eq!(call(&a, &server).await, Ok(429));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert!(is_the_pause(call(&b, &server).await));
}

#[tokio::test]
async fn a_call_goes_while_a_round_is_stuck_on_a_frozen_redis() {
    let redis = RedisServer::start();
    let server = limiter().await;
    let a = patient_process(&redis.url(), Duration::from_secs(30));
    assert_eq!(call(&a, &server).await, Ok(200));
    a.fleet.sync().await.unwrap();
    redis.freeze();
    // A round in flight, waiting on Redis for as long as its patience.
    let fleet = a.fleet.clone();
    let round = tokio::spawn(async move { fleet.sync().await });
    tokio::task::yield_now().await;
    // Calls go meanwhile, the 429's pause taken on alone.
    assert_eq!(call(&a, &server).await, Ok(200));
    assert_eq!(call(&a, &server).await, Ok(429));
    assert_eq!(call(&a, &server).await, Err(Duration::from_secs(2)));
    assert!(!round.is_finished(), "the round still waits on Redis");
    redis.thaw();
    round.await.unwrap().unwrap();
}

/// A raw connection to `redis`, to read and write keys as a hostile or
/// careless neighbour would.
async fn raw(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// The key of the fleet's totals for `server`'s host in Redis.
fn tally_key(server: &MockServer) -> String {
    format!("fleet-1:tally:{{http://127.0.0.1:{}}}", server.address().port())
}

/// The fleet's totals for `server`'s host in Redis, every member's summed:
/// accepted, rejected.
async fn totals(redis: &RedisServer, server: &MockServer) -> (u64, u64) {
    let members: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(tally_key(server))
        .query_async(&mut raw(redis).await)
        .await
        .unwrap();
    members.values().fold((0, 0), |(accepted, rejected), value| {
        let numbers: Vec<u64> = value.split(' ').map(|n| n.parse().unwrap()).collect();
        (accepted + numbers[0], rejected + numbers[1])
    })
}

#[tokio::test]
async fn through_redis_each_process_s_answers_reach_the_others_throttles() {
    let redis = RedisServer::start();
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[200, 200, 200, 503, 200, 200]).await;
    let (a, b) = (process(&redis, "fleet-1"), process(&redis, "fleet-1"));
    // Each process's first answer puts the host in its books.
    assert_eq!(call(&a, &server).await, Ok(200));
    assert_eq!(call(&b, &server).await, Ok(200));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert_eq!(call(&a, &server).await, Ok(200));
    assert_eq!(call(&a, &server).await, Ok(200), "a 503, retried");
    assert_eq!(call(&b, &server).await, Ok(200));
    a.clock.advance(Duration::from_secs(1));
    b.clock.advance(Duration::from_secs(1));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    let (accepted, rejected) = totals(&redis, &server).await;
    assert_eq!((accepted, rejected), (3, 1), "the answers since each one's first, once each");
    let status = b.fleet.status();
    assert_eq!(status.pooled, 3, "B took in A's three: {status:?}");
    assert_eq!(a.fleet.status().pooled, 0, "A's own are not the fleet's to it");
}

/// Sets `member`'s value in the totals of `server`'s host, as anyone who
/// can write to Redis could.
async fn write_member(redis: &RedisServer, server: &MockServer, member: &str, value: &str) {
    redis::cmd("HSET")
        .arg(tally_key(server))
        .arg(member)
        .arg(value)
        .query_async::<()>(&mut raw(redis).await)
        .await
        .unwrap();
}

/// The wall-clock time in Redis's terms, milliseconds since the epoch.
fn wall_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
}

#[tokio::test]
async fn a_tally_key_of_another_type_or_not_counts_is_ignored_and_fails_no_round() {
    let redis = RedisServer::start();
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[200]).await;
    let a = process(&redis, "fleet-1");
    assert_eq!(call(&a, &server).await, Ok(200));
    let key = tally_key(&server);
    let mut raw = raw(&redis).await;
    redis::cmd("SET").arg(&key).arg("not a hash").query_async::<()>(&mut raw).await.unwrap();
    a.fleet.sync().await.unwrap();
    assert_eq!(a.fleet.status().ignored, 1, "a string where the totals go");
    redis::cmd("DEL").arg(&key).query_async::<()>(&mut raw).await.unwrap();
    // Members whose values are not counts, first read and read again
    // grown: left out, nothing pooled.
    for value in ["many 1 1", "1 -1 1", "1 1", "7"] {
        write_member(&redis, &server, &format!("garbage {value}"), value).await;
    }
    for _ in 0..2 {
        a.clock.advance(Duration::from_secs(1));
        assert_eq!(call(&a, &server).await, Ok(200));
        a.fleet.sync().await.unwrap();
        write_member(&redis, &server, "garbage 7", "9").await;
    }
    let status = a.fleet.status();
    assert_eq!((status.ignored, status.pooled), (1, 0), "{status:?}");
    // A probe's claim key of another type: the claim is unknown, the
    // round goes on.
    assert!(status.connected && status.failed_rounds == 0, "{status:?}");
    assert_eq!(call(&a, &server).await, Ok(200));
}

#[tokio::test]
async fn a_member_inflated_in_redis_is_believed_no_further_than_one_process_s_word() {
    let redis = RedisServer::start();
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[200]).await;
    let a = process(&redis, "fleet-1");
    assert_eq!(call(&a, &server).await, Ok(200));
    // A member no process is: first read, then grown by a million
    // rejections a second.
    write_member(&redis, &server, "made-up", &format!("0 0 {}", wall_ms())).await;
    a.fleet.sync().await.unwrap();
    for n in 1..=5 {
        a.clock.advance(Duration::from_secs(1));
        assert_eq!(call(&a, &server).await, Ok(200));
        let value = format!("0 {} {}", n * 1_000_000, wall_ms());
        write_member(&redis, &server, "made-up", &value).await;
        a.fleet.sync().await.unwrap();
    }
    // A had one answer a second: the made-up member is heard for four.
    let status = a.fleet.status();
    assert_eq!(status.pooled, 5 * 4, "{status:?}");
    // Its totals go back: ignored, and counted from anew.
    write_member(&redis, &server, "made-up", &format!("0 10 {}", wall_ms())).await;
    a.clock.advance(Duration::from_secs(1));
    a.fleet.sync().await.unwrap();
    assert_eq!((a.fleet.status().ignored, a.fleet.status().pooled), (1, 20));
    // A member whose last writing is older than the key's lifetime is
    // taken out of Redis.
    let old = wall_ms() - 11 * 60 * 1000;
    write_member(&redis, &server, "long gone", &format!("5 5 {old}")).await;
    a.clock.advance(Duration::from_secs(1));
    assert_eq!(call(&a, &server).await, Ok(200));
    a.fleet.sync().await.unwrap();
    let left: Vec<String> = redis::cmd("HKEYS")
        .arg(tally_key(&server))
        .query_async(&mut raw(&redis).await)
        .await
        .unwrap();
    assert!(!left.contains(&"long gone".to_owned()) && left.len() == 2, "{left:?}");
    assert_eq!(call(&a, &server).await, Ok(200), "and calls go as ever");
}

/// How many times Redis ran each command since its statistics were reset.
async fn commands(redis: &RedisServer) -> std::collections::HashMap<String, u64> {
    let info: String =
        redis::cmd("INFO").arg("commandstats").query_async(&mut raw(redis).await).await.unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|stat| stat.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn a_process_sends_five_commands_a_second_for_each_host_in_use() {
    let redis = RedisServer::start();
    let servers = [MockServer::start().await, MockServer::start().await];
    let a = process(&redis, "fleet-1");
    for server in &servers {
        script_statuses(server, "/r", &[200]).await;
        assert_eq!(call(&a, server).await, Ok(200));
    }
    redis::cmd("CONFIG").arg("RESETSTAT").query_async::<()>(&mut raw(&redis).await).await.unwrap();
    // Five seconds of rounds at the default interval, two hosts in use.
    for _ in 0..10 {
        a.fleet.sync().await.unwrap();
        a.clock.advance(Fleet::DEFAULT_INTERVAL);
    }
    let counts = commands(&redis).await;
    let count = |name: &str| counts.get(name).copied().unwrap_or_default();
    // Each round reads the hosts' pauses; every other one pools answers.
    assert_eq!(count("pttl"), 10 * 2, "{counts:?}");
    for pooling in ["hset", "pexpire", "hgetall"] {
        assert_eq!(count(pooling), 5 * 2, "{pooling}: {counts:?}");
    }
    let ours = ["pttl", "hset", "pexpire", "hgetall"];
    let total: u64 = ours.map(count).iter().sum();
    assert_eq!(total, 5 * 5 * 2, "5 × H a second: {counts:?}");
    // Nothing else, but this test's own and a connection's handshake.
    let theirs = ["info", "config", "client", "hello", "select"];
    let others: Vec<&String> = counts
        .keys()
        .filter(|name| !ours.contains(&name.as_str()))
        .filter(|name| !theirs.iter().any(|own| name.starts_with(own)))
        .collect();
    assert!(others.is_empty(), "{counts:?}");
}

#[tokio::test]
async fn a_fleet_that_hashes_host_names_writes_none_to_redis() {
    let redis = RedisServer::start();
    let server = limiter().await;
    let hashed = |key: [u8; 16]| {
        process_on_fleet(Fleet::with_hashed_hosts(
            RedisStore::new(&redis.url(), "fleet-1").unwrap(),
            key,
        ))
    };
    let (a, b) = (hashed([7; 16]), hashed([7; 16]));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    let client = redis::Client::open(redis.url()).unwrap();
    let mut news = client.get_async_pubsub().await.unwrap();
    news.subscribe("fleet-1:pauses").await.unwrap();
    assert_eq!(call(&a, &server).await, Ok(429));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert!(is_the_pause(call(&b, &server).await), "shared under the one key");
    let mut messages = news.on_message();
    let next = futures_util::StreamExt::next(&mut messages);
    let published = tokio::time::timeout(Duration::from_secs(10), next).await.unwrap().unwrap();
    let published: String = published.get_payload().unwrap();
    assert!(published.contains(" host:") && !published.contains("127.0.0.1"), "{published}");
    let keys: Vec<String> =
        redis::cmd("KEYS").arg("*").query_async(&mut raw(&redis).await).await.unwrap();
    assert!(!keys.is_empty());
    assert!(
        keys.iter().all(|key| key.starts_with("fleet-1:") && !key.contains("127.0.0.1")),
        "{keys:?}"
    );
}

/// Waits, yielding, until `done` holds: at most thirty seconds (in real
/// time: Redis and the fleet's tasks run in it, on a machine that may be
/// busy with other tests), then fails with `what`.
async fn until<F: std::future::Future<Output = bool>>(what: &str, done: impl Fn() -> F) {
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(std::time::Instant::now() < give_up, "never: {what}");
        tokio::task::yield_now().await;
    }
}

/// The processes listening to the pauses of the fleet named `prefix`.
async fn listening(redis: &RedisServer, prefix: &str) -> u64 {
    let channel = format!("{prefix}:pauses");
    let reply: Result<(String, u64), _> =
        redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query_async(&mut raw(redis).await).await;
    reply.map_or(0, |(_, count)| count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_reaches_every_process_the_moment_it_is_written_and_again_after_a_restart() {
    let mut redis = RedisServer::start();
    let server = limiter_twice().await;
    let (a, b) = (process(&redis, "fleet-1"), process(&redis, "fleet-1"));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    // Rounds an hour apart: after each task's first, none runs in this test.
    let hour = Duration::from_secs(3600);
    let (_ta, _tb) = (a.fleet.spawn(hour), b.fleet.spawn(hour));
    until("both listen", || async { listening(&redis, "fleet-1").await == 2 }).await;
    until("B's first round", || async { b.fleet.status().connected }).await;
    assert_eq!(call(&a, &server).await, Ok(429));
    until("B hears A's pause", || async { b.fleet.status().heard == 1 }).await;
    let held = call(&b, &server).await;
    assert!(is_the_pause(held), "{held:?}");
    assert_eq!(hits(&server).await, 3, "B's call was not sent");

    // A restart ends the subscriptions; each process subscribes again.
    redis.stop();
    redis.restart();
    until("both listen again", || async { listening(&redis, "fleet-1").await == 2 }).await;
    b.clock.advance(Duration::from_secs(2));
    a.clock.advance(Duration::from_secs(2));
    assert_eq!(call(&a, &server).await, Ok(429), "A's probe, asked to wait again");
    until("B hears A's new pause", || async { b.fleet.status().heard == 2 }).await;
    let held = call(&b, &server).await;
    assert!(is_the_pause(held), "{held:?}");
    assert_eq!(b.fleet.status().received, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_falls_silent_is_pinged_found_gone_and_subscribed_again() {
    let redis = RedisServer::start();
    let server = limiter_twice().await;
    let (proxy, url) = proxied(&redis).await;
    // B reaches Redis through the proxy, with a patience of 500 ms: its
    // quiet feed is pinged after 2.5 s. (A shorter patience lets a loaded
    // machine's slow pong end the feed before A's pause is published.)
    let (a, b) = (process(&redis, "fleet-1"), patient_process(&url, Duration::from_millis(500)));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    let _tb = b.fleet.spawn(Duration::from_secs(3600));
    until("B listens", || async { listening(&redis, "fleet-1").await == 1 }).await;
    assert_eq!(call(&a, &server).await, Ok(429));
    a.fleet.sync().await.unwrap();
    until("B hears A's pause", || async { b.fleet.status().heard == 1 }).await;
    // The connection stays open, and nothing comes back: a partition. The
    // ping finds it, and B leaves the connection (the proxy closes it).
    proxy.hold();
    until("the feed is found gone", || async { listening(&redis, "fleet-1").await == 0 }).await;
    proxy.release();
    until("B listens again", || async { listening(&redis, "fleet-1").await == 1 }).await;
    // It hears A's next pause, with no round of its own.
    a.clock.advance(Duration::from_secs(2));
    b.clock.advance(Duration::from_secs(2));
    assert_eq!(call(&a, &server).await, Ok(429), "A's probe, asked to wait again");
    a.fleet.sync().await.unwrap();
    until("B hears A's next pause", || async { b.fleet.status().heard == 2 }).await;
    assert!(is_the_pause(call(&b, &server).await));
}

/// A proxy before `redis`, and the URL to reach Redis through it.
async fn proxied(redis: &RedisServer) -> (SlowProxy, String) {
    let proxy = SlowProxy::start(redis.port(), Duration::ZERO).await;
    let url = format!("redis://127.0.0.1:{}/", proxy.port());
    (proxy, url)
}

#[tokio::test]
async fn through_a_slow_redis_a_pause_is_shared_as_ever() {
    let redis = RedisServer::start();
    let server = limiter().await;
    let (proxy, url) = proxied(&redis).await;
    let patience = Duration::from_secs(5);
    let (a, b) = (patient_process(&url, patience), patient_process(&url, patience));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    assert_eq!(call(&a, &server).await, Ok(429));
    // Each round's replies are held until the round is under way and
    // waiting on them, then let go: a store as slow as it likes, within
    // the patience.
    for fleet in [&a.fleet, &b.fleet] {
        proxy.hold();
        let round = tokio::spawn({
            let fleet = fleet.clone();
            async move { fleet.sync().await }
        });
        proxy.reply_held().await;
        assert_eq!(call(&b, &server).await, Ok(200), "B's calls go while a round waits");
        proxy.release();
        round.await.unwrap().unwrap();
    }
    let held = call(&b, &server).await;
    assert!(is_the_pause(held), "{held:?}");
}

#[tokio::test]
async fn through_a_redis_that_answers_nothing_rounds_fail_within_their_patience_and_calls_go_on() {
    let redis = RedisServer::start();
    let server = limiter().await;
    let (proxy, url) = proxied(&redis).await;
    let patience = Duration::from_millis(200);
    let (a, b) = (patient_process(&url, patience), patient_process(&url, patience));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    a.fleet.sync().await.unwrap();
    // From now on nothing comes back.
    proxy.hold();
    assert_eq!(call(&a, &server).await, Ok(429));
    let round = tokio::spawn({
        let fleet = a.fleet.clone();
        async move { fleet.sync().await }
    });
    proxy.reply_held().await;
    // A round is under way, waiting on Redis, while the calls go.
    assert_eq!(call(&a, &server).await, Err(Duration::from_secs(2)), "A's own pause holds");
    assert_eq!(call(&b, &server).await, Ok(200), "B goes on alone");
    assert!(round.await.unwrap().is_err(), "the round gave up at its patience");
    assert!(b.fleet.sync().await.is_err());
    let status = a.fleet.status();
    assert!(!status.connected && status.failed_rounds == 1, "{status:?}");
}

#[cfg(feature = "redis-tls")]
#[tokio::test]
async fn a_pause_is_shared_over_tls_with_a_private_root() {
    let redis = RedisServer::start_tls();
    let server = limiter().await;
    let root = include_bytes!("fixtures/localhost.crt.pem");
    let store = || RedisStore::with_root_certificate(&redis.tls_url(), "fleet-1", root).unwrap();
    let (a, b) = (process_on(store()), process_on(store()));
    assert_eq!((call(&a, &server).await, call(&b, &server).await), (Ok(200), Ok(200)));
    assert_eq!(call(&a, &server).await, Ok(429));
    a.fleet.sync().await.unwrap();
    b.fleet.sync().await.unwrap();
    assert!(is_the_pause(call(&b, &server).await));
    // With the system's roots alone, the private certificate is refused:
    // the round fails, the call goes on.
    let untrusting = process_on(RedisStore::new(&redis.tls_url(), "fleet-1").unwrap());
    assert_eq!(call(&untrusting, &server).await, Ok(200));
    assert!(untrusting.fleet.sync().await.is_err());
}
