//! The PostgreSQL backend against a real server (`cargo xtask services postgres`): each
//! test in a database of its own.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::TimeDelta;
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, FixedClock, Guard, MemoryJournal,
    ReplayContext, RunKind, Window,
};
use replaysafe_outbox::postgres::{self, PostgresOutbox};
use replaysafe_outbox::tokio_postgres::{self, NoTls};
use replaysafe_outbox::{
    ClaimRequest, Completion, CompletionResult, OperatorAction, OutboxError, OutboxStore, Route,
    SourceVersion, Staged, Status, Worker, WorkerBuilder,
};
use replaysafe_test::{TestError, contexts};

use crate::support::{Note, NoteClient};

/// A fresh database on the test server; returns its URL.
pub(crate) async fn fresh_database() -> String {
    let admin = replaysafe_test::services::require("REPLAYSAFE_TEST_POSTGRES_URL");
    let (client, connection) = tokio_postgres::connect(&admin, NoTls).await.unwrap();
    tokio::spawn(connection);
    let name = format!("outbox_{:016x}", fastrand::u64(..));
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let base = admin.rsplit_once('/').unwrap().0;
    format!("{base}/{name}")
}

pub(crate) struct PgFixture {
    pub(crate) url: String,
    pub(crate) outbox: PostgresOutbox,
    pub(crate) client: NoteClient,
    pub(crate) journal: Arc<MemoryJournal>,
    pub(crate) clock: Arc<FixedClock>,
    pub(crate) route: Route<NoteClient>,
}

impl PgFixture {
    pub(crate) async fn new() -> Self {
        let url = fresh_database().await;
        let outbox = PostgresOutbox::connect(&url).await.unwrap();
        let client = NoteClient::default();
        let journal = Arc::new(MemoryJournal::new());
        let route = Route::new(
            "partner_webhook",
            Guard::with_shared_journal(client.clone(), journal.clone()),
        )
        .unwrap();
        PgFixture {
            url,
            outbox,
            client,
            journal,
            clock: Arc::new(FixedClock::new(contexts::now())),
            route,
        }
    }

    fn context(&self, kind: RunKind, window: Window) -> ReplayContext {
        contexts::builder(kind, window)
            .clock(self.clock.clone())
            .build()
            .unwrap()
    }

    pub(crate) fn live(&self) -> ReplayContext {
        self.context(RunKind::Scheduled, contexts::current_window())
    }

    fn backfill(&self) -> ReplayContext {
        contexts::builder(RunKind::Backfill, contexts::last_month_window())
            .backfill_id("bf-test")
            .clock(self.clock.clone())
            .build()
            .unwrap()
    }

    /// Stages one effect in its own committed transaction.
    pub(crate) async fn stage(&self, cx: &ReplayContext, note: &Note) -> Staged {
        self.stage_versioned(cx, note, SourceVersion::default())
            .await
    }

    async fn stage_versioned(
        &self,
        cx: &ReplayContext,
        note: &Note,
        version: SourceVersion,
    ) -> Staged {
        let mut conn = self.outbox.pool().get().await.unwrap();
        let tx = conn.transaction().await.unwrap();
        let staged = postgres::stage_versioned(&tx, cx, &self.route, note, version)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        staged
    }

    pub(crate) fn worker(&self) -> WorkerBuilder {
        Worker::builder(self.outbox.clone())
            .add_route(self.route.clone())
            .clock(self.clock.clone())
    }

    pub(crate) async fn text(&self, key: &str, column: &str) -> Option<String> {
        let conn = self.outbox.pool().get().await.unwrap();
        conn.query_one(
            &format!("SELECT {column}::text FROM replaysafe_outbox WHERE idempotency_key = $1"),
            &[&key],
        )
        .await
        .unwrap()
        .get(0)
    }

    /// `column` of every row, as text, in key order.
    pub(crate) async fn text_of_all(&self, column: &str) -> Vec<String> {
        let conn = self.outbox.pool().get().await.unwrap();
        conn.query(
            &format!("SELECT {column}::text FROM replaysafe_outbox ORDER BY idempotency_key"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
    }

    pub(crate) async fn rows(&self) -> i64 {
        let conn = self.outbox.pool().get().await.unwrap();
        conn.query_one("SELECT COUNT(*) FROM replaysafe_outbox", &[])
            .await
            .unwrap()
            .get(0)
    }
}

fn request(now: chrono::DateTime<chrono::Utc>, limit: u32) -> ClaimRequest {
    ClaimRequest {
        routes: vec!["partner_webhook".into()],
        limit,
        lease: Duration::from_secs(30),
        now,
    }
}

#[tokio::test]
async fn staging_commits_with_the_callers_transaction_and_a_rollback_leaves_no_row() {
    let fx = PgFixture::new().await;
    let mut conn = fx.outbox.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    tx.batch_execute("CREATE TABLE orders_daily (day TEXT, total BIGINT)")
        .await
        .unwrap();
    postgres::stage(&tx, &fx.live(), &fx.route, &Note::new("daily_total", "42"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(fx.rows().await, 0);

    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42")).await;
    assert_eq!((staged.status, staged.changed), (Status::Pending, true));
    assert_eq!(fx.rows().await, 1);
    assert_eq!(
        fx.text(&staged.key, "status").await.as_deref(),
        Some("pending")
    );
}

#[tokio::test]
async fn restaging_follows_the_same_rules_as_sqlite() {
    let fx = PgFixture::new().await;
    let v2 = SourceVersion(2);
    let first = fx
        .stage_versioned(&fx.live(), &Note::new("daily_total", "42"), v2)
        .await;
    // The same effect at the same version writes nothing.
    let again = fx
        .stage_versioned(&fx.live(), &Note::new("daily_total", "42"), v2)
        .await;
    assert_eq!(
        (again.key.as_str(), again.changed),
        (first.key.as_str(), false)
    );
    // An older version never overwrites a newer one.
    let older = fx
        .stage_versioned(
            &fx.live(),
            &Note::new("daily_total", "41"),
            SourceVersion(1),
        )
        .await;
    assert!(!older.changed);
    assert!(
        fx.text(&first.key, "effect")
            .await
            .unwrap()
            .contains("\"42\"")
    );
    // A newer version does, and never adds a row.
    let newer = fx
        .stage_versioned(
            &fx.live(),
            &Note::new("daily_total", "43"),
            SourceVersion(3),
        )
        .await;
    assert!(newer.changed);
    assert_eq!(fx.rows().await, 1);

    // A replay's restaging never demotes the pending row a current run staged.
    let replayed = fx
        .stage_versioned(&fx.backfill(), &Note::new("other", "1"), SourceVersion(0))
        .await;
    assert_eq!(replayed.status, Status::Suppressed);
    assert_eq!(
        fx.text(&replayed.key, "status").await.as_deref(),
        Some("suppressed")
    );
    assert_eq!(
        fx.text(&first.key, "status").await.as_deref(),
        Some("pending")
    );

    // Delivered, then restaged with another payload: marked, not sent again.
    let worker = fx.worker().build().unwrap();
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    fx.stage_versioned(
        &fx.live(),
        &Note::new("daily_total", "44"),
        SourceVersion(4),
    )
    .await;
    assert_eq!(
        fx.text(&first.key, "changed_after_delivery")
            .await
            .as_deref(),
        Some("true")
    );
    assert_eq!(
        fx.text(&first.key, "status").await.as_deref(),
        Some("delivered")
    );
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    assert_eq!(fx.client.received().len(), 1);
}

#[tokio::test]
async fn a_replays_row_is_suppressed_journaled_and_never_claimed() {
    let fx = PgFixture::new().await;
    let staged = fx
        .stage(&fx.backfill(), &Note::new("daily_total", "41"))
        .await;
    assert_eq!(staged.status, Status::Suppressed);
    assert!(staged.reasons.contains(&"replay_run".to_owned()));
    assert_eq!(fx.journal.records().len(), 1);
    let worker = fx.worker().build().unwrap();
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    assert!(fx.client.received().is_empty());
}

#[tokio::test]
async fn a_worker_delivers_once_and_the_gate_runs_again_at_delivery() {
    let fx = PgFixture::new().await;
    let current = fx.stage(&fx.live(), &Note::new("daily_total", "42")).await;
    let worker = fx.worker().build().unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!((stats.claimed, stats.delivered), (1, 1));
    assert_eq!(
        fx.client.received(),
        [(current.key.clone(), Note::new("daily_total", "42"))]
    );
    assert_eq!(
        fx.text(&current.key, "status").await.as_deref(),
        Some("delivered")
    );
    assert_eq!(worker.drain().await.unwrap().claimed, 0);

    // A row that went stale while the workers were down is suppressed, not sent late.
    let late = fx.stage(&fx.live(), &Note::new("late", "1")).await;
    fx.clock.advance(TimeDelta::days(2));
    let stats = worker.drain().await.unwrap();
    assert_eq!((stats.suppressed, stats.delivered), (1, 0));
    assert_eq!(
        fx.text(&late.key, "reasons").await.as_deref(),
        Some("stale_window")
    );
}

#[tokio::test]
async fn the_claim_explained_is_the_claim_run_and_reads_due_rows_through_the_route_index() {
    let fx = PgFixture::new().await;
    fx.stage(&fx.live(), &Note::new("daily_total", "42")).await;
    let routes = ["partner_webhook".to_owned()];
    let plan = fx.outbox.explain_claim(&routes, 32).await.unwrap();
    let text = plan.join("\n");
    // The statement workers claim with: it locks and updates rows.
    assert!(text.contains("Update on replaysafe_outbox"), "{text}");
    assert!(text.contains("LockRows"), "{text}");
    // With sequential scans priced out (a table of millions of rows), the due rows come
    // through the route index: the claim's shape is one the index serves.
    let admin = fx.outbox.pool().get().await.unwrap();
    let database: String = admin
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {database} SET enable_seqscan = off"
        ))
        .await
        .unwrap();
    let fresh = PostgresOutbox::connect(&fx.url).await.unwrap();
    let text = fresh.explain_claim(&routes, 32).await.unwrap().join("\n");
    assert!(
        text.contains("Index Scan using replaysafe_outbox_route_due"),
        "{text}"
    );
    // Nothing was claimed by explaining.
    assert_eq!(fx.text_of_all("status").await, ["pending"]);
}

#[tokio::test]
async fn concurrent_claims_from_many_pools_never_take_one_row_twice() {
    let fx = PgFixture::new().await;
    let mut conn = fx.outbox.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    let stager = postgres::Stager::prepare(&tx).await.unwrap();
    let mut keys = HashSet::new();
    for i in 0..300 {
        let note = Note::new(&format!("m{i}"), "1");
        let staged = stager
            .stage(&tx, &fx.live(), &fx.route, &note)
            .await
            .unwrap();
        assert!(staged.changed);
        // The prepared statement keeps the rules: the same effect again writes nothing.
        let again = stager
            .stage(&tx, &fx.live(), &fx.route, &note)
            .await
            .unwrap();
        assert!(!again.changed);
        keys.insert(staged.key);
    }
    tx.commit().await.unwrap();
    assert_eq!(fx.rows().await, 300);

    let mut claimers = Vec::new();
    for _ in 0..6 {
        let store = PostgresOutbox::connect(&fx.url).await.unwrap();
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let rows = store.claim(&request(contexts::now(), 7)).await.unwrap();
                if rows.is_empty() {
                    return mine;
                }
                mine.extend(rows.iter().map(|r| r.key().to_owned()));
            }
        }));
    }
    let mut claimed = Vec::new();
    for claimer in claimers {
        claimed.extend(claimer.await.unwrap());
    }
    let distinct: HashSet<String> = claimed.iter().cloned().collect();
    assert_eq!(claimed.len(), 300, "a row was claimed twice or missed");
    assert_eq!(distinct, keys);
}

#[tokio::test]
async fn a_stale_completion_is_rejected_counted_and_never_overwrites_the_newer_claim() {
    let fx = PgFixture::new().await;
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42")).await;
    let store = &fx.outbox;
    let first = store.claim(&request(contexts::now(), 10)).await.unwrap();
    assert_eq!(first.len(), 1);
    let within = contexts::now() + TimeDelta::seconds(29);
    assert!(store.claim(&request(within, 10)).await.unwrap().is_empty());
    let after = contexts::now() + TimeDelta::seconds(31);
    let second = store.claim(&request(after, 10)).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_ne!(first[0].claim_token(), second[0].claim_token());
    assert_eq!(second[0].attempts(), 2);

    let newer = store
        .complete(
            &second[0],
            Completion::Dead {
                error: "newer outcome".into(),
            },
            after,
        )
        .await
        .unwrap();
    assert_eq!(newer, CompletionResult::Applied);
    let stale = store
        .complete(
            &first[0],
            Completion::Delivered {
                payload_sha256: "00".into(),
            },
            after,
        )
        .await
        .unwrap();
    assert_eq!(stale, CompletionResult::Stale);
    assert_eq!(
        fx.text(&staged.key, "status").await.as_deref(),
        Some("dead")
    );
    assert_eq!(
        fx.text(&staged.key, "last_error").await.as_deref(),
        Some("newer outcome")
    );
    let counters = store.counters().await.unwrap();
    assert_eq!((counters.stale_completions, counters.reclaimed), (1, 1));
}

#[tokio::test]
async fn transient_failures_retry_later_and_permanent_ones_dead_letter() {
    let fx = PgFixture::new().await;
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42")).await;
    fx.client
        .fail_with(TestError::Transient { retry_after: None });
    let worker = fx.worker().build().unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!(stats.retried, 1);
    assert_eq!(
        fx.text(&staged.key, "status").await.as_deref(),
        Some("pending")
    );
    // Not due yet; after the backoff it is delivered.
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    fx.clock.advance(TimeDelta::minutes(11));
    assert_eq!(worker.drain().await.unwrap().delivered, 1);

    let dead = fx.stage(&fx.live(), &Note::new("other", "1")).await;
    fx.client.fail_with(TestError::Permanent);
    assert_eq!(worker.drain().await.unwrap().dead, 1);
    assert_eq!(
        fx.text(&dead.key, "last_error").await.as_deref(),
        Some("permanent test failure")
    );
}

#[tokio::test]
async fn operations_count_list_retry_resend_and_purge_with_audit() {
    let fx = PgFixture::new().await;
    let delivered = fx.stage(&fx.live(), &Note::new("a", "1")).await;
    let worker = fx.worker().build().unwrap();
    worker.drain().await.unwrap();
    let dead = fx.stage(&fx.live(), &Note::new("b", "1")).await;
    fx.client.fail_with(TestError::Permanent);
    worker.drain().await.unwrap();
    fx.stage(&fx.backfill(), &Note::new("c", "1")).await;
    fx.stage(&fx.live(), &Note::new("d", "1")).await;
    let store = &fx.outbox;

    let counts = store.counts().await.unwrap();
    let count = |status| {
        counts
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.rows)
            .sum::<u64>()
    };
    assert_eq!(
        [
            Status::Delivered,
            Status::Dead,
            Status::Suppressed,
            Status::Pending
        ]
        .map(count),
        [1, 1, 1, 1]
    );
    assert!(counts.iter().all(|c| c.route == "partner_webhook"));
    let age = store
        .oldest_pending_age(contexts::now() + TimeDelta::minutes(5))
        .await
        .unwrap();
    assert_eq!(age, Some(Duration::from_secs(300)));
    let listed = store.list(Status::Dead, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, dead.key);

    let approval = replaysafe_core::OptIn::new(
        "partner fixed their endpoint",
        "jane@ops",
        contexts::now() + TimeDelta::hours(1),
    )
    .unwrap()
    .for_kind(replaysafe_core::EffectKind::Webhook)
    .for_pipeline("daily_orders")
    .for_run_ids("*");
    let action = OperatorAction::new("partner fixed their endpoint", "jane@ops")
        .unwrap()
        .with_opt_in(approval)
        .unwrap();
    let retried = store
        .retry_dead(None, &action, contexts::now())
        .await
        .unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].key, dead.key);
    assert_eq!(retried[0].status, Status::Pending);
    assert!(retried[0].has_opt_in);
    assert_eq!(
        store
            .resend(
                std::slice::from_ref(&delivered.key),
                &action,
                contexts::now()
            )
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store.get(&delivered.key).await.unwrap().unwrap().status,
        Status::Pending
    );
    assert!(store.get("no such key").await.unwrap().is_none());
    let conn = fx.outbox.pool().get().await.unwrap();
    let audit: Vec<(String, String, String)> = conn
        .query(
            "SELECT idempotency_key, action, approved_by FROM replaysafe_outbox_audit ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        audit,
        [
            (dead.key.clone(), "retry".into(), "jane@ops".into()),
            (delivered.key.clone(), "resend".into(), "jane@ops".into())
        ]
    );
    let stats = worker.drain().await.unwrap();
    assert_eq!(stats.delivered, 3);
    assert!(
        fx.text(&delivered.key, "opt_in")
            .await
            .is_some_and(|document| document.contains("replaysafe-opt-in/1")),
        "the resend's approval document is the row's opt-in"
    );

    let week = Duration::from_secs(7 * 24 * 3600);
    let too_soon = store
        .purge_delivered(
            Duration::from_secs(3600),
            contexts::now() + TimeDelta::days(30),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        too_soon,
        OutboxError::Invalid {
            field: "older_than",
            ..
        }
    ));
    assert_eq!(
        store
            .purge_delivered(week, contexts::now() + TimeDelta::days(6))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .purge_delivered(week, contexts::now() + TimeDelta::days(8))
            .await
            .unwrap(),
        3
    );
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_migrating_twice_changes_nothing() {
    let fx = PgFixture::new().await;
    // A second connect migrates nothing.
    PostgresOutbox::connect(&fx.url).await.unwrap();
    let conn = fx.outbox.pool().get().await.unwrap();
    assert_eq!(
        postgres::schema_version(&**conn).await.unwrap(),
        postgres::SCHEMA_VERSION
    );
    conn.execute("UPDATE replaysafe_outbox_schema SET version = 99", &[])
        .await
        .unwrap();
    let error = PostgresOutbox::connect(&fx.url).await.unwrap_err();
    assert!(
        matches!(
            error,
            OutboxError::SchemaTooNew {
                found: 99,
                supported: postgres::SCHEMA_VERSION
            }
        ),
        "{error}"
    );
}

#[tokio::test]
async fn a_bad_url_is_an_invalid_database_without_its_text() {
    let error = PostgresOutbox::connect("postgres://u:hunter2@[::1")
        .await
        .unwrap_err();
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("database"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
    // Debug of a connected outbox shows no password either.
    let fx = PgFixture::new().await;
    let debug = format!("{:?}", fx.outbox);
    let password = fx.url.split(':').nth(2).unwrap().split('@').next().unwrap();
    assert!(!debug.contains(password), "{debug}");
    assert!(debug.contains("127.0.0.1"), "{debug}");
}

#[tokio::test]
async fn an_idle_worker_wakes_on_notify_long_before_its_poll() {
    let fx = PgFixture::new().await;
    // The worker polls once an hour: only the notification can wake it in time.
    let worker = fx
        .worker()
        .poll_interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        worker
            .run_until(async {
                let _ = stopped.await;
            })
            .await
    });
    // Let it go idle first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42")).await;
    let delivered = tokio::time::timeout(Duration::from_secs(60), async {
        while fx.client.received().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        delivered.is_ok(),
        "the notification did not wake the worker"
    );
    stop.send(()).unwrap();
    let stats = running.await.unwrap();
    assert_eq!(stats.delivered, 1);
    assert_eq!(fx.client.received()[0].0, staged.key);
}

/// A client whose deliveries wait until `width` of them are in flight together.
#[derive(Clone, Debug)]
struct Gathering {
    barrier: Arc<tokio::sync::Barrier>,
    delivered: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl EffectClient for Gathering {
    type Effect = Note;
    type Receipt = ();
    type Error = TestError;

    fn describe(&self, _cx: &ReplayContext, note: &Note) -> Result<EffectDescription, TestError> {
        EffectDescription::new(EffectKind::Webhook, &note.message_type, &note.target)
            .map(|d| d.with_payload(note.body.as_bytes()))
            .map_err(|e| TestError::Invalid(e.to_string()))
    }

    async fn deliver(&self, _delivery: &Delivery<'_>, _note: &Note) -> Result<(), TestError> {
        self.barrier.wait().await;
        self.delivered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_worker_keeps_its_in_flight_deliveries_going_together() {
    let fx = PgFixture::new().await;
    let gathering = Gathering {
        barrier: Arc::new(tokio::sync::Barrier::new(4)),
        delivered: Arc::default(),
    };
    let route = Route::new(
        "partner_webhook",
        Guard::with_shared_journal(gathering.clone(), fx.journal.clone()),
    )
    .unwrap();
    let mut conn = fx.outbox.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    for i in 0..8 {
        postgres::stage(&tx, &fx.live(), &route, &Note::new(&format!("m{i}"), "1"))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    // Four deliveries must be in flight at once for any to finish: with one at a time
    // the first would wait for ever.
    let worker = Worker::builder(fx.outbox.clone())
        .add_route(route)
        .clock(fx.clock.clone())
        .in_flight(4)
        .batch_size(4)
        .build()
        .unwrap();
    let stats = tokio::time::timeout(Duration::from_secs(60), worker.drain())
        .await
        .expect("deliveries were not in flight together")
        .unwrap();
    assert_eq!(stats.delivered, 8);
    assert_eq!(
        gathering
            .delivered
            .load(std::sync::atomic::Ordering::SeqCst),
        8
    );
}

/// The two Python blocks of `docs/reference/outbox.md`: SQLite's (with the key
/// derivation) and PostgreSQL's.
fn python_blocks() -> (String, String, String) {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/reference/outbox.md"
    ))
    .unwrap();
    let blocks: Vec<&str> = doc
        .split("```python\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 2, "two Python recipes");
    (doc.clone(), blocks[0].to_owned(), blocks[1].to_owned())
}

#[test]
fn the_documented_postgres_upsert_is_the_one_the_crate_runs() {
    let (doc, _, python) = python_blocks();
    assert!(
        doc.contains(&format!("```sql\n{}\n```", postgres::STAGE_SQL)),
        "docs/reference/outbox.md shows another PostgreSQL statement"
    );
    // The recipe's named parameters, numbered in order of first appearance, give the
    // crate's statement.
    let start = python.find("PG_STAGE_SQL = \"\"\"\n").unwrap() + "PG_STAGE_SQL = \"\"\"\n".len();
    let statement = &python[start..start + python[start..].find("\n\"\"\"").unwrap()];
    let mut names: Vec<String> = Vec::new();
    let mut numbered = String::new();
    let mut rest = statement;
    while let Some(open) = rest.find("%(") {
        numbered.push_str(&rest[..open]);
        let close = rest[open..].find(")s").unwrap() + open;
        let name = rest[open + 2..close].to_owned();
        let index = match names.iter().position(|n| *n == name) {
            Some(index) => index + 1,
            None => {
                names.push(name);
                names.len()
            }
        };
        numbered.push_str(&format!("${index}"));
        rest = &rest[close + 2..];
    }
    numbered.push_str(rest);
    assert_eq!(numbered, postgres::STAGE_SQL);
}

#[tokio::test]
async fn a_row_staged_by_psycopg_in_its_own_transaction_is_delivered_by_a_rust_worker() {
    use crate::receiver::Receiver;
    let pythonpath = replaysafe_test::services::require("REPLAYSAFE_TEST_PSYCOPG_PYTHONPATH");
    let fx = PgFixture::new().await;
    let receiver = Receiver::start().await;
    let route = crate::end_to_end::webhook_route(&receiver, fx.journal.clone());
    let end =
        chrono::DurationRound::duration_trunc(chrono::Utc::now(), TimeDelta::minutes(1)).unwrap();
    let (start, end) = (
        replaysafe_core::rfc3339(end - TimeDelta::hours(1)),
        replaysafe_core::rfc3339(end),
    );
    let (_, sqlite_recipe, pg_recipe) = python_blocks();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("stage.py");
    std::fs::write(
        &script,
        sqlite_recipe
            + &pg_recipe
            + r#"

import sys
import psycopg

url, target, start, end = sys.argv[1:5]
with psycopg.connect(url) as conn:
    # A rolled-back transaction leaves no row.
    with conn.transaction(force_rollback=True):
        stage_webhook_pg(conn, route="partner_webhook", target=target, pipeline="daily_orders",
                         run_id="scheduled__python", window_start=start, window_end=end,
                         event_type="orders.rolled_back", data={"total": 0})
    with conn.transaction():
        conn.execute("CREATE TABLE IF NOT EXISTS orders_daily (day TEXT, total BIGINT)")
        conn.execute("INSERT INTO orders_daily VALUES ('2026-08-05', 42)")
        key = stage_webhook_pg(conn, route="partner_webhook", target=target, pipeline="daily_orders",
                               run_id="scheduled__python", window_start=start, window_end=end,
                               event_type="orders.total", data={"total": 42})
    # A replay of the same staging adds no row.
    with conn.transaction():
        again = stage_webhook_pg(conn, route="partner_webhook", target=target, pipeline="daily_orders",
                                 run_id="scheduled__python", window_start=start, window_end=end,
                                 event_type="orders.total", data={"total": 42})
    assert again == key
    print(key)
"#,
    )
    .unwrap();
    let output = tokio::process::Command::new("python3")
        .arg(&script)
        .args([fx.url.as_str(), &receiver.url(), &start, &end])
        .env("PYTHONPATH", pythonpath)
        .output()
        .await
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let key = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert_eq!(fx.rows().await, 1);

    let worker = Worker::builder(fx.outbox.clone())
        .add_route(route)
        .build()
        .unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!(
        stats.delivered,
        1,
        "{stats:?} {:?}",
        fx.outbox.list(Status::Dead, 1).await.unwrap()
    );
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(requests[0].body, r#"{"total":42}"#);
}

/// A TCP proxy in front of the server: `cut` drops every open connection, and while
/// `blocked` it closes new ones at once (the database is unreachable).
struct CuttingProxy {
    port: u16,
    blocked: Arc<std::sync::atomic::AtomicBool>,
    open: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl CuttingProxy {
    async fn start(target: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let blocked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let accepting = {
            let (blocked, open) = (blocked.clone(), open.clone());
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if blocked.load(std::sync::atomic::Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    else {
                        continue;
                    };
                    open.lock().unwrap().push(tokio::spawn(async move {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }));
                }
            })
        };
        CuttingProxy {
            port,
            blocked,
            open,
            accepting,
        }
    }

    fn cut(&self) {
        for connection in self.open.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    fn block(&self, blocked: bool) {
        self.blocked
            .store(blocked, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.cut();
        self.accepting.abort();
    }
}

type Pause = (
    tokio::sync::oneshot::Sender<()>,
    tokio::sync::oneshot::Receiver<()>,
);

/// Records every delivery's key; the first delivery waits for a go-ahead after saying
/// it has begun.
#[derive(Clone, Debug, Default)]
struct Pausing {
    delivered: Arc<std::sync::Mutex<Vec<String>>>,
    first: Arc<std::sync::Mutex<Option<Pause>>>,
}

#[async_trait]
impl EffectClient for Pausing {
    type Effect = Note;
    type Receipt = ();
    type Error = TestError;

    fn describe(&self, _cx: &ReplayContext, note: &Note) -> Result<EffectDescription, TestError> {
        EffectDescription::new(EffectKind::Webhook, &note.message_type, &note.target)
            .map(|d| d.with_payload(note.body.as_bytes()))
            .map_err(|e| TestError::Invalid(e.to_string()))
    }

    async fn deliver(&self, delivery: &Delivery<'_>, _note: &Note) -> Result<(), TestError> {
        let pause = self.first.lock().unwrap().take();
        if let Some((begun, go_ahead)) = pause {
            let _ = begun.send(());
            let _ = go_ahead.await;
        }
        self.delivered
            .lock()
            .unwrap()
            .push(delivery.key().as_str().to_owned());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_mid_delivery_leaves_the_row_to_be_reclaimed_after_its_lease_and_not_sent_twice()
 {
    let fx = PgFixture::new().await;
    let port = postgres::parse_url(&fx.url).unwrap().get_ports()[0];
    let proxy = CuttingProxy::start(port).await;
    let proxied = fx
        .url
        .replace(&format!(":{port}/"), &format!(":{}/", proxy.port));
    let store = PostgresOutbox::builder(postgres::parse_url(&proxied).unwrap())
        .pool_size(1)
        .listen(false)
        .connect()
        .await
        .unwrap();

    let (begun, begun_seen) = tokio::sync::oneshot::channel();
    let (go_ahead, go) = tokio::sync::oneshot::channel();
    let client = Pausing::default();
    *client.first.lock().unwrap() = Some((begun, go));
    let route = Route::new(
        "partner_webhook",
        Guard::with_shared_journal(client.clone(), fx.journal.clone()),
    )
    .unwrap();
    // The worker runs on the system clock, so the row's window is current now.
    let now = chrono::Utc::now();
    let cx = ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id("scheduled__cut")
        .run_kind(RunKind::Scheduled)
        .window(Window::new(now - TimeDelta::hours(1), now).unwrap())
        .build()
        .unwrap();
    let staged = {
        let mut conn = fx.outbox.pool().get().await.unwrap();
        let tx = conn.transaction().await.unwrap();
        let staged = postgres::stage(&tx, &cx, &route, &Note::new("daily_total", "42"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        staged
    };

    let lease = Duration::from_millis(1000);
    let worker = Worker::builder(store)
        .add_route(route)
        .lease(lease)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        worker
            .run_until(async {
                let _ = stopped.await;
            })
            .await
    });

    // Mid-delivery: the database connection is cut and stays unreachable, then the
    // receiver answers. The completion cannot be written.
    begun_seen.await.unwrap();
    proxy.block(true);
    proxy.cut();
    go_ahead.send(()).unwrap();
    // Past the lease, the row is still claimed: the cut completion changed nothing.
    tokio::time::sleep(lease + Duration::from_millis(300)).await;
    assert_eq!(
        fx.text(&staged.key, "status").await.as_deref(),
        Some("claimed")
    );
    assert_eq!(client.delivered.lock().unwrap().len(), 1);
    assert_eq!(
        fx.outbox.in_doubt(chrono::Utc::now()).await.unwrap(),
        1,
        "claimed with the lease over: in doubt"
    );

    // The database is back: the worker's pool reconnects and the row is reclaimed; the
    // journal saw the delivery, so it is completed delivered without a second one.
    proxy.block(false);
    let done = tokio::time::timeout(Duration::from_secs(60), async {
        while fx.text(&staged.key, "status").await.as_deref() != Some("delivered") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(done.is_ok(), "the row was not reclaimed and delivered");
    stop.send(()).unwrap();
    let stats = running.await.unwrap();
    assert!(stats.store_errors >= 1, "{stats:?}");
    assert_eq!(
        *client.delivered.lock().unwrap(),
        std::slice::from_ref(&staged.key),
        "no second delivery: the journal remembered the first"
    );
    assert_eq!(
        fx.journal.records().last().unwrap().reasons,
        ["already_delivered"]
    );
    assert_eq!(fx.text(&staged.key, "attempts").await.as_deref(), Some("2"));
    let counters = fx.outbox.counters().await.unwrap();
    assert_eq!((counters.reclaimed, counters.stale_completions), (1, 0));
}

#[tokio::test]
async fn a_reclaimed_row_whose_attempt_began_is_in_doubt_until_an_audited_resend() {
    use replaysafe_core::Journal;
    use replaysafe_core::journal::{JournalDecision, JournalRecord, RecordEffect, RecordWindow};
    let fx = PgFixture::new().await;
    let staged = fx.stage(&fx.live(), &Note::new("daily_total", "42")).await;
    let abandoned = fx
        .outbox
        .claim(&request(contexts::now(), 10))
        .await
        .unwrap();
    assert_eq!(abandoned.len(), 1);
    // The killed worker's guard had journaled the attempt, and nothing after it.
    let window = contexts::current_window();
    let attempting = JournalRecord::new(
        contexts::now(),
        JournalDecision::Attempting,
        "daily_orders",
        "scheduled__killed",
        "scheduled",
        RecordWindow::new(window.start(), window.end()),
        RecordEffect::new("webhook", "daily_total", "t", &staged.key, "00", 2),
    )
    .with_attempt(1);
    fx.journal.append(&attempting.entry()).unwrap();
    fx.clock.advance(TimeDelta::seconds(31));

    let worker = fx.worker().build().unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!((stats.suppressed, stats.delivered), (1, 0));
    assert!(fx.client.received().is_empty());
    assert_eq!(
        fx.text(&staged.key, "reasons").await.as_deref(),
        Some("in_doubt")
    );

    // Restaging does not reopen it; an audited resend does.
    fx.stage(&fx.live(), &Note::new("daily_total", "43")).await;
    assert_eq!(
        fx.text(&staged.key, "status").await.as_deref(),
        Some("suppressed")
    );
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    let action = OperatorAction::new("the partner confirmed it never arrived", "jane@ops").unwrap();
    fx.outbox
        .resend(
            std::slice::from_ref(&staged.key),
            &action,
            contexts::now() + TimeDelta::seconds(31),
        )
        .await
        .unwrap();
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    assert_eq!(fx.client.received().len(), 1);
}

fn pg_journal(url: &str) -> Arc<dyn replaysafe_core::Journal> {
    Arc::new(
        postgres::PostgresJournal::connect(postgres::parse_url(url).unwrap(), "postgres://test")
            .unwrap(),
    )
}

#[test]
fn a_postgres_journal_remembers_across_connections() {
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(fresh_database());
    crate::journal::remembers_like_a_file(|| pg_journal(&url));
}

#[test]
fn a_postgres_journal_holds_the_lines_of_a_file_journal_and_reads_them_back() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = runtime.block_on(fresh_database());
    let config = postgres::parse_url(&url).unwrap();
    crate::journal::holds_the_lines_of_a_file(pg_journal(&url), || {
        let mut lines = Vec::new();
        runtime
            .block_on(postgres::read_journal(
                &config,
                &replaysafe_outbox::JournalQuery::all().pipeline("daily_orders"),
                |line| {
                    lines.push(line.to_owned());
                    Ok(())
                },
            ))
            .unwrap();
        lines
    });
}

#[test]
fn postgres_journal_connections_racing_deliver_each_key_once() {
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(fresh_database());
    pg_journal(&url);
    crate::journal::racing_handles_deliver_each_key_once(|| pg_journal(&url), 8, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_journal_works_from_inside_a_runtime_and_says_when_the_database_is_gone() {
    let url = fresh_database().await;
    let journal = pg_journal(&url);
    let client = replaysafe_test::RecordingClient::new();
    let guard = Guard::with_shared_journal(client.clone(), journal.clone());
    let effect = replaysafe_test::TestEffect::email("ana@shop.example");
    assert!(
        guard
            .send(&contexts::live(), &effect)
            .await
            .unwrap()
            .is_delivered()
    );
    // The tables are dropped under it: the next record is an error, and nothing is sent.
    let (admin, connection) = postgres::parse_url(&url)
        .unwrap()
        .connect(NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute("DROP TABLE replaysafe_journal; DROP TABLE replaysafe_journal_keys")
        .await
        .unwrap();
    let other = replaysafe_test::TestEffect::email("bob@shop.example");
    let error = guard.send(&contexts::live(), &other).await.unwrap_err();
    assert_eq!(client.delivered().len(), 1, "sent without a record");
    let text = replaysafe_core::error_chain(&error);
    let key = guard.preview(&contexts::live(), &other).unwrap().key;
    assert!(
        text.contains(&format!(
            "reading journal postgres://test for what it knows of effect {key}"
        )),
        "{text}"
    );
    assert!(
        text.contains("replaysafe_journal"),
        "the database's own word: {text}"
    );
}

#[test]
fn journals_opening_a_fresh_database_at_once_all_connect() {
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(fresh_database());
    let opened: Vec<bool> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    postgres::PostgresJournal::connect(
                        postgres::parse_url(&url).unwrap(),
                        "postgres://test",
                    )
                    .is_ok()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(opened, [true; 8]);
}

/// The circuits table on PostgreSQL: an opening keeps its first time, one of two
/// concurrent takers gets a due probe, a close clears it.
#[tokio::test]
async fn circuits_are_shared_and_one_worker_takes_each_due_probe() {
    use replaysafe_outbox::CircuitRecord;
    let fx = PgFixture::new().await;
    let now = contexts::now();
    let probe = now + TimeDelta::seconds(30);
    fx.outbox
        .record_circuit(&CircuitRecord::opened("partner", 5, now, probe))
        .await
        .unwrap();
    // A failed probe keeps it open: the next probe moves, the opening time stays.
    let later = now + TimeDelta::seconds(31);
    fx.outbox
        .record_circuit(&CircuitRecord::opened(
            "partner",
            6,
            later,
            later + TimeDelta::seconds(30),
        ))
        .await
        .unwrap();
    let circuits = fx.outbox.circuits().await.unwrap();
    assert_eq!(circuits.len(), 1);
    assert!(circuits[0].open);
    assert_eq!(circuits[0].opened_at, Some(now));
    assert_eq!(
        circuits[0].next_probe_at,
        Some(later + TimeDelta::seconds(30))
    );

    // Not due yet: nobody takes it. Due: one of two takers does.
    assert!(
        !fx.outbox
            .take_probe("partner", later, later + TimeDelta::seconds(30))
            .await
            .unwrap()
    );
    let due = later + TimeDelta::seconds(30);
    let other = PostgresOutbox::connect(&fx.url).await.unwrap();
    let (a, b) = tokio::join!(
        fx.outbox
            .take_probe("partner", due, due + TimeDelta::seconds(30)),
        other.take_probe("partner", due, due + TimeDelta::seconds(30))
    );
    assert_eq!(
        [a.unwrap(), b.unwrap()].iter().filter(|t| **t).count(),
        1,
        "one probe for the outbox"
    );
    fx.outbox
        .record_circuit(&CircuitRecord::closed("partner", due))
        .await
        .unwrap();
    let circuits = other.circuits().await.unwrap();
    assert!(!circuits[0].open && circuits[0].opened_at.is_none());
}

/// A route's consecutive failures counted through PostgreSQL by two connections at once:
/// no count is lost, an answer clears a closed circuit's count, an open circuit keeps it.
#[tokio::test]
async fn a_routes_failures_are_counted_by_every_worker_together() {
    use replaysafe_outbox::CircuitRecord;
    let fx = PgFixture::new().await;
    let other = PostgresOutbox::connect(&fx.url).await.unwrap();
    let now = contexts::now();
    assert_eq!(
        fx.outbox.count_route_failure("partner", now).await.unwrap(),
        Some(1)
    );
    let (a, b) = tokio::join!(
        fx.outbox.count_route_failure("partner", now),
        other.count_route_failure("partner", now)
    );
    let mut counts = [a.unwrap().unwrap(), b.unwrap().unwrap()];
    counts.sort();
    assert_eq!(counts, [2, 3]);
    let circuit = &other.circuits().await.unwrap()[0];
    assert!(!circuit.open && circuit.failures == 3, "{circuit:?}");
    other.clear_route_failures("partner").await.unwrap();
    assert_eq!(fx.outbox.circuits().await.unwrap()[0].failures, 0);

    // Open, the count stays for the probe's answer to close it.
    fx.outbox
        .record_circuit(&CircuitRecord::opened(
            "partner",
            3,
            now,
            now + TimeDelta::seconds(30),
        ))
        .await
        .unwrap();
    assert_eq!(
        other.count_route_failure("partner", now).await.unwrap(),
        Some(4)
    );
    fx.outbox.clear_route_failures("partner").await.unwrap();
    let circuit = &other.circuits().await.unwrap()[0];
    assert!(circuit.open && circuit.failures == 4, "{circuit:?}");
}

/// A rate's bucket shared through PostgreSQL: a second's burst, then tokens owed one
/// interval apart (below zero); a token given back is owed no more; time refills it, up
/// to its capacity.
#[tokio::test]
async fn a_shared_rates_bucket_hands_tokens_at_its_rate_to_every_worker() {
    let fx = PgFixture::new().await;
    let other = PostgresOutbox::connect(&fx.url).await.unwrap();
    let now = contexts::now();
    let take = |store: &PostgresOutbox, at| {
        let store = store.clone();
        async move {
            store
                .take_shared_token("partner", 2.0, 2.0, at)
                .await
                .unwrap()
        }
    };
    assert_eq!(take(&fx.outbox, now).await, 1.0);
    assert_eq!(take(&other, now).await, 0.0);
    // The bucket is empty: the next token is owed half a second from now (2/s), the
    // one after a second.
    assert_eq!(take(&other, now).await, -1.0);
    assert_eq!(take(&fx.outbox, now).await, -2.0);
    // That one was not waited for: given back, the next is owed a second from now again.
    fx.outbox
        .give_back_shared_token("partner", 2.0)
        .await
        .unwrap();
    assert_eq!(take(&other, now).await, -2.0);
    // Three seconds later: full again (two tokens), never more.
    let later = now + TimeDelta::seconds(3);
    assert_eq!(take(&fx.outbox, later).await, 1.0);
    assert_eq!(take(&other, later).await, 0.0);
    assert_eq!(take(&other, later).await, -1.0);
}

/// A worker whose count of a route's failures PostgreSQL refuses (a trigger here, as a
/// statement that fails would) counts alone: its circuit opens after the failures it saw
/// itself, and the opening it records holds the route for the other workers.
#[tokio::test]
async fn a_worker_whose_count_cannot_be_written_counts_alone() {
    use replaysafe_outbox::{Circuit, FlowControl};
    let fx = PgFixture::new().await;
    for n in 0..5 {
        fx.stage(&fx.live(), &Note::new(&format!("orders.{n}"), "{}"))
            .await;
    }
    for _ in 0..3 {
        fx.client.fail_with(TestError::Transient {
            retry_after: Some(Duration::from_secs(3600)),
        });
    }
    // Counting a failure writes a closed circuit's row; opening one writes an open row.
    fx.outbox
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(
            "CREATE FUNCTION refuse_counts() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF NEW.state = 'closed' THEN RAISE EXCEPTION 'counts refused'; END IF; \
             RETURN NEW; END $$; \
             CREATE TRIGGER refuse_counts BEFORE INSERT ON replaysafe_outbox_circuits \
             FOR EACH ROW EXECUTE FUNCTION refuse_counts();",
        )
        .await
        .unwrap();
    let worker = || {
        fx.worker()
            .flow(
                "partner_webhook",
                FlowControl::new().with_breaker(3, Duration::from_secs(3600)),
            )
            .batch_size(1)
            .build()
            .unwrap()
    };
    let (alone, other) = (worker(), worker());
    let route = |circuit| [("partner_webhook".to_owned(), circuit)];

    for _ in 0..2 {
        alone.run_once().await.unwrap();
    }
    assert!(
        fx.outbox.circuits().await.unwrap().is_empty(),
        "no count was written"
    );
    assert_eq!(alone.circuits(), route(Circuit::Closed));
    alone.run_once().await.unwrap();
    assert_eq!(alone.circuits(), route(Circuit::Open));
    let recorded = fx.outbox.circuits().await.unwrap();
    assert!(
        recorded.len() == 1 && recorded[0].open && recorded[0].failures == 3,
        "{recorded:?}"
    );
    alone.run_once().await.unwrap();
    other.run_once().await.unwrap();
    assert_eq!(other.circuits(), route(Circuit::Open));
    assert!(fx.client.received().is_empty());
    assert_eq!(fx.outbox.list(Status::Pending, 10).await.unwrap().len(), 5);
    assert!(fx.client.failures.lock().unwrap().is_empty(), "3 attempts");
}
