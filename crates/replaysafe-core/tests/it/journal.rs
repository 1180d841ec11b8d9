use std::io::Cursor;
use std::sync::Arc;

use replaysafe_core::journal::{JournalDecision, JournalReader, ReadError};
use replaysafe_core::{Guard, Journal, JsonlJournal};
use replaysafe_test::{RecordingClient, TestEffect, contexts};

fn temp_journal(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("replaysafe-journal-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("nested").join("journal.jsonl")
}

#[test]
fn concurrent_writers_leave_whole_lines() {
    const TASKS: usize = 8;
    const PER_TASK: usize = 10_000;
    let path = temp_journal("concurrent");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let guard = Arc::new(Guard::new(
            RecordingClient::new(),
            JsonlJournal::open(&path).unwrap(),
        ));
        let cx = contexts::backfill();
        let mut handles = Vec::new();
        for task in 0..TASKS {
            let guard = Arc::clone(&guard);
            let cx = cx.clone();
            handles.push(tokio::spawn(async move {
                for i in 0..PER_TASK {
                    let effect = TestEffect::email(format!("user{task}-{i}@shop.example"))
                        .with_payload(vec![b'x'; i % 300]);
                    assert!(guard.send(&cx, &effect).await.unwrap().is_suppressed());
                }
            }));
        }
        for handle in handles {
            handle.await.unwrap();
        }
    });
    // The guard, and so the journal, is dropped here: drop flushes.
    let records: Vec<_> = JournalReader::open(&path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records.len(), TASKS * PER_TASK);
    let keys: std::collections::HashSet<_> = records
        .iter()
        .map(|r| r.effect.idempotency_key.clone())
        .collect();
    assert_eq!(keys.len(), TASKS * PER_TASK);
    std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap()).unwrap();
}

#[test]
fn every_record_is_in_the_file_when_append_returns_unless_buffered() {
    use replaysafe_core::journal::Durability;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    for (durability, visible_before_flush) in [
        (Durability::OsWrite, 1),
        (Durability::Fsync, 1),
        (Durability::Buffered, 0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let journal = Arc::new(
            JsonlJournal::options()
                .durability(durability)
                .open(&path)
                .unwrap(),
        );
        assert_eq!(journal.durability(), durability);
        let guard = Guard::with_shared_journal(RecordingClient::new(), journal.clone());
        runtime
            .block_on(guard.send(&contexts::backfill(), &TestEffect::email("a@b.example")))
            .unwrap();
        let lines = || std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines(), visible_before_flush, "{durability:?}");
        journal.flush().unwrap();
        assert_eq!(lines(), 1, "{durability:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let default = JsonlJournal::open(dir.path().join("j.jsonl")).unwrap();
    assert_eq!(default.durability(), Durability::OsWrite);
}

#[test]
fn buffered_writes_whole_lines_when_the_buffer_fills() {
    use replaysafe_core::journal::Durability;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let journal = JsonlJournal::options()
        .durability(Durability::Buffered)
        .open(&path)
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let guard = Guard::new(RecordingClient::new(), journal);
    let cx = contexts::backfill();
    let mut sent = 0;
    // Keep sending until the buffer has spilled to the file at least once.
    while std::fs::metadata(&path).unwrap().len() == 0 {
        let effect = TestEffect::email(format!("user{sent}@shop.example"))
            .with_summary("x".repeat(sent % 700));
        runtime.block_on(guard.send(&cx, &effect)).unwrap();
        sent += 1;
        assert!(sent < 100_000, "the buffer never spilled");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'), "only whole lines are written");
    assert!(text.len() <= 64 * 1024, "{}", text.len());
    let spilled = JournalReader::new(Cursor::new(&text), "j")
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
        .len();
    assert!(spilled > 0 && spilled < sent, "{spilled} of {sent}");
    drop(guard);
    let all = JournalReader::open(&path)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(all.len(), sent, "drop writes the rest");
}

/// Set in the child processes of `several_processes_append_whole_lines`: the journal to write.
const CHILD_JOURNAL: &str = "REPLAYSAFE_TEST_CHILD_JOURNAL";
const CHILD_DURABILITY: &str = "REPLAYSAFE_TEST_CHILD_DURABILITY";
const PROCESSES: usize = 4;
const PER_PROCESS: usize = 2_000;

/// What each child writes: `PER_PROCESS` suppressed effects and `PER_PROCESS` delivered
/// ones (attempting + delivered), targets naming the process, some lines over 4 KiB.
fn write_as_child(path: &std::path::Path, durability: &str) {
    use replaysafe_core::journal::Durability;
    let durability = match durability {
        "buffered" => Durability::Buffered,
        _ => Durability::OsWrite,
    };
    let journal = JsonlJournal::options()
        .durability(durability)
        .open(path)
        .unwrap();
    let guard = Guard::new(RecordingClient::new(), journal);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let process = std::process::id();
    runtime.block_on(async {
        for i in 0..PER_PROCESS {
            for cx in [contexts::backfill(), contexts::live()] {
                let effect = TestEffect::email(format!("user{i}@shop.example"))
                    .with_message_type(format!("p{process}"))
                    .with_summary("s".repeat(if i % 50 == 0 { 6_000 } else { i % 200 }));
                guard.send(&cx, &effect).await.unwrap();
            }
        }
    });
}

#[test]
fn several_processes_append_whole_lines() {
    if let Some(path) = std::env::var_os(CHILD_JOURNAL) {
        write_as_child(
            std::path::Path::new(&path),
            &std::env::var(CHILD_DURABILITY).unwrap_or_default(),
        );
        return;
    }
    for durability in ["os-write", "buffered"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.jsonl");
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "journal::several_processes_append_whole_lines",
                        "--exact",
                        "--quiet",
                        "--test-threads=1",
                    ])
                    .env(CHILD_JOURNAL, &path)
                    .env(CHILD_DURABILITY, durability)
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut pids = std::collections::BTreeSet::new();
        for mut child in children {
            pids.insert(child.id());
            assert!(
                child.wait().unwrap().success(),
                "{durability}: a child failed"
            );
        }
        let records: Vec<_> = JournalReader::open(&path)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{durability}: a line was torn: {e}"));
        assert_eq!(records.len(), PROCESSES * PER_PROCESS * 3, "{durability}");
        // Each process's records are all there, whole, and in the order it wrote them.
        let mut per_process = std::collections::BTreeMap::<String, Vec<JournalDecision>>::new();
        for record in &records {
            per_process
                .entry(record.effect.message_type.clone())
                .or_default()
                .push(record.decision);
        }
        let expected: Vec<String> = pids.iter().map(|pid| format!("p{pid}")).collect();
        assert_eq!(
            per_process.keys().cloned().collect::<Vec<_>>(),
            expected,
            "{durability}"
        );
        use JournalDecision::*;
        for (process, decisions) in per_process {
            assert_eq!(decisions.len(), PER_PROCESS * 3, "{durability} {process}");
            assert!(
                decisions
                    .chunks(3)
                    .all(|chunk| chunk == [Suppressed, Attempting, Delivered]),
                "{durability} {process}: out of order"
            );
        }
        let keys: std::collections::HashSet<_> = records
            .iter()
            .map(|r| r.effect.idempotency_key.as_str())
            .collect();
        assert_eq!(keys.len(), PROCESSES * PER_PROCESS * 2, "{durability}");
    }
}

const VALID: &str = r#"{"v":1,"ts":"2026-08-06T01:00:00Z","decision":"suppressed","reasons":["replay_run"],"pipeline":"p","run_id":"r","run_kind":"backfill","backfill_id":null,"window":{"start":"2026-08-05T00:00:00Z","end":"2026-08-06T00:00:00Z"},"effect":{"kind":"email","message_type":"m","target":"*@b.example","idempotency_key":"ab","summary":null,"payload_sha256":"00","payload_bytes":0},"opt_in":null,"attempt":0,"error":null}"#;

#[test]
fn reader_accepts_unknown_fields_and_names_bad_lines() {
    let with_extra = VALID.replacen("\"v\":1,", "\"v\":1,\"future_field\":{\"x\":1},", 1);
    let input = format!("{VALID}\n\n{with_extra}\nnot json\n{VALID}\n");
    let results: Vec<_> = JournalReader::new(Cursor::new(input), "j.jsonl").collect();
    assert_eq!(results.len(), 4);
    assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok());
    let err = results[2].as_ref().unwrap_err();
    assert!(
        matches!(err, ReadError::Malformed { line: 4, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("j.jsonl:4: malformed journal record"),
        "{err}"
    );
}

#[test]
fn reader_refuses_newer_schema_versions() {
    let newer = VALID.replacen("\"v\":1", "\"v\":2", 1);
    let err = JournalReader::new(Cursor::new(newer), "j.jsonl")
        .next()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ReadError::UnsupportedVersion {
                version: 2,
                line: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("newer"), "{err}");

    let newer_shape = r#"{"v":3,"something":"else"}"#;
    let err = JournalReader::new(Cursor::new(newer_shape), "j.jsonl")
        .next()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, ReadError::UnsupportedVersion { version: 3, .. }),
        "{err:?}"
    );
}

#[test]
fn written_records_read_back_equal() {
    let path = temp_journal("roundtrip");
    let memory = Arc::new(replaysafe_core::MemoryJournal::new());
    {
        let file = JsonlJournal::open(&path).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let guard = Guard::new(RecordingClient::new(), (file, memory.clone()));
        for cx in [contexts::live(), contexts::backfill(), contexts::unknown()] {
            runtime
                .block_on(guard.send(&cx, &TestEffect::email("a@b.example").with_summary("s")))
                .unwrap();
        }
    }
    let read: Vec<_> = JournalReader::open(&path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(read, memory.records());
}

#[test]
fn borrowed_entries_serialise_exactly_like_records() {
    let memory = Arc::new(replaysafe_core::MemoryJournal::new());
    let path = temp_journal("entry-shape");
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let guard = Guard::new(
            RecordingClient::new(),
            (JsonlJournal::open(&path).unwrap(), memory.clone()),
        );
        let opt_in = replaysafe_core::OptIn::new(
            "why",
            "who",
            contexts::now() + chrono::TimeDelta::hours(1),
        )
        .unwrap()
        .for_kind(replaysafe_core::EffectKind::Email);
        for cx in [
            contexts::live(),
            contexts::backfill(),
            contexts::backfill().with_opt_in(opt_in),
        ] {
            runtime
                .block_on(guard.send(&cx, &TestEffect::email("a@b.example").with_summary("s")))
                .unwrap();
        }
    }
    let written = std::fs::read_to_string(&path).unwrap();
    let from_records: String = memory
        .records()
        .iter()
        .map(|record| serde_json::to_string(record).unwrap() + "\n")
        .collect();
    assert_eq!(written, from_records);
    let via_entry: String = memory
        .records()
        .iter()
        .map(|record| serde_json::to_string(&record.entry()).unwrap() + "\n")
        .collect();
    assert_eq!(written, via_entry);
}

#[test]
fn reader_names_lines_that_are_not_utf8_and_goes_on() {
    let mut input = Vec::new();
    input.extend_from_slice(VALID.as_bytes());
    input.extend_from_slice(b"\n{\"v\":1,\"pipeline\":\"\xff\xfe\"}\n");
    input.extend_from_slice(VALID.as_bytes());
    input.push(b'\n');
    let results: Vec<_> = JournalReader::new(Cursor::new(input), "j.jsonl").collect();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[2].is_ok());
    let err = results[1].as_ref().unwrap_err();
    assert!(
        matches!(err, ReadError::InvalidUtf8 { line: 2, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "j.jsonl:2: journal line is not valid UTF-8"
    );
}

#[test]
fn reader_refuses_version_zero_like_any_unknown_version() {
    for zero in [
        VALID.replacen("\"v\":1", "\"v\":0", 1),
        r#"{"v":0,"other":"shape"}"#.to_owned(),
    ] {
        let err = JournalReader::new(Cursor::new(zero), "j.jsonl")
            .next()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::UnsupportedVersion {
                    version: 0,
                    line: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "j.jsonl:1: journal schema version 0 is not a version this reader knows (it reads version 1)"
        );
    }
}

/// An input of `len` bytes of `x` without a newline, then one valid line, produced on the fly.
struct LongLine {
    remaining: usize,
    tail: Cursor<Vec<u8>>,
    chunk: Vec<u8>,
}

impl std::io::Read for LongLine {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.remaining == 0 {
            return self.tail.read(out);
        }
        let n = out.len().min(self.remaining).min(self.chunk.len());
        out[..n].copy_from_slice(&self.chunk[..n]);
        self.remaining -= n;
        Ok(n)
    }
}

#[test]
fn reader_refuses_a_line_over_the_cap_without_holding_it() {
    use replaysafe_core::journal::MAX_LINE_BYTES;
    assert_eq!(MAX_LINE_BYTES, 1024 * 1024);
    for (length, too_long) in [
        (MAX_LINE_BYTES, false),
        (MAX_LINE_BYTES + 1, true),
        (64 * MAX_LINE_BYTES, true),
    ] {
        let input = LongLine {
            remaining: length,
            tail: Cursor::new(format!("\n{VALID}\n").into_bytes()),
            chunk: vec![b'x'; 64 * 1024],
        };
        let results: Vec<_> =
            JournalReader::new(std::io::BufReader::new(input), "j.jsonl").collect();
        assert_eq!(results.len(), 2, "{length}");
        let err = results[0].as_ref().unwrap_err();
        if too_long {
            assert!(
                matches!(err, ReadError::LineTooLong { line: 1, limit, .. } if *limit == MAX_LINE_BYTES),
                "{length}: {err:?}"
            );
            assert_eq!(
                err.to_string(),
                "j.jsonl:1: journal line is longer than 1048576 bytes"
            );
        } else {
            assert!(
                matches!(err, ReadError::Malformed { line: 1, .. }),
                "{err:?}"
            );
        }
        let next = results[1].as_ref().unwrap();
        assert_eq!(next.pipeline, "p", "reading goes on after the long line");
    }
}

#[test]
fn reader_accepts_decision_values_it_does_not_know() {
    use replaysafe_core::journal::JournalDecision;
    let newer = VALID.replacen("\"suppressed\"", "\"cancelled\"", 1);
    let record = JournalReader::new(Cursor::new(newer), "j.jsonl")
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(record.decision, JournalDecision::Unknown);
    let attempting = VALID.replacen("\"suppressed\"", "\"attempting\"", 1);
    let record = JournalReader::new(Cursor::new(attempting), "j.jsonl")
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(record.decision, JournalDecision::Attempting);
}

#[test]
fn a_journal_shows_its_path_and_durability_in_debug_and_nothing_it_holds() {
    use replaysafe_core::journal::Durability;
    let dir = tempfile::tempdir().unwrap();
    let journal = JsonlJournal::options()
        .durability(Durability::Buffered)
        .open(dir.path().join("j.jsonl"))
        .unwrap();
    let guard = Guard::new(RecordingClient::new(), journal);
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(guard.send(
            &contexts::backfill(),
            &TestEffect::email("buffered@shop.example"),
        ))
        .unwrap();
    let shown = format!("{:?}", guard.journal());
    assert!(
        shown.contains("j.jsonl") && shown.contains("Buffered"),
        "{shown}"
    );
    assert!(!shown.contains("shop.example"), "{shown}");
}

#[test]
fn a_malformed_line_cannot_put_control_characters_in_the_error() {
    let evil = VALID.replacen(
        "\"attempt\":0",
        "\"attempt\":\"\\u001b]0;pwned\\u0007\\u001b[2J\"",
        1,
    );
    let err = JournalReader::new(Cursor::new(evil), "j.jsonl")
        .next()
        .unwrap()
        .unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(err, ReadError::Malformed { line: 1, .. }),
        "{err:?}"
    );
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(shown.contains("\\u{1b}]0;pwned\\u{7}"), "{shown}");
}
