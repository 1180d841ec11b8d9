//! Through a real HTTP receiver: the webhook adapter as a route.

use std::sync::Arc;

use axum::http::StatusCode;
use chrono::TimeDelta;
use replaysafe_core::{FixedClock, MemoryJournal, RunKind};
use replaysafe_outbox::rusqlite::Connection;
use replaysafe_outbox::{OutboxStore, Route, Status, Worker, sqlite};
use replaysafe_test::contexts;
use replaysafe_webhook::{IpNetwork, SsrfPolicy, Webhook, WebhookClient};

use crate::receiver::Receiver;

fn webhook_route(receiver: &Receiver, journal: Arc<MemoryJournal>) -> Route<WebhookClient> {
    let guard = WebhookClient::builder(receiver.url())
        .ssrf_policy(
            SsrfPolicy::default().allow_network("127.0.0.1/32".parse::<IpNetwork>().unwrap()),
        )
        .build_guarded(journal)
        .unwrap();
    Route::new("partner_webhook", guard).unwrap()
}

#[tokio::test]
async fn staged_webhooks_reach_a_real_receiver_once_each_with_the_rows_keys() {
    let receiver = Receiver::start().await;
    let journal = Arc::new(MemoryJournal::new());
    let route = webhook_route(&receiver, journal.clone());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let clock = Arc::new(FixedClock::new(contexts::now()));

    let live = contexts::builder(RunKind::Scheduled, contexts::current_window())
        .clock(clock.clone())
        .build()
        .unwrap();
    let backfill = contexts::builder(RunKind::Backfill, contexts::last_month_window())
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut conn = Connection::open(&path).unwrap();
    sqlite::configure(&conn).unwrap();
    let tx = conn.transaction().unwrap();
    let mut keys = Vec::new();
    for event in ["orders.total", "orders.count", "orders.refunds"] {
        let hook = Webhook::json(event, &serde_json::json!({"window": "2026-08-05"}));
        keys.push(sqlite::stage(&tx, &live, &route, &hook).unwrap().key);
    }
    let suppressed = sqlite::stage(
        &tx,
        &backfill,
        &route,
        &Webhook::json("orders.total", &serde_json::json!({})),
    )
    .unwrap();
    tx.commit().unwrap();
    assert_eq!(suppressed.status, Status::Suppressed);

    let worker = Worker::builder(store.clone())
        .add_route(route)
        .clock(clock.clone())
        .build()
        .unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!((stats.delivered, stats.claimed), (3, 3));

    let requests = receiver.requests();
    let mut received: Vec<String> = requests
        .iter()
        .map(|r| r.idempotency_key.clone().unwrap())
        .collect();
    received.sort();
    keys.sort();
    assert_eq!(received, keys, "each row once, with its own key");
    assert!(
        requests
            .iter()
            .all(|r| r.body == r#"{"window":"2026-08-05"}"#)
    );
    let delivered = store.list(Status::Delivered, 10).await.unwrap();
    assert_eq!(delivered.len(), 3);
    assert!(
        delivered
            .iter()
            .all(|row| row.target.starts_with("http://127.0.0.1:")),
        "{delivered:?}"
    );
}

#[tokio::test]
async fn a_receivers_retry_after_sets_the_next_attempt_and_a_4xx_dead_letters() {
    let receiver = Receiver::start().await;
    receiver.answer(StatusCode::SERVICE_UNAVAILABLE, Some("120"));
    let route = webhook_route(&receiver, Arc::new(MemoryJournal::new()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let clock = Arc::new(FixedClock::new(contexts::now()));
    let live = contexts::builder(RunKind::Scheduled, contexts::current_window())
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut conn = Connection::open(&path).unwrap();
    let tx = conn.transaction().unwrap();
    let key = sqlite::stage(
        &tx,
        &live,
        &route,
        &Webhook::json("orders.total", &serde_json::json!({"n": 1})),
    )
    .unwrap()
    .key;
    tx.commit().unwrap();

    let worker = Worker::builder(store.clone())
        .add_route(route)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(worker.drain().await.unwrap().retried, 1);
    let due: i64 = conn
        .query_row(
            "SELECT next_attempt_at_ms FROM replaysafe_outbox WHERE idempotency_key = ?1",
            [&key],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        due,
        (contexts::now() + TimeDelta::seconds(120)).timestamp_millis()
    );
    let error: String = conn
        .query_row(
            "SELECT last_error FROM replaysafe_outbox WHERE idempotency_key = ?1",
            [&key],
            |r| r.get(0),
        )
        .unwrap();
    assert!(error.contains("503"), "{error}");

    clock.advance(TimeDelta::seconds(120));
    receiver.answer(StatusCode::UNPROCESSABLE_ENTITY, None);
    assert_eq!(worker.drain().await.unwrap().dead, 1);
    let dead = store.list(Status::Dead, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].last_error.as_deref().unwrap().contains("422"),
        "{:?}",
        dead[0].last_error
    );
    assert_eq!(receiver.requests().len(), 2);
}
