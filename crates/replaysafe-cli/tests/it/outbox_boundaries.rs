//! The outbox's boundaries through the binary: a row's opt-in is a signed document the
//! worker checks, a worker in a replay environment refuses to start, a dry run changes
//! nothing, the reading commands only read, and listings are terminal-safe.

use std::path::{Path, PathBuf};

use chrono::{TimeDelta, Utc};
use replaysafe_core::{ApproverKey, EffectKind, OptIn, RunKind};
use replaysafe_outbox::rusqlite::Connection;
use replaysafe_outbox::{Staged, sqlite};
use replaysafe_webhook::Webhook;
use serde_json::Value;

use crate::outbox::{Seen, context, receiver, route, routes_file};
use crate::send::clean_command;

/// An outbox file with rows staged by `kinds` (event type `orders.N`), a receiver, a routes file.
struct Setup {
    dir: tempfile::TempDir,
    database: String,
    path: PathBuf,
    routes: PathBuf,
    seen: Seen,
    staged: Vec<Staged>,
}

fn setup(kinds: &[RunKind]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    sqlite::SqliteOutbox::open(&path).unwrap();
    let (address, seen) = receiver();
    let partner = route("partner", &format!("http://{address}/ok"));
    let mut conn = Connection::open(&path).unwrap();
    let tx = conn.transaction().unwrap();
    let staged = kinds
        .iter()
        .enumerate()
        .map(|(index, kind)| {
            let hook = Webhook::json(format!("orders.{index}"), serde_json::json!({"n": index}));
            sqlite::stage(&tx, &context(*kind), &partner, &hook).unwrap()
        })
        .collect();
    tx.commit().unwrap();
    let routes = routes_file(dir.path(), address);
    Setup {
        database: format!("sqlite:{}", path.display()),
        path,
        routes,
        seen,
        staged,
        dir,
    }
}

impl Setup {
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> assert_cmd::assert::Assert {
        let mut command = clean_command();
        command
            .arg("outbox")
            .args(args)
            .args(["--database", &self.database]);
        for (name, value) in env {
            command.env(name, value);
        }
        command.assert()
    }

    fn work(&self, extra: &[&str], env: &[(&str, &str)]) -> assert_cmd::assert::Assert {
        let journal = self.journal();
        let mut args = vec![
            "work",
            "--drain",
            "--routes",
            self.routes.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ];
        args.extend(extra);
        self.run(&args, env)
    }

    fn journal(&self) -> PathBuf {
        self.dir.path().join("journal.jsonl")
    }

    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.journal())
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn column(&self, key: &str, column: &str) -> String {
        Connection::open(&self.path)
            .unwrap()
            .query_row(
                &format!(
                    "SELECT CAST({column} AS TEXT) FROM replaysafe_outbox WHERE idempotency_key = ?1"
                ),
                [key],
                |r| r.get(0),
            )
            .unwrap()
    }

    fn delivered(&self) -> usize {
        self.seen
            .lock()
            .unwrap()
            .get("ok")
            .map_or(0, std::vec::Vec::len)
    }
}

fn stderr(assert: assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&assert.get_output().stderr).into_owned()
}

/// keys/jane.key and a trusted list naming jane; an approval file for the backfill
/// `bf-cli` of `daily_orders`, unsigned and signed by jane.
fn approvals(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let jane = ApproverKey::from_seed("jane", [7; 32]).unwrap();
    let trusted = dir.join("trusted_approvers");
    std::fs::write(&trusted, jane.public_line()).unwrap();
    let opt_in = OptIn::new(
        "partner lost July (CHG-7)",
        "jane@ops",
        Utc::now() + TimeDelta::hours(4),
    )
    .unwrap()
    .for_kind(EffectKind::Webhook)
    .for_pipeline("daily_orders")
    .for_backfill("bf-cli");
    let unsigned = dir.join("unsigned.json");
    std::fs::write(&unsigned, opt_in.to_file_json().unwrap()).unwrap();
    let signed = dir.join("signed.json");
    std::fs::write(
        &signed,
        opt_in.signed_with(&jane).unwrap().to_file_json().unwrap(),
    )
    .unwrap();
    (trusted, unsigned, signed)
}

#[test]
fn a_row_made_pending_by_another_process_with_an_unsigned_opt_in_is_not_delivered() {
    let setup = setup(&[RunKind::Backfill]);
    let key = setup.staged[0].key.clone();
    let (trusted, unsigned, _) = approvals(setup.dir.path());
    // What a task with write access to the table could do: pending, with an opt-in.
    Connection::open(&setup.path)
        .unwrap()
        .execute(
            "UPDATE replaysafe_outbox SET status = 'pending', next_attempt_at_ms = 0, opt_in = ?1",
            [std::fs::read_to_string(&unsigned).unwrap()],
        )
        .unwrap();
    setup
        .work(
            &[],
            &[("REPLAYSAFE_TRUSTED_APPROVERS", trusted.to_str().unwrap())],
        )
        .success();
    assert_eq!(setup.delivered(), 0);
    assert_eq!(setup.column(&key, "status"), "suppressed");
    let record = setup.records().pop().unwrap();
    assert_eq!(record["decision"], "suppressed");
    let reasons = record["reasons"].to_string();
    assert!(reasons.contains("opt_in_unsigned"), "{reasons}");
    assert_eq!(record["opt_in"]["signer"], Value::Null);
}

#[test]
fn lifting_a_replay_row_takes_a_signed_approval_file() {
    let setup = setup(&[RunKind::Backfill]);
    let key = setup.staged[0].key.clone();
    let (trusted, unsigned, signed) = approvals(setup.dir.path());
    let trust = [("REPLAYSAFE_TRUSTED_APPROVERS", trusted.to_str().unwrap())];
    let actions = setup.dir.path().join("actions.jsonl");
    let resend = |file: &Path| {
        vec![
            "resend".to_owned(),
            "--key".to_owned(),
            key.clone(),
            "--reason".to_owned(),
            "partner lost July".to_owned(),
            "--approved-by".to_owned(),
            "jane@ops".to_owned(),
            "--journal".to_owned(),
            actions.display().to_string(),
            "--opt-in".to_owned(),
            file.display().to_string(),
        ]
    };
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    // An unsigned file under a trust list is refused before anything changes.
    let unsigned_args = resend(&unsigned);
    let refused = stderr(setup.run(&args(&unsigned_args), &trust).code(2));
    assert!(
        refused.contains("not signed by a trusted approver"),
        "{refused}"
    );
    assert_eq!(setup.column(&key, "status"), "suppressed");

    // A signed one becomes the row's opt-in; the worker checks it again and delivers.
    let signed_args = resend(&signed);
    setup.run(&args(&signed_args), &trust).success();
    let action: Value = serde_json::from_str(
        std::fs::read_to_string(&actions)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(action["decision"], "requeued");
    assert_eq!(action["opt_in"]["signer"], "jane");
    assert_eq!(action["opt_in"]["backfill_id"], "bf-cli");

    setup.work(&[], &trust).success();
    assert_eq!(setup.delivered(), 1);
    let delivered = setup.records().pop().unwrap();
    assert_eq!(delivered["decision"], "delivered");
    assert_eq!(delivered["opt_in"]["signer"], "jane");
    assert_eq!(delivered["opt_in"]["pipeline"], "daily_orders");
    assert_eq!(delivered["opt_in"]["reason"], "partner lost July (CHG-7)");
}

#[test]
fn a_worker_in_a_replay_environment_refuses_and_a_dry_run_changes_nothing() {
    let setup = setup(&[RunKind::Scheduled]);
    let key = setup.staged[0].key.clone();
    for env in [
        ("REPLAYSAFE_REPLAY", "true"),
        ("REPLAYSAFE_RUN_KIND", "backfill"),
        (
            "AIRFLOW_CTX_DAG_RUN_ID",
            "backfill__2026-07-05T00:00:00+00:00",
        ),
    ] {
        let said = stderr(setup.work(&[], &[env]).code(2));
        assert!(
            said.contains("environment says replay") && said.contains("--dry-run"),
            "{env:?}: {said}"
        );
        assert_eq!(setup.column(&key, "status"), "pending", "{env:?}");
    }
    assert_eq!(setup.delivered(), 0);

    for (extra, env) in [
        (&["--dry-run"][..], &[("REPLAYSAFE_REPLAY", "true")][..]),
        (&[][..], &[("REPLAYSAFE_MODE", "dry-run")][..]),
    ] {
        let before = setup.records().len();
        let said = stderr(setup.work(extra, env).success());
        assert!(said.contains("dry run"), "{said}");
        let records = setup.records();
        assert_eq!(records.len(), before + 1);
        let record = records.last().unwrap();
        assert_eq!(record["decision"], "suppressed");
        assert_eq!(record["reasons"], serde_json::json!(["dry_run"]));
        assert_eq!(setup.column(&key, "status"), "pending");
        assert_eq!(setup.column(&key, "attempts"), "0");
        assert_eq!(setup.delivered(), 0);
    }
    // A real worker then delivers it.
    setup.work(&[], &[]).success();
    assert_eq!(setup.delivered(), 1);
}

#[test]
fn the_reading_commands_create_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // A mistyped path: said so, and no file appears.
    let missing = dir.path().join("outbox.db");
    let database = format!("sqlite:{}", missing.display());
    for args in [&["status"][..], &["list", "--status", "pending"][..]] {
        let said = stderr(
            clean_command()
                .arg("outbox")
                .args(args)
                .args(["--database", &database])
                .assert()
                .code(2),
        );
        assert!(said.contains("holds no outbox"), "{said}");
        assert!(!missing.exists(), "{args:?} created the file");
    }

    // An application's own database: no table is created, its journal mode stays.
    let app = dir.path().join("app.db");
    let conn = Connection::open(&app).unwrap();
    conn.execute_batch("CREATE TABLE orders (day TEXT, total INTEGER)")
        .unwrap();
    drop(conn);
    let before = std::fs::read(&app).unwrap();
    let app_database = format!("sqlite:{}", app.display());
    let unused_journal = dir.path().join("unused.jsonl").display().to_string();
    for args in [
        &["status"][..],
        &["list", "--status", "dead"][..],
        &["purge"][..],
        &[
            "retry",
            "--all",
            "--reason",
            "r",
            "--approved-by",
            "a",
            "--journal",
            &unused_journal,
        ][..],
    ] {
        let said = stderr(
            clean_command()
                .arg("outbox")
                .args(args)
                .args(["--database", &app_database])
                .assert()
                .code(2),
        );
        assert!(said.contains("holds no outbox"), "{args:?}: {said}");
    }
    assert_eq!(
        std::fs::read(&app).unwrap(),
        before,
        "the file is unchanged"
    );
    let conn = Connection::open(&app).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    drop(conn);

    // `outbox init` creates it; then the reading commands answer.
    clean_command()
        .args(["outbox", "init", "--database", &app_database])
        .assert()
        .success();
    let status = clean_command()
        .args([
            "outbox",
            "status",
            "--format",
            "json",
            "--database",
            &app_database,
        ])
        .assert()
        .success();
    let status: Value = serde_json::from_slice(&status.get_output().stdout).unwrap();
    assert_eq!(status["by_status"]["pending"], 0);
}

#[test]
fn listings_show_row_text_terminal_safe_and_json_exact() {
    let setup = setup(&[RunKind::Scheduled]);
    let key = setup.staged[0].key.clone();
    let hostile = "evil\u{1b}[2J\u{202e}gnp.exe\u{85}";
    Connection::open(&setup.path)
        .unwrap()
        .execute(
            "UPDATE replaysafe_outbox SET pipeline = ?1, message_type = ?1, target = ?1, last_error = ?1, status = 'dead'",
            [hostile],
        )
        .unwrap();
    for args in [&["status"][..], &["list", "--status", "dead"][..]] {
        let out = setup.run(args, &[]).success();
        let shown = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
        for raw in ['\u{1b}', '\u{202e}', '\u{85}'] {
            assert!(!shown.contains(raw), "{args:?} printed {raw:?}: {shown}");
        }
        assert!(
            shown.contains("\\u{1b}") && shown.contains("\\u{202e}"),
            "{shown}"
        );
    }
    let listed = setup
        .run(&["list", "--status", "dead", "--format", "json"], &[])
        .success();
    let listed: Value = serde_json::from_slice(&listed.get_output().stdout).unwrap();
    assert_eq!(listed[0]["key"], Value::from(key.as_str()));
    assert_eq!(listed[0]["target"], hostile);
    assert_eq!(listed[0]["last_error"], hostile);
}
