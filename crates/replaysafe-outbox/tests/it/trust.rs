//! Trust at the boundary: a row's opt-in is an approval document the worker checks again,
//! against its own trusted approvers, whoever wrote the row; a dry run changes nothing.

use chrono::TimeDelta;
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{ApproverKey, EffectKind, OptIn, TrustedApprovers};
use replaysafe_outbox::{OperatorAction, OutboxStore, Status};
use replaysafe_test::contexts;

use crate::support::{Fixture, Note};

fn key(name: &str, seed: u8) -> ApproverKey {
    ApproverKey::from_seed(name, [seed; 32]).unwrap()
}

fn approval(pipeline: &str) -> OptIn {
    OptIn::new(
        "partner lost July (CHG-1)",
        "jane@ops",
        contexts::now() + TimeDelta::hours(4),
    )
    .unwrap()
    .for_kind(EffectKind::Webhook)
    .for_pipeline(pipeline)
    .for_backfill("bf-test")
}

/// A backfill's row, made pending with `document` as its opt-in by another process's SQL,
/// as a task in another language could write it.
fn forged_row(fx: &Fixture, document: Option<&str>) -> String {
    let staged = fx.stage(&fx.backfill(), &Note::new("daily_total", "41"));
    assert_eq!(staged.status, Status::Suppressed);
    fx.connection()
        .execute(
            "UPDATE replaysafe_outbox SET status = 'pending', next_attempt_at_ms = 0, opt_in = ?1 \
             WHERE idempotency_key = ?2",
            (document, &staged.key),
        )
        .unwrap();
    staged.key
}

async fn deliver_with_trust(fx: &Fixture, trusted: &TrustedApprovers) -> (u64, u64) {
    let stats = fx
        .worker()
        .trusted_approvers(trusted.clone())
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    (stats.delivered, stats.suppressed)
}

#[tokio::test]
async fn under_a_trust_list_a_rows_opt_in_must_be_signed_by_a_trusted_approver() {
    let jane = key("jane", 1);
    let trusted = TrustedApprovers::parse(&jane.public_line()).unwrap();
    let cases = [
        ("unsigned", approval("daily_orders"), "opt_in_unsigned"),
        (
            "untrusted",
            approval("daily_orders")
                .signed_with(&key("mallory", 2))
                .unwrap(),
            "opt_in_untrusted",
        ),
        (
            "another pipeline",
            approval("weekly_orders").signed_with(&jane).unwrap(),
            "opt_in_out_of_scope",
        ),
    ];
    for (case, opt_in, reason) in cases {
        let fx = Fixture::new();
        let row = forged_row(&fx, Some(&opt_in.to_file_json().unwrap()));
        assert_eq!(deliver_with_trust(&fx, &trusted).await, (0, 1), "{case}");
        assert!(fx.client.received().is_empty(), "{case}");
        let reasons: String = fx.column(&row, "reasons");
        assert!(reasons.contains(reason), "{case}: {reasons}");
        let record = fx.journal.records().pop().unwrap();
        assert_eq!(record.decision, JournalDecision::Suppressed, "{case}");
        assert!(record.reasons.iter().any(|r| r == reason), "{case}");
    }

    // Signed by the trusted key: delivered, and the journal carries the whole scope and signer.
    let fx = Fixture::new();
    let signed = approval("daily_orders").signed_with(&jane).unwrap();
    forged_row(&fx, Some(&signed.to_file_json().unwrap()));
    assert_eq!(deliver_with_trust(&fx, &trusted).await, (1, 0));
    let record = fx.journal.records().pop().unwrap();
    assert_eq!(record.decision, JournalDecision::Delivered);
    let opt_in = record.opt_in.unwrap();
    assert_eq!(opt_in.signer.as_deref(), Some("jane"));
    assert_eq!(opt_in.signer_fingerprint, Some(jane.fingerprint()));
    assert_eq!(opt_in.pipeline.as_deref(), Some("daily_orders"));
    assert_eq!(opt_in.backfill_id.as_deref(), Some("bf-test"));
    assert_eq!(opt_in.kinds, ["webhook"]);
}

#[tokio::test]
async fn a_row_made_pending_by_hand_is_decided_on_its_own_context() {
    // No opt-in at all: a backfill's row set to pending by SQL is suppressed again.
    let fx = Fixture::new();
    let row = forged_row(&fx, None);
    assert_eq!(
        fx.worker()
            .build()
            .unwrap()
            .drain()
            .await
            .unwrap()
            .suppressed,
        1
    );
    assert!(fx.client.received().is_empty());
    let reasons: String = fx.column(&row, "reasons");
    assert!(
        reasons.contains("replay_run") && reasons.contains("stale_window"),
        "{reasons}"
    );
}

#[tokio::test]
async fn a_tampered_or_unreadable_document_lifts_nothing() {
    let jane = key("jane", 1);
    let signed = approval("daily_orders")
        .signed_with(&jane)
        .unwrap()
        .to_file_json()
        .unwrap();
    // One changed character of what was signed.
    let fx = Fixture::new();
    let row = forged_row(&fx, Some(&signed.replace("CHG-1", "CHG-2")));
    assert_eq!(
        fx.worker()
            .build()
            .unwrap()
            .drain()
            .await
            .unwrap()
            .suppressed,
        1
    );
    assert!(fx.client.received().is_empty());
    assert!(
        fx.column::<String>(&row, "reasons")
            .contains("opt_in_bad_signature")
    );

    // Not a document at all (the free text a row of schema 1 held): dead-lettered, journaled.
    let fx = Fixture::new();
    let row = forged_row(&fx, Some("approved by jane, trust me"));
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(stats.dead, 1);
    assert!(fx.client.received().is_empty());
    let record = fx.journal.records().pop().unwrap();
    assert_eq!(record.decision, JournalDecision::Failed);
    assert_eq!(record.reasons, ["unreadable_row"]);
    assert_eq!(record.effect.idempotency_key, row);
}

#[tokio::test]
async fn a_dry_run_journals_what_due_rows_would_send_and_changes_nothing() {
    let fx = Fixture::new();
    let first = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let second = fx.stage(&fx.live(), &Note::new("weekly_total", "300"));
    fx.stage(&fx.backfill(), &Note::new("daily_total", "41"));
    let journaled_before = fx.journal.len();
    let worker = fx.worker().build().unwrap();

    let stats = worker.dry_run().await.unwrap();
    assert_eq!((stats.delivered, stats.suppressed), (0, 2));
    assert!(fx.client.received().is_empty());
    let records = fx.journal.records();
    let new: Vec<_> = records[journaled_before..].iter().collect();
    assert_eq!(new.len(), 2);
    for record in &new {
        assert_eq!(record.decision, JournalDecision::Suppressed);
        assert_eq!(record.reasons, ["dry_run"]);
    }
    for key in [&first.key, &second.key] {
        assert_eq!(fx.column::<String>(key, "status"), "pending");
        assert_eq!(fx.column::<i64>(key, "attempts"), 0);
    }

    // The rows are still there for a real worker.
    assert_eq!(worker.drain().await.unwrap().delivered, 2);
}

#[tokio::test]
async fn an_operator_action_is_journaled_with_its_note_and_approval() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.backfill(), &Note::new("daily_total", "41"));
    let jane = key("jane", 1);
    let trusted = TrustedApprovers::parse(&jane.public_line()).unwrap();
    let action = OperatorAction::new("partner lost July", "jane@ops")
        .unwrap()
        .with_opt_in(approval("daily_orders").signed_with(&jane).unwrap())
        .unwrap();
    let rows = fx
        .store()
        .resend(std::slice::from_ref(&staged.key), &action, contexts::now())
        .await
        .unwrap();
    action
        .journal(
            &*fx.journal,
            replaysafe_outbox::OperatorCommand::Resend,
            &rows,
            Some(&trusted),
            contexts::now(),
        )
        .unwrap();
    let record = fx.journal.records().pop().unwrap();
    assert_eq!(record.decision, JournalDecision::Requeued);
    assert_eq!(record.reasons, ["operator_resend"]);
    assert_eq!(record.effect.idempotency_key, staged.key);
    assert_eq!(record.run_kind, "backfill");
    assert_eq!(
        record.note.as_deref(),
        Some("resend by jane@ops: partner lost July")
    );
    assert_eq!(record.opt_in.unwrap().signer.as_deref(), Some("jane"));
}

#[tokio::test]
async fn a_row_keeps_its_runs_lineage_and_lack_of_window() {
    let fx = Fixture::new();
    // A downstream run of a backfill, over a current window.
    let upstream = replaysafe_core::UpstreamRun::parse_list(
        "REPLAYSAFE_UPSTREAM",
        r#"[{"pipeline": "producer", "run_id": "backfill__2026-08-05T00:00:00+00:00"}]"#,
    )
    .unwrap();
    let downstream = replaysafe_test::contexts::builder(
        replaysafe_core::RunKind::Scheduled,
        contexts::current_window(),
    )
    .upstream(upstream)
    .clock(fx.clock.clone())
    .build()
    .unwrap();
    let staged = fx.stage(&downstream, &Note::new("daily_total", "42"));
    assert!(staged.reasons.contains(&"upstream_replay".to_owned()));
    // A run without a window.
    let unknown = replaysafe_core::ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id("asset_triggered__x")
        .run_kind(replaysafe_core::RunKind::Scheduled)
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    let windowless = fx.stage(&unknown, &Note::new("weekly_total", "7"));
    assert_eq!(windowless.reasons, ["unknown_window"]);

    // Resent on free text, both are decided again on what the row kept.
    let action = OperatorAction::new("partner asked", "jane@ops").unwrap();
    fx.store()
        .resend(
            &[staged.key.clone(), windowless.key.clone()],
            &action,
            contexts::now(),
        )
        .await
        .unwrap();
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!((stats.delivered, stats.suppressed), (0, 2));
    assert!(fx.client.received().is_empty());
    assert!(
        fx.column::<String>(&staged.key, "reasons")
            .contains("upstream_replay")
    );
    assert!(
        fx.column::<String>(&windowless.key, "reasons")
            .contains("unknown_window")
    );
}
