//! Flow control through real receivers: a failing route's circuit opens and its rows wait
//! while the healthy route delivers; a probe closes it; a route's concurrency cap holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use chrono::TimeDelta;
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Clock, FixedClock, MemoryJournal, RunKind};
use replaysafe_outbox::rusqlite::Connection;
use replaysafe_outbox::{Circuit, FlowControl, OutboxStore, Route, Status, Worker, sqlite};
use replaysafe_test::contexts;
use replaysafe_webhook::{IpNetwork, SsrfPolicy, Webhook, WebhookClient};

use crate::receiver::Receiver;

/// A `Retry-After` that keeps a failed row out of a test.
const AN_HOUR: &str = "3600";

fn route(name: &str, url: &str) -> Route<WebhookClient> {
    let guard = WebhookClient::builder(url)
        .ssrf_policy(
            SsrfPolicy::default().allow_network("127.0.0.1/32".parse::<IpNetwork>().unwrap()),
        )
        .build(Arc::new(MemoryJournal::new()))
        .unwrap();
    Route::new(name, guard).unwrap()
}

/// Stages `count` current rows on each route, in one transaction.
fn stage(
    path: &std::path::Path,
    clock: &Arc<FixedClock>,
    routes: &[&Route<WebhookClient>],
    count: usize,
) {
    let live = contexts::builder(RunKind::Scheduled, contexts::current_window())
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut conn = Connection::open(path).unwrap();
    sqlite::configure(&conn).unwrap();
    let tx = conn.transaction().unwrap();
    for route in routes {
        for n in 0..count {
            let hook = Webhook::json(format!("orders.{n}"), serde_json::json!({"n": n}));
            sqlite::stage(&tx, &live, route, &hook).unwrap();
        }
    }
    tx.commit().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_routes_circuit_opens_its_rows_wait_and_a_probe_closes_it() {
    let (broken, healthy) = (Receiver::start().await, Receiver::start().await);
    // Each failed row waits an hour (the receiver's Retry-After, taken as it is, where a
    // computed delay is jittered down to nothing now and then): out of this test.
    for _ in 0..3 {
        broken.answer(StatusCode::INTERNAL_SERVER_ERROR, Some(AN_HOUR));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let clock = Arc::new(FixedClock::new(contexts::now()));
    let (bad, good) = (
        route("broken", &broken.url()),
        route("partner", &healthy.url()),
    );
    stage(&path, &clock, &[&bad, &good], 10);
    let probe_every = Duration::from_millis(300);
    let journal = Arc::new(MemoryJournal::new());
    let worker = Worker::builder(store.clone())
        .add_route(bad)
        .add_route(good)
        .flow("broken", FlowControl::new().with_breaker(3, probe_every))
        .clock(clock.clone())
        .journal(journal.clone())
        .retry(replaysafe_outbox::default_retry().with_base_delay(Duration::from_secs(60)))
        .build()
        .unwrap();

    // Three 500s open the circuit; the healthy route delivers all of its rows; the
    // broken route's other rows wait, their attempts unspent.
    let stats = worker.drain().await.unwrap();
    assert_eq!(broken.requests().len(), 3, "{stats:?}");
    assert_eq!(healthy.requests().len(), 10);
    assert_eq!(worker.circuits(), [("broken".to_owned(), Circuit::Open)]);
    // Recorded in the outbox for every worker and `outbox status`, and journaled.
    let recorded = store.circuits().await.unwrap();
    assert_eq!(recorded.len(), 1);
    assert!(recorded[0].open && recorded[0].route == "broken" && recorded[0].failures == 3);
    assert_eq!(
        recorded[0].next_probe_at,
        Some(clock.now() + TimeDelta::milliseconds(300))
    );
    let circuit_records = |journal: &MemoryJournal| -> Vec<(Vec<String>, String)> {
        journal
            .records()
            .into_iter()
            .filter(|r| r.decision == JournalDecision::Circuit)
            .map(|r| (r.reasons.clone(), r.note.clone().unwrap_or_default()))
            .collect()
    };
    let opened = circuit_records(&journal);
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0].0, ["circuit_opened"]);
    assert!(
        opened[0].1.contains("route broken") && opened[0].1.contains("3 consecutive"),
        "{}",
        opened[0].1
    );
    let pending = store.list(Status::Pending, 100).await.unwrap();
    assert_eq!(
        pending.len(),
        10,
        "the broken route's rows are all still there"
    );

    // Before the probe is due nothing more is tried.
    worker.drain().await.unwrap();
    assert_eq!(broken.requests().len(), 3);

    // The probe is due: one row goes, the receiver answers, the circuit closes and the
    // rows that never had an attempt flow (the three retried ones wait for their delay).
    tokio::time::sleep(probe_every + Duration::from_millis(50)).await;
    clock.advance(TimeDelta::milliseconds(350));
    worker.drain().await.unwrap();
    assert_eq!(worker.circuits(), [("broken".to_owned(), Circuit::Closed)]);
    assert_eq!(broken.requests().len(), 3 + 7);
    assert_eq!(store.list(Status::Pending, 100).await.unwrap().len(), 3);
    let recorded = store.circuits().await.unwrap();
    assert!(!recorded[0].open && recorded[0].next_probe_at.is_none());
    let changes = circuit_records(&journal);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(changes[1].0, ["circuit_closed"]);
}

/// Two workers of one outbox: a circuit one opens holds the other's rows too, each due
/// probe is sent by one of them, and the close lets both deliver again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_opened_by_one_worker_holds_the_others_and_one_of_them_probes() {
    let broken = Receiver::start().await;
    for _ in 0..4 {
        broken.answer(StatusCode::SERVICE_UNAVAILABLE, Some(AN_HOUR));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    sqlite::SqliteOutbox::open(&path).unwrap();
    let clock = Arc::new(FixedClock::new(contexts::now()));
    let bad = route("broken", &broken.url());
    stage(&path, &clock, &[&bad], 12);
    let probe_every = Duration::from_millis(200);
    let worker = || {
        Worker::builder(sqlite::SqliteOutbox::open(&path).unwrap())
            .add_route(bad.clone())
            .flow("broken", FlowControl::new().with_breaker(2, probe_every))
            .clock(clock.clone())
            .retry(replaysafe_outbox::default_retry().with_base_delay(Duration::from_secs(60)))
            .build()
            .unwrap()
    };
    let (first, second) = (worker(), worker());

    first.drain().await.unwrap();
    assert_eq!(broken.requests().len(), 2, "two failures open it");
    assert_eq!(first.circuits(), [("broken".to_owned(), Circuit::Open)]);
    // The second worker never saw a failure, yet holds the route's rows.
    second.drain().await.unwrap();
    assert_eq!(broken.requests().len(), 2);
    assert_eq!(second.circuits(), [("broken".to_owned(), Circuit::Open)]);

    // The probe is due for both: one of them sends it (and it fails: still open).
    tokio::time::sleep(probe_every + Duration::from_millis(50)).await;
    clock.advance(TimeDelta::milliseconds(250));
    let (a, b) = tokio::join!(first.run_once(), second.run_once());
    a.unwrap();
    b.unwrap();
    assert_eq!(
        broken.requests().len(),
        3,
        "one probe for the outbox, not one a worker"
    );
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    assert!(store.circuits().await.unwrap()[0].open);

    // The next probe fails too; the one after gets an answer and closes it for both.
    for _ in 0..2 {
        tokio::time::sleep(probe_every + Duration::from_millis(50)).await;
        clock.advance(TimeDelta::milliseconds(250));
        let (a, b) = tokio::join!(first.run_once(), second.run_once());
        a.unwrap();
        b.unwrap();
    }
    assert!(!store.circuits().await.unwrap()[0].open);
    first.drain().await.unwrap();
    second.drain().await.unwrap();
    assert_eq!(first.circuits(), [("broken".to_owned(), Circuit::Closed)]);
    assert_eq!(second.circuits(), [("broken".to_owned(), Circuit::Closed)]);
    // 2 opening failures, 3 probes (two failed, one answered), then the 7 rows that
    // never had an attempt (the 4 that failed wait for their retry).
    assert_eq!(broken.requests().len(), 2 + 3 + 7);
    assert_eq!(store.list(Status::Pending, 100).await.unwrap().len(), 4);
}

/// A route `broken` to a receiver that answers `statuses` in turn (each with an hour's
/// `Retry-After`, so a failed row waits out of the test), 10 rows staged on it, in an
/// outbox of its own.
struct Broken {
    receiver: Receiver,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    store: sqlite::SqliteOutbox,
    clock: Arc<FixedClock>,
    route: Route<WebhookClient>,
}

impl Broken {
    async fn answering(statuses: &[u16]) -> Self {
        let receiver = Receiver::start().await;
        for status in statuses {
            receiver.answer(StatusCode::from_u16(*status).unwrap(), Some(AN_HOUR));
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let store = sqlite::SqliteOutbox::open(&path).unwrap();
        let clock = Arc::new(FixedClock::new(contexts::now()));
        let route = route("broken", &receiver.url());
        stage(&path, &clock, &[&route], 10);
        Broken {
            receiver,
            _dir: dir,
            path,
            store,
            clock,
            route,
        }
    }

    /// A worker of the outbox (a connection of its own) claiming `rows` a pass, with a
    /// breaker that opens after 3 consecutive failures and probes after an hour.
    fn worker(&self, rows: u32) -> Worker {
        Worker::builder(sqlite::SqliteOutbox::open(&self.path).unwrap())
            .add_route(self.route.clone())
            .flow(
                "broken",
                FlowControl::new().with_breaker(3, Duration::from_secs(3600)),
            )
            .batch_size(rows)
            .clock(self.clock.clone())
            .build()
            .unwrap()
    }
}

/// Two workers of one outbox count a route's consecutive failures together: the circuit
/// opens at the breaker's number of failures whichever worker saw them, and an answer
/// to either worker starts the count again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_of_an_outbox_count_a_routes_consecutive_failures_together() {
    let broken = Broken::answering(&[503, 503, 200, 503, 503, 503]).await;
    let (first, second) = (broken.worker(2), broken.worker(1));
    let counted = || async { broken.store.circuits().await.unwrap()[0].clone() };

    // Two failures in the first worker; the second's answer starts the count again.
    first.run_once().await.unwrap();
    assert_eq!((counted().await.open, counted().await.failures), (false, 2));
    second.run_once().await.unwrap();
    assert_eq!(counted().await.failures, 0, "an answer clears the count");
    // Two more in the first: 2 of 3, not 4.
    first.run_once().await.unwrap();
    assert_eq!((counted().await.open, counted().await.failures), (false, 2));
    // The second worker's first failure is the route's third in a row: it opens.
    second.run_once().await.unwrap();
    let circuit = counted().await;
    assert!(circuit.open && circuit.failures == 3, "{circuit:?}");
    assert_eq!(second.circuits(), [("broken".to_owned(), Circuit::Open)]);
    // The first follows it and sends nothing more.
    first.run_once().await.unwrap();
    assert_eq!(first.circuits(), [("broken".to_owned(), Circuit::Open)]);
    assert_eq!(broken.receiver.requests().len(), 6);
}

/// A worker whose count of a route's failures cannot be written to the outbox (here a
/// trigger refuses it, as a database that fails the statement would) counts alone: its
/// circuit opens after the breaker's number of failures it saw itself, rather than never,
/// and the opening it records holds the other workers' rows too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_count_cannot_be_written_counts_alone() {
    let broken = Broken::answering(&[503, 503, 503]).await;
    let store = &broken.store;
    // Counting a failure writes a closed circuit's row; opening one writes an open row.
    Connection::open(&broken.path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER refuse_counts BEFORE INSERT ON replaysafe_outbox_circuits \
             WHEN NEW.state = 'closed' BEGIN SELECT RAISE(ABORT, 'counts refused'); END;",
        )
        .unwrap();
    let (alone, other) = (broken.worker(1), broken.worker(1));

    for _ in 0..2 {
        alone.run_once().await.unwrap();
    }
    assert!(
        store.circuits().await.unwrap().is_empty(),
        "no count was written"
    );
    assert_eq!(alone.circuits(), [("broken".to_owned(), Circuit::Closed)]);
    // Its own third failure opens its circuit, and the opening is recorded.
    alone.run_once().await.unwrap();
    assert_eq!(alone.circuits(), [("broken".to_owned(), Circuit::Open)]);
    let recorded = store.circuits().await.unwrap();
    assert!(
        recorded.len() == 1 && recorded[0].open && recorded[0].failures == 3,
        "{recorded:?}"
    );
    // Neither worker sends more: the rows wait for the probe an hour away.
    alone.run_once().await.unwrap();
    other.run_once().await.unwrap();
    assert_eq!(other.circuits(), [("broken".to_owned(), Circuit::Open)]);
    assert_eq!(broken.receiver.requests().len(), 3);
    assert_eq!(store.list(Status::Pending, 100).await.unwrap().len(), 10);
}

/// A receiver that answers after `delay` and counts the most requests it held at once.
async fn slow_receiver(delay: Duration) -> (String, Arc<AtomicUsize>) {
    let current = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (c, m) = (current.clone(), most.clone());
    let app = axum::Router::new().route(
        "/hooks",
        axum::routing::post(move || {
            let (current, most) = (c.clone(), m.clone());
            async move {
                let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                current.fetch_sub(1, Ordering::SeqCst);
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/hooks"), most)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_concurrency_cap_holds_while_others_use_the_workers_slots() {
    let (capped_url, capped_most) = slow_receiver(Duration::from_millis(40)).await;
    let (free_url, free_most) = slow_receiver(Duration::from_millis(40)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let clock = Arc::new(FixedClock::new(contexts::now()));
    let (capped, free) = (route("capped", &capped_url), route("free", &free_url));
    stage(&path, &clock, &[&capped, &free], 12);
    let worker = Worker::builder(store.clone())
        .add_route(capped)
        .add_route(free)
        .flow("capped", FlowControl::new().with_concurrency(2))
        .in_flight(8)
        .clock(clock)
        .build()
        .unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!(stats.delivered, 24, "{stats:?}");
    assert!(
        capped_most.load(Ordering::SeqCst) <= 2,
        "the cap of 2 was passed"
    );
    assert!(
        free_most.load(Ordering::SeqCst) > 2,
        "the other route kept the worker's slots"
    );
}

#[test]
fn flow_control_for_an_unknown_route_or_out_of_range_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite::SqliteOutbox::open(dir.path().join("outbox.db")).unwrap();
    let build = |name: &str, control: FlowControl| {
        Worker::builder(store.clone())
            .add_route(route("partner", "http://127.0.0.1:9/hooks"))
            .flow(name, control)
            .build()
            .unwrap_err()
            .to_string()
    };
    assert!(build("elsewhere", FlowControl::new()).contains("elsewhere"));
    assert!(build("partner", FlowControl::new().with_rate(0.0)).contains("flow.rate"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_slower_than_the_lease_leaves_rows_unattempted_instead_of_expiring_them() {
    let healthy = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let clock = Arc::new(FixedClock::new(contexts::now()));
    let partner = route("partner", &healthy.url());
    stage(&path, &clock, &[&partner], 3);
    // One token an hour, a lease of two seconds: the first row goes; the others cannot
    // get a token within their lease, so they are given back, not left to expire.
    let worker = Worker::builder(store.clone())
        .add_route(partner)
        .flow("partner", FlowControl::new().with_rate(1.0 / 3600.0))
        .lease(Duration::from_secs(2))
        .in_flight(3)
        .clock(clock)
        .build()
        .unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!((stats.delivered, stats.lease_expired), (1, 0), "{stats:?}");
    assert_eq!(healthy.requests().len(), 1);
    let pending = store.list(Status::Pending, 10).await.unwrap();
    assert_eq!(pending.len(), 2);
    assert!(pending.iter().all(|row| row.attempts == 0), "{pending:?}");
}

/// With 8 deliveries in flight, the circuit opens once: the deliveries already under way
/// finish, the rows not yet begun wait unattempted, and one `circuit_opened` line is
/// journaled however many of the in-flight deliveries fail after it opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_circuit_opens_once_with_many_deliveries_in_flight() {
    let broken = Receiver::start().await;
    for _ in 0..32 {
        broken.answer(StatusCode::BAD_GATEWAY, None);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let clock = Arc::new(FixedClock::new(contexts::now()));
    let bad = route("broken", &broken.url());
    stage(&path, &clock, &[&bad], 24);
    let journal = Arc::new(MemoryJournal::new());
    let (failures, in_flight) = (3, 8);
    let worker = Worker::builder(store.clone())
        .add_route(bad)
        .flow(
            "broken",
            FlowControl::new().with_breaker(failures, Duration::from_secs(60)),
        )
        .in_flight(in_flight)
        .batch_size(24)
        .clock(clock.clone())
        .journal(journal.clone())
        .retry(replaysafe_outbox::default_retry().with_base_delay(Duration::from_secs(60)))
        .build()
        .unwrap();
    worker.drain().await.unwrap();
    let sent = broken.requests().len();
    assert!(
        (failures as usize..failures as usize + in_flight).contains(&sent),
        "{sent} requests: the opening failures and at most the deliveries under way"
    );
    assert_eq!(worker.circuits(), [("broken".to_owned(), Circuit::Open)]);
    let opened = journal
        .records()
        .into_iter()
        .filter(|r| r.decision == JournalDecision::Circuit)
        .count();
    assert_eq!(opened, 1);
    // Every row not sent waits with its attempts unspent.
    let rows = store.list(Status::Pending, 100).await.unwrap();
    assert_eq!(rows.len(), 24);
    assert_eq!(rows.iter().filter(|r| r.attempts == 0).count(), 24 - sent);
}

/// The fixture's time, moving on with the real one.
#[derive(Debug)]
struct Moving {
    start: chrono::DateTime<chrono::Utc>,
    since: std::time::Instant,
}

impl Clock for Moving {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.start + TimeDelta::from_std(self.since.elapsed()).unwrap()
    }
}

/// Two workers of one outbox under a rate of 20/s shared through the database send at
/// 20/s together, not 20/s each: 50 rows take at least (50 - 20) / 20 = 1.5 s after the
/// first second's burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_rate_holds_for_every_worker_of_the_outbox_together() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    sqlite::SqliteOutbox::open(&path).unwrap();
    let fixed = Arc::new(FixedClock::new(contexts::now()));
    let partner = route("partner", &receiver.url());
    stage(&path, &fixed, &[&partner], 50);
    let clock: Arc<dyn Clock> = Arc::new(Moving {
        start: contexts::now(),
        since: std::time::Instant::now(),
    });
    let worker = || {
        Worker::builder(sqlite::SqliteOutbox::open(&path).unwrap())
            .add_route(partner.clone())
            .flow("partner", FlowControl::new().with_shared_rate(20.0))
            .in_flight(4)
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let (first, second) = (worker(), worker());
    let started = clock.now();
    let (a, b) = tokio::join!(first.drain(), second.drain());
    let (a, b) = (a.unwrap(), b.unwrap());
    let took = (clock.now() - started).to_std().unwrap();
    assert_eq!(receiver.requests().len(), 50, "{a:?} {b:?}");
    assert!(a.delivered > 0 && b.delivered > 0, "{a:?} {b:?}");
    assert!(
        took >= Duration::from_millis(1450),
        "50 deliveries at 20/s after a burst of 20 took {took:?}"
    );
}

#[test]
fn an_outbox_rate_scope_needs_a_rate() {
    let flow: FlowControl =
        serde_json::from_str(r#"{"rate": "5/s", "rate_scope": "outbox"}"#).unwrap();
    assert_eq!(flow, FlowControl::new().with_shared_rate(5.0));
    assert!(serde_json::from_str::<FlowControl>(r#"{"rate_scope": "everyone"}"#).is_err());
    let store =
        sqlite::SqliteOutbox::open(tempfile::tempdir().unwrap().path().join("o.db")).unwrap();
    let error = Worker::builder(store)
        .add_route(route("partner", "http://127.0.0.1:9/hooks"))
        .flow(
            "partner",
            serde_json::from_str(r#"{"rate_scope": "outbox"}"#).unwrap(),
        )
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("flow.rate_scope"), "{error}");
}

/// A shared rate slower than the lease: the rows that get no token in time go back
/// unattempted and the worker leaves the route alone for a poll interval, rather than
/// claiming and giving them back in a loop (a drain then ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_rate_slower_than_the_lease_holds_the_route_instead_of_spinning() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let clock = Arc::new(FixedClock::new(contexts::now()));
    let partner = route("partner", &receiver.url());
    stage(&path, &clock, &[&partner], 3);
    let worker = Worker::builder(store.clone())
        .add_route(partner)
        .flow("partner", FlowControl::new().with_shared_rate(1.0 / 3600.0))
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    let stats = tokio::time::timeout(Duration::from_secs(20), worker.drain())
        .await
        .expect("the drain ends: the route is held, not claimed again at once")
        .unwrap();
    assert_eq!(receiver.requests().len(), 1, "one token an hour: {stats:?}");
    let pending = store.list(Status::Pending, 10).await.unwrap();
    assert_eq!(pending.len(), 2);
    assert!(pending.iter().all(|r| r.attempts == 0), "{pending:?}");
}
