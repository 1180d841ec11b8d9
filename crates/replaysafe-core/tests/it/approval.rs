//! Every lifting rule of opt-in files, through the environment as a pipeline reads it:
//! wrong pipeline, wrong backfill, run-id pattern, expired, tampered byte, unsigned,
//! untrusted key, trusted key; and the journal records the scope of what lifted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use replaysafe_core::{
    ApproverKey, EffectKind, FixedClock, MemoryJournal, OptIn, Reason, ReplayContext,
};

use crate::support::at;

const NOW: (i32, u32, u32, u32) = (2026, 8, 6, 1);

fn now() -> DateTime<Utc> {
    at(NOW.0, NOW.1, NOW.2, NOW.3)
}

fn jane() -> ApproverKey {
    ApproverKey::from_seed("jane", [11; 32]).unwrap()
}

fn mallory() -> ApproverKey {
    ApproverKey::from_seed("mallory", [66; 32]).unwrap()
}

/// An opt-in for emails of `daily_orders`, backfill `bf-2026-07`, expiring in a day.
fn opt_in() -> OptIn {
    OptIn::new(
        "re-send corrected invoices",
        "jane@ops",
        now() + TimeDelta::days(1),
    )
    .unwrap()
    .for_kind(EffectKind::Email)
    .for_pipeline("daily_orders")
    .for_backfill("bf-2026-07")
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn trusted(&self) -> PathBuf {
        self.write("trusted", &jane().public_line())
    }
}

/// The context of a backfill run of `pipeline` in backfill `backfill_id`, with the opt-in
/// file and, optionally, the trusted approvers, as `from_vars` reads them.
fn backfill(
    pipeline: &str,
    backfill_id: &str,
    opt_in: &Path,
    trusted: Option<&Path>,
) -> Result<ReplayContext, replaysafe_core::Error> {
    let mut vars = vec![
        ("REPLAYSAFE_PIPELINE", pipeline.to_owned()),
        (
            "REPLAYSAFE_RUN_ID",
            "backfill__2026-07-05T00:00:00Z".to_owned(),
        ),
        ("REPLAYSAFE_RUN_KIND", "backfill".to_owned()),
        ("REPLAYSAFE_BACKFILL_ID", backfill_id.to_owned()),
        ("REPLAYSAFE_WINDOW_START", "2026-07-05T00:00:00Z".to_owned()),
        ("REPLAYSAFE_WINDOW_END", "2026-07-06T00:00:00Z".to_owned()),
        ("REPLAYSAFE_OPT_IN", opt_in.display().to_string()),
    ];
    if let Some(trusted) = trusted {
        vars.push((
            "REPLAYSAFE_TRUSTED_APPROVERS",
            trusted.display().to_string(),
        ));
    }
    Ok(ReplayContext::from_vars(vars)?.with_clock(Arc::new(FixedClock::new(now()))))
}

fn decide(cx: &ReplayContext) -> replaysafe_core::Decision {
    cx.decide(&EffectKind::Email, "ana@shop.example")
}

#[test]
fn an_unsigned_opt_in_lifts_without_trusted_approvers_and_is_journaled_with_its_scope() {
    let files = Files::new();
    let path = files.write("opt-in.json", &opt_in().to_file_json().unwrap());
    let cx = backfill("daily_orders", "bf-2026-07", &path, None).unwrap();
    let decision = decide(&cx);
    assert!(decision.delivers(), "{:?}", decision.reasons());
    assert_eq!(
        decision.reasons(),
        &[Reason::ReplayRun, Reason::StaleWindow, Reason::OptIn]
    );
    // Another kind is not covered.
    assert!(cx.decide(&EffectKind::Webhook, "https://h/").suppresses());

    let record = journal_opt_in(&cx, &decision);
    assert_eq!(record["approved_by"], "jane@ops");
    assert_eq!(record["kinds"], serde_json::json!(["email"]));
    assert_eq!(record["targets"], serde_json::Value::Null);
    assert_eq!(record["pipeline"], "daily_orders");
    assert_eq!(record["backfill_id"], "bf-2026-07");
    assert_eq!(record["signer"], serde_json::Value::Null);
    assert_eq!(record["signer_fingerprint"], serde_json::Value::Null);
}

#[test]
fn a_trusted_signature_lifts_and_the_approver_journaled_is_the_keys_name() {
    let files = Files::new();
    let path = files.write(
        "opt-in.json",
        &opt_in()
            .signed_with(&jane())
            .unwrap()
            .to_file_json()
            .unwrap(),
    );
    let cx = backfill("daily_orders", "bf-2026-07", &path, Some(&files.trusted())).unwrap();
    let decision = decide(&cx);
    assert!(decision.delivers(), "{:?}", decision.reasons());
    assert_eq!(decision.opt_in().unwrap().signer(), Some("jane"));
    let record = journal_opt_in(&cx, &decision);
    assert_eq!(record["approved_by"], "jane");
    assert_eq!(record["signer"], "jane");
    assert_eq!(record["signer_fingerprint"], jane().fingerprint());
}

#[test]
fn another_pipeline_or_backfill_lifts_nothing() {
    let files = Files::new();
    let path = files.write(
        "opt-in.json",
        &opt_in()
            .signed_with(&jane())
            .unwrap()
            .to_file_json()
            .unwrap(),
    );
    let trusted = files.trusted();
    for (pipeline, backfill_id) in [
        ("weekly_orders", "bf-2026-07"),
        ("daily_orders", "bf-2026-08"),
    ] {
        let cx = backfill(pipeline, backfill_id, &path, Some(&trusted)).unwrap();
        let decision = decide(&cx);
        assert!(decision.suppresses(), "{pipeline} {backfill_id}");
        assert_eq!(
            decision.reasons(),
            &[
                Reason::ReplayRun,
                Reason::StaleWindow,
                Reason::OptInOutOfScope
            ]
        );
        // The refused opt-in is journaled, so a reviewer sees which backfill it named.
        assert_eq!(journal_opt_in(&cx, &decision)["backfill_id"], "bf-2026-07");
    }
    // A context without a backfill id is not in any backfill.
    let cx = ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id("r")
        .run_kind(replaysafe_core::RunKind::Backfill)
        .window(replaysafe_core::Window::instant(
            now() - TimeDelta::days(30),
        ))
        .opt_in(OptIn::read_file(&path).unwrap())
        .clock(Arc::new(FixedClock::new(now())))
        .build()
        .unwrap();
    assert!(decide(&cx).reasons().contains(&Reason::OptInOutOfScope));
}

#[test]
fn a_run_id_pattern_admits_only_matching_runs() {
    let files = Files::new();
    let opt_in = OptIn::new("resend", "jane@ops", now() + TimeDelta::days(1))
        .unwrap()
        .for_kind(EffectKind::Email)
        .for_pipeline("daily_orders")
        .for_run_ids("backfill__2026-07-*");
    let path = files.write("opt-in.json", &opt_in.to_file_json().unwrap());
    let cx = backfill("daily_orders", "any", &path, None).unwrap();
    assert!(decide(&cx).delivers());
    let other_run = cx.with_run_id(replaysafe_core::RunId::new("backfill__2026-08-01").unwrap());
    assert!(
        decide(&other_run)
            .reasons()
            .contains(&Reason::OptInOutOfScope)
    );
}

#[test]
fn an_expired_opt_in_lifts_nothing() {
    let files = Files::new();
    let expired = OptIn::new("resend", "jane@ops", now() - TimeDelta::seconds(1))
        .unwrap()
        .for_kind(EffectKind::Email)
        .for_pipeline("daily_orders")
        .for_backfill("bf-2026-07")
        .signed_with(&jane())
        .unwrap();
    let path = files.write("opt-in.json", &expired.to_file_json().unwrap());
    let cx = backfill("daily_orders", "bf-2026-07", &path, Some(&files.trusted())).unwrap();
    let decision = decide(&cx);
    assert!(decision.suppresses());
    assert_eq!(decision.reasons().last(), Some(&Reason::OptInExpired));
}

#[test]
fn a_tampered_byte_lifts_nothing_with_or_without_trusted_approvers() {
    let files = Files::new();
    let text = opt_in()
        .signed_with(&jane())
        .unwrap()
        .to_file_json()
        .unwrap();
    // One byte: the backfill id the approver signed for becomes another.
    let tampered = text.replacen("bf-2026-07", "bf-2026-08", 1);
    assert_eq!(
        text.bytes()
            .zip(tampered.bytes())
            .filter(|(a, b)| a != b)
            .count(),
        1
    );
    let path = files.write("opt-in.json", &tampered);
    for trusted in [None, Some(files.trusted())] {
        let cx = backfill("daily_orders", "bf-2026-08", &path, trusted.as_deref()).unwrap();
        let decision = decide(&cx);
        assert!(decision.suppresses());
        assert_eq!(decision.reasons().last(), Some(&Reason::OptInBadSignature));
        assert_eq!(decision.opt_in().unwrap().signer(), None);
    }
}

#[test]
fn an_untrusted_key_or_no_signature_lifts_nothing_when_approvers_are_trusted() {
    let files = Files::new();
    let trusted = files.trusted();
    let by_mallory = files.write(
        "mallory.json",
        &opt_in()
            .signed_with(&mallory())
            .unwrap()
            .to_file_json()
            .unwrap(),
    );
    let unsigned = files.write("unsigned.json", &opt_in().to_file_json().unwrap());
    for (path, reason) in [
        (&by_mallory, Reason::OptInUntrusted),
        (&unsigned, Reason::OptInUnsigned),
    ] {
        let cx = backfill("daily_orders", "bf-2026-07", path, Some(&trusted)).unwrap();
        let decision = decide(&cx);
        assert!(decision.suppresses(), "{reason}");
        assert_eq!(decision.reasons().last(), Some(&reason));
        // Without trusted approvers, the same files lift.
        let cx = backfill("daily_orders", "bf-2026-07", path, None).unwrap();
        assert!(decide(&cx).delivers(), "{reason}");
    }
    // An opt-in made in code is unsigned too: trusted approvers refuse it.
    let cx = backfill("daily_orders", "bf-2026-07", &by_mallory, Some(&trusted))
        .unwrap()
        .with_opt_in(opt_in());
    assert_eq!(decide(&cx).reasons().last(), Some(&Reason::OptInUntrusted));
}

#[test]
fn a_valid_opt_in_wins_over_a_refused_one() {
    let files = Files::new();
    let trusted = files.trusted();
    let by_mallory = files.write(
        "mallory.json",
        &opt_in()
            .signed_with(&mallory())
            .unwrap()
            .to_file_json()
            .unwrap(),
    );
    let cx = backfill("daily_orders", "bf-2026-07", &by_mallory, Some(&trusted))
        .unwrap()
        .with_opt_in(opt_in().signed_with(&jane()).unwrap());
    let decision = decide(&cx);
    assert!(decision.delivers());
    assert_eq!(decision.opt_in().unwrap().signer(), Some("jane"));
}

#[test]
fn malformed_files_are_errors_that_name_the_file() {
    let files = Files::new();
    let good = files.write("opt-in.json", &opt_in().to_file_json().unwrap());
    let broken = files.write("broken.json", "{\"format\": ");
    let bad_trust = files.write("trusted-bad", "jane not-a-key\n");
    let missing = files.dir.path().join("absent.json");
    for (opt_in, trusted, names) in [
        (&broken, None, "broken.json"),
        (&missing, None, "absent.json"),
        (&good, Some(&bad_trust), "trusted-bad"),
    ] {
        let error = backfill(
            "daily_orders",
            "bf-2026-07",
            opt_in,
            trusted.map(PathBuf::as_path),
        )
        .unwrap_err();
        let chain = replaysafe_core::error_chain(&error);
        assert!(chain.contains(names), "{chain}");
    }
}

/// The `opt_in` object of the journal line the decision writes.
fn journal_opt_in(cx: &ReplayContext, decision: &replaysafe_core::Decision) -> serde_json::Value {
    use replaysafe_core::adapter::{EffectRecord, Step};
    use replaysafe_core::{EffectDescription, IdempotencyKey, RedactionPolicy};
    let description =
        EffectDescription::new(EffectKind::Email, "invoice", "ana@shop.example").unwrap();
    let key = IdempotencyKey::derive(
        cx.pipeline(),
        description.kind(),
        "invoice",
        description.target(),
        cx.window(),
    );
    let journal = MemoryJournal::new();
    EffectRecord::new(cx, &description, &key, decision, RedactionPolicy::default())
        .write(&journal, Step::Suppressed)
        .unwrap();
    let record = &journal.records()[0];
    let mut line = Vec::new();
    record.entry().write_json(&mut line);
    let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
    value["opt_in"].clone()
}

#[test]
fn the_documented_example_file_reads_and_its_signature_verifies() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/opt-in-file.md"),
    )
    .unwrap();
    let example = page
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    let opt_in = OptIn::from_file_json(example).unwrap();
    assert!(opt_in.is_signed() && !opt_in.has_bad_signature());
    assert_eq!(opt_in.backfill_id(), Some("bf-2026-07"));
    // One changed byte of the documented file breaks its signature.
    let tampered = OptIn::from_file_json(&example.replacen("July's", "June's", 1)).unwrap();
    assert!(tampered.has_bad_signature());
}

#[test]
fn an_opt_ins_targets_are_journaled_redacted_as_the_effects_target_is() {
    use replaysafe_core::adapter::{EffectRecord, Step};
    use replaysafe_core::{EffectDescription, IdempotencyKey, RedactionPolicy, TargetRedaction};
    let files = Files::new();
    let path = files.write(
        "opt-in.json",
        &opt_in()
            .for_target("ana@shop.example")
            .to_file_json()
            .unwrap(),
    );
    let cx = backfill("daily_orders", "bf-2026-07", &path, None).unwrap();
    let decision = decide(&cx);
    assert!(decision.delivers());
    let description =
        EffectDescription::new(EffectKind::Email, "invoice", "ana@shop.example").unwrap();
    let key = IdempotencyKey::derive(
        cx.pipeline(),
        description.kind(),
        "invoice",
        description.target(),
        cx.window(),
    );
    let journal = MemoryJournal::new();
    let domain_only = RedactionPolicy::new(TargetRedaction::DomainOnly);
    EffectRecord::new(&cx, &description, &key, &decision, domain_only)
        .write(&journal, Step::Delivered(1))
        .unwrap();
    let mut line = Vec::new();
    journal.records()[0].entry().write_json(&mut line);
    let line = String::from_utf8(line).unwrap();
    assert!(!line.contains("ana@"), "{line}");
    assert!(line.contains("\"targets\":[\"*@shop.example\"]"), "{line}");
}

#[test]
fn a_secret_key_file_open_to_group_or_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let files = Files::new();
    let path = files.write("jane.key", &jane().to_secret_file());
    for mode in [0o644, 0o640, 0o604, 0o620, 0o660, 0o777] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let error = ApproverKey::read_file(&path).unwrap_err();
        assert!(
            matches!(error, replaysafe_core::Error::NotPrivate { .. }),
            "{mode:o}: {error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&path.display().to_string())
                && text.contains(&format!("chmod 600 {}", path.display())),
            "{text}"
        );
        // Never the secret.
        assert!(!text.contains(jane().to_secret_file().split(' ').nth(2).unwrap().trim()));
    }
    for mode in [0o600, 0o400] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(
            ApproverKey::read_file(&path).unwrap().public_key(),
            jane().public_key()
        );
    }
}

#[test]
fn a_leap_second_expiry_and_hidden_characters_in_a_file_are_refused() {
    let text = opt_in().to_file_json().unwrap();
    let expiry = replaysafe_core::rfc3339(now() + TimeDelta::days(1));
    let leap = text.replace(&expiry, "2026-08-06T23:59:60Z");
    assert_ne!(leap, text);
    let error = OptIn::from_file_json(&leap).unwrap_err().to_string();
    assert!(
        error.contains("opt_in.expires_at") && error.contains("leap second"),
        "{error}"
    );
    for (from, to, field) in [
        ("daily_orders", "daily_\u{202E}orders", "opt_in.pipeline"),
        ("bf-2026-07", "bf-\u{2066}2026-07", "opt_in.backfill_id"),
    ] {
        let error = OptIn::from_file_json(&text.replace(from, to))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(field) && error.contains("bidirectional"),
            "{error}"
        );
    }
}
