//! Each step of a decision, on plain values: no server, no clock.

use std::time::{Duration, SystemTime};

use http::{Method, StatusCode};
use reqwest::{Request, Response, Url};
use reqwest_middleware::Result;

use super::steps::{self, Admission, Chosen, Pacing, Retryable};
use crate::backoff::{Backoff, Jitter};
use crate::classify::Reach;
use crate::config::RetryConfig;
use crate::exchange::Reqwest;
use crate::predicate::{Outcome, Verdict, Wait};
use crate::reason::{RetryReason, Retryability, StopReason};
use crate::retry_after::{RetryAfter, RetryAfterOverCap};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn request(method: Method) -> Request {
    Request::new(method, Url::parse("http://a.test/").unwrap())
}

/// A response with `status` and the headers given, read from no network.
fn answer(status: u16, headers: &[(&str, &str)]) -> Result<Response> {
    let mut response = http::Response::builder().status(status);
    for (name, value) in headers {
        response = response.header(*name, *value);
    }
    Ok(Response::from(response.body("").unwrap()))
}

fn retryable(reach: Reach, status: u16, wait: Wait) -> Retryable {
    let reason = RetryReason::Status(StatusCode::from_u16(status).unwrap());
    Retryable { reach, reason, wait }
}

#[test]
fn classify_sorts_statuses_by_the_built_in_rules() {
    let strict = RetryConfig::builder().with_retry_429_any_method(false).build().unwrap();
    let cases: [(u16, &RetryConfig, Option<Reach>); 7] = [
        (200, &RetryConfig::default(), None),
        (404, &RetryConfig::default(), None),
        (500, &RetryConfig::default(), None),
        (503, &RetryConfig::default(), Some(Reach::WhenSafe)),
        (504, &RetryConfig::default(), Some(Reach::WhenSafe)),
        (429, &RetryConfig::default(), Some(Reach::AnyMethod)),
        (429, &strict, Some(Reach::WhenSafe)),
    ];
    for (status, config, reach) in cases {
        let request = request(Method::GET);
        let outcome = answer(status, &[]);
        let came = steps::came::<Reqwest>(&outcome, None, false);
        let got = steps::classify::<Reqwest>(config, Some(&request), 1, &outcome, came);
        assert_eq!(got.map(|r| r.reach), reach, "{status}");
        if let Some(got) = got {
            assert_eq!(got.wait, Wait::Policy, "{status}");
            assert_eq!(got.reason, RetryReason::Status(StatusCode::from_u16(status).unwrap()));
        }
    }
}

#[test]
fn classify_takes_the_predicates_word_and_falls_back_when_it_has_none() {
    let config = RetryConfig::builder()
        .with_predicate(|attempt| {
            let Outcome::Response(response) = attempt.outcome else { return None };
            match response.status().as_u16() {
                409 => Some(Verdict::new(Retryability::AnyMethod).server_asked(2 * S)),
                503 => Some(Verdict::new(Retryability::Never)),
                _ => None,
            }
        })
        .build()
        .unwrap();
    let cases = [
        (409, Some((Reach::AnyMethod, RetryReason::Custom, Wait::Asked(2 * S)))),
        (503, None),
        (502, Some((Reach::WhenSafe, RetryReason::Status(StatusCode::BAD_GATEWAY), Wait::Policy))),
        (200, None),
    ];
    for (status, expected) in cases {
        let request = request(Method::POST);
        let outcome = answer(status, &[]);
        let came = steps::came::<Reqwest>(&outcome, None, false);
        let got = steps::classify::<Reqwest>(&config, Some(&request), 1, &outcome, came);
        assert_eq!(got.map(|r| (r.reach, r.reason, r.wait)), expected, "{status}");
    }
    // With no copy of the request to show it, the predicate is not asked.
    let outcome = answer(409, &[]);
    let got = steps::classify::<Reqwest>(
        &config,
        None,
        1,
        &outcome,
        steps::came::<Reqwest>(&outcome, None, false),
    );
    assert_eq!(got, None, "409 is final by the built-in rules");
}

#[test]
fn admissible_weighs_the_deadline_safety_count_and_copy_in_that_order() {
    let base = Admission {
        expired: false,
        reach: Reach::WhenSafe,
        safe: true,
        own_outcome: true,
        attempts: 1,
        max_retries: 3,
        replayable: true,
    };
    let cases: [(&str, Admission, std::result::Result<(), StopReason>); 9] = [
        ("a safe request, retries left", base, Ok(())),
        (
            "the deadline passed",
            Admission { expired: true, safe: false, ..base },
            Err(StopReason::DeadlineExceeded),
        ),
        (
            "unsafe, any method's failure",
            Admission { safe: false, reach: Reach::AnyMethod, ..base },
            Ok(()),
        ),
        (
            "unsafe, after a redirect",
            Admission { safe: false, reach: Reach::AnyMethod, own_outcome: false, ..base },
            Err(StopReason::NotSafe),
        ),
        (
            "unsafe, a failure after work",
            Admission { safe: false, ..base },
            Err(StopReason::NotSafe),
        ),
        (
            "the last retry was spent",
            Admission { attempts: 4, ..base },
            Err(StopReason::RetriesExhausted),
        ),
        ("one retry left", Admission { attempts: 3, ..base }, Ok(())),
        (
            "no copy to send",
            Admission { replayable: false, ..base },
            Err(StopReason::NotReplayable),
        ),
        (
            "unsafe beats no copy",
            Admission { safe: false, replayable: false, ..base },
            Err(StopReason::NotSafe),
        ),
    ];
    for (name, admission, expected) in cases {
        assert_eq!(steps::admissible(admission), expected, "{name}");
    }
}

/// The wait for `retryable` after `outcome` on `config`, the jitter at
/// `unit`, the first retry, and the wall clock at the epoch plus 1,000 s.
fn wait_for(
    config: &RetryConfig,
    unit: f64,
    retry: u32,
    retryable: Retryable,
    outcome: &Result<Response>,
) -> std::result::Result<Chosen, StopReason> {
    let jitter = move || unit;
    let pacing = Pacing {
        config,
        jitter: &jitter,
        retry,
        previous: config.backoff.initial(),
        paused: false,
    };
    let head = outcome.as_ref().ok().map(crate::head::Head::of);
    steps::wait(&pacing, retryable, head, || SystemTime::UNIX_EPOCH + 1000 * S)
}

#[test]
fn the_wait_is_the_backoff_unless_the_server_or_predicate_names_one() {
    let fast = Backoff::default().with_initial(100 * MS);
    let config = RetryConfig::builder().with_backoff(fast).build().unwrap();
    let no_spread = RetryConfig::builder()
        .with_backoff(fast)
        .with_retry_after(RetryAfter::default().with_spread(false))
        .build()
        .unwrap();
    let clamp = RetryConfig::builder()
        .with_retry_after(
            RetryAfter::default().with_cap(5 * S).with_over_cap(RetryAfterOverCap::WaitTheCap),
        )
        .with_backoff(Backoff::default().with_jitter(Jitter::None))
        .build()
        .unwrap();
    let backoff = |after| Ok(Chosen { after, paced: false, backoff: Some(after) });
    let asked = |after, paced| Ok(Chosen { after, paced, backoff: None });
    let when_safe = |status| retryable(Reach::WhenSafe, status, Wait::Policy);
    let any = |status| retryable(Reach::AnyMethod, status, Wait::Policy);
    type Case<'a> = (
        &'a str,
        &'a RetryConfig,
        f64,
        u32,
        Retryable,
        Result<Response>,
        std::result::Result<Chosen, StopReason>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "full jitter at the top",
            &config,
            1.0,
            0,
            when_safe(503),
            answer(503, &[]),
            backoff(100 * MS),
        ),
        (
            "full jitter halfway, third retry",
            &config,
            0.5,
            2,
            when_safe(503),
            answer(503, &[]),
            backoff(200 * MS),
        ),
        (
            "a 503's Retry-After, spread",
            &config,
            0.5,
            0,
            when_safe(503),
            answer(503, &[("retry-after", "2")]),
            asked(2 * S + 50 * MS, false),
        ),
        (
            "a 429's, spread, is free",
            &config,
            0.0,
            0,
            any(429),
            answer(429, &[("retry-after", "2")]),
            asked(2 * S, true),
        ),
        (
            "a 429's on a later retry is paid",
            &config,
            0.0,
            1,
            any(429),
            answer(429, &[("retry-after", "2")]),
            asked(2 * S, false),
        ),
        (
            "an ask of zero is paid",
            &config,
            0.0,
            0,
            any(429),
            answer(429, &[("retry-after", "0")]),
            asked(Duration::ZERO, false),
        ),
        (
            "unspread, as asked and paid",
            &no_spread,
            0.7,
            0,
            any(429),
            answer(429, &[("retry-after", "3")]),
            asked(3 * S, false),
        ),
        (
            "a date, from the wall clock",
            &config,
            0.0,
            0,
            when_safe(503),
            answer(503, &[("retry-after", "Thu, 01 Jan 1970 00:16:50 GMT")]),
            asked(10 * S, false),
        ),
        (
            "over the cap is returned",
            &config,
            0.0,
            0,
            any(429),
            answer(429, &[("retry-after", "31")]),
            Err(StopReason::RetryAfterTooLong(31 * S)),
        ),
        (
            "over the cap, clamped",
            &clamp,
            0.0,
            0,
            any(429),
            answer(429, &[("retry-after", "60")]),
            asked(5 * S, false),
        ),
        (
            "a garbage header is the backoff",
            &config,
            1.0,
            0,
            when_safe(503),
            answer(503, &[("retry-after", "soon")]),
            backoff(100 * MS),
        ),
        (
            "the predicate's exact wait",
            &config,
            0.5,
            0,
            retryable(Reach::AnyMethod, 409, Wait::Exactly(7 * S)),
            answer(409, &[]),
            Ok(Chosen { after: 7 * S, paced: false, backoff: None }),
        ),
        (
            "the predicate hands on the server's",
            &config,
            0.0,
            0,
            retryable(Reach::AnyMethod, 409, Wait::Asked(4 * S)),
            answer(409, &[]),
            asked(4 * S, true),
        ),
        (
            "...not for work the server did",
            &config,
            0.0,
            0,
            retryable(Reach::WhenSafe, 409, Wait::Asked(4 * S)),
            answer(409, &[]),
            asked(4 * S, false),
        ),
    ];
    for (name, config, unit, retry, retryable, outcome, expected) in cases {
        assert_eq!(wait_for(config, unit, retry, retryable, &outcome), expected, "{name}");
    }
}

#[test]
fn a_wait_fits_only_if_it_leaves_time_to_send() {
    let cases = [
        (None, 10 * S, Ok(())),
        (Some((S, 10 * S)), 8 * S, Ok(())),
        (Some((S, 10 * S)), 9 * S, Err(StopReason::DeadlineExceeded)),
        (Some((S, 10 * S)), 9 * S - crate::deadline::MIN_ATTEMPT, Ok(())),
        (Some((Duration::MAX, 10 * S)), S, Err(StopReason::DeadlineExceeded)),
    ];
    for (spent, after, expected) in cases {
        assert_eq!(steps::fits_deadline(spent, after), expected, "{spent:?} then {after:?}");
    }
}

#[test]
fn the_built_in_rules_read_an_answer_s_head_and_a_failure_in_no_client_s_terms() {
    use crate::classify::Failure;
    use crate::head::Head;
    let config = RetryConfig::default();
    let empty = http::HeaderMap::new();
    let answered = |status: u16| {
        let head = Head { status: StatusCode::from_u16(status).unwrap(), headers: &empty };
        steps::built_in(&config, Ok(head)).map(|r| (r.reach, r.reason))
    };
    let status = |code: u16| RetryReason::Status(StatusCode::from_u16(code).unwrap());
    assert_eq!(answered(503), Some((Reach::WhenSafe, status(503))));
    assert_eq!(answered(429), Some((Reach::AnyMethod, status(429))));
    assert_eq!(answered(200), None);
    assert_eq!(answered(404), None);
    let failed = |failure| steps::built_in(&config, Err(failure)).map(|r| (r.reach, r.reason));
    assert_eq!(failed(Failure::NeverReached), Some((Reach::AnyMethod, RetryReason::NotConnected)));
    assert_eq!(
        failed(Failure::ConnectionLost),
        Some((Reach::WhenSafe, RetryReason::ConnectionLost))
    );
    assert_eq!(failed(Failure::Final), None);
}
