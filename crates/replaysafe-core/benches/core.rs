//! Core benchmarks: gate decisions, suppressed-effect journaling against a raw
//! serde_json baseline, and the guard's overhead on the deliver path.
//!
//! Run with `cargo xtask bench` (or `cargo bench -p replaysafe-core`); figures go to
//! `target/bench/core.json`.

use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::sync::Arc;

use replaysafe_core::{
    EffectClient, EffectKind, Guard, IdempotencyKey, JournalRecord, JsonlJournal, NoopJournal,
    RedactionPolicy,
};
use replaysafe_test::bench::{Report, best_of, per_second};
use replaysafe_test::{InertClient, TestEffect, contexts};

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
    let record = JournalRecord::for_decision(
        &backfill,
        &description,
        &key,
        &backfill.decide(description.kind(), description.target()),
        RedactionPolicy::default(),
    );
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
    // The journaling step alone: JsonlJournal::append of the same record, against the raw baseline.
    let mut append_best = std::time::Duration::MAX;
    let mut raw_only_best = std::time::Duration::MAX;
    for round in 0..5 {
        let raw_path = scratch.join(format!("raw-only-{round}.jsonl"));
        raw_only_best = raw_only_best.min(best_of(1, || {
            let mut out =
                BufWriter::with_capacity(64 * 1024, std::fs::File::create(&raw_path).unwrap());
            for _ in 0..RECORDS {
                serde_json::to_writer(&mut out, black_box(&record)).unwrap();
                out.write_all(b"\n").unwrap();
            }
            out.flush().unwrap();
        }));
        let append_path = scratch.join(format!("append-{round}.jsonl"));
        append_best = append_best.min(best_of(1, || {
            let journal = JsonlJournal::open(&append_path).unwrap();
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
        "core.journal.append_rate",
        per_second(RECORDS, append_best),
        "records/s",
    );
    report.ratio(
        "core.journal.append_vs_raw",
        raw_only_best.as_secs_f64() / append_best.as_secs_f64(),
        "serde_json::to_writer of the same record into a 64 KiB BufWriter",
    );

    let mut guarded_best = std::time::Duration::MAX;
    let mut raw_best = std::time::Duration::MAX;
    for round in 0..5 {
        let raw_path = scratch.join(format!("raw-{round}.jsonl"));
        raw_best = raw_best.min(best_of(1, || {
            let mut out =
                BufWriter::with_capacity(64 * 1024, std::fs::File::create(&raw_path).unwrap());
            for _ in 0..RECORDS {
                serde_json::to_writer(&mut out, black_box(&record)).unwrap();
                out.write_all(b"\n").unwrap();
            }
            out.flush().unwrap();
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
            replaysafe_core::Journal::flush(&*journal).unwrap();
        }));
        let _ = std::fs::remove_file(&raw_path);
        let _ = std::fs::remove_file(&guarded_path);
    }
    let guarded_rate = per_second(RECORDS, guarded_best);
    let raw_rate = per_second(RECORDS, raw_best);
    report.figure("core.journal.suppressed_rate", guarded_rate, "effects/s");
    report.figure("core.journal.raw_serde_rate", raw_rate, "records/s");
    report.ratio(
        "core.journal.suppressed_vs_raw",
        guarded_rate / raw_rate,
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
