//! `replaysafe outbox` through the real binary, against a SQLite file and the PostgreSQL
//! server that `cargo xtask ci` provides: work, status, list, retry, resend, purge.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use chrono::{TimeDelta, Utc};
use replaysafe_core::journal::NoopJournal;
use replaysafe_core::{ReplayContext, RunKind, Window};
use replaysafe_outbox::postgres::{self, PostgresOutbox};
use replaysafe_outbox::sqlite;
use replaysafe_outbox::tokio_postgres::{self, NoTls};
use replaysafe_outbox::{Route, Staged};
use replaysafe_webhook::{SsrfPolicy, Webhook, WebhookClient};
use serde_json::Value;

use crate::send::clean_command;

/// Idempotency keys received, per path.
pub(crate) type Seen = Arc<Mutex<HashMap<String, Vec<String>>>>;

/// A receiver: 200 on /ok, 400 on /bad; records each request's key by path.
pub(crate) fn receiver() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let state = seen.clone();
    let (ready, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let record = |path: &'static str, status: StatusCode| {
                move |State(seen): State<Seen>, headers: HeaderMap| async move {
                    let key = headers
                        .get("idempotency-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .trim_matches('"')
                        .to_owned();
                    seen.lock()
                        .unwrap()
                        .entry(path.to_owned())
                        .or_default()
                        .push(key);
                    status
                }
            };
            let app = axum::Router::new()
                .route("/ok", axum::routing::post(record("ok", StatusCode::OK)))
                .route(
                    "/bad",
                    axum::routing::post(record("bad", StatusCode::BAD_REQUEST)),
                )
                .with_state(state);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            ready.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (address.recv().unwrap(), seen)
}

pub(crate) fn route(name: &str, url: &str) -> Route<WebhookClient> {
    let guard = WebhookClient::builder(url)
        .ssrf_policy(SsrfPolicy::default().allow("127.0.0.1").unwrap())
        .build(NoopJournal)
        .unwrap();
    Route::new(name, guard).unwrap()
}

pub(crate) fn context(kind: RunKind) -> ReplayContext {
    let now = Utc::now();
    let builder = ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id("scheduled__cli")
        .run_kind(kind);
    let builder = if kind == RunKind::Backfill {
        builder
            .window(Window::new(now - TimeDelta::days(30), now - TimeDelta::days(29)).unwrap())
            .backfill_id("bf-cli")
    } else {
        builder.window(Window::new(now - TimeDelta::hours(1), now).unwrap())
    };
    builder.build().unwrap()
}

/// What a scenario stages: (route, url, run kind, event type).
type Staging = Vec<(Route<WebhookClient>, RunKind, &'static str)>;

fn plan(address: SocketAddr) -> Staging {
    let ok = route("partner", &format!("http://{address}/ok"));
    let bad = route("broken", &format!("http://{address}/bad"));
    vec![
        (ok.clone(), RunKind::Scheduled, "orders.published"),
        (bad, RunKind::Scheduled, "orders.rejected"),
        (ok, RunKind::Backfill, "orders.replayed"),
    ]
}

pub(crate) fn routes_file(dir: &Path, address: SocketAddr) -> std::path::PathBuf {
    let path = dir.join("routes.json");
    let routes = serde_json::json!({"routes": {
        "partner": {"kind": "webhook", "url": format!("http://{address}/ok"), "allow_hosts": ["127.0.0.1"]},
        "broken": {"kind": "webhook", "url": format!("http://{address}/bad"), "allow_hosts": ["127.0.0.1"]},
    }});
    std::fs::write(&path, routes.to_string()).unwrap();
    path
}

pub(crate) fn outbox(database: &str, args: &[&str]) -> assert_cmd::assert::Assert {
    let mut command = clean_command();
    command.env_remove("PGPASSWORD");
    if let Some(password) = PASSWORD.with(|cell| cell.borrow().clone()) {
        command.env("PGPASSWORD", password);
    }
    command
        .args(["outbox"])
        .args(args)
        .args(["--database", database])
        .assert()
}

pub(crate) fn json(database: &str, args: &[&str]) -> Value {
    let output = outbox(database, args).success().get_output().stdout.clone();
    serde_json::from_slice(&output).unwrap()
}

pub(crate) fn by_status(database: &str) -> Value {
    json(database, &["status", "--format", "json"])["by_status"].clone()
}

/// The whole operator story, on one database.
fn operate(database: &str, dir: &Path, address: SocketAddr, seen: &Seen, staged: &[Staged]) {
    let (ok_key, bad_key) = (&staged[0].key, &staged[1].key);
    let status = by_status(database);
    assert_eq!(
        (&status["pending"], &status["suppressed"]),
        (&Value::from(2), &Value::from(1))
    );

    let routes = routes_file(dir, address);
    let journal = dir.join("worker.jsonl");
    let work = [
        "work",
        "--drain",
        "--routes",
        routes.to_str().unwrap(),
        "--journal",
        journal.to_str().unwrap(),
    ];
    let stderr = outbox(database, &work)
        .success()
        .get_output()
        .stderr
        .clone();
    assert!(
        String::from_utf8_lossy(&stderr).contains("stopped cleanly: 2 claimed, 1 delivered"),
        "{}",
        String::from_utf8_lossy(&stderr)
    );
    assert_eq!(seen.lock().unwrap()["ok"], std::slice::from_ref(ok_key));
    assert_eq!(seen.lock().unwrap()["bad"], std::slice::from_ref(bad_key));
    let status = by_status(database);
    assert_eq!(
        [&status["delivered"], &status["dead"], &status["suppressed"]],
        [&Value::from(1), &Value::from(1), &Value::from(1)]
    );

    let dead = json(database, &["list", "--status", "dead", "--format", "json"]);
    assert_eq!(dead.as_array().unwrap().len(), 1);
    assert_eq!(dead[0]["key"], Value::from(bad_key.as_str()));
    assert!(dead[0]["last_error"].as_str().unwrap().contains("400"));
    let table = outbox(database, &["list", "--status", "suppressed"])
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8_lossy(&table).contains("orders.replayed"));

    let action_journal = dir.join("operator.jsonl");
    let approval = [
        "--reason",
        "partner fixed their endpoint",
        "--approved-by",
        "jane@ops",
        "--journal",
        action_journal.to_str().unwrap(),
        "--format",
        "json",
    ];
    let mut retry = vec!["retry", "--all"];
    retry.extend(approval);
    assert_eq!(json(database, &retry)["retried"], Value::from(1));
    let mut resend = vec!["resend", "--key", ok_key.as_str()];
    resend.extend(approval);
    assert_eq!(json(database, &resend)["resent"], Value::from(1));
    // The backfill's row, resent on free text alone, is suppressed again by the worker.
    let replayed_key = staged[2].key.as_str();
    let mut free_text = vec!["resend", "--key", replayed_key];
    free_text.extend(approval);
    assert_eq!(json(database, &free_text)["resent"], Value::from(1));
    // Every operator action is journaled, with who and why.
    let actions = std::fs::read_to_string(&action_journal).unwrap();
    let requeued: Vec<Value> = actions
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(requeued.len(), 3, "{actions}");
    assert!(requeued.iter().all(|r| r["decision"] == "requeued"));
    assert_eq!(requeued[0]["reasons"][0], "operator_retry");
    assert_eq!(requeued[1]["reasons"][0], "operator_resend");
    assert_eq!(
        requeued[2]["note"],
        "resend by jane@ops: partner fixed their endpoint"
    );
    outbox(database, &work).success();
    // The resend goes out again under the same key; the retried row fails again and is dead.
    assert_eq!(seen.lock().unwrap()["ok"], [ok_key.clone(), ok_key.clone()]);
    assert_eq!(seen.lock().unwrap()["bad"].len(), 2);
    let replayed = json(
        database,
        &["list", "--status", "suppressed", "--format", "json"],
    );
    assert_eq!(replayed[0]["key"], Value::from(replayed_key));
    assert!(
        replayed[0]["reasons"]
            .as_str()
            .unwrap()
            .contains("replay_run")
    );
    let journaled = std::fs::read_to_string(&journal).unwrap();
    let delivered_lines = journaled
        .lines()
        .filter(|line| {
            line.contains("\"decision\":\"delivered\"") && line.contains(ok_key.as_str())
        })
        .count();
    assert_eq!(delivered_lines, 2, "both deliveries are journaled");

    // A purged key could be staged and sent again: not sooner than the longest max age.
    let refused = outbox(database, &["purge", "--older-than", "1h"])
        .code(2)
        .get_output()
        .stderr
        .clone();
    assert!(
        String::from_utf8_lossy(&refused).contains("--older-than"),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    let purged = json(database, &["purge", "--format", "json"]);
    assert_eq!(
        purged["purged"],
        Value::from(0),
        "delivered just now: kept a week"
    );
    assert_eq!(by_status(database)["delivered"], Value::from(1));

    // An unknown key is named, and exits 1.
    let mut unknown = vec!["resend", "--key", "0000not-a-key"];
    unknown.extend(approval);
    let said = outbox(database, &unknown)
        .code(1)
        .get_output()
        .stderr
        .clone();
    assert!(
        String::from_utf8_lossy(&said).contains("--key 0000not-a-key: no outbox row has this key"),
        "{}",
        String::from_utf8_lossy(&said)
    );

    // Bad input: exit 2, naming the flag.
    outbox(database, &["resend", "--key", "k", "--approved-by", "a"]).code(2);
    let secret_routes = dir.join("secret.json");
    std::fs::write(
        &secret_routes,
        r#"{"routes": {"p": {"kind": "webhook", "url": "http://127.0.0.1/ok", "secret": "hunter2"}}}"#,
    )
    .unwrap();
    let refused = outbox(
        database,
        &[
            "work",
            "--drain",
            "--routes",
            secret_routes.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ],
    )
    .code(2)
    .get_output()
    .stderr
    .clone();
    let refused = String::from_utf8_lossy(&refused);
    assert!(refused.contains("unknown field `secret`"), "{refused}");
    assert!(!refused.contains("hunter2"), "{refused}");
}

#[test]
fn the_operator_commands_work_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    sqlite::SqliteOutbox::open(&path).unwrap();
    let (address, seen) = receiver();
    let staged = stage_on_sqlite(&path, address);
    let database = format!("sqlite:{}", path.display());
    operate(&database, dir.path(), address, &seen, &staged);
}

/// Stages the scenario's three rows (a current row per route, a backfill's row) in the
/// SQLite outbox at `path`, in one transaction.
pub(crate) fn stage_on_sqlite(path: &Path, address: SocketAddr) -> Vec<Staged> {
    let mut conn = replaysafe_outbox::rusqlite::Connection::open(path).unwrap();
    let tx = conn.transaction().unwrap();
    let staged: Vec<Staged> = plan(address)
        .iter()
        .map(|(route, kind, event)| {
            let hook = Webhook::json(*event, serde_json::json!({"total": 42}));
            sqlite::stage(&tx, &context(*kind), route, &hook).unwrap()
        })
        .collect();
    tx.commit().unwrap();
    staged
}

#[test]
fn the_operator_commands_work_on_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let (address, seen) = receiver();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (url, staged) = runtime.block_on(async {
        let admin = replaysafe_test::services::require("REPLAYSAFE_TEST_POSTGRES_URL");
        let (client, connection) = tokio_postgres::connect(&admin, NoTls).await.unwrap();
        tokio::spawn(connection);
        let name = format!("cli_{:016x}", fastrand::u64(..));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
        let outbox = PostgresOutbox::connect(&url).await.unwrap();
        let mut conn = outbox.pool().get().await.unwrap();
        let tx = conn.transaction().await.unwrap();
        let mut staged = Vec::new();
        for (route, kind, event) in plan(address) {
            let hook = Webhook::json(event, serde_json::json!({"total": 42}));
            staged.push(
                postgres::stage(&tx, &context(kind), &route, &hook)
                    .await
                    .unwrap(),
            );
        }
        tx.commit().await.unwrap();
        (url, staged)
    });
    // The password comes from PGPASSWORD, not the command line.
    let (without, password) = split_password(&url);
    temp_env_password(&password, || {
        operate(&without, dir.path(), address, &seen, &staged);
    });
}

/// `postgres://user:password@host…` → (`postgres://user@host…`, password).
pub(crate) fn split_password(url: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, host) = rest.split_once('@').unwrap();
    let (user, password) = userinfo.split_once(':').unwrap();
    (format!("{scheme}://{user}@{host}"), password.to_owned())
}

/// Runs `body` with every `outbox` command of this thread given PGPASSWORD.
pub(crate) fn temp_env_password(password: &str, body: impl FnOnce()) {
    PASSWORD.with(|cell| *cell.borrow_mut() = Some(password.to_owned()));
    body();
    PASSWORD.with(|cell| *cell.borrow_mut() = None);
}

thread_local! {
    static PASSWORD: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn a_database_url_shows_without_its_password_on_every_error() {
    const CANARY: &str = "outbox-db-password-canary-6e1d";
    for url in [
        format!("postgres://pipeline:{CANARY}@127.0.0.1:1/outbox"),
        format!("postgres://pipeline@127.0.0.1:1/outbox?password={CANARY}"),
        format!("postgres://pipeline:{CANARY}@[bad"),
    ] {
        let output = clean_command()
            .args(["outbox", "status", "--database", &url])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--database"), "{stderr}");
        assert!(!stderr.contains(CANARY), "the password leaked: {stderr}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains(CANARY));
    }
}

#[test]
fn a_read_only_database_user_can_run_status_and_list_and_nothing_is_created() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let admin = replaysafe_test::services::require("REPLAYSAFE_TEST_POSTGRES_URL");
    let base = admin.rsplit_once('/').unwrap().0.to_owned();
    let suffix = format!("{:016x}", fastrand::u64(..));
    let (with_outbox, without_outbox, reader) = (
        format!("ro_{suffix}"),
        format!("empty_{suffix}"),
        format!("reader_{suffix}"),
    );
    let reader_password = format!("pw-{suffix}");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&admin, NoTls).await.unwrap();
        tokio::spawn(connection);
        for statement in [
            format!("CREATE DATABASE {with_outbox}"),
            format!("CREATE DATABASE {without_outbox}"),
            format!("CREATE ROLE {reader} LOGIN PASSWORD '{reader_password}'"),
        ] {
            client.batch_execute(&statement).await.unwrap();
        }
        PostgresOutbox::connect(&format!("{base}/{with_outbox}"))
            .await
            .unwrap();
        let (owner, connection) = tokio_postgres::connect(&format!("{base}/{with_outbox}"), NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        owner
            .batch_execute(&format!(
                "GRANT USAGE ON SCHEMA public TO {reader};
                 GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader};"
            ))
            .await
            .unwrap();
    });
    let (scheme_host, _) = split_password(&admin);
    let host = scheme_host
        .split_once('@')
        .unwrap()
        .1
        .rsplit_once('/')
        .unwrap()
        .0;
    let as_reader = |database: &str| format!("postgres://{reader}@{host}/{database}");

    temp_env_password(&reader_password, || {
        let status = json(&as_reader(&with_outbox), &["status", "--format", "json"]);
        assert_eq!(status["by_status"]["pending"], Value::from(0));
        json(
            &as_reader(&with_outbox),
            &["list", "--status", "dead", "--format", "json"],
        );
        // A database without the outbox: said so, and nothing is created in it.
        let said = outbox(&as_reader(&without_outbox), &["status"])
            .code(2)
            .get_output()
            .stderr
            .clone();
        assert!(
            String::from_utf8_lossy(&said).contains("holds no outbox"),
            "{}",
            String::from_utf8_lossy(&said)
        );
    });
    runtime.block_on(async {
        let (client, connection) =
            tokio_postgres::connect(&format!("{base}/{without_outbox}"), NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        let tables: i64 = client
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(tables, 0);
    });
}
