//! The context sources through the binary: what a task's environment makes `send` and
//! `context` do when `REPLAYSAFE_*` and Airflow's variables disagree, when Airflow 3 gives
//! only a logical date, and when the environment holds bytes that are not UTF-8.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use chrono::{TimeDelta, Utc};
use replaysafe_core::journal::JournalReader;

use crate::send::{clean_command, receiver};

/// Sends one webhook to the test receiver with `env`; returns (exit code, stderr, reasons journaled).
fn send_webhook(
    address: std::net::SocketAddr,
    journal: &Path,
    env: &[(&str, String)],
) -> (Option<i32>, String, Vec<String>) {
    let output = clean_command()
        .args(["send", "webhook", "--url"])
        .arg(format!("http://{address}/hooks/orders"))
        .args(["--event-type", "orders.published", "--data", "{}"])
        .args(["--allow-host", "127.0.0.1"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("REPLAYSAFE_JOURNAL", journal)
        .output()
        .unwrap();
    let reasons = JournalReader::open(journal)
        .map(|reader| {
            reader
                .filter_map(Result::ok)
                .flat_map(|record| record.reasons)
                .collect()
        })
        .unwrap_or_default();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        reasons,
    )
}

#[test]
fn an_explicit_scheduled_kind_never_delivers_an_airflow_backfill() {
    let (address, received) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let now = Utc::now();
    let env = [
        ("AIRFLOW_CTX_DAG_ID", "daily_orders".to_owned()),
        (
            "AIRFLOW_CTX_DAG_RUN_ID",
            "backfill__2026-11-20T00:00:00+00:00".to_owned(),
        ),
        ("AIRFLOW_CTX_RUN_TYPE", "backfill".to_owned()),
        ("REPLAYSAFE_RUN_KIND", "scheduled".to_owned()),
        (
            "REPLAYSAFE_WINDOW_START",
            replaysafe_core::rfc3339(now - TimeDelta::hours(1)),
        ),
        ("REPLAYSAFE_WINDOW_END", replaysafe_core::rfc3339(now)),
    ];
    let (code, stderr, reasons) = send_webhook(address, &dir.path().join("j.jsonl"), &env);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("suppressed") && stderr.contains("conflicting_context"),
        "{stderr}"
    );
    assert!(
        reasons.contains(&"conflicting_context".to_owned()),
        "{reasons:?}"
    );
    assert!(
        received.lock().unwrap().is_empty(),
        "a backfill's webhook arrived"
    );
}

#[test]
fn a_current_explicit_window_beside_a_week_old_airflow_interval_is_stale() {
    let (address, received) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let now = Utc::now();
    let week_ago = now - TimeDelta::days(7);
    let env = [
        ("AIRFLOW_CTX_DAG_ID", "daily_orders".to_owned()),
        (
            "AIRFLOW_CTX_DAG_RUN_ID",
            "scheduled__2026-11-20T00:00:00+00:00".to_owned(),
        ),
        (
            "AIRFLOW_CTX_DATA_INTERVAL_START",
            replaysafe_core::rfc3339(week_ago - TimeDelta::days(1)),
        ),
        (
            "AIRFLOW_CTX_DATA_INTERVAL_END",
            replaysafe_core::rfc3339(week_ago),
        ),
        (
            "REPLAYSAFE_WINDOW_START",
            replaysafe_core::rfc3339(now - TimeDelta::hours(1)),
        ),
        ("REPLAYSAFE_WINDOW_END", replaysafe_core::rfc3339(now)),
    ];
    let (code, stderr, reasons) = send_webhook(address, &dir.path().join("j.jsonl"), &env);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        reasons.contains(&"stale_window".to_owned()),
        "{reasons:?} {stderr}"
    );
    assert!(received.lock().unwrap().is_empty());
}

#[test]
fn a_window_in_2099_is_from_the_future() {
    let (address, received) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("REPLAYSAFE_PIPELINE", "daily_orders".to_owned()),
        ("REPLAYSAFE_RUN_ID", "scheduled__x".to_owned()),
        ("REPLAYSAFE_RUN_KIND", "scheduled".to_owned()),
        ("REPLAYSAFE_WINDOW_START", "2099-01-01T00:00:00Z".to_owned()),
        ("REPLAYSAFE_WINDOW_END", "2099-01-02T00:00:00Z".to_owned()),
    ];
    let (code, stderr, reasons) = send_webhook(address, &dir.path().join("j.jsonl"), &env);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(reasons, ["future_window"], "{stderr}");
    assert!(received.lock().unwrap().is_empty());
}

/// A default Airflow 3 task: no hook, no `REPLAYSAFE_*` but the journal.
fn airflow3(run_id_prefix: &str, tick: chrono::DateTime<Utc>) -> Vec<(&'static str, String)> {
    let tick = tick.to_rfc3339();
    vec![
        ("AIRFLOW_CTX_DAG_ID", "replaysafe_probe".to_owned()),
        ("AIRFLOW_CTX_DAG_OWNER", "airflow".to_owned()),
        ("AIRFLOW_CTX_DAG_RUN_ID", format!("{run_id_prefix}__{tick}")),
        ("AIRFLOW_CTX_LOGICAL_DATE", tick),
        ("AIRFLOW_CTX_TASK_ID", "notify".to_owned()),
        ("AIRFLOW_CTX_TRY_NUMBER", "1".to_owned()),
    ]
}

#[test]
fn a_default_airflow3_task_delivers_its_latest_tick_and_suppresses_the_rest() {
    let (address, received) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let latest_tick = Utc::now() - TimeDelta::minutes(3);
    let cases = [
        ("scheduled", latest_tick, None, 1),
        (
            "backfill",
            latest_tick - TimeDelta::hours(2),
            Some("replay_run"),
            0,
        ),
        (
            "scheduled",
            latest_tick - TimeDelta::days(3),
            Some("stale_window"),
            0,
        ),
    ];
    for (index, (prefix, tick, reason, arrived)) in cases.into_iter().enumerate() {
        let before = received.lock().unwrap().len();
        let journal = dir.path().join(format!("{index}.jsonl"));
        let (code, stderr, reasons) = send_webhook(address, &journal, &airflow3(prefix, tick));
        assert_eq!(code, Some(0), "{prefix} {tick}: {stderr}");
        assert_eq!(received.lock().unwrap().len() - before, arrived, "{stderr}");
        match reason {
            Some(reason) => assert!(reasons.contains(&reason.to_owned()), "{reasons:?}"),
            None => assert!(
                reasons.contains(&"current_window".to_owned()),
                "{reasons:?}"
            ),
        }
        // The journal shows the run as an instant.
        let text = std::fs::read_to_string(&journal).unwrap();
        let t = replaysafe_core::rfc3339(tick);
        assert!(
            text.contains(&format!(r#""window":{{"start":"{t}","end":"{t}"}}"#)),
            "{text}"
        );
    }
}

#[test]
fn a_manual_airflow3_run_without_a_logical_date_suppresses_and_is_told_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let (address, received) = receiver();
    let mut env = airflow3("manual", Utc::now());
    env.retain(|(name, _)| *name != "AIRFLOW_CTX_LOGICAL_DATE");
    let journal = dir.path().join("j.jsonl");
    let (code, stderr, _) = send_webhook(address, &journal, &env);
    // Not an error: suppressed, journaled with what to set, one line saying it, exit 0.
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("unknown_window")
            && stderr.contains("REPLAYSAFE_WINDOW_START")
            && stderr.contains("AIRFLOW_CTX_LOGICAL_DATE"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains(r#""decision":"suppressed""#) && text.contains("\"note\":\"no data window"),
        "{text}"
    );
    assert!(received.lock().unwrap().is_empty());
}

#[test]
fn non_utf8_variables_do_not_panic() {
    let mut env = airflow3("scheduled", Utc::now());
    env.retain(|(name, _)| *name != "AIRFLOW_CTX_TASK_ID");
    // A variable replaysafe does not read: ignored.
    let output = clean_command()
        .arg("context")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("SOME_OTHER_TOOL", OsStr::from_bytes(b"caf\xe9"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("(an instant)"), "{stdout}");
    // One it reads: a clear error naming it, exit 2.
    let output = clean_command()
        .arg("context")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("AIRFLOW_CTX_DAG_ID", OsStr::from_bytes(b"caf\xe9"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("AIRFLOW_CTX_DAG_ID") && stderr.contains("UTF-8"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
