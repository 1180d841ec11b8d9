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
fn a_journal_that_keeps_nothing_is_refused_and_nothing_is_sent() {
    let (address, requests) = http_receiver();
    let url = format!("http://{address}/hooks/orders");
    let send = |journal: Option<&Path>, variable: Option<&str>| {
        let mut command = clean_command();
        command
            .args([
                "send",
                "webhook",
                "--url",
                &url,
                "--event-type",
                "orders.published",
            ])
            .args(["--data", "{}", "--allow-host", "127.0.0.1"])
            .envs(scheduled());
        if let Some(journal) = journal {
            command.arg("--journal").arg(journal);
        }
        if let Some(variable) = variable {
            command.env("REPLAYSAFE_JOURNAL", variable);
        }
        command.output().unwrap()
    };
    for (flag, variable, named, path) in [
        (Some("/dev/null"), None, "--journal", "/dev/null"),
        (Some("/dev/full"), None, "--journal", "/dev/full"),
        (None, Some("/dev/null"), "REPLAYSAFE_JOURNAL", "/dev/null"),
        (
            None,
            Some("/dev/stdout"),
            "REPLAYSAFE_JOURNAL",
            "/dev/stdout",
        ),
    ] {
        let output = send(flag.map(Path::new), variable);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("{named}: opening journal {path}: it is ")),
            "{stderr}"
        );
        assert!(
            stderr.contains("not a regular file: a journal must be a file that keeps every record"),
            "{stderr}"
        );
        assert_eq!(requests.load(Ordering::SeqCst), 0, "a request arrived");
    }

    // Positive control: the same send with a regular file reaches the receiver.
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    let output = send(Some(&journal), None);
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

/// `replaysafe send webhook` to `url`, journaling to `journal`, under a file-size limit
/// of `limit` bytes when given (through `prlimit`, with SIGXFSZ at its default action:
/// the binary itself must turn it into an error it can report), in the environment of
/// `run` (the same run gives the same window, and so the same key).
fn send_webhook(
    run: &[(String, String)],
    url: &str,
    journal: &Path,
    limit: Option<u64>,
) -> std::process::Output {
    let binary = assert_cmd::cargo::cargo_bin("replaysafe");
    let mut command = match limit {
        Some(bytes) => {
            let mut command = std::process::Command::new("prlimit");
            command
                .arg(format!("--fsize={bytes}"))
                .arg("--")
                .arg(binary);
            command
        }
        None => std::process::Command::new(binary),
    };
    command
        .args([
            "send",
            "webhook",
            "--url",
            url,
            "--event-type",
            "orders.published",
        ])
        .args(["--data", "{}", "--allow-host", "127.0.0.1", "--journal"])
        .arg(journal)
        .env_clear()
        .envs(run.iter().cloned());
    command.output().unwrap()
}

/// Every line of a journal: its decision, or `None` for a line that is not a record.
fn lines(path: &Path) -> Vec<Option<JournalDecision>> {
    JournalReader::open(path)
        .unwrap()
        .map(|line| line.ok().map(|record| record.decision))
        .collect()
}

/// The key a `send` line on stderr names: `... (attempts 1, key KEY)`.
fn key_of(stderr: &str) -> String {
    let start = stderr.find("key ").unwrap_or_else(|| panic!("{stderr}")) + 4;
    stderr[start..start + 64].to_owned()
}

#[test]
fn an_attempting_record_cut_short_sends_nothing_and_the_next_send_starts_a_line_of_its_own() {
    let (address, requests) = http_receiver();
    let run = scheduled();
    let url = format!("http://{address}/hooks/orders");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");

    // The attempting line is cut at 100 bytes and the rest of it fails: nothing is sent.
    let output = send_webhook(&run, &url, &journal, Some(100));
    let cut_stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{cut_stderr}");
    assert!(
        cut_stderr.contains(
            ": nothing was sent: journaling an effect that was not delivered: writing the attempting record of effect "
        ) && cut_stderr.contains(&format!("to journal {}: ", journal.display())),
        "{cut_stderr}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 0, "sent without a record");
    let fragment = std::fs::read(&journal).unwrap();
    assert_eq!(fragment.len(), 100);
    assert!(!fragment.ends_with(b"\n"));

    // The next send, without the limit, writes its records on lines of their own.
    let output = send_webhook(&run, &url, &journal, None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    assert!(cut_stderr.contains(&key_of(&stderr)), "{cut_stderr}");
    use JournalDecision::*;
    assert_eq!(lines(&journal), [None, Some(Attempting), Some(Delivered)]);
}

#[test]
fn a_delivered_record_cut_short_exits_3_naming_the_journal_and_the_key() {
    let (address, requests) = http_receiver();
    let run = scheduled();
    let url = format!("http://{address}/hooks/orders");
    let dir = tempfile::tempdir().unwrap();
    // How long the two lines are, from a send without a limit.
    let measured = dir.path().join("measured.jsonl");
    assert_eq!(
        send_webhook(&run, &url, &measured, None).status.code(),
        Some(0)
    );
    let text = std::fs::read_to_string(&measured).unwrap();
    let [attempting, delivered] = text.lines().map(str::len).collect::<Vec<_>>()[..] else {
        panic!("{text}")
    };

    // Room for the attempting line and half the delivered one.
    let journal = dir.path().join("j.jsonl");
    let limit = (attempting + delivered / 2) as u64;
    let output = send_webhook(&run, &url, &journal, Some(limit));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        2,
        "the second send delivered"
    );
    let key = records(&measured)[0].effect.idempotency_key.clone();
    for expected in [
        format!(
            "webhook orders.published to http://{address}/hooks/orders was delivered, but the journal lacks the outcome"
        ),
        format!(
            "writing the delivered record of effect {key} to journal {}: ",
            journal.display()
        ),
        format!("ask the receiver by key {key} before sending it again"),
    ] {
        assert!(stderr.contains(&expected), "{expected}\n{stderr}");
    }
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), limit);
    use JournalDecision::*;
    assert_eq!(lines(&journal), [Some(Attempting), None]);

    // The report fails on it: the attempt has no outcome, and the cut line may be one.
    let report = |flags: &[&str]| {
        clean_command()
            .arg("report")
            .args(flags)
            .arg(&journal)
            .output()
            .unwrap()
    };
    assert_eq!(report(&["--fail-on", "in-doubt"]).status.code(), Some(2));
    let output = report(&["--skip-invalid", "--fail-on", "in-doubt"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("in doubt 1"), "{stdout}");
    assert!(
        stdout.contains("1 skipped line may be an attempting record (nothing in it proves otherwise): --fail-on in-doubt counts it as possibly in doubt"),
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(
            "the journals hold 2 in doubt (1 of them an invalid line that may be an attempting record)"
        ),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_delivery_in_doubt_after_a_line_cut_short_is_reported_in_doubt() {
    // The sequence of issue 19: one send's attempting line is cut short, the next send
    // delivers and its outcome cannot be journaled. The second attempt must read whole.
    let (address, requests) = http_receiver();
    let run = scheduled();
    let url = format!("http://{address}/hooks/orders");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    assert_eq!(
        send_webhook(&run, &url, &journal, Some(100)).status.code(),
        Some(2)
    );
    let measured = dir.path().join("measured.jsonl");
    assert_eq!(
        send_webhook(&run, &url, &measured, None).status.code(),
        Some(0)
    );
    let attempting = std::fs::read_to_string(&measured)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .len();
    // Room for the fragment, a newline, the attempting line, and a little more.
    let limit = 100 + 1 + attempting as u64 + 40;
    let output = send_webhook(&run, &url, &journal, Some(limit));
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(requests.load(Ordering::SeqCst), 2);
    use JournalDecision::*;
    assert_eq!(lines(&journal), [None, Some(Attempting), None]);

    let output = clean_command()
        .args(["report", "--skip-invalid", "--fail-on", "in-doubt"])
        .arg(&journal)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    // The attempt itself is listed in doubt, with its key, not only guessed at.
    assert!(stdout.contains("in doubt 1"), "{stdout}");
    assert!(
        stdout.contains(&records(&measured)[0].effect.idempotency_key),
        "{stdout}"
    );
}

#[test]
fn report_counts_an_invalid_line_in_doubt_unless_it_provably_is_no_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let (address, _) = http_receiver();
    let run = scheduled();
    let url = format!("http://{address}/hooks/orders");
    let whole = dir.path().join("whole.jsonl");
    assert_eq!(
        send_webhook(&run, &url, &whole, None).status.code(),
        Some(0)
    );
    let text = std::fs::read_to_string(&whole).unwrap();
    let attempting = text.lines().next().unwrap();
    let suppressed = attempting.replace(r#""decision":"attempting""#, r#""decision":"suppressed""#);
    let report = |extra: &str| {
        let journal = dir.path().join("j.jsonl");
        std::fs::write(&journal, format!("{text}{extra}\n")).unwrap();
        clean_command()
            .args(["report", "--skip-invalid", "--fail-on", "in-doubt"])
            .arg(&journal)
            .output()
            .unwrap()
    };
    // A whole suppressed record with a malformed time: invalid, and provably no attempt.
    let output = report(&suppressed.replacen(r#""ts":""#, r#""ts":"yesterday "#, 1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("skipped 1 invalid line"), "{stdout}");
    assert!(!stdout.contains("may be an attempting record"), "{stdout}");
    // The same line cut short, or an attempt cut short with a whole record run onto it.
    for extra in [
        suppressed[..suppressed.len() - 30].to_owned(),
        format!("{}{suppressed}", &attempting[..120]),
    ] {
        let output = report(&extra);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{extra}\n{stdout}");
        assert!(
            stdout.contains("1 skipped line may be an attempting record"),
            "{stdout}"
        );
    }
}
