//! No delivery without a record, through the real binary: an unwritable journal sends
//! nothing, every delivery has its `attempting` and `delivered` records, and a process
//! killed after its first delivery leaves that delivery's records in the file.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};

use assert_cmd::Command;
use chrono::{TimeDelta, Utc};
use replaysafe_core::journal::{JournalDecision, JournalReader, JournalRecord};

fn clean_command() -> Command {
    let mut command = Command::cargo_bin("replaysafe").unwrap();
    for (key, _) in std::env::vars() {
        if key.starts_with("REPLAYSAFE_") || key.starts_with("AIRFLOW_CTX_") {
            command.env_remove(key);
        }
    }
    command
}

/// A current scheduled Airflow run: the gate delivers.
fn scheduled() -> Vec<(String, String)> {
    let now = Utc::now();
    [
        ("AIRFLOW_CTX_DAG_ID", "daily_orders".to_owned()),
        (
            "AIRFLOW_CTX_DAG_RUN_ID",
            "scheduled__2026-11-29T00:00:00+00:00".to_owned(),
        ),
        (
            "AIRFLOW_CTX_DATA_INTERVAL_START",
            replaysafe_core::rfc3339(now - TimeDelta::hours(2)),
        ),
        (
            "AIRFLOW_CTX_DATA_INTERVAL_END",
            replaysafe_core::rfc3339(now - TimeDelta::minutes(10)),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn records(path: &Path) -> Vec<JournalRecord> {
    JournalReader::open(path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A bare HTTP receiver on 127.0.0.1 that answers 200 and counts the requests it got.
fn http_receiver() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = std::io::Read::read_exact(&mut reader, &mut body);
            let _ = (&stream)
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (address, requests)
}

#[test]
fn an_unwritable_journal_sends_nothing_and_says_so() {
    let (address, requests) = http_receiver();
    let url = format!("http://{address}/hooks/orders");
    let send = |journal: &Path| {
        clean_command()
            .args([
                "send",
                "webhook",
                "--url",
                &url,
                "--event-type",
                "orders.published",
            ])
            .args(["--data", "{}", "--allow-host", "127.0.0.1", "--journal"])
            .arg(journal)
            .envs(scheduled())
            .output()
            .unwrap()
    };
    let output = send(Path::new("/dev/full"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("journaling an effect that was not delivered: writing journal /dev/full"),
        "{stderr}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 0, "a request arrived");

    // Positive control: the same send with a writable journal reaches the receiver.
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    let output = send(&journal);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let decisions: Vec<_> = records(&journal)
        .iter()
        .map(|r| (r.decision, r.attempt))
        .collect();
    assert_eq!(
        decisions,
        [
            (JournalDecision::Attempting, 1),
            (JournalDecision::Delivered, 1)
        ]
    );
}

#[test]
fn an_email_to_two_recipients_journals_each_attempt_and_delivery() {
    let port = replaysafe_test::services::require("REPLAYSAFE_TEST_SMTP_PORT");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    let output = clean_command()
        .args([
            "send",
            "email",
            "--smtp",
            &format!("smtp://127.0.0.1:{port}"),
        ])
        .args(["--from", "reports@shop.example"])
        .args(["--to", "ana@first.example", "--to", "bob@second.example"])
        .args(["--subject", "durable", "--body", "42 orders"])
        .arg("--journal")
        .arg(&journal)
        .envs(scheduled())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let journaled: Vec<_> = records(&journal)
        .iter()
        .map(|r| (r.effect.target.clone(), r.decision, r.attempt))
        .collect();
    use JournalDecision::*;
    assert_eq!(
        journaled,
        [
            ("*@first.example".to_owned(), Attempting, 1),
            ("*@first.example".to_owned(), Delivered, 1),
            ("*@second.example".to_owned(), Attempting, 1),
            ("*@second.example".to_owned(), Delivered, 1),
        ]
    );
}

/// A minimal SMTP server on 127.0.0.1 that accepts the first message and, at the second
/// `MAIL FROM`, says so on `second` and answers nothing more: the sender hangs mid-delivery.
fn smtp_that_holds_the_second_message() -> (u16, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (second, held) = mpsc::channel();
    let messages = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let second = second.clone();
            let messages = messages.clone();
            std::thread::spawn(move || serve_smtp(stream, &messages, &second));
        }
    });
    (port, held)
}

fn serve_smtp(stream: TcpStream, messages: &AtomicUsize, second: &mpsc::Sender<()>) {
    let mut out = stream.try_clone().unwrap();
    let mut reply = |text: &str| out.write_all(format!("{text}\r\n").as_bytes()).is_ok();
    let mut lines = BufReader::new(stream).lines();
    if !reply("220 127.0.0.1 ESMTP test") {
        return;
    }
    while let Some(Ok(line)) = lines.next() {
        let command = line.to_ascii_uppercase();
        let answered = if command.starts_with("EHLO") || command.starts_with("HELO") {
            reply("250 127.0.0.1")
        } else if command.starts_with("MAIL FROM") {
            if messages.fetch_add(1, Ordering::SeqCst) == 1 {
                let _ = second.send(());
                // Hold: read until the client goes away, answer nothing.
                for _ in lines.by_ref() {}
                return;
            }
            reply("250 OK")
        } else if command == "DATA" {
            if !reply("354 go ahead") {
                return;
            }
            for line in lines.by_ref() {
                if line.map(|l| l == ".").unwrap_or(true) {
                    break;
                }
            }
            reply("250 queued")
        } else if command == "QUIT" {
            let _ = reply("221 bye");
            return;
        } else {
            reply("250 OK")
        };
        if !answered {
            return;
        }
    }
}

#[test]
fn a_process_killed_after_its_first_delivery_leaves_its_records() {
    for signal in ["KILL", "TERM"] {
        let (port, held) = smtp_that_holds_the_second_message();
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("j.jsonl");
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("replaysafe"))
            .args([
                "send",
                "email",
                "--smtp",
                &format!("smtp://127.0.0.1:{port}"),
            ])
            .args(["--from", "reports@shop.example"])
            .args(["--to", "ana@first.example", "--to", "bob@second.example"])
            .args(["--subject", "killed", "--body", "42 orders"])
            .arg("--journal")
            .arg(&journal)
            .env_clear()
            .envs(scheduled())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The second message is in flight: the first was delivered and journaled by now.
        held.recv().unwrap();
        let killed = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(if signal == "KILL" { 9 } else { 15 }),
            "{signal}: {status:?}"
        );

        let journaled: Vec<_> = records(&journal)
            .iter()
            .map(|r| (r.effect.target.clone(), r.decision))
            .collect();
        use JournalDecision::*;
        assert_eq!(
            journaled,
            [
                ("*@first.example".to_owned(), Attempting),
                ("*@first.example".to_owned(), Delivered),
                ("*@second.example".to_owned(), Attempting),
            ],
            "{signal}"
        );

        // The report says the second one is in doubt, and the gate fails on it.
        let output = clean_command()
            .args(["report", "--fail-on", "in-doubt"])
            .arg(&journal)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{signal}: {stdout}");
        assert!(
            stdout.contains("delivered 1; failed 0; in doubt 1"),
            "{stdout}"
        );
        assert!(stdout.contains("*@second.example"), "{stdout}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("the journals hold 1 in doubt"),
            "{signal}"
        );
    }
}
