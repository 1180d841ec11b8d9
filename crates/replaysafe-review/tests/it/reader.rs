//! How journals are read: progress, many journals as one, invalid lines, errors.

use std::cell::Cell;
use std::error::Error as _;

use replaysafe_core::journal::JournalDecision;
use replaysafe_review::report::{Breakdown, FailOn};
use replaysafe_review::{Progress, Reader};

use crate::support::{Fixture, attempts_journal, journal, record, write};

/// Counts what a reader tells it.
#[derive(Debug, Default)]
struct Counted {
    bytes: Cell<u64>,
    finished: Cell<u32>,
}

impl Progress for Counted {
    fn advance(&self, bytes: u64) {
        self.bytes.set(self.bytes.get() + bytes);
    }

    fn finish(&self) {
        self.finished.set(self.finished.get() + 1);
    }
}

#[test]
fn progress_hears_every_byte_and_the_end_once() {
    let dir = tempfile::tempdir().unwrap();
    let base = journal(dir.path(), Fixture::OptIn);
    let new = journal(dir.path(), Fixture::Changed);
    let size = |path: &std::path::Path| std::fs::metadata(path).unwrap().len();

    let progress = Counted::default();
    let report = Reader::default()
        .with_progress(&progress)
        .report(&[&base, &new], &[])
        .unwrap();
    assert!(report.records > 0);
    assert_eq!(progress.bytes.get(), size(&base) + size(&new));
    assert_eq!(progress.finished.get(), 1);

    let progress = Counted::default();
    Reader::default()
        .with_progress(&progress)
        .diff(&[&base], &[&new])
        .unwrap();
    assert_eq!(progress.bytes.get(), size(&base) + size(&new));
    assert_eq!(progress.finished.get(), 1);
}

#[test]
fn many_journals_read_as_one() {
    let dir = tempfile::tempdir().unwrap();
    // The attempt of `k` is cut short in one journal and delivered in the other.
    let first = dir.path().join("first.jsonl");
    write(&first, &[record("k", "r1", JournalDecision::Attempting, 1)]);
    let second = dir.path().join("second.jsonl");
    write(&second, &[record("k", "r2", JournalDecision::Delivered, 1)]);

    let alone = Reader::default().report(&[&first], &[]).unwrap();
    assert_eq!(alone.count(FailOn::InDoubt), 1);
    assert_eq!(alone.failures(&[FailOn::InDoubt]), ["1 in doubt"]);

    let both = Reader::default()
        .report(&[&first, &second], &[Breakdown::Kind])
        .unwrap();
    assert_eq!(both.records, 2);
    assert_eq!(both.count(FailOn::InDoubt), 0);
    assert_eq!(both.count(FailOn::Delivered), 1);
    assert!(both.failures(&[FailOn::InDoubt]).is_empty());
    assert_eq!(
        both.journals,
        [first.display().to_string(), second.display().to_string()]
    );

    let diff = Reader::default()
        .diff(&[&first], &[&first, &second])
        .unwrap();
    let flips = diff.changed_decision.to_vec().unwrap();
    assert_eq!(
        (
            flips[0].base.decision.as_str(),
            flips[0].new.decision.as_str()
        ),
        ("in_doubt", "delivered")
    );
}

#[test]
fn invalid_lines_are_errors_naming_the_line_unless_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = attempts_journal(dir.path());
    let mut text = std::fs::read_to_string(&path).unwrap();
    // A line cut short in the middle of an attempting record, and a whole line that says
    // it is a suppression but lacks the rest of a record.
    text.push_str("{\"v\":1,\"decision\":\"attempting\",\n{\"v\":1,\"decision\":\"suppressed\"}\n");
    std::fs::write(&path, text).unwrap();

    let error = Reader::default().report(&[&path], &[]).unwrap_err();
    assert_eq!(
        error.to_string().split(": ").take(2).collect::<Vec<_>>(),
        [
            format!("{}:19", path.display()).as_str(),
            "malformed journal record"
        ],
        "{error}"
    );

    let report = Reader::default()
        .with_skip_invalid(true)
        .report(&[&path], &[])
        .unwrap();
    assert_eq!(report.skipped_invalid, 2);
    assert_eq!(
        report.skipped_invalid_lines,
        [
            format!("{}:19 (malformed record)", path.display()),
            format!("{}:20 (malformed record)", path.display())
        ]
    );
    // The first may be an attempting record cut short; the second provably is not one.
    assert_eq!(report.skipped_possibly_in_doubt, 1);
    assert_eq!(report.count(FailOn::InDoubt), 3 + 1);
    assert_eq!(
        report.failures(&[FailOn::InDoubt]),
        ["4 in doubt (1 of them an invalid line that may be an attempting record)"]
    );
}

#[test]
fn a_missing_journal_is_an_error_naming_it_with_the_cause_as_source() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    let present = journal(dir.path(), Fixture::Backfill);
    let error = Reader::default().report(&[&missing], &[]).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("opening journal {}", missing.display())
    );
    let cause = error.source().expect("the cause is the source");
    assert_eq!(
        cause.downcast_ref::<std::io::Error>().map(|e| e.kind()),
        Some(std::io::ErrorKind::NotFound)
    );
    let error = Reader::default()
        .diff(&[&present], &[&missing])
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("opening journal {}", missing.display())
    );
}
