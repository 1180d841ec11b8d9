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
    let app = axum::Router::new()
        .route(
            "/hooks/orders",
            axum::routing::post(
                |State(seen): State<Received>, headers: HeaderMap, body: String| async move {
                    seen.lock().unwrap().push((headers, body));
                    StatusCode::OK
                },
            ),
        )
        .with_state(state);
    (serve(app), received)
}

/// Serves `app` on 127.0.0.1:0 from a thread of its own; returns the address.
pub(crate) fn serve(app: axum::Router) -> SocketAddr {
    let (ready, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            ready.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    address.recv().unwrap()
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
pub(crate) fn environments() -> [(&'static str, Vec<(String, String)>); 3] {
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
        let decisions: Vec<_> = records.iter().map(|r| r.decision).collect();
        assert!(!std::fs::read_to_string(&journal).unwrap().contains(CANARY));
        let arrived = received.lock().unwrap().len() - before;
        match name {
            "scheduled" => {
                assert!(
                    stderr.starts_with("replaysafe: delivered webhook orders.published"),
                    "{stderr}"
                );
                assert_eq!(arrived, 1);
                assert_eq!(
                    decisions,
                    [JournalDecision::Attempting, JournalDecision::Delivered]
                );
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
                assert_eq!(decisions, [JournalDecision::Suppressed], "{name}");
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

// Canaries: secrets and personal data given to `send` reach the receiver and nowhere
// else, on success and on every error path.

const QUERY: &str = "canary-query-3b1f";
const USERINFO: &str = "canary-userinfo-77d0";
const PATH: &str = "canaryPath5e2a";
const HEADER: &str = "canary-header-91c4";
const BAD_SECRET: &str = "canary-bad-secret-c0de";
const SMTP_USER: &str = "canary-smtp-user-2b6d";
const SMTP_PASSWORD: &str = "canary-smtp-pw-4e8a";
const RECIPIENT: &str = "canary-rcpt-8f3e";
const PASSWORD: &str = "canary-password-a17c";

const CANARIES: [&str; 9] = [
    QUERY,
    USERINFO,
    PATH,
    HEADER,
    BAD_SECRET,
    SMTP_USER,
    SMTP_PASSWORD,
    RECIPIENT,
    PASSWORD,
];

/// Requests an HTTP receiver saw: path and query.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// An HTTP receiver on 127.0.0.1:0 answering 500 under `/fail` and 200 anywhere else.
fn canary_receiver() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let state = seen.clone();
    let app = axum::Router::new()
        .fallback(
            |State(seen): State<Seen>, uri: axum::http::Uri| async move {
                let path = uri.path().to_owned();
                let failing = path.starts_with("/fail");
                seen.lock()
                    .unwrap()
                    .push((path, uri.query().map(str::to_owned)));
                if failing {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            },
        )
        .with_state(state);
    (serve(app), seen)
}

/// One run of `replaysafe send`: its arguments and environment, the exit code it must
/// give, and what its stderr must say.
struct Case {
    name: &'static str,
    args: Vec<String>,
    env: Vec<(String, String)>,
    code: i32,
    says: Vec<String>,
}

impl Case {
    fn new(name: &'static str, args: &[impl AsRef<str>], code: i32, says: &[&str]) -> Self {
        Case {
            name,
            args: args.iter().map(|arg| arg.as_ref().to_owned()).collect(),
            env: Vec::new(),
            code,
            says: says.iter().map(|text| (*text).to_owned()).collect(),
        }
    }

    fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// Runs the case with `context` and a journal of its own in `dir`, and checks that
    /// no canary reaches stdout, stderr or the journal.
    fn run(&self, context: &[(String, String)], dir: &std::path::Path) {
        let journal = dir.join(format!("{}.jsonl", self.name));
        let output = clean_command()
            .args(&self.args)
            .envs(context.iter().cloned())
            .envs(self.env.iter().cloned())
            .env("REPLAYSAFE_JOURNAL", &journal)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let journaled = std::fs::read_to_string(&journal).unwrap_or_default();
        let name = self.name;
        assert_eq!(output.status.code(), Some(self.code), "{name}: {stderr}");
        for expected in &self.says {
            assert!(
                stderr.contains(expected.as_str()),
                "{name}: expected {expected:?} in {stderr}"
            );
        }
        for (what, text) in [
            ("stdout", &stdout),
            ("stderr", &stderr),
            ("the journal", &journaled),
        ] {
            for canary in CANARIES {
                assert!(
                    !text.contains(canary),
                    "{name}: {what} shows {canary}:\n{text}"
                );
            }
        }
    }
}

fn scheduled() -> Vec<(String, String)> {
    environments().into_iter().next().unwrap().1
}

fn backfill() -> Vec<(String, String)> {
    environments().into_iter().nth(1).unwrap().1
}

#[test]
fn webhook_canaries_reach_no_output_and_no_journal_on_any_path() {
    let (address, seen) = canary_receiver();
    let dir = tempfile::tempdir().unwrap();
    let secret_url = format!("http://{address}/hooks/{PATH}?token={QUERY}");
    let failing_url = format!("http://{address}/fail/{PATH}?token={QUERY}");
    let query_only = format!("http://{address}/hooks/orders?token={QUERY}");
    let with_userinfo = format!("http://user:{USERINFO}@{address}/hooks/{PATH}?token={QUERY}");
    let refused = format!("http://127.0.0.1:9/hooks/{PATH}?token={QUERY}");
    let origin = |then: &str| format!("to http://{address}{then}");
    let send = [
        "send",
        "webhook",
        "--event-type",
        "orders.published",
        "--data",
        "{}",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        send.iter()
            .chain(extra)
            .map(|arg| (*arg).to_owned())
            .collect()
    };

    let cases = [
        Case::new(
            "delivered, origin, from --url-env",
            &with(&[
                "--url-env",
                "HOOK_URL",
                "--redact",
                "origin",
                "--allow-host",
                "127.0.0.0/8",
            ]),
            0,
            &[
                "replaysafe: delivered webhook orders.published",
                &origin(" (attempts 1"),
            ],
        )
        .env("HOOK_URL", &secret_url),
        Case::new(
            "delivered, hashed",
            &with(&[
                "--url",
                &secret_url,
                "--redact",
                "hashed",
                "--allow-host",
                "127.0.0.1",
            ]),
            0,
            &["replaysafe: delivered webhook orders.published to sha256:"],
        ),
        Case::new(
            "delivered, full, query",
            &with(&["--url", &query_only, "--allow-host", "127.0.0.1/32"]),
            0,
            &[&format!("to http://{address}/hooks/orders (attempts 1")],
        ),
        Case::new(
            "suppressed, origin",
            &with(&["--url", &secret_url, "--redact", "origin"]),
            0,
            &[
                "replaysafe: suppressed webhook orders.published",
                &origin(": replay_run"),
            ],
        ),
        Case::new(
            "bad header name",
            &with(&[
                "--url",
                &secret_url,
                "--redact",
                "origin",
                "--header",
                "bad header:v",
            ]),
            2,
            &["--header: ", "not a valid header name"],
        ),
        Case::new(
            "header without a colon",
            &with(&[
                "--url",
                &secret_url,
                "--header",
                &format!("Authorization=Bearer {HEADER}"),
            ]),
            2,
            &["--header: expected NAME:VALUE"],
        ),
        Case::new(
            "header value with a line break",
            &with(&[
                "--url",
                &secret_url,
                "--header",
                &format!("X-Token: {HEADER}\r\nX-Evil: 1"),
            ]),
            2,
            &["--header: ", "characters a header cannot carry"],
        ),
        Case::new(
            "bad signing secret",
            &with(&["--url", &secret_url, "--secret-env", "BAD_SECRET"]),
            2,
            &["--secret-env: ", "whsec_"],
        )
        .env("BAD_SECRET", format!("whsec_{BAD_SECRET}!")),
        Case::new(
            "credentials in the URL",
            &with(&["--url", &with_userinfo]),
            2,
            &["--url: carries credentials"],
        ),
        Case::new(
            "not an http URL, from --url-env",
            &with(&["--url-env", "HOOK_URL"]),
            2,
            &["--url-env HOOK_URL: scheme ftp"],
        )
        .env("HOOK_URL", format!("ftp://{address}/{PATH}?token={QUERY}")),
        Case::new(
            "connection refused, hashed",
            &with(&[
                "--url",
                &refused,
                "--redact",
                "hashed",
                "--allow-host",
                "127.0.0.1",
            ]),
            1,
            &[
                "replaysafe: failed webhook orders.published to sha256:",
                "connection failed",
            ],
        ),
        Case::new(
            "refused by the SSRF policy",
            &with(&["--url", &secret_url, "--redact", "origin"]),
            1,
            &[&origin(" after 1 attempt(s)"), "refused before connecting"],
        ),
        Case::new(
            "failed with 500",
            &with(&[
                "--url",
                &failing_url,
                "--redact",
                "origin",
                "--allow-host",
                "127.0.0.0/8",
            ]),
            1,
            &[
                "after 3 attempt(s)",
                "500 internal server error",
                &format!("sending webhook to http://{address}:"),
            ],
        ),
        Case::new(
            "a network that cannot be parsed",
            &with(&["--url", &secret_url, "--allow-host", "127.0.0.0/33"]),
            2,
            &["--allow-host: invalid allow-list entry \"127.0.0.0/33\""],
        ),
    ];
    for case in &cases {
        let context = if case.name.starts_with("suppressed") {
            backfill()
        } else {
            scheduled()
        };
        case.run(&context, dir.path());
    }

    // The receiver did get the canaries: three deliveries and three failed attempts.
    let seen = seen.lock().unwrap().clone();
    let secret_path = format!("/hooks/{PATH}");
    let token = format!("token={QUERY}");
    let count = |path: &str| {
        seen.iter()
            .filter(|(p, q)| p == path && q.as_deref() == Some(token.as_str()))
            .count()
    };
    assert_eq!(count(&secret_path), 2, "{seen:?}");
    assert_eq!(count("/hooks/orders"), 1, "{seen:?}");
    assert_eq!(count(&format!("/fail/{PATH}")), 3, "{seen:?}");
    assert_eq!(seen.len(), 6, "nothing else arrived: {seen:?}");
}

/// An aiosmtpd that refuses recipients starting with `unknown` with a 550 quoting the
/// address, as Postfix does.
const REJECTING_SMTP: &str = r#"
import signal, sys, threading
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox

class Rejecting(Mailbox):
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("unknown"):
            return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
        envelope.rcpt_tos.append(address)
        return "250 OK"

controller = Controller(Rejecting(sys.argv[1]), hostname="127.0.0.1", port=int(sys.argv[2]))
controller.start()
print("READY", flush=True)
stop = threading.Event()
for number in (signal.SIGTERM, signal.SIGINT):
    signal.signal(number, lambda *_: stop.set())
stop.wait()
controller.stop()
"#;

/// An aiosmtpd running `script` (given the maildir and the port as arguments; it prints
/// `READY` once listening), started by a test and stopped by its own handle.
pub(crate) struct ScriptedSmtp {
    child: std::process::Child,
    pub(crate) port: u16,
    dir: tempfile::TempDir,
}

impl ScriptedSmtp {
    pub(crate) fn start(script: &str) -> Self {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .unwrap()
            .port();
        let mut child = std::process::Command::new("/usr/bin/python3")
            .args(["-c", script])
            .arg(dir.path().join("maildir"))
            .arg(port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting aiosmtpd");
        let stdout = child.stdout.take().unwrap();
        let ready = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.starts_with("READY"));
        assert!(ready, "the scripted aiosmtpd did not start");
        ScriptedSmtp { child, port, dir }
    }

    /// Where it stores what it accepts.
    pub(crate) fn maildir(&self) -> std::path::PathBuf {
        self.dir.path().join("maildir")
    }
}

impl Drop for ScriptedSmtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn email_canaries_reach_no_output_and_no_journal_on_any_path() {
    let port = replaysafe_test::services::require("REPLAYSAFE_TEST_SMTP_PORT");
    let maildir = std::path::PathBuf::from(replaysafe_test::services::require(
        "REPLAYSAFE_TEST_SMTP_MAILDIR",
    ));
    let tls_port = replaysafe_test::services::require("REPLAYSAFE_TEST_SMTPS_PORT");
    let tls_ca = replaysafe_test::services::require("REPLAYSAFE_TEST_SMTPS_CA");
    let tls_user = replaysafe_test::services::require("REPLAYSAFE_TEST_SMTPS_USER");
    let rejecting = ScriptedSmtp::start(REJECTING_SMTP);
    let dir = tempfile::tempdir().unwrap();
    let domain = format!("cli-canary-{}.example", std::process::id());
    let recipient = format!("{RECIPIENT}@{domain}");
    let unknown = format!("unknown-{RECIPIENT}@{domain}");
    let shown = format!("to *@{domain}");
    let plain = format!("smtp://127.0.0.1:{port}");
    let send = |smtp: &str, to: &str| -> Vec<String> {
        [
            "send",
            "email",
            "--smtp",
            smtp,
            "--from",
            "reports@shop.example",
            "--to",
            to,
            "--body",
            "42 orders",
            "--message-type",
            "daily_summary",
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let case = |name, smtp: &str, to: &str, extra: &[&str], code, says: &[&str]| {
        let mut args = send(smtp, to);
        if !extra.contains(&"--subject") {
            args.extend(["--subject".to_owned(), "Daily orders".to_owned()]);
        }
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        Case::new(name, &args, code, says)
    };

    let cases = [
        case(
            "delivered",
            &plain,
            &recipient,
            &[],
            0,
            &["replaysafe: delivered email daily_summary", &shown],
        ),
        case(
            "delivered, hashed",
            &plain,
            &format!("Ana <{recipient}>"),
            &["--redact", "hashed"],
            0,
            &["replaysafe: delivered email daily_summary to sha256:"],
        ),
        case(
            "suppressed",
            &plain,
            &recipient,
            &[],
            0,
            &["replaysafe: suppressed email daily_summary", &shown],
        ),
        case(
            "credentials in the SMTP URL",
            &format!("smtp://{SMTP_USER}:{SMTP_PASSWORD}@127.0.0.1:{port}"),
            &recipient,
            &[],
            2,
            &["--smtp: expected smtp://HOST:PORT or smtps://HOST:PORT: it carries credentials"],
        ),
        case(
            "a path in the SMTP URL",
            &format!("smtp://127.0.0.1:{port}/{SMTP_PASSWORD}"),
            &recipient,
            &[],
            2,
            &["--smtp: expected smtp://HOST:PORT"],
        ),
        case(
            "not an address",
            &plain,
            &format!("{RECIPIENT} at {domain}"),
            &[],
            2,
            &["--to: invalid email field to[0]"],
        ),
        case(
            "a header injected in the subject",
            &plain,
            &recipient,
            &[
                "--subject",
                &format!("Daily\r\nBcc: {RECIPIENT}@evil.example"),
            ],
            2,
            &["--subject: invalid email field subject: contains CR or LF"],
        ),
        case(
            "connection refused",
            "smtp://127.0.0.1:9",
            &recipient,
            &[],
            1,
            &[
                "replaysafe: failed email daily_summary",
                &shown,
                "connection error",
            ],
        ),
        case(
            "550 quoting the recipient",
            &format!("smtp://127.0.0.1:{}", rejecting.port),
            &unknown,
            &[],
            1,
            &[
                &shown,
                &format!("550): 5.1.1 <*@{domain}>: Recipient address rejected"),
            ],
        ),
        case(
            "550 quoting the recipient, hashed",
            &format!("smtp://127.0.0.1:{}", rejecting.port),
            &unknown,
            &["--redact", "hashed"],
            1,
            &["to sha256:", "550): 5.1.1 <sha256:"],
        ),
        case(
            "535 for a wrong password",
            &format!("smtp://127.0.0.1:{tls_port}"),
            &recipient,
            &[
                "--starttls",
                "--ca-file",
                &tls_ca,
                "--user",
                &tls_user,
                "--password-env",
                "SMTP_PASSWORD",
            ],
            1,
            &[&shown, "(535)"],
        )
        .env("SMTP_PASSWORD", PASSWORD),
    ];
    for case in &cases {
        let context = if case.name == "suppressed" {
            backfill()
        } else {
            scheduled()
        };
        case.run(&context, dir.path());
    }

    // The server did get the recipient, once per delivered case.
    let arrived = std::fs::read_dir(maildir.join("new"))
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .filter(|message| message.contains(&format!("X-RcptTo: {recipient}")))
        .count();
    assert_eq!(arrived, 2);
}

#[test]
fn a_non_utf8_flag_value_is_an_error_naming_the_flag() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    let bad = std::ffi::OsStr::from_bytes(b"Orders \xff canary-subject");
    for (flag, args) in [
        (
            "--subject",
            vec![
                "send",
                "email",
                "--smtp",
                "smtp://127.0.0.1:9",
                "--from",
                "a@b.example",
                "--to",
                "c@d.example",
                "--body",
                "b",
                "--subject",
            ],
        ),
        (
            "--url",
            vec![
                "send",
                "webhook",
                "--event-type",
                "e",
                "--data",
                "{}",
                "--url",
            ],
        ),
        (
            "--header",
            vec![
                "send",
                "webhook",
                "--url",
                "http://127.0.0.1:9/",
                "--event-type",
                "e",
                "--data",
                "{}",
                "--header",
            ],
        ),
    ] {
        let output = clean_command()
            .args(args)
            .arg(bad)
            .envs(scheduled())
            .env("REPLAYSAFE_JOURNAL", &journal)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag}: the value is not valid UTF-8")),
            "{stderr}"
        );
        assert!(
            !stderr.contains("canary-subject") && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
    assert!(!journal.exists(), "nothing was journaled");
}

#[test]
fn control_characters_and_non_utf8_input_are_refused_naming_the_flag() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    let latin1 = dir.path().join("latin1.json");
    std::fs::write(&latin1, b"{\"city\": \"S\xe3o Paulo\"}").unwrap();
    let not_utf8 = std::ffi::OsStr::from_bytes(b"x\xff");
    let webhook = ["send", "webhook", "--url", "http://127.0.0.1:9/x"];
    let email = [
        "send",
        "email",
        "--smtp",
        "smtp://127.0.0.1:9",
        "--from",
        "a@b.example",
        "--to",
        "c@d.example",
        "--subject",
        "s",
        "--body",
        "b",
    ];
    let data_file = format!("@{}", latin1.display());
    let cases: [(Vec<&str>, &str); 6] = [
        (
            [
                &webhook[..],
                &["--event-type", "e\u{1b}[31m", "--data", "{}"],
            ]
            .concat(),
            "--event-type: invalid event_type: must not contain control characters",
        ),
        (
            [&webhook[..], &["--event-type", "e", "--data", &data_file]].concat(),
            "is not valid UTF-8",
        ),
        (
            [
                &webhook[..],
                &[
                    "--event-type",
                    "e",
                    "--data",
                    "{}",
                    "--secret-env",
                    "NOT_UTF8",
                ],
            ]
            .concat(),
            "--secret-env: environment variable NOT_UTF8 is not valid UTF-8",
        ),
        (
            vec![
                "send",
                "webhook",
                "--url-env",
                "NOT_UTF8",
                "--event-type",
                "e",
                "--data",
                "{}",
            ],
            "--url-env: environment variable NOT_UTF8 is not valid UTF-8",
        ),
        (
            [&email[..], &["--message-type", "m\u{1b}]0;title\u{7}"]].concat(),
            "--message-type: invalid email field message_type: contains a control character",
        ),
        (
            [
                &email[..],
                &["--user", "u\r\nx", "--password-env", "NOT_UTF8"],
            ]
            .concat(),
            "--password-env: environment variable NOT_UTF8 is not valid UTF-8",
        ),
    ];
    for (args, expected) in cases {
        let mut command = clean_command();
        command
            .args(&args)
            .envs(scheduled())
            .env("REPLAYSAFE_JOURNAL", &journal);
        // Only where a flag names it: resolving the context reads the whole environment.
        if args.contains(&"NOT_UTF8") {
            command.env("NOT_UTF8", not_utf8);
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            !stderr.contains('\u{1b}'),
            "no escape code reaches a terminal: {stderr:?}"
        );
    }
    let output = clean_command()
        .args(email)
        .args(["--user", "u\r\nx", "--password-env", "PASSWORD"])
        .envs(scheduled())
        .env("PASSWORD", "p")
        .env("REPLAYSAFE_JOURNAL", &journal)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--user: must be non-empty and free of CR, LF and NUL"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap_or_default(),
        "",
        "nothing journaled"
    );
}
