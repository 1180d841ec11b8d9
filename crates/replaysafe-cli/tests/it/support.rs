//! Deterministic journals written through the real guard on a fixed clock.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use chrono::TimeDelta;
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
