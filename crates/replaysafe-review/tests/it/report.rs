//! What a report says: effects in doubt and failed, last errors, the grid, instants.

use chrono::{TimeZone, Utc};
use replaysafe_core::journal::{JournalDecision, RecordOptIn};
use replaysafe_review::report::{Breakdown, Report};
use replaysafe_review::{Format, Reader};

use crate::support::{attempts_journal, record, write};

/// The report as `format` writes it.
fn text(report: &Report, format: Format) -> String {
    let mut out = Vec::new();
    report.write(format, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn report_names_effects_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let path = attempts_journal(dir.path());
    let built = Reader::default()
        .report(&[&path], &[Breakdown::Kind])
        .unwrap();
    let listed = built.in_doubt.to_vec().unwrap();
    let in_doubt: Vec<(&str, &str, u32)> = listed
        .iter()
        .map(|e| (e.key.as_str(), e.run_id.as_str(), e.attempt))
        .collect();
    assert_eq!(
        in_doubt,
        [
            ("b-cut-retry", "r1", 2),
            ("e-cut-then-failed", "r1", 1),
            ("g-same-run-retry", "r1", 1)
        ]
    );
    assert_eq!(
        listed[0].target,
        "https://partner.example/hooks/b-cut-retry"
    );
    let r1 = &built.groups[0];
    assert_eq!(
        (r1.id.as_str(), r1.delivered, r1.failed, r1.in_doubt),
        ("r1", 1, 1, 3)
    );
    assert!(
        r1.headline.ends_with("delivered 1; failed 1; in doubt 3"),
        "{}",
        r1.headline
    );
    let r2 = &built.groups[1];
    assert_eq!((r2.delivered, r2.failed, r2.in_doubt), (1, 0, 0));
}

#[test]
fn report_lists_failed_effects_and_last_errors_and_fills_the_grid() {
    let dir = tempfile::tempdir().unwrap();
    let path = attempts_journal(dir.path());
    // A decision a newer writer might add, and a delivery an opt-in enabled.
    let mut text = std::fs::read_to_string(&path).unwrap();
    let mut newer = record("h-newer", "r2", JournalDecision::Suppressed, 0);
    newer.effect.kind = "email".into();
    text.push_str(
        &(serde_json::to_string(&newer)
            .unwrap()
            .replace("\"suppressed\"", "\"queued\"")
            + "\n"),
    );
    let mut opted = record("i-opted", "r2", JournalDecision::Delivered, 1);
    let mut opt_in = RecordOptIn::new(
        "resend",
        "jane",
        Utc.with_ymd_and_hms(2026, 8, 7, 0, 0, 0).unwrap(),
    );
    opt_in.kinds = vec!["email".into()];
    opted.opt_in = Some(opt_in);
    text.push_str(&(serde_json::to_string(&opted).unwrap() + "\n"));
    // An operator's requeue and a circuit's change are no outcome of their effect: the
    // grid counts them nowhere.
    for decision in [JournalDecision::Requeued, JournalDecision::Circuit] {
        let line = record("c-failed", "r1", decision, 1);
        text.push_str(&(serde_json::to_string(&line).unwrap() + "\n"));
    }
    std::fs::write(&path, text).unwrap();
    let built = Reader::default().report(&[&path], &[]).unwrap();
    let failed_effects = built.failed_effects.to_vec().unwrap();
    let failed: Vec<(&str, u64, Option<&str>)> = failed_effects
        .iter()
        .map(|e| (e.key.as_str(), e.failed_attempts, e.last_error.as_deref()))
        .collect();
    assert_eq!(failed, [("c-failed", 1, Some("503 service unavailable"))]);
    let in_doubt = built.in_doubt.to_vec().unwrap();
    let last_errors: Vec<(&str, Option<&str>)> = in_doubt
        .iter()
        .map(|e| (e.key.as_str(), e.last_error.as_deref()))
        .collect();
    assert_eq!(
        last_errors,
        [
            ("b-cut-retry", Some("503 service unavailable")),
            ("e-cut-then-failed", Some("503 service unavailable")),
            ("g-same-run-retry", Some("503 service unavailable")),
        ]
    );
    let window = (
        Utc.with_ymd_and_hms(2026, 8, 5, 0, 0, 0).unwrap(),
        Utc.with_ymd_and_hms(2026, 8, 6, 0, 0, 0).unwrap(),
    );
    let cells = &built.grid[&window];
    let webhook = cells["webhook"];
    assert_eq!(
        (
            webhook.delivered,
            webhook.opt_in,
            webhook.suppressed,
            webhook.failed,
            webhook.in_doubt,
            webhook.unknown
        ),
        (2, 1, 2, 1, 3, 0)
    );
    assert_eq!(cells["email"].unknown, 1);
    let mut page = Vec::new();
    built.write_html(None, &mut page).unwrap();
    let page = String::from_utf8(page).unwrap();
    assert!(
        page.contains(
            "title=\"3 in doubt, 1 failed, 1 delivered by opt-in, 2 delivered, 2 suppressed\""
        ),
        "{page}"
    );
}

#[test]
fn an_instant_window_reads_as_one_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("instant.jsonl");
    let mut instant = record(
        "k",
        "scheduled__2026-08-06T01:00:00+00:00",
        JournalDecision::Suppressed,
        0,
    );
    let t = Utc.with_ymd_and_hms(2026, 8, 6, 1, 0, 0).unwrap();
    instant.window.start = t;
    instant.window.end = t;
    write(&path, &[instant]);
    let built = Reader::default()
        .report(&[&path], &[Breakdown::Window])
        .unwrap();
    let windows: Vec<&String> = built.breakdowns[&Breakdown::Window].keys().collect();
    assert_eq!(windows, ["2026-08-06T01:00:00Z"]);
    assert!(
        built.groups[0]
            .headline
            .contains("(1 window, 2026-08-06T01:00:00Z)"),
        "{}",
        built.groups[0].headline
    );
    assert!(text(&built, Format::Markdown).contains("| 2026-08-06T01:00:00Z |"));
}
