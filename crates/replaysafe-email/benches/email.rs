//! Guarded SMTP delivery against the same messages sent with raw lettre, both to the
//! plain aiosmtpd that `cargo xtask services smtp` starts (REPLAYSAFE_TEST_SMTP_PORT),
//! interleaved in one process; and the rate of suppressed emails journaled to JSON Lines.
//!
//! The guarded path adds building and checking the email, the body digest, the key, the
//! gate and one journal record per message. Both sides send the same headers and body,
//! `Message-ID` included (precomputed for raw lettre), from `CONCURRENCY` tasks sharing
//! one client and its connection pool.
//!
//! Why concurrent: lettre 0.11.23 leaves Nagle's algorithm on, so each message waits for
//! the server's delayed ACK (about 40 ms on Linux) before its final `.` line leaves; one
//! connection then carries about 22 messages a second whoever sends them. Ten pooled
//! connections keep the run short and load both subjects alike.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lettre::message::{Mailbox as LettreMailbox, SinglePart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use replaysafe_bench::{Report, best_of, interleaved_chunks, per_second};
use replaysafe_core::{EffectKind, Guard, IdempotencyKey, Journal, JsonlJournal};
use replaysafe_email::{Email, EmailClient, TlsMode};
use replaysafe_test::contexts;
use replaysafe_test::services::require;
use tokio::task::JoinSet;

/// Messages per subject in one measurement.
const MESSAGES: usize = 1_000;
/// The subjects alternate every `CHUNK` messages, so both see the same load.
const CHUNK: usize = 100;
/// Measurements of each chunk per subject; the fastest counts.
const REPEATS: usize = 3;
/// Sending tasks per subject (lettre's default pool keeps up to 10 connections).
const CONCURRENCY: usize = 10;
/// Suppressed emails per measurement of the journaling rate.
const SUPPRESSED: usize = 20_000;

const TEXT: &str = "Orders for 2026-08-05: 42 orders, 3 refunds, 88412.50 EUR.\n";

struct Bench {
    domain: String,
    sender: String,
}

impl Bench {
    fn recipient(&self, index: usize) -> String {
        format!("user{index}@{}", self.domain)
    }

    fn subject(&self, index: usize) -> String {
        format!("Daily orders #{index}")
    }

    fn email(&self, index: usize) -> Email {
        Email::builder("daily_summary")
            .from(self.sender.as_str())
            .to(self.recipient(index))
            .subject(self.subject(index))
            .text(TEXT)
            .build()
    }

    /// What raw lettre sends for message `index`: the same headers and body.
    fn lettre_message(&self, index: usize, message_id: &str) -> Message {
        let from: LettreMailbox = self.sender.parse().expect("sender");
        let to: LettreMailbox = self.recipient(index).parse().expect("recipient");
        Message::builder()
            .from(from)
            .to(to)
            .subject(self.subject(index))
            .message_id(Some(message_id.to_owned()))
            .singlepart(SinglePart::plain(TEXT.to_owned()))
            .expect("message")
    }
}

/// Messages `first..first + CHUNK`, shared out among `CONCURRENCY` tasks.
fn chunk_for(worker: usize, first: usize) -> impl Iterator<Item = usize> {
    (first + worker..first + CHUNK).step_by(CONCURRENCY)
}

async fn guarded_chunk(bench: Arc<Bench>, client: Arc<Guard<EmailClient>>, first: usize) {
    let mut workers = JoinSet::new();
    for worker in 0..CONCURRENCY {
        let (bench, client) = (Arc::clone(&bench), Arc::clone(&client));
        workers.spawn(async move {
            let cx = contexts::live();
            for index in chunk_for(worker, first) {
                let outcome = client
                    .send(
                        &cx,
                        &bench
                            .email(index)
                            .copies()
                            .expect("a valid email")
                            .remove(0),
                    )
                    .await
                    .expect("guarded delivery");
                assert!(outcome.is_delivered());
            }
        });
    }
    workers.join_all().await;
}

async fn raw_chunk(
    bench: Arc<Bench>,
    transport: Arc<AsyncSmtpTransport<Tokio1Executor>>,
    message_ids: Arc<Vec<String>>,
    first: usize,
) {
    let mut workers = JoinSet::new();
    for worker in 0..CONCURRENCY {
        let (bench, transport, message_ids) = (
            Arc::clone(&bench),
            Arc::clone(&transport),
            Arc::clone(&message_ids),
        );
        workers.spawn(async move {
            for index in chunk_for(worker, first) {
                let response = transport
                    .send(bench.lettre_message(index, &message_ids[index]))
                    .await
                    .expect("raw delivery");
                assert!(response.is_positive());
            }
        });
    }
    workers.join_all().await;
}

async fn suppressed_run(bench: &Bench, client: &Guard<EmailClient>) {
    let cx = contexts::backfill();
    for index in 0..SUPPRESSED {
        let outcome = client
            .send(
                &cx,
                &bench
                    .email(index)
                    .copies()
                    .expect("a valid email")
                    .remove(0),
            )
            .await
            .expect("suppressed");
        assert!(outcome.is_suppressed());
    }
}

/// Removes this run's messages from the shared Maildir, so tests keep reading a small one.
fn remove_own_messages(maildir: &Path, domain: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(maildir.join("new")) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let ours = std::fs::read(entry.path())
            .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(domain));
        if ours && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn main() {
    let port: u16 = require("REPLAYSAFE_TEST_SMTP_PORT").parse().expect("port");
    let maildir = std::path::PathBuf::from(require("REPLAYSAFE_TEST_SMTP_MAILDIR"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // lettre's pool spawns tasks when created and dropped: keep the runtime entered.
    let _entered = runtime.enter();

    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let domain = format!(
        "bench-{}-{}.example",
        std::process::id(),
        nanos % 1_000_000_000
    );
    let bench = Arc::new(Bench {
        sender: format!("Reports <reports@{domain}>"),
        domain,
    });

    let journal_dir = tempfile::tempdir().expect("temporary folder");
    let journal =
        Arc::new(JsonlJournal::open(journal_dir.path().join("journal.jsonl")).expect("journal"));
    let guarded = Arc::new(
        EmailClient::smtp("127.0.0.1", port)
            .tls(TlsMode::Plaintext)
            .build(journal.clone())
            .expect("guarded client"),
    );
    // The settings the email client gives lettre (plaintext, default pool, connect timeout).
    let raw = Arc::new(
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
            .port(port)
            .timeout(Some(Duration::from_secs(10)))
            .build(),
    );
    let cx = contexts::live();
    let message_ids: Vec<String> = (0..MESSAGES)
        .map(|index| {
            let key = IdempotencyKey::derive(
                cx.pipeline(),
                &EffectKind::Email,
                "daily_summary",
                &bench.recipient(index),
                cx.window(),
            );
            format!("<{key}@{}>", bench.domain)
        })
        .collect();
    let message_ids = Arc::new(message_ids);

    // Warm both pools (their connections) and the allocators once.
    let guarded_run = |first| {
        runtime.block_on(guarded_chunk(
            Arc::clone(&bench),
            Arc::clone(&guarded),
            first,
        ));
    };
    let raw_run = |first| {
        runtime.block_on(raw_chunk(
            Arc::clone(&bench),
            Arc::clone(&raw),
            Arc::clone(&message_ids),
            first,
        ));
    };
    guarded_run(0);
    raw_run(0);

    let (guarded_time, raw_time) = interleaved_chunks(
        MESSAGES / CHUNK,
        REPEATS,
        |chunk| guarded_run(chunk * CHUNK),
        |chunk| raw_run(chunk * CHUNK),
    );
    journal.flush().expect("flush the journal");

    // Suppressed emails: describe, key, gate and one JSONL record each; nothing sent.
    let suppressed_dir = tempfile::tempdir().expect("temporary folder");
    let suppressed_journal =
        Arc::new(JsonlJournal::open(suppressed_dir.path().join("journal.jsonl")).expect("journal"));
    let quiet = EmailClient::smtp("127.0.0.1", port)
        .tls(TlsMode::Plaintext)
        .build(suppressed_journal.clone())
        .expect("guarded client");
    let suppressed_time = best_of(3, || runtime.block_on(suppressed_run(&bench, &quiet)));
    suppressed_journal.flush().expect("flush the journal");

    runtime.block_on(async {
        guarded.unguarded_ref().shutdown().await;
        raw.shutdown().await;
    });
    let removed = remove_own_messages(&maildir, &bench.domain);

    let guarded_rate = per_second(MESSAGES, guarded_time);
    let raw_rate = per_second(MESSAGES, raw_time);
    let mut report = Report::new("email");
    report
        .figure(
            "email.guarded.deliveries_per_second",
            guarded_rate,
            "emails/s",
        )
        .figure(
            "email.raw_lettre.deliveries_per_second",
            raw_rate,
            "emails/s",
        )
        .ratio(
            "email.guarded_vs_raw_throughput",
            guarded_rate / raw_rate,
            "raw lettre, same messages and transport settings",
        )
        .figure(
            "email.suppressed.journaled_per_second",
            per_second(SUPPRESSED, suppressed_time),
            "emails/s",
        );
    let path = report.write().expect("write the report");
    println!(
        "report: {} ({removed} benchmark messages removed from the Maildir)",
        path.display()
    );
}
