//! `cargo xtask soak ledger`: the ledger's crash test, with real processes.
//!
//! The controller creates a fresh database on the PostgreSQL server at `--postgres-url`
//! or `REPLAYSAFE_TEST_POSTGRES_URL` (with `--journal jsonl`, a fresh JSON Lines file
//! instead), starts a loopback receiver that counts every request it gets per
//! idempotency key (it drops nothing), and runs `--processes` worker processes (this
//! program, `worker` mode). Each worker sends its list of `--effects` effects,
//! `--in-flight` at a time (default one), through a [`Guard`] whose journal is a
//! [`PostgresJournal`] in that database, or a [`JsonlJournal`] on that one file shared by
//! every worker (whose records of deliveries in flight are written together: group
//! commit): half the list is keys every worker shares, half keys of its own; half
//! is notes (an email-like receiver: its client's `dedupes_by_key()` is false, so a key
//! in doubt is never sent again) and half webhooks (`Idempotency-Key`: a key in doubt is
//! sent again under the same key).
//!
//! The controller kills workers with SIGKILL at random moments (most of them among the
//! worker's deliveries, some at any moment of its life: starting, or walking the part of
//! its list already done) and starts them again; a started worker sends its whole list
//! from the top, and the ledger must stop every repeat. Up to half the kills come from
//! the receiver, aimed at the sender of a request it has just counted: before it answers
//! (the receiver has the effect and the worker never learns it) or just after (before or
//! after the worker writes `delivered`). The receiver is also slow now and then, so
//! random kills land mid-delivery. When the kills are spent, every worker's last run
//! sends its list to the end.
//!
//! Afterwards it reads the journal back (the key table and every line) and checks, for
//! the notes: no key arrived twice; every key was attempted exactly once, across every
//! process; every key is delivered (one arrival) or in doubt (an open attempt, with zero
//! or one arrival), and no more are in doubt than there were kills; at least as many
//! are in doubt with one arrival as notes' senders were killed before the answer. For
//! the webhooks: every key ends delivered. For both: no key lost, no failed attempt, no
//! arrival without an attempt, no `delivered` line without an arrival, no arrival under a
//! key nobody had. It writes its figures as JSON to `--out`.
//!
//! ```text
//! ledger_soak [--kills N] [--processes P] [--effects E] [--in-flight F]
//!             [--journal postgres|jsonl] [--postgres-url URL] [--out FILE]
//! ledger_soak worker --notes URL --hooks URL --slot K --run R --effects E --window START/END
//!                    --journal postgres|jsonl --in-flight F
//! ```
//!
//! A worker finds its database (or file) in `REPLAYSAFE_JOURNAL`, so no password is on a
//! command line.

#[path = "soak_common.rs"]
mod soak_common;

use soak_common::{flag, fresh_postgres, lock};

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use replaysafe::http::{Call, Endpoint, HttpClient, IpNetwork, Method, SsrfPolicy};
use replaysafe::journal::{
    GroupCommit, JournalDecision, JournalReader, JournalRecord, NoopJournal, ReadError,
};
use replaysafe::outbox::JournalQuery;
use replaysafe::outbox::postgres::{self, PostgresJournal};
use replaysafe::outbox::tokio_postgres::NoTls;
use replaysafe::webhook::{Webhook, WebhookClient};
use replaysafe::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, Journal,
    JsonlJournal, Outcome, Reason, ReplayContext, RunKind, Window,
};

const PIPELINE: &str = "ledger_soak";

fn main() -> anyhow::Result<()> {
    soak_common::main_of(
        |args| async move { worker(&args).await },
        |args| async move { controller(&args).await },
    )
}

fn loopback() -> anyhow::Result<SsrfPolicy> {
    Ok(SsrfPolicy::default().allow_network("127.0.0.1/32".parse::<IpNetwork>()?))
}

/// A note to a recipient: an email as far as the gate and the ledger can tell.
#[derive(Debug)]
struct Note {
    recipient: String,
    body: String,
}

/// Posts notes to the receiver with the key in `Idempotency-Key`. Its receiver keeps
/// every note it gets, as an SMTP server does: a repeat lands, so a key in doubt must not
/// be sent again (`dedupes_by_key` is false).
#[derive(Debug)]
struct NoteClient {
    http: HttpClient,
    endpoint: Endpoint,
    slot: String,
}

impl NoteClient {
    fn new(url: &str, slot: &str) -> anyhow::Result<Self> {
        Ok(NoteClient {
            http: HttpClient::builder("ledger-soak")
                .ssrf_policy(loopback()?)
                .build()?,
            endpoint: Endpoint::parse("notes", url)?,
            slot: slot.to_owned(),
        })
    }
}

#[async_trait]
impl EffectClient for NoteClient {
    type Effect = Note;
    type Receipt = ();
    type Error = replaysafe::http::Error;

    fn describe(&self, _cx: &ReplayContext, note: &Note) -> Result<EffectDescription, Self::Error> {
        EffectDescription::new(EffectKind::Email, "soak_note", &note.recipient)
            .map(|description| {
                description
                    .with_payload(note.body.as_bytes())
                    .with_summary("soak note")
            })
            .map_err(|error| replaysafe::http::Error::invalid("recipient", error))
    }

    async fn deliver(&self, delivery: &Delivery<'_>, note: &Note) -> Result<(), Self::Error> {
        let request = self
            .http
            .request(Method::POST, &self.endpoint)
            .header("idempotency-key", delivery.key().as_str())
            .header("x-soak-worker", &self.slot)
            .body(note.body.clone());
        let call = Call {
            action: "sending note to",
            endpoint: &self.endpoint,
            target_as_journaled: self.endpoint.target(),
            quote_error_body: false,
        };
        replaysafe::http::drain(self.http.send(call, request).await?).await;
        Ok(())
    }

    fn dedupes_by_key(&self) -> bool {
        false
    }
}

/// One entry of a worker's list.
#[derive(Debug)]
enum Planned {
    Note(Note),
    Hook(Webhook),
}

/// Worker `slot`'s list, the same every time it starts: entry `4m` is shared note `m`,
/// `4m+1` a note of its own, `4m+2` shared webhook `m`, `4m+3` a webhook of its own. All
/// workers walk the shared keys in the same order, so they race on them.
fn plan(slot: usize, effects: usize) -> Vec<Planned> {
    (0..effects)
        .map(|index| {
            let m = index / 4;
            let name = if index % 2 == 0 {
                format!("shared-{m}")
            } else {
                format!("w{slot}-{m}")
            };
            if (index / 2) % 2 == 0 {
                Planned::Note(Note {
                    recipient: format!("{name}@soak.example"),
                    body: format!("note {name}"),
                })
            } else {
                Planned::Hook(Webhook::json(
                    format!("soak.{name}"),
                    serde_json::json!({ "name": name }),
                ))
            }
        })
        .collect()
}

/// The guarded clients of a worker, or of the controller deriving keys.
struct Clients {
    notes: Guard<NoteClient>,
    hooks: Guard<WebhookClient>,
}

impl Clients {
    fn new(notes: &str, hooks: &str, slot: &str, layer: &GuardLayer) -> anyhow::Result<Self> {
        Ok(Clients {
            notes: layer.layer(NoteClient::new(notes, slot)?),
            hooks: WebhookClient::builder(hooks)
                .header("x-soak-worker", slot)
                .ssrf_policy(loopback()?)
                .build(layer)?,
        })
    }
}

/// The context every worker sends under: a current scheduled run of the window the
/// controller chose, so every worker derives the same keys.
fn soak_context(window: &str, run_id: &str) -> anyhow::Result<ReplayContext> {
    let (start, end) = window.split_once('/').context("--window: START/END")?;
    let start = DateTime::parse_from_rfc3339(start)?.to_utc();
    let end = DateTime::parse_from_rfc3339(end)?.to_utc();
    Ok(ReplayContext::builder()
        .pipeline(PIPELINE)
        .run_id(run_id)
        .run_kind(RunKind::Scheduled)
        .window(Window::new(start, end)?)
        .build()?)
}

/// A worker process: sends its whole list, `--in-flight` effects at a time, then exits 0.
async fn worker(args: &[String]) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    let notes = flag(args, "--notes").context("--notes")?;
    let hooks = flag(args, "--hooks").context("--hooks")?;
    let slot = flag(args, "--slot").context("--slot")?;
    let run = flag(args, "--run").context("--run")?;
    let effects: usize = flag(args, "--effects").context("--effects")?.parse()?;
    let window = flag(args, "--window").context("--window")?;
    let in_flight: usize = flag(args, "--in-flight").unwrap_or("1").parse()?;
    let location = std::env::var("REPLAYSAFE_JOURNAL").context("REPLAYSAFE_JOURNAL")?;
    let journal: Arc<dyn Journal> = match flag(args, "--journal").unwrap_or("postgres") {
        // Records wait for others whenever others are in flight, however idle the
        // worker's runtime, so the kills land in writes of several deliveries' records.
        "jsonl" => Arc::new(
            JsonlJournal::options()
                .group_commit(GroupCommit::Always)
                .open(&location)?,
        ),
        _ => Arc::new(PostgresJournal::connect(
            postgres::parse_url(&location)?,
            "the soak database",
        )?),
    };
    let clients = Clients::new(notes, hooks, slot, &GuardLayer::new(journal))?;
    let cx = soak_context(window, &format!("scheduled__ledger_soak__{slot}_{run}"))?;
    let (mut delivered, mut already, mut in_doubt) = (0u64, 0u64, 0u64);
    let list = plan(slot.parse()?, effects);
    let mut sends = futures_util::stream::iter(&list)
        .map(|planned| {
            let (clients, cx) = (&clients, &cx);
            async move {
                anyhow::Ok(match planned {
                    Planned::Note(note) => reasons(clients.notes.send(cx, note).await?),
                    Planned::Hook(hook) => reasons(clients.hooks.send(cx, hook).await?),
                })
            }
        })
        .buffered(in_flight.max(1));
    while let Some(reasons) = sends.next().await {
        match reasons? {
            None => delivered += 1,
            Some(reasons) if reasons.contains(&Reason::AlreadyDelivered) => already += 1,
            Some(reasons) if reasons.contains(&Reason::InDoubt) => in_doubt += 1,
            Some(reasons) => bail!("suppressed for another reason: {reasons:?}"),
        }
    }
    eprintln!(
        "worker {slot} run {run}: done: {delivered} delivered, {already} already delivered, {in_doubt} in doubt"
    );
    Ok(())
}

/// The reasons an effect was suppressed, or `None` when it was delivered.
fn reasons<R>(outcome: Outcome<R>) -> Option<Vec<Reason>> {
    match outcome {
        Outcome::Delivered(_) => None,
        Outcome::Suppressed(suppressed) => Some(suppressed.reasons),
    }
}

/// Which receiver a request reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Note,
    Hook,
}

/// When a worker process dies.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// At this moment, whatever it is doing: starting, walking the part of its list
    /// already done, or delivering.
    At(Instant),
    /// This long after the receiver first hears from it: among its deliveries.
    Delivering(Duration),
}

impl Death {
    /// One in four a moment of its whole life (up to 1.5 s after it starts), three in
    /// four a moment among its deliveries (up to 250 ms after the first).
    fn draw(started: Instant) -> Death {
        if fastrand::u32(0..4) == 0 {
            Death::At(started + Duration::from_millis(fastrand::u64(0..1500)))
        } else {
            Death::Delivering(Duration::from_millis(fastrand::u64(0..250)))
        }
    }
}

/// What the receiver and the controller share.
#[derive(Default)]
struct Shared {
    /// Requests per key, raw: nothing is dropped.
    arrivals: Mutex<HashMap<String, u64>>,
    /// The worker processes, by slot.
    workers: Mutex<Vec<Option<Child>>>,
    /// When the receiver first heard from each slot's process.
    heard: Mutex<Vec<Option<Instant>>>,
    kills: AtomicU64,
    max_kills: u64,
    /// Kills the receiver aimed at the sender of a request it had counted.
    receiver_kills: AtomicU64,
    /// Of those, kills of a note's sender before the answer: each leaves the note in
    /// doubt with one arrival.
    notes_killed_before_answer: AtomicU64,
}

impl Shared {
    /// SIGKILLs the worker in `slot`, counting it, while kills remain.
    fn kill(&self, slot: usize) -> bool {
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
}

async fn receive_note(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> StatusCode {
    receive(shared, headers, Kind::Note).await
}

async fn receive_hook(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> StatusCode {
    receive(shared, headers, Kind::Hook).await
}

/// Counts the request under its key, then now and then kills its sender (before or just
/// after answering) or answers slowly.
async fn receive(shared: Arc<Shared>, headers: HeaderMap, kind: Kind) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_matches('"').to_owned());
    let slot: Option<usize> = headers
        .get("x-soak-worker")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let (Some(key), Some(slot)) = (key, slot) else {
        return StatusCode::BAD_REQUEST;
    };
    *lock(&shared.arrivals).entry(key).or_default() += 1;
    if let Some(heard @ None) = lock(&shared.heard).get_mut(slot) {
        *heard = Some(Instant::now());
    }
    let roll = fastrand::u32(0..100);
    let aimed = shared.receiver_kills.load(Ordering::SeqCst) < shared.max_kills / 2;
    if roll < 8 && aimed {
        if fastrand::bool() {
            // Before the answer: the receiver has the effect, its sender never learns it.
            let killer = Arc::clone(&shared);
            let killed = tokio::task::spawn_blocking(move || killer.kill(slot))
                .await
                .unwrap_or(false);
            if killed {
                shared.receiver_kills.fetch_add(1, Ordering::SeqCst);
                if kind == Kind::Note {
                    shared
                        .notes_killed_before_answer
                        .fetch_add(1, Ordering::SeqCst);
                }
            }
        } else {
            // Around the answer: before or after the worker writes `delivered`.
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(fastrand::u64(0..3000))).await;
                let killer = Arc::clone(&shared);
                let killed = tokio::task::spawn_blocking(move || killer.kill(slot))
                    .await
                    .unwrap_or(false);
                if killed {
                    shared.receiver_kills.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    } else if roll < 20 {
        // A slow answer: a random kill may land while the receiver holds the effect.
        tokio::time::sleep(Duration::from_micros(fastrand::u64(1000..8000))).await;
    }
    StatusCode::OK
}

/// How a worker is started.
struct Launch {
    /// The journal's database URL, or its file.
    database: String,
    journal: Backend,
    in_flight: usize,
    notes: String,
    hooks: String,
    effects: usize,
    window: String,
}

impl Launch {
    fn spawn(&self, slot: usize, run: u64) -> anyhow::Result<Child> {
        Command::new(std::env::current_exe()?)
            .args(["worker", "--notes", &self.notes, "--hooks", &self.hooks])
            .args(["--slot", &slot.to_string(), "--run", &run.to_string()])
            .args(["--effects", &self.effects.to_string()])
            .args(["--window", &self.window])
            .args(["--journal", self.journal.name()])
            .args(["--in-flight", &self.in_flight.to_string()])
            .env("REPLAYSAFE_JOURNAL", &self.database)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting a worker")
    }
}

/// Whether a worker is still running (`None`), or how it ended; a failure is an error
/// carrying what it wrote.
fn ended(slot: usize, child: &mut Child) -> anyhow::Result<Option<()>> {
    match child.try_wait()? {
        None => Ok(None),
        Some(status) if status.success() => Ok(Some(())),
        Some(status) => {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read as _;
                let _ = pipe.read_to_string(&mut stderr);
            }
            bail!("worker {slot} failed ({status}): {stderr}")
        }
    }
}

/// Where the workers' journal is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Postgres,
    Jsonl,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Jsonl => "jsonl",
        }
    }
}

/// What the journal says of one key.
#[derive(Debug, Default)]
struct Lines {
    attempting: u64,
    delivered: u64,
    failed: u64,
}

async fn controller(args: &[String]) -> anyhow::Result<()> {
    let kills: u64 = flag(args, "--kills").unwrap_or("30").parse()?;
    let processes: usize = flag(args, "--processes").unwrap_or("8").parse()?;
    let effects: usize = flag(args, "--effects").unwrap_or("1000").parse()?;
    let in_flight: usize = flag(args, "--in-flight").unwrap_or("1").parse()?;
    let backend = match flag(args, "--journal").unwrap_or("postgres") {
        "postgres" => Backend::Postgres,
        "jsonl" => Backend::Jsonl,
        other => bail!("--journal: postgres or jsonl, not {other:?}"),
    };
    let out = flag(args, "--out").map(PathBuf::from);
    ensure!(processes > 0, "--processes: at least 1");
    ensure!(in_flight > 0, "--in-flight: at least 1");
    let started = Instant::now();
    // Removed at the end (a JSON Lines journal's folder).
    let mut folder = None;
    let database = match backend {
        Backend::Postgres => {
            let admin = match flag(args, "--postgres-url") {
                Some(url) => url.to_owned(),
                None => std::env::var("REPLAYSAFE_TEST_POSTGRES_URL").context(
                    "the ledger soak needs --postgres-url or REPLAYSAFE_TEST_POSTGRES_URL",
                )?,
            };
            let database = fresh_postgres(&admin, "ledger_soak").await?;
            // The journal's tables exist before any worker starts: `PostgresJournal::connect`
            // creates them with `CREATE TABLE IF NOT EXISTS`, which PostgreSQL does not
            // serialize, so workers creating them at once on a fresh database can fail (a
            // duplicate key in `pg_type`). The crash test is about the ledger, not about
            // that first start.
            drop(PostgresJournal::connect(
                postgres::parse_url(&database)?,
                "the soak database",
            )?);
            database
        }
        Backend::Jsonl => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos();
            let dir = std::env::temp_dir().join(format!(
                "replaysafe-ledger-soak-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir)?;
            let file = dir.join("journal.jsonl");
            folder = Some(dir);
            file.to_str()
                .context("a temporary path in UTF-8")?
                .to_owned()
        }
    };
    let name = backend.name();
    println!(
        "ledger soak on {name}: {processes} processes x {effects} effects, {in_flight} in flight, {kills} kills"
    );

    let shared = Arc::new(Shared {
        max_kills: kills,
        ..Shared::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address: SocketAddr = listener.local_addr()?;
    let app = Router::new()
        .route("/notes", post(receive_note))
        .route("/hooks", post(receive_hook))
        .with_state(Arc::clone(&shared));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let end = Utc::now().duration_trunc(TimeDelta::minutes(1))?;
    let launch = Launch {
        database: database.clone(),
        journal: backend,
        in_flight,
        notes: format!("http://{address}/notes"),
        hooks: format!("http://{address}/hooks"),
        effects,
        window: format!(
            "{}/{}",
            (end - TimeDelta::hours(1)).to_rfc3339(),
            end.to_rfc3339()
        ),
    };

    // Every key a worker may send, as the workers derive it.
    let layer = GuardLayer::new(Arc::new(NoopJournal));
    let mut expected: BTreeMap<String, Kind> = BTreeMap::new();
    let cx = soak_context(&launch.window, "scheduled__ledger_soak__controller")?;
    for slot in 0..processes {
        let clients = Clients::new(&launch.notes, &launch.hooks, &slot.to_string(), &layer)?;
        for planned in plan(slot, effects) {
            let (key, kind) = match &planned {
                Planned::Note(note) => (clients.notes.preview(&cx, note)?.key, Kind::Note),
                Planned::Hook(hook) => (clients.hooks.preview(&cx, hook)?.key, Kind::Hook),
            };
            expected.insert(key.as_str().to_owned(), kind);
        }
    }

    // Kill at random moments and start again, until the kills are spent; a worker that
    // finished its list meanwhile runs it again. The receiver aims kills of its own.
    *lock(&shared.workers) = (0..processes).map(|_| None).collect();
    *lock(&shared.heard) = vec![None; processes];
    let mut deaths = vec![Death::draw(Instant::now()); processes];
    let mut runs = 0u64;
    let mut reruns = 0u64;
    let killing = Instant::now();
    while shared.kills.load(Ordering::SeqCst) < kills {
        for slot in 0..processes {
            let vacant = {
                let mut workers = lock(&shared.workers);
                match &mut workers[slot] {
                    None => true,
                    Some(child) => {
                        let done = ended(slot, child)?.is_some();
                        if done {
                            reruns += 1;
                        }
                        done
                    }
                }
            };
            if vacant {
                runs += 1;
                lock(&shared.heard)[slot] = None;
                let child = launch.spawn(slot, runs)?;
                lock(&shared.workers)[slot] = Some(child);
                deaths[slot] = Death::draw(Instant::now());
                continue;
            }
            let now = Instant::now();
            let due = match deaths[slot] {
                Death::At(at) => now >= at,
                Death::Delivering(after) => {
                    lock(&shared.heard)[slot].is_some_and(|heard| now >= heard + after)
                }
            };
            if due {
                let killer = Arc::clone(&shared);
                tokio::task::spawn_blocking(move || killer.kill(slot)).await?;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let killing = killing.elapsed().as_secs_f64();

    // No kills left: every worker's last run sends its whole list to the end.
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut finished = vec![false; processes];
    while finished.iter().any(|done| !done) {
        for slot in 0..processes {
            if finished[slot] {
                continue;
            }
            let vacant = {
                let mut workers = lock(&shared.workers);
                match &mut workers[slot] {
                    None => true,
                    Some(child) => {
                        finished[slot] = ended(slot, child)?.is_some();
                        false
                    }
                }
            };
            if vacant {
                runs += 1;
                let child = launch.spawn(slot, runs)?;
                lock(&shared.workers)[slot] = Some(child);
            }
        }
        ensure!(
            Instant::now() < deadline,
            "workers still running after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.abort();
    let seconds = started.elapsed().as_secs_f64();

    // What the journal remembers: the key table (for a file, what its lines say of each
    // key, as the ledger reads them), and every line read back.
    let mut states: HashMap<String, String> = HashMap::new();
    let mut lines: HashMap<String, Lines> = HashMap::new();
    let (mut journal_lines, mut unreadable, mut torn) = (0u64, 0u64, 0u64);
    let (mut stopped_delivered, mut stopped_in_doubt) = (0u64, 0u64);
    let mut take = |record: JournalRecord| {
        if backend == Backend::Jsonl {
            let state = states
                .entry(record.effect.idempotency_key.clone())
                .or_default();
            match record.decision {
                _ if state == "delivered" => {}
                JournalDecision::Delivered => *state = "delivered".into(),
                JournalDecision::Attempting => *state = "open".into(),
                JournalDecision::Failed => *state = "failed".into(),
                _ => {}
            }
            if state.is_empty() {
                states.remove(&record.effect.idempotency_key);
            }
        }
        let of_key = lines.entry(record.effect.idempotency_key).or_default();
        match record.decision {
            JournalDecision::Attempting => of_key.attempting += 1,
            JournalDecision::Delivered => of_key.delivered += 1,
            JournalDecision::Failed => of_key.failed += 1,
            JournalDecision::Suppressed => {
                if record.reasons.iter().any(|r| r == "already_delivered") {
                    stopped_delivered += 1;
                } else if record.reasons.iter().any(|r| r == "in_doubt") {
                    stopped_in_doubt += 1;
                }
            }
            _ => {}
        }
    };
    let mut table: HashMap<String, String> = HashMap::new();
    match backend {
        Backend::Postgres => {
            let config = postgres::parse_url(&database)?;
            let (client, connection) = config.connect(NoTls).await?;
            tokio::spawn(connection);
            for row in client
                .query(
                    "SELECT idempotency_key, state FROM replaysafe_journal_keys",
                    &[],
                )
                .await?
            {
                table.insert(row.get(0), row.get(1));
            }
            postgres::read_journal(&config, &JournalQuery::all().pipeline(PIPELINE), |line| {
                journal_lines += 1;
                match serde_json::from_str::<JournalRecord>(line) {
                    Ok(record) => take(record),
                    Err(_) => unreadable += 1,
                }
                Ok(())
            })
            .await?;
        }
        Backend::Jsonl => {
            let mut malformed = Vec::new();
            for record in JournalReader::open(&database)? {
                journal_lines += 1;
                match record {
                    Ok(record) => take(record),
                    Err(ReadError::Malformed { line, .. }) => malformed.push(line),
                    Err(_) => unreadable += 1,
                }
            }
            // A process killed in the middle of its `write` can leave the start of its
            // lines: the kernel stops a write between pages when a fatal signal is
            // pending. Such a fragment reads as a line of its own, cut short.
            let text = std::fs::read(&database)?;
            let lines: Vec<&[u8]> = text.split(|byte| *byte == b'\n').collect();
            for number in malformed {
                let line = usize::try_from(number - 1)
                    .ok()
                    .and_then(|index| lines.get(index))
                    .copied()
                    .unwrap_or_default();
                if cut_short(line) {
                    torn += 1;
                } else {
                    unreadable += 1;
                    eprintln!(
                        "journal line {number} does not read: {}",
                        String::from_utf8_lossy(&line[..line.len().min(300)])
                    );
                }
            }
        }
    }
    states.extend(table);
    if let Some(folder) = folder {
        std::fs::remove_dir_all(folder)?;
    }
    let arrivals = lock(&shared.arrivals).clone();

    // Per key: what arrived, what the journal says, and whether that is allowed.
    let mut problems: Vec<String> = Vec::new();
    let mut count = BTreeMap::<&str, u64>::new();
    let none = Lines::default();
    for (key, kind) in &expected {
        let arrived = arrivals.get(key).copied().unwrap_or(0);
        let state = states.get(key).map(String::as_str);
        let of_key = lines.get(key).unwrap_or(&none);
        let short = &key[..12.min(key.len())];
        if of_key.failed > 0 {
            problems.push(format!("{short}: {} failed attempts", of_key.failed));
        }
        if arrived > of_key.attempting {
            problems.push(format!(
                "{short}: {arrived} arrivals for {} attempts",
                of_key.attempting
            ));
        }
        if of_key.delivered > arrived {
            problems.push(format!(
                "{short}: {} delivered lines for {arrived} arrivals",
                of_key.delivered
            ));
        }
        match kind {
            Kind::Note => {
                *count.entry("notes.keys").or_default() += 1;
                if arrived > 1 {
                    *count.entry("notes.duplicates").or_default() += 1;
                    problems.push(format!("{short}: note arrived {arrived} times"));
                }
                if of_key.attempting != 1 {
                    problems.push(format!(
                        "{short}: note attempted {} times",
                        of_key.attempting
                    ));
                }
                let open = of_key.attempting > of_key.delivered + of_key.failed;
                match (state, arrived) {
                    (None, _) => {
                        *count.entry("notes.lost").or_default() += 1;
                        problems.push(format!("{short}: note never attempted"));
                    }
                    (Some("delivered"), 1) if of_key.delivered == 1 => {
                        *count.entry("notes.delivered").or_default() += 1;
                    }
                    (Some("open"), 0) if open => {
                        *count.entry("notes.in_doubt").or_default() += 1;
                        *count.entry("notes.in_doubt_not_received").or_default() += 1;
                    }
                    (Some("open"), 1) if open => {
                        *count.entry("notes.in_doubt").or_default() += 1;
                        *count.entry("notes.in_doubt_received").or_default() += 1;
                    }
                    (state, arrived) => problems.push(format!(
                        "{short}: note {state:?} in the key table, {} delivered lines, {arrived} arrivals",
                        of_key.delivered
                    )),
                }
            }
            Kind::Hook => {
                *count.entry("hooks.keys").or_default() += 1;
                if of_key.attempting > 1 {
                    *count.entry("hooks.retried_in_doubt").or_default() += 1;
                }
                *count.entry("hooks.repeat_arrivals").or_default() += arrived.saturating_sub(1);
                match state {
                    None => {
                        *count.entry("hooks.lost").or_default() += 1;
                        problems.push(format!("{short}: webhook never attempted"));
                    }
                    Some("delivered") if arrived >= 1 && of_key.delivered >= 1 => {
                        *count.entry("hooks.delivered").or_default() += 1;
                    }
                    Some(state) => problems.push(format!(
                        "{short}: webhook {state} in the key table at the end, {arrived} arrivals"
                    )),
                }
            }
        }
    }
    let unknown = arrivals
        .keys()
        .filter(|key| !expected.contains_key(*key))
        .count() as u64;
    let requests: u64 = arrivals.values().sum();
    let kills_done = shared.kills.load(Ordering::SeqCst);
    let receiver_kills = shared.receiver_kills.load(Ordering::SeqCst);
    let before_answer = shared.notes_killed_before_answer.load(Ordering::SeqCst);
    let get = |name: &str| count.get(name).copied().unwrap_or(0);

    let mut figures = BTreeMap::new();
    // The PostgreSQL journal's figures keep their names; a file journal's are apart.
    let prefix = match backend {
        Backend::Postgres => "ledger.soak".to_owned(),
        Backend::Jsonl => format!("ledger.soak_jsonl_in_flight_{in_flight}"),
    };
    let mut figure = |name: &str, value: f64, unit: &str| {
        println!("{name:<44} {value:>12.1} {unit}");
        figures.insert(
            format!("{prefix}.{name}"),
            serde_json::json!({"value": value, "unit": unit}),
        );
    };
    figure("kills", kills_done as f64, "SIGKILLs");
    figure(
        "kills_by_receiver",
        receiver_kills as f64,
        "SIGKILLs mid-request",
    );
    figure("processes", processes as f64, "processes");
    figure("effects", effects as f64, "effects a process");
    figure("runs", runs as f64, "processes started");
    figure("reruns", reruns as f64, "finished lists sent again");
    figure("requests", requests as f64, "requests");
    figure("journal_lines", journal_lines as f64, "lines");
    figure(
        "journal_lines_cut_short",
        torn as f64,
        "lines (the start of a record, its process killed mid-write)",
    );
    figure(
        "repeats_stopped_delivered",
        stopped_delivered as f64,
        "suppressed already_delivered",
    );
    figure(
        "repeats_stopped_in_doubt",
        stopped_in_doubt as f64,
        "suppressed in_doubt",
    );
    figure("notes.keys", get("notes.keys") as f64, "keys");
    figure("notes.delivered", get("notes.delivered") as f64, "keys");
    figure("notes.duplicates", get("notes.duplicates") as f64, "keys");
    figure("notes.in_doubt", get("notes.in_doubt") as f64, "keys");
    figure(
        "notes.in_doubt_received",
        get("notes.in_doubt_received") as f64,
        "keys delivered then killed",
    );
    figure(
        "notes.in_doubt_not_received",
        get("notes.in_doubt_not_received") as f64,
        "keys",
    );
    figure(
        "notes.killed_before_answer",
        before_answer as f64,
        "SIGKILLs",
    );
    figure("notes.lost", get("notes.lost") as f64, "keys");
    figure("hooks.keys", get("hooks.keys") as f64, "keys");
    figure("hooks.delivered", get("hooks.delivered") as f64, "keys");
    figure(
        "hooks.retried_in_doubt",
        get("hooks.retried_in_doubt") as f64,
        "keys",
    );
    figure(
        "hooks.repeat_arrivals",
        get("hooks.repeat_arrivals") as f64,
        "requests under a key already received",
    );
    figure("hooks.lost", get("hooks.lost") as f64, "keys");
    figure("unknown_keys", unknown as f64, "keys");
    figure("kill_seconds", killing, "s");
    figure("seconds", seconds, "s");
    if let Some(out) = &out {
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(out, serde_json::to_string_pretty(&figures)? + "\n")?;
    }

    ensure!(
        kills_done == kills,
        "only {kills_done} of {kills} kills happened"
    );
    ensure!(unreadable == 0, "{unreadable} journal lines do not read");
    ensure!(
        torn <= kills_done,
        "{torn} records cut short, more than the {kills_done} kills that could cut them"
    );
    ensure!(unknown == 0, "{unknown} keys arrived that no worker had");
    ensure!(
        problems.is_empty(),
        "{} keys break the ledger's promise, such as:\n  {}",
        problems.len(),
        problems[..problems.len().min(20)].join("\n  ")
    );
    ensure!(
        get("notes.delivered") + get("notes.in_doubt") == get("notes.keys"),
        "notes neither delivered nor in doubt"
    );
    ensure!(
        get("notes.in_doubt") <= kills_done * in_flight as u64,
        "{} notes in doubt for {kills_done} kills (a worker sends {in_flight} effects at a time)",
        get("notes.in_doubt")
    );
    ensure!(
        get("notes.in_doubt_received") >= before_answer,
        "{before_answer} notes' senders killed before the answer, but only {} notes in doubt that arrived",
        get("notes.in_doubt_received")
    );
    ensure!(
        get("hooks.delivered") == get("hooks.keys"),
        "webhooks not delivered"
    );
    println!(
        "ledger soak on {name}: ok: {kills_done} kills of {processes} processes x {effects} effects, {in_flight} in flight; \
         {requests} deliveries; notes: {} delivered once, 0 duplicates, {} in doubt ({} of them received); \
         webhooks: {} delivered, {} retried under their key; {seconds:.1} s",
        get("notes.delivered"),
        get("notes.in_doubt"),
        get("notes.in_doubt_received"),
        get("hooks.delivered"),
        get("hooks.retried_in_doubt"),
    );
    Ok(())
}

/// Whether `line` is the start of a journal record that ends too soon: JSON that runs out
/// before the record closes, as a `write` stopped by a kill leaves it.
fn cut_short(line: &[u8]) -> bool {
    const START: &[u8] = b"{\"v\":";
    (line.starts_with(START) || (!line.is_empty() && START.starts_with(line)))
        && serde_json::from_slice::<serde_json::Value>(line)
            .is_err_and(|error| error.classify() == serde_json::error::Category::Eof)
}

#[cfg(test)]
mod tests {
    use super::cut_short;

    #[test]
    fn a_record_cut_short_is_told_from_other_unreadable_lines() {
        let record = br#"{"v":1,"decision":"attempting","effect":{"idempotency_key":"ab"}}"#;
        for end in 1..record.len() {
            assert!(cut_short(&record[..end]), "{end}");
        }
        assert!(!cut_short(record), "a whole record");
        // Two records run together, and text that is no record, are not a cut.
        let glued = [&record[..20], &record[..]].concat();
        assert!(!cut_short(&glued));
        assert!(!cut_short(b"garbage"));
        assert!(!cut_short(b""));
    }
}
