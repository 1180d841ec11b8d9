//! Flow control through real receivers: a failing route's circuit opens and its rows wait
//! while the healthy route delivers; a probe closes it; a route's concurrency cap holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use replaysafe_core::{FixedClock, MemoryJournal, RunKind};
use replaysafe_outbox::rusqlite::Connection;
use replaysafe_outbox::{Circuit, FlowControl, OutboxStore, Route, Status, Worker, sqlite};
use replaysafe_test::contexts;
use replaysafe_webhook::{IpNetwork, SsrfPolicy, Webhook, WebhookClient};

use crate::receiver::Receiver;

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
    for _ in 0..3 {
        broken.answer(StatusCode::INTERNAL_SERVER_ERROR, None);
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
    let worker = Worker::builder(store.clone())
        .add_route(bad)
        .add_route(good)
        .flow("broken", FlowControl::new().with_breaker(3, probe_every))
        .clock(clock.clone())
        .build()
        .unwrap();

    // Three 500s open the circuit; the healthy route delivers all of its rows; the
    // broken route's other rows wait, their attempts unspent.
    let stats = worker.drain().await.unwrap();
    assert_eq!(broken.requests().len(), 3, "{stats:?}");
    assert_eq!(healthy.requests().len(), 10);
    assert_eq!(worker.circuits(), [("broken".to_owned(), Circuit::Open)]);
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
    worker.drain().await.unwrap();
    assert_eq!(worker.circuits(), [("broken".to_owned(), Circuit::Closed)]);
    assert_eq!(broken.requests().len(), 3 + 7);
    assert_eq!(store.list(Status::Pending, 100).await.unwrap().len(), 3);
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
