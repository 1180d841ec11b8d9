//! Reports over generated journals: lines per second against a baseline that only
//! parses the same file with serde_json, and peak memory at 1 M and 5 M lines; the HTML
//! page of the 5 M-line journal: wall time and peak memory.
//!
//! The lists that grow with the effects: a report of 200,000 effects in doubt against
//! the same number of suppressed lines (memory should not grow with the effects listed),
//! and a diff of two journals of about 225 MB each: wall time and peak memory.
//! `cargo bench -p replaysafe-review --bench report -- lists` runs only these, and
//! `-- lines` only the others.
//!
//! Wall time and peak memory are those of a child process that reads the journal and
//! writes the output as `replaysafe report -o FILE` and `replaysafe diff` do: this
//! benchmark run again, or, with `REPLAYSAFE_BENCH_BINARY=PATH`, that build of the
//! `replaysafe` command (this release's, or an older one, to compare).

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::Command;

use chrono::{TimeDelta, TimeZone, Utc};
use replaysafe_bench::{Report, best_of, per_second};
use replaysafe_core::journal::{JournalDecision, JournalRecord, RecordEffect, RecordWindow};
use replaysafe_review::report::Breakdown;
use replaysafe_review::{Format, Reader};

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
        let record = JournalRecord::new(
            start + TimeDelta::milliseconds(index as i64),
            if index % 50 == 0 {
                JournalDecision::Delivered
            } else {
                JournalDecision::Suppressed
            },
            "daily_orders",
            format!("backfill__{}", replaysafe_core::rfc3339(window_start)),
            "backfill",
            RecordWindow::new(window_start, window_start + TimeDelta::days(1)),
            RecordEffect::new(
                kind,
                "daily_summary",
                format!("*@customer{}.example", index % 10_000),
                format!("{index:064x}"),
                format!("{:064x}", index * 7),
                2048,
            )
            .with_summary(Some("Your daily summary".into())),
        )
        .with_reasons(["replay_run", "stale_window"])
        .with_backfill_id(Some("bf-2026-05".into()));
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

/// The first argument of this benchmark run as the child that is measured.
const CHILD: &str = "--child";

/// The process measured, given `replaysafe`'s arguments: `REPLAYSAFE_BENCH_BINARY`, or
/// this benchmark as a child that does the same with the library ([`child`]).
fn replaysafe() -> Command {
    match std::env::var_os("REPLAYSAFE_BENCH_BINARY") {
        Some(binary) => Command::new(binary),
        None => {
            let mut command = Command::new(std::env::current_exe().unwrap());
            command.arg(CHILD);
            command
        }
    }
}

/// What `replaysafe report --format FORMAT -o FILE JOURNAL` and `replaysafe diff BASE NEW`
/// (the table to standard output) do, through the library; then the peak memory on
/// stderr, as `--print-peak-memory` prints it.
fn child(args: &[String]) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [
            "report",
            "--format",
            format,
            "-o",
            page,
            journal,
            "--print-peak-memory",
        ] => {
            let report = Reader::default()
                .report(&[journal], &[Breakdown::Kind, Breakdown::Reason])
                .unwrap();
            let mut out = BufWriter::new(std::fs::File::create(page).unwrap());
            match *format {
                "html" => report.write_html(None, &mut out).unwrap(),
                "json" => report.write(Format::Json, &mut out).unwrap(),
                "table" => report.write(Format::Table, &mut out).unwrap(),
                other => panic!("no format {other}"),
            }
            out.flush().unwrap();
        }
        ["diff", base, new, "--print-peak-memory"] => {
            let diff = Reader::default().diff(&[base], &[new]).unwrap();
            let mut out = BufWriter::new(std::io::stdout().lock());
            diff.write(Format::Table, &mut out).unwrap();
            out.flush().unwrap();
        }
        other => panic!("the benchmark's child does not know {other:?}"),
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    eprintln!(
        "peak memory: {} KiB",
        peak.trim().trim_end_matches(" kB").trim()
    );
}

/// Peak memory in MiB and wall time of `replaysafe report --format FORMAT PATH`.
fn run_report(path: &Path, format: &str) -> (f64, std::time::Duration) {
    let page = path.with_extension(format);
    let measured = run_binary(
        replaysafe()
            .args(["report", "--format", format, "-o"])
            .arg(&page)
            .arg(path),
    );
    let _ = std::fs::remove_file(&page);
    measured
}

/// Peak memory in MiB (the child's own `VmHWM`) and wall time of a `replaysafe` command
/// that exits 0 or 1; its standard output is discarded.
fn run_binary(command: &mut Command) -> (f64, std::time::Duration) {
    let started = std::time::Instant::now();
    let output = command
        .arg("--print-peak-memory")
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
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

/// One line of the journals of the list benchmarks: an effect of a 90-day backfill keyed
/// by `index`, with `decision`, a payload digest that depends on `version`.
fn list_record(index: usize, decision: JournalDecision, version: usize) -> JournalRecord {
    let start = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).unwrap();
    let window_start = start + TimeDelta::days((index % 90) as i64);
    let kinds = ["email", "email", "webhook", "file_drop"];
    JournalRecord::new(
        start + TimeDelta::milliseconds(index as i64),
        decision,
        "daily_orders",
        format!("scheduled__{}", replaysafe_core::rfc3339(window_start)),
        "scheduled",
        RecordWindow::new(window_start, window_start + TimeDelta::days(1)),
        RecordEffect::new(
            kinds[index % kinds.len()],
            "daily_summary",
            format!("*@customer{}.example", index % 10_000),
            format!("{:064x}", index.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            format!("{:064x}", index * 7 + version),
            2048,
        )
        .with_summary(Some("Your daily summary".into())),
    )
    .with_reasons(if decision == JournalDecision::Suppressed {
        vec!["replay_run", "stale_window"]
    } else {
        vec!["current_window"]
    })
    .with_attempt(u32::from(decision != JournalDecision::Suppressed))
}

fn write_records(path: &Path, records: impl Iterator<Item = JournalRecord>) {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    for record in records {
        serde_json::to_writer(&mut out, &record).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.flush().unwrap();
}

/// `report` of `effects` attempts with no outcome, against as many suppressed lines.
fn bench_in_doubt(bench: &mut Report, dir: &Path, effects: usize) {
    let in_doubt = dir.join("in-doubt.jsonl");
    write_records(
        &in_doubt,
        (0..effects).map(|i| list_record(i, JournalDecision::Attempting, 0)),
    );
    let suppressed = dir.join("suppressed.jsonl");
    write_records(
        &suppressed,
        (0..effects).map(|i| list_record(i, JournalDecision::Suppressed, 0)),
    );
    let megabytes = std::fs::metadata(&in_doubt).unwrap().len() as f64 / 1e6;
    bench.figure("review.report.in_doubt_200k_input", megabytes, "MB");
    for format in ["table", "json"] {
        let (peak, took) = run_report(&in_doubt, format);
        let (baseline, _) = run_report(&suppressed, format);
        bench.figure(
            format!("review.report.in_doubt_200k_peak_memory_{format}"),
            peak,
            "MiB",
        );
        bench.figure(
            format!("review.report.in_doubt_200k_seconds_{format}"),
            took.as_secs_f64(),
            "s",
        );
        bench.ratio(
            format!("review.report.in_doubt_200k_peak_memory_vs_suppressed_{format}"),
            peak / baseline,
            "peak memory of report over as many suppressed lines",
        );
    }
    std::fs::remove_file(&in_doubt).unwrap();
    std::fs::remove_file(&suppressed).unwrap();
}

/// `diff` of a 225 MB dry run against a re-run of it: 1 % of payloads changed, 0.4 % of
/// effects dropped, 0.4 % added, 0.2 % delivered (attempting and delivered lines).
fn bench_diff(bench: &mut Report, dir: &Path, effects: usize) {
    let base = dir.join("base.jsonl");
    write_records(
        &base,
        (0..effects).map(|i| list_record(i, JournalDecision::Suppressed, 0)),
    );
    let new = dir.join("new.jsonl");
    write_records(
        &new,
        (0..effects).flat_map(|i| {
            let version = usize::from(i % 100 == 3);
            match i % 500 {
                7 | 207 => vec![],
                9 | 209 => vec![
                    list_record(i, JournalDecision::Suppressed, version),
                    list_record(effects + i, JournalDecision::Suppressed, 0),
                ],
                11 => vec![
                    list_record(i, JournalDecision::Attempting, version),
                    list_record(i, JournalDecision::Delivered, version),
                ],
                _ => vec![list_record(i, JournalDecision::Suppressed, version)],
            }
        }),
    );
    let megabytes = std::fs::metadata(&base).unwrap().len() as f64 / 1e6;
    bench.figure("review.diff.input_each", megabytes, "MB");
    let (peak, took) = run_binary(replaysafe().arg("diff").arg(&base).arg(&new));
    bench.figure("review.diff.peak_memory_225mb", peak, "MiB");
    bench.figure("review.diff.seconds_225mb", took.as_secs_f64(), "s");
    let (equal_peak, _) = run_binary(replaysafe().arg("diff").arg(&base).arg(&base));
    bench.figure("review.diff.peak_memory_225mb_equal", equal_peak, "MiB");
    std::fs::remove_file(&base).unwrap();
    std::fs::remove_file(&new).unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, rest @ ..] = args.as_slice()
        && flag == CHILD
    {
        return child(rest);
    }
    let mut bench = Report::new("review");
    let dir = std::env::temp_dir().join(format!("replaysafe-bench-review-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let only = |part: &str| args.iter().any(|arg| arg == part);
    if !only("lines") {
        bench_in_doubt(&mut bench, &dir, 200_000);
        bench_diff(&mut bench, &dir, 360_000);
    }
    if only("lists") {
        let _ = std::fs::remove_dir_all(&dir);
        let path = bench.write().unwrap();
        println!("wrote {}", path.display());
        return;
    }
    let one_million = dir.join("1m.jsonl");
    generate(&one_million, 1_000_000);

    let mut report_best = std::time::Duration::MAX;
    let mut parse_best = std::time::Duration::MAX;
    for _ in 0..3 {
        parse_best = parse_best.min(best_of(1, || {
            assert_eq!(parse_only(&one_million), 1_000_000)
        }));
        report_best = report_best.min(best_of(1, || {
            let built = Reader::default()
                .report(&[&one_million], &[Breakdown::Kind, Breakdown::Reason])
                .unwrap();
            assert_eq!(built.records, 1_000_000);
        }));
    }
    let report_rate = per_second(1_000_000, report_best);
    let parse_rate = per_second(1_000_000, parse_best);
    bench.figure("review.report.lines_per_second", report_rate, "lines/s");
    bench.figure(
        "review.report.parse_only_lines_per_second",
        parse_rate,
        "lines/s",
    );
    bench.ratio(
        "review.report.vs_parse_only",
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
        "review.report.json_seconds_5m_lines",
        json_took.as_secs_f64(),
        "s",
    );
    bench.figure(
        "review.report.html_seconds_5m_lines",
        html_took.as_secs_f64(),
        "s",
    );
    bench.figure(
        "review.report.html_peak_memory_5m_lines",
        html_peak_5m,
        "MiB",
    );
    bench.ratio(
        "review.report.html_peak_memory_vs_json_5m",
        html_peak_5m / peak_5m,
        "peak memory of report --format json over the same 5 M lines",
    );
    bench.figure("review.report.peak_memory_1m_lines", peak_1m, "MiB");
    bench.figure("review.report.peak_memory_5m_lines", peak_5m, "MiB");
    bench.ratio(
        "review.report.peak_memory_5m_vs_1m",
        peak_5m / peak_1m,
        "peak memory of report over 1 M lines",
    );

    let _ = std::fs::remove_dir_all(&dir);
    let path = bench.write().unwrap();
    println!("wrote {}", path.display());
}
