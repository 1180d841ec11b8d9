//! `replaysafe report` over generated journals: lines per second against a baseline that
//! only parses the same file with serde_json, and peak memory at 1 M and 5 M lines; the
//! HTML page of the 5 M-line journal: wall time and peak memory of the binary.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::Command;

use chrono::{TimeDelta, TimeZone, Utc};
use replaysafe_bench::{Report, best_of, per_second};
use replaysafe_cli::input::Progress;
use replaysafe_cli::report::{self, Breakdown};
use replaysafe_core::journal::{JournalDecision, JournalRecord, RecordEffect, RecordWindow};

/// Writes `lines` records: a 90-window backfill's worth of emails, webhooks and drops,
/// cycling through 10,000 recipients, so distinct values stay bounded as lines grow.
fn generate(path: &Path, lines: usize) {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let start = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).unwrap();
    let kinds = ["email", "email", "email", "webhook", "file_drop"];
    for index in 0..lines {
        let window = (index / 1_000) % 90;
        let window_start = start + TimeDelta::days(window as i64);
        let kind = kinds[index % kinds.len()];
        let record = JournalRecord {
            v: 1,
            ts: start + TimeDelta::milliseconds(index as i64),
            decision: if index % 50 == 0 {
                JournalDecision::Delivered
            } else {
                JournalDecision::Suppressed
            },
            reasons: vec!["replay_run".into(), "stale_window".into()],
            pipeline: "daily_orders".into(),
            run_id: format!("backfill__{}", replaysafe_core::rfc3339(window_start)),
            run_kind: "backfill".into(),
            backfill_id: Some("bf-2026-05".into()),
            window: RecordWindow {
                start: window_start,
                end: window_start + TimeDelta::days(1),
            },
            effect: RecordEffect {
                kind: kind.into(),
                message_type: "daily_summary".into(),
                target: format!("*@customer{}.example", index % 10_000),
                idempotency_key: format!("{index:064x}"),
                summary: Some("Your daily summary".into()),
                payload_sha256: format!("{:064x}", index * 7),
                payload_bytes: 2048,
            },
            opt_in: None,
            attempt: 0,
            error: None,
            note: None,
        };
        serde_json::to_writer(&mut out, &record).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.flush().unwrap();
}

fn parse_only(path: &Path) -> usize {
    let reader = BufReader::with_capacity(256 * 1024, std::fs::File::open(path).unwrap());
    let mut count = 0;
    for line in reader.lines() {
        let record: JournalRecord = serde_json::from_str(&line.unwrap()).unwrap();
        std::hint::black_box(&record);
        count += 1;
    }
    count
}

/// Peak memory in MiB and wall time of `replaysafe report --format FORMAT PATH`.
fn run_report(path: &Path, format: &str) -> (f64, std::time::Duration) {
    let page = path.with_extension(format);
    let started = std::time::Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_replaysafe"))
        .args(["report", "--print-peak-memory", "--format", format, "-o"])
        .arg(&page)
        .arg(path)
        .output()
        .unwrap();
    let took = started.elapsed();
    let _ = std::fs::remove_file(&page);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let kib: f64 = stderr
        .lines()
        .find_map(|line| line.strip_prefix("peak memory: "))
        .and_then(|rest| rest.trim_end_matches(" KiB").parse().ok())
        .expect("peak memory line");
    (kib / 1024.0, took)
}

fn peak_memory_mib(path: &Path) -> f64 {
    run_report(path, "json").0
}

fn main() {
    let mut bench = Report::new("cli");
    let dir = std::env::temp_dir().join(format!("replaysafe-bench-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one_million = dir.join("1m.jsonl");
    generate(&one_million, 1_000_000);

    let mut report_best = std::time::Duration::MAX;
    let mut parse_best = std::time::Duration::MAX;
    for _ in 0..3 {
        parse_best = parse_best.min(best_of(1, || {
            assert_eq!(parse_only(&one_million), 1_000_000)
        }));
        report_best = report_best.min(best_of(1, || {
            let built = report::build(
                std::slice::from_ref(&one_million),
                &[Breakdown::Kind, Breakdown::Reason],
                false,
                &Progress::hidden(),
            )
            .unwrap();
            assert_eq!(built.records, 1_000_000);
        }));
    }
    let report_rate = per_second(1_000_000, report_best);
    let parse_rate = per_second(1_000_000, parse_best);
    bench.figure("cli.report.lines_per_second", report_rate, "lines/s");
    bench.figure(
        "cli.report.parse_only_lines_per_second",
        parse_rate,
        "lines/s",
    );
    bench.ratio(
        "cli.report.vs_parse_only",
        report_rate / parse_rate,
        "serde_json parse of the same file into JournalRecord",
    );

    let peak_1m = peak_memory_mib(&one_million);
    std::fs::remove_file(&one_million).unwrap();
    let five_million = dir.join("5m.jsonl");
    generate(&five_million, 5_000_000);
    let (peak_5m, json_took) = run_report(&five_million, "json");
    let (html_peak_5m, html_took) = run_report(&five_million, "html");
    bench.figure(
        "cli.report.json_seconds_5m_lines",
        json_took.as_secs_f64(),
        "s",
    );
    bench.figure(
        "cli.report.html_seconds_5m_lines",
        html_took.as_secs_f64(),
        "s",
    );
    bench.figure("cli.report.html_peak_memory_5m_lines", html_peak_5m, "MiB");
    bench.ratio(
        "cli.report.html_peak_memory_vs_json_5m",
        html_peak_5m / peak_5m,
        "peak memory of report --format json over the same 5 M lines",
    );
    bench.figure("cli.report.peak_memory_1m_lines", peak_1m, "MiB");
    bench.figure("cli.report.peak_memory_5m_lines", peak_5m, "MiB");
    bench.ratio(
        "cli.report.peak_memory_5m_vs_1m",
        peak_5m / peak_1m,
        "peak memory of report over 1 M lines",
    );

    let _ = std::fs::remove_dir_all(&dir);
    let path = bench.write().unwrap();
    println!("wrote {}", path.display());
}
