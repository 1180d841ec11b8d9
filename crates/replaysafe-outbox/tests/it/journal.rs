//! Journals in a database: the lines a JSON Lines journal would hold, and a memory of keys
//! that every process sharing the database consults.

use std::sync::Arc;

use replaysafe_core::JsonlJournal;
use replaysafe_core::{Guard, Journal, Outcome, Reason};
use replaysafe_outbox::JournalQuery;
use replaysafe_outbox::sqlite::SqliteJournal;
use replaysafe_test::{RecordingClient, TestEffect, contexts};

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

fn reasons<R>(outcome: &Outcome<R>) -> Vec<Reason> {
    match outcome {
        Outcome::Delivered(delivered) => delivered.reasons.clone(),
        Outcome::Suppressed(suppressed) => suppressed.reasons.clone(),
    }
}

/// Sends `effect` in `cx` through a guard over `journal` and `client`.
fn send(
    journal: Arc<dyn Journal>,
    client: &RecordingClient,
    cx: &replaysafe_core::ReplayContext,
    effect: &TestEffect,
) -> Outcome<replaysafe_core::IdempotencyKey> {
    let guard = Guard::with_shared_journal(client.clone(), journal);
    block_on(guard.send(cx, effect)).unwrap()
}

/// What every database journal must do, whatever its database: `open` opens another
/// handle on the same database, as another process would.
pub(crate) fn remembers_like_a_file(open: impl Fn() -> Arc<dyn Journal>) {
    let effect = TestEffect::email("ana@shop.example");
    let smtp = RecordingClient::new();
    let cx = contexts::live();
    assert!(send(open(), &smtp, &cx, &effect).is_delivered());
    // A retry through another handle: not again.
    let retry = send(open(), &smtp, &cx, &effect);
    assert_eq!(reasons(&retry), [Reason::AlreadyDelivered]);
    assert_eq!(smtp.delivered().len(), 1);
    // A backfill: suppressed by the gate, and that is journaled too.
    assert!(send(open(), &smtp, &contexts::backfill(), &effect).is_suppressed());
    // An alert's resolve is remembered apart from its trigger.
    let trigger =
        TestEffect::new(replaysafe_core::EffectKind::Alert, "pd:oncall").with_action("trigger");
    let resolve =
        TestEffect::new(replaysafe_core::EffectKind::Alert, "pd:oncall").with_action("resolve");
    let alerts = RecordingClient::deduplicating();
    assert!(send(open(), &alerts, &cx, &trigger).is_delivered());
    assert!(send(open(), &alerts, &cx, &resolve).is_delivered());
    assert!(send(open(), &alerts, &cx, &trigger).is_suppressed());
}

/// The lines a database journal holds are the lines a file journal holds for the same
/// sends, byte for byte.
pub(crate) fn holds_the_lines_of_a_file(
    journal: Arc<dyn Journal>,
    lines: impl Fn() -> Vec<String>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let file: Arc<dyn Journal> = Arc::new(JsonlJournal::open(&path).unwrap());
    let cx = contexts::live();
    for journal in [journal, file] {
        let client = RecordingClient::new();
        for recipient in ["ana@shop.example", "bob@shop.example"] {
            send(journal.clone(), &client, &cx, &TestEffect::email(recipient));
        }
        send(
            journal.clone(),
            &client,
            &cx,
            &TestEffect::email("ana@shop.example"),
        );
        send(
            journal,
            &client,
            &contexts::backfill(),
            &TestEffect::email("cy@shop.example"),
        );
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let from_file: Vec<&str> = text.lines().collect();
    assert_eq!(
        from_file.len(),
        6,
        "two deliveries, a remembered one, a backfill"
    );
    assert_eq!(lines(), from_file);
}

/// `racers` handles on one database, each sending the same `keys` effects from its own
/// thread: every key is delivered exactly once.
pub(crate) fn racing_handles_deliver_each_key_once(
    open: impl Fn() -> Arc<dyn Journal>,
    racers: usize,
    keys: usize,
) {
    let smtp = RecordingClient::new();
    std::thread::scope(|scope| {
        for _ in 0..racers {
            let journal = open();
            let smtp = smtp.clone();
            scope.spawn(move || {
                let guard = Guard::with_shared_journal(smtp, journal);
                block_on(async {
                    for i in 0..keys {
                        let effect = TestEffect::email(format!("user{i}@shop.example"));
                        guard.send(&contexts::live(), &effect).await.unwrap();
                    }
                });
            });
        }
    });
    let delivered = smtp.delivered();
    let mut distinct: Vec<_> = delivered.iter().map(|d| d.key.clone()).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), keys, "every key delivered");
    assert_eq!(delivered.len(), keys, "a key delivered twice");
}

#[test]
fn a_sqlite_journal_remembers_across_handles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    remembers_like_a_file(|| Arc::new(SqliteJournal::open(&path).unwrap()));
}

#[test]
fn a_sqlite_journal_holds_the_lines_of_a_file_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let journal = Arc::new(SqliteJournal::open(&path).unwrap());
    let reader = journal.clone();
    holds_the_lines_of_a_file(journal, || {
        let mut lines = Vec::new();
        reader
            .read(&JournalQuery::all(), |line| {
                lines.push(line.to_owned());
                Ok(())
            })
            .unwrap();
        lines
    });
    // A query by pipeline and time.
    let mut count = 0;
    reader
        .read(
            &JournalQuery::all()
                .pipeline("another_pipeline")
                .since(contexts::now()),
            |_| {
                count += 1;
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(count, 0);
}

#[test]
fn sqlite_journal_handles_racing_deliver_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    SqliteJournal::open(&path).unwrap();
    racing_handles_deliver_each_key_once(|| Arc::new(SqliteJournal::open(&path).unwrap()), 4, 100);
}
