//! PagerDuty Events API v2 against a local receiver speaking its contract.

use chrono::TimeDelta;
use replaysafe_alert::{Alert, AlertCategory, PagerDutyClient, Severity};
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Classify, Guard, Outcome, Reason, RetryPolicy, SendError, Window};
use replaysafe_test::contexts;
use secrecy::SecretString;

use crate::support::{FileJournal, Receiver, Reply, pagerduty_contract, suppressing_contexts};

/// A routing key of PagerDuty's length (32 characters), planted as a canary.
pub(crate) const ROUTING_KEY: &str = "pdcanary0routing0key0b41f9e27d5c";

pub(crate) fn client(receiver: &Receiver, journal: &FileJournal) -> Guard<PagerDutyClient> {
    PagerDutyClient::builder(SecretString::from(ROUTING_KEY))
        .ssrf_policy(crate::support::loopback())
        .base_url(receiver.url(""))
        .service_label("data-oncall")
        .build(journal.journal.clone())
        .unwrap()
        .with_retry(RetryPolicy::default().with_max_attempts(4))
}

fn late_orders() -> Alert {
    Alert::trigger("orders_freshness", "orders for the window are 3 h late")
        .with_severity(Severity::Critical)
        .with_category(AlertCategory::Freshness)
        .with_label("table", "orders")
        .with_detail("runbook", "https://wiki.example/runbooks/orders")
}

#[tokio::test]
async fn a_live_trigger_reaches_pagerduty_with_the_idempotency_key_as_dedup_key() {
    let receiver = Receiver::start(pagerduty_contract).await;
    let journal = FileJournal::new();
    let pagerduty = client(&receiver, &journal);
    let cx = contexts::live();

    let outcome = pagerduty.send(&cx, &late_orders()).await.unwrap();

    assert!(outcome.is_delivered());
    assert_eq!(outcome.receipt().unwrap().dedup_key, outcome.key().as_str());
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let event = &requests[0].body;
    assert_eq!(requests[0].path, "/v2/enqueue");
    assert_eq!(event["routing_key"], ROUTING_KEY);
    assert_eq!(event["event_action"], "trigger");
    assert_eq!(event["dedup_key"], outcome.key().as_str());
    assert_eq!(
        event["payload"]["summary"],
        "orders for the window are 3 h late"
    );
    assert_eq!(event["payload"]["severity"], "critical");
    assert_eq!(event["payload"]["source"], "daily_orders");
    assert_eq!(event["payload"]["class"], "freshness");
    assert_eq!(event["payload"]["custom_details"]["table"], "orders");
    assert_eq!(
        event["payload"]["custom_details"]["window"],
        "2026-08-05T00:00:00Z/2026-08-06T00:00:00Z"
    );
    let records = journal.records();
    let decisions: Vec<_> = records.iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [JournalDecision::Attempting, JournalDecision::Delivered]
    );
    assert_eq!(records[1].effect.kind, "alert");
    assert_eq!(records[1].effect.message_type, "orders_freshness");
    assert_eq!(records[1].effect.target, "pagerduty:data-oncall");
    assert_eq!(
        records[1].effect.summary.as_deref(),
        Some("trigger critical: orders for the window are 3 h late")
    );
}

#[tokio::test]
async fn the_dedup_key_is_stable_across_retries_repeats_and_the_resolve() {
    let receiver = Receiver::start(pagerduty_contract).await;
    let journal = FileJournal::new();
    let pagerduty = client(&receiver, &journal);
    let cx = contexts::live();
    receiver.script([
        Reply::new(429, "{\"status\":\"throttle event\"}").retry_after("0"),
        Reply::new(503, "unavailable").retry_after("0"),
    ]);

    let first = pagerduty.send(&cx, &late_orders()).await.unwrap();
    let repeat = pagerduty.send(&cx, &late_orders()).await.unwrap();
    let resolve = pagerduty
        .send(&cx, &late_orders().resolved())
        .await
        .unwrap();

    let Outcome::Delivered(delivered) = &first else {
        panic!("not delivered: {first:?}");
    };
    assert_eq!(delivered.attempts, 3);
    let keys: Vec<_> = receiver
        .requests()
        .iter()
        .map(|request| request.body["dedup_key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        keys.len(),
        4,
        "three attempts, a resolve; the repeat is remembered"
    );
    assert!(
        keys.iter().all(|key| key == first.key().as_str()),
        "{keys:?}"
    );
    assert_eq!(repeat.key(), first.key());
    let Outcome::Suppressed(repeated) = &repeat else {
        panic!("a repeat of a delivered trigger is delivered: {repeat:?}");
    };
    assert_eq!(repeated.reasons, [Reason::AlreadyDelivered]);
    assert_eq!(resolve.key(), first.key());
    assert!(
        resolve.is_delivered(),
        "a resolve is remembered apart from its trigger"
    );
    let actions: Vec<_> = receiver
        .requests()
        .iter()
        .map(|request| request.body["event_action"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(actions, ["trigger", "trigger", "trigger", "resolve"]);
    let journaled: Vec<_> = journal
        .records()
        .iter()
        .map(|r| (r.decision, r.effect.action.clone().unwrap_or_default()))
        .collect();
    assert!(
        journaled.contains(&(JournalDecision::Suppressed, "trigger".into()))
            && journaled.contains(&(JournalDecision::Delivered, "resolve".into())),
        "{journaled:?}"
    );

    // Another window is another incident.
    let now = contexts::now();
    let other_window =
        Window::new(now - TimeDelta::hours(2), now - TimeDelta::minutes(30)).unwrap();
    let other = pagerduty
        .send(&cx.with_window(other_window), &late_orders())
        .await
        .unwrap();
    assert!(other.is_delivered());
    assert_ne!(other.key(), first.key());
}

#[tokio::test]
async fn a_429_is_retried_and_a_400_is_not() {
    let receiver = Receiver::start(pagerduty_contract).await;
    let journal = FileJournal::new();
    let pagerduty = client(&receiver, &journal);
    let cx = contexts::live();

    receiver.script([Reply::new(429, "{\"status\":\"throttle event\"}").retry_after("0")]);
    let outcome = pagerduty.send(&cx, &late_orders()).await.unwrap();
    assert!(outcome.is_delivered());
    assert_eq!(receiver.requests().len(), 2);

    receiver.script([Reply::new(400, "{\"status\":\"invalid event\"}")]);
    let error = pagerduty
        .send(&contexts::live_hour(), &late_orders())
        .await
        .unwrap_err();
    let SendError::Failed { attempts, source } = &error else {
        panic!("expected a failed delivery, got {error}");
    };
    assert_eq!(*attempts, 1);
    assert_eq!(source.status(), Some(400));
    assert!(source.is_permanent());
    assert_eq!(receiver.requests().len(), 3, "a 400 is not retried");
    assert!(
        source
            .to_string()
            .starts_with("sending pagerduty trigger of orders_freshness to http://127.0.0.1:"),
        "{source}"
    );

    let decisions: Vec<_> = journal.records().iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [
            JournalDecision::Attempting,
            JournalDecision::Failed,
            JournalDecision::Attempting,
            JournalDecision::Delivered,
            JournalDecision::Attempting,
            JournalDecision::Failed
        ]
    );
}

#[tokio::test]
async fn a_malformed_event_is_refused_by_the_receiver_contract_not_retried() {
    let receiver = Receiver::start(pagerduty_contract).await;
    let journal = FileJournal::new();
    // A routing key of the wrong length: PagerDuty answers 400 "invalid event".
    let pagerduty = PagerDutyClient::builder(SecretString::from("too-short"))
        .ssrf_policy(crate::support::loopback())
        .base_url(receiver.url(""))
        .build(journal.journal.clone())
        .unwrap();

    let error = pagerduty
        .send(&contexts::live(), &late_orders())
        .await
        .unwrap_err();

    assert!(error.is_permanent(), "{error}");
    assert_eq!(receiver.requests().len(), 1);
}

#[tokio::test]
async fn in_a_backfill_no_page_leaves_the_process() {
    let receiver = Receiver::start(pagerduty_contract).await;
    let journal = FileJournal::new();
    let pagerduty = client(&receiver, &journal);

    for (name, cx) in suppressing_contexts("daily_orders") {
        for alert in [late_orders(), late_orders().resolved()] {
            let outcome = pagerduty.send(&cx, &alert).await.unwrap();
            assert!(outcome.is_suppressed(), "{name}");
        }
    }

    assert!(receiver.requests().is_empty());
    let records = journal.records();
    assert_eq!(records.len(), 10);
    assert!(
        records
            .iter()
            .all(|r| r.decision == JournalDecision::Suppressed)
    );
    assert!(
        records
            .iter()
            .all(|r| r.effect.target == "pagerduty:data-oncall")
    );
    assert_eq!(records[1].effect.summary.as_deref(), Some("resolve"));
}
