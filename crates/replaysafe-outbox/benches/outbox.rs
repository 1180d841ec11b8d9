//! Outbox benchmarks: staging inside the caller's transaction against a raw rusqlite
//! upsert of the same rows; one worker against a raw claim-and-complete SQL loop, both
//! with an in-process inert route; the worker's memory and speed at 10⁴ and 10⁶ rows; a
//! healthy route's throughput beside a route answering 500 (under a circuit breaker)
//! against its throughput alone, through loopback HTTP receivers.
//!
//! Run with `cargo xtask bench` (or `cargo bench -p replaysafe-outbox`); figures go to
//! `target/bench/outbox.json`.

use std::path::Path;
use std::time::{Duration, Instant};

use replaysafe_bench::{Report, interleaved_chunks, per_second};
use replaysafe_core::journal::NoopJournal;
use replaysafe_core::{EffectKind, Guard};
use replaysafe_outbox::rusqlite::{Connection, params};
use replaysafe_outbox::{Route, Worker, sqlite};
use replaysafe_test::contexts;

mod common;

use common::{Inert, Message, message};

fn database(path: &Path) -> Connection {
    let _ = std::fs::remove_file(path);
    let mut conn = Connection::open(path).unwrap();
    sqlite::configure(&conn).unwrap();
    sqlite::migrate(&mut conn).unwrap();
    conn
}

/// The hand-written upsert a raw outbox would run: the same columns, no rules.
const RAW_UPSERT: &str = "INSERT INTO replaysafe_outbox (idempotency_key, route, pipeline, effect_kind, \
    message_type, target, window_start, window_end, run_id, run_kind, mode, max_age_ms, clock_skew_ms, \
    effect, payload_sha256, payload_bytes, source_version, status, reasons, next_attempt_at_ms, \
    staged_at_ms, updated_at_ms) \
    VALUES (?1, 'bench', 'daily_orders', 'webhook', ?2, 'https://partner.example/hooks', ?3, ?4, \
    'scheduled__bench', 'scheduled', 'live', 21600000, 300000, ?5, ?6, ?7, 0, 'pending', \
    'current_window', ?8, ?8, ?8) \
    ON CONFLICT (idempotency_key) DO UPDATE SET effect = excluded.effect, \
    payload_sha256 = excluded.payload_sha256, payload_bytes = excluded.payload_bytes, \
    updated_at_ms = excluded.updated_at_ms";

fn main() {
    let mut report = Report::new("outbox");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch =
        std::env::temp_dir().join(format!("replaysafe-bench-outbox-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    // `REPLAYSAFE_BENCH_ONLY=flow` measures flow control alone.
    if std::env::var("REPLAYSAFE_BENCH_ONLY").is_ok_and(|only| only == "flow") {
        flow(&mut report, &runtime, &scratch);
        let _ = std::fs::remove_dir_all(&scratch);
        report.write().unwrap();
        return;
    }
    let route = Route::new("bench", Guard::new(Inert, NoopJournal)).unwrap();
    let live = contexts::live();
    let (window_start, window_end) = (
        replaysafe_core::rfc3339(live.window().start()),
        replaysafe_core::rfc3339(live.window().end()),
    );

    // 1. Staging, 500 rows a transaction, against the raw upsert of the same rows: new
    //    rows (a run staging its window), then the same rows again (a replay restaging).
    const CHUNKS: usize = 8;
    const PER_CHUNK: usize = 500;
    let now_ms = contexts::now().timestamp_millis();
    let mut staged_db = database(&scratch.join("staged.db"));
    let mut raw_db = database(&scratch.join("raw.db"));
    let stage_chunk = |conn: &mut Connection, messages: &[Message]| {
        let tx = conn.transaction().unwrap();
        for m in messages {
            sqlite::stage(&tx, &live, &route, m).unwrap();
        }
        tx.commit().unwrap();
    };
    let raw_chunk = |conn: &mut Connection, messages: &[Message]| {
        let tx = conn.transaction().unwrap();
        {
            let mut upsert = tx.prepare_cached(RAW_UPSERT).unwrap();
            for m in messages {
                // What any outbox computes to form the row: the key, the JSON, the digest.
                let key = replaysafe_core::IdempotencyKey::derive(
                    "daily_orders",
                    &EffectKind::Webhook,
                    &m.message_type,
                    "https://partner.example/hooks",
                    live.window(),
                );
                let json = serde_json::to_string(m).unwrap();
                let digest = replaysafe_core::PayloadDigest::of(m.body.as_bytes());
                upsert
                    .execute(params![
                        key.as_str(),
                        m.message_type,
                        window_start,
                        window_end,
                        json,
                        digest.sha256_hex(),
                        m.body.len() as i64,
                        now_ms
                    ])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    };
    // New rows: every call stages messages never staged before.
    let fresh = |call: &std::cell::Cell<usize>| {
        call.set(call.get() + 1);
        (0..PER_CHUNK)
            .map(|i| message(1000 + call.get(), i))
            .collect::<Vec<_>>()
    };
    let (subject_calls, baseline_calls) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    let (subject, baseline) = interleaved_chunks(
        CHUNKS,
        3,
        |_| stage_chunk(&mut staged_db, &fresh(&subject_calls)),
        |_| raw_chunk(&mut raw_db, &fresh(&baseline_calls)),
    );
    let rows = CHUNKS * PER_CHUNK;
    report.figure(
        "outbox.stage.rows_per_second",
        per_second(rows, subject),
        "rows/s",
    );
    report.figure(
        "outbox.stage.raw_upsert_rows_per_second",
        per_second(rows, baseline),
        "rows/s",
    );
    report.ratio(
        "outbox.stage.vs_raw_upsert",
        baseline.as_secs_f64() / subject.as_secs_f64(),
        "raw rusqlite upsert of the same new rows (key, JSON and digest computed per row), 500 a transaction",
    );
    // The same rows again, with changed data each time: a replay restaging its windows
    // after a correction. Then unchanged data, which writes nothing at all.
    let same: Vec<Vec<Message>> = (0..CHUNKS)
        .map(|chunk| (0..PER_CHUNK).map(|i| message(chunk, i)).collect())
        .collect();
    for chunk in &same {
        stage_chunk(&mut staged_db, chunk);
        raw_chunk(&mut raw_db, chunk);
    }
    let changed = |chunk: usize, call: &std::cell::Cell<usize>| {
        call.set(call.get() + 1);
        same[chunk]
            .iter()
            .map(|m| Message {
                message_type: m.message_type.clone(),
                body: format!("{}{}", m.body, call.get()),
            })
            .collect::<Vec<_>>()
    };
    let (subject_calls, baseline_calls) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    let (subject, baseline) = interleaved_chunks(
        CHUNKS,
        3,
        |chunk| stage_chunk(&mut staged_db, &changed(chunk, &subject_calls)),
        |chunk| raw_chunk(&mut raw_db, &changed(chunk, &baseline_calls)),
    );
    report.figure(
        "outbox.restage.rows_per_second",
        per_second(rows, subject),
        "rows/s",
    );
    report.ratio(
        "outbox.restage.vs_raw_upsert",
        baseline.as_secs_f64() / subject.as_secs_f64(),
        "raw rusqlite upsert of the same existing rows with changed data, 500 a transaction",
    );
    let (subject, baseline) = interleaved_chunks(
        CHUNKS,
        3,
        |chunk| stage_chunk(&mut staged_db, &same[chunk]),
        |chunk| raw_chunk(&mut raw_db, &same[chunk]),
    );
    report.figure(
        "outbox.restage_unchanged.rows_per_second",
        per_second(rows, subject),
        "rows/s",
    );
    report.ratio(
        "outbox.restage_unchanged.vs_raw_upsert",
        baseline.as_secs_f64() / subject.as_secs_f64(),
        "raw rusqlite upsert of the same existing rows, unchanged, 500 a transaction",
    );

    // 2. One worker against a raw claim-and-complete loop, both over 4000 rows.
    const DELIVER: usize = 4000;
    let work_path = scratch.join("work.db");
    let loop_path = scratch.join("loop.db");
    for path in [&work_path, &loop_path] {
        let mut conn = database(path);
        let tx = conn.transaction().unwrap();
        for i in 0..DELIVER {
            sqlite::stage(&tx, &live, &route, &message(99, i)).unwrap();
        }
        tx.commit().unwrap();
    }
    let reset = |conn: &Connection| {
        conn.execute_batch(
            "UPDATE replaysafe_outbox SET status = 'pending', attempts = 0, claim_token = NULL, lease_until_ms = NULL",
        )
        .unwrap();
    };
    let worker = Worker::builder(sqlite::SqliteOutbox::open(&work_path).unwrap())
        .add_route(route.clone())
        .clock(live.clock().clone())
        .build()
        .unwrap();
    let work_conn = Connection::open(&work_path).unwrap();
    let mut loop_conn = Connection::open(&loop_path).unwrap();
    sqlite::configure(&loop_conn).unwrap();
    let (mut worker_best, mut loop_best) = (Duration::MAX, Duration::MAX);
    for round in 0..5 {
        let mut run_worker = || {
            reset(&work_conn);
            let started = Instant::now();
            let stats = runtime.block_on(worker.drain()).unwrap();
            assert_eq!(stats.delivered as usize, DELIVER);
            worker_best = worker_best.min(started.elapsed());
        };
        if round % 2 == 0 {
            run_worker();
        }
        reset(&loop_conn);
        let started = Instant::now();
        assert_eq!(raw_claim_and_complete(&mut loop_conn, now_ms), DELIVER);
        loop_best = loop_best.min(started.elapsed());
        if round % 2 == 1 {
            run_worker();
        }
    }
    report.figure(
        "outbox.deliver.worker_effects_per_second",
        per_second(DELIVER, worker_best),
        "effects/s",
    );
    report.figure(
        "outbox.deliver.raw_loop_effects_per_second",
        per_second(DELIVER, loop_best),
        "effects/s",
    );
    report.ratio(
        "outbox.deliver.vs_raw_loop",
        loop_best.as_secs_f64() / worker_best.as_secs_f64(),
        "raw claim-and-complete SQL loop, same statements, batches of 32",
    );

    // 3. Memory and speed with the table at 10⁴ and 10⁶ rows (1000 of them due).
    for total in [10_000usize, 1_000_000] {
        let path = scratch.join(format!("table-{total}.db"));
        let mut conn = database(&path);
        let tx = conn.transaction().unwrap();
        for i in 0..1000 {
            sqlite::stage(&tx, &live, &route, &message(7, i)).unwrap();
        }
        {
            let mut insert = tx.prepare(RAW_UPSERT).unwrap();
            let body = serde_json::to_string(&message(0, 0)).unwrap();
            for i in 1000..total {
                insert
                    .execute(params![
                        format!("{i:064x}"),
                        format!("old.{i}"),
                        window_start,
                        window_end,
                        body,
                        "00",
                        body.len() as i64,
                        now_ms
                    ])
                    .unwrap();
            }
        }
        tx.execute(
            "UPDATE replaysafe_outbox SET status = 'delivered', delivered_at_ms = ?1 WHERE message_type LIKE 'old.%'",
            [now_ms],
        )
            .unwrap();
        tx.commit().unwrap();
        let worker = Worker::builder(sqlite::SqliteOutbox::open(&path).unwrap())
            .add_route(route.clone())
            .clock(live.clock().clone())
            .build()
            .unwrap();
        let before = resident_kib();
        let started = Instant::now();
        let stats = runtime.block_on(worker.drain()).unwrap();
        let took = started.elapsed();
        assert_eq!(stats.delivered, 1000);
        let label = if total == 10_000 { "1e4" } else { "1e6" };
        report.figure(
            format!("outbox.table_{label}.worker_effects_per_second"),
            per_second(1000, took),
            "effects/s",
        );
        report.figure(
            format!("outbox.table_{label}.worker_rss_growth"),
            (resident_kib().saturating_sub(before)) as f64,
            "KiB",
        );
        report.figure(
            format!("outbox.table_{label}.process_rss"),
            resident_kib() as f64,
            "KiB",
        );
    }

    flow(&mut report, &runtime, &scratch);

    let _ = std::fs::remove_dir_all(&scratch);
    report.write().unwrap();
}

/// A loopback receiver answering `status` to every POST at once.
fn answering(runtime: &tokio::runtime::Runtime, status: u16) -> String {
    runtime.block_on(async move {
        let status = axum::http::StatusCode::from_u16(status).unwrap();
        let app =
            axum::Router::new().route("/hooks", axum::routing::post(move || async move { status }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{address}/hooks")
    })
}

fn webhook_route(name: &str, url: &str) -> Route<replaysafe_webhook::WebhookClient> {
    use replaysafe_webhook::{IpNetwork, SsrfPolicy, WebhookClient};
    let guard = WebhookClient::builder(url)
        .ssrf_policy(
            SsrfPolicy::default().allow_network("127.0.0.1/32".parse::<IpNetwork>().unwrap()),
        )
        .build(NoopJournal)
        .unwrap();
    Route::new(name, guard).unwrap()
}

/// The healthy route's deliveries per second: `healthy` rows to a receiver answering 200,
/// with `failing` rows of another route to one answering 500 staged beside them, one
/// worker at 8 in flight, the failing route under a breaker (5 failures, probe every 10 s).
fn healthy_throughput(
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
    urls: (&str, &str),
    healthy: usize,
    failing: usize,
) -> f64 {
    use replaysafe_outbox::{FlowControl, OutboxStore, Status};
    let path = scratch.join(format!("flow-{failing}.db"));
    let mut conn = database(&path);
    let (good, bad) = (
        webhook_route("partner", urls.0),
        webhook_route("broken", urls.1),
    );
    let live = contexts::live();
    // Interleaved, so that the claims take both routes' rows from the first pass on.
    let tx = conn.transaction().unwrap();
    for n in 0..healthy.max(failing) {
        for (route, count) in [(&good, healthy), (&bad, failing)] {
            if n < count {
                let hook = replaysafe_webhook::Webhook::json(
                    format!("e.{n}"),
                    serde_json::json!({"n": n}),
                );
                sqlite::stage(&tx, &live, route, &hook).unwrap();
            }
        }
    }
    tx.commit().unwrap();
    drop(conn);
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    // The rows' contexts are on the fixture's fixed clock: the worker's too, or they
    // would be stale by now.
    let worker = Worker::builder(store.clone())
        .add_route(good)
        .add_route(bad)
        .flow(
            "broken",
            FlowControl::new().with_breaker(5, Duration::from_secs(10)),
        )
        .in_flight(8)
        .clock(std::sync::Arc::new(replaysafe_core::FixedClock::new(
            contexts::now(),
        )))
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        // Only the healthy route delivers (the other's attempts fail): the passes' own
        // counts say when it is done, without a query over the table timed with it.
        let mut delivered = 0;
        loop {
            let pass = worker.run_once().await.unwrap();
            delivered += pass.delivered;
            if delivered as usize >= healthy {
                break;
            }
            assert!(
                pass.claimed > 0,
                "nothing left to claim, but only {delivered} of {healthy} delivered"
            );
        }
    });
    let took = started.elapsed();
    let delivered = runtime
        .block_on(store.counts())
        .unwrap()
        .iter()
        .filter(|c| c.status == Status::Delivered && c.route == "partner")
        .map(|c| c.rows)
        .sum::<u64>();
    assert_eq!(
        delivered as usize, healthy,
        "the healthy route's rows, each once"
    );
    healthy as f64 / took.as_secs_f64()
}

fn flow(report: &mut Report, runtime: &tokio::runtime::Runtime, scratch: &Path) {
    let ok = answering(runtime, 200);
    let failing = answering(runtime, 500);
    // Long enough runs (2,000 deliveries, about a third of a second) and the best of 5,
    // interleaved: runs of 400 varied by a quarter from one to the next on this machine.
    const HEALTHY: usize = 2000;
    let (mut alone_best, mut beside_best) = (0.0_f64, 0.0_f64);
    for _ in 0..5 {
        alone_best = alone_best.max(healthy_throughput(
            runtime,
            scratch,
            (&ok, &failing),
            HEALTHY,
            0,
        ));
        beside_best = beside_best.max(healthy_throughput(
            runtime,
            scratch,
            (&ok, &failing),
            HEALTHY,
            HEALTHY,
        ));
    }
    report.figure(
        "outbox.flow.healthy_alone_per_second",
        alone_best,
        "deliveries/s",
    );
    report.figure(
        "outbox.flow.healthy_beside_failing_per_second",
        beside_best,
        "deliveries/s",
    );
    report.ratio(
        "outbox.flow.healthy_beside_failing_vs_alone",
        beside_best / alone_best,
        "the healthy route's throughput with a route answering 500 beside it (breaker: 5 failures) over its throughput alone, 8 in flight, loopback receivers, 2,000 deliveries a run, best of 5 interleaved; target >= 0.9",
    );
}

/// The raw baseline: claim 32 due rows in a short transaction, "deliver", complete each on its token.
fn raw_claim_and_complete(conn: &mut Connection, now_ms: i64) -> usize {
    let mut done = 0;
    loop {
        let token = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let tx = conn
            .transaction_with_behavior(replaysafe_outbox::rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        let rows: Vec<(String, String)> = {
            let mut claim = tx
                .prepare_cached(
                    "UPDATE replaysafe_outbox SET status = 'claimed', claim_token = ?1, lease_until_ms = ?2, \
                     attempts = attempts + 1, updated_at_ms = ?3 WHERE idempotency_key IN \
                     (SELECT idempotency_key FROM replaysafe_outbox WHERE status = 'pending' \
                     AND next_attempt_at_ms <= ?3 ORDER BY next_attempt_at_ms LIMIT 32) \
                     RETURNING idempotency_key, effect",
                )
                .unwrap();
            claim
                .query_map(params![token, now_ms + 60_000, now_ms], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        tx.commit().unwrap();
        if rows.is_empty() {
            return done;
        }
        for (key, effect) in rows {
            std::hint::black_box(effect);
            let mut complete = conn
                .prepare_cached(
                    "UPDATE replaysafe_outbox SET status = 'delivered', claim_token = NULL, lease_until_ms = NULL, \
                     delivered_at_ms = ?3, delivered_sha256 = payload_sha256, updated_at_ms = ?3 \
                     WHERE idempotency_key = ?1 AND claim_token = ?2 AND status = 'claimed'",
                )
                .unwrap();
            assert_eq!(complete.execute(params![key, token, now_ms]).unwrap(), 1);
            done += 1;
        }
    }
}

/// The process's resident set, from /proc (0 where there is none).
fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}
