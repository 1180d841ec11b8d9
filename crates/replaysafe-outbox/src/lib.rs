//! A transactional outbox for replaysafe: effects are staged as rows in the same
//! database transaction as the data they report on, and delivery workers send the
//! committed rows, once per idempotency key.
//!
//! Sending from inside the compute step loses an effect when the process dies after the
//! tables commit and before the send, and sends it twice when it dies after the send and
//! before the commit. With the outbox, compute stages a row in its own transaction, and
//! a worker delivers it later, through the same [`Guard`](replaysafe_core::Guard) as
//! ever.
//!
//! - **Staging** ([`sqlite::stage`]) is an upsert keyed by the effect's idempotency key:
//!   a replay restages the row and never adds one, an older source version never
//!   overwrites a newer one, a delivered row is not sent again (a changed payload marks
//!   it `changed_after_delivery`; only an audited [`OutboxStore::resend`] sends it again).
//! - **The gate runs twice**: at staging (a replay's row is stored `suppressed` and
//!   journaled "would have sent") and at delivery, on the row's own context, so a row
//!   that went stale while the workers were down is suppressed rather than sent late.
//! - **Workers** ([`Worker`]) claim due rows with a claim token and a lease, deliver, and
//!   complete conditionally on the token; a stale completion is rejected and counted.
//! - **Operations** ([`OutboxStore`]): counts, oldest pending age, listing, audited retry
//!   of dead rows, audited resend, purge.
//!
//! The table is a documented interface (`docs/reference/outbox.md`): a task in another
//! language can stage a row with one `INSERT … ON CONFLICT` ([`sqlite::STAGE_SQL`]).
//!
//! # Example
//!
//! ```
//! # use async_trait::async_trait;
//! # use replaysafe_core::*;
//! # #[derive(Debug)] struct Printer;
//! # #[derive(Debug, thiserror::Error)] #[error("printer jammed")] struct Jammed;
//! # impl Classify for Jammed { fn is_transient(&self) -> bool { true } }
//! # #[async_trait] impl EffectClient for Printer {
//! #     type Effect = String; type Receipt = (); type Error = Jammed;
//! #     fn describe(&self, _cx: &ReplayContext, text: &String) -> Result<EffectDescription, Jammed> {
//! #         Ok(EffectDescription::new(EffectKind::Webhook, "note", "stdout").map_err(|_| Jammed)?.with_payload(text.as_bytes()))
//! #     }
//! #     async fn deliver(&self, _d: &Delivery<'_>, _text: &String) -> Result<(), Jammed> { Ok(()) }
//! # }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use chrono::{TimeDelta, Utc};
//! use replaysafe_outbox::{Route, Status, Worker, sqlite};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("pipeline.db");
//! let outbox = sqlite::SqliteOutbox::open(&path)?; // creates the tables
//! let journal = std::sync::Arc::new(MemoryJournal::new()); // a pipeline uses cx.open_journal()
//! let notes = Route::new("notes", Guard::with_shared_journal(Printer, journal))?;
//!
//! // Compute: the curated rows and the effect commit together.
//! let mut conn = rusqlite::Connection::open(&path)?;
//! sqlite::configure(&conn)?;
//! let now = Utc::now();
//! let cx = ReplayContext::builder()
//!     .pipeline("daily_orders").run_id("scheduled__today").run_kind(RunKind::Scheduled)
//!     .window(Window::new(now - TimeDelta::hours(1), now)?)
//!     .build()?;
//! let tx = conn.transaction()?;
//! tx.execute_batch("CREATE TABLE IF NOT EXISTS orders_daily (day TEXT, total INTEGER)")?;
//! let staged = sqlite::stage(&tx, &cx, &notes, &"42 orders".to_string())?;
//! tx.commit()?;
//! assert_eq!(staged.status, Status::Pending);
//!
//! // Delivery: a worker sends committed rows through the route.
//! let worker = Worker::builder(outbox).add_route(notes).build()?;
//! assert_eq!(worker.drain().await?.delivered, 1);
//! # Ok(()) }
//! ```
//!
//! # Errors
//!
//! Every operation returns [`OutboxError`]; its message says what was being done and
//! its source says why. A newer schema than this crate knows is
//! [`OutboxError::SchemaTooNew`], and nothing is changed.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod error;
mod flow;
mod journal;
#[cfg(feature = "postgres")]
pub mod named;
#[cfg(feature = "postgres")]
pub mod postgres;
mod route;
mod row;
pub mod sqlite;
mod store;
mod worker;

pub use error::OutboxError;
pub use flow::{BreakerConfig, Circuit, FlowControl, RateScope, parse_rate};
pub use journal::JournalQuery;
pub use route::{MAX_ROUTE_NAME, Route, check_route_name};
pub use row::{
    MAX_ORDERING_KEY, SourceVersion, StageOptions, StageParam, Staged, Status, stage_params,
};
pub use rusqlite;
pub use store::{
    CircuitRecord, ClaimRequest, ClaimedRow, Completion, CompletionResult, OperatorAction,
    OperatorCommand, OutboxStore, RowSummary, StatusCount, StoreCounters,
};
pub use worker::{
    DEFAULT_BATCH, DEFAULT_LEASE, DEFAULT_POLL, Worker, WorkerBuilder, WorkerStats, default_retry,
};
#[cfg(feature = "postgres")]
pub use {deadpool_postgres, tokio_postgres};
