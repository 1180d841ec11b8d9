//! Versioned schema migrations of the SQLite outbox.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::OutboxError;

/// The newest schema version this crate knows.
pub const SCHEMA_VERSION: i64 = 3;

/// Migration `n` brings the schema from version `n - 1` to `n`.
const MIGRATIONS: [&str; 3] = [V1, V2, V3];

/// Version 2: a row's opt-in is the whole approval document, in one column, checked again
/// at delivery; the free-text opt-in columns of version 1 lifted the gate unchecked and
/// are gone (a row that carried one is decided on its own context, so a replay's or stale
/// row is suppressed). A row keeps its run's lineage (`upstream`, so a downstream of a
/// replay stays one) and whether its run had a window. The audit table records the
/// approval document an operator gave.
pub(crate) const V2: &str = "
ALTER TABLE replaysafe_outbox ADD COLUMN opt_in TEXT;
ALTER TABLE replaysafe_outbox ADD COLUMN window_known BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE replaysafe_outbox ADD COLUMN upstream TEXT;
ALTER TABLE replaysafe_outbox DROP COLUMN opt_in_reason;
ALTER TABLE replaysafe_outbox DROP COLUMN opt_in_approved_by;
ALTER TABLE replaysafe_outbox DROP COLUMN opt_in_expires_at;
ALTER TABLE replaysafe_outbox_audit ADD COLUMN opt_in TEXT;
";

/// Version 3: ordering keys, the circuits of routes with a breaker (shared by the
/// workers, shown by `outbox status`), the token buckets of rates shared by them, and an
/// index of each route's due rows (a claim reads each route's own range). A keyed row gets its place in its key's order when it is
/// first inserted (`ordering_seq`, one more than the key's last; SQLite serializes
/// writers, so that is the commit order); the partial index serves the claim's check
/// that no earlier row of the key is waiting and none is claimed.
pub(crate) const V3: &str = "
ALTER TABLE replaysafe_outbox ADD COLUMN ordering_key TEXT;
ALTER TABLE replaysafe_outbox ADD COLUMN ordering_seq INTEGER;
CREATE INDEX replaysafe_outbox_ordering ON replaysafe_outbox (ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'claimed');
CREATE INDEX replaysafe_outbox_ordering_seq ON replaysafe_outbox (ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL;
CREATE INDEX replaysafe_outbox_route_due ON replaysafe_outbox (route, next_attempt_at_ms)
    WHERE status = 'pending';
CREATE TABLE replaysafe_outbox_circuits (
    route            TEXT PRIMARY KEY NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('closed', 'open')),
    failures         INTEGER NOT NULL,
    opened_at_ms     INTEGER,
    next_probe_at_ms INTEGER,
    updated_at_ms    INTEGER NOT NULL
);
CREATE TABLE replaysafe_outbox_rates (
    route          TEXT PRIMARY KEY NOT NULL,
    tokens         REAL NOT NULL,
    refilled_at_ms INTEGER NOT NULL
);
CREATE TRIGGER replaysafe_outbox_order AFTER INSERT ON replaysafe_outbox
    WHEN NEW.ordering_key IS NOT NULL
BEGIN
    UPDATE replaysafe_outbox SET ordering_seq = (
        SELECT COALESCE(MAX(ordering_seq), 0) + 1 FROM replaysafe_outbox
        WHERE ordering_key = NEW.ordering_key)
    WHERE rowid = NEW.rowid;
END;
";

const V1: &str = "
CREATE TABLE replaysafe_outbox (
    idempotency_key        TEXT PRIMARY KEY NOT NULL,
    route                  TEXT NOT NULL,
    pipeline               TEXT NOT NULL,
    effect_kind            TEXT NOT NULL,
    message_type           TEXT NOT NULL,
    target                 TEXT NOT NULL,
    window_start           TEXT NOT NULL,
    window_end             TEXT NOT NULL,
    run_id                 TEXT NOT NULL,
    run_kind               TEXT NOT NULL,
    replay_flag            INTEGER,
    backfill_id            TEXT,
    logical_date           TEXT,
    run_interval_start     TEXT,
    run_interval_end       TEXT,
    mode                   TEXT NOT NULL DEFAULT 'live',
    conflict               TEXT,
    max_age_ms             INTEGER NOT NULL,
    clock_skew_ms          INTEGER NOT NULL DEFAULT 300000,
    opt_in_reason          TEXT,
    opt_in_approved_by     TEXT,
    opt_in_expires_at      TEXT,
    effect                 TEXT NOT NULL,
    payload_sha256         TEXT NOT NULL,
    payload_bytes          INTEGER NOT NULL,
    summary                TEXT,
    source_version         INTEGER NOT NULL DEFAULT 0,
    status                 TEXT NOT NULL
        CHECK (status IN ('pending', 'claimed', 'delivered', 'suppressed', 'dead')),
    reasons                TEXT NOT NULL DEFAULT '',
    attempts               INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_ms     INTEGER NOT NULL,
    claim_token            TEXT,
    lease_until_ms         INTEGER,
    last_error             TEXT,
    staged_at_ms           INTEGER NOT NULL,
    updated_at_ms          INTEGER NOT NULL,
    delivered_at_ms        INTEGER,
    delivered_sha256       TEXT,
    changed_after_delivery INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX replaysafe_outbox_due ON replaysafe_outbox (status, next_attempt_at_ms);
CREATE TABLE replaysafe_outbox_audit (
    id              INTEGER PRIMARY KEY,
    at_ms           INTEGER NOT NULL,
    idempotency_key TEXT NOT NULL,
    action          TEXT NOT NULL,
    reason          TEXT NOT NULL,
    approved_by     TEXT NOT NULL,
    expires_at      TEXT NOT NULL
);
CREATE TABLE replaysafe_outbox_counters (
    name  TEXT PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL
);
INSERT INTO replaysafe_outbox_counters (name, value)
    VALUES ('stale_completions', 0), ('reclaimed', 0);
";

fn sql(operation: &'static str) -> impl FnOnce(rusqlite::Error) -> OutboxError {
    move |error| OutboxError::store(operation, error)
}

/// The schema version of the database, 0 when the outbox was never created in it.
pub fn schema_version(conn: &Connection) -> Result<i64, OutboxError> {
    let exists: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'replaysafe_outbox_schema')",
            [],
            |row| row.get(0),
        )
        .map_err(sql("reading the outbox schema version"))?;
    if !exists {
        return Ok(0);
    }
    let version: Option<i64> = conn
        .query_row("SELECT version FROM replaysafe_outbox_schema", [], |row| {
            row.get(0)
        })
        .optional()
        .map_err(sql("reading the outbox schema version"))?;
    Ok(version.unwrap_or(0))
}

/// Checks, without changing anything, that `conn`'s database holds the outbox at the
/// schema version this crate reads: [`OutboxError::NoOutbox`] (naming `database`) when
/// there is none, [`OutboxError::SchemaTooOld`] or [`OutboxError::SchemaTooNew`] otherwise.
pub fn check_schema(conn: &Connection, database: &str) -> Result<(), OutboxError> {
    match schema_version(conn)? {
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

/// Creates or migrates the outbox tables in `conn`'s database, in one transaction.
///
/// A database whose schema is newer than [`SCHEMA_VERSION`] is refused with
/// [`OutboxError::SchemaTooNew`] and left untouched.
pub fn migrate(conn: &mut Connection) -> Result<(), OutboxError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql("starting the outbox migration"))?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS replaysafe_outbox_schema (version INTEGER NOT NULL)",
    )
    .map_err(sql("creating the outbox schema table"))?;
    let found = schema_version(&tx)?;
    if found > SCHEMA_VERSION {
        return Err(OutboxError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for migration in &MIGRATIONS[usize::try_from(found).unwrap_or(0)..] {
        tx.execute_batch(migration)
            .map_err(sql("migrating the outbox schema"))?;
    }
    tx.execute("DELETE FROM replaysafe_outbox_schema", [])
        .map_err(sql("recording the outbox schema version"))?;
    tx.execute(
        "INSERT INTO replaysafe_outbox_schema (version) VALUES (?1)",
        [SCHEMA_VERSION],
    )
    .map_err(sql("recording the outbox schema version"))?;
    tx.commit().map_err(sql("committing the outbox migration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_migrates_and_its_free_text_opt_ins_are_gone() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(V1).unwrap();
        conn.execute_batch(
            "CREATE TABLE replaysafe_outbox_schema (version INTEGER NOT NULL);
             INSERT INTO replaysafe_outbox_schema VALUES (1);
             INSERT INTO replaysafe_outbox (idempotency_key, route, pipeline, effect_kind, message_type,
                 target, window_start, window_end, run_id, run_kind, max_age_ms, opt_in_reason,
                 opt_in_approved_by, opt_in_expires_at, effect, payload_sha256, payload_bytes, status,
                 next_attempt_at_ms, staged_at_ms, updated_at_ms)
             VALUES ('k', 'r', 'p', 'webhook', 'm', 't', '2026-07-05T00:00:00Z', '2026-07-06T00:00:00Z',
                 'backfill__x', 'backfill', 21600000, 'trust me', 'mallory', '2099-01-01T00:00:00Z',
                 '{}', 'ab', 2, 'pending', 0, 0, 0);",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), SCHEMA_VERSION);
        let opt_in: Option<String> = conn
            .query_row("SELECT opt_in FROM replaysafe_outbox", [], |r| r.get(0))
            .unwrap();
        assert_eq!(opt_in, None, "free text never becomes an approval document");
        assert!(
            conn.query_row("SELECT opt_in_reason FROM replaysafe_outbox", [], |r| {
                r.get::<_, Option<String>>(0)
            })
            .is_err(),
            "the free-text columns are gone"
        );
        check_schema(&conn, "memory").unwrap();
    }
}
