use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, StatusCode};
use hyper::body::{Body, Bytes, Frame};

use super::cut::Cut;
use super::rule::{Count, Step};
use super::*;

fn request(method: Method, url: &str) -> Request {
    Request::new(method, url.parse().unwrap())
}

fn get() -> Request {
    request(Method::GET, "http://api.test:8080/orders/7")
}

fn rule() -> Rule {
    Rule::new("r", Fault::status(StatusCode::BAD_GATEWAY))
}

/// The steps of `calls` calls to `get()` at `elapsed`, each injected when
/// drawn (as a rate of 1 would).
fn steps(rule: &Rule, calls: usize, elapsed: Duration) -> (Vec<Step>, Count) {
    let mut count = Count::default();
    let steps = (0..calls)
        .map(|_| {
            let step = rule.step(&mut count, rule.sees(&get(), elapsed));
            if step == Step::Drawn {
                count.injected += 1;
            }
            step
        })
        .collect();
    (steps, count)
}

fn drawn(steps: &[Step]) -> Vec<bool> {
    steps.iter().map(|step| *step == Step::Drawn).collect()
}

#[test]
fn a_rule_with_no_condition_draws_every_call() {
    let (steps, count) = steps(&rule(), 3, Duration::ZERO);
    assert_eq!(drawn(&steps), [true; 3]);
    assert_eq!((count.seen, count.injected), (3, 3));
}

#[test]
fn scripts_pick_by_the_number_of_the_call_seen() {
    let (first, _) = steps(&rule().first(2), 4, Duration::ZERO);
    assert_eq!(drawn(&first), [true, true, false, false]);
    let (every, _) = steps(&rule().every(3), 7, Duration::ZERO);
    assert_eq!(drawn(&every), [false, false, true, false, false, true, false]);
    let (one, _) = steps(&rule().every(1), 2, Duration::ZERO);
    assert_eq!(drawn(&one), [true, true]);
    let (sequence, count) = steps(&rule().sequence([false, true, true]), 5, Duration::ZERO);
    assert_eq!(drawn(&sequence), [false, true, true, false, false]);
    assert_eq!(count.seen, 5, "every call was seen; the script spared three");
    assert_eq!(sequence[0], Step::Spared);
}

#[test]
fn a_limit_spares_the_calls_after_it_is_reached() {
    let (limited, count) = steps(&rule().limit(2), 4, Duration::ZERO);
    assert_eq!(drawn(&limited), [true, true, false, false]);
    assert_eq!((count.seen, count.injected), (4, 2));
    let (none, _) = steps(&rule().limit(0), 1, Duration::ZERO);
    assert_eq!(none, [Step::Spared]);
}

#[test]
fn a_span_starts_at_its_offset_and_ends_after_its_length() {
    let windowed = rule().starting_after(Duration::from_secs(10)).lasting(Duration::from_secs(5));
    let at = |secs: u64, millis: u64| {
        let elapsed = Duration::from_secs(secs) + Duration::from_millis(millis);
        steps(&windowed, 1, elapsed).0[0]
    };
    assert_eq!(at(9, 999), Step::Unseen);
    assert_eq!(at(10, 0), Step::Drawn);
    assert_eq!(at(14, 999), Step::Drawn);
    assert_eq!(at(15, 0), Step::Unseen);
    let open_ended = rule().starting_after(Duration::from_secs(1));
    assert_eq!(steps(&open_ended, 1, Duration::from_secs(3600)).0, [Step::Drawn]);
    let short = rule().lasting(Duration::from_secs(2));
    assert_eq!(steps(&short, 1, Duration::from_millis(1999)).0, [Step::Drawn]);
    assert_eq!(steps(&short, 1, Duration::from_secs(2)).0, [Step::Unseen]);
}

#[test]
fn an_unseen_call_is_not_counted() {
    let (steps, count) = steps(&rule().method(Method::POST), 3, Duration::ZERO);
    assert_eq!(steps, [Step::Unseen; 3]);
    assert_eq!(count, Count::default());
}

#[test]
fn request_conditions_must_all_hold() {
    let matches = |rule: Rule, request: &Request| rule.sees(request, Duration::ZERO);
    let orders = get();
    assert!(matches(rule().method(Method::GET), &orders));
    assert!(!matches(rule().method(Method::PUT), &orders));
    assert!(matches(rule().host("API.test"), &orders), "hosts compare as URLs write them");
    let v6 = request(Method::GET, "http://[::1]:8080/");
    assert!(matches(rule().host("::1"), &v6), "an IPv6 address with or without brackets");
    assert!(matches(rule().host("[::1]"), &v6));
    assert!(!matches(rule().host("::1"), &orders));
    let international = request(Method::GET, "http://xn--bcher-kva.test/");
    assert!(matches(rule().host("bücher.test"), &international), "in punycode, as URLs write it");
    assert!(matches(rule().path("/orders"), &orders));
    assert!(!matches(rule().path("/users"), &orders));
    assert!(matches(rule().matching(|r| r.url().port() == Some(8080)), &orders));
    assert!(!matches(rule().matching(|_| false), &orders));
    let mut keyed = get();
    keyed.headers_mut().insert("idempotency-key", "k".parse().unwrap());
    assert!(matches(rule().header(http::HeaderName::from_static("idempotency-key")), &keyed));
    assert!(!matches(rule().header(http::HeaderName::from_static("idempotency-key")), &orders));
    assert!(!matches(rule().method(Method::GET).path("/users"), &orders), "both must hold");
}

#[test]
fn a_retry_after_fault_rounds_up_to_whole_seconds() {
    let header = |after: Duration| {
        let Fault(Kind::Response { headers, status }) =
            Fault::retry_after(StatusCode::TOO_MANY_REQUESTS, after)
        else {
            unreachable!()
        };
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        headers["retry-after"].to_str().unwrap().to_owned()
    };
    assert_eq!(header(Duration::from_millis(1500)), "2");
    assert_eq!(header(Duration::from_secs(2)), "2");
    assert_eq!(header(Duration::from_nanos(1)), "1");
    assert_eq!(header(Duration::ZERO), "0");
}

#[test]
fn faults_say_what_they_are_and_whether_they_send() {
    let faults = [
        (Fault::status(StatusCode::BAD_GATEWAY), "status", false),
        (Fault::refused(), "refused", false),
        (Fault::timeout(), "timeout", false),
        (Fault::reset(), "reset", false),
        (Fault::cut_body(1), "cut_body", true),
        (Fault::latency(Duration::from_secs(1)), "latency", true),
    ];
    for (fault, label, sends) in faults {
        assert_eq!((fault.label(), fault.sends_request()), (label, sends));
    }
    assert_eq!(Fault::timeout(), Fault::timeout_after(Duration::ZERO));
}

#[test]
fn the_first_rule_to_draw_a_call_injects_and_the_rest_do_not_see_it() {
    let chaos = Chaos::new([
        rule().method(Method::POST),
        Rule::new("second", Fault::refused()).first(1),
        Rule::new("third", Fault::reset()),
    ])
    .unwrap();
    let extensions = Extensions::new();
    let chosen: Vec<_> = (0..3).map(|_| chaos.choose(&get(), &extensions).unwrap()).collect();
    assert_eq!(chosen, [Some(1), Some(2), Some(2)]);
    let counts: Vec<_> = chaos.record().rules().iter().map(|r| (r.seen, r.injected)).collect();
    assert_eq!(counts, [(0, 0), (3, 1), (2, 2)]);
}

#[test]
fn a_rate_injects_about_its_share_and_a_seed_fixes_which() {
    let chaos = || Chaos::new([rule().rate(0.25)]).unwrap().with_seed(11);
    let draws = |chaos: &Chaos| -> Vec<bool> {
        (0..400).map(|_| chaos.choose(&get(), &Extensions::new()).unwrap().is_some()).collect()
    };
    let first = draws(&chaos());
    assert_eq!(first, draws(&chaos()));
    let share = first.iter().filter(|hit| **hit).count();
    assert!((70..=130).contains(&share), "{share} of 400 at 25%");
    assert_eq!(chaos().seed(), 11);
    assert_eq!(chaos().record().seed(), 11);
    let always = Chaos::new([rule().rate(1.0)]).unwrap();
    assert!(draws(&always).iter().all(|hit| *hit));
    let never = Chaos::new([rule().rate(0.0)]).unwrap();
    assert!(draws(&never).iter().all(|hit| !*hit));
}

#[test]
fn a_rate_draws_only_for_the_calls_the_script_picks() {
    // With every other call picked, the draws are those of a rule that
    // sees only the picked calls: the same seed, the same faults.
    let picked = Chaos::new([rule().every(2).rate(0.5)]).unwrap().with_seed(5);
    let plain = Chaos::new([rule().rate(0.5)]).unwrap().with_seed(5);
    let extensions = Extensions::new();
    let every_other: Vec<_> = (0..200)
        .filter_map(|call| {
            let chosen = picked.choose(&get(), &extensions).unwrap();
            (call % 2 == 1).then_some(chosen.is_some())
        })
        .collect();
    let each: Vec<_> =
        (0..100).map(|_| plain.choose(&get(), &extensions).unwrap().is_some()).collect();
    assert_eq!(every_other, each);
}

#[test]
fn the_record_keeps_the_first_hits_and_counts_them_all() {
    let chaos = Chaos::new([rule()]).unwrap().with_clock(crate::clock::ManualClock::new());
    let extensions = Extensions::new();
    for call in 0..record::HITS_KEPT + 5 {
        let request = request(Method::PUT, &format!("http://api.test/{call}"));
        assert_eq!(chaos.choose(&request, &extensions).unwrap(), Some(0));
    }
    let record = chaos.record().rule("r").unwrap();
    assert_eq!(record.injected, u64::try_from(record::HITS_KEPT + 5).unwrap());
    assert_eq!(record.hits.len(), record::HITS_KEPT);
    assert_eq!(record.hits[0].url.path(), "/0");
    assert_eq!(record.hits[0].method, Method::PUT);
    assert_eq!(chaos.record().injected(), record.injected);
    assert!(chaos.record().rule("missing").is_none());
}

#[test]
fn hits_are_timed_on_the_middleware_s_clock_from_when_it_took_it() {
    let clock = crate::clock::ManualClock::new();
    clock.advance(Duration::from_secs(100));
    let chaos = Chaos::new([rule()]).unwrap().with_clock(clock.clone());
    clock.advance(Duration::from_secs(3));
    chaos.choose(&get(), &Extensions::new()).unwrap();
    assert_eq!(chaos.record().rule("r").unwrap().hits[0].at, Duration::from_secs(3));
}

#[test]
fn overrides_turn_the_rules_off_or_force_one() {
    let chaos = Chaos::new([rule(), Rule::new("off", Fault::reset()).limit(0)]).unwrap();
    let mut extensions = Extensions::new();
    extensions.insert(ChaosOverride::Off);
    assert_eq!(chaos.choose(&get(), &extensions).unwrap(), None);
    extensions.insert(ChaosOverride::Force("off".into()));
    assert_eq!(chaos.choose(&get(), &extensions).unwrap(), Some(1));
    extensions.insert(ChaosOverride::Force("none".into()));
    let error = chaos.choose(&get(), &extensions).unwrap_err();
    assert!(matches!(error, ChaosError::UnknownRule(name) if name == "none"));
    let counts: Vec<_> = chaos.record().rules().iter().map(|r| (r.seen, r.injected)).collect();
    assert_eq!(counts, [(0, 0), (1, 1)]);
}

/// A body of `chunks`, then its end.
struct Chunks(Vec<&'static [u8]>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Self::Error>>> {
        if self.0.is_empty() {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(self.0.remove(0))))))
    }
}

/// What reading `body` gives: the bytes up to its error, and the error's
/// kind, or `None` if it ended cleanly.
fn read(
    mut body: impl Body<Data = Bytes, Error = Box<dyn std::error::Error + Send + Sync>> + Unpin,
) -> (Vec<u8>, Option<std::io::ErrorKind>) {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut bytes = Vec::new();
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => bytes.extend_from_slice(&frame.into_data().unwrap()),
            Poll::Ready(Some(Err(error))) => {
                let kind = error.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
                assert!(
                    matches!(Pin::new(&mut body).poll_frame(&mut cx), Poll::Ready(None)),
                    "a failed body ends"
                );
                return (bytes, kind);
            }
            Poll::Ready(None) => return (bytes, None),
            Poll::Pending => unreachable!("the test body is always ready"),
        }
    }
}

#[test]
fn a_cut_body_gives_its_first_bytes_then_fails_as_a_closed_connection() {
    let eof = Some(std::io::ErrorKind::UnexpectedEof);
    let body = || Chunks(vec![b"abc", b"defg", b"h"]);
    assert_eq!(read(Cut::new(body(), 5)), (b"abcde".to_vec(), eof));
    assert_eq!(read(Cut::new(body(), 3)), (b"abc".to_vec(), eof), "a cut at a chunk's end");
    assert_eq!(read(Cut::new(body(), 0)), (Vec::new(), eof));
    assert_eq!(read(Cut::new(body(), 8)), (b"abcdefgh".to_vec(), eof), "shorter: fails at its end");
    assert_eq!(read(Cut::new(body(), 100)), (b"abcdefgh".to_vec(), eof));
}

#[test]
fn a_host_or_path_no_url_could_match_is_refused_with_the_rule_named() {
    for (bad, expected) in [
        (
            rule().host("api.test:8080"),
            "chaos rule `r`: `api.test:8080` is not a host a URL can name (no port, no path)",
        ),
        (
            rule().host("api.test/v1"),
            "chaos rule `r`: `api.test/v1` is not a host a URL can name (no port, no path)",
        ),
        (
            rule().host("user@api.test"),
            "chaos rule `r`: `user@api.test` is not a host a URL can name (no port, no path)",
        ),
        (
            rule().host("api.test?x"),
            "chaos rule `r`: `api.test?x` is not a host a URL can name (no port, no path)",
        ),
        (
            rule().host("api test"),
            "chaos rule `r`: `api test` is not a host a URL can name (no port, no path)",
        ),
        (rule().path("orders"), "chaos rule `r`: the path prefix `orders` does not start with `/`"),
    ] {
        assert_eq!(Chaos::new([bad]).unwrap_err().to_string(), expected);
    }
    assert!(Chaos::new([rule().host("api.test").path("/").host("::1")]).is_ok());
}

#[test]
fn a_predicate_may_read_the_record_of_its_own_middleware() {
    let record = Arc::new(OnceLock::<ChaosRecord>::new());
    let reads = Arc::clone(&record);
    let chaos = Chaos::new([
        rule().matching(move |_| reads.get().is_none_or(|record| record.injected() < 2))
    ])
    .unwrap();
    let _ = record.set(chaos.record());
    let chosen: Vec<_> =
        (0..3).map(|_| chaos.choose(&get(), &Extensions::new()).unwrap()).collect();
    assert_eq!(chosen, [Some(0), Some(0), None]);
}

#[test]
fn a_cut_body_declares_what_the_server_sent() {
    let body = http_body_util::Full::new(Bytes::from_static(b"twelve bytes"));
    let cut = Cut::new(body, 3);
    assert_eq!(cut.size_hint().exact(), Some(12));
}

#[test]
fn the_middleware_shows_its_rules_and_seed() {
    let chaos = Chaos::new([rule().host("api.test").every(2)]).unwrap().with_seed(9);
    let shown = format!("{chaos:?}");
    for part in ["\"r\"", "502", "host api.test", "Every(2)", "seed: 9"] {
        assert!(shown.contains(part), "{part} in {shown}");
    }
    let record = format!("{:?}", chaos.record());
    assert!(record.contains("seen: 0"), "{record}");
}

#[tokio::test(start_paused = true)]
async fn each_made_error_is_the_kind_meant_and_no_other() {
    use forge::{Forge, Made, failed};
    use std::error::Error as _;
    let forge = Forge::new().unwrap();
    let url: reqwest::Url = "http://api.test/orders".parse().unwrap();
    let made = [
        (Made::Refused, forge.refused(&url).await.unwrap()),
        (Made::Timeout, forge.timeout(&url).await.unwrap()),
        (Made::Reset, forge.reset(&url).await.unwrap()),
    ];
    for (meant, error) in &made {
        assert_eq!(error.url(), Some(&url), "{meant:?}");
        for (other, _) in &made {
            let same = format!("{meant:?}") == format!("{other:?}");
            assert_eq!(other.is(error), same, "{other:?} on the error made as {meant:?}");
        }
    }
    // An error of another kind, or an answer, is refused as the forge's.
    let (_, refused) = made.into_iter().next().unwrap();
    assert!(matches!(failed(Err(refused), &url, Made::Reset), Err(ChaosError::Forge(_))));
    let answer = Response::from(http::Response::new(reqwest::Body::from("")));
    let error = failed(Ok(answer), &url, Made::Timeout).unwrap_err();
    assert!(error.source().is_some_and(|e| e.to_string().contains("answered 200")), "{error}");
}

#[test]
fn a_rule_tells_its_name_and_fault() {
    let rule = Rule::new("gateway down", Fault::status(StatusCode::BAD_GATEWAY));
    assert_eq!(rule.name(), "gateway down");
    assert_eq!(rule.fault(), &Fault::status(StatusCode::BAD_GATEWAY));
}
