//! Trust at the journal's boundaries: a record never lands on a line cut short, a path
//! that keeps nothing is not a journal, and a reader can tell which invalid lines could
//! hide an attempt.

use std::io::Write;
use std::path::Path;

use replaysafe_core::journal::{
    JournalDecision, JournalReader, JournalRecord, ReadError, provably_not_attempting,
};
use replaysafe_core::{Guard, Journal, JsonlJournal, ReplayContext, SendError};
use replaysafe_test::{RecordingClient, TestEffect, contexts};

/// Reads every line: a record, or the error naming a line that is not one.
fn lines(path: &Path) -> Vec<Result<JournalRecord, ReadError>> {
    JournalReader::open(path).unwrap().collect()
}

fn decisions(path: &Path) -> Vec<Option<JournalDecision>> {
    lines(path)
        .into_iter()
        .map(|line| line.ok().map(|record| record.decision))
        .collect()
}

/// Sends one live email; the ledger is off, since these tests send the same effect again
/// to look at how lines start, not at what the journal remembers (`memory.rs` does).
fn send_live(journal: JsonlJournal) -> (RecordingClient, Result<bool, String>) {
    let client = RecordingClient::new();
    let guard = Guard::new(client.clone(), journal).with_ledger(false);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let result = runtime
        .block_on(guard.send(&contexts::live(), &TestEffect::email("ana@shop.example")))
        .map(|outcome| outcome.is_delivered())
        .map_err(|e| replaysafe_core::error_chain(&e));
    (client, result)
}

/// Part of an `attempting` record, as a write cut short leaves it.
const FRAGMENT: &[u8] =
    br#"{"v":1,"ts":"2026-08-06T01:00:00Z","decision":"attempting","reasons":["current_wi"#;

#[test]
fn a_record_after_a_fragment_left_by_another_writer_starts_a_line_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    // Opened while the file still ends with a whole line ...
    let journal = JsonlJournal::open(&path).unwrap();
    let (_, first) = send_live(JsonlJournal::open(&path).unwrap());
    assert_eq!(first, Ok(true));
    // ... then another process's write is cut short, and this journal appends after it.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(FRAGMENT)
        .unwrap();
    let (client, second) = send_live(journal);
    assert_eq!(second, Ok(true));
    assert_eq!(client.delivered().len(), 1);
    use JournalDecision::*;
    assert_eq!(
        decisions(&path),
        [
            Some(Attempting),
            Some(Delivered),
            None,
            Some(Attempting),
            Some(Delivered)
        ]
    );
    let text = std::fs::read(&path).unwrap();
    assert!(text.ends_with(b"}\n"));
    // A file that ends with a whole line gets no blank line.
    assert!(!text.windows(2).any(|pair| pair == b"\n\n"));
}

#[test]
fn a_journal_opened_on_a_fragment_starts_a_line_of_its_own_under_every_durability() {
    use replaysafe_core::journal::Durability;
    for durability in [Durability::OsWrite, Durability::Fsync, Durability::Buffered] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        std::fs::write(&path, FRAGMENT).unwrap();
        let journal = JsonlJournal::options()
            .durability(durability)
            .open(&path)
            .unwrap();
        let (_, sent) = send_live(journal);
        assert_eq!(sent, Ok(true), "{durability:?}");
        use JournalDecision::*;
        assert_eq!(
            decisions(&path),
            [None, Some(Attempting), Some(Delivered)],
            "{durability:?}"
        );
    }
}

/// Set in the child process of `a_write_cut_short_by_the_file_size_limit_sends_nothing`.
const CHILD_JOURNAL: &str = "REPLAYSAFE_TEST_CUT_SHORT_JOURNAL";

#[test]
fn a_write_cut_short_by_the_file_size_limit_sends_nothing() {
    if let Some(path) = std::env::var_os(CHILD_JOURNAL) {
        // In the child, under a file-size limit of 100 bytes, with SIGXFSZ ignored: the
        // `attempting` line is cut short at 100 bytes and the rest of it fails (EFBIG).
        let client = RecordingClient::new();
        let guard = Guard::new(client.clone(), JsonlJournal::open(&path).unwrap());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (cx, effect) = (contexts::live(), TestEffect::email("ana@shop.example"));
        let key = guard.preview(&cx, &effect).unwrap().key;
        let error = runtime.block_on(guard.send(&cx, &effect)).unwrap_err();
        assert!(client.delivered().is_empty(), "delivered without a record");
        let chain = replaysafe_core::error_chain(&error);
        let SendError::Journal {
            delivered: false,
            source,
        } = error
        else {
            panic!("{chain}")
        };
        assert_eq!(source.decision(), Some(JournalDecision::Attempting));
        assert_eq!(source.idempotency_key(), Some(key.as_str()));
        assert_eq!(source.path(), Path::new(&path).display().to_string());
        let expected = format!(
            "journaling an effect that was not delivered: writing the attempting record of effect {key} to journal {}: ",
            Path::new(&path).display()
        );
        assert!(chain.starts_with(&expected), "{chain}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let status = crate::support::run_under_file_size_limit(
        "fragments::a_write_cut_short_by_the_file_size_limit_sends_nothing",
        CHILD_JOURNAL,
        &path,
        100,
    );
    assert!(status.success(), "the child's checks failed: {status:?}");
    let cut = std::fs::read(&path).unwrap();
    assert_eq!(cut.len(), 100, "the limit did not cut the line");
    assert!(cut.starts_with(br#"{"v":1,"#) && !cut.ends_with(b"\n"));

    // The next writer, without the limit, leaves the fragment a line of its own.
    let (client, sent) = send_live(JsonlJournal::open(&path).unwrap());
    assert_eq!(sent, Ok(true));
    assert_eq!(client.delivered().len(), 1);
    use JournalDecision::*;
    assert_eq!(decisions(&path), [None, Some(Attempting), Some(Delivered)]);
}

#[test]
fn a_path_that_is_not_a_regular_file_is_not_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let socket = dir.path().join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let to_null = dir.path().join("to-null.jsonl");
    std::os::unix::fs::symlink("/dev/null", &to_null).unwrap();
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    for (path, what) in [
        (Path::new("/dev/null"), "a character device"),
        (Path::new("/dev/full"), "a character device"),
        (&to_null, "a character device"),
        // Opening a FIFO to write would wait for a reader: it is refused before that.
        (&fifo, "a FIFO"),
        (&socket, "a socket"),
        (&folder, "a folder"),
    ] {
        let error = JsonlJournal::open(path).unwrap_err();
        assert!(
            error.is_not_a_regular_file(),
            "{}: {error:?}",
            path.display()
        );
        assert_eq!((error.decision(), error.idempotency_key()), (None, None));
        assert_eq!(
            replaysafe_core::error_chain(&error),
            format!(
                "opening journal {}: it is {what}, not a regular file: a journal must be a file that keeps every record",
                path.display()
            )
        );
    }
    // Positive control: a regular file, also through a symbolic link, is a journal.
    let file = dir.path().join("journal.jsonl");
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    JsonlJournal::open(&link).unwrap();
    JsonlJournal::open(&file).unwrap();
    assert!(file.is_file());
}

#[test]
fn a_context_whose_journal_is_dev_null_cannot_open_it() {
    let vars = |journal: &str| {
        ReplayContext::from_vars([
            ("REPLAYSAFE_PIPELINE", "daily_orders"),
            ("REPLAYSAFE_RUN_ID", "r1"),
            ("REPLAYSAFE_WINDOW_START", "2026-08-05T00:00:00Z"),
            ("REPLAYSAFE_WINDOW_END", "2026-08-06T00:00:00Z"),
            ("REPLAYSAFE_JOURNAL", journal),
        ])
        .unwrap()
    };
    let error = vars("/dev/null").open_journal().unwrap_err();
    assert_eq!(
        replaysafe_core::error_chain(&error),
        "opening the journal REPLAYSAFE_JOURNAL names: opening journal /dev/null: it is a character device, not a regular file: a journal must be a file that keeps every record"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    vars(path.to_str().unwrap()).open_journal().unwrap();
}

/// A record as the encoder writes it, of the given decision.
fn record_line(decision: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let journal = JsonlJournal::open(&path).unwrap();
    let (_, sent) = send_live(journal);
    assert_eq!(sent, Ok(true));
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().next().unwrap();
    assert!(line.contains(r#""decision":"attempting""#));
    line.replace(
        r#""decision":"attempting""#,
        &format!(r#""decision":"{decision}""#),
    )
}

#[test]
fn no_part_of_an_attempting_record_is_provably_not_one() {
    let attempting = record_line("attempting");
    for end in 0..=attempting.len() {
        assert!(
            !provably_not_attempting(&attempting.as_bytes()[..end]),
            "{}",
            &attempting[..end]
        );
    }
    let suppressed = record_line("suppressed");
    // Only the whole line proves anything; every part of it might be anything.
    for end in 0..suppressed.len() {
        assert!(!provably_not_attempting(&suppressed.as_bytes()[..end]));
    }
    assert!(provably_not_attempting(suppressed.as_bytes()));
}

#[test]
fn an_invalid_line_is_provably_not_attempting_only_when_whole_and_of_another_decision() {
    let suppressed = record_line("suppressed");
    let bad_time = suppressed.replacen("\"ts\":\"", "\"ts\":\"yesterday ", 1);
    let attempting = record_line("attempting");
    let cut = &attempting[..attempting.len() / 2];
    for (line, provably) in [
        // Whole objects that say they are something else.
        (bad_time.clone(), true),
        (r#"{"decision":"failed"}"#.to_owned(), true),
        (r#"  {"decision":"delivered","v":1}  "#.to_owned(), true),
        (r#"{"decision":"retracted"}"#.to_owned(), true),
        // Whole objects that may be attempts, or say nothing.
        (r#"{"decision":"attempting"}"#.to_owned(), false),
        (r#"{"decision":"attemptin\u0067"}"#.to_owned(), false),
        (
            r#"{"decision":"suppressed","decision":"attempting"}"#.to_owned(),
            false,
        ),
        (r#"{"decision":null}"#.to_owned(), false),
        (r#"{"decision":["suppressed"]}"#.to_owned(), false),
        (r#"{"v":1}"#.to_owned(), false),
        ("[]".to_owned(), false),
        ("\"suppressed\"".to_owned(), false),
        // An attempt cut short with a whole record run onto it: it contains
        // "decision":"suppressed", and proves nothing.
        (format!("{cut}{suppressed}"), false),
        (format!("{suppressed}{suppressed}"), false),
        ("not json".to_owned(), false),
        (String::new(), false),
    ] {
        assert_eq!(provably_not_attempting(line.as_bytes()), provably, "{line}");
    }
    assert!(!provably_not_attempting(
        b"{\"decision\":\"suppressed\xff\"}"
    ));
}

#[test]
fn the_reader_keeps_the_last_line_it_could_not_read() {
    let input = format!(
        "{}\nnot json\n{}\n",
        record_line("suppressed"),
        "x".repeat(replaysafe_core::journal::MAX_LINE_BYTES + 1)
    );
    let first = input.find('\n').unwrap() as u64 + 1;
    let mut reader = JournalReader::new(std::io::Cursor::new(input), "j");
    assert!(reader.last_line().is_none());
    assert!(reader.next().unwrap().is_ok());
    assert_eq!(reader.line_offset(), 0);
    assert!(reader.next().unwrap().is_err());
    assert_eq!(reader.last_line(), Some(&b"not json"[..]));
    assert_eq!(reader.line_offset(), first);
    assert!(matches!(
        reader.next().unwrap(),
        Err(ReadError::LineTooLong { .. })
    ));
    assert_eq!(reader.last_line(), None);
    assert_eq!(reader.line_offset(), first + b"not json\n".len() as u64);
}

#[test]
fn a_flush_after_a_fragment_starts_a_line_of_its_own() {
    use replaysafe_core::journal::Durability;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let journal = JsonlJournal::options()
        .durability(Durability::Buffered)
        .open(&path)
        .unwrap();
    let guard = Guard::new(RecordingClient::new(), journal);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime
        .block_on(guard.send(&contexts::backfill(), &TestEffect::email("a@b.example")))
        .unwrap();
    std::fs::write(&path, FRAGMENT).unwrap();
    guard.journal().flush().unwrap();
    assert_eq!(decisions(&path), [None, Some(JournalDecision::Suppressed)]);
}

#[test]
fn a_journal_that_wrote_last_looks_again_once_another_writer_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let journal = std::sync::Arc::new(JsonlJournal::open(&path).unwrap());
    let guard = Guard::with_shared_journal(RecordingClient::new(), journal.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let send = |to: &str| {
        runtime
            .block_on(guard.send(&contexts::backfill(), &TestEffect::email(to)))
            .unwrap()
    };
    send("a@b.example");
    send("c@d.example");
    // This journal wrote last; now another writer's line is cut short after it.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(FRAGMENT)
        .unwrap();
    send("e@f.example");
    send("g@h.example");
    use JournalDecision::*;
    assert_eq!(
        decisions(&path),
        [
            Some(Suppressed),
            Some(Suppressed),
            None,
            Some(Suppressed),
            Some(Suppressed)
        ]
    );
}
