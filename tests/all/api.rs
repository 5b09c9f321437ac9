//! Compile-time checks of the public surface.

use reqwest_safe_retry::*;

fn send_sync<T: Send + Sync>() {}
fn cloneable<T: Clone>() {}

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<RetryMiddleware>();
    send_sync::<RetryConfig>();
    send_sync::<RetryConfigBuilder>();
    send_sync::<ConfigError>();
    send_sync::<RetryReport>();
    send_sync::<ReportSlot>();
    send_sync::<Decision>();
    send_sync::<StopReason>();
    send_sync::<RetryReason>();
    send_sync::<Jitter>();
    send_sync::<TokioClock>();
    send_sync::<ManualClock>();
    send_sync::<SeededJitter>();
    send_sync::<FixedJitter>();
    send_sync::<SafeToRetry>();
    send_sync::<MaxRetries>();
    send_sync::<RetryDeadline>();
    send_sync::<RetryEvent<'static>>();
    send_sync::<Attempt<'static>>();
}

#[test]
fn extension_markers_are_cloneable_as_reqwest_middleware_requires() {
    cloneable::<SafeToRetry>();
    cloneable::<MaxRetries>();
    cloneable::<RetryDeadline>();
    cloneable::<ReportSlot>();
    cloneable::<RetryMiddleware>();
}

#[test]
fn traits_are_object_safe() {
    let clock: Box<dyn Clock> = Box::new(TokioClock);
    let source: Box<dyn JitterSource> = Box::new(SeededJitter::new(1));
    let unit = source.unit();
    assert!((0.0..=1.0).contains(&unit));
    drop(clock);
}
