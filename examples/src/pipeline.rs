//! One run of the daily orders pipeline for one window, and the contexts that say what
//! kind of run it is.
//!
//! The same [`run_window`] serves the scheduled run, its retry and every window of a
//! backfill: the rule ("use the same tested transformation and write path as
//! the scheduled pipeline") applied to side effects too. Only the [`ReplayContext`]
//! differs, and the gate reads it.

use chrono::TimeDelta;
use replaysafe::{EffectKind, RecencyPolicy, ReplayContext, RunId, RunKind, Window, rfc3339};

use crate::orders::{CUSTOMERS, Interrupted, Load, OrdersDb};
use crate::publish::{DailySummary, Landing, Publishers};

/// The pipeline's name: in every journal record and every idempotency key.
pub(crate) const PIPELINE: &str = "daily_orders";

/// How old a window may be before its effects are stale: one day for every kind.
///
/// replaysafe's defaults are 6 h (1 h for alerts): a daily window that closed at
/// midnight would be stale by the afternoon. The demo runs at any hour, so it allows a
/// day, and yesterday's window is current whenever today it runs. Every older window
/// is stale, whatever the run kind.
pub(crate) fn recency() -> anyhow::Result<RecencyPolicy> {
    let mut policy = RecencyPolicy::default();
    for kind in EffectKind::BUILT_IN {
        policy = policy.with_max_age(kind, TimeDelta::days(1))?;
    }
    Ok(policy)
}

/// The scheduled run of `window`, as an orchestrator would start it just after the
/// window closed: run id `scheduled__<window end>`.
pub(crate) fn scheduled(window: Window) -> anyhow::Result<ReplayContext> {
    Ok(ReplayContext::builder()
        .pipeline(PIPELINE)
        .run_id(format!("scheduled__{}", rfc3339(window.end())))
        .run_kind(RunKind::Scheduled)
        .window(window)
        .recency(recency()?)
        .build()?)
}

/// The second attempt of `cx`: a new run id (`…__attempt_2`), run kind `retry`, the same
/// window, so the same idempotency keys.
pub(crate) fn retry_of(cx: &ReplayContext) -> anyhow::Result<ReplayContext> {
    let run_id = RunId::new(format!("{}__attempt_2", cx.run_id()))?;
    Ok(cx.with_run_id(run_id).with_run_kind(RunKind::Retry))
}

/// One window of backfill `backfill_id`: run kind `backfill`, run id
/// `backfill__<id>__<window start>`.
pub(crate) fn backfill(backfill_id: &str, window: Window) -> anyhow::Result<ReplayContext> {
    Ok(ReplayContext::builder()
        .pipeline(PIPELINE)
        .run_id(format!(
            "backfill__{backfill_id}__{}",
            rfc3339(window.start())
        ))
        .run_kind(RunKind::Backfill)
        .backfill_id(backfill_id)
        .window(window)
        .recency(recency()?)
        .build()?)
}

/// What one successful run did.
#[derive(Debug)]
pub(crate) struct WindowRun {
    /// The load of the curated table.
    pub(crate) load: Load,
    /// Effects delivered, and where they landed (nothing in a backfill).
    pub(crate) landings: Vec<Landing>,
}

/// Runs the pipeline for `cx`'s window: ledger entry, chunked checkpointed load, daily
/// summary published through the guarded clients, terminal ledger status.
///
/// Publishing happens only after the load is complete, so a failed attempt tells no
/// one anything. With `fail_after_first_chunk` the load stops after its first chunk with
/// an [`Interrupted`] error, and the ledger records the run as failed.
pub(crate) async fn run_window(
    db: &OrdersDb,
    publishers: &Publishers,
    cx: &ReplayContext,
    fail_after_first_chunk: bool,
) -> anyhow::Result<WindowRun> {
    db.start_run(cx)?;
    let mut rows = 0;
    let result = async {
        let load = db.load_window(cx, fail_after_first_chunk)?;
        rows = load.rows;
        let summary = summarize(db, cx)?;
        let landings = publishers.publish(db, cx, &summary).await?;
        anyhow::Ok(WindowRun { load, landings })
    }
    .await;
    let error = result.as_ref().err().map(|error| {
        if let Some(interrupted) = error.downcast_ref::<Interrupted>() {
            rows = interrupted.rows;
        }
        replaysafe::error_chain(error.as_ref())
    });
    db.finish_run(cx, rows, error.as_deref())?;
    result
}

/// The window's daily summary, from the curated table.
fn summarize(db: &OrdersDb, cx: &ReplayContext) -> anyhow::Result<DailySummary> {
    let window = *cx.window();
    Ok(DailySummary {
        window,
        totals: db.totals(&window)?,
        customer_csv: CUSTOMERS
            .iter()
            .map(|c| db.csv(&window, Some(c.id)))
            .collect::<anyhow::Result<_>>()?,
        csv: db.csv(&window, None)?,
        loaded_after_window_end: cx.now() - window.end(),
    })
}
