//! Core benchmarks: gate decisions; journaling (durable by default, one write per record)
//! against a raw serde_json-and-write baseline, the buffered mode against a 64 KiB
//! BufWriter; the whole suppressed send against a raw baseline doing the same hashing
//! and write; the guard's overhead on the deliver path; and the ledger (the journal's
//! memory of keys) on JSON Lines journals already holding 10⁴ and 10⁶ records.
//!
//! Run with `cargo xtask bench` (or `cargo bench -p replaysafe-core`); figures go to
//! `target/bench/core.json`.

use std::cell::Cell;
use std::fmt::Write as _;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use replaysafe_bench::{Report, best_of, interleaved_chunks, per_second};
use replaysafe_core::adapter::{EffectRecord, Step};
use replaysafe_core::journal::Durability;
use replaysafe_core::journal::NoopJournal;
use replaysafe_core::{
    EffectClient, EffectKind, Guard, IdempotencyKey, JournalRecord, JsonlJournal, MemoryJournal,
    RedactionPolicy, ReplayContext,
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

    #[cfg(feature = "otel")]
    otel(&mut report, &runtime, &scratch, &backfill, &effect);

    // 4. The ledger on JSON Lines journals already holding 10⁴ and 10⁶ records.
    ledger(&mut report, &runtime, &scratch, 10_000, "1e4");
    ledger(&mut report, &runtime, &scratch, 1_000_000, "1e6");

    let _ = std::fs::remove_dir_all(&scratch);
    let path = report.write().unwrap();
    println!("wrote {}", path.display());
}

/// The ledger's cost on a JSON Lines journal already holding `records` records (named
/// `label` in the figures): `records / 2` distinct keys, each with its `attempting` and
/// its `delivered` line, as a pipeline's deliveries leave them.
///
/// - The cost per delivery: guarded sends of new keys with a client that delivers nowhere,
///   with the ledger on, against the same sends with `Guard::with_ledger(false)` on a copy
///   of the same journal, interleaved. Both write two lines per send (the ledger's claim
///   is the `attempting` line); the ledger adds the look under the file's lock: one
///   `fstat`, reading the lines appended since its last look (the previous send's
///   `delivered` line), and a lookup in its index of keys. Each send adds two lines to
///   its journal, so by the end the 10⁴-record journal holds about 30% more records.
/// - The one-time cost of building the index of keys: the first send after opening the
///   journal (the file is in the page cache, just written), best of 3; and the resident
///   memory it adds (VmRSS after against before) and at its peak (VmHWM, reset just
///   before), read from `/proc/self/status` where there is one.
fn ledger(
    report: &mut Report,
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
    records: usize,
    label: &str,
) {
    const CHUNKS: usize = 10;
    const REPEATS: usize = 3;
    const BUILDS: usize = 3;
    let per_chunk = if records >= 1_000_000 { 500 } else { 50 };
    let cx = contexts::live();
    let sent = Cell::new(0usize);
    let new_effect = || {
        sent.set(sent.get() + 1);
        TestEffect::email(format!("new-{}@shop.example", sent.get()))
            .with_payload(vec![b'x'; 512])
            .with_summary("Your daily summary")
    };
    let send_chunk = |guard: &Guard<InertClient>, count: usize| {
        runtime.block_on(async {
            for _ in 0..count {
                let outcome = guard.send(&cx, &new_effect()).await.unwrap();
                assert!(outcome.is_delivered(), "every key is new");
            }
        })
    };

    // The records a guard writes for one delivery, to fill the journals with.
    let template = Arc::new(MemoryJournal::new());
    runtime
        .block_on(
            Guard::with_shared_journal(InertClient, template.clone()).send(&cx, &new_effect()),
        )
        .unwrap();
    let template = template.records();
    assert_eq!(template.len(), 2, "attempting and delivered");

    let on_path = scratch.join(format!("ledger-on-{label}.jsonl"));
    let off_path = scratch.join(format!("ledger-off-{label}.jsonl"));
    prefill(&on_path, records, &template, &cx);
    std::fs::copy(&on_path, &off_path).unwrap();

    // The index of keys, built by the first send after opening; the last journal opened
    // stays open for the cost per delivery.
    let mut build_best = Duration::MAX;
    let mut memory = None;
    let mut on_guard = None;
    for round in 0..BUILDS {
        // The journal opened before, and its index, go first.
        drop(on_guard.take());
        let journal = Arc::new(JsonlJournal::open(&on_path).unwrap());
        let guard = Guard::with_shared_journal(InertClient, journal);
        let rss_before = status_kib("VmRSS:");
        let peak_reset = reset_peak_memory();
        build_best = build_best.min(best_of(1, || send_chunk(&guard, 1)));
        if round == 0 {
            memory = rss_before.zip(status_kib("VmRSS:")).map(|(before, after)| {
                let peak = status_kib("VmHWM:").filter(|_| peak_reset);
                (
                    after.saturating_sub(before),
                    peak.map(|peak| peak.saturating_sub(before)),
                )
            });
        }
        on_guard = Some(guard);
    }
    let on_guard = on_guard.unwrap();
    report.figure(
        format!("core.ledger.jsonl_{label}.index_build_ms"),
        build_best.as_secs_f64() * 1e3,
        "ms (first send after opening, once per process)",
    );
    if let Some((added, peak)) = memory {
        let keys = records / 2;
        report.figure(
            format!("core.ledger.jsonl_{label}.index_rss_mib"),
            added as f64 / 1024.0,
            "MiB (VmRSS added by the index)",
        );
        report.figure(
            format!("core.ledger.jsonl_{label}.index_bytes_per_key"),
            added as f64 * 1024.0 / keys as f64,
            "bytes/key",
        );
        if let Some(peak) = peak {
            report.figure(
                format!("core.ledger.jsonl_{label}.index_peak_mib"),
                peak as f64 / 1024.0,
                "MiB (VmHWM above VmRSS before the build)",
            );
        }
    }

    let off_guard = Guard::with_shared_journal(
        InertClient,
        Arc::new(JsonlJournal::open(&off_path).unwrap()),
    )
    .with_ledger(false);
    send_chunk(&off_guard, per_chunk);
    send_chunk(&on_guard, per_chunk);
    let (on, off) = interleaved_chunks(
        CHUNKS,
        REPEATS,
        |_| send_chunk(&on_guard, per_chunk),
        |_| send_chunk(&off_guard, per_chunk),
    );
    let sends = (CHUNKS * per_chunk) as f64;
    report.figure(
        format!("core.ledger.jsonl_{label}.us_per_delivery"),
        (on.as_secs_f64() - off.as_secs_f64()) * 1e6 / sends,
        "µs/delivery (ledger on minus Guard::with_ledger(false), same journal size)",
    );
    report.figure(
        format!("core.ledger.jsonl_{label}.send_us"),
        on.as_secs_f64() * 1e6 / sends,
        "µs/send (inert client, ledger on)",
    );
    report.figure(
        format!("core.ledger.jsonl_{label}.send_ledger_off_us"),
        off.as_secs_f64() * 1e6 / sends,
        "µs/send (inert client, Guard::with_ledger(false))",
    );
    drop((on_guard, off_guard));
    let _ = std::fs::remove_file(&on_path);
    let _ = std::fs::remove_file(&off_path);
}

/// Writes a journal of `records` lines to `path`: for each of `records / 2` distinct keys
/// the `attempting` and `delivered` records of `template` (what a guard wrote for one
/// delivery in `cx`), retargeted and rekeyed, encoded by the journal's own encoder.
fn prefill(path: &Path, records: usize, template: &[JournalRecord], cx: &ReplayContext) {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut pair = template.to_vec();
    let mut line = Vec::with_capacity(1024);
    for index in 0..records / 2 {
        let target = format!("customer-{index}@shop.example");
        let key = IdempotencyKey::derive(
            cx.pipeline(),
            &EffectKind::Email,
            "daily_summary",
            &target,
            cx.window(),
        );
        for record in &mut pair {
            record.effect.target.clone_from(&target);
            record.effect.idempotency_key.clear();
            record.effect.idempotency_key.push_str(key.as_str());
            line.clear();
            record.entry().write_json(&mut line);
            line.push(b'\n');
            out.write_all(&line).unwrap();
        }
    }
    out.flush().unwrap();
}

/// A `Vm…:` line of `/proc/self/status`, in KiB; `None` where there is none (not Linux).
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets the process's peak resident size (VmHWM) to its current one (Linux 4.0 and
/// later); false where that cannot be done.
fn reset_peak_memory() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// An OpenTelemetry log exporter that drops every batch: the SDK's own cost, no network.
#[cfg(feature = "otel")]
#[derive(Debug)]
struct DroppingExporter;

#[cfg(feature = "otel")]
impl opentelemetry_sdk::logs::LogExporter for DroppingExporter {
    async fn export(
        &self,
        batch: opentelemetry_sdk::logs::LogBatch<'_>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        black_box(batch.iter().count());
        Ok(())
    }
}

/// A suppressed send with `otel` on (the durable JSON Lines journal wrapped in
/// `OtelJournal`, the SDK's batch processor, an exporter that drops) against the same send
/// with it off, interleaved.
#[cfg(feature = "otel")]
fn otel(
    report: &mut Report,
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
    backfill: &replaysafe_core::ReplayContext,
    effect: &TestEffect,
) {
    use opentelemetry::logs::LoggerProvider as _;
    use replaysafe_core::journal::OtelJournal;

    const CALLS: usize = 50_000;

    let provider = opentelemetry_sdk::logs::SdkLoggerProvider::builder()
        .with_batch_exporter(DroppingExporter)
        .build();
    let off = Guard::new(
        InertClient,
        JsonlJournal::open(scratch.join("otel-off.jsonl")).unwrap(),
    );
    let on = Guard::new(
        InertClient,
        OtelJournal::new(
            JsonlJournal::open(scratch.join("otel-on.jsonl")).unwrap(),
            provider.logger("replaysafe"),
        ),
    );
    let mut off_best = Duration::MAX;
    let mut on_best = Duration::MAX;
    for _ in 0..5 {
        for (guard, best) in [(&off, &mut off_best), (&on, &mut on_best)] {
            let started = std::time::Instant::now();
            runtime.block_on(async {
                for _ in 0..CALLS {
                    black_box(guard.send(backfill, effect).await.unwrap());
                }
            });
            *best = (*best).min(started.elapsed());
        }
    }
    let _ = provider.shutdown();
    report.figure(
        "core.otel.suppressed_send_on",
        on_best.as_nanos() as f64 / CALLS as f64,
        "ns/call",
    );
    report.figure(
        "core.otel.suppressed_send_off",
        off_best.as_nanos() as f64 / CALLS as f64,
        "ns/call",
    );
    report.ratio(
        "core.otel.suppressed_on_vs_off_cost",
        on_best.as_secs_f64() / off_best.as_secs_f64(),
        "a suppressed send with otel on (one log record per decision, batch processor) over the same send off, durable JSON Lines journal, interleaved; target <= 2",
    );
}
