//! Downstream triggers: Airflow's REST API and a generic trigger URL.

use std::collections::BTreeSet;

use base64::Engine;
use chrono::TimeDelta;
use replaysafe_core::{Classify, Journal, MemoryJournal, SendError, Window, rfc3339};
use replaysafe_test::contexts;
use replaysafe_webhook::{Method, Trigger, TriggerClient};
use secrecy::SecretString;
use serde_json::json;

use crate::support::{JournalFile, Receiver, Reply, loopback_only, quick_retries};

/// The properties of Airflow 3's `TriggerDAGRunPostBody`, which refuses any other
/// (`additionalProperties: false`); `logical_date` is required.
const AIRFLOW_BODY_PROPERTIES: [&str; 8] = [
    "dag_run_id",
    "data_interval_start",
    "data_interval_end",
    "logical_date",
    "run_after",
    "conf",
    "note",
    "partition_key",
];

fn airflow(
    receiver: &Receiver,
    journal: impl Journal + 'static,
) -> replaysafe_core::Guard<TriggerClient> {
    TriggerClient::airflow(receiver.url("/airflow"))
        .bearer_token(SecretString::from("airflow-jwt"))
        .ssrf_policy(loopback_only())
        .build(journal)
        .unwrap()
}

#[tokio::test]
async fn airflow_preset_sends_what_airflows_api_expects() {
    let receiver = Receiver::start().await;
    let client = airflow(&receiver, MemoryJournal::new());
    let cx = contexts::live();
    let trigger =
        Trigger::new("daily_reports").with_conf(json!({"source": "daily_orders", "full": false}));

    let outcome = client.send(&cx, &trigger).await.unwrap();
    let receipt = outcome.receipt().unwrap();
    assert_eq!(receipt.status, 200);
    assert!(!receipt.already_triggered);

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, Method::POST);
    assert_eq!(request.path, "/airflow/api/v2/dags/daily_reports/dagRuns");
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("authorization"), Some("Bearer airflow-jwt"));
    assert_eq!(
        request.header("idempotency-key"),
        Some(format!("\"{}\"", outcome.key()).as_str())
    );

    let body = request.json();
    let keys: BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(
        keys.iter().all(|key| AIRFLOW_BODY_PROPERTIES.contains(key)),
        "Airflow refuses unknown properties: {keys:?}"
    );
    let window = cx.window();
    assert_eq!(body["logical_date"], rfc3339(window.start()));
    assert_eq!(body["data_interval_start"], rfc3339(window.start()));
    assert_eq!(body["data_interval_end"], rfc3339(window.end()));
    // The conf as given, and this run as the downstream run's cause (its lineage).
    assert_eq!(
        body["conf"],
        json!({"source": "daily_orders", "full": false, "replaysafe": lineage(&cx)})
    );
    let run_id = body["dag_run_id"].as_str().unwrap();
    assert_eq!(
        run_id,
        format!(
            "manual__{}__replaysafe-{}",
            rfc3339(window.start()),
            outcome.key()
        )
    );
    assert!(
        run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.~:+-".contains(&b)),
        "Airflow's default run id pattern: {run_id}"
    );
    assert_eq!(receipt.run_id.as_deref(), Some(run_id));
}

#[tokio::test]
async fn airflow_preset_with_basic_auth_and_a_logical_date_of_its_own() {
    let receiver = Receiver::start().await;
    let client = TriggerClient::airflow(receiver.url("/"))
        .basic_auth("pipeline", SecretString::from("pw"))
        .ssrf_policy(loopback_only())
        .build(MemoryJournal::new())
        .unwrap();
    let logical_date = contexts::current_window().end();
    client
        .send(
            &contexts::live(),
            &Trigger::new("team.reports-v2").with_logical_date(logical_date),
        )
        .await
        .unwrap();

    let request = &receiver.requests()[0];
    assert_eq!(request.path, "/api/v2/dags/team.reports-v2/dagRuns");
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("pipeline:pw")
    );
    assert_eq!(request.header("authorization"), Some(expected.as_str()));
    assert_eq!(request.json()["logical_date"], rfc3339(logical_date));
    assert_eq!(
        request.json()["conf"],
        json!({"replaysafe": lineage(&contexts::live())})
    );
}

/// What a delivered trigger says of the run that caused it.
fn lineage(cx: &replaysafe_core::ReplayContext) -> serde_json::Value {
    json!({"upstream": [{
        "pipeline": cx.pipeline(),
        "run_id": cx.run_id().as_str(),
        "run_kind": cx.run_kind().as_str(),
        "window_start": rfc3339(cx.window().start()),
        "window_end": rfc3339(cx.window().end()),
    }]})
}

#[tokio::test]
async fn airflow_conflict_with_this_run_found_is_already_triggered() {
    let receiver = Receiver::start().await;
    receiver.reply([Reply::status(409), Reply::status(200)]);
    let client = airflow(&receiver, MemoryJournal::new());

    let outcome = client
        .send(&contexts::live(), &Trigger::new("daily_reports"))
        .await
        .unwrap();
    let receipt = outcome.receipt().unwrap();
    assert!(receipt.already_triggered);
    assert_eq!(receipt.status, 409);
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2, "the trigger and one lookup, no retry");
    let run_id = receipt.run_id.as_deref().unwrap();
    assert_eq!(requests[1].method, "GET");
    assert_eq!(
        requests[1].path,
        format!("/airflow/api/v2/dags/daily_reports/dagRuns/{run_id}")
    );
    assert_eq!(
        requests[1].header("authorization"),
        Some("Bearer airflow-jwt")
    );
}

#[tokio::test]
async fn airflow_conflict_with_this_run_missing_is_a_permanent_failure() {
    let receiver = Receiver::start().await;
    // Another run holds the logical date: 409 on the trigger, 404 on the lookup.
    receiver.reply([Reply::status(409), Reply::status(404)]);
    let journal = JournalFile::new();
    let client = airflow(&receiver, journal.open()).with_retry(quick_retries());

    let error = client
        .send(&contexts::live(), &Trigger::new("daily_reports"))
        .await
        .unwrap_err();
    let SendError::Failed { attempts, source } = &error else {
        panic!("expected a failed delivery: {error:?}");
    };
    assert_eq!(*attempts, 1, "a permanent failure is not retried");
    assert!(source.is_permanent());
    let message = replaysafe_core::error_chain(&error);
    assert!(
        message
            .contains("409 conflict: a different run of daily_reports already holds logical date"),
        "{message}"
    );
    assert_eq!(receiver.requests().len(), 2);
    client.journal().flush().unwrap();
    let decisions: Vec<String> = journal
        .records()
        .iter()
        .map(|record| record["decision"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(decisions, ["attempting", "failed"]);
}

#[tokio::test]
async fn airflow_login_exchanges_the_password_for_a_token_before_each_delivery() {
    const PASSWORD: &str = "canary-airflow-password";
    const TOKEN: &str = "canary.jwt.token";
    let receiver = Receiver::start().await;
    receiver.reply([
        Reply::status(201).body(format!(r#"{{"access_token":"{TOKEN}"}}"#)),
        Reply::status(200),
    ]);
    let journal = JournalFile::new();
    let client = TriggerClient::airflow(receiver.url("/airflow"))
        .airflow_login("pipeline", SecretString::from(PASSWORD))
        .ssrf_policy(loopback_only())
        .build(journal.open())
        .unwrap();
    assert!(!format!("{client:?}").contains(PASSWORD));

    // A backfill logs in nowhere.
    let suppressed = client
        .send(&contexts::backfill(), &Trigger::new("daily_reports"))
        .await
        .unwrap();
    assert!(suppressed.is_suppressed());
    assert_eq!(receiver.connections(), 0);

    client
        .send(&contexts::live(), &Trigger::new("daily_reports"))
        .await
        .unwrap();
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/airflow/auth/token");
    assert_eq!(
        requests[0].json(),
        json!({"username": "pipeline", "password": PASSWORD})
    );
    assert_eq!(
        requests[1].path,
        "/airflow/api/v2/dags/daily_reports/dagRuns"
    );
    assert_eq!(
        requests[1].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    client.journal().flush().unwrap();
    let text = journal.text();
    assert!(!text.contains(PASSWORD) && !text.contains(TOKEN));

    // A refused login is a permanent failure that names the login endpoint.
    receiver.reply([Reply::status(401)]);
    let error = client
        .send(
            &contexts::live().with_window(contexts::current_window()),
            &Trigger::new("other_dag"),
        )
        .await
        .unwrap_err();
    let message = replaysafe_core::error_chain(&error);
    assert!(
        message.contains("logging in to") && message.contains("/auth/token: 401"),
        "{message}"
    );
    assert!(!message.contains(PASSWORD));

    let error = TriggerClient::url(receiver.url("/hook"))
        .airflow_login("pipeline", SecretString::from(PASSWORD))
        .build(MemoryJournal::new())
        .unwrap_err();
    assert_eq!(error.field(), Some("airflow_login"));
}

#[tokio::test]
async fn airflow_preset_sends_nothing_for_a_backfill() {
    let receiver = Receiver::start().await;
    let journal = JournalFile::new();
    let client = airflow(&receiver, journal.open());

    let outcome = client
        .send(&contexts::backfill(), &Trigger::new("daily_reports"))
        .await
        .unwrap();
    assert!(outcome.is_suppressed());
    client.journal().flush().unwrap();
    assert!(receiver.requests().is_empty());
    assert_eq!(receiver.connections(), 0);
    let records = journal.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["decision"], "suppressed");
    assert_eq!(records[0]["effect"]["kind"], "trigger");
    assert_eq!(records[0]["effect"]["message_type"], "daily_reports");
    assert_eq!(records[0]["effect"]["summary"], "dag run of daily_reports");
}

#[tokio::test]
async fn ninety_window_backfill_triggers_no_downstream_run() {
    let receiver = Receiver::start().await;
    let journal = JournalFile::new();
    let client = airflow(&receiver, journal.open());

    let end = contexts::current_window().start();
    let quarter = Window::new(end - TimeDelta::days(90), end).unwrap();
    let backfill = contexts::backfill();
    for window in quarter.split(TimeDelta::days(1)).unwrap() {
        let cx = backfill.with_window(window);
        let outcome = client
            .send(&cx, &Trigger::new("daily_reports"))
            .await
            .unwrap();
        assert!(outcome.is_suppressed());
    }
    client.journal().flush().unwrap();

    assert!(
        receiver.requests().is_empty(),
        "no downstream run was started"
    );
    assert_eq!(receiver.connections(), 0);
    let records = journal.records();
    assert_eq!(
        records.len(),
        90,
        "the journal shows the 90 it would have triggered"
    );
    let keys: BTreeSet<&str> = records
        .iter()
        .map(|record| record["effect"]["idempotency_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 90, "one logical trigger per window");
    for record in &records {
        assert_eq!(record["decision"], "suppressed");
        assert_eq!(record["backfill_id"], "bf-test");
        assert_eq!(record["effect"]["kind"], "trigger");
        assert!(
            record["reasons"]
                .as_array()
                .unwrap()
                .contains(&json!("replay_run"))
        );
        assert_eq!(
            record["effect"]["target"],
            format!(
                "http://127.0.0.1:{}/airflow/api/v2/dags/daily_reports/dagRuns",
                receiver.port()
            )
        );
    }
}

#[tokio::test]
async fn generic_trigger_url_posts_the_window_and_conf() {
    let receiver = Receiver::start().await;
    let client = TriggerClient::url(receiver.url("/ci/run?token=t"))
        .ssrf_policy(loopback_only())
        .build(MemoryJournal::new())
        .unwrap();
    let cx = contexts::live();

    let outcome = client
        .send(
            &cx,
            &Trigger::new("rebuild_dashboards").with_conf(json!({"priority": "low"})),
        )
        .await
        .unwrap();
    assert!(outcome.is_delivered());
    assert!(
        client
            .send(&contexts::backfill(), &Trigger::new("rebuild_dashboards"))
            .await
            .unwrap()
            .is_suppressed()
    );

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1, "the backfill sent nothing");
    let request = &requests[0];
    assert_eq!(request.method, Method::POST);
    assert_eq!(request.path, "/ci/run");
    assert_eq!(request.query.as_deref(), Some("token=t"));
    assert_eq!(request.header("webhook-id"), None);
    assert!(request.header("idempotency-key").is_some());
    assert_eq!(
        request.json(),
        json!({
            "trigger": "rebuild_dashboards",
            "pipeline": "daily_orders",
            "logical_date": rfc3339(cx.window().start()),
            "data_interval_start": rfc3339(cx.window().start()),
            "data_interval_end": rfc3339(cx.window().end()),
            "conf": {"priority": "low", "replaysafe": lineage(&cx)},
        })
    );
}

#[tokio::test]
async fn invalid_triggers_are_refused_before_anything_is_sent() {
    let receiver = Receiver::start().await;
    let client = airflow(&receiver, MemoryJournal::new());
    for (trigger, field) in [
        (Trigger::new("../admin"), "dag_id"),
        (
            Trigger::new("daily_reports").with_conf(json!(["not", "an", "object"])),
            "conf",
        ),
    ] {
        match client.send(&contexts::live(), &trigger).await {
            Err(replaysafe_core::SendError::Invalid(error)) => {
                assert_eq!(error.field(), Some(field))
            }
            other => panic!("expected an invalid trigger, got {other:?}"),
        }
    }
    let put = TriggerClient::airflow("https://airflow.example").method(Method::PUT);
    assert_eq!(
        put.build(MemoryJournal::new()).unwrap_err().field(),
        Some("method")
    );
    assert!(receiver.requests().is_empty());
}
