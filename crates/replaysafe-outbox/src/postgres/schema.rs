//! Versioned schema migrations of the PostgreSQL outbox.

use tokio_postgres::{Client, GenericClient};

use crate::OutboxError;

/// The newest schema version this crate knows (the same numbering as SQLite's).
pub const SCHEMA_VERSION: i64 = 3;

/// The advisory lock that serializes migrations: many workers may start at once.
const MIGRATION_LOCK: i64 = 0x7265_706c_6179_7366; // "replaysf"

/// Migration `n` brings the schema from version `n - 1` to `n`.
const MIGRATIONS: [&str; 3] = [V1, crate::sqlite::schema::V2, V3];

/// Version 3: ordering keys, the circuits of routes with a breaker (shared by the
/// workers, shown by `outbox status`), the token buckets of rates shared by them, and an
/// index of each route's due rows (a claim reads each route's own range). A keyed row's place in its key's order (`ordering_seq`) is
/// taken from a sequence by a trigger *after* the trigger takes a transaction-level
/// advisory lock of the key: a second transaction staging the same key waits until the
/// first commits or rolls back, so a key's places are in commit order and a worker can
/// never see a later row of a key while an earlier one is still uncommitted (the trap of
/// ordering by a sequence alone: a later transaction that commits first would overtake).
/// The partial index serves the claim's check that no earlier row of the key is waiting
/// and none is claimed.
const V3: &str = "
ALTER TABLE replaysafe_outbox ADD COLUMN ordering_key TEXT;
ALTER TABLE replaysafe_outbox ADD COLUMN ordering_seq BIGINT;
CREATE SEQUENCE replaysafe_outbox_ordering_seq;
CREATE INDEX replaysafe_outbox_ordering ON replaysafe_outbox (ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'claimed');
CREATE INDEX replaysafe_outbox_route_due ON replaysafe_outbox (route, next_attempt_at_ms)
    WHERE status = 'pending';
CREATE TABLE replaysafe_outbox_circuits (
    route            TEXT PRIMARY KEY,
    state            TEXT NOT NULL CHECK (state IN ('closed', 'open')),
    failures         INTEGER NOT NULL,
    opened_at_ms     BIGINT,
    next_probe_at_ms BIGINT,
    updated_at_ms    BIGINT NOT NULL
);
CREATE TABLE replaysafe_outbox_rates (
    route          TEXT PRIMARY KEY,
    tokens         DOUBLE PRECISION NOT NULL,
    refilled_at_ms BIGINT NOT NULL
);
CREATE FUNCTION replaysafe_outbox_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.ordering_key IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('replaysafe_outbox/' || NEW.ordering_key, 0));
        NEW.ordering_seq := nextval('replaysafe_outbox_ordering_seq');
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER replaysafe_outbox_order BEFORE INSERT ON replaysafe_outbox
    FOR EACH ROW EXECUTE FUNCTION replaysafe_outbox_order();
";

const V1: &str = "
CREATE TABLE replaysafe_outbox (
    idempotency_key        TEXT PRIMARY KEY,
    route                  TEXT NOT NULL,
    pipeline               TEXT NOT NULL,
    effect_kind            TEXT NOT NULL,
    message_type           TEXT NOT NULL,
    target                 TEXT NOT NULL,
    window_start           TEXT NOT NULL,
    window_end             TEXT NOT NULL,
    run_id                 TEXT NOT NULL,
    run_kind               TEXT NOT NULL,
    replay_flag            BOOLEAN,
    backfill_id            TEXT,
    logical_date           TEXT,
    run_interval_start     TEXT,
    run_interval_end       TEXT,
    mode                   TEXT NOT NULL DEFAULT 'live',
    conflict               TEXT,
    max_age_ms             BIGINT NOT NULL,
    clock_skew_ms          BIGINT NOT NULL DEFAULT 300000,
    opt_in_reason          TEXT,
    opt_in_approved_by     TEXT,
    opt_in_expires_at      TEXT,
    effect                 TEXT NOT NULL,
    payload_sha256         TEXT NOT NULL,
    payload_bytes          BIGINT NOT NULL,
    summary                TEXT,
    source_version         BIGINT NOT NULL DEFAULT 0,
    status                 TEXT NOT NULL
        CHECK (status IN ('pending', 'claimed', 'delivered', 'suppressed', 'dead')),
    reasons                TEXT NOT NULL DEFAULT '',
    attempts               INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_ms     BIGINT NOT NULL,
    claim_token            TEXT,
    lease_until_ms         BIGINT,
    last_error             TEXT,
    staged_at_ms           BIGINT NOT NULL,
    updated_at_ms          BIGINT NOT NULL,
    delivered_at_ms        BIGINT,
    delivered_sha256       TEXT,
    changed_after_delivery BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX replaysafe_outbox_due ON replaysafe_outbox (next_attempt_at_ms) WHERE status = 'pending';
CREATE INDEX replaysafe_outbox_leases ON replaysafe_outbox (lease_until_ms) WHERE status = 'claimed';
CREATE INDEX replaysafe_outbox_by_status ON replaysafe_outbox (status, staged_at_ms);
CREATE TABLE replaysafe_outbox_audit (
    id              BIGSERIAL PRIMARY KEY,
    at_ms           BIGINT NOT NULL,
    idempotency_key TEXT NOT NULL,
    action          TEXT NOT NULL,
    reason          TEXT NOT NULL,
    approved_by     TEXT NOT NULL,
    expires_at      TEXT NOT NULL
);
CREATE TABLE replaysafe_outbox_counters (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO replaysafe_outbox_counters (name, value)
    VALUES ('stale_completions', 0), ('reclaimed', 0);
CREATE FUNCTION replaysafe_outbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('replaysafe_outbox', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER replaysafe_outbox_wake AFTER INSERT OR UPDATE OF status ON replaysafe_outbox
    FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION replaysafe_outbox_wake();
";

fn sql(operation: &'static str) -> impl FnOnce(tokio_postgres::Error) -> OutboxError {
    move |error| OutboxError::store(operation, error)
}

/// The schema version of the database, 0 when the outbox was never created in it.
pub async fn schema_version(client: &impl GenericClient) -> Result<i64, OutboxError> {
    let row = client
        .query_one(
            "SELECT to_regclass('replaysafe_outbox_schema') IS NOT NULL",
            &[],
        )
        .await
        .map_err(sql("reading the outbox schema version"))?;
    if !row.get::<_, bool>(0) {
        return Ok(0);
    }
    let row = client
        .query_opt("SELECT version FROM replaysafe_outbox_schema", &[])
        .await
        .map_err(sql("reading the outbox schema version"))?;
    Ok(row.map_or(0, |row| row.get(0)))
}

/// Checks, without changing anything, that the database holds the outbox at the schema
/// version this crate reads: [`OutboxError::NoOutbox`] (naming `database`) when there is
/// none, [`OutboxError::SchemaTooOld`] or [`OutboxError::SchemaTooNew`] otherwise.
pub async fn check_schema(client: &impl GenericClient, database: &str) -> Result<(), OutboxError> {
    match schema_version(client).await? {
        0 => Err(OutboxError::NoOutbox {
            database: database.to_owned(),
        }),
        SCHEMA_VERSION => Ok(()),
        found if found > SCHEMA_VERSION => Err(OutboxError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        }),
        found => Err(OutboxError::SchemaTooOld {
            found,
            supported: SCHEMA_VERSION,
        }),
    }
}

/// Creates or migrates the outbox tables, in one transaction under an advisory lock, so
/// that workers starting together migrate once.
///
/// A database whose schema is newer than [`SCHEMA_VERSION`] is refused with
/// [`OutboxError::SchemaTooNew`] and left untouched.
pub async fn migrate(client: &mut Client) -> Result<(), OutboxError> {
    let tx = client
        .transaction()
        .await
        .map_err(sql("starting the outbox migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(sql("locking the outbox migration"))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS replaysafe_outbox_schema (version BIGINT NOT NULL)",
    )
    .await
    .map_err(sql("creating the outbox schema table"))?;
    let found = schema_version(&tx).await?;
    if found > SCHEMA_VERSION {
        return Err(OutboxError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return tx
            .commit()
            .await
            .map_err(sql("committing the outbox migration"));
    }
    for migration in &MIGRATIONS[usize::try_from(found).unwrap_or(0)..] {
        tx.batch_execute(migration)
            .await
            .map_err(sql("migrating the outbox schema"))?;
    }
    tx.execute("DELETE FROM replaysafe_outbox_schema", &[])
        .await
        .map_err(sql("recording the outbox schema version"))?;
    tx.execute(
        "INSERT INTO replaysafe_outbox_schema (version) VALUES ($1)",
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(sql("recording the outbox schema version"))?;
    tx.commit()
        .await
        .map_err(sql("committing the outbox migration"))
}
