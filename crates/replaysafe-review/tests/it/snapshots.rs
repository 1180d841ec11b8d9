//! Snapshots of every output format of report, diff and plan.

use chrono::{TimeDelta, TimeZone, Utc};
use replaysafe_core::{EffectKind, RunKind, Window};
use replaysafe_review::diff::Diff;
use replaysafe_review::plan;
use replaysafe_review::report::{Breakdown, Report};
use replaysafe_review::{Format, Reader};

use crate::support::{Fixture, journal};

const FORMATS: [(Format, &str); 3] = [
    (Format::Table, "table"),
    (Format::Markdown, "markdown"),
    (Format::Json, "json"),
];

fn stable(text: String, dir: &std::path::Path) -> String {
    text.replace(&dir.display().to_string(), "[dir]")
}

/// What `write` writes.
fn written(write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    write(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn report_text(report: &Report, format: Format) -> String {
    written(|out| report.write(format, out))
}

fn report_html(report: &Report, base: Option<&Diff>) -> String {
    written(|out| report.write_html(base, out))
}

fn diff_text(diff: &Diff, format: Format) -> String {
    written(|out| diff.write(format, out))
}

#[test]
fn report_formats() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("backfill", journal(dir.path(), Fixture::Backfill)),
        ("opt_in", journal(dir.path(), Fixture::OptIn)),
        ("empty", {
            let path = dir.path().join("empty.jsonl");
            std::fs::write(&path, "").unwrap();
            path
        }),
    ];
    let by = [
        Breakdown::Kind,
        Breakdown::MessageType,
        Breakdown::Target,
        Breakdown::Window,
        Breakdown::Reason,
    ];
    for (name, path) in cases {
        let built = Reader::default().report(&[path], &by).unwrap();
        for (format, format_name) in FORMATS {
            insta::assert_snapshot!(
                format!("report_{name}_{format_name}"),
                stable(report_text(&built, format), dir.path())
            );
        }
        insta::assert_snapshot!(
            format!("report_{name}_html"),
            stable(report_html(&built, None), dir.path())
        );
    }
}

#[test]
fn report_html_with_a_base_journal() {
    let dir = tempfile::tempdir().unwrap();
    let base = journal(dir.path(), Fixture::OptIn);
    let new = journal(dir.path(), Fixture::Changed);
    let built = Reader::default()
        .report(&[&new], &[Breakdown::Kind])
        .unwrap();
    let found = Reader::default().diff(&[&base], &[&new]).unwrap();
    let page = report_html(&built, Some(&found));
    assert!(
        page.contains(
            "1 only in new, 1 only in base, 2 changed payloads, 10 changed decisions (0 now delivered), 9 unchanged"
        ),
        "{page}"
    );
    assert_eq!(page.matches("<tr class=\"flip\">").count(), 10);
    insta::assert_snapshot!("report_diff_html", stable(page, dir.path()));
}

#[test]
fn report_headline_reads_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal(dir.path(), Fixture::Backfill);
    let built = Reader::default().report(&[path], &[]).unwrap();
    let backfill = built.groups.iter().find(|g| g.kind == "backfill").unwrap();
    assert_eq!(
        backfill.headline,
        "backfill bf-test (5 windows, 2026-07-05 → 2026-07-10): would have sent 10 emails to 4 recipients, \
         5 webhooks to 1 endpoint, 5 file drops; delivered 0; failed 0; in doubt 0"
    );
    let live = built.groups.iter().find(|g| g.kind == "run").unwrap();
    assert_eq!(live.delivered, 5);
    assert_eq!(live.failed_attempts, 1);
    assert_eq!(live.failed, 0);
}

#[test]
fn diff_formats() {
    let dir = tempfile::tempdir().unwrap();
    let base = journal(dir.path(), Fixture::OptIn);
    let new = journal(dir.path(), Fixture::Changed);
    let found = Reader::default().diff(&[&base], &[&new]).unwrap();
    assert_eq!(
        (
            found.only_in_new.len(),
            found.only_in_base.len(),
            found.changed.len(),
            found.changed_decision.len(),
        ),
        (1, 1, 2, 10),
        "the base's emails were delivered by opt-in, the new journal's suppressed"
    );
    assert!(found.changed_decision.to_vec().unwrap().iter().all(|c| (
        c.base.decision.as_str(),
        c.new.decision.as_str()
    ) == (
        "delivered",
        "suppressed"
    )));
    for (format, format_name) in FORMATS {
        insta::assert_snapshot!(format!("diff_{format_name}"), diff_text(&found, format));
    }
    let same = Reader::default().diff(&[&base], &[&base]).unwrap();
    assert!(same.is_empty());
    insta::assert_snapshot!("diff_equal_table", diff_text(&same, Format::Table));
}

#[test]
fn plan_formats() {
    let start = Utc.with_ymd_and_hms(2026, 8, 1, 0, 0, 0).unwrap();
    let request = plan::Request::new(
        "daily_orders",
        Window::new(start, start + TimeDelta::days(3) + TimeDelta::hours(12)).unwrap(),
        TimeDelta::days(1),
    )
    .with_run_kind(RunKind::Scheduled)
    .with_now(start + TimeDelta::days(3) + TimeDelta::hours(14))
    .with_max_age(EffectKind::Email, TimeDelta::hours(12))
    .with_effects([EffectKind::Email, EffectKind::Webhook, EffectKind::Alert]);
    let built = request.build().unwrap();
    assert!(!built.aligned);
    assert_eq!(built.windows.len(), 4);
    for (format, format_name) in FORMATS {
        insta::assert_snapshot!(format!("plan_{format_name}"), built.render(format));
    }
}

#[test]
fn plan_of_instants() {
    // Airflow 3's default cron timetable: every run is the instant it was due.
    let start = Utc.with_ymd_and_hms(2026, 11, 28, 0, 0, 0).unwrap();
    let request = plan::Request::new(
        "daily_orders",
        Window::new(start, start + TimeDelta::days(4)).unwrap(),
        TimeDelta::days(1),
    )
    .with_instants(true)
    .with_run_kind(RunKind::Scheduled)
    .with_now(start + TimeDelta::days(3) + TimeDelta::hours(2))
    .with_effects([EffectKind::Email, EffectKind::Alert]);
    let built = request.build().unwrap();
    assert_eq!(built.windows.len(), 4);
    assert!(built.windows.iter().all(|w| w.start == w.end));
    // Only the latest tick (two hours ago) is current for email; alerts (1 h) are stale.
    assert_eq!(
        built.deliver_counts,
        [("email".to_owned(), 1), ("alert".to_owned(), 0)]
    );
    insta::assert_snapshot!("plan_instants_table", built.render(Format::Table));
}
