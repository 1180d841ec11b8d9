//! The journal in a PostgreSQL database: the ledger of a fleet of workers.

use std::fmt;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use replaysafe_core::adapter::PerProcess;
use replaysafe_core::journal::{Claim, Journal, JournalEntry, JournalError, Ledger, Memory};
use tokio::sync::mpsc;
use tokio_postgres::{Client, Config, NoTls, Statement};

use crate::OutboxError;
use crate::journal::{JournalQuery, Line, memory};

use super::sql;

/// The journal tables, created when missing (`docs/reference/journal.md`).
pub const JOURNAL_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS replaysafe_journal (
    seq             BIGSERIAL PRIMARY KEY,
    ts_ms           BIGINT NOT NULL,
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
    ts_ms           BIGINT NOT NULL,
    PRIMARY KEY (idempotency_key, action)
);
";

/// The advisory lock the journal tables are created under.
const SCHEMA_LOCK: i64 = 0x7265_706c_6a6e_6c31;

/// One statement: the line, and the key's state when the record is about a delivery (a
/// delivered key stays delivered).
const APPEND: &str = "WITH line AS (
    INSERT INTO replaysafe_journal (ts_ms, pipeline, run_id, decision, idempotency_key, action, line)
    VALUES ($1, $2, $3, $4, $5, $6, $7))
INSERT INTO replaysafe_journal_keys AS k (idempotency_key, action, state, run_id, ts_ms)
SELECT $5, $6, $8::text, $3, $1 WHERE $8::text IS NOT NULL
ON CONFLICT (idempotency_key, action) DO UPDATE SET
    state = excluded.state, run_id = excluded.run_id, ts_ms = excluded.ts_ms
WHERE k.state <> 'delivered'";

/// One statement: the key is claimed (its row set `open`) when it is new, its last attempt
/// failed, or it is in doubt and `$8` (the receiver drops repeats); the `attempting` line
/// is written only then. A racing claim waits on the key's row lock and then sees it open.
const CLAIM: &str = "WITH claim AS (
    INSERT INTO replaysafe_journal_keys AS k (idempotency_key, action, state, run_id, ts_ms)
    VALUES ($5, $6, 'open', $3, $1)
    ON CONFLICT (idempotency_key, action) DO UPDATE SET
        state = 'open', run_id = excluded.run_id, ts_ms = excluded.ts_ms
    WHERE k.state = 'closed' OR (k.state = 'open' AND $8::boolean)
    RETURNING 1),
line AS (
    INSERT INTO replaysafe_journal (ts_ms, pipeline, run_id, decision, idempotency_key, action, line)
    SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM claim))
SELECT EXISTS (SELECT 1 FROM claim)";

const KEY_STATE: &str = "SELECT state, run_id, ts_ms FROM replaysafe_journal_keys \
    WHERE idempotency_key = $1 AND action = $2";

/// The error of one request, as the journal's thread sends it back.
type Failure = Box<dyn std::error::Error + Send + Sync>;

/// What the journal's thread is asked to do.
enum Request {
    Append {
        line: Line,
        reply: std_mpsc::SyncSender<Result<(), Failure>>,
    },
    Claim {
        line: Line,
        retry_in_doubt: bool,
        reply: std_mpsc::SyncSender<Result<Claim, Failure>>,
    },
}

/// Every record in a table of a PostgreSQL database, each the line a JSON Lines journal
/// would hold: the journal and the ledger of every worker, on every machine, that shares
/// the database (`REPLAYSAFE_JOURNAL=postgres://…` on the command line).
///
/// The journal keeps one connection on a thread of its own, so [`Journal::append`] (which
/// is synchronous) works from any thread and any runtime: each call waits for its
/// statement, one round trip. An append is one statement (the line and the key's state);
/// [`Ledger::begin`] is one statement that claims the key under its row lock, so workers
/// racing on a key deliver it once. A connection that breaks is opened again for the next
/// record; the record it was writing is an error, never a silent loss.
///
/// A journal opened before a `fork` and used in the child (a client made at import time
/// in a process that forks its tasks) connects again there, on a thread of the child's
/// own: the parent's thread does not exist in the child, and its connection is the
/// parent's. What the parent's thread and connection hold is left untouched in the child.
pub struct PostgresJournal {
    link: PerProcess<Link>,
    config: Config,
    shown: String,
}

/// The journal's thread and the channel to it.
struct Link {
    requests: mpsc::UnboundedSender<Request>,
    thread: Option<JoinHandle<()>>,
}

impl Link {
    /// Starts the journal's thread and waits until it is connected, with the tables made.
    fn start(config: &Config) -> Result<Link, OutboxError> {
        let (requests, receiver) = mpsc::unbounded_channel();
        let (ready, connected) = std_mpsc::sync_channel(1);
        let config = config.clone();
        let thread = std::thread::Builder::new()
            .name("replaysafe-journal".into())
            .spawn(move || serve(config, receiver, ready))
            .map_err(|e| OutboxError::store("starting the journal's thread", e))?;
        match connected.recv() {
            Ok(Ok(())) => Ok(Link {
                requests,
                thread: Some(thread),
            }),
            Ok(Err(error)) => {
                let _ = thread.join();
                Err(error)
            }
            Err(_) => Err(OutboxError::store(
                "connecting the journal",
                std::io::Error::other("the journal's thread ended"),
            )),
        }
    }
}

impl fmt::Debug for PostgresJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresJournal")
            .field("database", &self.shown)
            .finish_non_exhaustive()
    }
}

impl PostgresJournal {
    /// Connects to the database `config` names (its password is never shown), creating the
    /// journal tables when missing. `shown` names the database in errors (no password).
    /// Blocks until connected; usable from inside an async runtime.
    pub fn connect(config: Config, shown: impl Into<String>) -> Result<Self, OutboxError> {
        Ok(PostgresJournal {
            link: PerProcess::with(Link::start(&config)?),
            config,
            shown: shown.into(),
        })
    }

    /// The database as the journal's errors name it.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn ask<T>(
        &self,
        make: impl FnOnce(std_mpsc::SyncSender<Result<T, Failure>>) -> Request,
    ) -> Result<T, Failure> {
        // In a child of `fork` the parent's thread is not there to answer: started again.
        let requests = self
            .link
            .lock_or_try_make(|| Link::start(&self.config))?
            .requests
            .clone();
        let (reply, answer) = std_mpsc::sync_channel(1);
        requests
            .send(make(reply))
            .map_err(|_| "the journal's connection thread has stopped")?;
        answer
            .recv()
            .unwrap_or_else(|_| Err("the journal's connection thread has stopped".into()))
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Closing the channel ends the thread once the requests before are done.
        let (closed, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.requests, closed));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Journal for PostgresJournal {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        let line = Line::of(entry);
        self.ask(|reply| Request::Append { line, reply })
            .map_err(|e| JournalError::record_not_written(&self.shown, entry, e))
    }

    fn ledger(&self) -> Option<&dyn Ledger> {
        Some(self)
    }
}

impl Ledger for PostgresJournal {
    fn begin(
        &self,
        attempting: &JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> Result<Claim, JournalError> {
        let line = Line::of(attempting);
        self.ask(|reply| Request::Claim {
            line,
            retry_in_doubt,
            reply,
        })
        .map_err(|e| JournalError::key_not_recalled(&self.shown, attempting.idempotency_key(), e))
    }
}

/// The journal's thread: one connection, opened again when it breaks.
fn serve(
    config: Config,
    mut requests: mpsc::UnboundedReceiver<Request>,
    ready: std_mpsc::SyncSender<Result<(), OutboxError>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(OutboxError::store(
                "starting the journal's runtime",
                error,
            )));
            return;
        }
    };
    runtime.block_on(async move {
        let created = async {
            let client = connect(&config).await?;
            // Processes opening a fresh database at once take turns: concurrent
            // `CREATE TABLE IF NOT EXISTS` of one table can collide in the catalog.
            client
                .batch_execute(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK}); {JOURNAL_SCHEMA} COMMIT;"
                ))
                .await
                .map_err(sql("creating the journal tables"))?;
            drop(client);
            Session::open(&config)
                .await
                .map_err(|e| OutboxError::store("preparing the journal's statements", e))
        };
        let mut open = match created.await {
            Ok(session) => {
                let _ = ready.send(Ok(()));
                Some(session)
            }
            Err(error) => {
                let _ = ready.send(Err(error));
                return;
            }
        };
        while let Some(request) = requests.recv().await {
            match request {
                Request::Append { line, reply } => {
                    let result = match session(&mut open, &config).await {
                        Ok(session) => append(session, &line).await.map_err(Into::into),
                        Err(error) => Err(error),
                    };
                    let _ = reply.send(result);
                }
                Request::Claim {
                    line,
                    retry_in_doubt,
                    reply,
                } => {
                    let result = match session(&mut open, &config).await {
                        Ok(session) => claim(session, &line, retry_in_doubt)
                            .await
                            .map_err(Into::into),
                        Err(error) => Err(error),
                    };
                    let _ = reply.send(result);
                }
            }
        }
    });
}

/// A connection and its two statements, prepared once.
struct Session {
    client: Client,
    append: Statement,
    claim: Statement,
}

impl Session {
    async fn open(config: &Config) -> Result<Session, Failure> {
        let client = connect(config).await?;
        let append = client.prepare(APPEND).await?;
        let claim = client.prepare(CLAIM).await?;
        Ok(Session {
            client,
            append,
            claim,
        })
    }
}

/// The session, opened again when its connection broke.
async fn session<'s>(
    session: &'s mut Option<Session>,
    config: &Config,
) -> Result<&'s Session, Failure> {
    if session.as_ref().is_none_or(|s| s.client.is_closed()) {
        *session = None;
        *session = Some(Session::open(config).await?);
    }
    session
        .as_ref()
        .ok_or_else(|| "the journal has no connection".into())
}

/// Connects, with the connection driven on this thread's runtime.
async fn connect(config: &Config) -> Result<Client, OutboxError> {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(sql("connecting the journal"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn append(session: &Session, line: &Line) -> Result<(), tokio_postgres::Error> {
    session
        .client
        .execute(
            &session.append,
            &[
                &line.ts_ms,
                &line.pipeline,
                &line.run_id,
                &line.decision,
                &line.key,
                &line.action,
                &line.text,
                &line.state,
            ],
        )
        .await
        .map(|_| ())
}

async fn claim(
    session: &Session,
    line: &Line,
    retry_in_doubt: bool,
) -> Result<Claim, tokio_postgres::Error> {
    let row = session
        .client
        .query_one(
            &session.claim,
            &[
                &line.ts_ms,
                &line.pipeline,
                &line.run_id,
                &line.decision,
                &line.key,
                &line.action,
                &line.text,
                &retry_in_doubt,
            ],
        )
        .await?;
    let claimed: bool = row.get(0);
    if claimed {
        return Ok(Claim::new(Memory::Clear, true));
    }
    // What stopped it, read after the claim (a statement of its own sees what committed).
    let state = session
        .client
        .query_opt(KEY_STATE, &[&line.key, &line.action])
        .await?
        .map(|row| (row.get(0), row.get(1), row.get(2)));
    let memory = match memory(state) {
        // Released between the two statements: it was in doubt when claimed.
        Memory::Clear => Memory::InDoubt {
            run_id: line.run_id.clone(),
            since: crate::row::from_millis(line.ts_ms),
        },
        known => known,
    };
    Ok(Claim::new(memory, false))
}

/// Reads the records `query` selects from the journal at `config`, calling `each` with
/// every one, as the line a JSON Lines journal holds, in the order they were appended.
pub async fn read_journal(
    config: &Config,
    query: &JournalQuery,
    mut each: impl FnMut(&str) -> Result<(), OutboxError>,
) -> Result<(), OutboxError> {
    use futures_util::{StreamExt, pin_mut};
    let client = connect(config).await?;
    let exists: bool = client
        .query_one("SELECT to_regclass('replaysafe_journal') IS NOT NULL", &[])
        .await
        .map_err(sql("reading the journal"))?
        .get(0);
    if !exists {
        return Err(OutboxError::store(
            "reading the journal",
            std::io::Error::other("the database holds no replaysafe_journal table"),
        ));
    }
    let since = query.since_ms();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&query.pipeline, &since];
    let rows = client
        .query_raw(
            "SELECT line FROM replaysafe_journal \
             WHERE ($1::text IS NULL OR pipeline = $1) AND ts_ms >= $2 ORDER BY seq",
            params,
        )
        .await
        .map_err(sql("reading the journal"))?;
    pin_mut!(rows);
    while let Some(row) = rows.next().await {
        let row = row.map_err(sql("reading the journal"))?;
        let line: &str = row.get(0);
        each(line)?;
    }
    Ok(())
}
