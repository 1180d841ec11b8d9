//! `cargo xtask demo`: a small daily pipeline run twice through replaysafe.
//!
//! Run one delivers the current window's customer summaries (files appear under
//! `target/demo/outbox/`). Run two backfills the 30 days of last month through the same
//! code: nothing is delivered, and the journal records every effect it would have sent.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use chrono::{DurationRound, TimeDelta, Utc};
use replaysafe::journal::{JournalDecision, JournalReader};
use replaysafe::{
    Classify, Delivery, EffectClient, EffectDescription, EffectKind, Guard, JsonlJournal, Journal, ReplayContext,
    RunKind, Window,
};

/// A summary file for one customer: the demo's stand-in for an email.
#[derive(Debug)]
struct Summary {
    customer: String,
    body: String,
}

/// Delivers summaries by writing files into a folder: a local stand-in for a real client.
#[derive(Debug)]
struct FolderClient {
    folder: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("writing summary file {path}: {source}")]
struct FolderError {
    path: String,
    #[source]
    source: std::io::Error,
}

impl Classify for FolderError {
    fn is_transient(&self) -> bool {
        false
    }
}

#[async_trait]
impl EffectClient for FolderClient {
    type Effect = Summary;
    type Receipt = PathBuf;
    type Error = FolderError;

    fn describe(&self, _cx: &ReplayContext, summary: &Summary) -> Result<EffectDescription, FolderError> {
        EffectDescription::new(EffectKind::FileDrop, "daily_summary", &summary.customer)
            .map(|d| d.with_payload(summary.body.as_bytes()).with_summary(format!("summary for {}", summary.customer)))
            .map_err(|e| FolderError { path: summary.customer.clone(), source: std::io::Error::other(e.to_string()) })
    }

    async fn deliver(&self, delivery: &Delivery<'_>, summary: &Summary) -> Result<PathBuf, FolderError> {
        let window = delivery.context().window();
        let name = format!("{}_{}.txt", summary.customer, window.start().format("%Y%m%d"));
        let path = self.folder.join(name);
        tokio::fs::write(&path, &summary.body)
            .await
            .map_err(|source| FolderError { path: path.display().to_string(), source })?;
        Ok(path)
    }
}

const CUSTOMERS: [&str; 3] = ["acme", "globex", "initech"];

/// The pipeline: compute the window's totals (a stand-in for an idempotent table write), then tell each customer.
async fn run_pipeline(cx: &ReplayContext, summaries: &Guard<FolderClient>) -> anyhow::Result<usize> {
    let mut delivered = 0;
    for (index, customer) in CUSTOMERS.iter().enumerate() {
        let orders = 10 + index * 7 + cx.window().start().timestamp().rem_euclid(5) as usize;
        let body = format!("{customer}: {orders} orders in {}\n", cx.window());
        let outcome = summaries.send(cx, &Summary { customer: (*customer).to_owned(), body }).await?;
        if let Some(path) = outcome.receipt() {
            println!("  delivered {}", path.display());
            delivered += 1;
        }
    }
    Ok(delivered)
}

fn demo_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new(".")).join("target"), PathBuf::from);
    target.join("demo")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = demo_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let outbox = dir.join("outbox");
    std::fs::create_dir_all(&outbox).with_context(|| format!("creating {}", outbox.display()))?;
    let journal_path = dir.join("journal.jsonl");
    let journal = Arc::new(JsonlJournal::open(&journal_path)?);
    let summaries = Guard::with_shared_journal(FolderClient { folder: outbox.clone() }, journal.clone());

    let today = Utc::now().duration_trunc(TimeDelta::days(1))?;
    let current = Window::new(today - TimeDelta::days(1), today)?;
    let live = ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id(format!("scheduled__{}", replaysafe::rfc3339(today)))
        .run_kind(RunKind::Scheduled)
        .window(current)
        .build()?;
    // A daily window closes at midnight; the demo runs at any hour, so allow a day of age.
    let live = live.with_recency(live.recency().clone().with_max_age(EffectKind::FileDrop, TimeDelta::days(1))?);

    println!("run 1: scheduled run of the current window {current}");
    let delivered = run_pipeline(&live, &summaries).await?;

    let backfill_id = "bf-last-month";
    let last_month = Window::new(today - TimeDelta::days(31), today - TimeDelta::days(1))?;
    println!("\nrun 2: backfill {backfill_id} of {last_month}, 30 daily windows, same code");
    let backfill = ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id(format!("backfill__{backfill_id}"))
        .run_kind(RunKind::Backfill)
        .backfill_id(backfill_id)
        .window(last_month)
        .build()?;
    let mut backfill_delivered = 0;
    let windows: Vec<Window> = last_month.split(TimeDelta::days(1))?.collect();
    for window in &windows {
        backfill_delivered += run_pipeline(&backfill.with_window(*window), &summaries).await?;
    }
    journal.flush()?;

    let files = std::fs::read_dir(&outbox)?.count();
    let mut would_have_sent = 0;
    let mut recipients = BTreeSet::new();
    for record in JournalReader::open(&journal_path)? {
        let record = record?;
        if record.backfill_id.as_deref() == Some(backfill_id) && record.decision == JournalDecision::Suppressed {
            would_have_sent += 1;
            recipients.insert(record.effect.target);
        }
    }

    println!("\nsummary");
    println!("  current window: delivered {delivered} summaries ({files} files in {})", outbox.display());
    println!(
        "  backfill {backfill_id} ({} windows): would have sent {would_have_sent} file drops to {} recipients; delivered {backfill_delivered}",
        windows.len(),
        recipients.len(),
    );
    println!("journal: {}", journal_path.display());
    anyhow::ensure!(backfill_delivered == 0, "the backfill delivered {backfill_delivered} effects");
    anyhow::ensure!(files == CUSTOMERS.len(), "expected {} files, found {files}", CUSTOMERS.len());
    Ok(())
}
