//! Alertmanager API v2 against a real Alertmanager.

use replaysafe_alert::{
    ActiveAlert, Alert, AlertCategory, AlertmanagerApi, AlertmanagerClient, Matcher, Severity,
};
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Guard, SendError, rfc3339};
use replaysafe_test::services;

use crate::support::{FileJournal, backfill_now, live_now, suppressing_contexts, unique};

pub(crate) fn alertmanager_url() -> String {
    services::require("REPLAYSAFE_TEST_ALERTMANAGER_URL")
}

pub(crate) fn client(journal: &FileJournal) -> Guard<AlertmanagerClient> {
    AlertmanagerClient::builder(alertmanager_url())
        .ssrf_policy(crate::support::loopback())
        .build(journal.journal.clone())
        .unwrap()
}

pub(crate) async fn alerts_of(pipeline: &str) -> Vec<ActiveAlert> {
    AlertmanagerApi::new(&alertmanager_url(), crate::support::loopback())
        .unwrap()
        .alerts(&[Matcher::equal("pipeline", pipeline)])
        .await
        .unwrap()
}

fn late_orders() -> Alert {
    Alert::trigger("orders_freshness", "orders for the window are 3 h late")
        .with_severity(Severity::Warning)
        .with_category(AlertCategory::Freshness)
        .with_label("table", "orders")
        .with_detail("runbook", "https://wiki.example/runbooks/orders")
        .with_generator_url("https://airflow.example/dags/orders")
}

#[tokio::test]
async fn a_live_alert_is_read_back_with_the_expected_labels() {
    let pipeline = unique("am_live");
    let journal = FileJournal::new();
    let alertmanager = client(&journal);
    let cx = live_now(&pipeline);

    let outcome = alertmanager.send(&cx, &late_orders()).await.unwrap();

    assert!(outcome.is_delivered());
    let alerts = alerts_of(&pipeline).await;
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    let alert = &alerts[0];
    let window = format!(
        "{}/{}",
        rfc3339(cx.window().start()),
        rfc3339(cx.window().end())
    );
    let expected = [
        ("alertname", "orders_freshness"),
        ("category", "freshness"),
        ("pipeline", pipeline.as_str()),
        ("severity", "warning"),
        ("table", "orders"),
        ("window", window.as_str()),
    ];
    assert_eq!(
        alert.labels,
        expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    );
    assert_eq!(
        alert.annotations["summary"],
        "orders for the window are 3 h late"
    );
    assert_eq!(
        alert.annotations["runbook"],
        "https://wiki.example/runbooks/orders"
    );
    assert_eq!(
        alert.generator_url.as_deref(),
        Some("https://airflow.example/dags/orders")
    );
    assert_eq!(alert.status.state, "active");
    let records = journal.records();
    let decisions: Vec<_> = records.iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [JournalDecision::Attempting, JournalDecision::Delivered]
    );
    assert_eq!(records[1].effect.kind, "alert");
    assert_eq!(records[1].effect.target, alertmanager_url());
    assert_eq!(records[1].effect.message_type, "orders_freshness");
}

#[tokio::test]
async fn a_backfill_alert_is_not_in_alertmanager() {
    let pipeline = unique("am_backfill");
    let journal = FileJournal::new();
    let alertmanager = client(&journal);

    let mut contexts = suppressing_contexts(&pipeline);
    contexts.push(("backfill, real clock", backfill_now(&pipeline, "bf-am")));
    for (name, cx) in &contexts {
        let outcome = alertmanager.send(cx, &late_orders()).await.unwrap();
        assert!(outcome.is_suppressed(), "{name}");
    }

    assert!(alerts_of(&pipeline).await.is_empty());
    let records = journal.records();
    assert_eq!(records.len(), contexts.len());
    for record in &records {
        assert_eq!(record.decision, JournalDecision::Suppressed);
        assert_eq!(
            record.effect.summary.as_deref(),
            Some("trigger warning: orders for the window are 3 h late")
        );
    }
    assert_eq!(records[5].reasons, ["replay_run", "stale_window"]);
}

#[tokio::test]
async fn a_resolve_ends_the_alert() {
    let pipeline = unique("am_resolve");
    let journal = FileJournal::new();
    let alertmanager = client(&journal);
    let cx = live_now(&pipeline);

    let trigger = alertmanager.send(&cx, &late_orders()).await.unwrap();
    assert_eq!(alerts_of(&pipeline).await.len(), 1);
    let resolve = alertmanager
        .send(&cx, &late_orders().resolved())
        .await
        .unwrap();

    assert!(resolve.is_delivered());
    assert_eq!(
        resolve.key(),
        trigger.key(),
        "a resolve is the same logical alert"
    );
    assert!(
        alerts_of(&pipeline).await.is_empty(),
        "still active after the resolve"
    );
    let summaries: Vec<_> = journal
        .records()
        .iter()
        .filter(|r| r.decision == JournalDecision::Delivered)
        .map(|r| r.effect.summary.clone().unwrap())
        .collect();
    assert_eq!(summaries[1], "resolve");
}

#[tokio::test]
async fn a_resolve_from_a_backfill_leaves_the_live_alert_alone() {
    let pipeline = unique("am_resolve_backfill");
    let journal = FileJournal::new();
    let alertmanager = client(&journal);

    alertmanager
        .send(&live_now(&pipeline), &late_orders())
        .await
        .unwrap();
    let outcome = alertmanager
        .send(
            &backfill_now(&pipeline, "bf-resolve"),
            &late_orders().resolved(),
        )
        .await
        .unwrap();

    assert!(outcome.is_suppressed());
    assert_eq!(alerts_of(&pipeline).await.len(), 1);
    alertmanager
        .send(&live_now(&pipeline), &late_orders().resolved())
        .await
        .unwrap();
}

#[tokio::test]
async fn an_invalid_alert_is_refused_before_anything_is_sent() {
    let pipeline = unique("am_invalid");
    let journal = FileJournal::new();
    let alertmanager = client(&journal);

    let error = alertmanager
        .send(
            &live_now(&pipeline),
            &late_orders().with_label("pipeline", "other"),
        )
        .await
        .unwrap_err();

    let SendError::Invalid(inner) = &error else {
        panic!("expected an invalid effect, got {error}");
    };
    assert_eq!(inner.field(), Some("label name"));
    assert!(alerts_of(&pipeline).await.is_empty());
    assert!(journal.records().is_empty());
}
