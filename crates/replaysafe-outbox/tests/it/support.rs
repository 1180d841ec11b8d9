//! A serializable test effect and a client that records or fails on demand.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, FixedClock, Guard, MemoryJournal,
    ReplayContext, RunKind, Window,
};
use replaysafe_outbox::rusqlite::Connection;
use replaysafe_outbox::{Route, sqlite};
use replaysafe_test::TestError;
use replaysafe_test::contexts;
use serde::{Deserialize, Serialize};

/// An effect: a message type, a target and a body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Note {
    pub(crate) message_type: String,
    pub(crate) target: String,
    pub(crate) body: String,
}

impl Note {
    pub(crate) fn new(message_type: &str, body: &str) -> Self {
        Note {
            message_type: message_type.into(),
            target: "https://partner.example/hooks".into(),
            body: body.into(),
        }
    }
}

/// A clock to move forward on every delivery, and by how much.
pub(crate) type Slowdown = (Arc<FixedClock>, chrono::TimeDelta);

/// Records what it delivers; fails with the queued errors first.
#[derive(Clone, Debug, Default)]
pub(crate) struct NoteClient {
    pub(crate) received: Arc<Mutex<Vec<(String, Note)>>>,
    pub(crate) failures: Arc<Mutex<VecDeque<TestError>>>,
    pub(crate) on_deliver: Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>,
    /// Moves this clock forward on every delivery (a worker held up mid-batch).
    pub(crate) slow: Arc<Mutex<Option<Slowdown>>>,
    /// Stands for a receiver that drops repeats by key (default: one that cannot).
    pub(crate) dedupes: bool,
}

impl NoteClient {
    pub(crate) fn received(&self) -> Vec<(String, Note)> {
        self.received.lock().unwrap().clone()
    }

    pub(crate) fn fail_with(&self, error: TestError) {
        self.failures.lock().unwrap().push_back(error);
    }
}

#[async_trait]
impl EffectClient for NoteClient {
    type Effect = Note;
    type Receipt = ();
    type Error = TestError;

    fn describe(&self, _cx: &ReplayContext, note: &Note) -> Result<EffectDescription, TestError> {
        if note.body.is_empty() {
            return Err(TestError::Invalid("body: must not be empty".into()));
        }
        EffectDescription::new(EffectKind::Webhook, &note.message_type, &note.target)
            .map(|d| d.with_payload(note.body.as_bytes()))
            .map_err(|e| TestError::Invalid(e.to_string()))
    }

    async fn deliver(&self, delivery: &Delivery<'_>, note: &Note) -> Result<(), TestError> {
        if let Some(signal) = self.on_deliver.lock().unwrap().take() {
            let _ = signal.send(());
        }
        if let Some((clock, by)) = self.slow.lock().unwrap().as_ref() {
            clock.advance(*by);
        }
        if let Some(error) = self.failures.lock().unwrap().pop_front() {
            return Err(error);
        }
        self.received
            .lock()
            .unwrap()
            .push((delivery.key().as_str().to_owned(), note.clone()));
        Ok(())
    }

    fn dedupes_by_key(&self) -> bool {
        self.dedupes
    }
}

/// A database file, a route over a recording client, a journal and a clock.
pub(crate) struct Fixture {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) path: PathBuf,
    pub(crate) client: NoteClient,
    pub(crate) journal: Arc<MemoryJournal>,
    pub(crate) clock: Arc<FixedClock>,
    pub(crate) route: Route<NoteClient>,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let client = NoteClient::default();
        let journal = Arc::new(MemoryJournal::new());
        let route = Route::new(
            "partner_webhook",
            Guard::with_shared_journal(client.clone(), journal.clone()),
        )
        .unwrap();
        // Creates the tables.
        sqlite::SqliteOutbox::open(&path).unwrap();
        Fixture {
            _dir: dir,
            path,
            client,
            journal,
            clock: Arc::new(FixedClock::new(contexts::now())),
            route,
        }
    }

    pub(crate) fn connection(&self) -> Connection {
        let conn = Connection::open(&self.path).unwrap();
        sqlite::configure(&conn).unwrap();
        conn
    }

    pub(crate) fn store(&self) -> sqlite::SqliteOutbox {
        sqlite::SqliteOutbox::open(&self.path).unwrap()
    }

    /// A context of `kind` over `window` on the fixture's clock.
    pub(crate) fn context(&self, kind: RunKind, window: Window) -> ReplayContext {
        contexts::builder(kind, window)
            .clock(self.clock.clone())
            .build()
            .unwrap()
    }

    pub(crate) fn live(&self) -> ReplayContext {
        self.context(RunKind::Scheduled, contexts::current_window())
    }

    pub(crate) fn backfill(&self) -> ReplayContext {
        contexts::builder(RunKind::Backfill, contexts::last_month_window())
            .backfill_id("bf-test")
            .clock(self.clock.clone())
            .build()
            .unwrap()
    }

    /// Stages one effect in its own committed transaction.
    pub(crate) fn stage(&self, cx: &ReplayContext, note: &Note) -> replaysafe_outbox::Staged {
        let mut conn = self.connection();
        let tx = conn.transaction().unwrap();
        let staged = sqlite::stage(&tx, cx, &self.route, note).unwrap();
        tx.commit().unwrap();
        staged
    }

    pub(crate) fn worker(&self) -> replaysafe_outbox::WorkerBuilder {
        replaysafe_outbox::Worker::builder(self.store())
            .add_route(self.route.clone())
            .clock(self.clock.clone())
    }

    /// One column of one row.
    pub(crate) fn column<T: replaysafe_outbox::rusqlite::types::FromSql>(
        &self,
        key: &str,
        column: &str,
    ) -> T {
        self.connection()
            .query_row(
                &format!("SELECT {column} FROM replaysafe_outbox WHERE idempotency_key = ?1"),
                [key],
                |r| r.get(0),
            )
            .unwrap()
    }

    pub(crate) fn row_count(&self) -> i64 {
        self.connection()
            .query_row("SELECT COUNT(*) FROM replaysafe_outbox", [], |r| r.get(0))
            .unwrap()
    }
}
