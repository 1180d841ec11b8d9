//! The journal in a SQLite database, and its memory of keys.

use std::fmt;
use std::path::{Path, PathBuf};

use replaysafe_core::adapter::{Held, PerProcess};
use replaysafe_core::journal::{Claim, Journal, JournalEntry, JournalError, Ledger};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::OutboxError;
use crate::journal::{JournalQuery, Line, memory};

use super::{configure, sql};

/// The journal tables, created when missing (`docs/reference/journal.md`).
pub const JOURNAL_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS replaysafe_journal (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms           INTEGER NOT NULL,
    pipeline        TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    decision        TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    action          TEXT NOT NULL DEFAULT '',
    line            TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS replaysafe_journal_by_pipeline ON replaysafe_journal (pipeline, ts_ms);
CREATE TABLE IF NOT EXISTS replaysafe_journal_keys (
    idempotency_key TEXT NOT NULL,
    action          TEXT NOT NULL DEFAULT '',
    state           TEXT NOT NULL CHECK (state IN ('open', 'delivered', 'closed')),
    run_id          TEXT NOT NULL,
    ts_ms           INTEGER NOT NULL,
    PRIMARY KEY (idempotency_key, action)
);
";

const INSERT_LINE: &str = "INSERT INTO replaysafe_journal \
    (ts_ms, pipeline, run_id, decision, idempotency_key, action, line) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// A delivered key stays delivered.
const SET_KEY: &str = "INSERT INTO replaysafe_journal_keys AS k \
    (idempotency_key, action, state, run_id, ts_ms) VALUES (?1, ?2, ?3, ?4, ?5) \
    ON CONFLICT (idempotency_key, action) DO UPDATE SET \
    state = excluded.state, run_id = excluded.run_id, ts_ms = excluded.ts_ms \
    WHERE k.state <> 'delivered'";

const KEY_STATE: &str = "SELECT state, run_id, ts_ms FROM replaysafe_journal_keys \
    WHERE idempotency_key = ?1 AND action = ?2";

/// Every record in a table of a SQLite database (the outbox's own, or one of its own),
/// each the line a JSON Lines journal would hold; the database is the ledger of every
/// process on the machine that opens it.
///
/// An append is one short transaction; [`Ledger::begin`] looks the key up and claims it
/// in one `IMMEDIATE` transaction, so processes racing on a key take turns.
///
/// A journal opened before a `fork` and used in the child (a client made at import time
/// in a process that forks its tasks) opens the database at its path again there, unless
/// it is in memory (`:memory:`, the child's own copy): SQLite's
/// locks are the process's own, so a connection carried across a fork would no longer
/// keep the child's transactions apart from the parent's. The connection the child
/// inherited is left untouched (closing it could checkpoint or unlock on the parent's
/// behalf); a database that cannot be opened again is an error naming it, and nothing is
/// written.
pub struct SqliteJournal {
    conn: PerProcess<Connection>,
    path: PathBuf,
    shown: String,
}

impl fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("database", &self.shown)
            .finish_non_exhaustive()
    }
}

impl SqliteJournal {
    /// Opens the database at `path` (creating it and the journal tables when missing).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OutboxError> {
        let path = path.as_ref();
        let conn = connect(path)?;
        Ok(SqliteJournal {
            // A database in memory is the process's own: the child's copy is the child's.
            conn: if in_memory(path) {
                PerProcess::kept_by_children(conn)
            } else {
                PerProcess::with(conn)
            },
            path: path.to_path_buf(),
            shown: format!("sqlite:{}", path.display()),
        })
    }

    /// The database as the journal's errors name it: `sqlite:PATH`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Calls `each` with every record `query` selects, as the line a JSON Lines journal
    /// holds, in the order they were appended.
    pub fn read(
        &self,
        query: &JournalQuery,
        each: impl FnMut(&str) -> Result<(), OutboxError>,
    ) -> Result<(), OutboxError> {
        read_lines(&*self.lock()?, query, each)
    }

    /// This process's connection: opened again first in a child of `fork`.
    fn lock(&self) -> Result<Held<'_, Connection>, OutboxError> {
        self.conn.lock_or_try_make(|| connect(&self.path))
    }

    fn write(conn: &Connection, line: &Line) -> rusqlite::Result<()> {
        conn.prepare_cached(INSERT_LINE)?.execute(params![
            line.ts_ms,
            line.pipeline,
            line.run_id,
            line.decision,
            line.key,
            line.action,
            line.text
        ])?;
        if let Some(state) = line.state {
            conn.prepare_cached(SET_KEY)?.execute(params![
                line.key,
                line.action,
                state,
                line.run_id,
                line.ts_ms
            ])?;
        }
        Ok(())
    }
}

impl Journal for SqliteJournal {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        let line = Line::of(entry);
        let mut conn = self
            .lock()
            .map_err(|e| JournalError::record_not_written(&self.shown, entry, e))?;
        let done = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .and_then(|tx| {
                Self::write(&tx, &line)?;
                tx.commit()
            });
        done.map_err(|e| JournalError::record_not_written(&self.shown, entry, e))
    }

    fn ledger(&self) -> Option<&dyn Ledger> {
        Some(self)
    }
}

impl Ledger for SqliteJournal {
    fn begin(
        &self,
        attempting: &JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> Result<Claim, JournalError> {
        let line = Line::of(attempting);
        let mut conn = self
            .lock()
            .map_err(|e| JournalError::key_not_recalled(&self.shown, &line.key, e))?;
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let state = tx
                .prepare_cached(KEY_STATE)?
                .query_row(params![line.key, line.action], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()?;
            let memory = memory(state);
            let claimed = memory.may_attempt(retry_in_doubt);
            if claimed {
                Self::write(&tx, &line)?;
                tx.commit()?;
            }
            Ok(Claim::new(memory, claimed))
        })();
        result
            .map_err(|e: rusqlite::Error| JournalError::key_not_recalled(&self.shown, &line.key, e))
    }
}

/// Whether `path` names a database in memory rather than a file.
fn in_memory(path: &Path) -> bool {
    let text = path.to_string_lossy();
    text.is_empty() || text == ":memory:" || text.starts_with("file::memory:")
}

/// Opens the journal database at `path`, creating it and the journal tables when missing.
fn connect(path: &Path) -> Result<Connection, OutboxError> {
    let conn = Connection::open(path).map_err(sql("opening the journal database"))?;
    configure(&conn)?;
    conn.execute_batch(JOURNAL_SCHEMA)
        .map_err(sql("creating the journal tables"))?;
    Ok(conn)
}

/// Reads the records `query` selects from the journal database at `path` without writing
/// to it (opened read-only: nothing is created or migrated), calling `each` with every one
/// as the line a JSON Lines journal holds, in the order they were appended. A missing
/// file, or a database without the journal's table, is an error.
pub fn read_journal(
    path: impl AsRef<Path>,
    query: &JournalQuery,
    each: impl FnMut(&str) -> Result<(), OutboxError>,
) -> Result<(), OutboxError> {
    let conn = Connection::open_with_flags(
        path.as_ref(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql("opening the journal database"))?;
    conn.busy_timeout(super::BUSY_TIMEOUT)
        .map_err(sql("setting the busy timeout"))?;
    let exists: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'replaysafe_journal')",
            [],
            |row| row.get(0),
        )
        .map_err(sql("reading the journal"))?;
    if !exists {
        return Err(OutboxError::store(
            "reading the journal",
            std::io::Error::other("the database holds no replaysafe_journal table"),
        ));
    }
    read_lines(&conn, query, each)
}

fn read_lines(
    conn: &Connection,
    query: &JournalQuery,
    mut each: impl FnMut(&str) -> Result<(), OutboxError>,
) -> Result<(), OutboxError> {
    let mut statement = conn
        .prepare(
            "SELECT line FROM replaysafe_journal \
                 WHERE (?1 IS NULL OR pipeline = ?1) AND ts_ms >= ?2 ORDER BY seq",
        )
        .map_err(sql("reading the journal"))?;
    let mut rows = statement
        .query(params![query.pipeline, query.since_ms()])
        .map_err(sql("reading the journal"))?;
    while let Some(row) = rows.next().map_err(sql("reading the journal"))? {
        let line: String = row.get(0).map_err(sql("reading the journal"))?;
        each(&line)?;
    }
    Ok(())
}
