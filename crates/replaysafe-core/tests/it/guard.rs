use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::TimeDelta;
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{
    Classify, Delivery, EffectClient, EffectDescription, EffectKind, Guard, IdempotencyKey,
    JsonlJournal, MemoryJournal, OptIn, Outcome, Reason, ReplayContext, RetryPolicy, RunId,
    SendError,
};
use replaysafe_test::{MockEffectClient, RecordingClient, TestEffect, TestError, contexts};

fn effect() -> TestEffect {
    TestEffect::email("ana@shop.example")
        .with_payload("hello")
        .with_summary("Your daily summary")
}

#[tokio::test]
async fn suppressed_contexts_never_call_the_client() {
    for (name, cx, reason) in [
        ("backfill", contexts::backfill(), Reason::ReplayRun),
        ("replay", contexts::replay(), Reason::ReplayFlag),
        ("stale", contexts::stale(), Reason::StaleWindow),
        ("unknown", contexts::unknown(), Reason::UnknownContext),
    ] {
        let mut mock = MockEffectClient::describing();
        mock.expect_deliver_effect().times(0);
        let journal = Arc::new(MemoryJournal::new());
        let guard = Guard::with_shared_journal(mock, journal.clone());
        let outcome = guard.send(&cx, &effect()).await.unwrap();
        let Outcome::Suppressed(suppressed) = outcome else {
            panic!("{name}: delivered")
        };
        assert!(
            suppressed.reasons.contains(&reason),
            "{name}: {:?}",
            suppressed.reasons
        );
        let records = journal.records();
        assert_eq!(records.len(), 1, "{name}");
        assert_eq!(records[0].decision, JournalDecision::Suppressed);
        assert_eq!(records[0].attempt, 0);
        assert!(
            records[0].reasons.contains(&reason.as_str().to_owned()),
            "{name}"
        );
    }
}

#[tokio::test]
async fn live_delivery_passes_the_derived_key_once() {
    let cx = contexts::live();
    let expected = IdempotencyKey::derive(
        cx.pipeline(),
        &EffectKind::Email,
        "daily_summary",
        "ana@shop.example",
        cx.window(),
    );
    let mut mock = MockEffectClient::describing();
    let key = expected.clone();
    mock.expect_deliver_effect()
        .withf(move |k, attempt, _| *k == key && *attempt == 1)
        .times(1)
        .returning(|_, _, _| Ok(()));
    let journal = Arc::new(MemoryJournal::new());
    let guard = Guard::with_shared_journal(mock, journal.clone());
    let outcome = guard.send(&cx, &effect()).await.unwrap();
    assert!(outcome.is_delivered());
    assert_eq!(outcome.key(), &expected);
    let records = journal.records();
    let decisions: Vec<_> = records.iter().map(|r| (r.decision, r.attempt)).collect();
    assert_eq!(
        decisions,
        [
            (JournalDecision::Attempting, 1),
            (JournalDecision::Delivered, 1)
        ]
    );
    for record in &records {
        assert_eq!(record.reasons, ["current_window"]);
        assert_eq!(record.effect.idempotency_key, expected.as_str());
        assert_eq!(record.effect.summary.as_deref(), Some("Your daily summary"));
        assert_eq!(record.effect.payload_bytes, 5);
        assert_eq!(record.error, None);
    }
}

#[tokio::test]
async fn same_effect_from_two_run_ids_has_one_key_and_is_delivered_once() {
    let client = RecordingClient::new();
    let guard = Guard::new(client.clone(), MemoryJournal::new());
    let first = contexts::live();
    let second = first.with_run_id(RunId::new("manual__rerun").unwrap());
    let delivered = guard.send(&first, &effect()).await.unwrap();
    let again = guard.send(&second, &effect()).await.unwrap();
    assert_eq!(delivered.key(), again.key());
    let Outcome::Suppressed(suppressed) = again else {
        panic!("delivered twice");
    };
    assert_eq!(suppressed.reasons, [Reason::AlreadyDelivered]);
    assert_eq!(client.delivered().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_up_to_the_limit() {
    let mut mock = MockEffectClient::describing();
    mock.expect_deliver_effect()
        .times(3)
        .returning(|_, _, _| Err(TestError::Transient { retry_after: None }));
    let journal = Arc::new(MemoryJournal::new());
    let guard = Guard::with_shared_journal(mock, journal.clone());
    let err = guard.send(&contexts::live(), &effect()).await.unwrap_err();
    assert!(
        matches!(err, SendError::Failed { attempts: 3, .. }),
        "{err:?}"
    );
    assert!(err.is_transient());
    let attempts: Vec<_> = journal
        .records()
        .iter()
        .map(|r| (r.decision, r.attempt))
        .collect();
    assert_eq!(
        attempts,
        [
            (JournalDecision::Attempting, 1),
            (JournalDecision::Failed, 1),
            (JournalDecision::Attempting, 2),
            (JournalDecision::Failed, 2),
            (JournalDecision::Attempting, 3),
            (JournalDecision::Failed, 3)
        ]
    );
    assert!(
        journal.records()[1]
            .error
            .as_deref()
            .unwrap()
            .contains("transient")
    );
}

#[tokio::test(start_paused = true)]
async fn transient_then_success_is_delivered_once() {
    let mut mock = MockEffectClient::describing();
    let mut calls = 0;
    mock.expect_deliver_effect()
        .times(2)
        .returning(move |_, _, _| {
            calls += 1;
            if calls == 1 {
                Err(TestError::Transient { retry_after: None })
            } else {
                Ok(())
            }
        });
    let journal = Arc::new(MemoryJournal::new());
    let guard = Guard::with_shared_journal(mock, journal.clone());
    let Outcome::Delivered(delivered) = guard.send(&contexts::live(), &effect()).await.unwrap()
    else {
        panic!("not delivered")
    };
    assert_eq!(delivered.attempts, 2);
    let decisions: Vec<_> = journal.records().iter().map(|r| r.decision).collect();
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

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_not_retried() {
    let mut mock = MockEffectClient::describing();
    mock.expect_deliver_effect()
        .times(1)
        .returning(|_, _, _| Err(TestError::Permanent));
    let guard = Guard::new(mock, MemoryJournal::new())
        .with_retry(RetryPolicy::default().with_max_attempts(10));
    let err = guard.send(&contexts::live(), &effect()).await.unwrap_err();
    assert!(
        matches!(
            err,
            SendError::Failed {
                attempts: 1,
                source: TestError::Permanent
            }
        ),
        "{err:?}"
    );
    assert!(err.is_permanent());
}

#[tokio::test(start_paused = true)]
async fn retry_after_wins_over_backoff() {
    let mut mock = MockEffectClient::describing();
    let mut calls = 0;
    mock.expect_deliver_effect()
        .times(2)
        .returning(move |_, _, _| {
            calls += 1;
            if calls == 1 {
                Err(TestError::Transient {
                    retry_after: Some(Duration::from_secs(30)),
                })
            } else {
                Ok(())
            }
        });
    let guard = Guard::new(mock, MemoryJournal::new());
    let started = tokio::time::Instant::now();
    assert!(
        guard
            .send(&contexts::live(), &effect())
            .await
            .unwrap()
            .is_delivered()
    );
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(30), "waited {waited:?}");
    assert!(waited < Duration::from_secs(31), "waited {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_time_budget_fails_without_waiting() {
    let mut mock = MockEffectClient::describing();
    mock.expect_deliver_effect().times(1).returning(|_, _, _| {
        Err(TestError::Transient {
            retry_after: Some(Duration::from_secs(3600)),
        })
    });
    let guard = Guard::new(mock, MemoryJournal::new());
    let started = tokio::time::Instant::now();
    let err = guard.send(&contexts::live(), &effect()).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3600)));
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn invalid_effects_are_errors_and_nothing_is_sent_or_journaled() {
    let mut mock = MockEffectClient::describing();
    mock.expect_deliver_effect().times(0);
    let journal = Arc::new(MemoryJournal::new());
    let guard = Guard::with_shared_journal(mock, journal.clone());
    let bad = TestEffect::email("ana@shop.example\r\nBcc: everyone@shop.example");
    let err = guard.send(&contexts::live(), &bad).await.unwrap_err();
    assert!(matches!(err, SendError::Invalid(_)));
    assert_eq!(err.to_string(), "invalid effect");
    let cause = replaysafe_core::error_chain(&err);
    assert!(cause.contains("target"), "{cause}");
    assert!(journal.is_empty());
}

#[tokio::test]
async fn opt_in_delivery_is_journaled_with_the_opt_in() {
    let client = RecordingClient::new();
    let journal = Arc::new(MemoryJournal::new());
    let guard = Guard::with_shared_journal(client.clone(), journal.clone());
    let cx = contexts::backfill();
    let opt_in = OptIn::new(
        "re-send corrected July summaries",
        "jane@ops",
        contexts::now() + TimeDelta::hours(4),
    )
    .unwrap()
    .for_kind(EffectKind::Email);
    let outcome = guard
        .send(&cx.with_opt_in(opt_in), &effect())
        .await
        .unwrap();
    assert!(outcome.is_delivered());
    assert_eq!(client.delivered().len(), 1);
    let records = journal.records();
    assert_eq!(
        records.iter().map(|r| r.decision).collect::<Vec<_>>(),
        [JournalDecision::Attempting, JournalDecision::Delivered]
    );
    let record = &records[1];
    assert_eq!(record.reasons, ["replay_run", "stale_window", "opt_in"]);
    let opt_in = record.opt_in.as_ref().unwrap();
    assert_eq!(
        (opt_in.reason.as_str(), opt_in.approved_by.as_str()),
        ("re-send corrected July summaries", "jane@ops")
    );

    let expired = OptIn::new(
        "too late",
        "jane@ops",
        contexts::now() - TimeDelta::minutes(1),
    )
    .unwrap()
    .for_kind(EffectKind::Email);
    assert!(
        guard
            .send(&cx.with_opt_in(expired), &effect())
            .await
            .unwrap()
            .is_suppressed()
    );
    let record = &journal.records()[2];
    assert_eq!(record.decision, JournalDecision::Suppressed);
    assert!(record.reasons.contains(&"opt_in_expired".to_owned()));
    assert_eq!(record.opt_in.as_ref().unwrap().reason, "too late");
    assert_eq!(client.delivered().len(), 1);
}

/// An effect with secret headers, to prove neither they nor the payload reach the journal or logs.
#[derive(Debug)]
struct HeaderClient;

struct SecretEffect {
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[async_trait]
impl EffectClient for HeaderClient {
    type Effect = SecretEffect;
    type Receipt = ();
    type Error = TestError;

    fn describe(
        &self,
        _cx: &ReplayContext,
        effect: &SecretEffect,
    ) -> Result<EffectDescription, TestError> {
        Ok(
            EffectDescription::new(EffectKind::Webhook, "orders.published", &effect.url)
                .map_err(|e| TestError::Invalid(e.to_string()))?
                .with_payload(&effect.body)
                .with_summary("orders.published"),
        )
    }

    async fn deliver(
        &self,
        _delivery: &Delivery<'_>,
        effect: &SecretEffect,
    ) -> Result<(), TestError> {
        assert_eq!(effect.headers.len(), 1);
        Ok(())
    }
}

#[test]
fn canary_secrets_reach_no_journal_and_no_log() {
    const CANARY: &str = "CANARY-7f3a9-do-not-log";
    let (logs, capture) = replaysafe_test::logs::CapturedLogs::capture_thread();
    let dir = std::env::temp_dir().join(format!("replaysafe-canary-{}", std::process::id()));
    let path = dir.join("journal.jsonl");
    let _ = std::fs::remove_file(&path);

    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let journal = (
                JsonlJournal::open(&path).unwrap(),
                replaysafe_core::TracingJournal,
            );
            let guard = Guard::new(HeaderClient, journal);
            for cx in [contexts::live(), contexts::backfill()] {
                let effect = SecretEffect {
                    url: "https://partner.example/hooks/orders".into(),
                    headers: vec![("Authorization".into(), format!("Bearer {CANARY}"))],
                    body: format!("{{\"token\":\"{CANARY}\"}}").into_bytes(),
                };
                guard.send(&cx, &effect).await.unwrap();
            }
            guard.journal().flush().unwrap();
        });
    }
    drop(capture);

    let journal = std::fs::read_to_string(&path).unwrap();
    let logs = logs.text();
    assert_eq!(
        journal.lines().count(),
        3,
        "attempting, delivered, suppressed"
    );
    assert!(
        logs.contains(
            "would have sent webhook orders.published to https://partner.example/hooks/orders"
        ),
        "{logs}"
    );
    assert!(!journal.contains(CANARY), "canary in journal");
    assert!(!logs.contains(CANARY), "canary in logs");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn layer_shares_journal_and_policy() {
    let journal: Arc<dyn replaysafe_core::Journal> = Arc::new(MemoryJournal::new());
    let layer = replaysafe_core::GuardLayer::new(journal.clone()).with_retry(RetryPolicy::none());
    let a = layer.layer(RecordingClient::new());
    let b = layer.layer(RecordingClient::new());
    assert!(Arc::ptr_eq(a.journal(), b.journal()));
    assert_eq!(a.retry_policy().max_attempts(), 1);
}

/// Reads the journal file at each delivery attempt: what had reached the OS by then.
#[derive(Debug)]
struct JournalPeek {
    path: std::path::PathBuf,
    fail_first: bool,
    seen: std::sync::Mutex<Vec<String>>,
}

#[async_trait]
impl EffectClient for JournalPeek {
    type Effect = TestEffect;
    type Receipt = ();
    type Error = TestError;

    fn describe(
        &self,
        _cx: &ReplayContext,
        effect: &TestEffect,
    ) -> Result<EffectDescription, TestError> {
        effect.describe()
    }

    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        _effect: &TestEffect,
    ) -> Result<(), TestError> {
        let text = std::fs::read_to_string(&self.path).unwrap();
        self.seen.lock().unwrap().push(text);
        if self.fail_first && delivery.attempt() == 1 {
            return Err(TestError::Transient { retry_after: None });
        }
        Ok(())
    }
}

fn decisions_in(text: &str) -> Vec<(JournalDecision, u32)> {
    replaysafe_core::journal::JournalReader::new(std::io::Cursor::new(text), "peek")
        .map(|r| r.map(|r| (r.decision, r.attempt)).unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn each_attempt_is_on_record_before_it_starts_and_its_outcome_before_send_returns() {
    use replaysafe_core::journal::Durability;
    for durability in [Durability::OsWrite, Durability::Fsync, Durability::Buffered] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let journal = Arc::new(
            JsonlJournal::options()
                .durability(durability)
                .open(&path)
                .unwrap(),
        );
        let peek = JournalPeek {
            path: path.clone(),
            fail_first: true,
            seen: Default::default(),
        };
        let guard = Guard::with_shared_journal(peek, journal.clone());
        // A suppressed effect first: under Buffered it waits in the buffer until a flush.
        assert!(
            guard
                .send(&contexts::backfill(), &effect())
                .await
                .unwrap()
                .is_suppressed()
        );
        assert!(
            guard
                .send(&contexts::live(), &effect())
                .await
                .unwrap()
                .is_delivered()
        );
        use JournalDecision::*;
        let seen = guard.unguarded_ref().seen.lock().unwrap().clone();
        assert_eq!(
            seen.iter()
                .map(|text| decisions_in(text))
                .collect::<Vec<_>>(),
            [
                vec![(Suppressed, 0), (Attempting, 1)],
                vec![
                    (Suppressed, 0),
                    (Attempting, 1),
                    (Failed, 1),
                    (Attempting, 2)
                ],
            ],
            "{durability:?}"
        );
        // Without a flush or a drop: everything is in the file when send returns.
        assert_eq!(
            decisions_in(&std::fs::read_to_string(&path).unwrap()),
            [
                (Suppressed, 0),
                (Attempting, 1),
                (Failed, 1),
                (Attempting, 2),
                (Delivered, 2)
            ],
            "{durability:?}"
        );
    }
}
