//! `replaysafe send` end to end through the real binary: a local HTTP receiver and the
//! aiosmtpd server that `cargo xtask ci` provides.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use assert_cmd::Command;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use chrono::{TimeDelta, Utc};
use replaysafe_core::journal::{JournalDecision, JournalReader};

/// Requests the receiver got: headers and body.
pub(crate) type Received = Arc<Mutex<Vec<(HeaderMap, String)>>>;

/// An HTTP receiver on 127.0.0.1:0, on its own thread, answering 200 to every POST.
pub(crate) fn receiver() -> (SocketAddr, Received) {
    let received: Received = Arc::default();
    let state = received.clone();
    let (ready, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = axum::Router::new()
                .route(
                    "/hooks/orders",
                    axum::routing::post(|State(seen): State<Received>, headers: HeaderMap, body: String| async move {
                        seen.lock().unwrap().push((headers, body));
                        StatusCode::OK
                    }),
                )
                .with_state(state);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            ready.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (address.recv().unwrap(), received)
}

pub(crate) fn clean_command() -> Command {
    let mut command = Command::cargo_bin("replaysafe").unwrap();
    for (key, _) in std::env::vars() {
        if key.starts_with("REPLAYSAFE_") || key.starts_with("AIRFLOW_CTX_") {
            command.env_remove(key);
        }
    }
    command
}

/// The environments a shell task runs under: scheduled (current), Airflow backfill, unknown prefix.
fn environments() -> [(&'static str, Vec<(String, String)>); 3] {
    let now = Utc::now();
    let start = replaysafe_core::rfc3339(now - TimeDelta::hours(2));
    let end = replaysafe_core::rfc3339(now - TimeDelta::minutes(10));
    let airflow = |run_id: &str| {
        vec![
            ("AIRFLOW_CTX_DAG_ID".to_owned(), "daily_orders".to_owned()),
            ("AIRFLOW_CTX_DAG_RUN_ID".to_owned(), run_id.to_owned()),
            ("AIRFLOW_CTX_DATA_INTERVAL_START".to_owned(), start.clone()),
            ("AIRFLOW_CTX_DATA_INTERVAL_END".to_owned(), end.clone()),
        ]
    };
    [
        ("scheduled", airflow("scheduled__2026-11-29T00:00:00+00:00")),
        ("backfill", airflow("backfill__2026-11-29T00:00:00+00:00")),
        ("unknown", airflow("custom__2026-11-29T00:00:00+00:00")),
    ]
}

#[test]
fn webhook_is_delivered_when_current_and_suppressed_otherwise() {
    const CANARY: &str = "whsec_Y2FuYXJ5LXNlY3JldC1mb3ItcmVwbGF5c2FmZS10ZXN0cw==";
    let (address, received) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("totals.json");
    std::fs::write(&data, r#"{"orders": 1204}"#).unwrap();

    for (name, env) in environments() {
        let journal = dir.path().join(format!("{name}.jsonl"));
        let before = received.lock().unwrap().len();
        let output = clean_command()
            .args([
                "send",
                "webhook",
                "--url",
                &format!("http://{address}/hooks/orders"),
            ])
            .args([
                "--event-type",
                "orders.published",
                "--allow-host",
                "127.0.0.1",
                "--secret-env",
                "PARTNER_SECRET",
            ])
            .arg("--data")
            .arg(format!("@{}", data.display()))
            .envs(env)
            .env("PARTNER_SECRET", CANARY)
            .env("REPLAYSAFE_JOURNAL", &journal)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(0), "{name}: {stderr}");
        assert!(!stderr.contains(CANARY), "{name}: secret on stderr");
        let records: Vec<_> = JournalReader::open(&journal)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records.len(), 1, "{name}");
        assert!(!std::fs::read_to_string(&journal).unwrap().contains(CANARY));
        let arrived = received.lock().unwrap().len() - before;
        match name {
            "scheduled" => {
                assert!(
                    stderr.starts_with("replaysafe: delivered webhook orders.published"),
                    "{stderr}"
                );
                assert_eq!(arrived, 1);
                assert_eq!(records[0].decision, JournalDecision::Delivered);
                let (headers, body) = received.lock().unwrap().last().unwrap().clone();
                assert_eq!(body, r#"{"orders":1204}"#);
                let key = &records[0].effect.idempotency_key;
                assert_eq!(headers["idempotency-key"], format!("\"{key}\"").as_str());
                assert_eq!(headers["webhook-id"], key.as_str());
                assert!(
                    headers["webhook-signature"]
                        .to_str()
                        .unwrap()
                        .starts_with("v1,")
                );
            }
            _ => {
                assert!(
                    stderr.starts_with("replaysafe: suppressed webhook orders.published"),
                    "{stderr}"
                );
                assert_eq!(arrived, 0, "{name}: a request arrived");
                assert_eq!(records[0].decision, JournalDecision::Suppressed);
                let reason = if name == "backfill" {
                    "replay_run"
                } else {
                    "unknown_context"
                };
                assert!(stderr.contains(reason), "{stderr}");
            }
        }
    }
}

#[test]
fn send_refuses_bad_input_and_a_missing_journal() {
    let (_, env) = environments().into_iter().next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    // (--data, extra flags, journal, what stderr must say)
    let cases: [(&str, &[&str], Option<&std::path::Path>, &str); 3] = [
        ("{not json", &[], Some(&journal), "--data: not valid JSON"),
        ("{}", &[], None, "REPLAYSAFE_JOURNAL"),
        (
            "{}",
            &["--secret-env", "NOT_SET_ANYWHERE"],
            Some(&journal),
            "NOT_SET_ANYWHERE is not set",
        ),
    ];
    for (data, flags, journal, expected) in cases {
        let mut command = clean_command();
        command
            .args([
                "send",
                "webhook",
                "--url",
                "http://127.0.0.1:9/x",
                "--event-type",
                "e",
                "--data",
                data,
            ])
            .args(flags)
            .envs(env.clone());
        if let Some(journal) = journal {
            command.env("REPLAYSAFE_JOURNAL", journal);
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{expected}: {stderr}");
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap_or_default(),
        "",
        "bad input journals nothing"
    );
}

#[test]
fn a_failed_delivery_exits_one() {
    let (_, env) = environments().into_iter().next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Port 9 (discard) on loopback: nothing listens, the connection is refused every attempt.
    let output = clean_command()
        .args([
            "send",
            "webhook",
            "--url",
            "http://127.0.0.1:9/hooks",
            "--event-type",
            "e",
            "--data",
            "{}",
        ])
        .args(["--allow-host", "127.0.0.1"])
        .envs(env)
        .env("REPLAYSAFE_JOURNAL", dir.path().join("j.jsonl"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("replaysafe: failed webhook e"), "{stderr}");
    assert!(
        stderr.contains("connection"),
        "the cause is shown: {stderr}"
    );
}

#[test]
fn email_is_delivered_when_current_and_suppressed_otherwise() {
    let port = replaysafe_test::services::require("REPLAYSAFE_TEST_SMTP_PORT");
    let maildir = std::path::PathBuf::from(replaysafe_test::services::require(
        "REPLAYSAFE_TEST_SMTP_MAILDIR",
    ));
    let dir = tempfile::tempdir().unwrap();
    let subject = format!("cli send {}", std::process::id());
    for (name, env) in environments() {
        let output = clean_command()
            .args([
                "send",
                "email",
                "--smtp",
                &format!("smtp://127.0.0.1:{port}"),
            ])
            .args([
                "--from",
                "reports@shop.example",
                "--to",
                "ana@cli-send.example",
                "--to",
                "bob@cli-send.example",
            ])
            .args([
                "--subject",
                &format!("{subject} {name}"),
                "--body",
                "42 orders",
                "--message-type",
                "daily_summary",
            ])
            .envs(env)
            .env(
                "REPLAYSAFE_JOURNAL",
                dir.path().join(format!("{name}.jsonl")),
            )
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(0), "{name}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{name}: one line per recipient: {stderr}");
        let verb = if name == "scheduled" {
            "delivered"
        } else {
            "suppressed"
        };
        assert!(
            lines
                .iter()
                .all(|line| line.starts_with(&format!("replaysafe: {verb} email daily_summary"))),
            "{stderr}"
        );
    }
    let arrived: Vec<String> = std::fs::read_dir(maildir.join("new"))
        .unwrap()
        .flatten()
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap_or_default())
        .filter(|message| message.contains(&subject))
        .collect();
    assert_eq!(
        arrived.len(),
        2,
        "two recipients of the scheduled run, none of the others"
    );
    assert!(
        arrived
            .iter()
            .all(|message| message.contains(&format!("{subject} scheduled")))
    );
}

#[test]
fn an_invalid_email_names_the_field_and_sends_nothing() {
    let (_, env) = environments().into_iter().next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    // Nothing listens on port 9: a send attempt would fail with exit 1, not 2.
    let output = clean_command()
        .args([
            "send",
            "email",
            "--smtp",
            "smtp://127.0.0.1:9",
            "--from",
            "reports@shop.example",
        ])
        .args(["--to", "not an address", "--subject", "s", "--body", "b"])
        .envs(env)
        .env("REPLAYSAFE_JOURNAL", &journal)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid email field to[0]"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap_or_default(),
        "",
        "nothing journaled"
    );
}
