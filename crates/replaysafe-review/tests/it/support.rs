//! Deterministic journals: written through the real guard on a fixed clock, or line by
//! line for the cases a guard does not write (attempts cut short, other runs' outcomes).
//!
//! The `replaysafe` command's tests use these journals too (`crates/replaysafe-cli/tests/it/main.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use chrono::{TimeDelta, TimeZone, Utc};
use replaysafe_core::journal::{JournalDecision, JournalRecord};
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, JsonlJournal, OptIn,
    ReplayContext, RetryPolicy, RunId,
};
use replaysafe_test::{TestEffect, TestError, contexts};

/// Fails the first attempt of every effect whose target starts with `flaky`, transiently.
#[derive(Debug, Default)]
struct Flaky {
    calls: AtomicU32,
}

#[async_trait]
impl EffectClient for Flaky {
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

    async fn deliver(&self, delivery: &Delivery<'_>, effect: &TestEffect) -> Result<(), TestError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if effect.target.starts_with("flaky") && delivery.attempt() == 1 {
            return Err(TestError::Transient { retry_after: None });
        }
        Ok(())
    }
}

fn effects_for(window_index: usize, variant: &str) -> Vec<TestEffect> {
    let recipients = [
        "ana@shop.example",
        "bob@shop.example",
        "cy@corp.example",
        "di@corp.example",
    ];
    vec![
        TestEffect::email(recipients[window_index % 4])
            .with_payload(format!("summary {window_index} {variant}"))
            .with_summary("Daily summary"),
        TestEffect::email(recipients[(window_index + 1) % 4])
            .with_payload(format!("summary {window_index} {variant}"))
            .with_summary("Daily summary"),
        TestEffect::new(EffectKind::Webhook, "https://partner.example/hooks/orders")
            .with_message_type("orders.published")
            .with_payload(format!("{{\"window\":{window_index}}}")),
        TestEffect::new(
            EffectKind::FileDrop,
            format!("sftp://files.partner.example/in/orders_{window_index:02}.csv"),
        )
        .with_message_type("orders_csv")
        .with_payload(format!("id,amount\n{window_index},10\n")),
    ]
}

/// Which journal to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fixture {
    /// A live run (with one retried delivery) and a 5-window backfill of last month.
    Backfill,
    /// The same backfill with an email opt-in.
    OptIn,
    /// The backfill re-run with one window's payloads changed, one effect dropped and one added.
    Changed,
}

/// Writes the fixture journal into `dir` and returns its path.
pub(crate) fn journal(dir: &Path, fixture: Fixture) -> PathBuf {
    let path = dir.join(format!("{fixture:?}.jsonl").to_lowercase());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let journal = Arc::new(JsonlJournal::open(&path).unwrap());
    let guard = Guard::with_shared_journal(Flaky::default(), journal.clone())
        .with_retry(RetryPolicy::default().with_max_attempts(2));
    runtime.block_on(async {
        if fixture == Fixture::Backfill {
            let live = contexts::live();
            for effect in effects_for(0, "live") {
                guard.send(&live, &effect).await.unwrap();
            }
            guard
                .send(
                    &live,
                    &TestEffect::new(
                        EffectKind::Trigger,
                        "flaky://downstream.example/dags/report",
                    ),
                )
                .await
                .unwrap();
        }
        let mut backfill =
            contexts::backfill().with_run_id(RunId::new("backfill__bf-test").unwrap());
        if fixture == Fixture::OptIn {
            let opt_in = OptIn::new(
                "re-send corrected July summaries",
                "jane@ops.example",
                contexts::now() + TimeDelta::hours(8),
            )
            .unwrap()
            .for_kind(EffectKind::Email);
            backfill = backfill.with_opt_in(opt_in);
        }
        let range = contexts::last_month_window();
        let range = replaysafe_core::Window::new(range.start(), range.start() + TimeDelta::days(5))
            .unwrap();
        for (index, window) in range.split(TimeDelta::days(1)).unwrap().enumerate() {
            let cx = backfill.with_window(window);
            let mut effects = effects_for(
                index,
                if fixture == Fixture::Changed && index == 2 {
                    "corrected"
                } else {
                    "v1"
                },
            );
            if fixture == Fixture::Changed && index == 4 {
                effects.pop();
                effects.push(TestEffect::email("new@corp.example").with_payload("welcome"));
            }
            for effect in effects {
                guard.send(&cx, &effect).await.unwrap();
            }
        }
    });
    replaysafe_core::Journal::flush(&*journal).unwrap();
    path
}

/// One suppressed webhook of a scheduled run, as a journal line.
pub(crate) const LINE: &str = r#"{"v":1,"ts":"2026-08-06T01:00:00Z","decision":"suppressed","reasons":["current_window"],"pipeline":"daily_orders","run_id":"r1","run_kind":"scheduled","backfill_id":null,"window":{"start":"2026-08-05T00:00:00Z","end":"2026-08-06T00:00:00Z"},"effect":{"kind":"webhook","message_type":"orders.published","target":"https://partner.example/hooks","idempotency_key":"k","summary":null,"payload_sha256":"00","payload_bytes":2},"opt_in":null,"attempt":0,"error":null}"#;

/// A record of `key` in `run_id`: `decision` at `attempt`, a second later than the one before.
pub(crate) fn record(
    key: &str,
    run_id: &str,
    decision: JournalDecision,
    attempt: u32,
) -> JournalRecord {
    let mut record: JournalRecord = serde_json::from_str(LINE).unwrap();
    record.effect.idempotency_key = key.to_owned();
    record.effect.target = format!("https://partner.example/hooks/{key}");
    record.run_id = run_id.to_owned();
    record.decision = decision;
    record.attempt = attempt;
    if decision == JournalDecision::Failed {
        record.error = Some("503 service unavailable".into());
    }
    record
}

/// Writes `records` to `path`, one a line, a second apart.
pub(crate) fn write(path: &Path, records: &[JournalRecord]) {
    let text: String = records
        .iter()
        .enumerate()
        .map(|(index, record)| {
            let mut record = record.clone();
            record.ts = Utc.with_ymd_and_hms(2026, 8, 6, 1, 0, 0).unwrap()
                + TimeDelta::seconds(index as i64);
            serde_json::to_string(&record).unwrap() + "\n"
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

/// Every way a key's attempts can end, in two runs of the same pipeline.
pub(crate) fn attempts_journal(dir: &Path) -> PathBuf {
    use JournalDecision::*;
    let path = dir.join("attempts.jsonl");
    write(
        &path,
        &[
            // delivered at once
            record("a-delivered", "r1", Attempting, 1),
            record("a-delivered", "r1", Delivered, 1),
            // failed, retried, and the retry was cut short: in doubt, not failed
            record("b-cut-retry", "r1", Attempting, 1),
            record("b-cut-retry", "r1", Failed, 1),
            record("b-cut-retry", "r1", Attempting, 2),
            // failed for good
            record("c-failed", "r1", Attempting, 1),
            record("c-failed", "r1", Failed, 1),
            // cut short in r1, delivered by r2: the receiver has it
            record("d-redelivered", "r1", Attempting, 1),
            // cut short in r1; r2's own attempt failed, which says nothing of r1's
            record("e-cut-then-failed", "r1", Attempting, 1),
            record("f-suppressed", "r1", Suppressed, 0),
            // cut short, then the same run id (an Airflow task retry) tried again and failed
            record("g-same-run-retry", "r1", Attempting, 1),
            record("d-redelivered", "r2", Attempting, 1),
            record("d-redelivered", "r2", Delivered, 1),
            record("e-cut-then-failed", "r2", Attempting, 1),
            record("e-cut-then-failed", "r2", Failed, 1),
            record("g-same-run-retry", "r1", Attempting, 1),
            record("g-same-run-retry", "r1", Failed, 1),
            // a late suppression settles nothing
            record("b-cut-retry", "r2", Suppressed, 0),
        ],
    );
    path
}
