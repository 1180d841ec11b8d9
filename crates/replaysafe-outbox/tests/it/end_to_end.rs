//! Through a real HTTP receiver: the webhook adapter as a route.

use std::sync::Arc;

use axum::http::StatusCode;
use chrono::{DurationRound, TimeDelta};
use replaysafe_core::{FixedClock, MemoryJournal, RunKind};
use replaysafe_outbox::rusqlite::Connection;
use replaysafe_outbox::{OutboxStore, Route, Status, Worker, sqlite};
use replaysafe_test::contexts;
use replaysafe_webhook::{IpNetwork, SsrfPolicy, Webhook, WebhookClient};

use crate::receiver::Receiver;

pub(crate) fn webhook_route(
    receiver: &Receiver,
    journal: Arc<MemoryJournal>,
) -> Route<WebhookClient> {
    let guard = WebhookClient::builder(receiver.url())
        .ssrf_policy(
            SsrfPolicy::default().allow_network("127.0.0.1/32".parse::<IpNetwork>().unwrap()),
        )
        .build(journal)
        .unwrap();
    Route::new("partner_webhook", guard).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
        let hook = Webhook::json(event, serde_json::json!({"window": "2026-08-05"}));
        keys.push(sqlite::stage(&tx, &live, &route, &hook).unwrap().key);
    }
    let suppressed = sqlite::stage(
        &tx,
        &backfill,
        &route,
        &Webhook::json("orders.total", serde_json::json!({})),
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
        &Webhook::json("orders.total", serde_json::json!({"n": 1})),
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

/// The Python block of `docs/reference/outbox.md`.
fn python_recipe() -> (String, String) {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/reference/outbox.md"
    ))
    .unwrap();
    let start = doc.find("```python\n").unwrap() + "```python\n".len();
    let end = start + doc[start..].find("```").unwrap();
    (doc.clone(), doc[start..end].to_owned())
}

#[test]
fn the_documented_upsert_is_the_one_the_crate_runs() {
    let (doc, python) = python_recipe();
    assert!(
        doc.contains(&format!("```sql\n{}\n```", sqlite::STAGE_SQL)),
        "docs/reference/outbox.md shows another statement"
    );
    assert!(python.contains(&format!(
        "STAGE_SQL = \"\"\"\n{}\n\"\"\"",
        sqlite::STAGE_SQL
    )));
}

#[tokio::test]
async fn a_row_staged_by_python_in_its_own_transaction_is_delivered_by_a_rust_worker() {
    let receiver = Receiver::start().await;
    let route = webhook_route(&receiver, Arc::new(MemoryJournal::new()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let end = chrono::Utc::now()
        .duration_trunc(TimeDelta::minutes(1))
        .unwrap();
    let (start, end) = (
        replaysafe_core::rfc3339(end - TimeDelta::hours(1)),
        replaysafe_core::rfc3339(end),
    );

    let (_, recipe) = python_recipe();
    let script = dir.path().join("stage.py");
    std::fs::write(
        &script,
        recipe
            + r#"

import sqlite3
import sys

conn = sqlite3.connect(sys.argv[1])
conn.execute("PRAGMA busy_timeout = 30000")
with conn:
    conn.execute("CREATE TABLE IF NOT EXISTS orders_daily (day TEXT, total INTEGER)")
    conn.execute("INSERT INTO orders_daily VALUES ('2026-08-05', 42)")
    print(stage_webhook(conn, route="partner_webhook", target=sys.argv[2], pipeline="daily_orders",
                        run_id="scheduled__python", window_start=sys.argv[3], window_end=sys.argv[4],
                        event_type="orders.total", data={"total": 42}))
"#,
    )
    .unwrap();
    let output = std::process::Command::new("python3")
        .arg(&script)
        .arg(&path)
        .args([receiver.url(), start, end])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let key = String::from_utf8(output.stdout).unwrap().trim().to_owned();

    let worker = Worker::builder(store.clone())
        .add_route(route)
        .build()
        .unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!(
        stats.delivered,
        1,
        "{stats:?} {:?}",
        store.list(Status::Dead, 1).await.unwrap()
    );
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(requests[0].body, r#"{"total":42}"#);
}

/// Messages in a Maildir's `new/` whose text contains `needle`.
fn mails_containing(maildir: &std::path::Path, needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(maildir.join("new")) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path()).ok())
        .filter(|text| text.contains(needle))
        .collect()
}

#[tokio::test]
async fn staged_emails_reach_aiosmtpd_once_per_recipient_with_the_rows_keys() {
    use replaysafe_email::{Email, EmailClient, TlsMode};
    use replaysafe_test::services::require;

    let port: u16 = require("REPLAYSAFE_TEST_SMTP_PORT").parse().unwrap();
    let maildir = std::path::PathBuf::from(require("REPLAYSAFE_TEST_SMTP_MAILDIR"));
    let domain = format!(
        "outbox-{}-{}.example",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    );
    let guard = EmailClient::smtp("127.0.0.1", port)
        .tls(TlsMode::Plaintext)
        .timeout(std::time::Duration::from_secs(10))
        .build(MemoryJournal::new())
        .unwrap();
    let route = Route::new("customer_email", guard).unwrap();
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
    let email = Email::builder("daily_summary")
        .from(format!("shop@{domain}").as_str())
        .to(format!("ana@{domain}").as_str())
        .to(format!("bo@{domain}").as_str())
        .subject(format!("Your orders ({domain})"))
        .text("3 orders")
        .build();

    let mut conn = Connection::open(&path).unwrap();
    let tx = conn.transaction().unwrap();
    let mut keys = Vec::new();
    for effect in email.copies().unwrap() {
        keys.push(sqlite::stage(&tx, &live, &route, &effect).unwrap().key);
        let replayed = sqlite::stage(&tx, &backfill, &route, &effect).unwrap();
        assert_eq!(replayed.status, Status::Suppressed);
    }
    tx.commit().unwrap();
    assert_eq!(keys.len(), 2);

    let worker = Worker::builder(store.clone())
        .add_route(route)
        .clock(clock.clone())
        .build()
        .unwrap();
    let stats = worker.drain().await.unwrap();
    assert_eq!((stats.claimed, stats.delivered), (2, 2), "{stats:?}");
    assert_eq!(worker.drain().await.unwrap().claimed, 0);

    let mails = mails_containing(&maildir, &domain);
    assert_eq!(mails.len(), 2, "one message per recipient, once");
    for key in &keys {
        let message_id = format!("<{key}@{domain}>");
        assert_eq!(
            mails
                .iter()
                .filter(|mail| mail.contains(&message_id))
                .count(),
            1,
            "{message_id}"
        );
    }
}
