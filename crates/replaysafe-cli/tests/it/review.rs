//! Review gates and hardened input and output of `report` and `diff`, through the binary:
//! effects in doubt, `--fail-on`, decision flips, escaping, and lines that cannot be read.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use chrono::{TimeZone, Utc};
use replaysafe_core::journal::JournalDecision;

use crate::support::{LINE, attempts_journal, record, write};

fn replaysafe() -> Command {
    let mut command = Command::cargo_bin("replaysafe").unwrap();
    for (key, _) in std::env::vars() {
        if key.starts_with("REPLAYSAFE_") || key.starts_with("AIRFLOW_CTX_") {
            command.env_remove(key);
        }
    }
    command
}

#[test]
fn report_prints_effects_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let path = attempts_journal(dir.path());
    let output = replaysafe().arg("report").arg(&path).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("in doubt: 3 effects whose delivery began and no outcome is recorded"),
        "{stdout}"
    );
    for key in ["b-cut-retry", "e-cut-then-failed", "g-same-run-retry"] {
        assert!(
            stdout.contains(&format!("https://partner.example/hooks/{key}")),
            "{stdout}"
        );
    }
}

#[test]
fn fail_on_exits_one_after_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let attempts = attempts_journal(dir.path());
    let suppressed = dir.path().join("suppressed.jsonl");
    write(
        &suppressed,
        &[record("f", "backfill__1", JournalDecision::Suppressed, 0)],
    );
    // (journal, --fail-on values, exit code, what stderr must say)
    let cases: [(&Path, &[&str], i32, &str); 6] = [
        (&attempts, &["in-doubt"], 1, "the journals hold 3 in doubt"),
        (&attempts, &["failed"], 1, "the journals hold 1 failed"),
        (
            &attempts,
            &["delivered", "failed", "in-doubt"],
            1,
            "2 delivered, 1 failed, 3 in doubt",
        ),
        (&attempts, &[], 0, ""),
        (&suppressed, &["delivered", "failed", "in-doubt"], 0, ""),
        (&suppressed, &["delivered"], 0, ""),
    ];
    for (journal, fail_on, code, expected) in cases {
        let mut command = replaysafe();
        command.arg("report");
        for value in fail_on {
            command.args(["--fail-on", value]);
        }
        let output = command.arg(journal).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{fail_on:?}: {stderr}");
        assert!(stderr.contains(expected), "{fail_on:?}: {stderr}");
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("in doubt"),
            "the report is printed first"
        );
    }
    let help = replaysafe().args(["report", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--fail-on"), "{help}");
    assert!(
        help.contains("1  the report was printed and the journals hold an effect --fail-on names"),
        "{help}"
    );
}

#[test]
fn diff_counts_a_decision_flip_as_a_difference() {
    let dir = tempfile::tempdir().unwrap();
    let dry_run = dir.path().join("dry-run.jsonl");
    let real = dir.path().join("real.jsonl");
    write(
        &dry_run,
        &[record("k1", "backfill__1", JournalDecision::Suppressed, 0)],
    );
    write(
        &real,
        &[
            record("k1", "backfill__1", JournalDecision::Attempting, 1),
            record("k1", "backfill__1", JournalDecision::Delivered, 1),
        ],
    );
    for (format, expected) in [
        ("table", "┆ suppressed ┆ delivered ┆"),
        ("markdown", "| suppressed | delivered |"),
        ("json", "\"changed_decision\": [\n    {"),
    ] {
        let output = replaysafe()
            .args(["diff", "--format", format])
            .arg(&dry_run)
            .arg(&real)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{format}: {stdout}");
        assert!(stdout.contains(expected), "{format}: {stdout}");
        if format != "json" {
            assert!(
                stdout.contains("0 changed payloads, 1 changed decisions, 0 unchanged"),
                "{stdout}"
            );
        }
    }
    replaysafe()
        .arg("diff")
        .arg(&real)
        .arg(&real)
        .assert()
        .code(0);
}

/// Bytes that would act on a terminal or a Markdown renderer if printed as they are.
const EVIL: &str = "evil\n| injected | row |\n\u{1b}[31mred\u{1b}]0;title\u{7}\r<img src=x>[link](http://x) \u{202e}";

fn evil_journals(dir: &Path) -> (PathBuf, PathBuf) {
    let mut bad = record("evil-key", EVIL, JournalDecision::Suppressed, 0);
    bad.effect.target = EVIL.to_owned();
    bad.effect.message_type = EVIL.to_owned();
    bad.backfill_id = None;
    bad.reasons = vec![EVIL.to_owned()];
    let base = dir.join("evil-base.jsonl");
    write(&base, std::slice::from_ref(&bad));
    let mut delivered = bad.clone();
    delivered.decision = JournalDecision::Delivered;
    delivered.attempt = 1;
    let mut attempting = bad.clone();
    attempting.decision = JournalDecision::Attempting;
    attempting.attempt = 1;
    let mut other = bad;
    other.effect.idempotency_key = "other".into();
    other.decision = JournalDecision::Attempting;
    other.attempt = 1;
    let new = dir.join("evil-new.jsonl");
    write(&new, &[attempting, delivered, other]);
    (base, new)
}

/// No control character but the newline ending each line, and no bidirectional override.
fn assert_printable(name: &str, text: &str) {
    for (number, line) in text.lines().enumerate() {
        assert!(
            !line
                .chars()
                .any(|c| c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
            "{name}: line {} carries a control character: {line:?}",
            number + 1
        );
    }
}

#[test]
fn report_and_diff_escape_what_they_print() {
    let dir = tempfile::tempdir().unwrap();
    let (base, new) = evil_journals(dir.path());
    for format in ["table", "markdown"] {
        let output = replaysafe()
            .args([
                "report",
                "--format",
                format,
                "--by",
                "target",
                "--by",
                "reason",
                "--by",
                "message-type",
            ])
            .arg(&base)
            .arg(&new)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        let stdout = String::from_utf8(output.stdout).unwrap();
        assert_printable(&format!("report {format}"), &stdout);
        let escaped = if format == "markdown" {
            "\\\\u{1b}\\[31mred"
        } else {
            "\\u{1b}[31mred"
        };
        assert!(stdout.contains(escaped), "{stdout}");
        assert!(stdout.contains("\\u{202e}"), "{stdout}");
        assert!(!stdout.contains("\n| injected"), "{stdout}");
        if format == "markdown" {
            // Each journal text stays in its cell: a row has as many unescaped pipes as the header.
            for line in stdout.lines().filter(|l| l.starts_with('|')) {
                let pipes = line.replace("\\|", "").matches('|').count();
                assert!(pipes == 5 || pipes == 9, "{pipes} cells: {line}");
            }
            assert!(
                stdout.contains("\\<img src=x\\>\\[link\\](http://x)"),
                "{stdout}"
            );
        }
        let output = replaysafe()
            .args(["diff", "--format", format])
            .arg(&base)
            .arg(&new)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        let stdout = String::from_utf8(output.stdout).unwrap();
        assert_printable(&format!("diff {format}"), &stdout);
        assert!(stdout.contains("1 changed decisions"), "{stdout}");
        assert!(stdout.contains(escaped), "{stdout}");
    }
    // JSON keeps the text exact: serde escapes it.
    let output = replaysafe()
        .args(["report", "--format", "json"])
        .arg(&new)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["in_doubt"][0]["target"], EVIL);
}

#[test]
fn skip_invalid_names_lines_that_are_not_utf8_or_too_long_and_memory_stays_flat() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    let valid = serde_json::to_string(&record("k", "r1", JournalDecision::Suppressed, 0)).unwrap();
    let mut bytes = Vec::new();
    bytes.extend_from_slice(valid.as_bytes());
    bytes.extend_from_slice(b"\n{\"v\":1,\"pipeline\":\"\xff\xfe\"}\n");
    bytes.extend_from_slice(valid.as_bytes());
    // Line 4: 48 MiB, far over the 1 MiB cap.
    bytes.extend(std::iter::once(b'\n').chain(std::iter::repeat_n(b'x', 48 << 20)));
    bytes.extend_from_slice(b"\n\n");
    bytes.extend_from_slice(valid.as_bytes());
    bytes.push(b'\n');
    std::fs::write(&path, bytes).unwrap();
    let shown = path.display().to_string();

    let output = replaysafe().arg("report").arg(&path).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{shown}:2: journal line is not valid UTF-8")),
        "{stderr}"
    );

    let output = replaysafe()
        .args(["report", "--skip-invalid", "--print-peak-memory"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!(
            "skipped 2 invalid lines: {shown}:2 (not UTF-8), {shown}:4 (longer than 1 MiB)"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("(1 window, 2026-08-05 → 2026-08-06)"),
        "the 3 valid lines are read: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let peak_kib: u64 = stderr
        .lines()
        .find_map(|line| line.strip_prefix("peak memory: "))
        .and_then(|kib| kib.trim_end_matches(" KiB").parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        peak_kib < 24 * 1024,
        "a 48 MiB line was held: peak {peak_kib} KiB"
    );

    // Without --skip-invalid, a long line is an error naming it.
    let long = dir.path().join("long.jsonl");
    let mut bytes = valid.clone().into_bytes();
    bytes.push(b'\n');
    bytes.extend(std::iter::repeat_n(b'{', (1 << 20) + 1));
    std::fs::write(&long, bytes).unwrap();
    let output = replaysafe().arg("report").arg(&long).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:2: journal line is longer than 1048576 bytes",
            long.display()
        )),
        "{stderr}"
    );
}

#[test]
fn version_zero_is_refused_even_when_skipping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zero.jsonl");
    std::fs::write(&path, LINE.replacen("\"v\":1", "\"v\":0", 1) + "\n").unwrap();
    for flags in [&[][..], &["--skip-invalid"][..]] {
        let output = replaysafe()
            .arg("report")
            .args(flags)
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(":1: journal schema version 0 is not a version this reader knows"),
            "{stderr}"
        );
    }
}

/// Markup, script, an attribute break-out, a comment, an entity, a terminal escape and a
/// bidirectional override: all of it must show on the page as text.
const HTML_EVIL: &str = "</td></tr></table><script>alert(1)</script><img src=x onerror=alert(2)>\" onmouseover=\"alert(3)' &amp; <!-- \u{1b}[31m \u{202e}";

/// The tags `report --format html` writes; any other `<` would be journal text let through.
const PAGE_TAGS: &[&str] = &[
    "!DOCTYPE", "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "code",
    "ul", "li", "div", "b", "span", "svg", "rect", "table", "thead", "tbody", "tfoot", "tr", "th",
    "td",
];

#[test]
fn report_html_shows_markup_from_every_field_as_text() {
    use JournalDecision::*;
    let dir = tempfile::tempdir().unwrap();
    let evil = |key: &str, decision: JournalDecision, attempt: u32| {
        let mut record = record(key, HTML_EVIL, decision, attempt);
        record.effect.kind = HTML_EVIL.to_owned();
        record.effect.message_type = HTML_EVIL.to_owned();
        record.effect.target = HTML_EVIL.to_owned();
        record.effect.idempotency_key = format!("{key}{HTML_EVIL}");
        record.effect.summary = Some(HTML_EVIL.to_owned());
        record.backfill_id = Some(HTML_EVIL.to_owned());
        record.reasons = vec![HTML_EVIL.to_owned()];
        if decision == Failed {
            record.error = Some(HTML_EVIL.to_owned());
        }
        record
    };
    let mut opt_in_delivery = evil("opt-in", Delivered, 1);
    let mut opt_in = replaysafe_core::journal::RecordOptIn::new(
        HTML_EVIL,
        HTML_EVIL,
        Utc.with_ymd_and_hms(2026, 8, 7, 0, 0, 0).unwrap(),
    );
    opt_in.kinds = vec![HTML_EVIL.to_owned()];
    opt_in.targets = Some(vec![HTML_EVIL.to_owned()]);
    opt_in.pipeline = Some(HTML_EVIL.to_owned());
    opt_in.backfill_id = Some(HTML_EVIL.to_owned());
    opt_in.signer = Some(HTML_EVIL.to_owned());
    opt_in.signer_fingerprint = Some(HTML_EVIL.to_owned());
    opt_in_delivery.opt_in = Some(opt_in);
    let mut instant = evil("suppressed", Suppressed, 0);
    instant.window.end = instant.window.start;
    let new = dir.path().join("new.jsonl");
    write(
        &new,
        &[
            evil("in-doubt", Attempting, 1),
            evil("in-doubt", Failed, 1),
            evil("in-doubt", Attempting, 2),
            evil("failed", Attempting, 1),
            evil("failed", Failed, 1),
            opt_in_delivery,
            instant.clone(),
        ],
    );
    let mut base_delivered = instant;
    base_delivered.decision = Delivered;
    let base = dir.path().join("base.jsonl");
    write(
        &base,
        &[base_delivered, evil("only-in-base", Suppressed, 0)],
    );
    let page_path = dir.path().join("page.html");
    let output = replaysafe()
        .args(["report", "--format", "html", "--base"])
        .arg(&base)
        .arg("-o")
        .arg(&page_path)
        .arg(&new)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.stdout.is_empty(), "-o writes the page to the file");
    let page = std::fs::read_to_string(&page_path).unwrap();

    for (index, _) in page.match_indices('<') {
        let rest = page[index + 1..].trim_start_matches('/');
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '!')
            .collect();
        assert!(
            PAGE_TAGS.contains(&name.as_str()),
            "journal text made a <{name}> tag: {}",
            &page[index..(index + 80).min(page.len())]
        );
    }
    assert!(
        !page.contains("\" onmouseover="),
        "an attribute was broken out of"
    );
    assert_printable("report html", &page);
    let shown = "&lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&quot; onmouseover=&quot;alert(3)' &amp;amp; &lt;!-- \\u{1b}[31m \\u{202e}";
    // kind (grid heading, cells, tables), target, message type, run, reasons are all shown.
    for (what, needle) in [
        (
            "headline",
            format!("<li data-group=\"backfill\">backfill {shown}"),
        ),
        (
            "grid column",
            format!("<th scope=\"col\" data-kind=\"{shown}\">{shown}</th>"),
        ),
        (
            "in-doubt key",
            format!("<td class=\"key\">in-doubt{shown}</td>"),
        ),
        (
            "failed key",
            format!("<td class=\"key\">failed{shown}</td>"),
        ),
        ("opt-in signer", format!("<td>{shown} ({shown})</td>")),
    ] {
        assert!(page.contains(&needle), "{what}: {needle}\n{page}");
    }
    // target, message type, reason and approver of the opt-in; last errors of both lists.
    assert!(
        page.matches(&format!("<td>{shown}</td>")).count() >= 12,
        "{page}"
    );
    assert!(
        page.contains("3 only in new, 1 only in base, 0 changed payloads, 1 changed decisions"),
        "{page}"
    );

    insta::assert_snapshot!(
        "report_html_escaping",
        page.replace(&dir.path().display().to_string(), "[dir]")
    );

    // A comparison is drawn only on the page; text formats point at `diff`.
    let output = replaysafe()
        .args(["report", "--base"])
        .arg(&base)
        .arg(&new)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--base: only --format html shows a comparison"),
        "{stderr}"
    );
}
