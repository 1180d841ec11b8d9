//! Core benchmarks: gate decisions; journaling (durable by default, one write per record)
//! against a raw serde_json-and-write baseline, the buffered mode against a 64 KiB
//! BufWriter; the whole suppressed send against a raw baseline doing the same hashing
//! and write; and the guard's overhead on the deliver path.
//!
//! Run with `cargo xtask bench` (or `cargo bench -p replaysafe-core`); figures go to
//! `target/bench/core.json`.

use std::fmt::Write as _;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::sync::Arc;

use replaysafe_bench::{Report, best_of, per_second};
use replaysafe_core::adapter::{EffectRecord, Step};
use replaysafe_core::journal::Durability;
use replaysafe_core::journal::NoopJournal;
use replaysafe_core::{
    EffectClient, EffectKind, Guard, IdempotencyKey, JsonlJournal, MemoryJournal, RedactionPolicy,
};
use replaysafe_test::{InertClient, TestEffect, contexts};
use sha2::{Digest, Sha256};

fn main() {
    let mut report = Report::new("core");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let effect = TestEffect::email("ana@shop.example")
        .with_payload(vec![b'x'; 512])
        .with_summary("Your daily summary");
    let scratch =
        std::env::temp_dir().join(format!("replaysafe-bench-core-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();

    // 1. Gate decision.
    const DECISIONS: usize = 1_000_000;
    let live = contexts::live();
    let backfill = contexts::backfill();
    let took = best_of(5, || {
        for i in 0..DECISIONS {
            let cx = if i % 2 == 0 { &live } else { &backfill };
            black_box(cx.decide(black_box(&EffectKind::Email), black_box("ana@shop.example")));
        }
    });
    report.figure(
        "core.gate.decision",
        took.as_nanos() as f64 / DECISIONS as f64,
        "ns/decision",
    );

    // 2. Suppressed effects journaled to a file, against serde_json::to_writer into a 64 KiB BufWriter.
    const RECORDS: usize = 200_000;
    let description = effect.describe().unwrap();
    let key = IdempotencyKey::derive(
        backfill.pipeline(),
        description.kind(),
        "daily_summary",
        "ana@shop.example",
        backfill.window(),
    );
    let decision = backfill.decide(description.kind(), description.target());
    let captured = MemoryJournal::new();
    EffectRecord::new(
        &backfill,
        &description,
        &key,
        &decision,
        RedactionPolicy::default(),
    )
    .write(&captured, Step::Suppressed)
    .expect("a memory journal takes every record");
    let record = captured.records().remove(0);
    let mut line = Vec::with_capacity(1024);
    let encode = best_of(5, || {
        for _ in 0..RECORDS {
            line.clear();
            black_box(&record).entry().write_json(&mut line);
            black_box(&line);
        }
    });
    report.figure(
        "core.journal.encode",
        encode.as_nanos() as f64 / RECORDS as f64,
        "ns/record",
    );
    let serde_encode = best_of(5, || {
        for _ in 0..RECORDS {
            line.clear();
            serde_json::to_writer(&mut line, black_box(&record)).unwrap();
            black_box(&line);
        }
    });
    report.figure(
        "core.journal.serde_encode",
        serde_encode.as_nanos() as f64 / RECORDS as f64,
        "ns/record",
    );
    // The journaling step alone, durable default: JsonlJournal::append of the same record
    // against serde_json encoding it and one write(2) per record to an O_APPEND file.
    let append_file = |path: &std::path::Path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    };
    let mut append_best = std::time::Duration::MAX;
    let mut raw_write_best = std::time::Duration::MAX;
    for round in 0..5 {
        let raw_path = scratch.join(format!("raw-write-{round}.jsonl"));
        raw_write_best = raw_write_best.min(best_of(1, || {
            let mut out = append_file(&raw_path);
            let mut line = Vec::with_capacity(1024);
            for _ in 0..RECORDS {
                line.clear();
                serde_json::to_writer(&mut line, black_box(&record)).unwrap();
                line.push(b'\n');
                out.write_all(&line).unwrap();
            }
        }));
        let append_path = scratch.join(format!("append-{round}.jsonl"));
        append_best = append_best.min(best_of(1, || {
            let journal = JsonlJournal::open(&append_path).unwrap();
            let entry = record.entry();
            for _ in 0..RECORDS {
                replaysafe_core::Journal::append(&journal, black_box(&entry)).unwrap();
            }
        }));
        let _ = std::fs::remove_file(&raw_path);
        let _ = std::fs::remove_file(&append_path);
    }
    report.figure(
        "core.journal.append_rate",
        per_second(RECORDS, append_best),
        "records/s",
    );
    report.figure(
        "core.journal.raw_write_rate",
        per_second(RECORDS, raw_write_best),
        "records/s",
    );
    report.ratio(
        "core.journal.append_vs_raw",
        raw_write_best.as_secs_f64() / append_best.as_secs_f64(),
        "serde_json encode of the same record and one write(2) per record, O_APPEND",
    );

    // Buffered (opt-in, for bulk suppressed journaling) against serde_json into a 64 KiB BufWriter.
    let buffered = || JsonlJournal::options().durability(Durability::Buffered);
    let mut buffered_best = std::time::Duration::MAX;
    let mut raw_buffered_best = std::time::Duration::MAX;
    for round in 0..5 {
        let raw_path = scratch.join(format!("raw-only-{round}.jsonl"));
        raw_buffered_best = raw_buffered_best.min(best_of(1, || {
            let mut out =
                BufWriter::with_capacity(64 * 1024, std::fs::File::create(&raw_path).unwrap());
            for _ in 0..RECORDS {
                serde_json::to_writer(&mut out, black_box(&record)).unwrap();
                out.write_all(b"\n").unwrap();
            }
            out.flush().unwrap();
        }));
        let append_path = scratch.join(format!("buffered-{round}.jsonl"));
        buffered_best = buffered_best.min(best_of(1, || {
            let journal = buffered().open(&append_path).unwrap();
            let entry = record.entry();
            for _ in 0..RECORDS {
                replaysafe_core::Journal::append(&journal, black_box(&entry)).unwrap();
            }
            replaysafe_core::Journal::flush(&journal).unwrap();
        }));
        let _ = std::fs::remove_file(&raw_path);
        let _ = std::fs::remove_file(&append_path);
    }
    report.figure(
        "core.journal.buffered_append_rate",
        per_second(RECORDS, buffered_best),
        "records/s",
    );
    report.ratio(
        "core.journal.buffered_append_vs_raw",
        raw_buffered_best.as_secs_f64() / buffered_best.as_secs_f64(),
        "serde_json::to_writer of the same record into a 64 KiB BufWriter",
    );

    // The whole suppressed send, durable default, against a raw baseline doing what the
    // contract requires: the payload's SHA-256 and the key's, the serde_json encode, one write.
    let payload = vec![b'x'; 512];
    let key_fields: [&str; 6] = [
        backfill.pipeline(),
        "email",
        description.message_type(),
        "ana@shop.example",
        &replaysafe_core::rfc3339(backfill.window().start()),
        &replaysafe_core::rfc3339(backfill.window().end()),
    ];
    let mut raw_record = record.clone();
    let mut guarded_best = std::time::Duration::MAX;
    let mut raw_best = std::time::Duration::MAX;
    for round in 0..5 {
        let raw_path = scratch.join(format!("raw-{round}.jsonl"));
        raw_best = raw_best.min(best_of(1, || {
            let mut out = append_file(&raw_path);
            let mut line = Vec::with_capacity(1024);
            for _ in 0..RECORDS {
                let digest = Sha256::digest(black_box(&payload));
                let mut key = Sha256::new();
                key.update(b"replaysafe.idempotency.v1");
                for field in key_fields {
                    key.update(field.len().to_string().as_bytes());
                    key.update(b":");
                    key.update(field.as_bytes());
                    key.update(b",");
                }
                let key = key.finalize();
                raw_record.effect.payload_sha256.clear();
                raw_record.effect.idempotency_key.clear();
                for byte in digest {
                    write!(raw_record.effect.payload_sha256, "{byte:02x}").unwrap();
                }
                for byte in key {
                    write!(raw_record.effect.idempotency_key, "{byte:02x}").unwrap();
                }
                line.clear();
                serde_json::to_writer(&mut line, black_box(&raw_record)).unwrap();
                line.push(b'\n');
                out.write_all(&line).unwrap();
            }
        }));
        let guarded_path = scratch.join(format!("guarded-{round}.jsonl"));
        guarded_best = guarded_best.min(best_of(1, || {
            let journal = Arc::new(JsonlJournal::open(&guarded_path).unwrap());
            let guard = Guard::with_shared_journal(InertClient, journal.clone());
            runtime.block_on(async {
                for _ in 0..RECORDS {
                    let outcome = guard.send(&backfill, &effect).await.unwrap();
                    debug_assert!(outcome.is_suppressed());
                }
            });
        }));
        let _ = std::fs::remove_file(&raw_path);
        let _ = std::fs::remove_file(&guarded_path);
    }
    let guard_key = Guard::new(InertClient, NoopJournal)
        .preview(&backfill, &effect)
        .unwrap()
        .key;
    assert_eq!(
        raw_record.effect.idempotency_key,
        guard_key.as_str(),
        "the raw baseline derives the same key"
    );
    assert_eq!(
        raw_record.effect.payload_sha256,
        description.payload().sha256_hex()
    );
    let guarded_rate = per_second(RECORDS, guarded_best);
    let raw_rate = per_second(RECORDS, raw_best);
    report.figure("core.journal.suppressed_rate", guarded_rate, "effects/s");
    report.figure("core.journal.raw_suppressed_rate", raw_rate, "records/s");
    report.ratio(
        "core.journal.suppressed_vs_raw",
        guarded_rate / raw_rate,
        "payload SHA-256, key SHA-256, serde_json encode and one write(2) per record, O_APPEND",
    );

    // The same suppressed send into a Buffered journal, against the 64 KiB BufWriter baseline.
    let mut guarded_buffered_best = std::time::Duration::MAX;
    for round in 0..5 {
        let guarded_path = scratch.join(format!("guarded-buffered-{round}.jsonl"));
        guarded_buffered_best = guarded_buffered_best.min(best_of(1, || {
            let journal = Arc::new(buffered().open(&guarded_path).unwrap());
            let guard = Guard::with_shared_journal(InertClient, journal.clone());
            runtime.block_on(async {
                for _ in 0..RECORDS {
                    let outcome = guard.send(&backfill, &effect).await.unwrap();
                    debug_assert!(outcome.is_suppressed());
                }
            });
            replaysafe_core::Journal::flush(&*journal).unwrap();
        }));
        let _ = std::fs::remove_file(&guarded_path);
    }
    report.ratio(
        "core.journal.buffered_suppressed_vs_raw",
        raw_buffered_best.as_secs_f64() / guarded_buffered_best.as_secs_f64(),
        "serde_json::to_writer of the same record into a 64 KiB BufWriter",
    );

    // 3. Guard overhead on the deliver path: inert client, no-op journal.
    const CALLS: usize = 500_000;
    let guard = Guard::new(InertClient, NoopJournal);
    let took = best_of(5, || {
        runtime.block_on(async {
            for _ in 0..CALLS {
                black_box(guard.send(&live, &effect).await.unwrap());
            }
        })
    });
    let direct = best_of(5, || {
        runtime.block_on(async {
            for _ in 0..CALLS {
                black_box(InertClient.describe(&live, black_box(&effect)).unwrap());
            }
        })
    });
    report.figure(
        "core.guard.deliver_path",
        took.as_nanos() as f64 / CALLS as f64,
        "ns/call",
    );
    report.figure(
        "core.guard.added_over_describe",
        (took.as_nanos() as f64 - direct.as_nanos() as f64) / CALLS as f64,
        "ns/call",
    );

    // Where the time of a suppressed send goes.
    let noop_guard = Guard::new(InertClient, NoopJournal);
    let preview = best_of(5, || {
        for _ in 0..CALLS {
            black_box(noop_guard.preview(&backfill, black_box(&effect)).unwrap());
        }
    });
    let suppressed_noop = best_of(5, || {
        runtime.block_on(async {
            for _ in 0..CALLS {
                black_box(noop_guard.send(&backfill, &effect).await.unwrap());
            }
        })
    });
    report.figure(
        "core.guard.describe",
        direct.as_nanos() as f64 / CALLS as f64,
        "ns/call",
    );
    report.figure(
        "core.guard.preview",
        preview.as_nanos() as f64 / CALLS as f64,
        "ns/call",
    );
    report.figure(
        "core.guard.suppressed_noop_journal",
        suppressed_noop.as_nanos() as f64 / CALLS as f64,
        "ns/call",
    );

    let _ = std::fs::remove_dir_all(&scratch);
    let path = report.write().unwrap();
    println!("wrote {}", path.display());
}
