//! Workers: delivery, the gate at delivery, leases, stale completions, retries, stop.

use std::time::Duration;

use chrono::TimeDelta;
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{EffectKind, OptIn, RetryPolicy};
use replaysafe_outbox::{
    ClaimRequest, Completion, CompletionResult, OperatorAction, OutboxStore, Status,
};
use replaysafe_test::{TestError, contexts};

use crate::support::{Fixture, Note};

#[tokio::test]
async fn a_worker_delivers_a_committed_row_once_with_its_key() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let worker = fx.worker().build().unwrap();

    let stats = worker.drain().await.unwrap();
    assert_eq!((stats.claimed, stats.delivered), (1, 1));
    assert_eq!(
        fx.client.received(),
        [(staged.key.clone(), Note::new("daily_total", "42"))]
    );
    assert_eq!(fx.column::<String>(&staged.key, "status"), "delivered");
    assert_eq!(fx.column::<i64>(&staged.key, "attempts"), 1);
    let records = fx.journal.records();
    assert_eq!(records.last().unwrap().decision, JournalDecision::Delivered);
    assert_eq!(
        records.last().unwrap().effect.idempotency_key.as_str(),
        staged.key
    );

    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    assert_eq!(fx.client.received().len(), 1);
}

#[tokio::test]
async fn a_suppressed_row_is_never_claimed() {
    let fx = Fixture::new();
    fx.stage(&fx.backfill(), &Note::new("daily_total", "41"));
    let worker = fx.worker().build().unwrap();
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    assert!(fx.client.received().is_empty());

    // Positive control: a current row beside it is delivered.
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
}

#[tokio::test]
async fn a_row_that_went_stale_while_workers_were_down_is_suppressed_not_sent_late() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    fx.clock.advance(TimeDelta::days(2));
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(
        (stats.claimed, stats.suppressed, stats.delivered),
        (1, 1, 0)
    );
    assert!(fx.client.received().is_empty());
    assert_eq!(fx.column::<String>(&staged.key, "status"), "suppressed");
    assert_eq!(fx.column::<String>(&staged.key, "reasons"), "stale_window");
    assert_eq!(
        fx.journal.records().last().unwrap().decision,
        JournalDecision::Suppressed
    );
}

#[tokio::test]
async fn the_delivery_gate_uses_the_rows_max_age_not_the_workers() {
    // The row was staged under a 1 h max age; 2 h later it is stale, whatever the worker's defaults (6 h).
    let fx = Fixture::new();
    let recency = replaysafe_core::RecencyPolicy::default()
        .with_max_age(EffectKind::Webhook, TimeDelta::hours(2))
        .unwrap();
    let cx = fx.live().with_recency(recency);
    let staged = fx.stage(&cx, &Note::new("daily_total", "42"));
    assert_eq!(staged.status, Status::Pending);
    fx.clock.advance(TimeDelta::hours(2));
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(stats.suppressed, 1);
    assert!(fx.client.received().is_empty());
}

#[tokio::test]
async fn an_opt_in_that_expired_before_delivery_enables_nothing() {
    let fx = Fixture::new();
    let opt_in = OptIn::new(
        "partner lost July",
        "jane@ops",
        contexts::now() + TimeDelta::hours(1),
    )
    .unwrap()
    .for_kind(EffectKind::Webhook)
    .for_pipeline("daily_orders")
    .for_backfill("bf-test");
    let staged = fx.stage(
        &fx.backfill().with_opt_in(opt_in),
        &Note::new("daily_total", "41"),
    );
    assert_eq!(staged.status, Status::Pending);
    fx.clock.advance(TimeDelta::hours(2));
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!((stats.suppressed, stats.delivered), (1, 0));
    assert!(fx.client.received().is_empty());
    assert!(
        fx.column::<String>(&staged.key, "reasons")
            .contains("opt_in_expired")
    );
}

#[tokio::test]
async fn an_unexpired_opt_in_delivers_a_replay_row_and_the_journal_carries_it() {
    let fx = Fixture::new();
    let opt_in = OptIn::new(
        "partner lost July",
        "jane@ops",
        contexts::now() + TimeDelta::hours(1),
    )
    .unwrap()
    .for_kind(EffectKind::Webhook)
    .for_pipeline("daily_orders")
    .for_backfill("bf-test");
    let staged = fx.stage(
        &fx.backfill().with_opt_in(opt_in),
        &Note::new("daily_total", "41"),
    );
    // The row holds the whole approval document, not free text.
    let document: String = fx.column(&staged.key, "opt_in");
    assert!(document.contains("replaysafe-opt-in/1"), "{document}");
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(stats.delivered, 1);
    let delivered = fx.journal.records().pop().unwrap();
    assert_eq!(delivered.decision, JournalDecision::Delivered);
    let opt_in = delivered.opt_in.unwrap();
    assert_eq!(opt_in.approved_by, "jane@ops");
    assert_eq!(opt_in.pipeline.as_deref(), Some("daily_orders"));
    assert_eq!(opt_in.backfill_id.as_deref(), Some("bf-test"));
    assert_eq!(opt_in.kinds, ["webhook"]);
}

#[tokio::test]
async fn an_opt_in_without_a_file_form_cannot_be_staged() {
    let fx = Fixture::new();
    let unscoped = OptIn::new(
        "partner lost July",
        "jane@ops",
        contexts::now() + TimeDelta::hours(1),
    )
    .unwrap()
    .for_kind(EffectKind::Webhook);
    let mut conn = fx.connection();
    let tx = conn.transaction().unwrap();
    let error = replaysafe_outbox::sqlite::stage(
        &tx,
        &fx.backfill().with_opt_in(unscoped),
        &fx.route,
        &Note::new("daily_total", "41"),
    )
    .unwrap_err();
    let text = replaysafe_core::error_chain(&error);
    assert!(text.contains("whole approval document"), "{text}");
    drop(tx);
    assert_eq!(fx.row_count(), 0);
}

#[tokio::test]
async fn a_stale_completion_is_rejected_counted_and_never_overwrites_the_newer_claim() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let store = fx.store();
    let request = |now| ClaimRequest {
        routes: vec!["partner_webhook".into()],
        limit: 10,
        lease: Duration::from_secs(30),
        now,
    };
    let first = store.claim(&request(contexts::now())).await.unwrap();
    assert_eq!(first.len(), 1);
    // Within the lease nobody else gets it.
    assert!(
        store
            .claim(&request(contexts::now() + TimeDelta::seconds(29)))
            .await
            .unwrap()
            .is_empty()
    );
    // After it, the row is reclaimed with a new token.
    let second = store
        .claim(&request(contexts::now() + TimeDelta::seconds(31)))
        .await
        .unwrap();
    assert_eq!(second.len(), 1);
    assert_ne!(first[0].claim_token(), second[0].claim_token());
    assert_eq!(second[0].attempts(), 2);

    let newer = store
        .complete(
            &second[0],
            Completion::Dead {
                error: "newer outcome".into(),
            },
            contexts::now(),
        )
        .await
        .unwrap();
    assert_eq!(newer, CompletionResult::Applied);
    let stale = store
        .complete(
            &first[0],
            Completion::Delivered {
                payload_sha256: "00".into(),
            },
            contexts::now(),
        )
        .await
        .unwrap();
    assert_eq!(stale, CompletionResult::Stale);
    assert_eq!(fx.column::<String>(&staged.key, "status"), "dead");
    assert_eq!(
        fx.column::<String>(&staged.key, "last_error"),
        "newer outcome"
    );
    let counters = store.counters().await.unwrap();
    assert_eq!((counters.stale_completions, counters.reclaimed), (1, 1));
}

#[tokio::test]
async fn an_expired_lease_is_reclaimed_and_delivered() {
    let fx = Fixture::new();
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let store = fx.store();
    let abandoned = store
        .claim(&ClaimRequest {
            routes: vec!["partner_webhook".into()],
            limit: 10,
            lease: Duration::from_secs(60),
            now: contexts::now(),
        })
        .await
        .unwrap();
    assert_eq!(abandoned.len(), 1);
    let worker = fx.worker().build().unwrap();
    assert_eq!(
        worker.drain().await.unwrap().claimed,
        0,
        "the lease still holds"
    );
    assert_eq!(store.in_doubt(contexts::now()).await.unwrap(), 0);
    fx.clock.advance(TimeDelta::seconds(61));
    // Claimed with the lease over: a delivery may have been made.
    assert_eq!(
        store
            .in_doubt(contexts::now() + TimeDelta::seconds(61))
            .await
            .unwrap(),
        1
    );
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    assert_eq!(
        store
            .in_doubt(contexts::now() + TimeDelta::seconds(61))
            .await
            .unwrap(),
        0
    );
    assert_eq!(fx.client.received().len(), 1);
    // The journal numbers the delivery as the row does: the second attempt.
    assert_eq!(fx.column::<i64>(abandoned[0].key(), "attempts"), 2);
    let attempts: Vec<(JournalDecision, u32)> = fx
        .journal
        .records()
        .iter()
        .map(|r| (r.decision, r.attempt))
        .collect();
    assert_eq!(
        attempts,
        [
            (JournalDecision::Attempting, 2),
            (JournalDecision::Delivered, 2)
        ]
    );
}

#[tokio::test]
async fn a_transient_failure_comes_back_after_retry_after() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    fx.client.fail_with(TestError::Transient {
        retry_after: Some(Duration::from_secs(30)),
    });
    let worker = fx.worker().build().unwrap();

    let first = worker.drain().await.unwrap();
    assert_eq!((first.retried, first.delivered), (1, 0));
    assert_eq!(fx.column::<String>(&staged.key, "status"), "pending");
    assert_eq!(
        fx.column::<String>(&staged.key, "last_error"),
        "transient test failure"
    );
    assert_eq!(
        fx.column::<i64>(&staged.key, "next_attempt_at_ms"),
        (contexts::now() + TimeDelta::seconds(30)).timestamp_millis()
    );
    fx.clock.advance(TimeDelta::seconds(29));
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    fx.clock.advance(TimeDelta::seconds(1));
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    assert_eq!(fx.column::<i64>(&staged.key, "attempts"), 2);
    let decisions: Vec<_> = fx.journal.records().iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [
            JournalDecision::Attempting,
            JournalDecision::Failed,
            JournalDecision::Attempting,
            JournalDecision::Delivered
        ]
    );
}

#[tokio::test]
async fn a_transient_failure_backs_off_with_full_jitter_under_the_ceiling() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    fx.client
        .fail_with(TestError::Transient { retry_after: None });
    let retry = RetryPolicy::default()
        .with_max_attempts(5)
        .with_base_delay(Duration::from_secs(10));
    fx.worker()
        .retry(retry)
        .build()
        .unwrap()
        .drain()
        .await
        .unwrap();
    let due = fx.column::<i64>(&staged.key, "next_attempt_at_ms");
    let now = contexts::now().timestamp_millis();
    assert!(
        (now..=now + 10_000).contains(&due),
        "{due} not within 10 s of {now}"
    );
}

#[tokio::test]
async fn a_permanent_failure_dead_letters_with_the_last_error() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    fx.client.fail_with(TestError::Permanent);
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(stats.dead, 1);
    assert_eq!(fx.column::<String>(&staged.key, "status"), "dead");
    assert_eq!(
        fx.column::<String>(&staged.key, "last_error"),
        "permanent test failure"
    );
}

#[tokio::test]
async fn exhausted_attempts_dead_letter() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    for _ in 0..2 {
        fx.client.fail_with(TestError::Transient {
            retry_after: Some(Duration::from_secs(1)),
        });
    }
    let worker = fx
        .worker()
        .retry(RetryPolicy::default().with_max_attempts(2))
        .build()
        .unwrap();
    assert_eq!(worker.drain().await.unwrap().retried, 1);
    fx.clock.advance(TimeDelta::seconds(1));
    assert_eq!(worker.drain().await.unwrap().dead, 1);
    assert_eq!(fx.column::<String>(&staged.key, "status"), "dead");
    assert_eq!(fx.column::<i64>(&staged.key, "attempts"), 2);
    assert!(fx.client.received().is_empty());
}

#[tokio::test]
async fn a_delivered_row_is_not_sent_again_and_a_changed_payload_says_so() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let worker = fx.worker().build().unwrap();
    worker.drain().await.unwrap();

    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    assert!(!fx.column::<bool>(&staged.key, "changed_after_delivery"));

    let restaged = fx.stage(&fx.live(), &Note::new("daily_total", "43"));
    assert!(restaged.changed);
    assert_eq!(fx.column::<String>(&staged.key, "status"), "delivered");
    assert!(fx.column::<bool>(&staged.key, "changed_after_delivery"));
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    assert_eq!(fx.client.received().len(), 1);

    // An audited resend sends the corrected payload, once: a current row needs no approval.
    let action = OperatorAction::new("totals corrected", "jane@ops").unwrap();
    let store = fx.store();
    assert_eq!(
        store
            .resend(std::slice::from_ref(&staged.key), &action, contexts::now())
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    let received = fx.client.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[1].1.body, "43");
    assert!(!fx.column::<bool>(&staged.key, "changed_after_delivery"));
    let audit: (String, String) = fx
        .connection()
        .query_row(
            "SELECT action, approved_by FROM replaysafe_outbox_audit",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(audit, ("resend".into(), "jane@ops".into()));
}

#[tokio::test]
async fn a_resend_of_a_replay_row_takes_an_approval_document_not_free_text() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.backfill(), &Note::new("daily_total", "41"));
    let store = fx.store();
    let worker = fx.worker().build().unwrap();

    // Free text lifts nothing: the worker decides on the row's own context again.
    let free_text = OperatorAction::new("partner lost July", "jane@ops").unwrap();
    let reopened = store
        .resend(
            std::slice::from_ref(&staged.key),
            &free_text,
            contexts::now(),
        )
        .await
        .unwrap();
    assert_eq!(reopened.len(), 1);
    assert!(!reopened[0].has_opt_in);
    assert_eq!(worker.drain().await.unwrap().suppressed, 1);
    assert!(fx.client.received().is_empty());
    assert!(
        fx.column::<String>(&staged.key, "reasons")
            .contains("replay_run")
    );

    // An approval document does, until it expires.
    let approval = OptIn::new(
        "partner lost July",
        "jane@ops",
        contexts::now() + TimeDelta::hours(1),
    )
    .unwrap()
    .for_kind(EffectKind::Webhook)
    .for_pipeline("daily_orders")
    .for_backfill("bf-test");
    let approved = OperatorAction::new("partner lost July", "jane@ops")
        .unwrap()
        .with_opt_in(approval)
        .unwrap();
    store
        .resend(
            std::slice::from_ref(&staged.key),
            &approved,
            contexts::now(),
        )
        .await
        .unwrap();
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    let delivered = fx.journal.records().pop().unwrap();
    assert_eq!(delivered.decision, JournalDecision::Delivered);
    let opt_in = delivered.opt_in.unwrap();
    assert_eq!(opt_in.reason, "partner lost July");
    assert_eq!(opt_in.backfill_id.as_deref(), Some("bf-test"));

    // The same resend after its expiry enables nothing.
    store
        .resend(
            std::slice::from_ref(&staged.key),
            &approved,
            contexts::now(),
        )
        .await
        .unwrap();
    fx.clock.advance(TimeDelta::hours(2));
    assert_eq!(worker.drain().await.unwrap().suppressed, 1);
    assert_eq!(fx.client.received().len(), 1);
    assert!(
        fx.column::<String>(&staged.key, "reasons")
            .contains("opt_in_expired")
    );
    let audited: i64 = fx
        .connection()
        .query_row(
            "SELECT COUNT(*) FROM replaysafe_outbox_audit WHERE action = 'resend' AND opt_in IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(audited, 2);
}

#[tokio::test]
async fn a_worker_only_claims_rows_of_its_routes() {
    let fx = Fixture::new();
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let other = replaysafe_outbox::Worker::builder(fx.store())
        .route(
            "other_route",
            replaysafe_core::Guard::new(
                crate::support::NoteClient::default(),
                replaysafe_core::journal::NoopJournal,
            ),
        )
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    assert_eq!(other.drain().await.unwrap().claimed, 0);
    assert_eq!(
        fx.worker()
            .build()
            .unwrap()
            .drain()
            .await
            .unwrap()
            .delivered,
        1
    );
}

#[tokio::test]
async fn a_worker_needs_valid_distinct_routes() {
    let fx = Fixture::new();
    let none = replaysafe_outbox::Worker::builder(fx.store())
        .build()
        .unwrap_err();
    assert!(none.to_string().starts_with("invalid route"), "{none}");
    let twice = fx.worker().add_route(fx.route.clone()).build().unwrap_err();
    assert!(twice.to_string().contains("once"), "{twice}");
    let bad = replaysafe_outbox::Route::new(
        "bad name",
        replaysafe_core::Guard::new(
            crate::support::NoteClient::default(),
            replaysafe_core::journal::NoopJournal,
        ),
    )
    .unwrap_err();
    assert!(bad.to_string().starts_with("invalid route"), "{bad}");
}

#[tokio::test]
async fn stopping_finishes_the_delivery_in_flight_and_releases_the_rest() {
    let fx = Fixture::new();
    for day in 0..5 {
        fx.stage(&fx.live(), &Note::new(&format!("total_{day}"), "1"));
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    *fx.client.on_deliver.lock().unwrap() = Some(stop_tx);
    let worker = fx.worker().build().unwrap();
    let stats = worker
        .run_until(async move {
            let _ = stop_rx.await;
        })
        .await;
    assert_eq!(stats.delivered, 1, "{stats:?}");
    assert_eq!(stats.released, 4, "{stats:?}");
    assert_eq!(fx.client.received().len(), 1);
    let pending: i64 = fx
        .connection()
        .query_row(
            "SELECT COUNT(*) FROM replaysafe_outbox WHERE status = 'pending' AND attempts = 0 AND claim_token IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pending, 4);
}

#[tokio::test]
async fn a_worker_held_up_past_its_lease_leaves_the_rest_of_its_batch() {
    let fx = Fixture::new();
    for day in 0..3 {
        fx.stage(&fx.live(), &Note::new(&format!("total_{day}"), "1"));
    }
    *fx.client.slow.lock().unwrap() = Some((fx.clock.clone(), TimeDelta::seconds(61)));
    let worker = fx.worker().build().unwrap();
    let stats = worker.run_once().await.unwrap();
    assert_eq!(
        (stats.claimed, stats.delivered, stats.lease_expired),
        (3, 1, 2),
        "{stats:?}"
    );
    assert_eq!(fx.client.received().len(), 1);
    // The two left behind are reclaimed once their lease is over, and delivered.
    *fx.client.slow.lock().unwrap() = None;
    assert_eq!(worker.drain().await.unwrap().delivered, 2);
    assert_eq!(fx.store().counters().await.unwrap().reclaimed, 2);
}

#[tokio::test]
async fn an_undecodable_effect_dead_letters_without_quoting_it() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    fx.connection()
        .execute(
            "UPDATE replaysafe_outbox SET effect = '{\"message_type\":\"daily_total\",\"target\":\"t\",\"body\":12345678}'",
            [],
        )
        .unwrap();
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(stats.dead, 1);
    assert!(fx.client.received().is_empty());
    let error: String = fx.column(&staged.key, "last_error");
    assert_eq!(
        error,
        "decoding the effect for route partner_webhook: JSON of the wrong shape at line 1 column 58"
    );
    assert_failed_record(&fx, &staged.key, "undecodable_effect");
}

/// The last journal record is a `failed` one for `key`, with `reason`: a row dead-lettered
/// before any attempt is seen by `report --fail-on failed`.
fn assert_failed_record(fx: &Fixture, key: &str, reason: &str) {
    let record = fx.journal.records().pop().expect("a journal record");
    assert_eq!(record.decision, JournalDecision::Failed);
    assert_eq!(record.effect.idempotency_key, key);
    assert_eq!(record.reasons, [reason]);
    assert_eq!(record.pipeline, "daily_orders");
    assert!(record.error.is_some());
}

#[tokio::test]
async fn a_row_with_an_unreadable_context_is_dead_lettered_and_journaled() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    fx.connection()
        .execute("UPDATE replaysafe_outbox SET window_end = 'yesterday'", [])
        .unwrap();
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(stats.dead, 1);
    assert!(fx.client.received().is_empty());
    assert_failed_record(&fx, &staged.key, "unreadable_row");
}

#[tokio::test]
async fn a_row_whose_key_its_route_no_longer_derives_is_dead_lettered_not_sent() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    // The effect now names another target: the route would send it under another key.
    fx.connection()
        .execute(
            "UPDATE replaysafe_outbox SET effect = replace(effect, 'partner.example', 'other.example')",
            [],
        )
        .unwrap();
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(stats.dead, 1);
    assert!(fx.client.received().is_empty());
    let error: String = fx.column(&staged.key, "last_error");
    assert!(error.contains("not the row's"), "{error}");
    assert_failed_record(&fx, &staged.key, "key_mismatch");
}
