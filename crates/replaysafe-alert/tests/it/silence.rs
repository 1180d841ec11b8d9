//! The backfill silence against a real Alertmanager.

use std::time::Duration;

use replaysafe_alert::{AlertmanagerApi, Matcher};
use replaysafe_test::contexts;

use crate::alertmanager::{alertmanager_url, alerts_of, client};
use crate::support::{FileJournal, backfill_now, live_now, unique};
use replaysafe_test::logs::CapturedLogs;

fn api() -> AlertmanagerApi {
    AlertmanagerApi::new(&alertmanager_url(), crate::support::loopback()).unwrap()
}

#[tokio::test]
async fn the_backfill_silence_matches_the_pipelines_alerts_and_is_expired_at_the_end() {
    let pipeline = unique("silence");
    let backfill = backfill_now(&pipeline, "bf-2026-07");
    let api = api();

    let silence = api
        .begin_backfill_silence(
            &backfill,
            "recompute July after the currency fix",
            "jane@ops",
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
    let id = silence.id().to_owned();

    let silences = api
        .silences(&[Matcher::equal("pipeline", &pipeline)])
        .await
        .unwrap();
    let created = silences
        .iter()
        .find(|s| s.id == id)
        .expect("the silence is listed");
    assert_eq!(created.status.state, "active");
    assert_eq!(created.created_by, "jane@ops");
    assert_eq!(
        created.comment,
        "replaysafe backfill bf-2026-07: recompute July after the currency fix"
    );
    assert_eq!(created.matchers.len(), 1);
    let matcher = &created.matchers[0];
    assert_eq!(
        (matcher.name.as_str(), matcher.value.as_str()),
        ("pipeline", pipeline.as_str())
    );
    assert!(!matcher.is_regex && matcher.is_equal);

    // An alert of the pipeline raised by someone else while the backfill runs is muted.
    let journal = FileJournal::new();
    let alertmanager = client(&journal);
    let late = replaysafe_alert::Alert::trigger("orders_freshness", "orders are late");
    alertmanager
        .send(&live_now(&pipeline), &late)
        .await
        .unwrap();
    let alerts = alerts_of(&pipeline).await;
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].status.state, "suppressed");
    assert_eq!(alerts[0].status.silenced_by, std::slice::from_ref(&id));
    // Another pipeline's alerts are not.
    let other = unique("silence_other");
    alertmanager.send(&live_now(&other), &late).await.unwrap();
    assert_eq!(alerts_of(&other).await[0].status.state, "active");

    silence.end().await.unwrap();

    let silences = api
        .silences(&[Matcher::equal("pipeline", &pipeline)])
        .await
        .unwrap();
    let ended = silences
        .iter()
        .find(|s| s.id == id)
        .expect("expired silences stay listed");
    assert_eq!(ended.status.state, "expired");
    let alerts = alerts_of(&pipeline).await;
    assert_eq!(alerts[0].status.state, "active");
    assert!(alerts[0].status.silenced_by.is_empty());
    for pipeline in [&pipeline, &other] {
        alertmanager
            .send(&live_now(pipeline), &late.resolved())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_silence_dropped_without_end_says_so_and_keeps_its_deadline() {
    let (logs, _capture) = CapturedLogs::capture_thread();
    let pipeline = unique("silence_dropped");
    let api = api();
    let silence = api
        .begin_backfill_silence(
            &backfill_now(&pipeline, "bf-drop"),
            "test",
            "ci",
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    let id = silence.id().to_owned();

    drop(silence);

    assert!(
        logs.text()
            .contains("backfill silence dropped without end()"),
        "{}",
        logs.text()
    );
    let silences = api
        .silences(&[Matcher::equal("pipeline", &pipeline)])
        .await
        .unwrap();
    assert_eq!(
        silences.iter().find(|s| s.id == id).unwrap().status.state,
        "active"
    );
    let expired = reqwest::Client::new()
        .delete(format!("{}/api/v2/silence/{id}", alertmanager_url()))
        .send()
        .await
        .unwrap();
    assert!(expired.status().is_success());
}

#[tokio::test]
async fn a_silence_without_reason_author_or_duration_is_refused_before_any_request() {
    let api = AlertmanagerApi::new("http://127.0.0.1:9", crate::support::loopback()).unwrap();
    let cx = contexts::backfill();
    let hour = Duration::from_secs(3600);
    let cases = [
        (" ", "ci", hour, "reason"),
        ("why", "", hour, "created_by"),
        ("why", "ci", Duration::ZERO, "max_duration"),
    ];
    for (reason, author, length, field) in cases {
        let error = api
            .begin_backfill_silence(&cx, reason, author, length)
            .await
            .unwrap_err();
        assert_eq!(error.field(), Some(field), "{error}");
    }
}
