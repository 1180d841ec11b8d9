//! Ordering keys: rows of one key are claimed one at a time in the order they were first
//! staged, by one worker or several; rows without a key keep their parallelism.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::TimeDelta;
use replaysafe_core::{
    Clock, Delivery, EffectClient, EffectDescription, EffectKind, Guard, MemoryJournal,
    ReplayContext,
};
use replaysafe_outbox::{
    ClaimRequest, ClaimedRow, Completion, OutboxError, OutboxStore, Route, StageOptions, Status,
    Worker, sqlite,
};
use replaysafe_test::TestError;

use crate::support::{Fixture, Note};

/// A note of ordering key `key` (or none, `-`), number `n`: its message type names both.
pub(crate) fn keyed(key: &str, n: usize) -> Note {
    Note::new(&format!("{key}.{n}"), &format!("{key}#{n}"))
}

/// The options a [`keyed`] note is staged with.
pub(crate) fn options(key: &str) -> StageOptions {
    if key == "-" {
        StageOptions::new()
    } else {
        StageOptions::new().ordering_key(key)
    }
}

/// Delivers slowly and records, per ordering key, the order of deliveries and whether
/// two of one key were ever in flight together; and the most keyless ones in flight.
#[derive(Clone, Debug, Default)]
pub(crate) struct Recorder {
    order: Arc<Mutex<HashMap<String, Vec<usize>>>>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    pub(crate) overlaps: Arc<AtomicUsize>,
    pub(crate) keyless_peak: Arc<AtomicUsize>,
    pub(crate) delay: Duration,
}

impl Recorder {
    pub(crate) fn new(delay: Duration) -> Self {
        Recorder {
            delay,
            ..Recorder::default()
        }
    }

    /// The numbers delivered under `key`, in delivery order.
    pub(crate) fn order(&self, key: &str) -> Vec<usize> {
        self.order
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    pub(crate) fn route(&self) -> Route<Recorder> {
        Route::new(
            "partner_webhook",
            Guard::with_shared_journal(self.clone(), Arc::new(MemoryJournal::new())),
        )
        .unwrap()
    }
}

#[async_trait]
impl EffectClient for Recorder {
    type Effect = Note;
    type Receipt = ();
    type Error = TestError;

    fn describe(&self, _cx: &ReplayContext, note: &Note) -> Result<EffectDescription, TestError> {
        EffectDescription::new(EffectKind::Webhook, &note.message_type, &note.target)
            .map(|d| d.with_payload(note.body.as_bytes()))
            .map_err(|e| TestError::Invalid(e.to_string()))
    }

    async fn deliver(&self, _delivery: &Delivery<'_>, note: &Note) -> Result<(), TestError> {
        let (key, n) = note.body.split_once('#').unwrap();
        let n: usize = n.parse().unwrap();
        let now_in_flight = {
            let mut in_flight = self.in_flight.lock().unwrap();
            let count = in_flight.entry(key.to_owned()).or_default();
            *count += 1;
            *count
        };
        if key == "-" {
            self.keyless_peak.fetch_max(now_in_flight, Ordering::SeqCst);
        } else if now_in_flight > 1 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(self.delay).await;
        self.order
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .push(n);
        *self.in_flight.lock().unwrap().get_mut(key).unwrap() -= 1;
        Ok(())
    }
}

/// Three keys of eight rows and eight keyless rows, interleaved.
fn plan() -> Vec<(&'static str, usize)> {
    (1..=8)
        .flat_map(|n| ["a", "b", "c", "-"].map(|key| (key, n)))
        .collect()
}

/// Every key of [`plan`] delivered in order, never two of one key in flight, and keyless
/// rows side by side.
fn assert_delivered_in_order(recorder: &Recorder) {
    for key in ["a", "b", "c"] {
        assert_eq!(
            recorder.order(key),
            (1..=8).collect::<Vec<_>>(),
            "key {key}"
        );
    }
    assert_eq!(recorder.order("-").len(), 8);
    assert_eq!(recorder.overlaps.load(Ordering::SeqCst), 0);
    assert!(
        recorder.keyless_peak.load(Ordering::SeqCst) > 1,
        "keyless rows are delivered side by side"
    );
}

fn request(fx: &Fixture) -> ClaimRequest {
    ClaimRequest {
        routes: vec!["partner_webhook".into()],
        limit: 100,
        lease: Duration::from_secs(30),
        now: fx.clock.now(),
    }
}

/// Each staged row's name (`a.1`) by its idempotency key.
type Names = HashMap<String, String>;

fn names(book: &Names, rows: &[ClaimedRow]) -> Vec<String> {
    let mut names: Vec<String> = rows.iter().map(|r| book[r.key()].clone()).collect();
    names.sort();
    names
}

/// Stages `notes` (key, n) in one transaction, in the order given.
fn stage_all(fx: &Fixture, book: &mut Names, notes: &[(&str, usize)]) {
    let mut conn = fx.connection();
    let tx = conn.transaction().unwrap();
    for (key, n) in notes {
        let staged =
            sqlite::stage_with(&tx, &fx.live(), &fx.route, &keyed(key, *n), &options(key)).unwrap();
        book.insert(staged.key, format!("{key}.{n}"));
    }
    tx.commit().unwrap();
}

#[tokio::test]
async fn a_claim_takes_only_each_keys_first_waiting_row_and_every_keyless_row() {
    let fx = Fixture::new();
    // Interleaved, across two transactions.
    let mut book = Names::new();
    stage_all(&fx, &mut book, &[("a", 1), ("b", 1), ("-", 1), ("a", 2)]);
    stage_all(&fx, &mut book, &[("a", 3), ("b", 2), ("-", 2)]);
    let store = fx.store();
    // An operator's listing names each row's ordering key.
    let listed = store.list(Status::Pending, 100).await.unwrap();
    let key_of = |name: &str| {
        listed
            .iter()
            .find(|r| book[&r.key] == name)
            .unwrap()
            .ordering_key
            .clone()
    };
    assert_eq!(
        (key_of("a.2"), key_of("b.1"), key_of("-.1")),
        (Some("a".to_owned()), Some("b".to_owned()), None)
    );

    // a.2, a.3 and b.2 wait behind the first row of their key.
    assert_eq!(store.waiting_in_key_order().await.unwrap(), 3);

    let first = store.claim(&request(&fx)).await.unwrap();
    assert_eq!(names(&book, &first), ["-.1", "-.2", "a.1", "b.1"]);
    assert_eq!(store.waiting_in_key_order().await.unwrap(), 3);
    assert!(
        store.claim(&request(&fx)).await.unwrap().is_empty(),
        "a key with a row claimed gives no other"
    );

    let row = |name: &str| first.iter().find(|r| book[r.key()] == name).unwrap();
    let delivered = || Completion::Delivered {
        payload_sha256: String::new(),
    };
    store
        .complete(row("a.1"), delivered(), fx.clock.now())
        .await
        .unwrap();
    // b.1 goes dead: a dead letter does not hold its key.
    store
        .complete(
            row("b.1"),
            Completion::Dead {
                error: "refused".into(),
            },
            fx.clock.now(),
        )
        .await
        .unwrap();
    assert_eq!(
        store.waiting_in_key_order().await.unwrap(),
        1,
        "a.3 behind a.2; b.2 free once b.1 is dead"
    );
    let second = store.claim(&request(&fx)).await.unwrap();
    assert_eq!(names(&book, &second), ["a.2", "b.2"]);

    for done in first
        .iter()
        .chain(&second)
        .filter(|r| ["-.1", "-.2", "b.2"].contains(&book[r.key()].as_str()))
    {
        store
            .complete(done, delivered(), fx.clock.now())
            .await
            .unwrap();
    }

    // a.2 waits to be retried: a row waiting for its next attempt holds its key.
    let a2 = second.iter().find(|r| book[r.key()] == "a.2").unwrap();
    store
        .complete(
            a2,
            Completion::Retry {
                next_attempt_at: fx.clock.now() + TimeDelta::minutes(5),
                error: "503".into(),
            },
            fx.clock.now(),
        )
        .await
        .unwrap();
    assert!(store.claim(&request(&fx)).await.unwrap().is_empty());
    fx.clock.advance(TimeDelta::minutes(6));
    assert_eq!(
        names(&book, &store.claim(&request(&fx)).await.unwrap()),
        ["a.2"],
        "the retried row comes before a.3"
    );
}

#[tokio::test]
async fn a_restaging_keeps_the_rows_place_and_an_expired_claim_is_taken_over_first() {
    let fx = Fixture::new();
    let mut book = Names::new();
    stage_all(&fx, &mut book, &[("a", 1), ("a", 2)]);
    // a.1 restaged under a newer source version: still first.
    {
        let mut conn = fx.connection();
        let tx = conn.transaction().unwrap();
        let staged = sqlite::stage_with(
            &tx,
            &fx.live(),
            &fx.route,
            &keyed("a", 1),
            &options("a").version(7),
        )
        .unwrap();
        tx.commit().unwrap();
        assert!(staged.changed);
    }
    let store = fx.store();
    let claimed = store.claim(&request(&fx)).await.unwrap();
    assert_eq!(names(&book, &claimed), ["a.1"]);
    // Its worker died: after the lease, a.1 is claimed again, never a.2 beside it.
    fx.clock.advance(TimeDelta::seconds(31));
    let again = store.claim(&request(&fx)).await.unwrap();
    assert_eq!(names(&book, &again), ["a.1"]);
    assert!(again[0].reclaimed());
}

#[tokio::test]
async fn a_malformed_ordering_key_is_refused_by_name_and_nothing_is_staged() {
    let fx = Fixture::new();
    let too_long = "k".repeat(replaysafe_outbox::MAX_ORDERING_KEY + 1);
    for (bad, why) in [
        ("", "empty"),
        (too_long.as_str(), "longer than"),
        ("line\nbreak", "control character"),
    ] {
        let mut conn = fx.connection();
        let tx = conn.transaction().unwrap();
        let error = sqlite::stage_with(
            &tx,
            &fx.live(),
            &fx.route,
            &keyed("a", 1),
            &StageOptions::new().ordering_key(bad),
        )
        .unwrap_err();
        tx.commit().unwrap();
        assert!(
            matches!(&error, OutboxError::Invalid { field: "ordering_key", reason } if reason.contains(why)),
            "{error:?}"
        );
        assert!(error.to_string().contains("ordering_key"), "{error}");
    }
    assert_eq!(fx.row_count(), 0);
}

/// Three workers, each with its own connection, deliver three keys of eight rows and
/// eight keyless rows: every key in order, never two of one key in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_deliver_each_key_in_staging_order_one_at_a_time() {
    let fx = Fixture::new();
    let recorder = Recorder::new(Duration::from_millis(3));
    let route = recorder.route();
    {
        let mut conn = fx.connection();
        for chunk in plan().chunks(5) {
            let tx = conn.transaction().unwrap();
            for (key, n) in chunk {
                sqlite::stage_with(&tx, &fx.live(), &route, &keyed(key, *n), &options(key))
                    .unwrap();
            }
            tx.commit().unwrap();
        }
    }
    let workers: Vec<Worker> = (0..3)
        .map(|_| {
            Worker::builder(fx.store())
                .add_route(route.clone())
                .clock(fx.clock.clone())
                .in_flight(8)
                .batch_size(8)
                .build()
                .unwrap()
        })
        .collect();
    let runs = workers.iter().map(|w| w.drain());
    for stats in futures_util::future::join_all(runs).await {
        stats.unwrap();
    }
    assert_delivered_in_order(&recorder);
    let store = fx.store();
    assert!(store.list(Status::Pending, 10).await.unwrap().is_empty());
}

#[cfg(feature = "postgres")]
mod on_postgres {
    use super::*;
    use crate::postgres::PgFixture;
    use replaysafe_outbox::postgres::{self, PostgresOutbox};

    fn request(fx: &PgFixture) -> ClaimRequest {
        ClaimRequest {
            routes: vec!["partner_webhook".into()],
            limit: 100,
            lease: Duration::from_secs(30),
            now: fx.clock.now(),
        }
    }

    /// Stages one note in its own committed transaction; returns its idempotency key.
    async fn stage_one(fx: &PgFixture, route: &Route<Recorder>, key: &str, n: usize) -> String {
        let mut conn = fx.outbox.pool().get().await.unwrap();
        let tx = conn.transaction().await.unwrap();
        let staged = postgres::stage_with(&tx, &fx.live(), route, &keyed(key, n), &options(key))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        staged.key
    }

    /// The trap of ordering by a sequence: a later transaction that commits first must not
    /// overtake an earlier one still open. Staging a key locks it, so the later staging
    /// waits, and a claim meanwhile sees no row of the key at all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_later_staging_of_a_key_waits_for_the_open_earlier_one_and_never_overtakes_it() {
        let fx = PgFixture::new().await;
        let route = Recorder::default().route();
        let mut first_conn = fx.outbox.pool().get().await.unwrap();
        let first_tx = first_conn.transaction().await.unwrap();
        let first =
            postgres::stage_with(&first_tx, &fx.live(), &route, &keyed("a", 1), &options("a"))
                .await
                .unwrap();

        let second = {
            let (outbox, route, cx) = (fx.outbox.clone(), route.clone(), fx.live());
            tokio::spawn(async move {
                let mut conn = outbox.pool().get().await.unwrap();
                let tx = conn.transaction().await.unwrap();
                let staged = postgres::stage_with(&tx, &cx, &route, &keyed("a", 2), &options("a"))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                staged.key
            })
        };
        // Another key and a keyless row are not held up.
        let other = tokio::time::timeout(Duration::from_secs(10), async {
            (
                stage_one(&fx, &route, "b", 1).await,
                stage_one(&fx, &route, "-", 1).await,
            )
        })
        .await
        .expect("other keys stage while key a is held");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !second.is_finished(),
            "the second staging of key a waits for the first transaction"
        );
        let claimed: Vec<String> = fx
            .outbox
            .claim(&request(&fx))
            .await
            .unwrap()
            .iter()
            .map(|r| r.key().to_owned())
            .collect();
        let mut expected = vec![other.0, other.1];
        expected.sort();
        let mut sorted = claimed.clone();
        sorted.sort();
        assert_eq!(sorted, expected, "no row of key a is visible yet");

        first_tx.commit().await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("the second staging goes on once the first commits")
            .unwrap();
        assert_eq!(fx.outbox.waiting_in_key_order().await.unwrap(), 1);
        let next = fx.outbox.claim(&request(&fx)).await.unwrap();
        assert_eq!(
            next.iter().map(|r| r.key()).collect::<Vec<_>>(),
            [first.key.as_str()],
            "the earlier row first"
        );
        fx.outbox
            .complete(
                &next[0],
                Completion::Delivered {
                    payload_sha256: String::new(),
                },
                fx.clock.now(),
            )
            .await
            .unwrap();
        let last = fx.outbox.claim(&request(&fx)).await.unwrap();
        assert_eq!(
            last.iter().map(|r| r.key()).collect::<Vec<_>>(),
            [second.as_str()]
        );
    }

    /// Workers on three pools of their own deliver three keys of eight rows each in
    /// staging order, never two of one key in flight, and keyless rows side by side.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn workers_on_many_pools_deliver_each_key_in_order_one_at_a_time() {
        let fx = PgFixture::new().await;
        let recorder = Recorder::new(Duration::from_millis(3));
        let route = recorder.route();
        {
            let mut conn = fx.outbox.pool().get().await.unwrap();
            for chunk in plan().chunks(5) {
                let tx = conn.transaction().await.unwrap();
                for (key, n) in chunk {
                    postgres::stage_with(&tx, &fx.live(), &route, &keyed(key, *n), &options(key))
                        .await
                        .unwrap();
                }
                tx.commit().await.unwrap();
            }
        }
        let mut workers = Vec::new();
        for _ in 0..3 {
            let outbox = PostgresOutbox::builder(postgres::parse_url(&fx.url).unwrap())
                .pool_size(4)
                .listen(false)
                .connect()
                .await
                .unwrap();
            workers.push(
                Worker::builder(outbox)
                    .add_route(route.clone())
                    .clock(fx.clock.clone())
                    .in_flight(8)
                    .batch_size(8)
                    .build()
                    .unwrap(),
            );
        }
        let runs = workers.iter().map(|w| w.drain());
        for stats in futures_util::future::join_all(runs).await {
            stats.unwrap();
        }
        assert_delivered_in_order(&recorder);
        assert!(
            fx.outbox
                .list(Status::Pending, 10)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

/// A worker of more routes than a claim reads one index range each of (SQLite's compound
/// query limit) claims with one scan of the due rows, keys still in turn.
#[tokio::test]
async fn a_worker_of_many_routes_still_claims_each_keys_rows_in_turn() {
    let fx = Fixture::new();
    let recorder = Recorder::default();
    let journal = Arc::new(MemoryJournal::new());
    let routes: Vec<Route<Recorder>> = (0..520)
        .map(|i| {
            Route::new(
                format!("route_{i}"),
                Guard::with_shared_journal(recorder.clone(), journal.clone()),
            )
            .unwrap()
        })
        .collect();
    {
        let mut conn = fx.connection();
        let tx = conn.transaction().unwrap();
        for (route, key, n) in [(0, "a", 1), (519, "a", 2), (519, "-", 1)] {
            sqlite::stage_with(
                &tx,
                &fx.live(),
                &routes[route],
                &keyed(key, n),
                &options(key),
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let worker = routes
        .iter()
        .fold(Worker::builder(fx.store()), |builder, route| {
            builder.add_route(route.clone())
        })
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    let first = worker.run_once().await.unwrap();
    assert_eq!(first.delivered, 2, "a.1 and the keyless row, not a.2");
    assert_eq!(recorder.order("a"), [1]);
    worker.drain().await.unwrap();
    assert_eq!(recorder.order("a"), [1, 2]);
}
