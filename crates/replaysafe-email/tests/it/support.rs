//! Shared helpers: the servers `cargo xtask services smtp` started, Maildir reading,
//! unique recipients, log capture, extra aiosmtpd processes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use replaysafe_core::journal::JournalRecord;
use replaysafe_core::{EffectKind, Guard, IdempotencyKey, Journal, MemoryJournal, RetryPolicy};
use replaysafe_email::{Email, EmailClient, TlsMode};
use replaysafe_test::services::require;
use secrecy::SecretString;
use tokio::io::{AsyncBufReadExt, BufReader};

pub(crate) const PYTHON: &str = "/usr/bin/python3";

/// The plain aiosmtpd: port and Maildir.
pub(crate) fn plain_server() -> (u16, PathBuf) {
    (
        require("REPLAYSAFE_TEST_SMTP_PORT").parse().expect("port"),
        PathBuf::from(require("REPLAYSAFE_TEST_SMTP_MAILDIR")),
    )
}

/// The aiosmtpd requiring STARTTLS and AUTH.
pub(crate) struct TlsServer {
    pub(crate) port: u16,
    pub(crate) maildir: PathBuf,
    pub(crate) ca_pem: Vec<u8>,
    pub(crate) user: String,
    pub(crate) password: String,
}

pub(crate) fn tls_server() -> TlsServer {
    TlsServer {
        port: require("REPLAYSAFE_TEST_SMTPS_PORT").parse().expect("port"),
        maildir: PathBuf::from(require("REPLAYSAFE_TEST_SMTPS_MAILDIR")),
        ca_pem: std::fs::read(require("REPLAYSAFE_TEST_SMTPS_CA")).expect("reading the test CA"),
        user: require("REPLAYSAFE_TEST_SMTPS_USER"),
        password: require("REPLAYSAFE_TEST_SMTPS_PASSWORD"),
    }
}

/// A domain no other test (or earlier run against the same server) uses:
/// `{tag}-{pid}-{nanos}.example`. Tests find their messages by it.
pub(crate) fn unique_domain(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!(
        "{tag}-{}-{}.example",
        std::process::id(),
        nanos % 1_000_000_000_000
    )
}

/// A guarded client for the plain server, journaling to `journal`.
pub(crate) fn plain_client(port: u16, journal: impl Journal + 'static) -> Guard<EmailClient> {
    EmailClient::smtp("127.0.0.1", port)
        .tls(TlsMode::Plaintext)
        .timeout(Duration::from_secs(10))
        .build(journal)
        .expect("valid configuration")
}

/// A guarded STARTTLS + AUTH client for the TLS server.
pub(crate) fn tls_client(
    server: &TlsServer,
    password: &str,
    journal: impl Journal + 'static,
) -> Guard<EmailClient> {
    EmailClient::smtp("127.0.0.1", server.port)
        .tls(TlsMode::StartTls)
        .root_certificate_pem(server.ca_pem.clone())
        .credentials(server.user.clone(), SecretString::from(password.to_owned()))
        .timeout(Duration::from_secs(10))
        .build(journal)
        .expect("valid configuration")
}

/// Retries fast enough for a test, and many times.
pub(crate) fn fast_retries(attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(attempts)
        .with_base_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_millis(250))
        .with_max_elapsed(Duration::from_secs(60))
}

/// The key replaysafe must derive for an email effect of the test contexts' pipeline.
pub(crate) fn expected_key(message_type: &str, target: &str) -> IdempotencyKey {
    IdempotencyKey::derive(
        "daily_orders",
        &EffectKind::Email,
        message_type,
        target,
        &replaysafe_test::contexts::current_window(),
    )
}

/// A typical email from `reports@{domain}` to `to`.
/// The one copy of an email with one recipient (or one message), as `Guard::send` takes it.
pub(crate) fn only_copy(email: &Email) -> replaysafe_email::EmailCopy {
    let mut copies = email.copies().expect("a valid email");
    assert_eq!(copies.len(), 1, "an email that makes one copy");
    copies.remove(0)
}

pub(crate) fn simple_email(domain: &str, to: &[&str]) -> replaysafe_email::EmailBuilder {
    let mut builder = Email::builder("daily_summary")
        .from(format!("Reports <reports@{domain}>"))
        .subject(format!("Daily orders for {domain}"))
        .text("42 orders, 3 refunds.\n");
    for recipient in to {
        builder = builder.to(*recipient);
    }
    builder
}

/// One message read from a Maildir's `new/` folder.
#[derive(Debug)]
pub(crate) struct Mail {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) raw: String,
}

impl Mail {
    /// The first header named `name` (case-insensitive), unfolded.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn has_header(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    /// The base64 body of the MIME part whose headers mention `filename`.
    pub(crate) fn attachment(&self, filename: &str) -> Option<Vec<u8>> {
        let marker = format!("filename=\"{filename}\"");
        let start = self.raw.find(&marker)?;
        let rest = &self.raw[start..];
        let body_start = rest.find("\n\n")? + 2;
        let body: String = rest[body_start..]
            .lines()
            .take_while(|line| !line.starts_with("--") && !line.is_empty())
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(body.trim())
            .ok()
    }
}

/// Every message in `maildir/new` whose text contains `needle`.
pub(crate) fn mails_containing(maildir: &Path, needle: &str) -> Vec<Mail> {
    let Ok(entries) = std::fs::read_dir(maildir.join("new")) else {
        return Vec::new();
    };
    let mut mails = Vec::new();
    for entry in entries.flatten() {
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        let raw = String::from_utf8_lossy(&bytes).replace("\r\n", "\n");
        if raw.contains(needle) {
            mails.push(Mail {
                headers: parse_headers(&raw),
                raw,
            });
        }
    }
    mails
}

fn parse_headers(raw: &str) -> Vec<(String, String)> {
    let head = raw.split("\n\n").next().unwrap_or("");
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = headers.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
        } else if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    headers
}

/// The records of a memory journal.
pub(crate) fn records(journal: &MemoryJournal) -> Vec<JournalRecord> {
    journal.records()
}

/// A free port on 127.0.0.1: bound, read, released.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("binding 127.0.0.1:0")
        .port()
}

/// An extra aiosmtpd on 127.0.0.1 that this test starts and stops (by its own handle).
pub(crate) struct ExtraServer {
    child: tokio::process::Child,
    pub(crate) maildir: PathBuf,
    _dir: tempfile::TempDir,
}

/// A Mailbox server whose recipients starting with `greylisted` get `451` on their first
/// RCPT, and whose recipients starting with `unknown` get `550` quoting the address.
const POLICY_SERVER: &str = r#"
import signal, sys, threading
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox

class Policy(Mailbox):
    seen = set()
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        local = address.split("@")[0]
        if local.startswith("greylisted") and address not in self.seen:
            self.seen.add(address)
            return "451 4.7.1 greylisted, try again later"
        if local.startswith("unknown"):
            # Quoting the address, as Postfix does: it must not reach a journal or a log.
            return f"550 5.1.1 <{address}>: Recipient address rejected: no such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

controller = Controller(Policy(sys.argv[1]), hostname="127.0.0.1", port=int(sys.argv[2]))
controller.start()
print("READY", flush=True)
stop = threading.Event()
for number in (signal.SIGTERM, signal.SIGINT):
    signal.signal(number, lambda *_: stop.set())
stop.wait()
controller.stop()
"#;

impl ExtraServer {
    /// aiosmtpd's command line server with the Mailbox handler on `port`.
    pub(crate) async fn mailbox(port: u16) -> ExtraServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let maildir = dir.path().join("maildir");
        let mut command = tokio::process::Command::new(PYTHON);
        command
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(&maildir);
        let server = ExtraServer::spawn(command, maildir, dir);
        server.wait_for_banner(port).await;
        server
    }

    /// The policy server (greylisting, unknown users) on a free port.
    pub(crate) async fn policy() -> (ExtraServer, u16) {
        let dir = tempfile::tempdir().expect("temp dir");
        let maildir = dir.path().join("maildir");
        let port = free_port();
        let mut command = tokio::process::Command::new(PYTHON);
        command
            .args(["-c", POLICY_SERVER])
            .arg(&maildir)
            .arg(port.to_string());
        let mut server = ExtraServer::spawn(command, maildir, dir);
        let stdout = server.child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.expect("reading server output") {
                if line.starts_with("READY") {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(ready, Ok(true), "policy server did not start");
        (server, port)
    }

    fn spawn(
        mut command: tokio::process::Command,
        maildir: PathBuf,
        dir: tempfile::TempDir,
    ) -> ExtraServer {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting aiosmtpd");
        ExtraServer {
            child,
            maildir,
            _dir: dir,
        }
    }

    async fn wait_for_banner(&self, port: u16) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                let mut banner = [0u8; 3];
                stream.readable().await.ok();
                if stream.try_read(&mut banner).is_ok_and(|n| n == 3) && &banner == b"220" {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "aiosmtpd not ready on {port}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server (its own process, by handle) and waits for it.
    pub(crate) async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
