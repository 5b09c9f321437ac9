//! What a response whose body breaks while the middleware reads it does to
//! the budget: it earns nothing, and a whole body earns a retry.

use reqwest_safe_retry::{
    RetryBudget, report::ReportSlot, report::RetryReason, report::RetryReport, report::StopReason,
};

use crate::support::broken_bodies::{
    BODY, Go, Step, bounded, buffering, client, kinds, reqwest_error, server,
};

#[tokio::test]
async fn a_broken_body_earns_nothing_and_a_whole_one_earns_a_retry() {
    // No reserve, a whole retry earned per final answer: only answers pay.
    let go = Go::default();
    let script = vec![Step::ResetMidBody, Step::Whole, Step::ResetMidBody, Step::Whole];
    let (url, requests) = server(script, go.clone()).await;
    let budget = RetryBudget::default().with_reserve(0).with_ratio(1.0);
    let (client, _, reasons) = client(buffering().with_budget(budget), &go);
    // A broken body is a failure: it pays for nothing, not even its own retry.
    let slot = ReportSlot::new();
    let call = client.get(&url).with_extension(slot.clone()).send();
    let error = bounded("the first GET", call).await.unwrap_err();
    assert_eq!(kinds(reqwest_error(&error)), (false, true, false), "{error:?}");
    let report = slot.get().unwrap();
    assert_eq!((report.attempts, report.stop), (1, StopReason::BudgetExhausted));
    // A body read whole is a final answer: it earns the next call's retry.
    let whole = bounded("the second GET", client.get(&url).send()).await.unwrap();
    assert_eq!(whole.text().await.unwrap(), BODY);
    let retried = bounded("the third GET", client.get(&url).send()).await.unwrap();
    assert_eq!(RetryReport::from_response(&retried).attempts, 2);
    assert_eq!(retried.text().await.unwrap(), BODY);
    assert_eq!(*requests.lock().unwrap(), 4);
    assert_eq!(*reasons.lock().unwrap(), [RetryReason::ConnectionLost]);
}
