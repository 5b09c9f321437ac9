//! The fleet's store on Redis: one key per host, whose time-to-live is
//! what is left of the host's pause.
//!
//! - **Keys.** `{prefix}:pause:{scheme://name:port}`: the prefix names the
//!   fleet (two fleets on one Redis share nothing), and the braces make the
//!   host a hash tag: a host's pause and probe keys share one slot.
//! - **Writing a pause** is `SET key 1 NX PX ms` then `PEXPIRE key ms GT`:
//!   a new key takes the pause, and an existing one is extended, never
//!   shortened. No script, so a restarted Redis needs nothing loaded again.
//! - **Reading** is `PTTL key`: the time left, measured by Redis, so the
//!   processes' clocks never need to agree. A key with no time-to-live (one
//!   something else wrote) is garbage, and ignored.
//! - **News of a pause.** Each pause written is also published on the
//!   channel `{prefix}:pauses`, as `ms name`; every process subscribes to
//!   it on a connection of its own, and takes the pause up the moment it
//!   is written. A message it cannot read is ignored. A quiet subscription
//!   is pinged every five patiences (5 s by default), and made again when
//!   it fails.
//! - **Pooling answers** is a hash per host, `{prefix}:tally:{host}`,
//!   with a field for each member of the fleet, named for it, holding
//!   `accepted rejected written-at`: its running totals of answers, and
//!   the wall-clock time it wrote them. Each member writes its own with
//!   `HSET` and reads every member's back with `HGETALL` in the same
//!   pipeline; writing the same totals again changes nothing. No bucket:
//!   the key lives ten minutes past the last writing, and a member whose
//!   last writing is older than that is taken out with `HDEL`, so members
//!   that come and go leave no trail (only that needs the machines' clocks
//!   to agree, to within minutes). A key of another type fails its own
//!   commands alone and is ignored; a member's value that is not three
//!   counts leaves that member out of the reading.
//!
//! Each round is one pipeline of writes and, per middleware in the fleet,
//! one of reads and one of probe claims, each waiting at most a second (or
//! the patience given) for its reply: a Redis that is slow or gone fails
//! the round, never a call.
//!
//! `PEXPIRE … GT` needs Redis 7.0 or later (or a store that speaks it,
//! such as Valkey). The client is a single node's, not a cluster's: the
//! hash tags keep each host's keys in one slot for a proxy that routes by
//! slot, but a round's pipeline spans many hosts.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{
    FleetHost, FleetStore, Heard, MemberTally, News, PauseLeft, ProbeClaim, StoreError,
    StoreFuture, Tally,
};

/// The longest a round waits for Redis to connect or to answer.
const PATIENCE: Duration = Duration::from_secs(1);

/// What begins a certificate in a PEM.
#[cfg(feature = "redis-tls")]
const CERTIFICATE: &[u8] = b"-----BEGIN CERTIFICATE-----";

/// How long a host's totals of answers are kept after a process last
/// added to them.
const TALLY_KEPT: Duration = Duration::from_secs(600);

/// A fleet's store on Redis (the `redis` feature).
///
/// ```no_run
/// # async fn run() -> Result<(), reqwest_safe_retry::fleet::StoreError> {
/// use reqwest_safe_retry::fleet::{Fleet, RedisStore};
///
/// let store = RedisStore::new("redis://:password@127.0.0.1:6379/0", "billing-workers")?;
/// let fleet = Fleet::new(store);
/// # Ok(())
/// # }
/// ```
pub struct RedisStore {
    client: redis::Client,
    connection: ConnectionManager,
    prefix: String,
    patience: Duration,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on the Redis at `url` (`redis://[:password@]host:port/db`,
    /// `rediss://` with the `redis-tls` feature, or a Unix socket's
    /// `redis+unix://`), its keys under `prefix`, the
    /// fleet's name. It connects when a round first needs it, and again
    /// whenever the connection is lost: a Redis that is down when the
    /// process starts is taken up when it comes.
    ///
    /// # Errors
    ///
    /// When `url` is not a Redis URL.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn new(url: &str, prefix: &str) -> Result<Self, StoreError> {
        Self::with_patience(url, prefix, PATIENCE)
    }

    /// As [`new`](Self::new), waiting at most `patience` (rather than a
    /// second) for Redis to connect and for each reply.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new).
    pub fn with_patience(url: &str, prefix: &str, patience: Duration) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(bad_url)?;
        Self::on(client, prefix, patience)
    }

    /// As [`new`](Self::new), for a `rediss://` URL whose server's
    /// certificate chains to `root_pem` (PEM) rather than to the system's
    /// roots: a private certificate authority. (The `redis-tls` feature;
    /// with it, [`new`](Self::new) takes `rediss://` URLs with the system's
    /// roots.)
    ///
    /// # Errors
    ///
    /// When `url` is not a Redis URL, or `root_pem` holds no certificate.
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new).
    #[cfg(feature = "redis-tls")]
    pub fn with_root_certificate(
        url: &str,
        prefix: &str,
        root_pem: &[u8],
    ) -> Result<Self, StoreError> {
        // The client takes a PEM without a certificate, and would then trust
        // none: every round would fail its handshake, saying nothing of why.
        if !root_pem.windows(CERTIFICATE.len()).any(|window| window == CERTIFICATE) {
            return Err(StoreError::new("no PEM certificate in the root given", None));
        }
        let certificates =
            redis::TlsCertificates { client_tls: None, root_cert: Some(root_pem.to_vec()) };
        let client = redis::Client::build_with_tls(url, certificates).map_err(bad_url)?;
        Self::on(client, prefix, PATIENCE)
    }

    /// A store on `client`, lazily connected.
    fn on(client: redis::Client, prefix: &str, patience: Duration) -> Result<Self, StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(patience))
            .set_response_timeout(Some(patience))
            .set_number_of_retries(1)
            .set_max_delay(patience);
        let connection =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(bad_url)?;
        Ok(Self { client, connection, prefix: prefix.to_owned(), patience })
    }

    /// The channel every pause written is published on.
    fn channel(&self) -> String {
        format!("{}:pauses", self.prefix)
    }

    /// The key of `host`'s pause.
    fn key(&self, host: &FleetHost) -> String {
        format!("{}:pause:{{{}}}", self.prefix, host.as_str())
    }

    /// The key of the claim on `host`'s probe: in the pause's slot.
    fn probe_key(&self, host: &FleetHost) -> String {
        format!("{}:probe:{{{}}}", self.prefix, host.as_str())
    }

    /// The key of `host`'s running totals of answers: in the pause's slot.
    fn tally_key(&self, host: &FleetHost) -> String {
        format!("{}:tally:{{{}}}", self.prefix, host.as_str())
    }
}

impl RedisStore {
    /// Sends `pipe`; once more if the connection had been lost, which the
    /// first try after Redis comes back meets (the manager reconnects
    /// then). Not after a timeout: the commands may have been applied, and
    /// a pause written again later would be a longer one.
    async fn query<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        match pipe.query_async(&mut connection).await {
            Err(error)
                if !error.is_timeout()
                    && (error.is_connection_dropped() || error.is_connection_refusal()) =>
            {
                pipe.query_async(&mut connection).await.map_err(failed)
            }
            reply => reply.map_err(failed),
        }
    }
}

/// A URL, or TLS settings, the client refused.
fn bad_url(error: redis::RedisError) -> StoreError {
    StoreError::new("bad Redis URL", Some(error.into()))
}

/// A failed command, as the fleet reports it.
fn failed(error: redis::RedisError) -> StoreError {
    StoreError::new("Redis", Some(error.into()))
}

/// Milliseconds of `left`, at least one (a pause is never written as
/// none) and at most what Redis takes.
fn millis(left: Duration) -> i64 {
    i64::try_from(left.as_millis()).unwrap_or(i64::MAX).clamp(1, i64::MAX / 2)
}

/// A `PTTL` reply as a pause: `-2` no key, `-1` a key with no
/// time-to-live, else milliseconds.
fn pause_left(reply: i64) -> PauseLeft {
    match reply {
        -2 | 0 => PauseLeft::None,
        ms if ms > 0 => PauseLeft::Left(Duration::from_millis(ms.unsigned_abs())),
        _ => PauseLeft::Garbage,
    }
}

/// How many patiences a subscription may be quiet before it is pinged
/// (5 s, by default): a connection lost without a word (a partition, a
/// Redis stopped) is found in about this time, and subscribed again.
const KEEPALIVE: u32 = 5;

/// A pause as it is published: its milliseconds, its writer's token,
/// then the host's name.
fn news(ms: i64, token: &str, host: &FleetHost) -> String {
    format!("{ms} {token} {}", host.as_str())
}

/// A published pause as the fleet hears it, or garbage for a message that
/// is not one.
fn heard(payload: &[u8]) -> News<'_> {
    let read = || {
        let (ms, rest) = std::str::from_utf8(payload).ok()?.split_once(' ')?;
        let (writer, host) = rest.split_once(' ')?;
        let ms: u64 = ms.parse().ok()?;
        Some(News { host, left: PauseLeft::Left(Duration::from_millis(ms)), writer })
    };
    read().unwrap_or(News { host: "", left: PauseLeft::Garbage, writer: "" })
}

impl RedisStore {
    /// Subscribes to the fleet's channel and tells `heard` of each pause
    /// published on it, until the subscription fails.
    async fn subscribe(&self, heard: &Heard) -> Result<(), StoreError> {
        use futures_util::StreamExt;
        let patient =
            |what: &'static str| move |_: tokio::time::error::Elapsed| StoreError::new(what, None);
        let connecting = self.client.get_async_pubsub();
        let pubsub = tokio::time::timeout(self.patience, connecting)
            .await
            .map_err(patient("Redis did not connect in time"))?
            .map_err(failed)?;
        let (mut sink, mut messages) = pubsub.split();
        tokio::time::timeout(self.patience, sink.subscribe(self.channel()))
            .await
            .map_err(patient("Redis did not subscribe in time"))?
            .map_err(failed)?;
        #[cfg(feature = "tracing")]
        tracing::debug!(target: super::TARGET, "subscribed to the fleet's feed of pauses");
        loop {
            match tokio::time::timeout(self.patience.saturating_mul(KEEPALIVE), messages.next())
                .await
            {
                Ok(Some(message)) => {
                    heard(self::heard(message.get_payload_bytes()));
                }
                Ok(None) => return Err(StoreError::new("Redis ended the subscription", None)),
                Err(_) => tokio::time::timeout(self.patience, sink.ping::<()>())
                    .await
                    .map_err(patient("Redis did not answer a ping in time"))?
                    .map_err(failed)?,
            }
        }
    }
}

impl FleetStore for RedisStore {
    fn listen<'a>(&'a self, heard: &'a Heard) -> StoreFuture<'a, ()> {
        Box::pin(self.subscribe(heard))
    }

    fn extend_pauses<'a>(
        &'a self,
        token: &'a str,
        pauses: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut pipe = redis::pipe();
            for (host, left) in pauses {
                let (key, ms) = (self.key(host), millis(*left));
                pipe.cmd("SET").arg(&key).arg(1).arg("NX").arg("PX").arg(ms).ignore();
                pipe.cmd("PEXPIRE").arg(&key).arg(ms).arg("GT").ignore();
                pipe.cmd("PUBLISH").arg(self.channel()).arg(news(ms, token, host)).ignore();
            }
            self.query::<()>(&pipe).await
        })
    }

    fn pauses_left<'a>(&'a self, hosts: &'a [FleetHost]) -> StoreFuture<'a, Vec<PauseLeft>> {
        Box::pin(async move {
            let mut pipe = redis::pipe();
            for host in hosts {
                pipe.pttl(self.key(host));
            }
            let replies: Vec<i64> = self.query(&pipe).await?;
            if replies.len() != hosts.len() {
                return Err(StoreError::new("Redis answered a pipeline short", None));
            }
            Ok(replies.into_iter().map(pause_left).collect())
        })
    }

    fn claim_probes<'a>(
        &'a self,
        token: &'a str,
        claims: &'a [(FleetHost, Duration)],
    ) -> StoreFuture<'a, Vec<ProbeClaim>> {
        Box::pin(async move {
            let mut pipe = redis::pipe();
            // A key of another type fails its `GET`, read as unknown.
            pipe.ignore_errors();
            for (host, lasting) in claims {
                let key = self.probe_key(host);
                pipe.cmd("SET").arg(&key).arg(token).arg("NX").arg("PX").arg(millis(*lasting));
                pipe.cmd("GET").arg(&key);
                pipe.cmd("PTTL").arg(&key);
            }
            let replies: Vec<redis::Value> = self.query(&pipe).await?;
            if replies.len() != claims.len().saturating_mul(3) {
                return Err(StoreError::new("Redis answered a pipeline short", None));
            }
            let claim = |replies: &[redis::Value]| claim(token, &replies[1], &replies[2]);
            Ok(replies.chunks_exact(3).map(claim).collect())
        })
    }

    fn share_tallies<'a>(
        &'a self,
        member: &'a str,
        totals: &'a [(FleetHost, Tally)],
    ) -> StoreFuture<'a, Vec<Option<Vec<MemberTally>>>> {
        Box::pin(async move {
            let now = wall_millis();
            let mut pipe = redis::pipe();
            // A key something else wrote fails its own commands, not the
            // round's.
            pipe.ignore_errors();
            for (host, tally) in totals {
                let key = self.tally_key(host);
                let value = format!("{} {} {now}", tally.accepted, tally.rejected);
                pipe.cmd("HSET").arg(&key).arg(member).arg(value).ignore();
                pipe.cmd("PEXPIRE").arg(&key).arg(millis(TALLY_KEPT)).ignore();
                pipe.cmd("HGETALL").arg(&key);
            }
            let replies: Vec<redis::Value> = self.query(&pipe).await?;
            if replies.len() != totals.len() {
                return Err(StoreError::new("Redis answered a pipeline short", None));
            }
            let mut quiet = redis::pipe();
            let mut read = Vec::with_capacity(totals.len());
            for ((host, _), reply) in totals.iter().zip(&replies) {
                let Some((members, gone)) = members(reply, now) else {
                    read.push(None);
                    continue;
                };
                if !gone.is_empty() {
                    quiet.cmd("HDEL").arg(self.tally_key(host)).arg(gone).ignore();
                }
                read.push(Some(members));
            }
            // Members quiet for the key's lifetime are taken out; that this
            // fails matters to no reading.
            if quiet.cmd_iter().next().is_some() {
                let _ = self.query::<()>(&quiet).await;
            }
            Ok(read)
        })
    }
}

/// This machine's wall-clock time, in milliseconds since the Unix epoch
/// (0 before it).
fn wall_millis() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// The members' totals in a host's hash as `HGETALL` answers it at `now`
/// (wall-clock milliseconds), and the members gone quiet: those whose last
/// writing is older than the key's lifetime, left out. `None` for a reply
/// that is not a hash (a key of another type). A member whose value is not
/// three counts of zero or more is left out.
fn members(reply: &redis::Value, now: u64) -> Option<(Vec<MemberTally>, Vec<&str>)> {
    let pairs: Vec<(&redis::Value, &redis::Value)> = match reply {
        redis::Value::Map(pairs) => pairs.iter().map(|(field, value)| (field, value)).collect(),
        redis::Value::Array(items) if items.len() % 2 == 0 => {
            items.chunks_exact(2).map(|pair| (&pair[0], &pair[1])).collect()
        }
        _ => return None,
    };
    let kept = millis(TALLY_KEPT).unsigned_abs();
    let (mut members, mut gone) = (Vec::new(), Vec::new());
    for (field, value) in pairs {
        let (Some(member), Some((tally, at))) = (text(field), text(value).and_then(totals)) else {
            continue;
        };
        if now.saturating_sub(at) > kept {
            gone.push(member);
        } else {
            members.push(MemberTally { member: member.to_owned(), tally });
        }
    }
    Some((members, gone))
}

/// A member's value in a host's hash: `accepted rejected written-at`.
fn totals(value: &str) -> Option<(Tally, u64)> {
    let mut numbers = value.split(' ').map(|n| n.parse::<u64>().ok());
    let (Some(accepted), Some(rejected), Some(at), None) =
        (numbers.next()?, numbers.next()?, numbers.next()?, numbers.next())
    else {
        return None;
    };
    Some((Tally { accepted, rejected }, at))
}

/// A reply's text, if it is a string.
fn text(value: &redis::Value) -> Option<&str> {
    match value {
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        redis::Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

/// A claim as the replies to `GET` and `PTTL` after `SET … NX` tell it:
/// won if the key holds `token` (set now, or by this process before),
/// lost to another holder for the time left, unknown otherwise.
fn claim(token: &str, holder: &redis::Value, ttl: &redis::Value) -> ProbeClaim {
    let held_by = match holder {
        redis::Value::BulkString(bytes) => Some(bytes.as_slice()),
        redis::Value::SimpleString(text) => Some(text.as_bytes()),
        _ => None,
    };
    match (held_by, ttl) {
        (Some(holder), _) if holder == token.as_bytes() => ProbeClaim::Won,
        (Some(_), redis::Value::Int(ms)) => match pause_left(*ms) {
            PauseLeft::Left(left) => ProbeClaim::Lost(left),
            PauseLeft::None | PauseLeft::Garbage => ProbeClaim::Unknown,
        },
        _ => ProbeClaim::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_reply_reads_as_a_pause_and_anything_else_as_none_or_garbage() {
        assert_eq!(pause_left(-2), PauseLeft::None);
        assert_eq!(pause_left(0), PauseLeft::None);
        assert_eq!(pause_left(1500), PauseLeft::Left(Duration::from_millis(1500)));
        assert_eq!(pause_left(-1), PauseLeft::Garbage, "a key with no end");
        assert_eq!(pause_left(-7), PauseLeft::Garbage);
    }

    #[test]
    fn a_claim_is_won_by_its_holder_lost_to_another_s_live_key_and_unknown_otherwise() {
        use redis::Value;
        let mine = Value::BulkString(b"ab12".to_vec());
        let theirs = Value::BulkString(b"cd34".to_vec());
        assert_eq!(claim("ab12", &mine, &Value::Int(900)), ProbeClaim::Won);
        let simple = Value::SimpleString("ab12".into());
        assert_eq!(claim("ab12", &simple, &Value::Int(900)), ProbeClaim::Won);
        let lost = claim("ab12", &theirs, &Value::Int(900));
        assert_eq!(lost, ProbeClaim::Lost(Duration::from_millis(900)));
        assert_eq!(claim("ab12", &theirs, &Value::Int(-1)), ProbeClaim::Unknown, "no end");
        assert_eq!(claim("ab12", &theirs, &Value::Int(-2)), ProbeClaim::Unknown, "gone");
        assert_eq!(claim("ab12", &Value::Nil, &Value::Int(900)), ProbeClaim::Unknown);
        assert_eq!(claim("ab12", &Value::Int(3), &Value::Int(900)), ProbeClaim::Unknown);
    }

    #[test]
    fn a_hash_reads_as_its_members_counts_and_anything_else_as_none() {
        use redis::Value;
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let now = 1_000_000_000;
        let (fresh, old) = (format!("4 2 {}", now - 1_000), format!("9 9 {}", now - 601_000));
        let items = [
            ("m1", fresh.as_str()),
            ("m2", "1 -3 5"),
            ("m3", "lots 1 5"),
            ("m4", old.as_str()),
            ("m5", "7 0 999999000"),
            ("m6", "7 0"),
            ("m7", "7 0 5 5"),
        ];
        let flat: Vec<Value> = items.iter().flat_map(|(f, v)| [bulk(f), bulk(v)]).collect();
        let array = Value::Array(flat.clone());
        let (members, gone) = super::members(&array, now).unwrap();
        let read: Vec<_> = members
            .iter()
            .map(|m| (m.member.as_str(), m.tally.accepted, m.tally.rejected))
            .collect();
        assert_eq!(read, [("m1", 4, 2), ("m5", 7, 0)], "m4 gone quiet; the rest not counts");
        assert_eq!(gone, ["m4"]);
        let map = Value::Map(flat.chunks_exact(2).map(|p| (p[0].clone(), p[1].clone())).collect());
        assert_eq!(super::members(&map, now).unwrap().0, members, "RESP3's map alike");
        assert!(super::members(&Value::Array(Vec::new()), now).unwrap().0.is_empty());
        assert!(super::members(&Value::Int(3), now).is_none());
        assert!(super::members(&Value::Array(vec![bulk("m1")]), now).is_none(), "odd");
    }

    #[test]
    fn a_published_pause_is_heard_as_written_and_anything_else_as_garbage() {
        let host = FleetHost::new("https", "api.test", None, None);
        let news = news(1500, "ab12", &host);
        assert_eq!(news, "1500 ab12 https://api.test:443");
        let left = PauseLeft::Left(Duration::from_millis(1500));
        let expected = News { host: "https://api.test:443", left, writer: "ab12" };
        assert_eq!(heard(news.as_bytes()), expected);
        let garbage: [&[u8]; 6] =
            [b"", b"1500", b"1500 ab12", b"-5 ab12 https://a.test:443", b"soon a b", b"\xff a b"];
        for garbage in garbage {
            assert_eq!(heard(garbage).left, PauseLeft::Garbage, "{garbage:?}");
        }
    }

    #[test]
    fn a_pause_is_written_in_whole_milliseconds_of_at_least_one() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_millis(2000)), 2000);
        assert_eq!(millis(Duration::MAX), i64::MAX / 2);
    }

    #[tokio::test]
    async fn a_host_s_key_is_its_own_hash_tag_under_the_fleet_s_prefix() {
        let store = RedisStore::new("redis://127.0.0.1:1/", "workers").unwrap();
        let host = FleetHost::new("https", "api.test", None, None);
        assert_eq!(store.key(&host), "workers:pause:{https://api.test:443}");
        assert_eq!(store.probe_key(&host), "workers:probe:{https://api.test:443}");
        assert_eq!(store.tally_key(&host), "workers:tally:{https://api.test:443}");
        assert!(RedisStore::new("not a url", "workers").is_err());
        // TLS only with the feature that brings it.
        let tls = RedisStore::new("rediss://127.0.0.1:1/", "workers");
        assert_eq!(tls.is_ok(), cfg!(feature = "redis-tls"));
        #[cfg(feature = "redis-tls")]
        for pem in [&b""[..], b"not a certificate\n"] {
            let store = RedisStore::with_root_certificate("rediss://127.0.0.1:1/", "w", pem);
            assert!(store.is_err(), "{}", String::from_utf8_lossy(pem));
        }
        assert!(format!("{store:?}").contains("workers"));
    }
}
