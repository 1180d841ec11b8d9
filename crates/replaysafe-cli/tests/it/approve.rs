//! `replaysafe approve` and `approve keygen` through the real binary, and every lifting
//! rule of the files they write through `send webhook` to a local receiver: wrong
//! pipeline, wrong backfill, expired, tampered byte, unsigned, untrusted key, trusted key.

use std::path::{Path, PathBuf};

use chrono::{TimeDelta, Utc};
use replaysafe_core::journal::{JournalDecision, JournalReader, JournalRecord};
use replaysafe_core::{ApproverKey, EffectKind, OptIn};

use crate::send::{clean_command, receiver};

fn keygen(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let output = clean_command()
        .args(["approve", "keygen", "--name", name, "--out"])
        .arg(dir)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    )
}

/// `replaysafe approve` for webhooks of `daily_orders` in backfill `bf-2026-07`.
fn approve(out: &Path, key: Option<&Path>, extra: &[&str]) -> String {
    let mut command = clean_command();
    command
        .args([
            "approve",
            "--pipeline",
            "daily_orders",
            "--backfill-id",
            "bf-2026-07",
        ])
        .args([
            "--kind",
            "webhook",
            "--reason",
            "partner lost July's events",
        ])
        .args(["--approved-by", "jane@ops", "--expires", "1d", "--out"])
        .arg(out)
        .args(extra);
    if let Some(key) = key {
        command.arg("--key").arg(key);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn keygen_writes_a_private_key_and_a_public_line_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let (secret, public) = keygen(dir.path(), "jane");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let line = std::fs::read_to_string(&public).unwrap();
    let key = ApproverKey::read_file(&secret).unwrap();
    assert_eq!(line, format!("jane {}\n", key.public_key()));
    let before = std::fs::read(&secret).unwrap();
    let again = clean_command()
        .args(["approve", "keygen", "--name", "jane", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(std::fs::read(&secret).unwrap(), before);
    // The secret never reaches the terminal.
    let secret_text = std::fs::read_to_string(&secret).unwrap();
    let seed = secret_text.split_whitespace().last().unwrap();
    assert!(!String::from_utf8_lossy(&again.stderr).contains(seed));
}

#[test]
fn approve_shows_the_plan_and_writes_a_signed_file() {
    let dir = tempfile::tempdir().unwrap();
    let (secret, _) = keygen(dir.path(), "jane");
    let out = dir.path().join("approval.json");
    let shown = approve(
        &out,
        Some(&secret),
        &[
            "--start",
            "2026-07-01T00:00:00Z",
            "--end",
            "2026-07-04T00:00:00Z",
            "--every",
            "1d",
        ],
    );
    assert!(shown.contains("backfill id  bf-2026-07"), "{shown}");
    assert!(shown.contains("2026-07-03 → 2026-07-04"), "{shown}");
    assert!(
        shown.contains("suppress (replay_run, stale_window)"),
        "{shown}"
    );
    assert!(
        shown.contains("with it, 3 window-kind pair(s) may deliver"),
        "{shown}"
    );
    let opt_in = OptIn::read_file(&out).unwrap();
    assert!(opt_in.is_signed() && !opt_in.has_bad_signature());
    assert_eq!(opt_in.backfill_id(), Some("bf-2026-07"));
    assert_eq!(
        opt_in.signer_fingerprint(),
        Some(ApproverKey::read_file(&secret).unwrap().fingerprint())
    );
    // Bad input is exit 2 naming the flag.
    let output = clean_command()
        .args([
            "approve",
            "--pipeline",
            "p",
            "--backfill-id",
            "b",
            "--kind",
            "email",
        ])
        .args([
            "--reason",
            "r",
            "--approved-by",
            "a",
            "--expires",
            "2020-01-01T00:00:00Z",
        ])
        .arg("--out")
        .arg(dir.path().join("x.json"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--expires"));
    // A file that would not read back is never written.
    let blank_target = dir.path().join("blank.json");
    let output = clean_command()
        .args([
            "approve",
            "--pipeline",
            "p",
            "--backfill-id",
            "b",
            "--kind",
            "email",
        ])
        .args([
            "--target",
            " ",
            "--reason",
            "r",
            "--approved-by",
            "a",
            "--expires",
            "1d",
        ])
        .arg("--out")
        .arg(&blank_target)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("opt_in.targets"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!blank_target.exists());
}

/// How one `send` is given its opt-in.
enum Given<'a> {
    Env(&'a Path),
    Flag(&'a Path),
}

/// Sends one webhook from a backfill run of `pipeline` in `backfill_id`; returns the exit
/// code, stderr and the journal's records.
fn send(
    address: std::net::SocketAddr,
    dir: &Path,
    name: &str,
    (pipeline, backfill_id): (&str, &str),
    given: Given<'_>,
    trusted: Option<&Path>,
) -> (Option<i32>, String, Vec<JournalRecord>) {
    let journal = dir.join(format!("{name}.jsonl"));
    let start = Utc::now() - TimeDelta::days(30);
    let mut command = clean_command();
    command
        .args([
            "send",
            "webhook",
            "--url",
            &format!("http://{address}/hooks/orders"),
        ])
        .args([
            "--event-type",
            "orders.published",
            "--data",
            "{\"orders\":1}",
        ])
        .args(["--allow-host", "127.0.0.1"])
        .env("REPLAYSAFE_PIPELINE", pipeline)
        .env("REPLAYSAFE_RUN_ID", "backfill__2026-07-05T00:00:00Z")
        .env("REPLAYSAFE_RUN_KIND", "backfill")
        .env("REPLAYSAFE_BACKFILL_ID", backfill_id)
        .env("REPLAYSAFE_WINDOW_START", replaysafe_core::rfc3339(start))
        .env(
            "REPLAYSAFE_WINDOW_END",
            replaysafe_core::rfc3339(start + TimeDelta::days(1)),
        )
        .env("REPLAYSAFE_JOURNAL", &journal);
    match given {
        Given::Env(path) => command.env("REPLAYSAFE_OPT_IN", path),
        Given::Flag(path) => command.arg("--opt-in").arg(path),
    };
    if let Some(trusted) = trusted {
        command.env("REPLAYSAFE_TRUSTED_APPROVERS", trusted);
    }
    let output = command.output().unwrap();
    let records = if journal.exists() {
        JournalReader::open(&journal)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    } else {
        Vec::new()
    };
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        records,
    )
}

#[test]
fn every_lifting_rule_holds_through_the_binary() {
    let (address, received) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (jane_key, jane_pub) = keygen(dir, "jane");
    let (mallory_key, _) = keygen(dir, "mallory");
    let trusted = &jane_pub;

    let by_jane = dir.join("by-jane.json");
    approve(&by_jane, Some(&jane_key), &[]);
    let by_mallory = dir.join("by-mallory.json");
    approve(&by_mallory, Some(&mallory_key), &[]);
    let unsigned = dir.join("unsigned.json");
    approve(&unsigned, None, &[]);
    let tampered = dir.join("tampered.json");
    let text = std::fs::read_to_string(&by_jane).unwrap();
    // One byte of the reason changes: July becomes Jule.
    std::fs::write(&tampered, text.replacen("July's", "Jule's", 1)).unwrap();
    let expired = dir.join("expired.json");
    let opt_in = OptIn::new("late", "jane@ops", Utc::now() - TimeDelta::minutes(1))
        .unwrap()
        .for_kind(EffectKind::Webhook)
        .for_pipeline("daily_orders")
        .for_backfill("bf-2026-07")
        .signed_with(&ApproverKey::read_file(&jane_key).unwrap())
        .unwrap();
    std::fs::write(&expired, opt_in.to_file_json().unwrap()).unwrap();

    let ours = ("daily_orders", "bf-2026-07");
    let refused = [
        (
            "wrong-pipeline",
            ("weekly_orders", "bf-2026-07"),
            Given::Env(&by_jane),
            "opt_in_out_of_scope",
        ),
        (
            "wrong-backfill",
            ("daily_orders", "bf-2026-08"),
            Given::Flag(&by_jane),
            "opt_in_out_of_scope",
        ),
        ("expired", ours, Given::Flag(&expired), "opt_in_expired"),
        (
            "tampered",
            ours,
            Given::Env(&tampered),
            "opt_in_bad_signature",
        ),
        (
            "untrusted",
            ours,
            Given::Flag(&by_mallory),
            "opt_in_untrusted",
        ),
        ("unsigned", ours, Given::Env(&unsigned), "opt_in_unsigned"),
    ];
    for (name, run, given, reason) in refused {
        let (code, stderr, records) = send(address, dir, name, run, given, Some(trusted));
        assert_eq!(code, Some(0), "{name}: {stderr}");
        assert!(stderr.contains("suppressed"), "{name}: {stderr}");
        assert_eq!(records.len(), 1, "{name}");
        assert_eq!(records[0].decision, JournalDecision::Suppressed, "{name}");
        assert_eq!(
            records[0].reasons.last().map(String::as_str),
            Some(reason),
            "{name}"
        );
        assert!(
            records[0].opt_in.is_some(),
            "{name}: the refused opt-in is journaled"
        );
        assert_eq!(
            received.lock().unwrap().len(),
            0,
            "{name}: nothing may arrive"
        );
    }

    // The positive control: the file signed by a trusted key lifts, by flag and by env.
    for (name, given) in [
        ("trusted-flag", Given::Flag(&by_jane)),
        ("trusted-env", Given::Env(&by_jane)),
    ] {
        let before = received.lock().unwrap().len();
        let (code, stderr, records) = send(address, dir, name, ours, given, Some(trusted));
        assert_eq!(code, Some(0), "{name}: {stderr}");
        assert!(stderr.contains("delivered"), "{name}: {stderr}");
        assert_eq!(received.lock().unwrap().len(), before + 1, "{name}");
        let delivered = records
            .iter()
            .find(|r| r.decision == JournalDecision::Delivered)
            .unwrap();
        assert_eq!(delivered.reasons.last().map(String::as_str), Some("opt_in"));
        let opt_in = delivered.opt_in.as_ref().unwrap();
        assert_eq!(opt_in.approved_by, "jane");
        assert_eq!(opt_in.signer.as_deref(), Some("jane"));
        assert_eq!(opt_in.kinds, ["webhook"]);
        assert_eq!(opt_in.backfill_id.as_deref(), Some("bf-2026-07"));
        assert_eq!(
            opt_in.signer_fingerprint,
            Some(ApproverKey::read_file(&jane_key).unwrap().fingerprint())
        );
    }

    // Without trusted approvers, an unsigned file lifts (and says it is unsigned in the report).
    let before = received.lock().unwrap().len();
    let (code, stderr, _) = send(address, dir, "open", ours, Given::Env(&unsigned), None);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(received.lock().unwrap().len(), before + 1);

    // report lists each opt-in delivery with its scope and signer.
    let output = clean_command()
        .arg("report")
        .arg(dir.join("trusted-flag.jsonl"))
        .arg(dir.join("open.jsonl"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert!(report.contains("delivered by opt-in"), "{report}");
    assert!(
        report.contains("webhook to every target; pipeline daily_orders; backfill bf-2026-07"),
        "{report}"
    );
    assert!(report.contains("jane (SHA256:"), "{report}");
    assert!(report.contains("unsigned"), "{report}");
}

#[test]
fn malformed_opt_in_or_trusted_files_are_bad_input() {
    let (address, received) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let good = dir.join("good.json");
    approve(&good, None, &[]);
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{\"format\":").unwrap();
    let bad_trust = dir.join("trusted");
    std::fs::write(&bad_trust, "jane\n").unwrap();
    let ours = ("daily_orders", "bf-2026-07");
    for (name, given, trusted, names) in [
        ("broken-env", Given::Env(&broken), None, "broken.json"),
        ("broken-flag", Given::Flag(&broken), None, "broken.json"),
        (
            "bad-trust",
            Given::Env(&good),
            Some(bad_trust.as_path()),
            "trusted",
        ),
    ] {
        let (code, stderr, records) = send(address, dir, name, ours, given, trusted);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stderr.contains(names), "{name}: {stderr}");
        assert!(records.is_empty(), "{name}");
    }
    assert_eq!(received.lock().unwrap().len(), 0);
}

#[test]
fn context_shows_the_opt_ins_and_whether_they_lift() {
    let dir = tempfile::tempdir().unwrap();
    let (jane_key, jane_pub) = keygen(dir.path(), "jane");
    let (_, joe_pub) = keygen(dir.path(), "joe");
    let approval = dir.path().join("approval.json");
    approve(&approval, Some(&jane_key), &[]);
    let start = Utc::now() - TimeDelta::days(30);
    let context = |trusted: &Path| {
        let output = clean_command()
            .arg("context")
            .env("REPLAYSAFE_PIPELINE", "daily_orders")
            .env("REPLAYSAFE_RUN_ID", "backfill__1")
            .env("REPLAYSAFE_RUN_KIND", "backfill")
            .env("REPLAYSAFE_BACKFILL_ID", "bf-2026-07")
            .env("REPLAYSAFE_WINDOW_START", replaysafe_core::rfc3339(start))
            .env(
                "REPLAYSAFE_WINDOW_END",
                replaysafe_core::rfc3339(start + TimeDelta::days(1)),
            )
            .env("REPLAYSAFE_OPT_IN", &approval)
            .env("REPLAYSAFE_TRUSTED_APPROVERS", trusted)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        String::from_utf8(output.stdout).unwrap()
    };
    let shown = context(&jane_pub);
    assert!(
        shown.contains(
            "opt-in       webhook to every target; pipeline daily_orders; backfill bf-2026-07"
        ),
        "{shown}"
    );
    assert!(shown.contains("webhook    deliver"), "{shown}");
    assert!(shown.contains("email      suppress"), "{shown}");
    let shown = context(&joe_pub);
    assert!(shown.contains("webhook    suppress"), "{shown}");
    assert!(shown.contains("opt_in_untrusted"), "{shown}");
}
