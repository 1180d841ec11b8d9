//! The lists that grow with the journals, through the binary: `report`'s effects in doubt
//! and failed, and `diff`'s differences, keep memory flat in how many there are; and a
//! journal read from a pipe lists the same as the file.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use chrono::{TimeDelta, TimeZone, Utc};
use replaysafe_core::journal::{JournalDecision, JournalRecord, RecordEffect, RecordWindow};

fn binary() -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("replaysafe"));
    command.env_clear();
    command
}

/// Effect `index` of a 90-day backfill, with `decision`; its payload depends on `version`.
fn record(index: usize, decision: JournalDecision, version: usize) -> JournalRecord {
    let start = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).unwrap();
    let window_start = start + TimeDelta::days((index % 90) as i64);
    JournalRecord::new(
        start + TimeDelta::milliseconds(index as i64),
        decision,
        "daily_orders",
        format!("scheduled__{}", replaysafe_core::rfc3339(window_start)),
        "scheduled",
        RecordWindow::new(window_start, window_start + TimeDelta::days(1)),
        RecordEffect::new(
            ["email", "webhook", "file_drop"][index % 3],
            "daily_summary",
            format!("*@customer{}.example", index % 1_000),
            format!("{:064x}", index.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            format!("{:064x}", index * 7 + version),
            2048,
        ),
    )
    .with_reasons(["current_window"])
    .with_attempt(u32::from(decision != JournalDecision::Suppressed))
    .with_error((decision == JournalDecision::Failed).then(|| "503 service unavailable".into()))
}

fn write(path: &Path, records: impl Iterator<Item = JournalRecord>) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for record in records {
        serde_json::to_writer(&mut out, &record).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.flush().unwrap();
}

/// The peak memory, in MiB, `replaysafe ARGS --print-peak-memory` reports, and its stdout.
fn peak(args: &[&std::ffi::OsStr]) -> (u64, Vec<u8>) {
    let output = binary()
        .args(args)
        .arg("--print-peak-memory")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(matches!(output.status.code(), Some(0 | 1)), "{stderr}");
    let kib: u64 = stderr
        .lines()
        .find_map(|line| line.strip_prefix("peak memory: "))
        .and_then(|kib| kib.trim_end_matches(" KiB").parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    (kib / 1024, output.stdout)
}

const EFFECTS: usize = 30_000;

#[test]
fn report_memory_does_not_grow_with_the_effects_it_lists() {
    let dir = tempfile::tempdir().unwrap();
    // 30,000 effects in doubt and 30,000 failed for good, and as many suppressed lines.
    let listed = dir.path().join("listed.jsonl");
    write(
        &listed,
        (0..EFFECTS).flat_map(|i| {
            [
                record(i, JournalDecision::Attempting, 0),
                record(EFFECTS + i, JournalDecision::Failed, 0),
            ]
        }),
    );
    let suppressed = dir.path().join("suppressed.jsonl");
    write(
        &suppressed,
        (0..2 * EFFECTS).map(|i| record(i, JournalDecision::Suppressed, 0)),
    );
    for format in ["table", "json", "html"] {
        let (listing, out) = peak(&[
            "report".as_ref(),
            "--format".as_ref(),
            format.as_ref(),
            listed.as_os_str(),
        ]);
        let (baseline, _) = peak(&[
            "report".as_ref(),
            "--format".as_ref(),
            format.as_ref(),
            suppressed.as_os_str(),
        ]);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(&format!(
                "{:064x}",
                (EFFECTS - 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            )),
            "{format}: the last effect in doubt is listed"
        );
        // Before the lists were kept on disk this took 60 MiB and more over the baseline.
        assert!(
            listing <= baseline + 24,
            "{format}: {listing} MiB listing 60,000 effects, {baseline} MiB for as many suppressed lines"
        );
    }
}

#[test]
fn diff_memory_does_not_grow_with_the_differences() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.jsonl");
    write(
        &base,
        (0..EFFECTS).map(|i| record(i, JournalDecision::Suppressed, 0)),
    );
    // Every effect differs: a new payload, and delivered instead of suppressed.
    let new = dir.path().join("new.jsonl");
    write(
        &new,
        (0..EFFECTS).flat_map(|i| {
            [
                record(i, JournalDecision::Attempting, 1),
                record(i, JournalDecision::Delivered, 1),
            ]
        }),
    );
    let (equal, _) = peak(&["diff".as_ref(), base.as_os_str(), base.as_os_str()]);
    for format in ["table", "json", "markdown"] {
        let (different, out) = peak(&[
            "diff".as_ref(),
            "--format".as_ref(),
            format.as_ref(),
            base.as_os_str(),
            new.as_os_str(),
        ]);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("0 only in new, 0 only in base, 30000 changed payloads, 30000 changed decisions, 0 unchanged")
                || text.contains("\"unchanged\": 0"),
            "{format}: {}",
            &text[..text.len().min(300)]
        );
        // Before the lists were kept on disk, listing them took 40 MiB and more.
        assert!(
            different <= equal + 24,
            "{format}: {different} MiB listing 60,000 differences, {equal} MiB for none"
        );
    }
}

/// Runs `replaysafe ARGS` with `journal` as the file `/dev/stdin` names, a pipe.
fn through_a_pipe(args: &[&str], journal: &Path) -> Vec<u8> {
    let mut child = binary()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let bytes = std::fs::read(journal).unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&bytes));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(matches!(output.status.code(), Some(0 | 1)), "{output:?}");
    output.stdout
}

#[test]
fn a_journal_read_from_a_pipe_lists_what_the_file_lists() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    write(
        &journal,
        (0..300).flat_map(|i| match i % 3 {
            0 => vec![record(i, JournalDecision::Attempting, 0)],
            1 => vec![
                record(i, JournalDecision::Attempting, 0),
                record(i, JournalDecision::Failed, 0),
            ],
            _ => vec![record(i, JournalDecision::Suppressed, 0)],
        }),
    );
    let base = dir.path().join("base.jsonl");
    write(
        &base,
        (0..300).map(|i| record(i + 150, JournalDecision::Suppressed, 0)),
    );
    let file = |args: &[&str]| {
        let output = binary().args(args).arg(&journal).output().unwrap();
        output.stdout
    };
    for format in ["table", "json", "html"] {
        let piped = through_a_pipe(&["report", "--format", format, "/dev/stdin"], &journal);
        let from_file = file(&["report", "--format", format]);
        let shown = |text: Vec<u8>| {
            String::from_utf8(text)
                .unwrap()
                .replace(&journal.display().to_string(), "/dev/stdin")
        };
        assert_eq!(shown(piped), shown(from_file), "{format}");
    }
    let base = base.display().to_string();
    let piped = through_a_pipe(&["diff", &base, "/dev/stdin"], &journal);
    let from_file = file(&["diff", &base]);
    assert_eq!(
        String::from_utf8(piped).unwrap(),
        String::from_utf8(from_file).unwrap()
    );
    assert!(
        !String::from_utf8(file(&["diff", &base]))
            .unwrap()
            .is_empty()
    );
}
