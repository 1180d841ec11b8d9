//! Lineage through the binary: the four shapes of an asset-triggered run seen on a real
//! Airflow 3.3.2, with exactly the variables Airflow sets for its task, plus the lineage
//! (`REPLAYSAFE_UPSTREAM`) the replaysafe Airflow hook exports.

use std::path::Path;

use chrono::{TimeDelta, Utc};
use replaysafe_core::ApproverKey;
use serde_json::{Value, json};

use crate::send::{clean_command, receiver};

/// What a real Airflow 3.3.2 gives an asset-triggered run's task: no logical date, no
/// interval, a run id with the `asset_triggered__` prefix.
fn asset_triggered(run_id: &str) -> Vec<(String, String)> {
    [
        ("AIRFLOW_CTX_DAG_ID", "consumer"),
        ("AIRFLOW_CTX_DAG_OWNER", "airflow"),
        ("AIRFLOW_CTX_DAG_RUN_ID", run_id),
        ("AIRFLOW_CTX_TASK_ID", "notify"),
        ("AIRFLOW_CTX_TRY_NUMBER", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn producer_run(prefix: &str, days_ago: i64) -> Value {
    let logical = Utc::now() - TimeDelta::days(days_ago) - TimeDelta::minutes(5);
    let logical = replaysafe_core::rfc3339(logical);
    json!({"pipeline": "producer", "run_id": format!("{prefix}__{logical}"), "logical_date": logical})
}

struct Sent {
    code: Option<i32>,
    stderr: String,
    records: Vec<Value>,
}

fn send(
    dir: &Path,
    url: &str,
    env: &[(String, String)],
    upstream: Option<Value>,
    extra: &[(&str, &str)],
) -> Sent {
    let journal = dir.join(format!("{}.jsonl", fastrand::u64(..)));
    let mut command = clean_command();
    command
        .args([
            "send",
            "webhook",
            "--url",
            url,
            "--event-type",
            "orders.published",
        ])
        .args(["--data", "{\"orders\": 3}", "--allow-host", "127.0.0.1"])
        .envs(env.iter().cloned())
        .env("REPLAYSAFE_JOURNAL", &journal);
    if let Some(upstream) = upstream {
        command.env("REPLAYSAFE_UPSTREAM", upstream.to_string());
    }
    for (name, value) in extra {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    let records = std::fs::read_to_string(&journal)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    Sent {
        code: output.status.code(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        records,
    }
}

fn reasons(record: &Value) -> Vec<String> {
    record["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_four_shapes_of_an_asset_triggered_run() {
    let (address, received) = receiver();
    let url = format!("http://{address}/hooks/orders");
    let dir = tempfile::tempdir().unwrap();
    let env = asset_triggered("asset_triggered__2026-12-01T10:00:00.123456+00:00");

    // (a) From a backfill of the producer: suppressed, nothing sent.
    let sent = send(
        dir.path(),
        &url,
        &env,
        Some(json!([producer_run("backfill", 30)])),
        &[],
    );
    assert_eq!(sent.code, Some(0), "{}", sent.stderr);
    assert_eq!(sent.records.len(), 1);
    assert_eq!(sent.records[0]["decision"], "suppressed");
    assert!(reasons(&sent.records[0]).contains(&"upstream_replay".to_owned()));
    assert!(sent.stderr.contains("upstream_replay"), "{}", sent.stderr);

    // (c) From a mix of a scheduled run and a backfill's: still a replay.
    let mix = json!([producer_run("scheduled", 0), producer_run("backfill", 0)]);
    let sent = send(dir.path(), &url, &env, Some(mix), &[]);
    assert_eq!(sent.code, Some(0), "{}", sent.stderr);
    assert_eq!(reasons(&sent.records[0]), ["upstream_replay"]);
    assert_eq!(
        received.lock().unwrap().len(),
        0,
        "nothing sent for a replay"
    );

    // (d) No lineage at all (no hook installed): no window, suppressed, exit 0, one line
    // saying what to set; the journal's note says it too.
    let sent = send(dir.path(), &url, &env, None, &[]);
    assert_eq!(sent.code, Some(0), "{}", sent.stderr);
    let record = &sent.records[0];
    assert_eq!(record["decision"], "suppressed");
    assert!(reasons(record).contains(&"unknown_window".to_owned()));
    assert!(
        record["note"]
            .as_str()
            .unwrap()
            .contains("REPLAYSAFE_UPSTREAM"),
        "{record}"
    );
    assert_eq!(sent.stderr.lines().count(), 1, "{}", sent.stderr);
    assert!(
        sent.stderr.contains("REPLAYSAFE_WINDOW_START")
            && sent.stderr.contains("REPLAYSAFE_UPSTREAM"),
        "{}",
        sent.stderr
    );
    assert_eq!(received.lock().unwrap().len(), 0);

    // (b) From a scheduled run: delivered, keyed by the producer's window, so a consumer
    // run created again for the same upstream event derives the same key.
    let upstream = json!([producer_run("scheduled", 0)]);
    let first = send(dir.path(), &url, &env, Some(upstream.clone()), &[]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let delivered = first.records.last().unwrap();
    assert_eq!(delivered["decision"], "delivered", "{}", first.stderr);
    assert_eq!(delivered["window"]["start"], upstream[0]["logical_date"]);
    let again = asset_triggered("asset_triggered__2026-12-01T10:07:00.000001+00:00");
    let second = send(dir.path(), &url, &again, Some(upstream), &[]);
    assert_eq!(
        second.records.last().unwrap()["effect"]["idempotency_key"],
        delivered["effect"]["idempotency_key"]
    );
    let received = received.lock().unwrap();
    assert_eq!(received.len(), 2);
    assert_eq!(
        received[0].0.get("idempotency-key"),
        received[1].0.get("idempotency-key")
    );
}

#[test]
fn an_upstream_replay_is_lifted_only_by_an_approval_naming_this_pipeline() {
    let (address, received) = receiver();
    let url = format!("http://{address}/hooks/orders");
    let dir = tempfile::tempdir().unwrap();
    let env = asset_triggered("asset_triggered__2026-12-01T10:00:00.123456+00:00");
    let key = ApproverKey::from_seed("jane", [3; 32]).unwrap();
    let trusted = dir.path().join("trusted");
    std::fs::write(&trusted, key.public_line()).unwrap();
    let approval = |pipeline: &str| {
        let opt_in = replaysafe_core::OptIn::new(
            "the partner asked for July again (CHG-9)",
            "jane@ops",
            Utc::now() + TimeDelta::hours(2),
        )
        .unwrap()
        .for_kind(replaysafe_core::EffectKind::Webhook)
        .for_pipeline(pipeline)
        .for_run_ids("asset_triggered__*")
        .signed_with(&key)
        .unwrap();
        let path = dir.path().join(format!("{pipeline}.json"));
        std::fs::write(&path, opt_in.to_file_json().unwrap()).unwrap();
        path
    };
    let upstream = json!([producer_run("backfill", 0)]);
    let trust = ("REPLAYSAFE_TRUSTED_APPROVERS", trusted.to_str().unwrap());

    // The producer's approval does not reach its consumers.
    let producers = approval("producer");
    let sent = send(
        dir.path(),
        &url,
        &env,
        Some(upstream.clone()),
        &[trust, ("REPLAYSAFE_OPT_IN", producers.to_str().unwrap())],
    );
    assert!(reasons(&sent.records[0]).contains(&"upstream_replay".to_owned()));
    assert_eq!(received.lock().unwrap().len(), 0);

    // One naming the consumer does.
    let consumers = approval("consumer");
    let sent = send(
        dir.path(),
        &url,
        &env,
        Some(upstream),
        &[trust, ("REPLAYSAFE_OPT_IN", consumers.to_str().unwrap())],
    );
    let delivered = sent.records.last().unwrap();
    assert_eq!(delivered["decision"], "delivered", "{}", sent.stderr);
    assert_eq!(reasons(delivered), ["upstream_replay", "opt_in"]);
    assert_eq!(delivered["opt_in"]["signer"], "jane");
    assert_eq!(received.lock().unwrap().len(), 1);
}

#[test]
fn malformed_lineage_is_an_error_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let env = asset_triggered("asset_triggered__2026-12-01T10:00:00+00:00");
    for bad in [
        json!({"pipeline": "p"}),
        json!([{"pipeline": "p"}]),
        json!([{"pipeline": "p", "run_id": "r", "run_kind": "weekly"}]),
        json!([{"pipeline": "p", "run_id": "r", "logical_date": "yesterday"}]),
    ] {
        let sent = send(
            dir.path(),
            "http://127.0.0.1:9/x",
            &env,
            Some(bad.clone()),
            &[],
        );
        assert_eq!(sent.code, Some(2), "{bad}: {}", sent.stderr);
        assert!(
            sent.stderr.contains("REPLAYSAFE_UPSTREAM"),
            "{bad}: {}",
            sent.stderr
        );
        assert!(sent.records.is_empty());
    }
}

#[test]
fn report_counts_runs_without_a_window_on_their_own_line_and_fails_on_them() {
    let (address, received) = receiver();
    let url = format!("http://{address}/hooks/orders");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let send_as = |env: Vec<(String, String)>| {
        let output = clean_command()
            .args([
                "send",
                "webhook",
                "--url",
                &url,
                "--event-type",
                "orders.published",
            ])
            .args(["--data", "{\"orders\": 3}", "--allow-host", "127.0.0.1"])
            .envs(env)
            .env("REPLAYSAFE_JOURNAL", &journal)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
    };
    // Two asset-triggered runs with no lineage (no window), and one current scheduled run.
    send_as(asset_triggered(
        "asset_triggered__2026-12-01T10:00:00+00:00",
    ));
    send_as(asset_triggered(
        "asset_triggered__2026-12-01T11:00:00+00:00",
    ));
    let (_, scheduled) = &crate::send::environments()[0];
    send_as(scheduled.clone());
    assert_eq!(
        received.lock().unwrap().len(),
        1,
        "only the scheduled run sends"
    );

    let report = |extra: &[&str]| {
        clean_command()
            .arg("report")
            .args(extra)
            .arg(&journal)
            .output()
            .unwrap()
    };
    let output = report(&[]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let line = text
        .lines()
        .find(|line| line.starts_with("without a window:"))
        .unwrap_or_else(|| panic!("no line for runs without a window:\n{text}"));
    assert!(line.contains("2 runs (2 effects suppressed"), "{line}");
    assert!(
        line.contains("consumer/asset_triggered__2026-12-01T10:00:00+00:00"),
        "{line}"
    );
    assert!(
        !text.contains("1970"),
        "the placeholder window is not shown:\n{text}"
    );

    let json = report(&["--format", "json"]);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["unknown_window"]["runs"], 2);
    assert_eq!(json["unknown_window"]["effects"], 2);

    let failed = report(&["--fail-on", "unknown"]);
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("2 without a window"), "{stderr}");

    // A journal with only the current run passes the same gate.
    let current = dir.path().join("current.jsonl");
    let output = clean_command()
        .args([
            "send",
            "webhook",
            "--url",
            &url,
            "--event-type",
            "orders.published",
        ])
        .args(["--data", "{\"orders\": 4}", "--allow-host", "127.0.0.1"])
        .envs(scheduled.clone())
        .env("REPLAYSAFE_JOURNAL", &current)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let passed = clean_command()
        .args(["report", "--fail-on", "unknown"])
        .arg(&current)
        .output()
        .unwrap();
    assert_eq!(passed.status.code(), Some(0), "{passed:?}");
}
