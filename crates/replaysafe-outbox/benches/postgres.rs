//! PostgreSQL outbox benchmarks, against the server of `REPLAYSAFE_TEST_POSTGRES_URL`
//! (`cargo xtask bench` starts one), each part in a fresh database:
//!
//! 1. staging inside the caller's transaction against a raw `INSERT … ON CONFLICT` of
//!    the same rows (prepared once), 500 rows a transaction;
//! 2. wake-up latency: from the commit of a staging to the receiver's request, for an
//!    idle worker woken by `NOTIFY`, and for one that only polls (every 500 ms);
//! 3. one worker with 1, 8 and 32 deliveries in flight against a loopback receiver that
//!    answers after 5 ms;
//! 4. 1, 2, 4 and 8 worker processes (this binary, `worker` mode), one delivery in flight
//!    each, against the same receiver: how claims scale across processes;
//! 5. the claim query's plan at 10⁶ rows, and a worker's throughput (in-process inert
//!    route) at 10⁴ and 10⁶ rows;
//! 6. the ledger of a PostgreSQL journal (`PostgresJournal`): guarded sends of new keys
//!    with a client that delivers nowhere, against the same sends to a `MemoryJournal`.
//!
//! Figures go to `target/bench/outbox_postgres.json`.

use std::cell::Cell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use chrono::{TimeDelta, Utc};
use replaysafe_bench::{Report, interleaved_chunks, per_second};
use replaysafe_core::journal::NoopJournal;
use replaysafe_core::{EffectKind, Guard, MemoryJournal, ReplayContext, RunKind, Window};
use replaysafe_outbox::postgres::{self, PostgresJournal, PostgresOutbox};
use replaysafe_outbox::tokio_postgres::{self, NoTls};
use replaysafe_outbox::{Route, Worker};
use replaysafe_test::{InertClient, TestEffect, contexts};
use replaysafe_webhook::{SsrfPolicy, Webhook, WebhookClient};

mod common;

use common::{Inert, message};

/// A current scheduled run by the system clock.
fn live() -> ReplayContext {
    let now = Utc::now();
    ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id("scheduled__bench")
        .run_kind(RunKind::Scheduled)
        .window(Window::new(now - TimeDelta::hours(1), now).unwrap())
        .build()
        .unwrap()
}

async fn fresh_database(admin: &str) -> String {
    let (client, connection) = tokio_postgres::connect(admin, NoTls).await.unwrap();
    tokio::spawn(connection);
    let name = format!("bench_{:016x}", fastrand::u64(..));
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    format!("{}/{name}", admin.rsplit_once('/').unwrap().0)
}

async fn outbox(url: &str, pool: usize, listen: bool) -> PostgresOutbox {
    PostgresOutbox::builder(postgres::parse_url(url).unwrap())
        .pool_size(pool)
        .listen(listen)
        .connect()
        .await
        .unwrap()
}

async fn count(outbox: &PostgresOutbox, sql: &str) -> i64 {
    let conn = outbox.pool().get().await.unwrap();
    conn.query_one(sql, &[]).await.unwrap().get(0)
}

/// Arrivals at the receiver: when each idempotency key first came, and how many requests.
#[derive(Default)]
struct Arrivals {
    first: Mutex<HashMap<String, Instant>>,
    requests: std::sync::atomic::AtomicU64,
    delay: Duration,
}

async fn receive(State(arrivals): State<Arc<Arrivals>>, headers: HeaderMap) -> StatusCode {
    if !arrivals.delay.is_zero() {
        tokio::time::sleep(arrivals.delay).await;
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim_matches('"')
        .to_owned();
    arrivals
        .requests
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    arrivals
        .first
        .lock()
        .unwrap()
        .entry(key)
        .or_insert_with(Instant::now);
    StatusCode::OK
}

/// A loopback receiver answering after `delay`.
async fn receiver(delay: Duration) -> (SocketAddr, Arc<Arrivals>) {
    let arrivals = Arc::new(Arrivals {
        delay,
        ..Arrivals::default()
    });
    let app = axum::Router::new()
        .route("/hooks", axum::routing::post(receive))
        .with_state(arrivals.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, arrivals)
}

fn webhook_route(url: &str) -> Route<WebhookClient> {
    let guard = WebhookClient::builder(url)
        .ssrf_policy(SsrfPolicy::default().allow("127.0.0.1").unwrap())
        .build(NoopJournal)
        .unwrap();
    Route::new("partner_webhook", guard).unwrap()
}

/// Stages `rows` webhooks in one transaction; returns their keys and when the commit began.
async fn stage_webhooks(
    outbox: &PostgresOutbox,
    route: &Route<WebhookClient>,
    tag: &str,
    rows: usize,
) -> (Vec<String>, Instant) {
    let cx = live();
    let mut conn = outbox.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    let stager = postgres::Stager::prepare(&tx).await.unwrap();
    let mut keys = Vec::new();
    for i in 0..rows {
        let hook = Webhook::json(format!("{tag}.{i}"), serde_json::json!({"n": i}));
        keys.push(stager.stage(&tx, &cx, route, &hook).await.unwrap().key);
    }
    let committing = Instant::now();
    tx.commit().await.unwrap();
    (keys, committing)
}

/// The hand-written upsert a raw outbox would run: the same columns, no rules.
const RAW_UPSERT: &str = "INSERT INTO replaysafe_outbox (idempotency_key, route, pipeline, effect_kind, \
    message_type, target, window_start, window_end, run_id, run_kind, mode, max_age_ms, clock_skew_ms, \
    effect, payload_sha256, payload_bytes, source_version, status, reasons, next_attempt_at_ms, \
    staged_at_ms, updated_at_ms) \
    VALUES ($1, 'bench', 'daily_orders', 'webhook', $2, 'https://partner.example/hooks', $3, $4, \
    'scheduled__bench', 'scheduled', 'live', 21600000, 300000, $5, $6, $7, 0, 'pending', \
    'current_window', $8, $8, $8) \
    ON CONFLICT (idempotency_key) DO UPDATE SET effect = excluded.effect, \
    payload_sha256 = excluded.payload_sha256, payload_bytes = excluded.payload_bytes, \
    updated_at_ms = excluded.updated_at_ms";

fn staging(runtime: &tokio::runtime::Runtime, admin: &str, report: &mut Report) {
    const CHUNKS: usize = 8;
    const PER_CHUNK: usize = 500;
    let (staged_db, raw_db) = runtime.block_on(async {
        let staged = outbox(&fresh_database(admin).await, 1, false).await;
        let raw = outbox(&fresh_database(admin).await, 1, false).await;
        (staged, raw)
    });
    let route = Route::new("bench", Guard::new(Inert, NoopJournal)).unwrap();
    let cx = live();
    let (window_start, window_end) = (
        replaysafe_core::rfc3339(cx.window().start()),
        replaysafe_core::rfc3339(cx.window().end()),
    );
    let now_ms = Utc::now().timestamp_millis();
    let (subject_calls, baseline_calls) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    let fresh = |call: &std::cell::Cell<usize>| {
        call.set(call.get() + 1);
        (0..PER_CHUNK)
            .map(|i| message(1000 + call.get(), i))
            .collect::<Vec<_>>()
    };
    let (subject, baseline) = interleaved_chunks(
        CHUNKS,
        3,
        |_| {
            let messages = fresh(&subject_calls);
            runtime.block_on(async {
                let mut conn = staged_db.pool().get().await.unwrap();
                let tx = conn.transaction().await.unwrap();
                let stager = postgres::Stager::prepare(&tx).await.unwrap();
                for m in &messages {
                    stager.stage(&tx, &cx, &route, m).await.unwrap();
                }
                tx.commit().await.unwrap();
            });
        },
        |_| {
            let messages = fresh(&baseline_calls);
            runtime.block_on(async {
                let mut conn = raw_db.pool().get().await.unwrap();
                let tx = conn.transaction().await.unwrap();
                let upsert = tx.prepare(RAW_UPSERT).await.unwrap();
                for m in &messages {
                    // What any outbox computes to form the row: the key, the JSON, the digest.
                    let key = replaysafe_core::IdempotencyKey::derive(
                        "daily_orders",
                        &EffectKind::Webhook,
                        &m.message_type,
                        "https://partner.example/hooks",
                        cx.window(),
                    );
                    let json = serde_json::to_string(m).unwrap();
                    let digest = replaysafe_core::PayloadDigest::of(m.body.as_bytes());
                    tx.execute(
                        &upsert,
                        &[
                            &key.as_str(),
                            &m.message_type,
                            &window_start,
                            &window_end,
                            &json,
                            &digest.sha256_hex(),
                            &(m.body.len() as i64),
                            &now_ms,
                        ],
                    )
                    .await
                    .unwrap();
                }
                tx.commit().await.unwrap();
            });
        },
    );
    let rows = CHUNKS * PER_CHUNK;
    report.figure(
        "outbox.postgres.stage.rows_per_second",
        per_second(rows, subject),
        "rows/s",
    );
    report.figure(
        "outbox.postgres.stage.raw_upsert_rows_per_second",
        per_second(rows, baseline),
        "rows/s",
    );
    report.ratio(
        "outbox.postgres.stage.vs_raw_upsert",
        baseline.as_secs_f64() / subject.as_secs_f64(),
        "raw INSERT … ON CONFLICT of the same new rows, prepared once per transaction (key, JSON and digest computed per row), 500 a transaction",
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn wake_up(admin: &str, report: &mut Report) {
    let (address, arrivals) = receiver(Duration::ZERO).await;
    let url = format!("http://{address}/hooks");
    for (listen, poll, rounds, name) in [
        (true, Duration::from_secs(30), 20, "notify"),
        (false, Duration::from_millis(500), 10, "poll_500ms"),
    ] {
        let db = fresh_database(admin).await;
        let store = outbox(&db, 2, listen).await;
        let stager = outbox(&db, 1, false).await;
        let route = webhook_route(&url);
        let worker = Worker::builder(store)
            .add_route(route.clone())
            .poll_interval(poll)
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
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut latencies = Vec::new();
        for round in 0..rounds {
            // Idle first, at a random point of the poll cycle.
            tokio::time::sleep(Duration::from_millis(fastrand::u64(50..150))).await;
            let tag = format!("wake.{name}.{round}");
            let (keys, committed) = stage_webhooks(&stager, &route, &tag, 1).await;
            let arrived = loop {
                if let Some(at) = arrivals.first.lock().unwrap().get(&keys[0]).copied() {
                    break at;
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            };
            latencies.push(arrived.duration_since(committed).as_secs_f64() * 1000.0);
        }
        stop.send(()).unwrap();
        running.await.unwrap();
        let max = latencies.iter().copied().fold(0.0, f64::max);
        report.figure(
            format!("outbox.postgres.wake_up.{name}.median"),
            median(latencies),
            "ms",
        );
        report.figure(format!("outbox.postgres.wake_up.{name}.max"), max, "ms");
    }
}

async fn in_flight(admin: &str, report: &mut Report) {
    let (address, _arrivals) = receiver(Duration::from_millis(5)).await;
    let url = format!("http://{address}/hooks");
    let mut single = 0.0;
    for (deliveries, rows) in [(1usize, 400usize), (8, 2000), (32, 4000)] {
        let db = fresh_database(admin).await;
        let store = outbox(&db, deliveries + 1, false).await;
        let route = webhook_route(&url);
        stage_webhooks(&store, &route, &format!("flight.{deliveries}"), rows).await;
        let worker = Worker::builder(store.clone())
            .add_route(route)
            .in_flight(deliveries)
            .build()
            .unwrap();
        let started = Instant::now();
        let stats = worker.drain().await.unwrap();
        let took = started.elapsed();
        assert_eq!(stats.delivered as usize, rows);
        let rate = per_second(rows, took);
        if deliveries == 1 {
            single = rate;
        }
        report.figure(
            format!("outbox.postgres.worker.in_flight_{deliveries}.effects_per_second"),
            rate,
            "effects/s",
        );
        if deliveries > 1 {
            report.ratio(
                format!("outbox.postgres.worker.in_flight_{deliveries}.vs_1"),
                rate / single,
                "the same worker with 1 delivery in flight",
            );
        }
    }
}

/// A worker process: one delivery in flight, until SIGTERM.
fn worker_process(args: &[String]) {
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .unwrap()
            .clone()
    };
    let (db, url) = (flag("--db"), flag("--url"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = outbox(&db, 2, true).await;
        let worker = Worker::builder(store)
            .add_route(webhook_route(&url))
            .batch_size(1)
            .in_flight(1)
            .poll_interval(Duration::from_millis(200))
            .build()
            .unwrap();
        println!("ready");
        worker.run_until_signal().await.unwrap();
    });
}

async fn processes(admin: &str, report: &mut Report) {
    const ROWS: usize = 1500;
    let (address, arrivals) = receiver(Duration::from_millis(5)).await;
    let url = format!("http://{address}/hooks");
    let mut rates = HashMap::new();
    for workers in [1usize, 2, 4, 8] {
        let db = fresh_database(admin).await;
        let store = outbox(&db, 1, false).await;
        let route = webhook_route(&url);
        let mut children: Vec<Child> = (0..workers)
            .map(|_| {
                Command::new(std::env::current_exe().unwrap())
                    .args(["worker", "--db", &db, "--url", &url])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in &mut children {
            let mut line = String::new();
            let stdout = child.stdout.as_mut().unwrap();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
            assert_eq!(line.trim(), "ready");
        }
        let before = arrivals.requests.load(std::sync::atomic::Ordering::SeqCst);
        let (_, started) = stage_webhooks(&store, &route, &format!("procs.{workers}"), ROWS).await;
        while count(
            &store,
            "SELECT COUNT(*) FROM replaysafe_outbox WHERE status = 'delivered'",
        )
        .await
            < ROWS as i64
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let took = started.elapsed();
        let requests = arrivals.requests.load(std::sync::atomic::Ordering::SeqCst) - before;
        for child in &mut children {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for mut child in children {
            let _ = child.wait();
        }
        assert_eq!(requests as usize, ROWS, "one request per row");
        let rate = per_second(ROWS, took);
        rates.insert(workers, rate);
        report.figure(
            format!("outbox.postgres.processes_{workers}.effects_per_second"),
            rate,
            "effects/s",
        );
    }
    report.ratio(
        "outbox.postgres.processes_4.vs_1",
        rates[&4] / rates[&1],
        "1 worker process, one delivery in flight, receiver answering after 5 ms",
    );
    report.ratio(
        "outbox.postgres.processes_8.vs_4",
        rates[&8] / rates[&4],
        "4 worker processes",
    );
}

async fn table_size(admin: &str, report: &mut Report) {
    const PENDING: usize = 5000;
    let mut rates = HashMap::new();
    for total in [10_000usize, 1_000_000] {
        let db = fresh_database(admin).await;
        let store = outbox(&db, 2, false).await;
        // History: delivered rows (what a busy outbox holds until a purge).
        let conn = store.pool().get().await.unwrap();
        let history = (total - PENDING) as i64;
        let now_ms = Utc::now().timestamp_millis();
        conn.execute(
            "INSERT INTO replaysafe_outbox (idempotency_key, route, pipeline, effect_kind, message_type, \
             target, window_start, window_end, run_id, run_kind, max_age_ms, effect, payload_sha256, \
             payload_bytes, status, reasons, next_attempt_at_ms, staged_at_ms, updated_at_ms, \
             delivered_at_ms, delivered_sha256, attempts) \
             SELECT md5(i::text), 'bench', 'daily_orders', 'webhook', 'history', 'https://partner.example/hooks', \
             '2026-01-01T00:00:00Z', '2026-01-01T01:00:00Z', 'scheduled__history', 'scheduled', 21600000, \
             '{}', md5(i::text), 2, 'delivered', 'current_window', $1 - i, $1 - i, $1 - i, $1 - i, md5(i::text), 1 \
             FROM generate_series(1::bigint, $2::bigint) AS i",
            &[&now_ms, &history],
        )
        .await
        .unwrap();
        drop(conn);
        let route = Route::new("bench", Guard::new(Inert, NoopJournal)).unwrap();
        {
            let cx = live();
            let mut conn = store.pool().get().await.unwrap();
            let tx = conn.transaction().await.unwrap();
            let stager = postgres::Stager::prepare(&tx).await.unwrap();
            for i in 0..PENDING {
                stager
                    .stage(&tx, &cx, &route, &message(total, i))
                    .await
                    .unwrap();
            }
            tx.commit().await.unwrap();
            conn.batch_execute("ANALYZE replaysafe_outbox")
                .await
                .unwrap();
            let plan = store
                .explain_claim(&["bench".to_owned()], 32)
                .await
                .unwrap();
            println!("claim plan at {total} rows:\n  {}", plan.join("\n  "));
            // The due rows come through the route index, not a scan of the table.
            let through_index = plan
                .iter()
                .any(|line| line.contains("Index Scan using replaysafe_outbox_route_due"));
            report.figure(
                format!("outbox.postgres.claim_plan_index_scan_at_{total}"),
                if through_index { 1.0 } else { 0.0 },
                "1 = the claim reads due rows through the route index",
            );
        }
        let worker = Worker::builder(store.clone())
            .add_route(route)
            .build()
            .unwrap();
        let started = Instant::now();
        let stats = worker.drain().await.unwrap();
        let took = started.elapsed();
        assert_eq!(stats.delivered as usize, PENDING);
        let rate = per_second(PENDING, took);
        rates.insert(total, rate);
        report.figure(
            format!("outbox.postgres.worker.inert_at_{total}_rows.effects_per_second"),
            rate,
            "effects/s",
        );
    }
    report.ratio(
        "outbox.postgres.worker.inert_1e6_vs_1e4",
        rates[&1_000_000] / rates[&10_000],
        "the same worker draining 5000 due rows of a 10⁴-row table",
    );
}

/// The ledger of a PostgreSQL journal: µs per guarded send of a new key with a client
/// that delivers nowhere, ledger on (the claim, one statement, then the `delivered` line,
/// one more), against the same sends to a `MemoryJournal` (a fresh one every chunk: its
/// ledger scans its records), interleaved; then ledger on against the same PostgreSQL
/// journal with `Guard::with_ledger(false)` (two appends, one statement each), and a bare
/// round trip (a prepared `SELECT 1` on a connection of its own), to tell what the time is
/// made of.
fn ledger(runtime: &tokio::runtime::Runtime, admin: &str, report: &mut Report) {
    const CHUNKS: usize = 10;
    const PER_CHUNK: usize = 100;
    const REPEATS: usize = 3;
    let db = runtime.block_on(fresh_database(admin));
    let journal = Arc::new(
        PostgresJournal::connect(postgres::parse_url(&db).unwrap(), "postgres://bench").unwrap(),
    );
    let on = Guard::with_shared_journal(InertClient, journal.clone());
    let off = Guard::with_shared_journal(InertClient, journal.clone()).with_ledger(false);
    let cx = contexts::live();
    let sent = Cell::new(0usize);
    let send_chunk = |guard: &Guard<InertClient>| {
        runtime.block_on(async {
            for _ in 0..PER_CHUNK {
                sent.set(sent.get() + 1);
                let effect = TestEffect::email(format!("customer-{}@shop.example", sent.get()))
                    .with_payload(vec![b'x'; 512])
                    .with_summary("Your daily summary");
                let outcome = guard.send(&cx, &effect).await.unwrap();
                assert!(outcome.is_delivered(), "every key is new");
            }
        })
    };
    let memory_chunk = || send_chunk(&Guard::new(InertClient, MemoryJournal::new()));
    send_chunk(&on);
    memory_chunk();
    let (ledger_on, memory) =
        interleaved_chunks(CHUNKS, REPEATS, |_| send_chunk(&on), |_| memory_chunk());
    let (ledger_on_again, ledger_off) =
        interleaved_chunks(CHUNKS, REPEATS, |_| send_chunk(&on), |_| send_chunk(&off));
    let round_trip = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&db, NoTls).await.unwrap();
        tokio::spawn(connection);
        let select = client.prepare("SELECT 1").await.unwrap();
        // The fastest of as many chunks of 100 as each side had above.
        let mut best = Duration::MAX;
        for _ in 0..CHUNKS * REPEATS {
            let started = Instant::now();
            for _ in 0..PER_CHUNK {
                client.query_one(&select, &[]).await.unwrap();
            }
            best = best.min(started.elapsed());
        }
        best
    });
    let lines: i64 = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&db, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
            .query_one("SELECT COUNT(*) FROM replaysafe_journal", &[])
            .await
            .unwrap()
            .get(0)
    });
    drop((on, off, journal));
    // The warm-up chunk, then the interleaved chunks: on against memory, on against off.
    let journaled = PER_CHUNK * (1 + 3 * CHUNKS * REPEATS);
    assert_eq!(lines as usize, 2 * journaled, "two lines per delivery");
    let micros = |took: Duration| took.as_secs_f64() * 1e6 / (CHUNKS * PER_CHUNK) as f64;
    report.figure(
        "outbox.postgres.ledger.us_per_delivery",
        micros(ledger_on),
        "µs/delivery (PostgresJournal, ledger on, inert client)",
    );
    report.figure(
        "outbox.postgres.ledger.memory_journal_us_per_delivery",
        micros(memory),
        "µs/delivery (MemoryJournal, ledger on, inert client)",
    );
    report.figure(
        "outbox.postgres.ledger.added_us_per_delivery",
        micros(ledger_on) - micros(memory),
        "µs/delivery (PostgresJournal minus MemoryJournal)",
    );
    report.ratio(
        "outbox.postgres.ledger.vs_memory_journal",
        memory.as_secs_f64() / ledger_on.as_secs_f64(),
        "the same guarded sends of new keys to a MemoryJournal (ledger on, a fresh journal every 100 sends), inert client",
    );
    report.figure(
        "outbox.postgres.ledger.off_us_per_delivery",
        micros(ledger_off),
        "µs/delivery (PostgresJournal, Guard::with_ledger(false): two appends)",
    );
    report.figure(
        "outbox.postgres.ledger.claim_over_append_us",
        micros(ledger_on_again) - micros(ledger_off),
        "µs/delivery (ledger on minus ledger off, interleaved: the claim against a plain append)",
    );
    report.figure(
        "outbox.postgres.round_trip_us",
        round_trip.as_secs_f64() * 1e6 / PER_CHUNK as f64,
        "µs/statement (prepared SELECT 1, one connection, no journal)",
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "worker") {
        worker_process(&args[at + 1..]);
        return;
    }
    let admin = replaysafe_test::services::require("REPLAYSAFE_TEST_POSTGRES_URL");
    let only = std::env::var("REPLAYSAFE_BENCH_ONLY").unwrap_or_default();
    let wanted = |part: &str| only.is_empty() || only.split(',').any(|p| p == part);
    let mut report = Report::new("outbox_postgres");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if wanted("staging") {
        staging(&runtime, &admin, &mut report);
    }
    if wanted("ledger") {
        ledger(&runtime, &admin, &mut report);
    }
    runtime.block_on(async {
        if wanted("wake_up") {
            wake_up(&admin, &mut report).await;
        }
        if wanted("in_flight") {
            in_flight(&admin, &mut report).await;
        }
        if wanted("processes") {
            processes(&admin, &mut report).await;
        }
        if wanted("table_size") {
            table_size(&admin, &mut report).await;
        }
    });
    let path = report.write().unwrap();
    println!("figures written to {}", path.display());
}
