//! The store trait: what a worker and an operator need from a database.
//!
//! Staging is not part of it: it runs inside the caller's own transaction, whose type
//! belongs to the backend (`rusqlite::Transaction` for [`crate::sqlite::stage`]).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::row::RowContext;
use crate::{OutboxError, Status};

/// A claimed row, as a worker receives it.
#[derive(Clone, Debug)]
pub struct ClaimedRow {
    pub(crate) key: String,
    pub(crate) route: String,
    pub(crate) effect_kind: String,
    pub(crate) context: RowContext,
    pub(crate) effect: String,
    pub(crate) payload_sha256: String,
    pub(crate) attempts: u32,
    pub(crate) claim_token: String,
}

impl ClaimedRow {
    /// The row's idempotency key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The route name.
    pub fn route(&self) -> &str {
        &self.route
    }

    /// Attempts so far, this claim included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The claim token a completion must present.
    pub fn claim_token(&self) -> &str {
        &self.claim_token
    }
}

/// How a claimed row ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Delivered; `payload_sha256` is the digest of what was sent.
    Delivered {
        /// SHA-256 of the payload that was delivered, hex.
        payload_sha256: String,
    },
    /// Suppressed by the gate at delivery, with its reasons (snake_case, comma-separated).
    Suppressed {
        /// The gate's reasons.
        reasons: String,
    },
    /// A transient failure: try again at `next_attempt_at`.
    Retry {
        /// When the row becomes due again.
        next_attempt_at: DateTime<Utc>,
        /// The error, redacted.
        error: String,
    },
    /// A permanent failure, or the last attempt failed: dead-lettered.
    Dead {
        /// The error, redacted.
        error: String,
    },
}

/// Whether a completion was applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionResult {
    /// The row was still claimed with this token; it now holds the outcome.
    Applied,
    /// The lease was taken over by another claim: the outcome was rejected, counted, and
    /// the newer claimant's outcome stands.
    Stale,
}

/// Which rows a worker claims.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// Only rows of these routes.
    pub routes: Vec<String>,
    /// At most this many rows.
    pub limit: u32,
    /// How long the claim holds before another worker may take the rows over.
    pub lease: Duration,
    /// Now, by the worker's clock.
    pub now: DateTime<Utc>,
}

/// Rows by status, route and pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusCount {
    /// The status.
    pub status: Status,
    /// The route.
    pub route: String,
    /// The pipeline.
    pub pipeline: String,
    /// How many rows.
    pub rows: u64,
}

/// A row as an operator sees it: no effect body, the target redacted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSummary {
    /// Idempotency key.
    pub key: String,
    /// Route.
    pub route: String,
    /// Pipeline.
    pub pipeline: String,
    /// Effect kind.
    pub effect_kind: String,
    /// Message type.
    pub message_type: String,
    /// Target as the route's redaction policy shows it.
    pub target: String,
    /// Window start, RFC 3339.
    pub window_start: String,
    /// Window end, RFC 3339.
    pub window_end: String,
    /// Status.
    pub status: Status,
    /// The gate's last reasons.
    pub reasons: String,
    /// Attempts made.
    pub attempts: u32,
    /// The last error, redacted.
    pub last_error: Option<String>,
    /// Whether the staged payload changed after it was delivered.
    pub changed_after_delivery: bool,
}

/// Who asked for an operator action, why, and until when it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approval {
    /// Why.
    pub reason: String,
    /// Who approved.
    pub approved_by: String,
    /// When the approval stops enabling anything.
    pub expires_at: DateTime<Utc>,
}

impl Approval {
    /// An approval; `reason` and `approved_by` must be non-empty ([`OutboxError::Invalid`] names the field).
    pub fn new(
        reason: impl Into<String>,
        approved_by: impl Into<String>,
        expires_at: DateTime<Utc>,
    ) -> Result<Self, OutboxError> {
        let (reason, approved_by) = (reason.into(), approved_by.into());
        if reason.trim().is_empty() {
            return Err(OutboxError::invalid("reason", "must not be empty"));
        }
        if approved_by.trim().is_empty() {
            return Err(OutboxError::invalid("approved_by", "must not be empty"));
        }
        Ok(Approval {
            reason,
            approved_by,
            expires_at,
        })
    }
}

/// Totals kept by the store across processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Completions rejected because another claim had taken the row over.
    pub stale_completions: u64,
    /// Rows claimed again after a lease ran out.
    pub reclaimed: u64,
}

/// A database that holds the outbox table: claims, completions and operations.
///
/// Implementations: [`crate::sqlite::SqliteOutbox`], and `postgres::PostgresOutbox` with
/// the `postgres` feature. A backend for another database
/// implements this trait and a `stage` over its own transaction type; workers and
/// operations do not change.
#[async_trait]
pub trait OutboxStore: Send + Sync + fmt::Debug {
    /// Claims due rows in one short transaction: pending rows whose `next_attempt_at` has
    /// come, and claimed rows whose lease ran out. Each gets a fresh claim token and a
    /// lease, and its attempt count goes up by one.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedRow>, OutboxError>;

    /// Completes a claim, conditionally on its token; a stale one changes nothing but a counter.
    async fn complete(
        &self,
        row: &ClaimedRow,
        completion: Completion,
        now: DateTime<Utc>,
    ) -> Result<CompletionResult, OutboxError>;

    /// Gives claimed rows back without an attempt (a worker stopping before it began them).
    async fn release(&self, rows: &[ClaimedRow]) -> Result<(), OutboxError>;

    /// Rows by status, route and pipeline.
    async fn counts(&self) -> Result<Vec<StatusCount>, OutboxError>;

    /// How long the oldest pending row has waited since it was staged.
    async fn oldest_pending_age(&self, now: DateTime<Utc>)
    -> Result<Option<Duration>, OutboxError>;

    /// Claimed rows whose lease is over at `now`: their worker stopped mid-delivery, so
    /// a delivery may or may not have been made; the next claim sends them again under
    /// the same key.
    async fn in_doubt(&self, now: DateTime<Utc>) -> Result<u64, OutboxError>;

    /// Rows of one status, oldest first.
    async fn list(&self, status: Status, limit: u32) -> Result<Vec<RowSummary>, OutboxError>;

    /// Puts dead rows back to pending with a fresh attempt count; audited. `None` retries
    /// every dead row. Returns how many rows changed.
    async fn retry_dead(
        &self,
        keys: Option<&[String]>,
        approval: &Approval,
        now: DateTime<Utc>,
    ) -> Result<u64, OutboxError>;

    /// Sends delivered rows again; audited. The approval becomes the rows' opt-in, so the
    /// delivery gate lifts `stale_window` and replay reasons until it expires, and the
    /// delivery is journaled with it. Returns how many rows changed.
    async fn resend(
        &self,
        keys: &[String],
        approval: &Approval,
        now: DateTime<Utc>,
    ) -> Result<u64, OutboxError>;

    /// Deletes delivered rows delivered before `cutoff`; returns how many.
    async fn purge_delivered(&self, cutoff: DateTime<Utc>) -> Result<u64, OutboxError>;

    /// Totals kept across processes.
    async fn counters(&self) -> Result<StoreCounters, OutboxError>;

    /// Waits until rows may be due, at most `within`: an idle worker calls it between
    /// passes. The default sleeps `within` (polling); a backend that hears of new rows
    /// (PostgreSQL's `LISTEN`) returns as soon as one is staged.
    async fn wait_for_work(&self, within: Duration) {
        tokio::time::sleep(within).await;
    }
}
