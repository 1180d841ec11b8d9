//! The SQLite backend: the embedded default.
//!
//! Staging runs inside the caller's own [`rusqlite::Transaction`], so the effect commits
//! or rolls back with the data it reports on. Workers and operators use
//! [`SqliteOutbox`], which holds its own connection and never blocks an async task's
//! thread: on a multi-threaded tokio runtime a statement runs in place through
//! [`tokio::task::block_in_place`] (the thread's other tasks move to another thread
//! meanwhile), on a current-thread runtime it runs on the blocking pool.

mod journal;
pub(crate) mod schema;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use replaysafe_core::{EffectClient, ReplayContext};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use journal::{JOURNAL_SCHEMA, SqliteJournal, read_journal};
pub use schema::{SCHEMA_VERSION, check_schema, migrate, schema_version};

use crate::row::{RowContext, StagedRow, from_millis, millis, prepare};
use crate::store::{
    CIRCUITS_SQL, CLEAR_ROUTE_FAILURES_SQL, COUNT_ROUTE_FAILURE_SQL, CircuitRecord, CircuitValues,
    ClaimRequest, ClaimedRow, Completion, CompletionResult, OperatorAction, OutboxStore,
    RECORD_CIRCUIT_SQL, RowSummary, StatusCount, StoreCounters, TAKE_PROBE_SQL,
    WAITING_IN_KEY_ORDER_SQL, circuit_record, failure_count, purge_cutoff,
};
use crate::{OutboxError, Route, SourceVersion, StageOptions, Staged, Status};

/// How long a connection waits for another writer before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

fn sql(operation: &'static str) -> impl FnOnce(rusqlite::Error) -> OutboxError {
    move |error| OutboxError::store(operation, error)
}

/// Sets up a connection for the outbox: write-ahead logging (readers never block the
/// writer), `synchronous = NORMAL` (a commit survives the process being killed),
/// `temp_store = MEMORY` (the staging upsert's statement journal stays in memory, which
/// makes restaging several times faster), and a busy timeout of [`BUSY_TIMEOUT`] so that
/// workers and stagers wait for each other. Call it on the connection you stage from.
pub fn configure(conn: &Connection) -> Result<(), OutboxError> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sql("setting the busy timeout"))?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql("enabling write-ahead logging"))?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql("setting synchronous mode"))?;
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(sql("setting temp_store"))?;
    Ok(())
}

/// The staging upsert. Its rules, in SQL so that a task in any language can run the
/// same statement (`docs/reference/outbox.md` documents it):
///
/// - a restaging never adds a row (the key is the primary key);
/// - an older `source_version` changes nothing, and neither does a restaging of the
///   same effect at the same version (a replay of unchanged data writes nothing);
/// - a suppressed row takes the new staging's context and verdict, unless it is in doubt
///   (`in_doubt`: a claim ended with no outcome, and its receiver cannot drop a repeat),
///   which only an audited resend reopens; a pending row takes
///   them only from a staging that is itself pending, so a replay never demotes a row a
///   current run staged; claimed, delivered and dead rows keep theirs;
/// - a delivered row whose payload changes is marked `changed_after_delivery` and is not
///   sent again without an audited resend;
/// - a row keeps the ordering key (`:ordering_key`, the last parameter) and the place in
///   its key's order of its first staging.
pub const STAGE_SQL: &str = "INSERT INTO replaysafe_outbox (
    idempotency_key, route, pipeline, effect_kind, message_type, target,
    window_start, window_end, run_id, run_kind, replay_flag, backfill_id,
    logical_date, run_interval_start, run_interval_end, mode, conflict,
    max_age_ms, clock_skew_ms, opt_in, window_known, upstream,
    effect, payload_sha256, payload_bytes, summary, source_version, status, reasons,
    next_attempt_at_ms, staged_at_ms, updated_at_ms, ordering_key)
VALUES (
    :idempotency_key, :route, :pipeline, :effect_kind, :message_type, :target,
    :window_start, :window_end, :run_id, :run_kind, :replay_flag, :backfill_id,
    :logical_date, :run_interval_start, :run_interval_end, :mode, :conflict,
    :max_age_ms, :clock_skew_ms, :opt_in, :window_known, :upstream,
    :effect, :payload_sha256, :payload_bytes, :summary, :source_version, :status, :reasons,
    :now_ms, :now_ms, :now_ms, :ordering_key)
ON CONFLICT (idempotency_key) DO UPDATE SET
    route = excluded.route,
    target = excluded.target,
    effect = excluded.effect,
    payload_sha256 = excluded.payload_sha256,
    payload_bytes = excluded.payload_bytes,
    summary = excluded.summary,
    source_version = excluded.source_version,
    updated_at_ms = excluded.updated_at_ms,
    changed_after_delivery = (delivered_sha256 IS NOT NULL AND delivered_sha256 <> excluded.payload_sha256),
    status = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') THEN excluded.status ELSE status END,
    next_attempt_at_ms = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') THEN excluded.next_attempt_at_ms ELSE next_attempt_at_ms END,
    reasons = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.reasons ELSE reasons END,
    run_id = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.run_id ELSE run_id END,
    run_kind = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.run_kind ELSE run_kind END,
    replay_flag = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.replay_flag ELSE replay_flag END,
    backfill_id = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.backfill_id ELSE backfill_id END,
    logical_date = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.logical_date ELSE logical_date END,
    run_interval_start = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.run_interval_start ELSE run_interval_start END,
    run_interval_end = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.run_interval_end ELSE run_interval_end END,
    mode = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.mode ELSE mode END,
    conflict = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.conflict ELSE conflict END,
    max_age_ms = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.max_age_ms ELSE max_age_ms END,
    clock_skew_ms = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.clock_skew_ms ELSE clock_skew_ms END,
    opt_in = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.opt_in ELSE opt_in END,
    window_known = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.window_known ELSE window_known END,
    upstream = CASE WHEN (status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') OR (status = 'pending' AND excluded.status = 'pending') THEN excluded.upstream ELSE upstream END
WHERE excluded.source_version >= source_version
  AND (excluded.source_version > source_version
    OR excluded.effect <> effect
    OR ((status = 'suppressed' AND COALESCE(reasons, '') <> 'in_doubt') AND excluded.status = 'pending'))";

/// Stages `effect` for `route` inside the caller's transaction `tx`.
///
/// The gate runs now, on `cx`: a current run's effect becomes a `pending` row a worker
/// will deliver; a replay's (or a stale, unknown, conflicting or dry-run context's)
/// becomes a `suppressed` row, journaled "would have sent" through the route's journal,
/// and never claimed without an audited opt-in. The row commits or rolls back with `tx`.
/// See [`stage_versioned`] for the source version; this one stages version 0.
///
/// The outbox tables must exist ([`migrate`], or [`SqliteOutbox::open`]).
pub fn stage<C>(
    tx: &Transaction<'_>,
    cx: &ReplayContext,
    route: &Route<C>,
    effect: &C::Effect,
) -> Result<Staged, OutboxError>
where
    C: EffectClient + 'static,
    C::Effect: Serialize + DeserializeOwned,
{
    stage_versioned(tx, cx, route, effect, SourceVersion::default())
}

/// [`stage`], with the version of the source data the effect reports on (such as its
/// `updated_at`): a staging with an older version than the row's changes nothing.
pub fn stage_versioned<C>(
    tx: &Transaction<'_>,
    cx: &ReplayContext,
    route: &Route<C>,
    effect: &C::Effect,
    version: SourceVersion,
) -> Result<Staged, OutboxError>
where
    C: EffectClient + 'static,
    C::Effect: Serialize + DeserializeOwned,
{
    stage_with(tx, cx, route, effect, &StageOptions::from(version))
}

/// [`stage`], with a source version and an ordering key ([`StageOptions`]): rows of one
/// ordering key are delivered one at a time, in the order they were first staged.
///
/// # Errors
/// [`OutboxError::Invalid`] for `ordering_key` when the key is empty, longer than
/// [`crate::MAX_ORDERING_KEY`] bytes or holds a control character; nothing is staged.
pub fn stage_with<C>(
    tx: &Transaction<'_>,
    cx: &ReplayContext,
    route: &Route<C>,
    effect: &C::Effect,
    options: &StageOptions,
) -> Result<Staged, OutboxError>
where
    C: EffectClient + 'static,
    C::Effect: Serialize + DeserializeOwned,
{
    let (row, staged) = prepare(cx, route, effect, options)?;
    Ok(Staged {
        changed: upsert(tx, &row)?,
        ..staged
    })
}

/// Runs [`STAGE_SQL`]; whether the row was inserted or changed.
fn upsert(tx: &Transaction<'_>, row: &StagedRow) -> Result<bool, OutboxError> {
    let cx = &row.context;
    let mut statement = tx
        .prepare_cached(STAGE_SQL)
        .map_err(sql("preparing the staging statement"))?;
    let changed = statement
        .execute(
            // Bound by position: SQLite numbers named parameters in order of first
            // appearance, and binding by name costs a lookup per parameter per row.
            rusqlite::params![
                row.key,
                row.route,
                cx.pipeline,
                row.effect_kind,
                row.message_type,
                row.target,
                cx.window_start,
                cx.window_end,
                cx.run_id,
                cx.run_kind,
                cx.replay_flag,
                cx.backfill_id,
                cx.logical_date,
                cx.run_interval_start,
                cx.run_interval_end,
                cx.mode,
                cx.conflict,
                cx.max_age_ms,
                cx.clock_skew_ms,
                cx.opt_in,
                cx.window_known,
                cx.upstream,
                row.effect,
                row.payload_sha256,
                row.payload_bytes,
                row.summary,
                row.source_version,
                row.status.as_str(),
                row.reasons,
                row.staged_at_ms,
                row.ordering_key,
            ],
        )
        .map_err(sql("staging an effect"))?;
    Ok(changed > 0)
}

/// The SQLite outbox, for workers and operators: one connection of its own.
#[derive(Clone)]
pub struct SqliteOutbox {
    conn: Arc<Mutex<Connection>>,
    path: Arc<PathBuf>,
}

impl fmt::Debug for SqliteOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteOutbox")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteOutbox {
    /// Opens (creating if needed) the database at `path`, configures it ([`configure`])
    /// and creates or migrates the outbox tables ([`migrate`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OutboxError> {
        let path = path.as_ref();
        let mut conn = Connection::open(path).map_err(sql("opening the outbox database"))?;
        configure(&conn)?;
        migrate(&mut conn)?;
        Ok(SqliteOutbox {
            conn: Arc::new(Mutex::new(conn)),
            path: Arc::new(path.to_owned()),
        })
    }

    /// Opens the database at `path` read-only, for operators' commands that only read
    /// (`status`, `list`): it creates no file, no table and no write-ahead log setting,
    /// and migrates nothing. A missing file, or a database without the outbox, is
    /// [`OutboxError::NoOutbox`]; another schema version is
    /// [`OutboxError::SchemaTooOld`] or [`OutboxError::SchemaTooNew`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, OutboxError> {
        Self::open_without_creating(
            path.as_ref(),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            "opening the outbox database read-only",
        )
    }

    /// Opens the database at `path` for operators' commands that change rows (`retry`,
    /// `resend`, `purge`) on an outbox that already exists: it creates no file and no
    /// table, and migrates nothing. Errors as for [`SqliteOutbox::open_read_only`].
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, OutboxError> {
        Self::open_without_creating(
            path.as_ref(),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE,
            "opening the outbox database",
        )
    }

    /// Opens an existing outbox with `access` (read-only or read-write, never create):
    /// what [`SqliteOutbox::open_read_only`] and [`SqliteOutbox::open_existing`] share.
    fn open_without_creating(
        path: &Path,
        access: rusqlite::OpenFlags,
        doing: &'static str,
    ) -> Result<Self, OutboxError> {
        let shown = format!("sqlite:{}", path.display());
        if !path.is_file() {
            return Err(OutboxError::NoOutbox { database: shown });
        }
        let conn =
            Connection::open_with_flags(path, access | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(sql(doing))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sql("setting the busy timeout"))?;
        check_schema(&conn, &shown)?;
        Ok(SqliteOutbox {
            conn: Arc::new(Mutex::new(conn)),
            path: Arc::new(path.to_owned()),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` on the connection without blocking other tasks: in place on a
    /// multi-threaded runtime (one thread hop less per statement, which is most of a
    /// worker's overhead per row), else on the blocking pool.
    async fn run<T: Send + 'static>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&mut Connection) -> Result<T, OutboxError> + Send + 'static,
    ) -> Result<T, OutboxError> {
        if tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread
        {
            return tokio::task::block_in_place(|| work(&mut lock(&self.conn)));
        }
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || work(&mut lock(&conn)))
            .await
            .map_err(|error| OutboxError::store(operation, error))?
    }
}

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

const CLAIM_COLUMNS: &str = "idempotency_key, route, effect_kind, pipeline, run_id, run_kind, \
    replay_flag, backfill_id, window_start, window_end, logical_date, run_interval_start, \
    run_interval_end, mode, conflict, max_age_ms, clock_skew_ms, opt_in, effect, \
    payload_sha256, attempts, message_type, target, summary, payload_bytes, window_known, upstream";

/// How many columns [`CLAIM_COLUMNS`] names.
const CLAIM_COLUMN_COUNT: usize = 27;

fn claimed_row(row: &Row<'_>, token: &str, reclaimed: bool) -> rusqlite::Result<ClaimedRow> {
    Ok(ClaimedRow {
        key: row.get(0)?,
        route: row.get(1)?,
        effect_kind: row.get(2)?,
        context: RowContext {
            pipeline: row.get(3)?,
            run_id: row.get(4)?,
            run_kind: row.get(5)?,
            replay_flag: row.get(6)?,
            backfill_id: row.get(7)?,
            window_start: row.get(8)?,
            window_end: row.get(9)?,
            logical_date: row.get(10)?,
            run_interval_start: row.get(11)?,
            run_interval_end: row.get(12)?,
            mode: row.get(13)?,
            conflict: row.get(14)?,
            max_age_ms: row.get(15)?,
            clock_skew_ms: row.get(16)?,
            opt_in: row.get(17)?,
            window_known: row.get(25)?,
            upstream: row.get(26)?,
        },
        effect: row.get(18)?,
        payload_sha256: row.get(19)?,
        attempts: row.get(20)?,
        message_type: row.get(21)?,
        target: row.get(22)?,
        summary: row.get(23)?,
        payload_bytes: row.get(24)?,
        claim_token: token.to_owned(),
        reclaimed,
    })
}

fn route_list(count: usize, first: usize) -> String {
    (0..count)
        .map(|i| format!("?{}", first + i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A claim token: 128 random bits, hex.
fn new_token() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// A pending row's turn in its ordering key: a row without a key always has it; a keyed
/// row has it when no other row of its key is claimed and none placed before it is
/// pending. Only a key's first waiting row passes, so one claim never takes two rows of
/// a key, and SQLite's single writer makes the place given at insert the commit order.
const IN_TURN: &str = "(r.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM replaysafe_outbox o \
    WHERE o.ordering_key = r.ordering_key AND o.status IN ('pending', 'claimed') \
    AND o.idempotency_key <> r.idempotency_key \
    AND (o.status = 'claimed' OR o.ordering_seq < r.ordering_seq)))";

/// An expired claim's turn: no other claim of its key still leased, and none expired
/// placed before it. Earlier pending rows do not stop it (one an operator put back
/// behind a claim waits for that claim, which must end first).
const RECLAIM_IN_TURN: &str = "(r.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM replaysafe_outbox o \
    WHERE o.ordering_key = r.ordering_key AND o.status = 'claimed' \
    AND o.idempotency_key <> r.idempotency_key \
    AND (o.lease_until_ms > ?3 OR o.ordering_seq < r.ordering_seq)))";

/// The most routes a claim reads one index range each of.
const MAX_ROUTES_PER_RANGE: usize = 400;

fn claim(conn: &mut Connection, request: &ClaimRequest) -> Result<Vec<ClaimedRow>, OutboxError> {
    if request.routes.is_empty() || request.limit == 0 {
        return Ok(Vec::new());
    }
    let now = millis(request.now);
    let lease_until =
        now.saturating_add(i64::try_from(request.lease.as_millis()).unwrap_or(i64::MAX));
    let token = new_token();
    let routes = route_list(request.routes.len(), 5);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql("starting a claim"))?;
    let mut claimed = Vec::new();
    {
        let reclaim = format!(
            "UPDATE replaysafe_outbox SET status = 'claimed', claim_token = ?1, lease_until_ms = ?2, \
             attempts = attempts + 1, updated_at_ms = ?3 \
             WHERE idempotency_key IN (SELECT idempotency_key FROM replaysafe_outbox r \
             WHERE status = 'claimed' AND lease_until_ms <= ?3 AND route IN ({routes}) \
             AND {RECLAIM_IN_TURN} ORDER BY lease_until_ms LIMIT ?4) RETURNING {CLAIM_COLUMNS}"
        );
        // Each route's due rows from its own index range, then the oldest of them: a
        // route left out of the claim (its circuit open, no token at hand, another
        // worker's) keeps its due rows in the table, and one scan of every due row would
        // pass them all on each claim.
        // (SQLite allows 500 terms in a compound query: a worker of more routes scans
        // the due rows once, as before.)
        let per_route = if request.routes.len() > MAX_ROUTES_PER_RANGE {
            format!(
                "SELECT idempotency_key, next_attempt_at_ms FROM replaysafe_outbox r \
                 WHERE status = 'pending' AND next_attempt_at_ms <= ?3 AND route IN ({routes}) \
                 AND {IN_TURN} ORDER BY next_attempt_at_ms LIMIT ?4"
            )
        } else {
            (0..request.routes.len())
            .map(|i| {
                format!(
                    "SELECT * FROM (SELECT idempotency_key, next_attempt_at_ms FROM replaysafe_outbox r \
                     WHERE route = ?{} AND status = 'pending' AND next_attempt_at_ms <= ?3 \
                     AND {IN_TURN} ORDER BY next_attempt_at_ms LIMIT ?4)",
                    5 + i
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ")
        };
        let fresh = format!(
            "UPDATE replaysafe_outbox SET status = 'claimed', claim_token = ?1, lease_until_ms = ?2, \
             attempts = attempts + 1, updated_at_ms = ?3 \
             WHERE idempotency_key IN (SELECT idempotency_key FROM ({per_route}) \
             ORDER BY next_attempt_at_ms LIMIT ?4) RETURNING {CLAIM_COLUMNS}"
        );
        for (query, reclaiming) in [(reclaim, true), (fresh, false)] {
            let room = i64::from(request.limit) - i64::try_from(claimed.len()).unwrap_or(0);
            if room <= 0 {
                break;
            }
            let mut params: Vec<&dyn rusqlite::ToSql> = vec![&token, &lease_until, &now, &room];
            params.extend(request.routes.iter().map(|r| r as &dyn rusqlite::ToSql));
            let mut statement = tx.prepare_cached(&query).map_err(sql("claiming rows"))?;
            let rows = statement
                .query_map(params.as_slice(), |row| {
                    claimed_row(row, &token, reclaiming)
                })
                .map_err(sql("claiming rows"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql("claiming rows"))?;
            if reclaiming && !rows.is_empty() {
                tx.execute(
                    "UPDATE replaysafe_outbox_counters SET value = value + ?1 WHERE name = 'reclaimed'",
                    [rows.len() as i64],
                )
                .map_err(sql("counting reclaimed rows"))?;
            }
            claimed.extend(rows);
        }
    }
    tx.commit().map_err(sql("committing a claim"))?;
    Ok(claimed)
}

const COMPLETE_DELIVERED: &str = "UPDATE replaysafe_outbox SET status = 'delivered', \
    claim_token = NULL, lease_until_ms = NULL, last_error = NULL, reasons = 'current_window', \
    delivered_at_ms = ?3, delivered_sha256 = ?4, changed_after_delivery = (payload_sha256 <> ?4), \
    updated_at_ms = ?3 WHERE idempotency_key = ?1 AND claim_token = ?2 AND status = 'claimed'";
const COMPLETE_SUPPRESSED: &str = "UPDATE replaysafe_outbox SET status = 'suppressed', \
    claim_token = NULL, lease_until_ms = NULL, reasons = ?4, updated_at_ms = ?3 \
    WHERE idempotency_key = ?1 AND claim_token = ?2 AND status = 'claimed'";
const COMPLETE_RETRY: &str = "UPDATE replaysafe_outbox SET status = 'pending', \
    claim_token = NULL, lease_until_ms = NULL, last_error = ?4, next_attempt_at_ms = ?5, \
    updated_at_ms = ?3 WHERE idempotency_key = ?1 AND claim_token = ?2 AND status = 'claimed'";
const COMPLETE_DEAD: &str = "UPDATE replaysafe_outbox SET status = 'dead', \
    claim_token = NULL, lease_until_ms = NULL, last_error = ?4, updated_at_ms = ?3 \
    WHERE idempotency_key = ?1 AND claim_token = ?2 AND status = 'claimed'";

fn complete(
    conn: &mut Connection,
    key: &str,
    token: &str,
    completion: &Completion,
    now: i64,
) -> Result<CompletionResult, OutboxError> {
    let changed = match completion {
        Completion::Delivered { payload_sha256 } => conn
            .prepare_cached(COMPLETE_DELIVERED)
            .and_then(|mut s| s.execute(rusqlite::params![key, token, now, payload_sha256])),
        Completion::Suppressed { reasons } => conn
            .prepare_cached(COMPLETE_SUPPRESSED)
            .and_then(|mut s| s.execute(rusqlite::params![key, token, now, reasons])),
        Completion::Retry {
            next_attempt_at,
            error,
        } => conn.prepare_cached(COMPLETE_RETRY).and_then(|mut s| {
            s.execute(rusqlite::params![
                key,
                token,
                now,
                error,
                millis(*next_attempt_at)
            ])
        }),
        Completion::Dead { error } => conn
            .prepare_cached(COMPLETE_DEAD)
            .and_then(|mut s| s.execute(rusqlite::params![key, token, now, error])),
    }
    .map_err(sql("completing a claim"))?;
    if changed == 1 {
        return Ok(CompletionResult::Applied);
    }
    conn.execute(
        "UPDATE replaysafe_outbox_counters SET value = value + 1 WHERE name = 'stale_completions'",
        [],
    )
    .map_err(sql("counting a stale completion"))?;
    Ok(CompletionResult::Stale)
}

/// The columns of [`RowSummary`], in [`summary_row`]'s order.
const SUMMARY_COLUMNS: &str = "idempotency_key, route, pipeline, effect_kind, message_type, \
    target, window_start, window_end, status, reasons, attempts, last_error, \
    changed_after_delivery, run_id, run_kind, backfill_id, payload_sha256, payload_bytes, \
    summary, opt_in IS NOT NULL, ordering_key";

fn summary_row(row: &Row<'_>) -> rusqlite::Result<(RowSummary, String)> {
    let status: String = row.get(8)?;
    Ok((
        RowSummary {
            key: row.get(0)?,
            route: row.get(1)?,
            pipeline: row.get(2)?,
            effect_kind: row.get(3)?,
            message_type: row.get(4)?,
            target: row.get(5)?,
            window_start: row.get(6)?,
            window_end: row.get(7)?,
            status: Status::Pending,
            reasons: row.get(9)?,
            attempts: row.get(10)?,
            last_error: row.get(11)?,
            changed_after_delivery: row.get(12)?,
            run_id: row.get(13)?,
            run_kind: row.get(14)?,
            backfill_id: row.get(15)?,
            payload_sha256: row.get(16)?,
            payload_bytes: u64::try_from(row.get::<_, i64>(17)?).unwrap_or(0),
            summary: row.get(18)?,
            has_opt_in: row.get(19)?,
            ordering_key: row.get(20)?,
        },
        status,
    ))
}

/// Runs a query of [`SUMMARY_COLUMNS`] and parses each row's status.
fn summaries(
    conn: &Connection,
    query: &str,
    params: impl rusqlite::Params,
    operation: &'static str,
) -> Result<Vec<RowSummary>, OutboxError> {
    let mut statement = conn.prepare(query).map_err(sql(operation))?;
    let rows = statement
        .query_map(params, summary_row)
        .map_err(sql(operation))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql(operation))?;
    rows.into_iter()
        .map(|(mut summary, status)| {
            summary.status = status.parse()?;
            Ok(summary)
        })
        .collect()
}

fn audit(
    tx: &Transaction<'_>,
    key: &str,
    action_word: &str,
    action: &OperatorAction,
    now: i64,
) -> Result<(), OutboxError> {
    tx.execute(
        "INSERT INTO replaysafe_outbox_audit (at_ms, idempotency_key, action, reason, approved_by, expires_at, opt_in) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        rusqlite::params![
            now,
            key,
            action_word,
            action.reason,
            action.by,
            action.expires_text(),
            action.document,
        ],
    )
    .map_err(sql("recording an audit entry"))?;
    Ok(())
}

/// Puts rows of `from` statuses back to pending, with the action's approval document as
/// their opt-in when it has one; returns them as they now stand.
fn reopen(
    conn: &mut Connection,
    keys: Option<&[String]>,
    from: &[Status],
    action_word: &str,
    action: &OperatorAction,
    now: i64,
) -> Result<Vec<RowSummary>, OutboxError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql("starting an operator action"))?;
    let statuses = from
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let selected: Vec<String> = match keys {
        Some(keys) => {
            let mut found = Vec::new();
            let query = format!(
                "SELECT idempotency_key FROM replaysafe_outbox WHERE idempotency_key = ?1 AND status IN ({statuses})"
            );
            for key in keys {
                let hit: Option<String> = tx
                    .query_row(&query, [key], |r| r.get(0))
                    .optional()
                    .map_err(sql("selecting rows"))?;
                found.extend(hit.filter(|hit| !found.contains(hit)));
            }
            found
        }
        None => {
            let query = format!(
                "SELECT idempotency_key FROM replaysafe_outbox WHERE status IN ({statuses}) ORDER BY staged_at_ms"
            );
            let mut statement = tx.prepare(&query).map_err(sql("selecting rows"))?;
            statement
                .query_map([], |r| r.get(0))
                .map_err(sql("selecting rows"))?
                .collect::<Result<_, _>>()
                .map_err(sql("selecting rows"))?
        }
    };
    let mut reopened = Vec::with_capacity(selected.len());
    let query =
        format!("SELECT {SUMMARY_COLUMNS} FROM replaysafe_outbox WHERE idempotency_key = ?1");
    for key in &selected {
        tx.execute(
            "UPDATE replaysafe_outbox SET status = 'pending', attempts = 0, next_attempt_at_ms = ?2, \
             opt_in = COALESCE(?3, opt_in), claim_token = NULL, lease_until_ms = NULL, updated_at_ms = ?2 \
             WHERE idempotency_key = ?1",
            rusqlite::params![key, now, action.document],
        )
        .map_err(sql("reopening a row"))?;
        audit(&tx, key, action_word, action, now)?;
        reopened.extend(summaries(&tx, &query, [key], "reading a reopened row")?);
    }
    tx.commit().map_err(sql("committing an operator action"))?;
    Ok(reopened)
}

#[async_trait]
impl OutboxStore for SqliteOutbox {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedRow>, OutboxError> {
        let request = request.clone();
        self.run("claiming rows", move |conn| claim(conn, &request))
            .await
    }

    async fn complete(
        &self,
        row: &ClaimedRow,
        completion: Completion,
        now: DateTime<Utc>,
    ) -> Result<CompletionResult, OutboxError> {
        let (key, token) = (row.key.clone(), row.claim_token.clone());
        self.run("completing a claim", move |conn| {
            complete(conn, &key, &token, &completion, millis(now))
        })
        .await
    }

    async fn release(&self, rows: &[ClaimedRow]) -> Result<(), OutboxError> {
        let claims: Vec<(String, String)> = rows
            .iter()
            .map(|r| (r.key.clone(), r.claim_token.clone()))
            .collect();
        self.run("releasing claims", move |conn| {
            let tx = conn.transaction().map_err(sql("releasing claims"))?;
            for (key, token) in &claims {
                tx.execute(
                    "UPDATE replaysafe_outbox SET status = 'pending', claim_token = NULL, \
                     lease_until_ms = NULL, attempts = MAX(attempts - 1, 0) \
                     WHERE idempotency_key = ?1 AND claim_token = ?2 AND status = 'claimed'",
                    [key, token],
                )
                .map_err(sql("releasing claims"))?;
            }
            tx.commit().map_err(sql("releasing claims"))
        })
        .await
    }

    async fn counts(&self) -> Result<Vec<StatusCount>, OutboxError> {
        self.run("counting rows", |conn| {
            let mut statement = conn
                .prepare(
                    "SELECT status, route, pipeline, COUNT(*) FROM replaysafe_outbox \
                     GROUP BY status, route, pipeline ORDER BY status, route, pipeline",
                )
                .map_err(sql("counting rows"))?;
            let rows = statement
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .map_err(sql("counting rows"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql("counting rows"))?;
            rows.into_iter()
                .map(|(status, route, pipeline, rows)| {
                    Ok(StatusCount {
                        status: status.parse()?,
                        route,
                        pipeline,
                        rows: u64::try_from(rows).unwrap_or(0),
                    })
                })
                .collect()
        })
        .await
    }

    async fn oldest_pending_age(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Option<Duration>, OutboxError> {
        self.run("finding the oldest pending row", move |conn| {
            let oldest: Option<i64> = conn
                .query_row(
                    "SELECT MIN(staged_at_ms) FROM replaysafe_outbox WHERE status IN ('pending', 'claimed')",
                    [],
                    |r| r.get(0),
                )
                .map_err(sql("finding the oldest pending row"))?;
            Ok(oldest.map(|staged| {
                (now - from_millis(staged))
                    .to_std()
                    .unwrap_or(Duration::ZERO)
            }))
        })
        .await
    }

    async fn in_doubt(&self, now: DateTime<Utc>) -> Result<u64, OutboxError> {
        self.run("counting rows in doubt", move |conn| {
            let rows: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM replaysafe_outbox WHERE status = 'claimed' AND lease_until_ms <= ?1",
                    [millis(now)],
                    |r| r.get(0),
                )
                .map_err(sql("counting rows in doubt"))?;
            Ok(u64::try_from(rows).unwrap_or(0))
        })
        .await
    }

    async fn list(&self, status: Status, limit: u32) -> Result<Vec<RowSummary>, OutboxError> {
        self.run("listing rows", move |conn| {
            summaries(
                conn,
                &format!(
                    "SELECT {SUMMARY_COLUMNS} FROM replaysafe_outbox WHERE status = ?1 ORDER BY staged_at_ms LIMIT ?2"
                ),
                rusqlite::params![status.as_str(), limit],
                "listing rows",
            )
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Option<RowSummary>, OutboxError> {
        let key = key.to_owned();
        self.run("reading a row", move |conn| {
            Ok(summaries(
                conn,
                &format!(
                    "SELECT {SUMMARY_COLUMNS} FROM replaysafe_outbox WHERE idempotency_key = ?1"
                ),
                [key],
                "reading a row",
            )?
            .pop())
        })
        .await
    }

    async fn peek_due(
        &self,
        routes: &[String],
        after: Option<&str>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> Result<Vec<ClaimedRow>, OutboxError> {
        if routes.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let routes = routes.to_vec();
        let after = after.unwrap_or_default().to_owned();
        self.run("looking at due rows", move |conn| {
            let query = format!(
                "SELECT {CLAIM_COLUMNS}, status = 'claimed' FROM replaysafe_outbox \
                 WHERE ((status = 'pending' AND next_attempt_at_ms <= ?1) \
                    OR (status = 'claimed' AND lease_until_ms <= ?1)) \
                   AND idempotency_key > ?2 AND route IN ({}) \
                 ORDER BY idempotency_key LIMIT ?3",
                route_list(routes.len(), 4)
            );
            let now = millis(now);
            let limit = i64::from(limit);
            let mut params: Vec<&dyn rusqlite::ToSql> = vec![&now, &after, &limit];
            params.extend(routes.iter().map(|r| r as &dyn rusqlite::ToSql));
            let mut statement = conn.prepare(&query).map_err(sql("looking at due rows"))?;
            statement
                .query_map(params.as_slice(), |row| {
                    claimed_row(row, "", row.get(CLAIM_COLUMN_COUNT)?)
                })
                .map_err(sql("looking at due rows"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql("looking at due rows"))
        })
        .await
    }

    async fn retry_dead(
        &self,
        keys: Option<&[String]>,
        action: &OperatorAction,
        now: DateTime<Utc>,
    ) -> Result<Vec<RowSummary>, OutboxError> {
        let keys = keys.map(<[String]>::to_vec);
        let action = action.clone();
        self.run("retrying dead rows", move |conn| {
            reopen(
                conn,
                keys.as_deref(),
                &[Status::Dead],
                "retry",
                &action,
                millis(now),
            )
        })
        .await
    }

    async fn resend(
        &self,
        keys: &[String],
        action: &OperatorAction,
        now: DateTime<Utc>,
    ) -> Result<Vec<RowSummary>, OutboxError> {
        let keys = keys.to_vec();
        let action = action.clone();
        self.run("resending rows", move |conn| {
            reopen(
                conn,
                Some(&keys),
                &[Status::Delivered, Status::Suppressed],
                "resend",
                &action,
                millis(now),
            )
        })
        .await
    }

    async fn purge_delivered(
        &self,
        older_than: Duration,
        now: DateTime<Utc>,
    ) -> Result<u64, OutboxError> {
        self.run("purging delivered rows", move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql("purging delivered rows"))?;
            let longest: Option<i64> = tx
                .query_row(
                    "SELECT MAX(max_age_ms + clock_skew_ms) FROM replaysafe_outbox WHERE status = 'delivered'",
                    [],
                    |r| r.get(0),
                )
                .map_err(sql("purging delivered rows"))?;
            let cutoff = purge_cutoff(older_than, longest, now)?;
            let purged = tx
                .execute(
                    "DELETE FROM replaysafe_outbox WHERE status = 'delivered' AND delivered_at_ms < ?1",
                    [millis(cutoff)],
                )
                .map_err(sql("purging delivered rows"))?;
            tx.commit().map_err(sql("purging delivered rows"))?;
            Ok(purged as u64)
        })
        .await
    }

    async fn counters(&self) -> Result<StoreCounters, OutboxError> {
        self.run("reading counters", |conn| {
            let read = |name: &str| -> Result<u64, OutboxError> {
                let value: i64 = conn
                    .query_row(
                        "SELECT value FROM replaysafe_outbox_counters WHERE name = ?1",
                        [name],
                        |r| r.get(0),
                    )
                    .map_err(sql("reading counters"))?;
                Ok(u64::try_from(value).unwrap_or(0))
            };
            Ok(StoreCounters {
                stale_completions: read("stale_completions")?,
                reclaimed: read("reclaimed")?,
            })
        })
        .await
    }

    async fn waiting_in_key_order(&self) -> Result<u64, OutboxError> {
        self.run("counting rows waiting in key order", |conn| {
            let rows: i64 = conn
                .query_row(WAITING_IN_KEY_ORDER_SQL, [], |r| r.get(0))
                .map_err(sql("counting rows waiting in key order"))?;
            Ok(u64::try_from(rows).unwrap_or(0))
        })
        .await
    }

    async fn circuits(&self) -> Result<Vec<CircuitRecord>, OutboxError> {
        self.run("reading circuits", |conn| {
            let mut statement = conn
                .prepare_cached(CIRCUITS_SQL)
                .map_err(sql("reading circuits"))?;
            let rows = statement
                .query_map([], |row| {
                    Ok(circuit_record(
                        row.get(0)?,
                        row.get::<_, String>(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                    ))
                })
                .map_err(sql("reading circuits"))?;
            rows.collect::<Result<Vec<_>, _>>()
                .map_err(sql("reading circuits"))
        })
        .await
    }

    async fn record_circuit(&self, circuit: &CircuitRecord) -> Result<(), OutboxError> {
        let values = CircuitValues::of(circuit);
        self.run("recording a circuit", move |conn| {
            conn.prepare_cached(&placeholders(RECORD_CIRCUIT_SQL))
                .and_then(|mut s| {
                    s.execute(rusqlite::params![
                        values.route,
                        values.state,
                        values.failures,
                        values.opened_at_ms,
                        values.next_probe_at_ms,
                        values.updated_at_ms
                    ])
                })
                .map_err(sql("recording a circuit"))?;
            Ok(())
        })
        .await
    }

    async fn take_shared_token(
        &self,
        route: &str,
        per_second: f64,
        capacity: f64,
        now: DateTime<Utc>,
    ) -> Result<f64, OutboxError> {
        let route = route.to_owned();
        self.run("taking a shared token", move |conn| {
            conn.prepare_cached(TAKE_SHARED_TOKEN_SQL)
                .and_then(|mut s| {
                    s.query_row(
                        rusqlite::params![route, per_second, capacity, millis(now)],
                        |row| row.get(0),
                    )
                })
                .map_err(sql("taking a shared token"))
        })
        .await
    }

    async fn give_back_shared_token(&self, route: &str, capacity: f64) -> Result<(), OutboxError> {
        let route = route.to_owned();
        self.run("giving back a shared token", move |conn| {
            conn.prepare_cached(GIVE_BACK_SHARED_TOKEN_SQL)
                .and_then(|mut s| s.execute(rusqlite::params![route, capacity]))
                .map_err(sql("giving back a shared token"))?;
            Ok(())
        })
        .await
    }

    async fn count_route_failure(
        &self,
        route: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u32>, OutboxError> {
        let route = route.to_owned();
        self.run("counting a route's failure", move |conn| {
            let count: i64 = conn
                .prepare_cached(&placeholders(COUNT_ROUTE_FAILURE_SQL))
                .and_then(|mut s| {
                    s.query_row(rusqlite::params![route, millis(now)], |row| row.get(0))
                })
                .map_err(sql("counting a route's failure"))?;
            Ok(Some(failure_count(count)))
        })
        .await
    }

    async fn clear_route_failures(&self, route: &str) -> Result<(), OutboxError> {
        let route = route.to_owned();
        self.run("clearing a route's failures", move |conn| {
            conn.prepare_cached(&placeholders(CLEAR_ROUTE_FAILURES_SQL))
                .and_then(|mut s| s.execute(rusqlite::params![route]))
                .map_err(sql("clearing a route's failures"))?;
            Ok(())
        })
        .await
    }

    async fn take_probe(
        &self,
        route: &str,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
    ) -> Result<bool, OutboxError> {
        let route = route.to_owned();
        self.run("taking a circuit's probe", move |conn| {
            let changed = conn
                .prepare_cached(&placeholders(TAKE_PROBE_SQL))
                .and_then(|mut s| s.execute(rusqlite::params![route, millis(now), millis(next)]))
                .map_err(sql("taking a circuit's probe"))?;
            Ok(changed == 1)
        })
        .await
    }
}

/// Refills a shared bucket to now and takes one token (`?1` route, `?2` rate a second,
/// `?3` capacity, `?4` now in ms); returns the tokens left (below zero: owed).
const TAKE_SHARED_TOKEN_SQL: &str = "INSERT INTO replaysafe_outbox_rates (route, tokens, refilled_at_ms) \
    VALUES (?1, ?3 - 1, ?4) ON CONFLICT (route) DO UPDATE SET \
    tokens = min(?3, replaysafe_outbox_rates.tokens \
        + max(?4 - replaysafe_outbox_rates.refilled_at_ms, 0) / 1000.0 * ?2) - 1, \
    refilled_at_ms = max(replaysafe_outbox_rates.refilled_at_ms, ?4) \
    RETURNING tokens";

/// Gives back a shared token (`?1` route, `?2` capacity).
const GIVE_BACK_SHARED_TOKEN_SQL: &str =
    "UPDATE replaysafe_outbox_rates SET tokens = min(?2, tokens + 1) WHERE route = ?1";

/// `$N` placeholders as SQLite's `?N`.
fn placeholders(statement: &str) -> String {
    statement.replace('$', "?")
}
