//! A hostile member of the fleet: it writes the store's keys for the
//! server's host, and its channel, as anything that can reach the store
//! could. Each play is one kind of hostility.

use std::time::{Duration, Instant};

use crate::resp::Resp;

/// What the hostile member writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Play {
    /// The host's keys as other types: a pause that is a hash or a string
    /// with no end, a claim that is a list, totals that are a string.
    Types,
    /// A member's totals below zero, at `i64::MAX`, and past `u64::MAX`.
    Extremes,
    /// The pause channel flooded: garbage, pauses over the cap, pauses of
    /// hosts nobody calls.
    Flood,
    /// A made-up member whose rejected answers grow by half a million
    /// each time it is written.
    Inflated,
    /// A short pause, and a claim on its probe that lasts 31 s.
    LongClaim,
    /// A 29 s pause, written again as it ends.
    Renewed,
}

impl Play {
    pub(crate) const ALL: [Play; 6] =
        [Play::Types, Play::Extremes, Play::Flood, Play::Inflated, Play::LongClaim, Play::Renewed];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Play::Types => "keys of the wrong type",
            Play::Extremes => "a member's totals below zero, at i64::MAX, past u64::MAX",
            Play::Flood => "the pause channel flooded",
            Play::Inflated => "a made-up member's rejections inflated",
            Play::LongClaim => "a probe claim of 31 s",
            Play::Renewed => "a 29 s pause renewed",
        }
    }

    /// Whether what it writes is out of bounds or garbage (rather than a
    /// word a member could plausibly have said).
    pub(crate) fn garbage(self) -> bool {
        matches!(self, Play::Types | Play::Extremes | Play::Flood | Play::Inflated)
    }
}

/// The words of a command.
fn command(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// Plays `play` on the Redis at `port` for the fleet `prefix` and the
/// server's `host` (`http://127.0.0.1:port`), from `start` for `length`
/// milliseconds.
pub(crate) async fn play(
    play: Play,
    port: u16,
    prefix: String,
    host: String,
    start: Instant,
    length: u64,
) {
    let Ok(mut redis) = Resp::connect(port).await else { return };
    let pause = format!("{prefix}:pause:{{{host}}}");
    let probe = format!("{prefix}:probe:{{{host}}}");
    let tally = format!("{prefix}:tally:{{{host}}}");
    let channel = format!("{prefix}:pauses");
    let end = start + Duration::from_millis(length);
    let at = |ms: u64| tokio::time::sleep_until((start + Duration::from_millis(ms)).into());
    let mut round: u64 = 0;
    while Instant::now() < end {
        let commands: Vec<Vec<String>> = match play {
            Play::Types => match round % 3 {
                0 => vec![
                    command(&["DEL", &pause, &probe, &tally]),
                    command(&["HSET", &pause, "a", "b"]),
                    command(&["RPUSH", &probe, "x"]),
                    command(&["SET", &tally, "garbage"]),
                ],
                1 => vec![
                    command(&["DEL", &pause, &probe, &tally]),
                    command(&["SET", &pause, "forever"]),
                    command(&["HSET", &probe, "a", "b"]),
                    command(&["RPUSH", &tally, "x"]),
                ],
                _ => vec![
                    command(&["DEL", &pause, &probe, &tally]),
                    command(&["ZADD", &pause, "1", "x"]),
                    command(&["SET", &probe, "12345"]),
                    command(&["HSET", &tally, "hostile", "lots many 1"]),
                ],
            },
            Play::Extremes => {
                let value = match round % 3 {
                    0 => "-5",
                    1 => "9223372036854775807",
                    _ => "18446744073709551616",
                };
                let value = format!("{value} {value} {}", wall_ms());
                vec![command(&["HSET", &tally, "hostile", &value])]
            }
            Play::Flood => {
                let mut flood = Vec::with_capacity(1000);
                for n in 0..1000_u64 {
                    let message = match n % 4 {
                        0 => format!("garbage {n}"),
                        1 => format!("99999999 hostile {host}"),
                        2 => format!("-5 hostile {host}"),
                        _ => format!("2000 hostile http://127.0.0.1:{}", 1 + n % 60_000),
                    };
                    flood.push(command(&["PUBLISH", &channel, &message]));
                }
                flood
            }
            Play::Inflated => {
                let value = format!("0 {} {}", round * 500_000, wall_ms());
                vec![command(&["HSET", &tally, "hostile", &value])]
            }
            Play::LongClaim if round == 0 => {
                at(2_000).await;
                vec![
                    command(&["SET", &pause, "1", "PX", "1500"]),
                    command(&["PUBLISH", &channel, &format!("1500 hostile {host}")]),
                    command(&["SET", &probe, "hostile", "PX", "31000"]),
                ]
            }
            Play::Renewed => {
                at(2_000 + round * 29_000).await;
                vec![
                    command(&["SET", &pause, "1", "PX", "29000"]),
                    command(&["PUBLISH", &channel, &format!("29000 hostile {host}")]),
                ]
            }
            Play::LongClaim => return,
        };
        if redis.send_all(&commands).await.is_err() {
            return;
        }
        round += 1;
        match play {
            // As fast as Redis takes it.
            Play::Flood => tokio::task::yield_now().await,
            Play::Renewed | Play::LongClaim => {}
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The wall-clock time, in milliseconds since the Unix epoch, as the
/// fleet's members write it beside their totals.
fn wall_ms() -> u128 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |since| since.as_millis())
}
