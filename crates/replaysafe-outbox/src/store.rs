//! The store trait: what a worker and an operator need from a database.
//!
//! Staging is not part of it: it runs inside the caller's own transaction, whose type
//! belongs to the backend (`rusqlite::Transaction` for [`crate::sqlite::stage`]).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use replaysafe_core::journal::{
    JournalDecision, JournalError, JournalRecord, RecordEffect, RecordOptIn, RecordWindow,
};
use replaysafe_core::{Journal, OptIn, TargetRedaction, TrustedApprovers};

use crate::row::RowContext;
use crate::{OutboxError, Status};

/// A claimed row, as a worker receives it (a dry run's rows look the same, with no claim
/// token).
#[derive(Clone, Debug)]
pub struct ClaimedRow {
    pub(crate) key: String,
    pub(crate) route: String,
    pub(crate) effect_kind: String,
    pub(crate) message_type: String,
    pub(crate) target: String,
    pub(crate) summary: Option<String>,
    pub(crate) context: RowContext,
    pub(crate) effect: String,
    pub(crate) payload_sha256: String,
    pub(crate) payload_bytes: i64,
    pub(crate) attempts: u32,
    pub(crate) claim_token: String,
    /// Claimed again after a lease ran out: the earlier claim's attempt may have begun
    /// with no outcome recorded.
    pub(crate) reclaimed: bool,
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

    /// Whether the row was claimed again after a lease ran out, so an earlier attempt may
    /// have reached the receiver with no outcome recorded.
    pub fn reclaimed(&self) -> bool {
        self.reclaimed
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
#[non_exhaustive]
pub struct RowSummary {
    /// Idempotency key.
    pub key: String,
    /// Route.
    pub route: String,
    /// Pipeline.
    pub pipeline: String,
    /// The run that staged it.
    pub run_id: String,
    /// That run's kind.
    pub run_kind: String,
    /// That run's backfill, if any.
    pub backfill_id: Option<String>,
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
    /// SHA-256 of the staged payload, hex.
    pub payload_sha256: String,
    /// Size of the staged payload in bytes.
    pub payload_bytes: u64,
    /// The effect's summary, as redacted at staging.
    pub summary: Option<String>,
    /// Whether the row carries an approval document (its own opt-in).
    pub has_opt_in: bool,
    /// The ordering key it was staged with: delivered after the earlier rows of that key.
    pub ordering_key: Option<String>,
}

/// An operator's action on rows (`retry_dead`, `resend`): who asked, why, and, when the
/// rows are a replay's or stale, the approval that lifts them.
///
/// The reason and the operator are recorded (in the audit table and the journal) but lift
/// nothing: they are free text. Only an approval document ([`OperatorAction::with_opt_in`],
/// a `replaysafe-opt-in/1` file, signed where trusted approvers are configured) can
/// lift a replay's or a stale row's suppression, and the worker checks it again at
/// delivery exactly as `replaysafe send` checks an opt-in file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorAction {
    pub(crate) reason: String,
    pub(crate) by: String,
    pub(crate) opt_in: Option<OptIn>,
    pub(crate) document: Option<String>,
}

impl OperatorAction {
    /// An action; `reason` and `by` must be non-empty ([`OutboxError::Invalid`] names the field).
    pub fn new(reason: impl Into<String>, by: impl Into<String>) -> Result<Self, OutboxError> {
        let (reason, by) = (reason.into(), by.into());
        if reason.trim().is_empty() {
            return Err(OutboxError::invalid("reason", "must not be empty"));
        }
        if by.trim().is_empty() {
            return Err(OutboxError::invalid("approved_by", "must not be empty"));
        }
        for (field, text) in [("reason", &reason), ("approved_by", &by)] {
            if text.chars().any(char::is_control) {
                return Err(OutboxError::invalid(
                    field,
                    "must not contain control characters",
                ));
            }
        }
        Ok(OperatorAction {
            reason,
            by,
            opt_in: None,
            document: None,
        })
    }

    /// Adds the approval that lifts a replay's or stale row: it becomes the rows' opt-in,
    /// stored whole (signature included) and checked again by the worker. An opt-in
    /// without a file form (no pipeline, or no backfill id or run-id pattern) is
    /// [`OutboxError::Invalid`] for `opt_in`.
    pub fn with_opt_in(mut self, opt_in: OptIn) -> Result<Self, OutboxError> {
        let document = opt_in.to_file_json().map_err(|error| {
            OutboxError::invalid(
                "opt_in",
                format!("an outbox row stores the whole approval document: {error}"),
            )
        })?;
        self.opt_in = Some(opt_in);
        self.document = Some(document);
        Ok(self)
    }

    /// Why.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Who asked.
    pub fn by(&self) -> &str {
        &self.by
    }

    /// The approval document, when one was given.
    pub fn opt_in(&self) -> Option<&OptIn> {
        self.opt_in.as_ref()
    }

    /// Journals the action on each of `rows` (as `retry_dead` or `resend` returned them):
    /// one `requeued` record a row, reasons `operator_retry` or `operator_resend`, the
    /// note saying who asked and why, and the approval document's whole scope as its
    /// `opt_in` (its signer named when `trusted` lists the key; its targets shown by
    /// domain only). Every record reaches the operating system before this returns.
    pub fn journal(
        &self,
        journal: &dyn Journal,
        command: OperatorCommand,
        rows: &[RowSummary],
        trusted: Option<&TrustedApprovers>,
        now: DateTime<Utc>,
    ) -> Result<(), JournalError> {
        let opt_in = self.opt_in.as_ref().map(|opt_in| {
            let mut record = RecordOptIn::from(opt_in);
            if let Some(signer) = trusted.and_then(|trusted| trusted.name_of(opt_in)) {
                record.signer = Some(signer.to_owned());
            }
            for target in record.targets.iter_mut().flatten() {
                *target = TargetRedaction::DomainOnly.apply(target).into_owned();
            }
            record
        });
        let note = format!("{} by {}: {}", command.as_str(), self.by, self.reason);
        let time = |text: &str| {
            DateTime::parse_from_rfc3339(text)
                .map(|time| time.with_timezone(&Utc))
                .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
        };
        for row in rows {
            let effect = RecordEffect::new(
                &row.effect_kind,
                &row.message_type,
                &row.target,
                &row.key,
                &row.payload_sha256,
                row.payload_bytes,
            )
            .with_summary(row.summary.clone());
            let record = JournalRecord::new(
                now,
                JournalDecision::Requeued,
                &row.pipeline,
                &row.run_id,
                &row.run_kind,
                RecordWindow::new(time(&row.window_start), time(&row.window_end)),
                effect,
            )
            .with_reasons([command.reason()])
            .with_backfill_id(row.backfill_id.clone())
            .with_opt_in(opt_in.clone())
            .with_note(Some(note.clone()));
            journal.append(&record.entry())?;
        }
        journal.flush()
    }

    /// The audit table's `expires_at`: the approval's expiry, or empty without one.
    pub(crate) fn expires_text(&self) -> String {
        self.opt_in
            .as_ref()
            .map(|opt_in| replaysafe_core::rfc3339(opt_in.expires_at()))
            .unwrap_or_default()
    }
}

/// Which operator command put rows back to be delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperatorCommand {
    /// Dead rows retried ([`OutboxStore::retry_dead`]).
    Retry,
    /// Delivered or suppressed rows sent again ([`OutboxStore::resend`]).
    Resend,
}

impl OperatorCommand {
    /// `retry` or `resend`, as the audit table and the journal's note say it.
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorCommand::Retry => "retry",
            OperatorCommand::Resend => "resend",
        }
    }

    /// The journal reason: `operator_retry` or `operator_resend`.
    pub fn reason(self) -> &'static str {
        match self {
            OperatorCommand::Retry => "operator_retry",
            OperatorCommand::Resend => "operator_resend",
        }
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

/// A route's circuit as the workers recorded it in the database (`replaysafe_outbox_circuits`),
/// shared by every worker of the outbox and shown by `outbox status`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitRecord {
    /// The route.
    pub route: String,
    /// Whether its rows wait.
    pub open: bool,
    /// The route's consecutive transient failures, counted by every worker: while open,
    /// those that opened it and any since (deliveries already under way, failed probes);
    /// while closed, those so far (0 after an answer).
    pub failures: u32,
    /// When it opened, while open.
    pub opened_at: Option<DateTime<Utc>>,
    /// When the next probe is due, while open.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// When a worker last opened, probed or closed it (or counted the first failure of a
    /// route it has no row for yet).
    pub updated_at: DateTime<Utc>,
}

impl CircuitRecord {
    /// An open circuit: opened at `now` (or kept open by a failed probe) after `failures`
    /// consecutive transient failures, next probe at `next_probe_at`.
    pub fn opened(
        route: impl Into<String>,
        failures: u32,
        now: DateTime<Utc>,
        next_probe_at: DateTime<Utc>,
    ) -> Self {
        CircuitRecord {
            route: route.into(),
            open: true,
            failures,
            opened_at: Some(now),
            next_probe_at: Some(next_probe_at),
            updated_at: now,
        }
    }

    /// A closed circuit, closed at `now`.
    pub fn closed(route: impl Into<String>, now: DateTime<Utc>) -> Self {
        CircuitRecord {
            route: route.into(),
            open: false,
            failures: 0,
            opened_at: None,
            next_probe_at: None,
            updated_at: now,
        }
    }
}

/// Pending rows that wait for an earlier row of their ordering key (one claimed, or one
/// placed before them still pending), for both databases.
pub(crate) const WAITING_IN_KEY_ORDER_SQL: &str = "SELECT COUNT(*) FROM replaysafe_outbox r \
    WHERE r.status = 'pending' AND r.ordering_key IS NOT NULL AND EXISTS ( \
    SELECT 1 FROM replaysafe_outbox o WHERE o.ordering_key = r.ordering_key \
    AND o.status IN ('pending', 'claimed') AND o.idempotency_key <> r.idempotency_key \
    AND (o.status = 'claimed' OR o.ordering_seq < r.ordering_seq))";

/// The circuits, for both databases.
pub(crate) const CIRCUITS_SQL: &str = "SELECT route, state, failures, opened_at_ms, \
    next_probe_at_ms, updated_at_ms FROM replaysafe_outbox_circuits ORDER BY route";

/// Records a circuit (`$1` route … `$6` updated at; `$N` is `?N` on SQLite). An opening
/// of a circuit already open keeps its first `opened_at_ms`.
pub(crate) const RECORD_CIRCUIT_SQL: &str = "INSERT INTO replaysafe_outbox_circuits \
    (route, state, failures, opened_at_ms, next_probe_at_ms, updated_at_ms) \
    VALUES ($1, $2, $3, $4, $5, $6) \
    ON CONFLICT (route) DO UPDATE SET state = excluded.state, failures = excluded.failures, \
    opened_at_ms = CASE WHEN replaysafe_outbox_circuits.state = 'open' AND excluded.state = 'open' \
        THEN replaysafe_outbox_circuits.opened_at_ms ELSE excluded.opened_at_ms END, \
    next_probe_at_ms = excluded.next_probe_at_ms, updated_at_ms = excluded.updated_at_ms";

/// Counts one more consecutive transient failure of a route (`$1` route, `$2` now) and
/// returns the count; the first failure of a route makes its row, closed.
pub(crate) const COUNT_ROUTE_FAILURE_SQL: &str = "INSERT INTO replaysafe_outbox_circuits \
    (route, state, failures, updated_at_ms) VALUES ($1, 'closed', 1, $2) \
    ON CONFLICT (route) DO UPDATE SET failures = replaysafe_outbox_circuits.failures + 1 \
    RETURNING failures";

/// A count of failures as a database returns it; one out of range reads as the most a
/// count can be, which keeps a circuit open rather than closed.
pub(crate) fn failure_count(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Clears a closed circuit's count of consecutive failures (`$1` route) after an answer;
/// an open circuit's count stays, for its probe's answer to close it.
pub(crate) const CLEAR_ROUTE_FAILURES_SQL: &str = "UPDATE replaysafe_outbox_circuits \
    SET failures = 0 WHERE route = $1 AND state = 'closed' AND failures > 0";

/// Takes an open circuit's due probe (`$1` route, `$2` now, `$3` the next probe).
pub(crate) const TAKE_PROBE_SQL: &str = "UPDATE replaysafe_outbox_circuits \
    SET next_probe_at_ms = $3, updated_at_ms = $2 \
    WHERE route = $1 AND state = 'open' AND next_probe_at_ms <= $2";

/// A circuit as columns.
pub(crate) struct CircuitValues {
    pub(crate) route: String,
    pub(crate) state: &'static str,
    pub(crate) failures: i32,
    pub(crate) opened_at_ms: Option<i64>,
    pub(crate) next_probe_at_ms: Option<i64>,
    pub(crate) updated_at_ms: i64,
}

impl CircuitValues {
    pub(crate) fn of(circuit: &CircuitRecord) -> Self {
        CircuitValues {
            route: circuit.route.clone(),
            state: if circuit.open { "open" } else { "closed" },
            failures: i32::try_from(circuit.failures).unwrap_or(i32::MAX),
            opened_at_ms: circuit.opened_at.map(crate::row::millis),
            next_probe_at_ms: circuit.next_probe_at.map(crate::row::millis),
            updated_at_ms: crate::row::millis(circuit.updated_at),
        }
    }
}

/// A circuit from its columns; a state other than `open` reads as closed.
pub(crate) fn circuit_record(
    route: String,
    state: String,
    failures: i32,
    opened_at_ms: Option<i64>,
    next_probe_at_ms: Option<i64>,
    updated_at_ms: i64,
) -> CircuitRecord {
    CircuitRecord {
        route,
        open: state == "open",
        failures: failure_count(failures.into()),
        opened_at: opened_at_ms.map(crate::row::from_millis),
        next_probe_at: next_probe_at_ms.map(crate::row::from_millis),
        updated_at: crate::row::from_millis(updated_at_ms),
    }
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

    /// The row of one key, if there is one.
    async fn get(&self, key: &str) -> Result<Option<RowSummary>, OutboxError>;

    /// Rows a claim would take at `now` (pending and due, or claimed with the lease over)
    /// of `routes`, in key order after `after`, at most `limit`, without claiming them or
    /// changing anything: what a dry run looks at. Their claim token is empty.
    async fn peek_due(
        &self,
        routes: &[String],
        after: Option<&str>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> Result<Vec<ClaimedRow>, OutboxError>;

    /// Puts dead rows back to pending with a fresh attempt count; audited. `None` retries
    /// every dead row. The action's approval document, if any, becomes the rows' opt-in;
    /// without one a row keeps its own. Returns the rows changed, as they now stand.
    async fn retry_dead(
        &self,
        keys: Option<&[String]>,
        action: &OperatorAction,
        now: DateTime<Utc>,
    ) -> Result<Vec<RowSummary>, OutboxError>;

    /// Sends delivered (or suppressed) rows again; audited. The action's approval
    /// document, if any, becomes the rows' opt-in, checked again at delivery; the reason
    /// alone lifts nothing, so a replay's or stale row without an approval is suppressed
    /// again by the worker. Returns the rows changed, as they now stand.
    async fn resend(
        &self,
        keys: &[String],
        action: &OperatorAction,
        now: DateTime<Utc>,
    ) -> Result<Vec<RowSummary>, OutboxError>;

    /// Deletes delivered rows delivered more than `older_than` before `now`; returns how
    /// many. A purged key can be staged and sent again, so `older_than` shorter than the
    /// longest max age (plus clock skew) of the delivered rows is [`OutboxError::Invalid`]
    /// for `older_than`, and nothing is deleted.
    async fn purge_delivered(
        &self,
        older_than: Duration,
        now: DateTime<Utc>,
    ) -> Result<u64, OutboxError>;

    /// Totals kept across processes.
    async fn counters(&self) -> Result<StoreCounters, OutboxError>;

    /// Pending rows that wait for an earlier row of their ordering key: not claimable
    /// until it is delivered, suppressed or dead. The default, for a store without
    /// ordering keys, has none.
    async fn waiting_in_key_order(&self) -> Result<u64, OutboxError> {
        Ok(0)
    }

    /// The circuits of routes with a breaker, as workers recorded them, by route name.
    /// The default, for a store without a circuits table, has none: each worker's
    /// circuits are then its own.
    async fn circuits(&self) -> Result<Vec<CircuitRecord>, OutboxError> {
        Ok(Vec::new())
    }

    /// Records a circuit's change: opened (an opening keeps the earliest `opened_at` of a
    /// circuit already open, so a failed probe does not restart it), or closed.
    async fn record_circuit(&self, circuit: &CircuitRecord) -> Result<(), OutboxError> {
        let _ = circuit;
        Ok(())
    }

    /// Counts one more consecutive transient failure of `route` for every worker of the
    /// outbox, at `now`, and returns the count, so that the circuit opens after the
    /// breaker's number of failures whichever workers saw them. The default, for a store
    /// without a circuits table, returns `None`: each worker counts its own.
    async fn count_route_failure(
        &self,
        route: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u32>, OutboxError> {
        let _ = (route, now);
        Ok(None)
    }

    /// Clears `route`'s count of consecutive failures after an answer from its receiver,
    /// while its circuit is closed (a probe's answer closes an open one with
    /// [`OutboxStore::record_circuit`]).
    async fn clear_route_failures(&self, route: &str) -> Result<(), OutboxError> {
        let _ = route;
        Ok(())
    }

    /// Takes the probe of `route`'s open circuit for this worker: `true` when the circuit
    /// is open with its probe due at `now`, its next probe then moved to `next` in the same
    /// statement, so that one worker of the outbox sends the probe; `false` when another
    /// took it or the circuit is not open. The default says `true` (each worker probes).
    async fn take_probe(
        &self,
        route: &str,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
    ) -> Result<bool, OutboxError> {
        let _ = (route, now, next);
        Ok(true)
    }

    /// Takes a token of `route`'s rate shared by the workers of the outbox: a bucket of
    /// `capacity` tokens refilled at `per_second`, kept in the database, refilled to `now`
    /// and taken from in one statement. Returns the tokens left: below zero, the token is
    /// owed (`-tokens / per_second` seconds away) to a delivery that waits for it, or that
    /// gives it back ([`OutboxStore::give_back_shared_token`]) when it will not wait so
    /// long. The default, for a store without a rates table, always has a token at hand.
    async fn take_shared_token(
        &self,
        route: &str,
        per_second: f64,
        capacity: f64,
        now: DateTime<Utc>,
    ) -> Result<f64, OutboxError> {
        let _ = (route, per_second, now);
        Ok(capacity - 1.0)
    }

    /// Gives back a shared token taken for a row that was then not sent (the bucket holds
    /// at most `capacity`).
    async fn give_back_shared_token(&self, route: &str, capacity: f64) -> Result<(), OutboxError> {
        let _ = (route, capacity);
        Ok(())
    }

    /// Waits until rows may be due, at most `within`: an idle worker calls it between
    /// passes. The default sleeps `within` (polling); a backend that hears of new rows
    /// (PostgreSQL's `LISTEN`) returns as soon as one is staged.
    async fn wait_for_work(&self, within: Duration) {
        tokio::time::sleep(within).await;
    }
}

/// Checks a purge's age against the longest max age plus clock skew of the delivered
/// rows (`longest_ms`, none when there is no delivered row), and gives the cut-off.
pub(crate) fn purge_cutoff(
    older_than: Duration,
    longest_ms: Option<i64>,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, OutboxError> {
    let older_than_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    if let Some(longest) = longest_ms.filter(|longest| older_than_ms < *longest) {
        return Err(OutboxError::invalid(
            "older_than",
            format!(
                "{} s is shorter than the longest max age plus clock skew of the delivered rows ({} s): \
                 a purged key could be staged again by a current run and sent twice",
                older_than.as_secs(),
                longest / 1000
            ),
        ));
    }
    Ok(now
        .checked_sub_signed(chrono::TimeDelta::milliseconds(older_than_ms))
        .unwrap_or(DateTime::<Utc>::MIN_UTC))
}
