//! The PostgreSQL backend: the scale-out path, with workers on many machines.
//!
//! Staging runs inside the caller's own [`tokio_postgres::Transaction`] (a
//! `deadpool_postgres` transaction dereferences to one), so the effect commits or rolls
//! back with the data it reports on. Workers and operators use [`PostgresOutbox`], a
//! connection pool: claims take due rows with `FOR UPDATE SKIP LOCKED` in one statement,
//! so workers in many processes never claim one row at once, and a completion is
//! conditional on the claim token.
//!
//! A trigger notifies the channel [`NOTIFY_CHANNEL`] when a row becomes pending (at
//! commit, whichever language staged it); [`PostgresOutbox`] listens on a connection of
//! its own and wakes an idle worker, and polling stays as the fallback.
//!
//! Connections are made without TLS ([`tokio_postgres::NoTls`]): use a loopback address
//! or a Unix socket, or a TLS-terminating proxy beside the worker
//! (`docs/adr/0009-outbox-postgres.md`). A connection string that requires TLS
//! (`sslmode=require`) is refused rather than downgraded.

mod journal;
mod schema;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures_util::StreamExt;
use replaysafe_core::{EffectClient, ReplayContext};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Config, NoTls, Row, Transaction};

pub use journal::{JOURNAL_SCHEMA, PostgresJournal, read_journal};
pub use schema::{SCHEMA_VERSION, check_schema, migrate, schema_version};

use crate::row::{RowContext, StagedRow, from_millis, millis, prepare};
use crate::store::{
    CIRCUITS_SQL, CLEAR_ROUTE_FAILURES_SQL, COUNT_ROUTE_FAILURE_SQL, CircuitRecord, CircuitValues,
    ClaimRequest, ClaimedRow, Completion, CompletionResult, OperatorAction, OutboxStore,
    RECORD_CIRCUIT_SQL, RowSummary, StatusCount, StoreCounters, TAKE_PROBE_SQL,
    WAITING_IN_KEY_ORDER_SQL, circuit_record, failure_count, purge_cutoff,
};
use crate::{OutboxError, Route, SourceVersion, StageOptions, Staged, Status};

/// The channel the outbox's trigger notifies when a row becomes pending.
pub const NOTIFY_CHANNEL: &str = "replaysafe_outbox";

/// The default number of pooled connections of one [`PostgresOutbox`].
pub const DEFAULT_POOL_SIZE: usize = 8;

/// How long an operation waits for a pooled connection, and a new connection for the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn sql(operation: &'static str) -> impl FnOnce(tokio_postgres::Error) -> OutboxError {
    move |error| OutboxError::store(operation, error)
}

/// The staging upsert, with the same rules as SQLite's
/// ([`crate::sqlite::STAGE_SQL`]), in PostgreSQL's parameters `$1` to `$31` (the
/// columns in the order they are listed; `$30` is now, in milliseconds since the Unix
/// epoch, and `$31` the ordering key). `docs/reference/outbox.md` shows it run from
/// Python.
///
/// - a restaging never adds a row (the key is the primary key);
/// - an older `source_version` changes nothing, and neither does a restaging of the
///   same effect at the same version (a replay of unchanged data writes nothing);
/// - a suppressed row takes the new staging's context and verdict, unless it is in doubt
///   (`in_doubt`: a claim ended with no outcome, and its receiver cannot drop a repeat),
///   which only an audited resend reopens; a pending row takes
///   them only from a staging that is itself pending; claimed, delivered and dead rows
///   keep theirs;
/// - a delivered row whose payload changes is marked `changed_after_delivery` and is not
///   sent again without an audited resend;
/// - a row keeps the ordering key and the place in its key's order of its first staging;
///   staging a keyed row locks its key until the transaction ends.
pub const STAGE_SQL: &str = "INSERT INTO replaysafe_outbox AS o (
    idempotency_key, route, pipeline, effect_kind, message_type, target,
    window_start, window_end, run_id, run_kind, replay_flag, backfill_id,
    logical_date, run_interval_start, run_interval_end, mode, conflict,
    max_age_ms, clock_skew_ms, opt_in, window_known, upstream,
    effect, payload_sha256, payload_bytes, summary, source_version, status, reasons,
    next_attempt_at_ms, staged_at_ms, updated_at_ms, ordering_key)
VALUES (
    $1, $2, $3, $4, $5, $6,
    $7, $8, $9, $10, $11, $12,
    $13, $14, $15, $16, $17,
    $18, $19, $20, $21, $22,
    $23, $24, $25, $26, $27, $28, $29,
    $30, $30, $30, $31)
ON CONFLICT (idempotency_key) DO UPDATE SET
    route = excluded.route,
    target = excluded.target,
    effect = excluded.effect,
    payload_sha256 = excluded.payload_sha256,
    payload_bytes = excluded.payload_bytes,
    summary = excluded.summary,
    source_version = excluded.source_version,
    updated_at_ms = excluded.updated_at_ms,
    changed_after_delivery = (o.delivered_sha256 IS NOT NULL AND o.delivered_sha256 <> excluded.payload_sha256),
    status = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') THEN excluded.status ELSE o.status END,
    next_attempt_at_ms = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') THEN excluded.next_attempt_at_ms ELSE o.next_attempt_at_ms END,
    reasons = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.reasons ELSE o.reasons END,
    run_id = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.run_id ELSE o.run_id END,
    run_kind = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.run_kind ELSE o.run_kind END,
    replay_flag = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.replay_flag ELSE o.replay_flag END,
    backfill_id = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.backfill_id ELSE o.backfill_id END,
    logical_date = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.logical_date ELSE o.logical_date END,
    run_interval_start = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.run_interval_start ELSE o.run_interval_start END,
    run_interval_end = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.run_interval_end ELSE o.run_interval_end END,
    mode = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.mode ELSE o.mode END,
    conflict = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.conflict ELSE o.conflict END,
    max_age_ms = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.max_age_ms ELSE o.max_age_ms END,
    clock_skew_ms = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.clock_skew_ms ELSE o.clock_skew_ms END,
    opt_in = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.opt_in ELSE o.opt_in END,
    window_known = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.window_known ELSE o.window_known END,
    upstream = CASE WHEN (o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') OR (o.status = 'pending' AND excluded.status = 'pending') THEN excluded.upstream ELSE o.upstream END
WHERE excluded.source_version >= o.source_version
  AND (excluded.source_version > o.source_version
    OR excluded.effect <> o.effect
    OR ((o.status = 'suppressed' AND COALESCE(o.reasons, '') <> 'in_doubt') AND excluded.status = 'pending'))";

/// The parameter types of [`STAGE_SQL`], given with the statement so that a staging is
/// one round trip.
pub const STAGE_TYPES: [Type; 31] = [
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::BOOL,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::BOOL,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
];

/// Stages `effect` for `route` inside the caller's transaction `tx`.
///
/// The gate runs now, on `cx`, as for [`crate::sqlite::stage`]: a current run's effect
/// becomes a `pending` row, a replay's a `suppressed` one, journaled "would have sent".
/// The row commits or rolls back with `tx`; at commit, a pending row wakes idle workers.
/// This one stages source version 0; see [`stage_versioned`].
///
/// The outbox tables must exist ([`migrate`], or [`PostgresOutbox::connect`]).
pub async fn stage<C>(
    tx: &Transaction<'_>,
    cx: &ReplayContext,
    route: &Route<C>,
    effect: &C::Effect,
) -> Result<Staged, OutboxError>
where
    C: EffectClient + 'static,
    C::Effect: Serialize + DeserializeOwned,
{
    stage_versioned(tx, cx, route, effect, SourceVersion::default()).await
}

/// [`stage`], with the version of the source data the effect reports on: a staging
/// with an older version than the row's changes nothing.
pub async fn stage_versioned<C>(
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
    stage_with(tx, cx, route, effect, &StageOptions::from(version)).await
}

/// [`stage`], with a source version and an ordering key ([`StageOptions`]): rows of one
/// ordering key are delivered one at a time, in the order they were first staged. Staging
/// a keyed row locks its key until `tx` ends, so that a second transaction staging the
/// key waits for this one (stage the keys of one transaction in a fixed order, or
/// PostgreSQL may end two crossing transactions with a deadlock error).
///
/// # Errors
/// [`OutboxError::Invalid`] for `ordering_key` when the key is empty, longer than
/// [`crate::MAX_ORDERING_KEY`] bytes or holds a control character; nothing is staged.
pub async fn stage_with<C>(
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
        changed: upsert(tx, &row).await?,
        ..staged
    })
}

/// The staging statement prepared once on a connection, for a transaction that stages
/// many rows: each staging is then one round trip without the server parsing and
/// planning the upsert again (about three times as fast as [`stage`] per row).
///
/// It belongs to the connection it was prepared on: use it with transactions of that
/// connection only (another connection does not know the statement, and says so).
///
/// ```no_run
/// # async fn example(outbox: replaysafe_outbox::postgres::PostgresOutbox,
/// #     route: replaysafe_outbox::Route<impl replaysafe_core::EffectClient<Effect = String> + 'static>,
/// #     cx: replaysafe_core::ReplayContext, totals: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
/// use replaysafe_outbox::postgres::Stager;
///
/// let mut conn = outbox.pool().get().await?;
/// let tx = conn.transaction().await?;
/// let stager = Stager::prepare(&tx).await?;
/// for total in &totals {
///     stager.stage(&tx, &cx, &route, total).await?;
/// }
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Stager {
    statement: tokio_postgres::Statement,
}

impl Stager {
    /// Prepares [`STAGE_SQL`] on `tx`'s connection.
    pub async fn prepare(tx: &Transaction<'_>) -> Result<Self, OutboxError> {
        let statement = tx
            .prepare_typed(STAGE_SQL, &STAGE_TYPES)
            .await
            .map_err(sql("preparing the staging statement"))?;
        Ok(Stager { statement })
    }

    /// [`stage`], with the prepared statement.
    pub async fn stage<C>(
        &self,
        tx: &Transaction<'_>,
        cx: &ReplayContext,
        route: &Route<C>,
        effect: &C::Effect,
    ) -> Result<Staged, OutboxError>
    where
        C: EffectClient + 'static,
        C::Effect: Serialize + DeserializeOwned,
    {
        self.stage_versioned(tx, cx, route, effect, SourceVersion::default())
            .await
    }

    /// [`stage_versioned`], with the prepared statement.
    pub async fn stage_versioned<C>(
        &self,
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
        self.stage_with(tx, cx, route, effect, &StageOptions::from(version))
            .await
    }

    /// [`stage_with`], with the prepared statement.
    pub async fn stage_with<C>(
        &self,
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
        let status = row.status.as_str();
        let changed = tx
            .execute(&self.statement, &values(&row, &status))
            .await
            .map_err(sql("staging an effect"))?;
        Ok(Staged {
            changed: changed > 0,
            ..staged
        })
    }
}

/// The parameters of [`STAGE_SQL`] for `row`, in order.
fn values<'a>(row: &'a StagedRow, status: &'a &'static str) -> [&'a (dyn ToSql + Sync); 31] {
    let cx = &row.context;
    [
        &row.key,
        &row.route,
        &cx.pipeline,
        &row.effect_kind,
        &row.message_type,
        &row.target,
        &cx.window_start,
        &cx.window_end,
        &cx.run_id,
        &cx.run_kind,
        &cx.replay_flag,
        &cx.backfill_id,
        &cx.logical_date,
        &cx.run_interval_start,
        &cx.run_interval_end,
        &cx.mode,
        &cx.conflict,
        &cx.max_age_ms,
        &cx.clock_skew_ms,
        &cx.opt_in,
        &cx.window_known,
        &cx.upstream,
        &row.effect,
        &row.payload_sha256,
        &row.payload_bytes,
        &row.summary,
        &row.source_version,
        status,
        &row.reasons,
        &row.staged_at_ms,
        &row.ordering_key,
    ]
}

async fn upsert(tx: &Transaction<'_>, row: &StagedRow) -> Result<bool, OutboxError> {
    let status = row.status.as_str();
    let values = values(row, &status);
    let params: Vec<(&(dyn ToSql + Sync), Type)> = values
        .into_iter()
        .zip(STAGE_TYPES.iter().cloned())
        .collect();
    let changed = tx
        .execute_typed(STAGE_SQL, &params)
        .await
        .map_err(sql("staging an effect"))?;
    Ok(changed > 0)
}

/// Builds a [`PostgresOutbox`]; see [`PostgresOutbox::builder`].
#[derive(Clone)]
pub struct PostgresOutboxBuilder {
    config: Config,
    pool_size: usize,
    listen: bool,
    existing_schema: bool,
}

impl fmt::Debug for PostgresOutboxBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOutboxBuilder")
            .field("database", &describe(&self.config))
            .field("pool_size", &self.pool_size)
            .field("listen", &self.listen)
            .finish()
    }
}

impl PostgresOutboxBuilder {
    /// Pooled connections (default [`DEFAULT_POOL_SIZE`], at least 1). A worker with
    /// several deliveries in flight completes them on as many connections.
    pub fn pool_size(mut self, connections: usize) -> Self {
        self.pool_size = connections.max(1);
        self
    }

    /// Whether to listen for [`NOTIFY_CHANNEL`] on a connection of its own (default on);
    /// without it, workers only poll.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }

    /// Connects to an outbox that already exists, for operators' commands (`status` and
    /// `list`, which only read; `retry`, `resend`, `purge`): nothing is created or
    /// migrated and nobody listens, so a database user with `SELECT` alone can run the
    /// reading ones. A database without the outbox is [`OutboxError::NoOutbox`]; another
    /// schema version is [`OutboxError::SchemaTooOld`] or [`OutboxError::SchemaTooNew`].
    pub fn existing_schema(mut self) -> Self {
        self.existing_schema = true;
        self.listen = false;
        self
    }

    /// Connects, creates or migrates the outbox tables ([`migrate`]) unless
    /// [`PostgresOutboxBuilder::existing_schema`], and starts listening for wake-ups.
    pub async fn connect(self) -> Result<PostgresOutbox, OutboxError> {
        let mut config = self.config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.keepalives(true);
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|error| OutboxError::store("building the connection pool", error))?;
        {
            let mut client = pool
                .get()
                .await
                .map_err(|error| OutboxError::store("connecting to the outbox database", error))?;
            if self.existing_schema {
                check_schema(&**client, &describe(&config)).await?;
            } else {
                migrate(&mut client).await?;
            }
        }
        let wake = Arc::new(Notify::new());
        let listener = self
            .listen
            .then(|| tokio::spawn(listen(config.clone(), Arc::clone(&wake))));
        Ok(PostgresOutbox {
            inner: Arc::new(Inner {
                pool,
                wake,
                listener,
                database: describe(&config),
            }),
        })
    }
}

/// The PostgreSQL outbox, for workers and operators: a pool of connections, and one more
/// that listens for wake-ups. Clones share them.
#[derive(Clone)]
pub struct PostgresOutbox {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    wake: Arc<Notify>,
    listener: Option<JoinHandle<()>>,
    database: String,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

impl fmt::Debug for PostgresOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOutbox")
            .field("database", &self.inner.database)
            .field("listening", &self.inner.listener.is_some())
            .finish_non_exhaustive()
    }
}

/// User, host, port and database, never the password.
pub(crate) fn describe(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

impl PostgresOutbox {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`, or
    /// the `key=value` form) with the defaults, and creates or migrates the tables.
    /// A string that does not parse is [`OutboxError::Invalid`] for `database`; its text,
    /// which may hold a password, is not repeated.
    pub async fn connect(url: &str) -> Result<Self, OutboxError> {
        PostgresOutbox::builder(parse_url(url)?).connect().await
    }

    /// Starts a builder over a parsed configuration.
    pub fn builder(config: Config) -> PostgresOutboxBuilder {
        PostgresOutboxBuilder {
            config,
            pool_size: DEFAULT_POOL_SIZE,
            listen: true,
            existing_schema: false,
        }
    }

    /// The connection pool: stage from a transaction of one of its connections, or run
    /// your own statements.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The database, as `postgres://user@host:port/db` (no password).
    pub fn database(&self) -> &str {
        &self.inner.database
    }

    /// How the server would run a claim of up to `batch` rows of `routes` now: the lines
    /// of `EXPLAIN` of the very statement workers claim with (nothing is claimed). A plan
    /// that reads due rows through the `replaysafe_outbox_route_due` index stays fast as
    /// the table grows; a sequential scan of `replaysafe_outbox` does not.
    pub async fn explain_claim(
        &self,
        routes: &[String],
        batch: u32,
    ) -> Result<Vec<String>, OutboxError> {
        let now = millis(Utc::now());
        let client = self.client("explaining the claim").await?;
        let rows = client
            .query(
                &format!("EXPLAIN {CLAIM_SQL}"),
                &[&"explain", &now, &now, &i64::from(batch), &routes],
            )
            .await
            .map_err(sql("explaining the claim"))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    async fn client(
        &self,
        operation: &'static str,
    ) -> Result<deadpool_postgres::Object, OutboxError> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|error| OutboxError::store(operation, error))
    }

    /// Puts rows of `from` statuses back to pending, with the action's approval document
    /// as their opt-in when it has one, and audits each, in one statement; returns them.
    async fn reopen(
        &self,
        keys: Option<&[String]>,
        from: &[Status],
        command: &str,
        action: &OperatorAction,
        now: DateTime<Utc>,
    ) -> Result<Vec<RowSummary>, OutboxError> {
        let statuses: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
        let keys: Option<Vec<&str>> = keys.map(|keys| keys.iter().map(String::as_str).collect());
        let client = self.client("reopening rows").await?;
        let rows = client
            .query(
                &reopen_sql(),
                &[
                    &statuses,
                    &keys,
                    &millis(now),
                    &action.document,
                    &action.reason,
                    &action.by,
                    &action.expires_text(),
                    &command,
                ],
            )
            .await
            .map_err(sql("reopening rows"))?;
        rows.iter().map(summary_row).collect()
    }
}

/// Parses a connection string without repeating it in an error.
pub fn parse_url(url: &str) -> Result<Config, OutboxError> {
    url.parse::<Config>().map_err(|_| {
        OutboxError::invalid(
            "database",
            "not a PostgreSQL connection string (postgres://user@host:port/db)",
        )
    })
}

/// Forwards notifications to `wake`, reconnecting after a pause when the connection ends.
async fn listen(config: Config, wake: Arc<Notify>) {
    loop {
        if let Ok((client, mut connection)) = config.connect(NoTls).await {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            let statement = format!("LISTEN {NOTIFY_CHANNEL}");
            let listening = client.batch_execute(&statement);
            tokio::pin!(listening);
            let mut started = false;
            loop {
                tokio::select! {
                    result = &mut listening, if !started => {
                        if result.is_err() {
                            break;
                        }
                        started = true;
                        // Rows may have been staged while nobody listened.
                        wake.notify_one();
                    }
                    message = messages.next() => match message {
                        Some(Ok(AsyncMessage::Notification(_))) => wake.notify_one(),
                        Some(Ok(_)) => {}
                        Some(Err(_)) | None => break,
                    }
                }
            }
        }
        tracing::debug!(
            target: "replaysafe::outbox",
            "the wake-up connection ended; polling until it is back"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The claim, in one statement: expired leases first, then due pending rows, each locked
/// with `FOR UPDATE SKIP LOCKED` so concurrent claims never take one row; the reclaimed
/// ones are counted in the same statement. Due rows are read route by route from
/// `replaysafe_outbox_route_due` (each route's oldest, then the oldest of those), so the
/// due rows of a route left out of the claim (its circuit open, another worker's) are
/// never scanned past; a route's candidates not taken stay locked only for the statement.
///
/// A keyed row is taken only in its turn: a pending one when no other row of its key is
/// claimed and none placed before it is pending; an expired claim when no other claim of
/// its key is leased and none expired is placed before it (so a row an operator put back
/// behind a claim waits for that claim to end, and the two never wait for each other). A key's places are in commit order (the staging trigger locks the
/// key, `schema.rs`), so a row whose turn this statement's snapshot shows has no earlier
/// row of its key still uncommitted; and a row leaves the way (delivered, suppressed,
/// dead) only after it was claimed, so an older snapshot can only see more rows in the
/// way, never fewer.
const CLAIM_SQL: &str = "WITH reclaim AS (
    SELECT idempotency_key FROM replaysafe_outbox r
    WHERE status = 'claimed' AND lease_until_ms <= $3 AND route = ANY($5) AND (ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM replaysafe_outbox k WHERE k.ordering_key = r.ordering_key
        AND k.status = 'claimed' AND k.idempotency_key <> r.idempotency_key
        AND (k.lease_until_ms > $3 OR k.ordering_seq < r.ordering_seq)))
    ORDER BY lease_until_ms LIMIT $4 FOR UPDATE SKIP LOCKED),
fresh AS (
    SELECT due.idempotency_key FROM unnest($5::text[]) AS wanted(route)
    CROSS JOIN LATERAL (
        SELECT r.idempotency_key, r.next_attempt_at_ms FROM replaysafe_outbox r
        WHERE r.route = wanted.route AND r.status = 'pending' AND r.next_attempt_at_ms <= $3
        AND (r.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM replaysafe_outbox k WHERE k.ordering_key = r.ordering_key
            AND k.status IN ('pending', 'claimed') AND k.idempotency_key <> r.idempotency_key
            AND (k.status = 'claimed' OR k.ordering_seq < r.ordering_seq)))
        ORDER BY r.next_attempt_at_ms LIMIT $4 FOR UPDATE OF r SKIP LOCKED) due
    ORDER BY due.next_attempt_at_ms LIMIT $4),
picked AS (
    SELECT idempotency_key, true AS reclaimed FROM reclaim
    UNION ALL SELECT idempotency_key, false FROM fresh
    LIMIT $4),
claimed AS (
    UPDATE replaysafe_outbox o SET status = 'claimed', claim_token = $1, lease_until_ms = $2,
        attempts = o.attempts + 1, updated_at_ms = $3
    FROM picked WHERE o.idempotency_key = picked.idempotency_key
    RETURNING picked.reclaimed, o.idempotency_key, o.route, o.effect_kind, o.pipeline, o.run_id,
        o.run_kind, o.replay_flag, o.backfill_id, o.window_start, o.window_end, o.logical_date,
        o.run_interval_start, o.run_interval_end, o.mode, o.conflict, o.max_age_ms,
        o.clock_skew_ms, o.opt_in, o.effect, o.payload_sha256, o.attempts, o.message_type,
        o.target, o.summary, o.payload_bytes, o.window_known, o.upstream),
counted AS (
    UPDATE replaysafe_outbox_counters
    SET value = value + (SELECT count(*) FROM claimed WHERE reclaimed)
    WHERE name = 'reclaimed' AND EXISTS (SELECT 1 FROM claimed WHERE reclaimed))
SELECT * FROM claimed";

/// The columns of a row as [`claimed_row`] reads them, after a leading column saying whether
/// the row is claimed again after a lease ran out.
const ROW_COLUMNS: &str = "idempotency_key, route, effect_kind, pipeline, run_id, run_kind, \
    replay_flag, backfill_id, window_start, window_end, logical_date, run_interval_start, \
    run_interval_end, mode, conflict, max_age_ms, clock_skew_ms, opt_in, effect, \
    payload_sha256, attempts, message_type, target, summary, payload_bytes, window_known, upstream";

fn claimed_row(row: &Row, token: &str) -> Result<ClaimedRow, OutboxError> {
    let key: String = row.try_get(1).map_err(sql("reading a claimed row"))?;
    let read =
        |error: tokio_postgres::Error| OutboxError::corrupt(key.clone(), "claimed row", error);
    let attempts: i32 = row.try_get(21).map_err(read)?;
    Ok(ClaimedRow {
        route: row.try_get(2).map_err(read)?,
        effect_kind: row.try_get(3).map_err(read)?,
        context: RowContext {
            pipeline: row.try_get(4).map_err(read)?,
            run_id: row.try_get(5).map_err(read)?,
            run_kind: row.try_get(6).map_err(read)?,
            replay_flag: row.try_get(7).map_err(read)?,
            backfill_id: row.try_get(8).map_err(read)?,
            window_start: row.try_get(9).map_err(read)?,
            window_end: row.try_get(10).map_err(read)?,
            logical_date: row.try_get(11).map_err(read)?,
            run_interval_start: row.try_get(12).map_err(read)?,
            run_interval_end: row.try_get(13).map_err(read)?,
            mode: row.try_get(14).map_err(read)?,
            conflict: row.try_get(15).map_err(read)?,
            max_age_ms: row.try_get(16).map_err(read)?,
            clock_skew_ms: row.try_get(17).map_err(read)?,
            opt_in: row.try_get(18).map_err(read)?,
            window_known: row.try_get(26).map_err(read)?,
            upstream: row.try_get(27).map_err(read)?,
        },
        effect: row.try_get(19).map_err(read)?,
        payload_sha256: row.try_get(20).map_err(read)?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        message_type: row.try_get(22).map_err(read)?,
        target: row.try_get(23).map_err(read)?,
        summary: row.try_get(24).map_err(read)?,
        payload_bytes: row.try_get(25).map_err(read)?,
        claim_token: token.to_owned(),
        reclaimed: row.try_get(0).map_err(read)?,
        key,
    })
}

/// The columns of [`RowSummary`], in [`summary_row`]'s order.
const SUMMARY_COLUMNS: &str = "idempotency_key, route, pipeline, effect_kind, message_type, \
    target, window_start, window_end, status, reasons, attempts, last_error, \
    changed_after_delivery, run_id, run_kind, backfill_id, payload_sha256, payload_bytes, \
    summary, opt_in IS NOT NULL, ordering_key";

fn summary_row(row: &Row) -> Result<RowSummary, OutboxError> {
    let stored: String = row.get(8);
    let attempts: i32 = row.get(10);
    Ok(RowSummary {
        key: row.get(0),
        route: row.get(1),
        pipeline: row.get(2),
        effect_kind: row.get(3),
        message_type: row.get(4),
        target: row.get(5),
        window_start: row.get(6),
        window_end: row.get(7),
        status: stored.parse()?,
        reasons: row.get(9),
        attempts: u32::try_from(attempts).unwrap_or(0),
        last_error: row.get(11),
        changed_after_delivery: row.get(12),
        run_id: row.get(13),
        run_kind: row.get(14),
        backfill_id: row.get(15),
        payload_sha256: row.get(16),
        payload_bytes: u64::try_from(row.get::<_, i64>(17)).unwrap_or(0),
        summary: row.get(18),
        has_opt_in: row.get(19),
        ordering_key: row.get(20),
    })
}

/// Refills a shared bucket to now and takes one token (`$1` route, `$2` rate a second,
/// `$3` capacity, `$4` now in ms), under the row's lock; returns the tokens left (below
/// zero: owed to deliveries waiting for theirs).
const TAKE_SHARED_TOKEN_SQL: &str = "INSERT INTO replaysafe_outbox_rates AS r (route, tokens, refilled_at_ms) \
    VALUES ($1, $3::float8 - 1, $4::int8) ON CONFLICT (route) DO UPDATE SET \
    tokens = LEAST($3::float8, r.tokens \
        + GREATEST($4::int8 - r.refilled_at_ms, 0)::float8 / 1000.0 * $2::float8) - 1, \
    refilled_at_ms = GREATEST(r.refilled_at_ms, $4::int8) \
    RETURNING tokens";

/// Gives back a shared token (`$1` route, `$2` capacity).
const GIVE_BACK_SHARED_TOKEN_SQL: &str =
    "UPDATE replaysafe_outbox_rates SET tokens = LEAST($2::float8, tokens + 1) WHERE route = $1";

/// A claim token: 128 random bits, hex.
fn new_token() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

const COMPLETE_DELIVERED: &str = "UPDATE replaysafe_outbox SET status = 'delivered', \
    claim_token = NULL, lease_until_ms = NULL, last_error = NULL, reasons = 'current_window', \
    delivered_at_ms = $3, delivered_sha256 = $4, changed_after_delivery = (payload_sha256 <> $4), \
    updated_at_ms = $3 WHERE idempotency_key = $1 AND claim_token = $2 AND status = 'claimed'";
const COMPLETE_SUPPRESSED: &str = "UPDATE replaysafe_outbox SET status = 'suppressed', \
    claim_token = NULL, lease_until_ms = NULL, reasons = $4, updated_at_ms = $3 \
    WHERE idempotency_key = $1 AND claim_token = $2 AND status = 'claimed'";
const COMPLETE_RETRY: &str = "UPDATE replaysafe_outbox SET status = 'pending', \
    claim_token = NULL, lease_until_ms = NULL, last_error = $4, next_attempt_at_ms = $5, \
    updated_at_ms = $3 WHERE idempotency_key = $1 AND claim_token = $2 AND status = 'claimed'";
const COMPLETE_DEAD: &str = "UPDATE replaysafe_outbox SET status = 'dead', \
    claim_token = NULL, lease_until_ms = NULL, last_error = $4, updated_at_ms = $3 \
    WHERE idempotency_key = $1 AND claim_token = $2 AND status = 'claimed'";

/// Puts rows back to pending (`$1` statuses, `$2` keys or null for all, `$3` now, `$4`
/// the approval document or null to keep the row's own) and audits each (`$5` reason,
/// `$6` operator, `$7` the approval's expiry, `$8` the action), in one statement.
fn reopen_sql() -> String {
    format!(
        "WITH picked AS (
    SELECT idempotency_key FROM replaysafe_outbox
    WHERE status = ANY($1) AND ($2::text[] IS NULL OR idempotency_key = ANY($2))
    ORDER BY staged_at_ms FOR UPDATE),
reopened AS (
    UPDATE replaysafe_outbox o SET status = 'pending', attempts = 0, next_attempt_at_ms = $3,
        opt_in = COALESCE($4, o.opt_in), claim_token = NULL, lease_until_ms = NULL, updated_at_ms = $3
    FROM picked WHERE o.idempotency_key = picked.idempotency_key
    RETURNING {}),
audited AS (
    INSERT INTO replaysafe_outbox_audit (at_ms, idempotency_key, action, reason, approved_by, expires_at, opt_in)
    SELECT $3, idempotency_key, $8, $5, $6, $7, $4 FROM reopened)
SELECT * FROM reopened",
        SUMMARY_COLUMNS
            .split(", ")
            .map(|column| match column.trim() {
                "opt_in IS NOT NULL" => "o.opt_in IS NOT NULL".to_owned(),
                other => format!("o.{other}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[async_trait]
impl OutboxStore for PostgresOutbox {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedRow>, OutboxError> {
        if request.routes.is_empty() || request.limit == 0 {
            return Ok(Vec::new());
        }
        let now = millis(request.now);
        let lease_until =
            now.saturating_add(i64::try_from(request.lease.as_millis()).unwrap_or(i64::MAX));
        let token = new_token();
        let limit = i64::from(request.limit);
        let client = self.client("claiming rows").await?;
        let statement = client
            .prepare_cached(CLAIM_SQL)
            .await
            .map_err(sql("claiming rows"))?;
        let rows = client
            .query(
                &statement,
                &[&token, &lease_until, &now, &limit, &request.routes],
            )
            .await
            .map_err(sql("claiming rows"))?;
        rows.iter().map(|row| claimed_row(row, &token)).collect()
    }

    async fn complete(
        &self,
        row: &ClaimedRow,
        completion: Completion,
        now: DateTime<Utc>,
    ) -> Result<CompletionResult, OutboxError> {
        let now = millis(now);
        let (query, text, next_attempt) = match completion {
            Completion::Delivered { payload_sha256 } => (COMPLETE_DELIVERED, payload_sha256, None),
            Completion::Suppressed { reasons } => (COMPLETE_SUPPRESSED, reasons, None),
            Completion::Retry {
                next_attempt_at,
                error,
            } => (COMPLETE_RETRY, error, Some(millis(next_attempt_at))),
            Completion::Dead { error } => (COMPLETE_DEAD, error, None),
        };
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&row.key, &row.claim_token, &now, &text];
        if let Some(next_attempt) = &next_attempt {
            params.push(next_attempt);
        }
        let client = self.client("completing a claim").await?;
        let statement = client
            .prepare_cached(query)
            .await
            .map_err(sql("completing a claim"))?;
        let changed = client
            .execute(&statement, &params)
            .await
            .map_err(sql("completing a claim"))?;
        if changed == 1 {
            return Ok(CompletionResult::Applied);
        }
        client
            .execute(
                "UPDATE replaysafe_outbox_counters SET value = value + 1 WHERE name = 'stale_completions'",
                &[],
            )
            .await
            .map_err(sql("counting a stale completion"))?;
        Ok(CompletionResult::Stale)
    }

    async fn release(&self, rows: &[ClaimedRow]) -> Result<(), OutboxError> {
        if rows.is_empty() {
            return Ok(());
        }
        let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        let tokens: Vec<&str> = rows.iter().map(|r| r.claim_token.as_str()).collect();
        let client = self.client("releasing claims").await?;
        client
            .execute(
                "UPDATE replaysafe_outbox o SET status = 'pending', claim_token = NULL, \
                 lease_until_ms = NULL, attempts = GREATEST(o.attempts - 1, 0) \
                 FROM unnest($1::text[], $2::text[]) AS r(key, token) \
                 WHERE o.idempotency_key = r.key AND o.claim_token = r.token AND o.status = 'claimed'",
                &[&keys, &tokens],
            )
            .await
            .map_err(sql("releasing claims"))?;
        Ok(())
    }

    async fn counts(&self) -> Result<Vec<StatusCount>, OutboxError> {
        let client = self.client("counting rows").await?;
        let rows = client
            .query(
                "SELECT status, route, pipeline, COUNT(*) FROM replaysafe_outbox \
                 GROUP BY status, route, pipeline ORDER BY status, route, pipeline",
                &[],
            )
            .await
            .map_err(sql("counting rows"))?;
        rows.iter()
            .map(|row| {
                let status: String = row.get(0);
                let rows: i64 = row.get(3);
                Ok(StatusCount {
                    status: status.parse()?,
                    route: row.get(1),
                    pipeline: row.get(2),
                    rows: u64::try_from(rows).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn oldest_pending_age(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Option<Duration>, OutboxError> {
        let client = self.client("finding the oldest pending row").await?;
        let row = client
            .query_one(
                "SELECT MIN(staged_at_ms) FROM replaysafe_outbox WHERE status IN ('pending', 'claimed')",
                &[],
            )
            .await
            .map_err(sql("finding the oldest pending row"))?;
        let oldest: Option<i64> = row.get(0);
        Ok(oldest.map(|staged| {
            (now - from_millis(staged))
                .to_std()
                .unwrap_or(Duration::ZERO)
        }))
    }

    async fn in_doubt(&self, now: DateTime<Utc>) -> Result<u64, OutboxError> {
        let client = self.client("counting rows in doubt").await?;
        let row = client
            .query_one(
                "SELECT COUNT(*) FROM replaysafe_outbox WHERE status = 'claimed' AND lease_until_ms <= $1",
                &[&millis(now)],
            )
            .await
            .map_err(sql("counting rows in doubt"))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    async fn list(&self, status: Status, limit: u32) -> Result<Vec<RowSummary>, OutboxError> {
        let client = self.client("listing rows").await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {SUMMARY_COLUMNS} FROM replaysafe_outbox WHERE status = $1 ORDER BY staged_at_ms LIMIT $2"
                ),
                &[&status.as_str(), &i64::from(limit)],
            )
            .await
            .map_err(sql("listing rows"))?;
        rows.iter().map(summary_row).collect()
    }

    async fn get(&self, key: &str) -> Result<Option<RowSummary>, OutboxError> {
        let client = self.client("reading a row").await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {SUMMARY_COLUMNS} FROM replaysafe_outbox WHERE idempotency_key = $1"
                ),
                &[&key],
            )
            .await
            .map_err(sql("reading a row"))?;
        row.as_ref().map(summary_row).transpose()
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
        let client = self.client("looking at due rows").await?;
        let rows = client
            .query(
                &format!(
                    "SELECT status = 'claimed', {ROW_COLUMNS} FROM replaysafe_outbox \
                     WHERE ((status = 'pending' AND next_attempt_at_ms <= $1) \
                        OR (status = 'claimed' AND lease_until_ms <= $1)) \
                       AND idempotency_key > $2 AND route = ANY($3) \
                     ORDER BY idempotency_key LIMIT $4"
                ),
                &[
                    &millis(now),
                    &after.unwrap_or_default(),
                    &routes,
                    &i64::from(limit),
                ],
            )
            .await
            .map_err(sql("looking at due rows"))?;
        rows.iter().map(|row| claimed_row(row, "")).collect()
    }

    async fn retry_dead(
        &self,
        keys: Option<&[String]>,
        action: &OperatorAction,
        now: DateTime<Utc>,
    ) -> Result<Vec<RowSummary>, OutboxError> {
        self.reopen(keys, &[Status::Dead], "retry", action, now)
            .await
    }

    async fn resend(
        &self,
        keys: &[String],
        action: &OperatorAction,
        now: DateTime<Utc>,
    ) -> Result<Vec<RowSummary>, OutboxError> {
        self.reopen(
            Some(keys),
            &[Status::Delivered, Status::Suppressed],
            "resend",
            action,
            now,
        )
        .await
    }

    async fn purge_delivered(
        &self,
        older_than: Duration,
        now: DateTime<Utc>,
    ) -> Result<u64, OutboxError> {
        let mut client = self.client("purging delivered rows").await?;
        let tx = client
            .transaction()
            .await
            .map_err(sql("purging delivered rows"))?;
        // Held until commit: no row can be delivered with a longer max age meanwhile.
        tx.execute(
            "LOCK TABLE replaysafe_outbox IN SHARE ROW EXCLUSIVE MODE",
            &[],
        )
        .await
        .map_err(sql("purging delivered rows"))?;
        let longest: Option<i64> = tx
            .query_one(
                "SELECT MAX(max_age_ms + clock_skew_ms) FROM replaysafe_outbox WHERE status = 'delivered'",
                &[],
            )
            .await
            .map_err(sql("purging delivered rows"))?
            .get(0);
        let cutoff = purge_cutoff(older_than, longest, now)?;
        let purged = tx
            .execute(
                "DELETE FROM replaysafe_outbox WHERE status = 'delivered' AND delivered_at_ms < $1",
                &[&millis(cutoff)],
            )
            .await
            .map_err(sql("purging delivered rows"))?;
        tx.commit().await.map_err(sql("purging delivered rows"))?;
        Ok(purged)
    }

    async fn counters(&self) -> Result<StoreCounters, OutboxError> {
        let client = self.client("reading counters").await?;
        let rows = client
            .query("SELECT name, value FROM replaysafe_outbox_counters", &[])
            .await
            .map_err(sql("reading counters"))?;
        let mut counters = StoreCounters::default();
        for row in rows {
            let name: String = row.get(0);
            let value = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
            match name.as_str() {
                "stale_completions" => counters.stale_completions = value,
                "reclaimed" => counters.reclaimed = value,
                _ => {}
            }
        }
        Ok(counters)
    }

    async fn wait_for_work(&self, within: Duration) {
        if self.inner.listener.is_some() {
            let _ = tokio::time::timeout(within, self.inner.wake.notified()).await;
        } else {
            tokio::time::sleep(within).await;
        }
    }

    async fn waiting_in_key_order(&self) -> Result<u64, OutboxError> {
        let client = self.client("counting rows waiting in key order").await?;
        let row = client
            .query_one(WAITING_IN_KEY_ORDER_SQL, &[])
            .await
            .map_err(sql("counting rows waiting in key order"))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    async fn circuits(&self) -> Result<Vec<CircuitRecord>, OutboxError> {
        let client = self.client("reading circuits").await?;
        let rows = client
            .query(CIRCUITS_SQL, &[])
            .await
            .map_err(sql("reading circuits"))?;
        rows.iter()
            .map(|row| {
                Ok(circuit_record(
                    row.try_get(0).map_err(sql("reading circuits"))?,
                    row.try_get(1).map_err(sql("reading circuits"))?,
                    row.try_get(2).map_err(sql("reading circuits"))?,
                    row.try_get(3).map_err(sql("reading circuits"))?,
                    row.try_get(4).map_err(sql("reading circuits"))?,
                    row.try_get(5).map_err(sql("reading circuits"))?,
                ))
            })
            .collect()
    }

    async fn record_circuit(&self, circuit: &CircuitRecord) -> Result<(), OutboxError> {
        let values = CircuitValues::of(circuit);
        let client = self.client("recording a circuit").await?;
        client
            .execute(
                RECORD_CIRCUIT_SQL,
                &[
                    &values.route,
                    &values.state,
                    &values.failures,
                    &values.opened_at_ms,
                    &values.next_probe_at_ms,
                    &values.updated_at_ms,
                ],
            )
            .await
            .map_err(sql("recording a circuit"))?;
        Ok(())
    }

    async fn take_shared_token(
        &self,
        route: &str,
        per_second: f64,
        capacity: f64,
        now: DateTime<Utc>,
    ) -> Result<f64, OutboxError> {
        let client = self.client("taking a shared token").await?;
        let row = client
            .query_one(
                TAKE_SHARED_TOKEN_SQL,
                &[&route, &per_second, &capacity, &millis(now)],
            )
            .await
            .map_err(sql("taking a shared token"))?;
        row.try_get(0).map_err(sql("taking a shared token"))
    }

    async fn give_back_shared_token(&self, route: &str, capacity: f64) -> Result<(), OutboxError> {
        let client = self.client("giving back a shared token").await?;
        client
            .execute(GIVE_BACK_SHARED_TOKEN_SQL, &[&route, &capacity])
            .await
            .map_err(sql("giving back a shared token"))?;
        Ok(())
    }

    async fn count_route_failure(
        &self,
        route: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u32>, OutboxError> {
        let client = self.client("counting a route's failure").await?;
        let row = client
            .query_one(COUNT_ROUTE_FAILURE_SQL, &[&route, &millis(now)])
            .await
            .map_err(sql("counting a route's failure"))?;
        let count: i32 = row.try_get(0).map_err(sql("counting a route's failure"))?;
        Ok(Some(failure_count(count.into())))
    }

    async fn clear_route_failures(&self, route: &str) -> Result<(), OutboxError> {
        let client = self.client("clearing a route's failures").await?;
        client
            .execute(CLEAR_ROUTE_FAILURES_SQL, &[&route])
            .await
            .map_err(sql("clearing a route's failures"))?;
        Ok(())
    }

    async fn take_probe(
        &self,
        route: &str,
        now: DateTime<Utc>,
        next: DateTime<Utc>,
    ) -> Result<bool, OutboxError> {
        let client = self.client("taking a circuit's probe").await?;
        let changed = client
            .execute(TAKE_PROBE_SQL, &[&route, &millis(now), &millis(next)])
            .await
            .map_err(sql("taking a circuit's probe"))?;
        Ok(changed == 1)
    }
}
