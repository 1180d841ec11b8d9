//! The real binary: exit codes, bad input, and the context command.

use assert_cmd::Command;

use crate::support::{Fixture, journal};

fn replaysafe() -> Command {
    let mut command = Command::cargo_bin("replaysafe").unwrap();
    for (key, _) in std::env::vars() {
        if key.starts_with("REPLAYSAFE_") || key.starts_with("AIRFLOW_CTX_") {
            command.env_remove(key);
        }
    }
    command
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn diff_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let base = journal(dir.path(), Fixture::OptIn);
    let changed = journal(dir.path(), Fixture::Changed);
    replaysafe()
        .args(["diff"])
        .arg(&base)
        .arg(&base)
        .assert()
        .code(0);
    let output = replaysafe()
        .args(["diff"])
        .arg(&base)
        .arg(&changed)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .contains("1 only in new, 1 only in base, 2 changed payloads")
    );
    let output = replaysafe()
        .args(["diff"])
        .arg(&base)
        .arg(dir.path().join("missing.jsonl"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("missing.jsonl"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn malformed_lines_name_file_and_line_or_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(journal(dir.path(), Fixture::OptIn)).unwrap();
    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(3, "{\"v\":1,\"oops\":");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();

    let output = replaysafe().arg("report").arg(&bad).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("bad.jsonl:4: malformed journal record"),
        "{}",
        stderr(&output)
    );

    let output = replaysafe()
        .args(["report", "--skip-invalid"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&format!(
            "skipped 1 invalid line: {}:4 (malformed record)",
            bad.display()
        )),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(journal(dir.path(), Fixture::OptIn)).unwrap();
    let newer = dir.path().join("newer.jsonl");
    std::fs::write(&newer, good.replacen("{\"v\":1,", "{\"v\":2,", 1)).unwrap();
    for flags in [&[][..], &["--skip-invalid"][..]] {
        let output = replaysafe()
            .arg("report")
            .args(flags)
            .arg(&newer)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        assert!(
            stderr(&output).contains("schema version 2 is newer"),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn bad_flags_name_the_flag_and_value() {
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "plan",
                "--pipeline",
                "p",
                "--start",
                "yesterday",
                "--end",
                "2026-08-02T00:00:00Z",
                "--every",
                "1d",
            ],
            "--start",
        ),
        (
            &[
                "plan",
                "--pipeline",
                "p",
                "--start",
                "2026-08-01T00:00:00Z",
                "--end",
                "2026-08-02T00:00:00Z",
                "--every",
                "1 day",
            ],
            "--every",
        ),
        (
            &[
                "plan",
                "--pipeline",
                "p",
                "--start",
                "2026-08-01T00:00:00Z",
                "--end",
                "2026-08-02T00:00:00Z",
                "--every",
                "1d",
                "--max-age",
                "email",
            ],
            "--max-age",
        ),
        (&["report", "--frobnicate", "x.jsonl"], "--frobnicate"),
    ];
    for (args, flag) in cases {
        let output = replaysafe().args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&output).contains(flag),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let output = replaysafe()
        .args([
            "plan",
            "--pipeline",
            "p",
            "--start",
            "2026-08-02T00:00:00Z",
            "--end",
            "2026-08-01T00:00:00Z",
            "--every",
            "1d",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--start and --end"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn plan_warns_when_the_range_is_not_aligned() {
    let output = replaysafe()
        .args([
            "plan",
            "--pipeline",
            "p",
            "--start",
            "2026-08-01T00:00:00Z",
            "--end",
            "2026-08-03T06:00:00Z",
        ])
        .args(["--every", "1d", "--now", "2026-09-01T00:00:00Z"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(
        stderr(&output).contains("the last window is short"),
        "{}",
        stderr(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("over 3 windows of 1d"), "{stdout}");
    assert!(
        stdout.contains("suppress (replay_run, stale_window)"),
        "{stdout}"
    );
}

/// Every environment shape the SDK's own tests use, and what `context` prints for it.
#[test]
fn context_resolves_every_environment_shape() {
    let window = [
        ("REPLAYSAFE_WINDOW_START", "2026-08-05T00:00:00Z"),
        ("REPLAYSAFE_WINDOW_END", "2026-08-06T00:00:00Z"),
    ];
    let airflow_window = [
        (
            "AIRFLOW_CTX_DATA_INTERVAL_START",
            "2026-08-05T00:00:00+00:00",
        ),
        ("AIRFLOW_CTX_DATA_INTERVAL_END", "2026-08-06T00:00:00+00:00"),
    ];
    type Variables<'a> = Vec<(&'a str, &'a str)>;
    let cases: Vec<(Variables, &str, &str)> = vec![
        (
            [
                &[
                    ("REPLAYSAFE_PIPELINE", "p"),
                    ("REPLAYSAFE_RUN_ID", "r"),
                    ("REPLAYSAFE_RUN_KIND", "backfill"),
                ][..],
                &window[..],
            ]
            .concat(),
            "\"run_kind\": \"backfill\"",
            "replay_run",
        ),
        (
            [
                &[
                    ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
                    (
                        "AIRFLOW_CTX_DAG_RUN_ID",
                        "backfill__2026-08-05T00:00:00+00:00",
                    ),
                ][..],
                &airflow_window[..],
            ]
            .concat(),
            "\"run_kind\": \"backfill\"",
            "replay_run",
        ),
        (
            [
                &[
                    ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
                    ("AIRFLOW_CTX_DAG_RUN_ID", "custom__2026-08-05"),
                ][..],
                &airflow_window[..],
            ]
            .concat(),
            "\"run_kind\": \"unknown\"",
            "unknown_context",
        ),
        (
            [
                &[
                    ("AIRFLOW_CTX_DAG_ID", "d"),
                    ("AIRFLOW_CTX_DAG_RUN_ID", "scheduled__x"),
                    ("AIRFLOW_CTX_RUN_TYPE", "backfill"),
                ][..],
                &airflow_window[..],
            ]
            .concat(),
            "AIRFLOW_CTX_RUN_TYPE says backfill",
            "conflicting_context",
        ),
        (
            [
                &[
                    ("AIRFLOW_CTX_DAG_ID", "d"),
                    ("AIRFLOW_CTX_DAG_RUN_ID", "scheduled__x"),
                    ("AIRFLOW_CTX_TRY_NUMBER", "2"),
                ][..],
                &airflow_window[..],
            ]
            .concat(),
            "\"run_kind\": \"retry\"",
            "stale_window",
        ),
        (
            [
                &[
                    ("REPLAYSAFE_PIPELINE", "p"),
                    ("REPLAYSAFE_RUN_ID", "r"),
                    ("REPLAYSAFE_RUN_KIND", "manual"),
                    ("REPLAYSAFE_REPLAY", "true"),
                    ("REPLAYSAFE_MODE", "dry-run"),
                ][..],
                &window[..],
            ]
            .concat(),
            "\"mode\": \"dry-run\"",
            "dry_run",
        ),
    ];
    for (env, expected, reason) in cases {
        let output = replaysafe()
            .args(["context", "--json"])
            .envs(env.clone())
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{env:?}: {}",
            stderr(&output)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains(expected), "{env:?}: {stdout}");
        assert!(stdout.contains(reason), "{env:?}: {stdout}");
        assert!(
            !stdout.contains("\"decision\": \"deliver\""),
            "{env:?}: {stdout}"
        );
    }

    let output = replaysafe()
        .arg("context")
        .envs([
            ("REPLAYSAFE_PIPELINE", "p"),
            ("REPLAYSAFE_RUN_ID", "r"),
            ("REPLAYSAFE_WINDOW_START", "2026-08-05"),
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("REPLAYSAFE_WINDOW"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn context_delivers_for_a_current_scheduled_run() {
    let now = chrono::Utc::now();
    let start = replaysafe_core::rfc3339(now - chrono::TimeDelta::hours(2));
    let end = replaysafe_core::rfc3339(now - chrono::TimeDelta::minutes(30));
    let output = replaysafe()
        .arg("context")
        .envs([
            ("REPLAYSAFE_PIPELINE", "p"),
            ("REPLAYSAFE_RUN_ID", "scheduled__now"),
            ("REPLAYSAFE_RUN_KIND", "scheduled"),
            ("REPLAYSAFE_WINDOW_START", start.as_str()),
            ("REPLAYSAFE_WINDOW_END", end.as_str()),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("email      deliver"), "{stdout}");
}

#[test]
fn completions_are_generated() {
    let output = replaysafe().args(["completions", "bash"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("replaysafe"));
}

/// On a terminal, `report` draws a progress bar on stderr (`script` gives the binary a pty).
#[test]
fn report_draws_a_progress_bar_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal(dir.path(), Fixture::Backfill);
    let binary = assert_cmd::cargo::cargo_bin("replaysafe");
    let command = format!("{} report {} > /dev/null", binary.display(), path.display());
    let output = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .unwrap();
    let terminal = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{terminal}");
    assert!(
        terminal.contains("reading journals"),
        "no progress bar on the terminal: {terminal:?}"
    );
}
