use std::io::Cursor;
use std::sync::Arc;

use replaysafe_core::journal::{JournalReader, ReadError};
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
fn explicit_flush_makes_lines_visible() {
    let path = temp_journal("flush");
    let journal = JsonlJournal::open(&path).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let journal = Arc::new(journal);
    let guard = Guard::with_shared_journal(RecordingClient::new(), journal.clone());
    runtime
        .block_on(guard.send(&contexts::backfill(), &TestEffect::email("a@b.example")))
        .unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    journal.flush().unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
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
