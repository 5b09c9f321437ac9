//! Where reqwest-tracing's span goes relative to this middleware: placed
//! before it (outside) there is one span per call, placed after it (inside)
//! one span per attempt, each of which can say which attempt it is.
//! #![cfg(feature = "tracing")]

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Result};
use reqwest_safe_retry::{
    RetryMiddleware, clock::ManualClock, jitter::FixedJitter, report::AttemptNumber,
};
use reqwest_tracing::{
    ReqwestOtelSpanBackend, TracingMiddleware, default_on_request_end, reqwest_otel_span,
};
use std::sync::{Arc, Mutex};
use support::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Span, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use wiremock::MockServer;

use crate::support;

/// The name reqwest-tracing gives every span it opens.
const SPAN: &str = "HTTP request";

/// One reqwest-tracing span, as a subscriber saw it.
#[derive(Debug, Default, Clone, PartialEq)]
struct Seen {
    status: Option<u64>,
    resend_count: Option<u64>,
}

/// What the layer saw: reqwest-tracing's spans in the order opened, and the
/// retry events, split by whether one of those spans was their parent.
#[derive(Debug, Default)]
struct Log {
    spans: Vec<Seen>,
    events_in_span: usize,
    events_outside: usize,
}

/// A layer that keeps [`Log`]; the span's index rides in its extensions.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Log>>);

struct Index(usize);

impl Visit for Seen {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "http.response.status_code" => self.status = Some(value),
            "http.request.resend_count" => self.resend_count = Some(value),
            _ => {}
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, value as u64);
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != SPAN {
            return;
        }
        let mut seen = Seen::default();
        attrs.record(&mut seen);
        let mut log = self.0.lock().unwrap();
        log.spans.push(seen);
        let span = ctx.span(id).expect("a span being opened is registered");
        span.extensions_mut().insert(Index(log.spans.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(Index(i)) = span.extensions().get::<Index>() {
            values.record(&mut self.0.lock().unwrap().spans[*i]);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        // The crate's events, whose target is the module that emits them.
        if !event.metadata().target().starts_with("reqwest_safe_retry") {
            return;
        }
        let in_span =
            ctx.event_scope(event).is_some_and(|mut scope| scope.any(|span| span.name() == SPAN));
        let mut log = self.0.lock().unwrap();
        if in_span {
            log.events_in_span += 1;
        } else {
            log.events_outside += 1;
        }
    }
}

/// A retry middleware whose waits are recorded, not slept.
fn retry() -> RetryMiddleware {
    RetryMiddleware::new(policy().build().unwrap())
        .with_clock(ManualClock::new())
        .with_jitter_source(FixedJitter::TOP)
}

/// Sends one GET to a server scripted 503, 503, 200, under a subscriber that
/// keeps what it sees; returns the status and the log.
async fn one_call(client: ClientWithMiddleware) -> (u16, Log) {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[503, 503, 200]).await;
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    // `#[tokio::test]` polls the call on this thread; the other tests in the
    // binary run theirs on other threads, without a subscriber.
    let _anchor = interest_anchor();
    let _guard = tracing::subscriber::set_default(subscriber);
    let response = client.get(format!("{}/r", server.uri())).send().await.unwrap();
    assert_eq!(hits(&server).await, 3);
    let log = std::mem::take(&mut *spans.0.lock().unwrap());
    (response.status().as_u16(), log)
}

#[tokio::test]
async fn outside_the_retry_middleware_reqwest_tracing_opens_one_span_per_call() {
    let client =
        ClientBuilder::new(bare_reqwest()).with(TracingMiddleware::default()).with(retry()).build();
    let (status, log) = one_call(client).await;
    assert_eq!(status, 200);
    // One span for the call, ending with what the caller got.
    assert_eq!(log.spans, [Seen { status: Some(200), resend_count: None }]);
    // The retry events (two retries, then the stop after attempt 3) are
    // inside it, so the call's span carries its retries.
    assert_eq!((log.events_in_span, log.events_outside), (3, 0));
}

#[tokio::test]
async fn inside_the_retry_middleware_reqwest_tracing_opens_one_span_per_attempt() {
    let client =
        ClientBuilder::new(bare_reqwest()).with(retry()).with(TracingMiddleware::default()).build();
    let (status, log) = one_call(client).await;
    assert_eq!(status, 200);
    let statuses: Vec<Option<u64>> = log.spans.iter().map(|s| s.status).collect();
    assert_eq!(statuses, [Some(503), Some(503), Some(200)]);
    // The retry events are the retry middleware's, outside every attempt.
    assert_eq!((log.events_in_span, log.events_outside), (0, 3));
}

/// reqwest-tracing's default span, plus OpenTelemetry's
/// `http.request.resend_count` read from the [`AttemptNumber`] the retry
/// middleware leaves for the middlewares after it.
struct AttemptSpan;

impl ReqwestOtelSpanBackend for AttemptSpan {
    fn on_request_start(req: &Request, extensions: &mut Extensions) -> Span {
        // Absent on the first attempt.
        let resend_count = extensions.get::<AttemptNumber>().map_or(0, |n| n.get() - 1);
        let name = req.method().as_str();
        reqwest_otel_span!(name = name, req, http.request.resend_count = resend_count)
    }

    fn on_request_end(span: &Span, outcome: &Result<Response>, _: &mut Extensions) {
        default_on_request_end(span, outcome);
    }
}

#[tokio::test]
async fn each_attempt_span_inside_can_carry_its_resend_count() {
    let client = ClientBuilder::new(bare_reqwest())
        .with(retry())
        .with(TracingMiddleware::<AttemptSpan>::new())
        .build();
    let (status, log) = one_call(client).await;
    assert_eq!(status, 200);
    assert_eq!(
        log.spans,
        [
            Seen { status: Some(503), resend_count: Some(0) },
            Seen { status: Some(503), resend_count: Some(1) },
            Seen { status: Some(200), resend_count: Some(2) },
        ]
    );
}

/// The quick start's client with reqwest-tracing on both sides of the
/// retries: a span per call outside, a span per attempt inside.
fn both_sides() -> ClientWithMiddleware {
    retry()
        .client_behind(reqwest::Client::builder(), |outside| {
            outside.with(TracingMiddleware::default())
        })
        .expect("the client builds")
        .with(TracingMiddleware::<AttemptSpan>::new())
        .build()
}

#[tokio::test]
async fn on_both_sides_of_the_retries_a_span_per_call_holds_one_per_attempt_and_the_events() {
    let (status, log) = one_call(both_sides()).await;
    assert_eq!(status, 200);
    assert_eq!(
        log.spans,
        [
            // The call's, opened first, ending with what the caller got.
            Seen { status: Some(200), resend_count: None },
            Seen { status: Some(503), resend_count: Some(0) },
            Seen { status: Some(503), resend_count: Some(1) },
            Seen { status: Some(200), resend_count: Some(2) },
        ]
    );
    assert_eq!((log.events_in_span, log.events_outside), (3, 0));
}

#[tokio::test]
async fn on_both_sides_of_the_retries_a_post_answered_429_is_still_retried() {
    let server = MockServer::start().await;
    script_statuses(&server, "/r", &[429, 201]).await;
    let response = both_sides().post(format!("{}/r", server.uri())).body("order=1").send().await;
    assert_eq!(response.unwrap().status(), 201);
    assert_eq!(hits(&server).await, 2);
}
