//! Memory through the real binary: a key once delivered is not delivered again by another
//! process, processes racing on one key deliver it once, and a key left in doubt by a
//! killed process is sent again only to a receiver that drops repeats.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use replaysafe_core::journal::{JournalDecision, JournalReader, JournalRecord};

use crate::send::{ScriptedSmtp, environments};

/// The binary with no `REPLAYSAFE_` or `AIRFLOW_CTX_` variable of this process, as a
/// process that can be killed.
fn clean_command() -> std::process::Command {
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("replaysafe"));
    for (key, _) in std::env::vars() {
        if key.starts_with("REPLAYSAFE_") || key.starts_with("AIRFLOW_CTX_") {
            command.env_remove(key);
        }
    }
    command.stdin(Stdio::null());
    command
}

fn records(path: &Path) -> Vec<JournalRecord> {
    JournalReader::open(path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The messages in `maildir` whose text contains `subject`.
fn arrived(maildir: &Path, subject: &str) -> usize {
    std::fs::read_dir(maildir.join("new"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| {
                    std::fs::read_to_string(entry.path()).is_ok_and(|text| text.contains(subject))
                })
                .count()
        })
        .unwrap_or(0)
}

/// `replaysafe send email` of one message to one recipient, as a command to run.
fn send_email(
    port: &str,
    subject: &str,
    env: &[(String, String)],
    journal: &Path,
) -> std::process::Command {
    let mut command = clean_command();
    command
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
            "ana@memory.example",
        ])
        .args(["--subject", subject, "--body", "42 orders"])
        .args(["--message-type", "daily_summary"])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("REPLAYSAFE_JOURNAL", journal);
    command
}

fn smtp_server() -> (String, PathBuf) {
    (
        replaysafe_test::services::require("REPLAYSAFE_TEST_SMTP_PORT"),
        PathBuf::from(replaysafe_test::services::require(
            "REPLAYSAFE_TEST_SMTP_MAILDIR",
        )),
    )
}

#[test]
fn the_same_email_from_another_process_is_not_sent_again_unless_the_ledger_is_off() {
    let (port, maildir) = smtp_server();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let subject = format!("memory sequential {}", std::process::id());
    let (_, scheduled) = environments().into_iter().next().unwrap();

    let first = send_email(&port, &subject, &scheduled, &journal)
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(0));
    // A retry of the task: another try number, the same window, the same journal.
    let mut retry = scheduled.clone();
    retry.push(("AIRFLOW_CTX_TRY_NUMBER".into(), "2".into()));
    let second = send_email(&port, &subject, &retry, &journal)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("suppressed email daily_summary to *@memory.example: already_delivered"),
        "{stderr}"
    );
    assert_eq!(arrived(&maildir, &subject), 1);
    let suppressed = records(&journal).pop().unwrap();
    assert_eq!(suppressed.reasons, ["already_delivered"]);
    assert!(
        suppressed
            .note
            .as_deref()
            .is_some_and(|note| note.contains("scheduled__2026-11-29T00:00:00+00:00")),
        "{:?}",
        suppressed.note
    );

    // Meant to repeat: delivered again, and journaled as such.
    let third = send_email(&port, &subject, &retry, &journal)
        .arg("--no-ledger")
        .output()
        .unwrap();
    assert_eq!(third.status.code(), Some(0));
    assert_eq!(arrived(&maildir, &subject), 2);
    let delivered = records(&journal).pop().unwrap();
    assert_eq!(delivered.decision, JournalDecision::Delivered);
    assert!(
        delivered
            .note
            .as_deref()
            .is_some_and(|note| note.starts_with("ledger off"))
    );
}

#[test]
fn processes_racing_on_one_email_send_it_once() {
    let (port, maildir) = smtp_server();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let subject = format!("memory race {}", std::process::id());
    let (_, scheduled) = environments().into_iter().next().unwrap();
    let racers: Vec<Child> = (0..4)
        .map(|_| {
            send_email(&port, &subject, &scheduled, &journal)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut racer in racers {
        assert_eq!(racer.wait().unwrap().code(), Some(0));
    }
    assert_eq!(arrived(&maildir, &subject), 1);
    let all = records(&journal);
    let count = |decision| all.iter().filter(|r| r.decision == decision).count();
    assert_eq!(count(JournalDecision::Delivered), 1);
    assert_eq!(count(JournalDecision::Suppressed), 3);
}

/// An aiosmtpd that stores each message, then holds its answer to the first one for a
/// minute: a sender killed meanwhile never learns the outcome.
const HOLDING_SMTP: &str = r#"
import asyncio, signal, sys, threading
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox

class Holding(Mailbox):
    held = False
    async def handle_DATA(self, server, session, envelope):
        answer = await super().handle_DATA(server, session, envelope)
        if not Holding.held:
            Holding.held = True
            await asyncio.sleep(60)
        return answer

controller = Controller(Holding(sys.argv[1]), hostname="127.0.0.1", port=int(sys.argv[2]))
controller.start()
print("READY", flush=True)
stop = threading.Event()
for number in (signal.SIGTERM, signal.SIGINT):
    signal.signal(number, lambda *_: stop.set())
stop.wait()
controller.stop()
"#;

/// Waits until `done` holds, for at most 30 s.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_email_whose_sender_was_killed_after_the_server_took_it_is_in_doubt_and_not_sent_again() {
    let server = ScriptedSmtp::start(HOLDING_SMTP);
    let port = server.port.to_string();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let subject = format!("memory in doubt {}", std::process::id());
    let (_, scheduled) = environments().into_iter().next().unwrap();

    let mut sender = send_email(&port, &subject, &scheduled, &journal)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the server to store the message", || {
        arrived(&server.maildir(), &subject) == 1
    });
    sender.kill().unwrap();
    sender.wait().unwrap();
    let left = records(&journal);
    assert_eq!(
        left.iter().map(|r| r.decision).collect::<Vec<_>>(),
        [JournalDecision::Attempting],
        "killed between the server's acceptance and the outcome"
    );

    let again = send_email(&port, &subject, &scheduled, &journal)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(": in_doubt"), "{stderr}");
    assert_eq!(arrived(&server.maildir(), &subject), 1, "sent again");

    let report = clean_command()
        .args(["report", "--fail-on", "in-doubt"])
        .arg(&journal)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert_eq!(report.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("in doubt"), "{stdout}");
}

#[test]
fn a_webhook_left_in_doubt_is_sent_again_under_the_same_key() {
    // A receiver that never answers its first request, and answers 200 after that.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let keys = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = keys.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            let mut key = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                let lower = line.to_ascii_lowercase();
                if let Some(value) = lower.strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                if let Some(value) = lower.strip_prefix("idempotency-key:") {
                    key = value.trim().to_owned();
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = std::io::Read::read_exact(&mut reader, &mut body);
            let first = {
                let mut keys = seen.lock().unwrap();
                keys.push(key);
                keys.len() == 1
            };
            if first {
                held.push(stream);
                continue;
            }
            let _ = (&stream)
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let (_, scheduled) = environments().into_iter().next().unwrap();
    let send = || {
        let mut command = clean_command();
        command
            .args([
                "send",
                "webhook",
                "--url",
                &format!("http://{address}/hooks"),
            ])
            .args([
                "--event-type",
                "orders.published",
                "--data",
                "{\"orders\":42}",
            ])
            .args(["--allow-host", "127.0.0.1"])
            .envs(scheduled.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("REPLAYSAFE_JOURNAL", &journal);
        command
    };
    let mut sender = send()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the first request", || keys.lock().unwrap().len() == 1);
    sender.kill().unwrap();
    sender.wait().unwrap();

    let again = send().output().unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("delivered webhook"), "{stderr}");
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 2);
    assert!(!keys[0].is_empty());
    assert_eq!(
        keys[0], keys[1],
        "the same key, which the receiver de-duplicates"
    );
}

/// A fresh database on the test server: (its URL without the password, the password).
fn fresh_postgres() -> (String, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = runtime.block_on(async {
        let admin = replaysafe_test::services::require("REPLAYSAFE_TEST_POSTGRES_URL");
        let (client, connection) = replaysafe_outbox::tokio_postgres::connect(
            &admin,
            replaysafe_outbox::tokio_postgres::NoTls,
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        let name = format!("journal_{:016x}", fastrand::u64(..));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        format!("{}/{name}", admin.rsplit_once('/').unwrap().0)
    });
    crate::outbox::split_password(&url)
}

#[test]
fn a_database_journal_is_the_ledger_of_every_process_sharing_it() {
    let (port, maildir) = smtp_server();
    let dir = tempfile::tempdir().unwrap();
    let (postgres, password) = fresh_postgres();
    let sqlite = format!("sqlite:{}", dir.path().join("journal.db").display());
    let (_, scheduled) = environments().into_iter().next().unwrap();
    for (name, journal) in [("postgres", &postgres), ("sqlite", &sqlite)] {
        let subject = format!("memory {name} {}", std::process::id());
        let racers: Vec<Child> = (0..4)
            .map(|_| {
                send_email(&port, &subject, &scheduled, Path::new(journal))
                    .env("PGPASSWORD", &password)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut racer in racers {
            assert_eq!(racer.wait().unwrap().code(), Some(0), "{name}");
        }
        assert_eq!(arrived(&maildir, &subject), 1, "{name}");
    }

    // report and diff read both databases: four racers, one delivery, three suppressed as
    // already delivered; the URL shown without its password.
    let review = |args: &[&str]| {
        let output = clean_command()
            .args(args)
            .env("PGPASSWORD", &password)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!stdout.contains(&password) && !stderr.contains(&password));
        (output.status.code(), stdout, stderr)
    };
    for journal in [&postgres, &sqlite] {
        let (code, json, stderr) = review(&[
            "report",
            journal,
            "--pipeline",
            "daily_orders",
            "--since",
            "2026-01-01",
            "--format",
            "json",
            "--by",
            "reason",
        ]);
        assert_eq!(code, Some(0), "{stderr}");
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json["records"], 5, "{json}");
        assert_eq!(json["groups"][0]["delivered"], 1, "{json}");
        // Each loser saw the key delivered or, while the winner was sending, in doubt.
        let reasons = &json["breakdowns"]["reason"];
        let suppressed = |reason: &str| reasons[reason]["suppressed"].as_u64().unwrap_or(0);
        assert_eq!(
            suppressed("already_delivered") + suppressed("in_doubt"),
            3,
            "{json}"
        );
        let shown = json["journals"][0].as_str().unwrap();
        assert!(
            shown.starts_with(if journal.starts_with("sqlite:") {
                "sqlite:"
            } else {
                "postgres://"
            }),
            "{shown}"
        );
        // Another pipeline's records only: none.
        let (code, text, stderr) = review(&["report", journal, "--pipeline", "someone_else"]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(text.contains("no effects journaled"), "{text}");
        // Records from a later time only: none.
        let (_, text, _) = review(&["report", journal, "--since", "2999-01-01T00:00:00Z"]);
        assert!(text.contains("no effects journaled"), "{text}");
    }
    let (code, text, stderr) = review(&["diff", &postgres, &sqlite, "--pipeline", "daily_orders"]);
    assert!(code == Some(0) || code == Some(1), "{stderr}");
    assert!(!text.is_empty(), "{stderr}");

    // --pipeline with files only, and a database that is not there: exit 2, naming why,
    // and nothing created.
    let file = dir.path().join("plain.jsonl");
    std::fs::write(&file, "").unwrap();
    let (code, _, stderr) = review(&[
        "report",
        file.to_str().unwrap(),
        "--pipeline",
        "daily_orders",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--pipeline and --since select a database journal"),
        "{stderr}"
    );
    let missing = dir.path().join("missing.db");
    let (code, _, stderr) = review(&["report", &format!("sqlite:{}", missing.display())]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no such database"), "{stderr}");
    assert!(!missing.exists());

    // A wrong password: exit 2, nothing sent, the password not repeated.
    let subject = format!("memory wrong password {}", std::process::id());
    let wrong = send_email(&port, &subject, &scheduled, Path::new(&postgres))
        .env("PGPASSWORD", "wrong-password-canary-77c1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("REPLAYSAFE_JOURNAL postgres://"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("canary") && !stderr.contains(&password),
        "{stderr}"
    );
    assert_eq!(arrived(&maildir, &subject), 0);
}

#[test]
fn a_database_journals_password_is_shown_nowhere() {
    const CANARY: &str = "journal-password-canary-5e1f";
    let (_, scheduled) = environments().into_iter().next().unwrap();
    let journal = format!("postgres://replaysafe:{CANARY}@127.0.0.1:1/journal");
    for args in [&["context"][..], &["context", "--json"][..]] {
        let output = clean_command()
            .args(args)
            .envs(scheduled.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("REPLAYSAFE_JOURNAL", &journal)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(output.status.code(), Some(0), "{text}");
        assert!(
            text.contains("postgres://replaysafe:…@127.0.0.1:1/journal"),
            "{text}"
        );
        assert!(!text.contains(CANARY), "{text}");
    }
    // A journal that cannot be reached: exit 2, nothing sent, the password not repeated.
    let output = clean_command()
        .args(["send", "webhook", "--url", "http://127.0.0.1:9/hooks"])
        .args(["--event-type", "orders.published", "--data", "{}"])
        .args(["--allow-host", "127.0.0.1"])
        .envs(scheduled.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("REPLAYSAFE_JOURNAL", &journal)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains(CANARY), "{stderr}");
}
