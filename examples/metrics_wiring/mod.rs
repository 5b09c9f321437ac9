//! The wiring behind `cargo run --example metrics`, shared with
//! `tests/all/observability.rs` so that what the example prints is what the test
//! asserts: the decision hook that feeds the `metrics` facade, a small
//! in-memory recorder, and the scripted exchange both of them run.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use reqwest_middleware::{ClientBuilder, Error};
use reqwest_safe_retry::rate_limit::Throttled;
use reqwest_safe_retry::{
    RetryConfig, RetryMiddleware, clock::ManualClock, jitter::FixedJitter, report::Decision,
    report::RetryEvent, report::RetryReason, report::RetryReport, report::StopReason,
};
use wiremock::matchers::{any, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Retries, by `reason` ([`RetryReason::as_str`]), and by `status` for
/// [`RetryReason::Status`] only.
pub const RETRIES: &str = "http_client_retries_total";
/// Calls the middleware stopped retrying, by `stop` ([`StopReason::as_str`]).
/// The budget running out is `stop="budget_exhausted"`, a `Retry-After` over
/// the cap `stop="retry_after_too_long"`: labels of this one counter rather
/// than counters of their own, so the stops of a call add up to one and a
/// dashboard sums or splits them as it likes.
pub const STOPS: &str = "http_client_retry_stops_total";
/// Every wait before a retry, in seconds.
pub const WAITS: &str = "http_client_retry_wait_seconds";
/// What a server asked for when its `Retry-After` was over the cap, in
/// seconds: whether the cap should move is read here, never in a label.
/// With `RetryAfterOverCap::WaitTheCap` such an ask is not a stop but a
/// retry waiting the cap, and shows only in the wait histogram.
pub const REFUSED_RETRY_AFTER: &str = "http_client_retry_after_refused_seconds";

/// The decision hook: `RetryMiddleware::on_decision(record)`.
///
/// It runs inline after every attempt, so it only bumps counters. No label
/// carries a duration, a URL or anything else unbounded: `reason` and `stop`
/// are the crate's stable labels, and `status` is one of the retryable
/// statuses.
pub fn record(event: &RetryEvent<'_>) {
    match event.decision {
        Decision::Retry { after, reason } => {
            match reason {
                RetryReason::Status(status) => metrics::counter!(
                    RETRIES,
                    "reason" => reason.as_str(),
                    "status" => status.as_str().to_owned(),
                )
                .increment(1),
                other => metrics::counter!(RETRIES, "reason" => other.as_str()).increment(1),
            }
            // The decision says how long, not why that long: a wait the
            // server asked for with `Retry-After` and one drawn from the
            // backoff arrive alike, as `Retry { after, reason: Status(..) }`.
            // The histogram is where they part: a honoured `Retry-After` is at
            // least the server's value (plus the spread, at most this retry's
            // backoff ceiling), while backoff waits stay under their ceilings
            // (0.5 s, 1 s, 2 s ... by default). To count them exactly, read
            // the `Retry-After` header in a middleware placed after this one,
            // which sees every attempt's response.
            metrics::histogram!(WAITS).record(after.as_secs_f64());
        }
        // A first answer that is final is every ordinary call: not counted,
        // as the tracing events skip it, so that this counter moves only when
        // retrying was in play. `stop="nothing_to_retry"` then means "recovered after
        // retrying". Count calls with the client's request metrics (or
        // reqwest-tracing's spans), not here.
        Decision::Stop(StopReason::NothingToRetry) if event.attempt == 1 => {}
        Decision::Stop(stop) => {
            metrics::counter!(STOPS, "stop" => stop.as_str()).increment(1);
            if let StopReason::RetryAfterTooLong(asked) = stop {
                metrics::histogram!(REFUSED_RETRY_AFTER).record(asked.as_secs_f64());
            }
        }
        // `Decision` may grow variants.
        _ => {}
    }
}

/// Whether the fleet's last round reached its store: 1 or 0 (a gauge).
#[cfg(feature = "fleet")]
pub const FLEET_CONNECTED: &str = "http_client_fleet_connected";
/// What the fleet has done, by `what` (counters, set from
/// `Fleet::status`): `published` and `received` pauses, `pooled` answers of
/// other processes, `throttled_by_fleet`, `held_for_probe`, values
/// `ignored`, pauses `dropped` from a full queue, `failed_rounds`.
#[cfg(feature = "fleet")]
pub const FLEET: &str = "http_client_fleet_total";

/// Sets the fleet's series from its status: call it when a service's
/// metrics are scraped, or on a timer. A fleet that is degraded shows as
/// `connected` 0 and `failed_rounds` rising; one dropping pauses, as
/// `dropped` rising; what came from the fleet, as `received`, `pooled` and
/// `throttled_by_fleet`.
#[cfg(feature = "fleet")]
pub fn record_fleet(status: &reqwest_safe_retry::fleet::FleetStatus) {
    metrics::gauge!(FLEET_CONNECTED).set(if status.connected { 1.0 } else { 0.0 });
    let counts = [
        ("published", status.published),
        ("received", status.received),
        ("pooled", status.pooled),
        ("throttled_by_fleet", status.throttled_by_fleet),
        ("held_for_probe", status.held_for_probe),
        ("ignored", status.ignored),
        ("dropped", status.dropped),
        ("failed_rounds", status.failed_rounds),
    ];
    for (what, count) in counts {
        metrics::counter!(FLEET, "what" => what).absolute(count);
    }
}

/// A minimal `metrics::Recorder` that keeps everything in memory, in place of
/// the Prometheus or OpenTelemetry exporter a service would install. Clones
/// share the same store.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    counters: Arc<Mutex<BTreeMap<String, Arc<AtomicU64>>>>,
    gauges: Arc<Mutex<BTreeMap<String, Arc<AtomicU64>>>>,
    histograms: Arc<Mutex<BTreeMap<String, Arc<Samples>>>>,
}

#[derive(Debug, Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// `name{label="value",...}`, as Prometheus writes a series.
fn series(key: &Key) -> String {
    let labels: Vec<String> =
        key.labels().map(|label| format!("{}=\"{}\"", label.key(), label.value())).collect();
    if labels.is_empty() {
        key.name().to_owned()
    } else {
        format!("{}{{{}}}", key.name(), labels.join(","))
    }
}

impl Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(series(key)).or_default().clone())
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.gauges.lock().unwrap();
        Gauge::from_arc(gauges.entry(series(key)).or_default().clone())
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(series(key)).or_default().clone())
    }
}

impl Recorded {
    /// Every counter by series, with its value.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let counters = self.counters.lock().unwrap();
        counters.iter().map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed))).collect()
    }

    /// Every gauge by series, with its value.
    pub fn gauges(&self) -> BTreeMap<String, f64> {
        let gauges = self.gauges.lock().unwrap();
        gauges.iter().map(|(k, v)| (k.clone(), f64::from_bits(v.load(Ordering::Relaxed)))).collect()
    }

    /// Every histogram by series, with its samples in the order recorded.
    pub fn histograms(&self) -> BTreeMap<String, Vec<f64>> {
        let histograms = self.histograms.lock().unwrap();
        histograms.iter().map(|(k, v)| (k.clone(), v.0.lock().unwrap().clone())).collect()
    }
}

/// One row of the exchange: what the caller got.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub label: &'static str,
    pub status: u16,
    pub report: RetryReport,
}

/// Warm-up calls to the API before the failures: each final answer earns a
/// tenth of a retry from the budget (see `RetryBudget`), so these pay for the
/// retries that follow, as a client's ordinary traffic would.
pub const WARM_UP: usize = 20;

/// Runs the scripted exchange with the default policy and its retry budget,
/// a manual clock (every wait is recorded, none is slept) and jitter pinned
/// at the middle, so that the numbers are the same on every run.
///
/// - `/ok`: 200, [`WARM_UP`] times.
/// - `/flaky`: 503, 503, then 200.
/// - `/limited`: 429 with `Retry-After: 2`, then 200.
/// - `/too-long`: 429 with `Retry-After: 120`, over the 30 s cap.
/// - a second host that answers 503 to everything and has earned nothing,
///   called twice: the budget's reserve (one call's retries and two more)
///   pays for the first call's three retries and two of the second's, then
///   it is spent.
/// - a third host, down as well, called [`GONE_CALLS`] times: once ten of
///   its answers are in, all rejections, its throttle lets fewer and fewer
///   calls through, down to one in twenty; the rest stop
///   `stop="throttled"`, unsent.
///
/// Returns the calls that got a response, and how many the throttle kept
/// back (they have none to report on; the stops counter has them).
pub async fn exchange() -> (Vec<Call>, usize) {
    let api = MockServer::start().await;
    let busy = |retry_after: &str| {
        ResponseTemplate::new(429).insert_header("Retry-After", retry_after.to_owned())
    };
    Mock::given(path("/flaky"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&api)
        .await;
    Mock::given(path("/limited"))
        .respond_with(busy("2"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&api)
        .await;
    Mock::given(path("/too-long")).respond_with(busy("120")).with_priority(1).mount(&api).await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200)).mount(&api).await;
    let down = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(503)).mount(&down).await;

    let middleware = RetryMiddleware::new(RetryConfig::default())
        .on_decision(record)
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::new(0.5));
    let client = ClientBuilder::new(reqwest::Client::new()).with(middleware).build();

    let mut calls = Vec::new();
    let mut call = async |label: &'static str, url: String| {
        let response = client.get(url).send().await.expect("the server answers");
        let report = RetryReport::from_response(&response);
        calls.push(Call { label, status: response.status().as_u16(), report });
    };
    for _ in 0..WARM_UP {
        call("GET /ok", format!("{}/ok", api.uri())).await;
    }
    call("GET /flaky", format!("{}/flaky", api.uri())).await;
    call("GET /limited", format!("{}/limited", api.uri())).await;
    call("GET /too-long", format!("{}/too-long", api.uri())).await;
    for _ in 0..2 {
        call("GET (other host)", format!("{}/down", down.uri())).await;
    }
    let gone = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(503)).mount(&gone).await;
    let url = format!("{}/gone", gone.uri());
    let mut kept_back = 0;
    for _ in 0..GONE_CALLS {
        match client.get(&url).send().await {
            Ok(response) => {
                let report = RetryReport::from_response(&response);
                let status = response.status().as_u16();
                calls.push(Call { label: "GET (host down)", status, report });
            }
            Err(error) => {
                let throttled = matches!(&error, Error::Middleware(e) if e.is::<Throttled>());
                assert!(throttled, "only the throttle keeps a call back: {error}");
                kept_back += 1;
            }
        }
    }
    (calls, kept_back)
}

/// Calls to the host that is down.
pub const GONE_CALLS: usize = 40;

/// A fleet's store that is gone: every command fails, as Redis down does.
#[cfg(feature = "fleet")]
#[derive(Debug)]
pub struct Gone;

#[cfg(feature = "fleet")]
impl reqwest_safe_retry::fleet::FleetStore for Gone {
    fn extend_pauses<'a>(
        &'a self,
        _: &'a str,
        _: &'a [(reqwest_safe_retry::fleet::FleetHost, std::time::Duration)],
    ) -> reqwest_safe_retry::fleet::StoreFuture<'a, ()> {
        gone()
    }

    fn pauses_left<'a>(
        &'a self,
        _: &'a [reqwest_safe_retry::fleet::FleetHost],
    ) -> reqwest_safe_retry::fleet::StoreFuture<'a, Vec<reqwest_safe_retry::fleet::PauseLeft>> {
        gone()
    }

    fn claim_probes<'a>(
        &'a self,
        _: &'a str,
        _: &'a [(reqwest_safe_retry::fleet::FleetHost, std::time::Duration)],
    ) -> reqwest_safe_retry::fleet::StoreFuture<'a, Vec<reqwest_safe_retry::fleet::ProbeClaim>>
    {
        gone()
    }

    fn share_tallies<'a>(
        &'a self,
        _: &'a str,
        _: &'a [(reqwest_safe_retry::fleet::FleetHost, reqwest_safe_retry::fleet::Tally)],
    ) -> reqwest_safe_retry::fleet::StoreFuture<
        'a,
        Vec<Option<Vec<reqwest_safe_retry::fleet::MemberTally>>>,
    > {
        gone()
    }
}

#[cfg(feature = "fleet")]
fn gone<'a, T: 'a>() -> reqwest_safe_retry::fleet::StoreFuture<'a, T> {
    Box::pin(async { Err(reqwest_safe_retry::fleet::StoreError::new("gone", None)) })
}
