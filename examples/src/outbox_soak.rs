//! `cargo xtask soak outbox`: the outbox's crash test, with real processes.
//!
//! The controller stages webhooks into a SQLite outbox (or, with `--backend postgres`, a
//! fresh database on the PostgreSQL server at `--postgres-url` or
//! `REPLAYSAFE_TEST_POSTGRES_URL`) while `--workers` worker
//! processes (this program, `worker` mode) deliver them to a loopback receiver that
//! records every request and de-duplicates by `Idempotency-Key`. The controller kills
//! random workers with SIGKILL at random moments, some of them right around the
//! receiver's answer (before or after it reaches the worker, so between the answer and
//! the completing update), and restarts them. It also freezes a few workers (SIGSTOP)
//! in the middle of a delivery for longer than their lease, so that another worker takes
//! the row over; when the frozen one resumes (SIGCONT), its completion is stale.
//!
//! Two rows in three carry one of [`ORDERING_KEYS`] ordering keys, the third none.
//!
//! Afterwards it checks: every staged key delivered (0 lost), 0 duplicates after the
//! receiver's de-duplication, raw re-deliveries at most kills plus freezes, every stale
//! completion rejected (the row keeps the newer claimant's outcome), every ordering key's
//! requests arriving in staging order (a repeat of a row after a kill may follow it, no
//! earlier row may come after a later one), and every worker stopping cleanly on SIGTERM.
//! It writes its figures as JSON to `--out`.
//!
//! ```text
//! outbox_soak [--kills N] [--workers W] [--backend sqlite|postgres] [--postgres-url URL] [--out FILE]
//! outbox_soak worker --db sqlite:PATH|postgres://… --url URL --slot K --lease-ms L
//! ```

#[path = "soak_common.rs"]
mod soak_common;

use soak_common::{flag, fresh_postgres, lock};

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use chrono::{DurationRound, TimeDelta, Utc};
use replaysafe::journal::NoopJournal;
use replaysafe::outbox::postgres::{self, PostgresOutbox};
use replaysafe::outbox::rusqlite::Connection;
use replaysafe::outbox::{
    OutboxStore, Route, StageOptions, StoreCounters, Worker, WorkerBuilder, sqlite,
};
use replaysafe::webhook::{IpNetwork, SsrfPolicy, Webhook, WebhookClient};
use replaysafe::{ReplayContext, RunKind, Window};

const LEASE: Duration = Duration::from_millis(1000);
/// Longer than the lease by enough for a restarted worker to connect and take the row over.
const FREEZE: Duration = Duration::from_millis(2500);
const ROUTE: &str = "partner_webhook";
/// How many ordering keys the keyed rows spread over.
const ORDERING_KEYS: u64 = 8;

fn main() -> anyhow::Result<()> {
    soak_common::main_of(
        |args| async move { worker(&args).await },
        |args| async move { controller(&args).await },
    )
}

fn route(url: &str, slot: &str) -> anyhow::Result<Route<WebhookClient>> {
    let guard = WebhookClient::builder(url)
        .header("x-soak-worker", slot)
        .ssrf_policy(SsrfPolicy::default().allow_network("127.0.0.1/32".parse::<IpNetwork>()?))
        .build(NoopJournal)?;
    Ok(Route::new(ROUTE, guard)?)
}

/// A worker process: delivers until SIGTERM, then exits 0.
async fn worker(args: &[String]) -> anyhow::Result<()> {
    let db = flag(args, "--db").context("--db")?;
    let url = flag(args, "--url").context("--url")?;
    let slot = flag(args, "--slot").context("--slot")?;
    let lease_ms: u64 = flag(args, "--lease-ms").context("--lease-ms")?.parse()?;
    let builder: WorkerBuilder = match db.strip_prefix("sqlite:") {
        Some(path) => Worker::builder(sqlite::SqliteOutbox::open(path)?),
        None => Worker::builder(
            PostgresOutbox::builder(postgres::parse_url(db)?)
                .pool_size(2)
                .connect()
                .await?,
        ),
    };
    let worker = builder
        .add_route(route(url, slot)?)
        .lease(Duration::from_millis(lease_ms))
        .batch_size(4)
        .poll_interval(Duration::from_millis(20))
        .build()?;
    let stats = worker.run_until_signal().await?;
    eprintln!("worker {slot}: stopped cleanly: {stats:?}");
    Ok(())
}

/// What the receiver and the controller share.
#[derive(Default)]
struct Shared {
    /// Requests per key, raw.
    requests: Mutex<HashMap<String, u64>>,
    /// The row numbers of each ordering key's requests, in the order they arrived.
    arrivals: Mutex<HashMap<String, Vec<u64>>>,
    /// The worker processes, by slot.
    workers: Mutex<Vec<Option<Child>>>,
    kills: AtomicU64,
    freezes: AtomicU64,
    max_kills: u64,
    max_freezes: u64,
    frozen: AtomicBool,
    /// The slot of the frozen worker: no kill touches it, so its stale completion happens.
    frozen_slot: Mutex<Option<usize>>,
}

impl Shared {
    /// SIGKILLs the worker in `slot`, counting it, while kills remain.
    fn kill(&self, slot: usize) -> bool {
        let frozen = lock(&self.frozen_slot);
        if *frozen == Some(slot) {
            return false;
        }
        let mut workers = lock(&self.workers);
        let Some(Some(child)) = workers.get_mut(slot) else {
            return false;
        };
        if self.kills.fetch_add(1, Ordering::SeqCst) >= self.max_kills {
            self.kills.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let _ = child.kill();
        let _ = child.wait();
        workers[slot] = None;
        true
    }

    fn pid(&self, slot: usize) -> Option<u32> {
        lock(&self.workers).get(slot)?.as_ref().map(Child::id)
    }
}

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill").args([name, &pid.to_string()]).status();
}

async fn receive(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_matches('"').to_owned());
    let slot: Option<usize> = headers
        .get("x-soak-worker")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let Some(key) = key else {
        return StatusCode::BAD_REQUEST;
    };
    *lock(&shared.requests).entry(key).or_default() += 1;
    let row: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if let (Some(ordering), Some(n)) = (row["key"].as_str(), row["n"].as_u64()) {
        lock(&shared.arrivals)
            .entry(ordering.to_owned())
            .or_default()
            .push(n);
    }
    let Some(slot) = slot else {
        return StatusCode::OK;
    };
    let roll = fastrand::u32(0..100);
    if roll < 4 {
        // Kill the sender around its answer: before or just after it arrives, so between
        // the receiver's answer and the completing update.
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros(fastrand::u64(0..3000))).await;
            tokio::task::spawn_blocking(move || shared.kill(slot));
        });
    } else if roll < 6
        && shared.freezes.load(Ordering::SeqCst) < shared.max_freezes
        && !shared.frozen.swap(true, Ordering::SeqCst)
    {
        // Freeze the sender mid-delivery, longer than its lease: another worker takes the
        // row over, and the frozen one's completion, when it resumes, is stale.
        let mut frozen = lock(&shared.frozen_slot);
        if let Some(pid) = shared.pid(slot) {
            *frozen = Some(slot);
            drop(frozen);
            shared.freezes.fetch_add(1, Ordering::SeqCst);
            signal(pid, "-STOP");
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                tokio::time::sleep(FREEZE).await;
                signal(pid, "-CONT");
                // Give it time to complete before it may be killed again.
                tokio::time::sleep(Duration::from_millis(200)).await;
                *lock(&shared.frozen_slot) = None;
                shared.frozen.store(false, Ordering::SeqCst);
            });
        } else {
            shared.frozen.store(false, Ordering::SeqCst);
        }
    }
    StatusCode::OK
}

fn spawn_worker(db: &Database, url: &str, slot: usize) -> anyhow::Result<Child> {
    Command::new(std::env::current_exe()?)
        .args(["worker", "--db", &db.arg()])
        .args(["--url", url, "--slot", &slot.to_string()])
        .args(["--lease-ms", &LEASE.as_millis().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting a worker")
}

/// The context the stager stages under: a current scheduled run.
fn soak_context() -> anyhow::Result<ReplayContext> {
    let end = Utc::now().duration_trunc(TimeDelta::minutes(1))?;
    Ok(ReplayContext::builder()
        .pipeline("soak")
        .run_id("scheduled__soak")
        .run_kind(RunKind::Scheduled)
        .window(Window::new(end - TimeDelta::hours(1), end)?)
        .build()?)
}

/// Row `n`'s webhook and how it is staged: two in three with an ordering key.
fn soak_row(n: u64) -> (Webhook, StageOptions) {
    let key = (n % 3 != 2).then(|| format!("account-{}", n % ORDERING_KEYS));
    let hook = Webhook::json(format!("soak.{n}"), serde_json::json!({"n": n, "key": key}));
    let options = match key {
        Some(key) => StageOptions::new().ordering_key(key),
        None => StageOptions::new(),
    };
    (hook, options)
}

/// Rows whose ordering key saw an earlier row arrive after a later one.
fn order_violations(arrivals: &HashMap<String, Vec<u64>>) -> u64 {
    arrivals
        .values()
        .map(|ns| {
            let mut latest = 0;
            ns.iter()
                .filter(|&&n| {
                    let late = n < latest;
                    latest = latest.max(n);
                    late
                })
                .count() as u64
        })
        .sum()
}

/// Stages webhooks into SQLite, 20 a transaction, until `stop`; returns how many.
fn stage_until(db: &Path, url: &str, stop: &AtomicBool) -> anyhow::Result<u64> {
    let route = route(url, "stager")?;
    let mut conn = Connection::open(db)?;
    sqlite::configure(&conn)?;
    let cx = soak_context()?;
    let mut staged = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let tx = conn.transaction()?;
        for _ in 0..20 {
            let (hook, options) = soak_row(staged);
            sqlite::stage_with(&tx, &cx, &route, &hook, &options)?;
            staged += 1;
        }
        tx.commit()?;
        std::thread::sleep(Duration::from_millis(8));
    }
    Ok(staged)
}

/// Stages webhooks into PostgreSQL, 20 a transaction, until `stop`; returns how many.
async fn stage_until_postgres(
    outbox: PostgresOutbox,
    url: String,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<u64> {
    let route = route(&url, "stager")?;
    let cx = soak_context()?;
    let mut staged = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let mut conn = outbox.pool().get().await?;
        let tx = conn.transaction().await?;
        for _ in 0..20 {
            let (hook, options) = soak_row(staged);
            postgres::stage_with(&tx, &cx, &route, &hook, &options).await?;
            staged += 1;
        }
        tx.commit().await?;
        tokio::time::sleep(Duration::from_millis(8)).await;
    }
    Ok(staged)
}

/// The outbox under test.
#[derive(Clone, Debug)]
enum Database {
    Sqlite(PathBuf, sqlite::SqliteOutbox),
    Postgres(String, PostgresOutbox),
}

impl Database {
    /// How a worker is told where it is.
    fn arg(&self) -> String {
        match self {
            Database::Sqlite(path, _) => format!("sqlite:{}", path.display()),
            Database::Postgres(url, _) => url.clone(),
        }
    }

    async fn count(&self, sql: &str) -> anyhow::Result<u64> {
        match self {
            Database::Sqlite(path, _) => {
                let conn = Connection::open(path)?;
                conn.busy_timeout(Duration::from_secs(30))?;
                let n: i64 = conn.query_row(sql, [], |r| r.get(0))?;
                Ok(u64::try_from(n)?)
            }
            Database::Postgres(_, outbox) => {
                let conn = outbox.pool().get().await?;
                let n: i64 = conn.query_one(sql, &[]).await?.get(0);
                Ok(u64::try_from(n)?)
            }
        }
    }

    async fn keys(&self) -> anyhow::Result<Vec<String>> {
        let sql = "SELECT idempotency_key FROM replaysafe_outbox";
        match self {
            Database::Sqlite(path, _) => {
                let conn = Connection::open(path)?;
                let mut statement = conn.prepare(sql)?;
                Ok(statement
                    .query_map([], |r| r.get(0))?
                    .collect::<Result<_, _>>()?)
            }
            Database::Postgres(_, outbox) => {
                let conn = outbox.pool().get().await?;
                Ok(conn
                    .query(sql, &[])
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect())
            }
        }
    }

    async fn counters(&self) -> anyhow::Result<StoreCounters> {
        Ok(match self {
            Database::Sqlite(_, store) => store.counters().await?,
            Database::Postgres(_, store) => store.counters().await?,
        })
    }
}

async fn controller(args: &[String]) -> anyhow::Result<()> {
    let kills: u64 = flag(args, "--kills").unwrap_or("30").parse()?;
    let workers: usize = flag(args, "--workers").unwrap_or("3").parse()?;
    let out = flag(args, "--out").map(PathBuf::from);
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("replaysafe-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let backend = flag(args, "--backend").unwrap_or("sqlite");
    let db = match backend {
        "sqlite" => {
            let path = dir.join("outbox.db");
            let store = sqlite::SqliteOutbox::open(&path)?;
            Database::Sqlite(path, store)
        }
        "postgres" => {
            let admin = match flag(args, "--postgres-url") {
                Some(url) => url.to_owned(),
                None => std::env::var("REPLAYSAFE_TEST_POSTGRES_URL").context(
                    "--backend postgres needs --postgres-url or REPLAYSAFE_TEST_POSTGRES_URL",
                )?,
            };
            let url = fresh_postgres(&admin, "soak").await?;
            let store = PostgresOutbox::builder(postgres::parse_url(&url)?)
                .pool_size(2)
                .listen(false)
                .connect()
                .await?;
            Database::Postgres(url, store)
        }
        other => bail!("--backend: expected sqlite or postgres, not {other:?}"),
    };
    println!("outbox soak on {backend}");

    let shared = Arc::new(Shared {
        max_kills: kills,
        max_freezes: (kills / 20).max(1),
        ..Shared::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address: SocketAddr = listener.local_addr()?;
    let app = Router::new()
        .route("/hooks", post(receive))
        .with_state(Arc::clone(&shared));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://{address}/hooks");

    *lock(&shared.workers) = (0..workers).map(|_| None).collect();
    let stop_staging = Arc::new(AtomicBool::new(false));
    let stager = match &db {
        Database::Sqlite(path, _) => {
            let (path, url, stop) = (path.clone(), url.clone(), Arc::clone(&stop_staging));
            tokio::task::spawn_blocking(move || stage_until(&path, &url, &stop))
        }
        Database::Postgres(_, outbox) => tokio::spawn(stage_until_postgres(
            outbox.clone(),
            url.clone(),
            Arc::clone(&stop_staging),
        )),
    };

    // Kill at random moments and restart, until the kills are spent.
    let mut restarts = 0u64;
    let mut next_kill = Instant::now() + Duration::from_millis(fastrand::u64(10..60));
    while shared.kills.load(Ordering::SeqCst) < kills {
        let slots = lock(&shared.workers).len();
        for slot in 0..slots {
            let vacant = {
                let mut workers = lock(&shared.workers);
                match &mut workers[slot] {
                    None => true,
                    Some(child) => match child.try_wait()? {
                        Some(status) => bail!("worker {slot} exited by itself: {status}"),
                        None => false,
                    },
                }
            };
            if vacant {
                let child = spawn_worker(&db, &url, slot)?;
                lock(&shared.workers)[slot] = Some(child);
                restarts += 1;
            }
        }
        if Instant::now() >= next_kill {
            let victim = fastrand::usize(0..slots);
            let shared = Arc::clone(&shared);
            tokio::task::spawn_blocking(move || shared.kill(victim)).await?;
            next_kill = Instant::now() + Duration::from_millis(fastrand::u64(10..60));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    stop_staging.store(true, Ordering::SeqCst);
    let staged = stager.await??;

    // Let the survivors (restarted as needed) finish every row.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        for slot in 0..workers {
            let vacant = lock(&shared.workers)[slot].is_none();
            if vacant {
                lock(&shared.workers)[slot] = Some(spawn_worker(&db, &url, slot)?);
                restarts += 1;
            }
        }
        let open = db
            .count("SELECT COUNT(*) FROM replaysafe_outbox WHERE status IN ('pending', 'claimed')")
            .await?;
        if open == 0 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{open} rows still open after 180 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let a frozen worker resume and complete (stale), then stop everyone with SIGTERM.
    tokio::time::sleep(FREEZE + Duration::from_millis(200)).await;
    let mut clean_stops = 0u64;
    let children: Vec<Child> = lock(&shared.workers)
        .iter_mut()
        .filter_map(Option::take)
        .collect();
    for mut child in children {
        signal(child.id(), "-TERM");
        let output = tokio::task::spawn_blocking(move || {
            let status = child.wait();
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read as _;
                let _ = pipe.read_to_string(&mut stderr);
            }
            (status, stderr)
        })
        .await?;
        let (status, stderr) = output;
        ensure!(
            status?.success(),
            "a worker did not stop cleanly on SIGTERM: {stderr}"
        );
        ensure!(
            stderr.contains("stopped cleanly"),
            "a worker's stop: {stderr}"
        );
        clean_stops += 1;
    }
    server.abort();

    let counters = db.counters().await?;
    let requests = lock(&shared.requests).clone();
    let arrivals = lock(&shared.arrivals).clone();
    let out_of_order = order_violations(&arrivals);
    let keyed_requests: u64 = arrivals.values().map(|ns| ns.len() as u64).sum();
    let delivered = db
        .count("SELECT COUNT(*) FROM replaysafe_outbox WHERE status = 'delivered'")
        .await?;
    let other = db
        .count("SELECT COUNT(*) FROM replaysafe_outbox WHERE status <> 'delivered'")
        .await?;
    let keys: Vec<String> = db.keys().await?;
    let lost = keys.iter().filter(|k| !requests.contains_key(*k)).count() as u64;
    let unknown = requests.keys().filter(|k| !keys.contains(k)).count() as u64;
    let raw: u64 = requests.values().sum();
    let unique = requests.len() as u64;
    let redeliveries = raw - unique;
    let kills_done = shared.kills.load(Ordering::SeqCst);
    let freezes = shared.freezes.load(Ordering::SeqCst);
    let seconds = started.elapsed().as_secs_f64();

    let mut figures = BTreeMap::new();
    // SQLite's figures keep their names; PostgreSQL's are `outbox.soak.postgres.*`.
    let prefix = if backend == "sqlite" { "" } else { "postgres." };
    let mut figure = |name: &str, value: f64, unit: &str| {
        println!("{name:<44} {value:>12.1} {unit}");
        figures.insert(
            format!("outbox.soak.{prefix}{name}"),
            serde_json::json!({"value": value, "unit": unit}),
        );
    };
    figure("kills", kills_done as f64, "SIGKILLs");
    figure("freezes", freezes as f64, "SIGSTOPs past the lease");
    figure("restarts", restarts as f64, "processes");
    figure("clean_stops", clean_stops as f64, "SIGTERMs");
    figure("staged", staged as f64, "rows");
    figure("delivered", delivered as f64, "rows");
    figure("lost", lost as f64, "rows");
    // The receiver processes a key the first time it sees it and drops the repeats; a
    // duplicate after that would be a key processed for a row that was never staged.
    figure("duplicates_after_dedup", unknown as f64, "rows");
    figure("raw_requests", raw as f64, "requests");
    figure("raw_redeliveries", redeliveries as f64, "requests");
    figure(
        "stale_completions_rejected",
        counters.stale_completions as f64,
        "completions",
    );
    figure("reclaimed", counters.reclaimed as f64, "rows");
    figure("ordered_requests", keyed_requests as f64, "requests");
    figure("out_of_order", out_of_order as f64, "requests");
    figure("seconds", seconds, "s");
    if let Some(out) = &out {
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(out, serde_json::to_string_pretty(&figures)? + "\n")?;
    }
    let _ = std::fs::remove_dir_all(&dir);

    ensure!(
        kills_done == kills,
        "only {kills_done} of {kills} kills happened"
    );
    ensure!(
        staged == keys.len() as u64,
        "{staged} staged but {} rows",
        keys.len()
    );
    ensure!(
        lost == 0 && delivered == staged && other == 0,
        "{lost} lost; {delivered} delivered of {staged}; {other} not delivered"
    );
    ensure!(
        unknown == 0,
        "{unknown} requests with keys that were never staged"
    );
    ensure!(
        unique == staged,
        "{unique} distinct keys received for {staged} rows"
    );
    ensure!(
        redeliveries <= kills_done + freezes,
        "{redeliveries} raw re-deliveries for {kills_done} kills and {freezes} freezes"
    );
    ensure!(
        freezes == 0 || counters.stale_completions > 0,
        "{freezes} freezes past the lease but no stale completion was rejected"
    );
    ensure!(
        keyed_requests > 0 && arrivals.len() as u64 == ORDERING_KEYS,
        "{keyed_requests} requests of {} ordering keys",
        arrivals.len()
    );
    ensure!(
        out_of_order == 0,
        "{out_of_order} requests of an ordering key came after a later row of that key"
    );
    println!("outbox soak: ok");
    Ok(())
}
