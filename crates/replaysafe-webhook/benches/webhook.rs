//! Guarded live delivery of small JSON webhooks against the same requests sent with raw
//! reqwest (same client settings), both to one axum receiver on 127.0.0.1, interleaved.
//!
//! The guarded path adds describing, key derivation, the gate, the SSRF check and, per
//! webhook, the ledger's claim (the `attempting` line, written under the journal file's
//! lock after looking the key up) and the `delivered` line. Every guarded webhook has an
//! event type, so a key, of its own: the ledger suppresses a key delivered before.
//! Requests are unsigned on both sides so that they carry the same headers and bytes.
//! Beside them, raw reqwest that waits for a round trip to another thread before each
//! request, against raw reqwest: the least a journal written by a thread of its own
//! would cost, since a delivery's `attempting` line must be out before its request starts.
//!
//! Then the same comparison with the journal in PostgreSQL (`PostgresJournal`, in a
//! fresh database of the server `REPLAYSAFE_TEST_POSTGRES_URL` names; `cargo xtask
//! bench` starts one), against a receiver that answers each request after 5 ms, one
//! request in flight: the journal's claim is one statement and the `delivered` line one
//! more, each a round trip and a commit; the time spent in them is measured too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use replaysafe_bench::{Report, ThreadCpu, interleaved_chunks, per_second};
use replaysafe_core::journal::{Claim, JournalEntry, JournalError, Ledger};
use replaysafe_core::{Guard, GuardLayer, IdempotencyKey, Journal};
use replaysafe_outbox::postgres::{PostgresJournal, parse_url};
use replaysafe_outbox::tokio_postgres::{self, NoTls};
use replaysafe_test::contexts;
use replaysafe_webhook::{IpNetwork, SsrfPolicy, Webhook, WebhookClient};
use serde_json::json;

/// Webhooks per subject in one measurement.
const WEBHOOKS: usize = 10_000;
/// The subjects alternate every `CHUNK` webhooks, so both see the same load on a shared machine.
const CHUNK: usize = 500;
/// Measurements of each chunk per subject; the fastest counts.
const REPEATS: usize = 5;

/// How long the receiver of the PostgreSQL-journaled comparison takes to answer.
const SLOW_ANSWER: Duration = Duration::from_millis(5);
/// Webhooks per chunk, chunks and repeats of that comparison (about 5 ms a webhook).
const SLOW_CHUNK: usize = 40;
const SLOW_CHUNKS: usize = 10;
const SLOW_REPEATS: usize = 3;

/// Round trips timed after an idle pause, and right after another.
const ROUND_TRIPS: usize = 100;

/// Guarded webhooks sent so far: each takes the next number for its event type.
static SENT: AtomicUsize = AtomicUsize::new(0);

/// Deliveries in flight at once in the concurrent comparison.
const IN_FLIGHT: usize = 8;

/// Starts a receiver answering 200 to everything after `delay`, on its own thread and
/// runtime. The wait is a thread's sleep (the runtime's blocking pool), which ends within
/// microseconds of `delay`: the runtime's timer ends a wait on its millisecond ticks, so
/// a request arriving just after one would wait up to a whole millisecond more, and the
/// two subjects' chunks would differ by where their requests fell between ticks.
fn start_receiver(delay: Duration) -> SocketAddr {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("receiver runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1");
            sender
                .send(listener.local_addr().expect("local address"))
                .expect("report the address");
            let app = axum::Router::new().fallback(move || async move {
                if !delay.is_zero() {
                    tokio::task::spawn_blocking(move || std::thread::sleep(delay))
                        .await
                        .expect("the receiver's wait");
                }
                axum::http::StatusCode::OK
            });
            axum::serve(listener, app).await.expect("serve");
        });
    });
    receiver.recv().expect("receiver address")
}

fn body(index: usize) -> serde_json::Value {
    json!({"type": "orders.daily_total", "orders": index, "revenue_eur": 88412.5})
}

/// A guarded client of the loopback receiver at `url`, journaling to `journal`.
fn guarded_client(url: &str, journal: impl Into<GuardLayer>) -> Guard<WebhookClient> {
    WebhookClient::builder(url)
        .ssrf_policy(
            SsrfPolicy::default()
                .allow_network("127.0.0.1/32".parse::<IpNetwork>().expect("network")),
        )
        .build(journal)
        .expect("guarded client")
}

/// Sends `count` guarded webhooks from number `first`, `in_flight` at a time.
async fn guarded_chunk(
    client: &Guard<WebhookClient>,
    in_flight: usize,
    first: usize,
    count: usize,
) {
    use futures_util::StreamExt;
    let cx = contexts::live();
    futures_util::stream::iter(first..first + count)
        .map(|index| {
            let cx = &cx;
            async move {
                let event_type = format!(
                    "orders.daily_total.{}",
                    SENT.fetch_add(1, Ordering::Relaxed)
                );
                let outcome = client
                    .send(cx, &Webhook::json(event_type, body(index)))
                    .await
                    .expect("guarded delivery");
                assert!(outcome.is_delivered(), "every key is new");
            }
        })
        .buffer_unordered(in_flight)
        .collect::<()>()
        .await;
}

/// A thread that answers at once every request handed to it: the least a journal written
/// by a thread of its own would cost a delivery (one round trip to that thread before the
/// request starts), without any of the writing.
struct Handoff {
    requests: std::sync::mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
}

impl Handoff {
    fn start() -> Self {
        let (requests, arrivals) = std::sync::mpsc::channel::<tokio::sync::oneshot::Sender<()>>();
        std::thread::spawn(move || {
            // Everything waiting is answered before the thread sleeps again, as a writer
            // thread would write everything waiting in one batch.
            while let Ok(first) = arrivals.recv() {
                let _ = first.send(());
                while let Ok(next) = arrivals.try_recv() {
                    let _ = next.send(());
                }
            }
        });
        Handoff { requests }
    }

    /// Hands a request to the thread and waits for its answer.
    async fn round_trip(&self) {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.requests.send(answer).expect("the handoff thread runs");
        answered.await.expect("the handoff thread answers");
    }
}

/// The same requests with raw reqwest, `in_flight` at a time; with `handoff`, each
/// request starts after a round trip to its thread.
async fn raw_chunk(
    client: &reqwest::Client,
    url: &str,
    key: &IdempotencyKey,
    in_flight: usize,
    first: usize,
    count: usize,
    handoff: Option<&Handoff>,
) {
    use futures_util::StreamExt;
    futures_util::stream::iter(first..first + count)
        .map(|index| async move {
            if let Some(handoff) = handoff {
                handoff.round_trip().await;
            }
            let mut response = client
                .post(url)
                .header("content-type", "application/json")
                .header("idempotency-key", format!("\"{key}\""))
                .body(body(index).to_string().into_bytes())
                .send()
                .await
                .expect("raw delivery");
            assert!(response.status().is_success());
            // Read the (empty) body as the webhook client does, so the connection is reused.
            while let Ok(Some(_)) = response.chunk().await {}
        })
        .buffer_unordered(in_flight)
        .collect::<()>()
        .await;
}

/// One comparison's pace and receiver: raw reqwest's client and the receiver's URL, with
/// `in_flight` deliveries at a time, `chunks` chunks of `chunk` webhooks, each timed
/// `repeats` times.
struct Race<'a> {
    runtime: &'a tokio::runtime::Runtime,
    raw: &'a reqwest::Client,
    url: &'a str,
    key: &'a IdempotencyKey,
    in_flight: usize,
    chunk: usize,
    chunks: usize,
    repeats: usize,
}

impl Race<'_> {
    /// Sends chunk `n` with `guarded`, at this race's pace.
    fn guarded_side<'g>(&'g self, guarded: &'g Guard<WebhookClient>) -> impl FnMut(usize) + 'g {
        move |n| {
            self.runtime.block_on(guarded_chunk(
                guarded,
                self.in_flight,
                n * self.chunk,
                self.chunk,
            ))
        }
    }

    /// Sends chunk `n` with raw reqwest, at this race's pace.
    fn raw_side(&self) -> impl FnMut(usize) + '_ {
        self.raw_side_handing_off(None)
    }

    /// [`Race::raw_side`], each request after a round trip to `handoff`'s thread.
    fn raw_side_handing_off<'h>(&'h self, handoff: Option<&'h Handoff>) -> impl FnMut(usize) + 'h {
        move |n| {
            self.runtime.block_on(raw_chunk(
                self.raw,
                self.url,
                self.key,
                self.in_flight,
                n * self.chunk,
                self.chunk,
                handoff,
            ))
        }
    }

    /// Times raw reqwest handing each request to `handoff`'s thread first against raw
    /// reqwest, interleaved.
    fn time_handoff(&self, handoff: &Handoff) -> (Duration, Duration) {
        interleaved_chunks(
            self.chunks,
            self.repeats,
            self.raw_side_handing_off(Some(handoff)),
            self.raw_side(),
        )
    }

    /// Sends one chunk with `guarded` and with raw reqwest, to open their connections.
    fn warm(&self, guarded: &Guard<WebhookClient>) {
        self.guarded_side(guarded)(0);
        self.raw_side()(0);
    }

    /// Times the chunks of `guarded` and of raw reqwest interleaved; the fastest time of
    /// each chunk counts, which filters out moments when other work had the machine.
    /// Returns the guarded and the raw total.
    fn time(&self, guarded: &Guard<WebhookClient>) -> (Duration, Duration) {
        self.time_counted(guarded, &ThreadCpu::default(), &ThreadCpu::default())
    }

    /// [`Race::time`], counting what each side's runs cost the thread that drives the
    /// runtime (every task of a side runs on it) in `guarded_cpu` and `raw_cpu`.
    fn time_counted(
        &self,
        guarded: &Guard<WebhookClient>,
        guarded_cpu: &ThreadCpu,
        raw_cpu: &ThreadCpu,
    ) -> (Duration, Duration) {
        interleaved_chunks(
            self.chunks,
            self.repeats,
            guarded_cpu.count(self.guarded_side(guarded)),
            raw_cpu.count(self.raw_side()),
        )
    }

    /// Times two guarded clients against each other, as [`Race::time`] does a guarded
    /// client against raw reqwest.
    fn time_guards(
        &self,
        first: &Guard<WebhookClient>,
        second: &Guard<WebhookClient>,
    ) -> (Duration, Duration) {
        interleaved_chunks(
            self.chunks,
            self.repeats,
            self.guarded_side(first),
            self.guarded_side(second),
        )
    }

    /// [`Race::warm`], then [`Race::time`].
    fn run(&self, guarded: &Guard<WebhookClient>) -> (Duration, Duration) {
        self.run_counted(guarded, &ThreadCpu::default(), &ThreadCpu::default())
    }

    /// [`Race::warm`], then [`Race::time_counted`].
    fn run_counted(
        &self,
        guarded: &Guard<WebhookClient>,
        guarded_cpu: &ThreadCpu,
        raw_cpu: &ThreadCpu,
    ) -> (Duration, Duration) {
        self.warm(guarded);
        self.time_counted(guarded, guarded_cpu, raw_cpu)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Reports one race of `webhooks` webhooks a side: the guarded side's rate as
/// `names[0]` and raw reqwest's as `names[1]`, both in `unit`, and the first against the
/// second as the ratio `names[2]`, whose baseline `baseline` describes.
fn race_figures<'r>(
    report: &'r mut Report,
    names: [&str; 3],
    webhooks: usize,
    (guarded, raw): (Duration, Duration),
    unit: &str,
    baseline: &str,
) -> &'r mut Report {
    let [guarded_name, raw_name, ratio_name] = names;
    let (guarded_rate, raw_rate) = (per_second(webhooks, guarded), per_second(webhooks, raw));
    report
        .figure(guarded_name, guarded_rate, unit)
        .figure(raw_name, raw_rate, unit)
        .ratio(ratio_name, guarded_rate / raw_rate, baseline)
}

/// Calls of one kind and the time they took.
#[derive(Debug, Default)]
struct Tally {
    calls: AtomicU64,
    nanos: AtomicU64,
}

impl Tally {
    fn time<T>(&self, call: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let result = call();
        self.nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        result
    }

    /// Calls and nanoseconds so far.
    fn totals(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.nanos.load(Ordering::Relaxed),
        )
    }
}

/// A journal that forwards to another and times its claims and its appends.
#[derive(Debug)]
struct Timed<J> {
    inner: J,
    claims: Tally,
    appends: Tally,
}

impl<J: Journal> Journal for Timed<J> {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        self.appends.time(|| self.inner.append(entry))
    }

    fn flush(&self) -> Result<(), JournalError> {
        self.inner.flush()
    }

    fn ledger(&self) -> Option<&dyn Ledger> {
        self.inner.ledger().map(|_| self as &dyn Ledger)
    }
}

impl<J: Journal> Ledger for Timed<J> {
    fn begin(
        &self,
        attempting: &JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> Result<Claim, JournalError> {
        let ledger = self
            .inner
            .ledger()
            .expect("asked only when the journal has a ledger");
        self.claims
            .time(|| ledger.begin(attempting, retry_in_doubt))
    }
}

/// Guarded webhooks journaled to PostgreSQL against raw reqwest, to a receiver that
/// answers after [`SLOW_ANSWER`], one request in flight, interleaved.
fn postgres_journal(
    report: &mut Report,
    runtime: &tokio::runtime::Runtime,
    raw: &reqwest::Client,
    key: &IdempotencyKey,
    admin: &str,
) {
    let address = start_receiver(SLOW_ANSWER);
    let url = format!("http://{address}/hooks/orders");
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis();
    let name = format!("bench_webhook_{}_{started}", std::process::id());
    let database = format!(
        "{}/{name}",
        admin.rsplit_once('/').expect("a database URL").0
    );
    let admin_client = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(admin, NoTls)
            .await
            .expect("connect to PostgreSQL");
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the bench database");
        client
    });
    let journal = Arc::new(Timed {
        inner: PostgresJournal::connect(
            parse_url(&database).expect("database URL"),
            "postgres://bench",
        )
        .expect("PostgreSQL journal"),
        claims: Tally::default(),
        appends: Tally::default(),
    });
    let guarded = guarded_client(&url, journal.clone());

    let race = Race {
        runtime,
        raw,
        url: &url,
        key,
        in_flight: 1,
        chunk: SLOW_CHUNK,
        chunks: SLOW_CHUNKS,
        repeats: SLOW_REPEATS,
    };
    race.warm(&guarded);
    let (claims_before, appends_before) = (journal.claims.totals(), journal.appends.totals());
    let (guarded_best, raw_best) = race.time(&guarded);
    let (claims, appends) = (journal.claims.totals(), journal.appends.totals());
    let (claim_calls, claim_nanos) = (claims.0 - claims_before.0, claims.1 - claims_before.1);
    let (append_calls, append_nanos) = (appends.0 - appends_before.0, appends.1 - appends_before.1);
    let guarded_sent = (SLOW_CHUNKS * SLOW_CHUNK * SLOW_REPEATS) as f64;
    drop(guarded);
    drop(journal);
    // What one round trip to the server costs when the server and this process have idled
    // as long as a delivery takes, and right after another one: a prepared `SELECT 1`.
    let (after_idle, back_to_back) = runtime.block_on(async {
        let select = admin_client.prepare("SELECT 1").await.expect("prepare");
        let (mut after_idle, mut back_to_back) = (Vec::new(), Vec::new());
        for _ in 0..ROUND_TRIPS {
            tokio::time::sleep(SLOW_ANSWER).await;
            for times in [&mut after_idle, &mut back_to_back] {
                let started = Instant::now();
                admin_client
                    .query_one(&select, &[])
                    .await
                    .expect("SELECT 1");
                times.push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        (median(after_idle), median(back_to_back))
    });
    runtime.block_on(async {
        admin_client
            .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .await
            .expect("drop the bench database");
    });

    let webhooks = SLOW_CHUNKS * SLOW_CHUNK;
    race_figures(
        report,
        [
            "webhook.postgres_journal.guarded.deliveries_per_second",
            "webhook.postgres_journal.raw_reqwest.deliveries_per_second",
            "webhook.postgres_journal.guarded_vs_raw_throughput",
        ],
        webhooks,
        (guarded_best, raw_best),
        "webhooks/s (receiver answering after 5 ms, one in flight)",
        "raw reqwest, same requests and client settings, receiver answering after 5 ms, one request in flight",
    )
    .figure(
            "webhook.postgres_journal.added_ms_per_delivery",
            (guarded_best.as_secs_f64() - raw_best.as_secs_f64()) * 1e3 / webhooks as f64,
            "ms/delivery (guarded minus raw)",
        )
        .figure(
            "webhook.postgres_journal.journal_ms_per_delivery",
            (claim_nanos + append_nanos) as f64 / 1e6 / guarded_sent,
            "ms/delivery (mean time in the journal's claim and appends)",
        )
        .figure(
            "webhook.postgres_journal.claim_ms",
            claim_nanos as f64 / 1e6 / claim_calls as f64,
            "ms (mean Ledger::begin: one statement, right after the previous delivery)",
        )
        .figure(
            "webhook.postgres_journal.append_ms",
            append_nanos as f64 / 1e6 / append_calls as f64,
            "ms (mean Journal::append of the delivered line: one statement, after the receiver's 5 ms)",
        )
        .figure(
            "webhook.postgres_journal.round_trip_after_idle_ms",
            after_idle,
            "ms (prepared SELECT 1 after 5 ms idle, median)",
        )
        .figure(
            "webhook.postgres_journal.round_trip_back_to_back_ms",
            back_to_back,
            "ms (prepared SELECT 1 right after another, median)",
        )
        .figure(
            "webhook.postgres_journal.journal_calls_per_delivery",
            (claim_calls + append_calls) as f64 / guarded_sent,
            "calls/delivery (the claim and the delivered line, one statement each)",
        );
}

/// What the comparisons of the loopback receiver share.
struct Subjects<'a> {
    runtime: &'a tokio::runtime::Runtime,
    guarded: &'a Guard<WebhookClient>,
    unjournaled: &'a Guard<WebhookClient>,
    raw: &'a reqwest::Client,
    url: &'a str,
    key: &'a IdempotencyKey,
}

/// Best times of the four subjects, each against raw reqwest interleaved, and of the
/// guard on its durable journal against the guard on a journal that keeps nothing,
/// interleaved with each other.
struct Times {
    guarded: Duration,
    raw: Duration,
    unjournaled: Duration,
    raw_again: Duration,
    durable: Duration,
    free: Duration,
    /// Raw reqwest with a round trip to another thread before each request, against raw
    /// reqwest interleaved: the least a journal written by a thread of its own would cost.
    handed_off: Duration,
    raw_beside_handoff: Duration,
    /// What a delivery cost the client's thread, on average over every run: the guard on
    /// its durable journal, on a journal that keeps nothing, and raw reqwest.
    guarded_cpu: Duration,
    unjournaled_cpu: Duration,
    raw_cpu: Duration,
    /// The share of the time in which the client's thread was on a CPU: raw reqwest,
    /// and the guard on its durable journal.
    raw_busy: f64,
    guarded_busy: f64,
}

impl Times {
    /// What the durable journal adds to a delivery, in µs: from the two guards raced
    /// against each other, not each against raw reqwest at another moment.
    fn journal_cost_per_delivery(&self) -> f64 {
        (self.durable.as_secs_f64() - self.free.as_secs_f64()) * 1e6 / WEBHOOKS as f64
    }

    /// Raw reqwest handing each request to another thread first, against raw reqwest.
    fn handoff_vs_raw(&self) -> f64 {
        self.raw_beside_handoff.as_secs_f64() / self.handed_off.as_secs_f64()
    }
}

/// Guarded (journaled, and on a journal that keeps nothing) against raw reqwest,
/// `in_flight` deliveries at a time on both sides.
fn compare(subjects: &Subjects<'_>, in_flight: usize) -> Times {
    let Subjects {
        runtime,
        guarded,
        unjournaled,
        raw,
        url,
        key,
    } = *subjects;
    // Chunks of 500, each timed REPEATS times per subject; the guard on a journal that
    // keeps nothing is raced against raw reqwest again, after the durable one, then the
    // two guards against each other (what the journal costs).
    let race = Race {
        runtime,
        raw,
        url,
        key,
        in_flight,
        chunk: CHUNK,
        chunks: WEBHOOKS / CHUNK,
        repeats: REPEATS,
    };
    let (guarded_cpu, raw_cpu, unjournaled_cpu) = Default::default();
    let (guarded_best, raw_best) = race.run_counted(guarded, &guarded_cpu, &raw_cpu);
    let (unjournaled_best, raw_again_best) =
        race.run_counted(unjournaled, &unjournaled_cpu, &ThreadCpu::default());
    let (durable, free) = race.time_guards(guarded, unjournaled);
    let (handed_off, raw_beside_handoff) = race.time_handoff(&Handoff::start());
    let per_delivery = |spent: &ThreadCpu| spent.per_operation(CHUNK);
    Times {
        guarded: guarded_best,
        raw: raw_best,
        unjournaled: unjournaled_best,
        raw_again: raw_again_best,
        durable,
        free,
        handed_off,
        raw_beside_handoff,
        guarded_cpu: per_delivery(&guarded_cpu),
        unjournaled_cpu: per_delivery(&unjournaled_cpu),
        raw_cpu: per_delivery(&raw_cpu),
        raw_busy: raw_cpu.busy(),
        guarded_busy: guarded_cpu.busy(),
    }
}

/// One delivery in flight.
fn one_in_flight(report: &mut Report, subjects: &Subjects<'_>) {
    let times = compare(subjects, 1);
    race_figures(
        report,
        [
            "webhook.guarded.deliveries_per_second",
            "webhook.raw_reqwest.deliveries_per_second",
            "webhook.guarded_vs_raw_throughput",
        ],
        WEBHOOKS,
        (times.guarded, times.raw),
        "webhooks/s",
        "raw reqwest, same requests and client settings",
    )
    .ratio(
            "webhook.guarded_no_journal_vs_raw_throughput",
            per_second(WEBHOOKS, times.unjournaled) / per_second(WEBHOOKS, times.raw_again),
            "raw reqwest, interleaved with the guard on a journal that keeps nothing",
        )
        .figure(
            "webhook.durable_journal_cost_per_delivery",
            times.journal_cost_per_delivery(),
            "µs/delivery (the guard on its durable journal against the guard on one that keeps nothing, interleaved)",
        )
        .ratio(
            "webhook.raw_reqwest_thread_handoff_vs_raw_throughput",
            times.handoff_vs_raw(),
            "raw reqwest, interleaved with raw reqwest that first waits for a round trip to a thread answering at once (the floor of a journal written by a thread of its own)",
        );
}

/// [`IN_FLIGHT`] deliveries in flight on both sides: the journal's records of deliveries
/// that run together are written together (group commit).
fn in_flight_8(report: &mut Report, subjects: &Subjects<'_>) {
    let times = compare(subjects, IN_FLIGHT);
    race_figures(
        report,
        [
            "webhook.guarded.in_flight_8.deliveries_per_second",
            "webhook.raw_reqwest.in_flight_8.deliveries_per_second",
            "webhook.guarded_vs_raw_throughput_in_flight_8",
        ],
        WEBHOOKS,
        (times.guarded, times.raw),
        "webhooks/s",
        "raw reqwest, same requests and client settings, 8 in flight on both sides, interleaved; the worst case, a receiver answering at once, where the guard on a journal that keeps nothing stays under 0.95 (ADR 0017)",
    )
    .ratio(
            "webhook.guarded_no_journal_vs_raw_throughput_in_flight_8",
            per_second(WEBHOOKS, times.unjournaled) / per_second(WEBHOOKS, times.raw_again),
            "raw reqwest, 8 in flight on both sides, interleaved with the guard on a journal that keeps nothing",
        )
        .figure(
            "webhook.durable_journal_cost_per_delivery_in_flight_8",
            times.journal_cost_per_delivery(),
            "µs/delivery (the guard on its durable journal against the guard on one that keeps nothing, interleaved, 8 in flight)",
        )
        .ratio(
            "webhook.raw_reqwest_thread_handoff_vs_raw_throughput_in_flight_8",
            times.handoff_vs_raw(),
            "raw reqwest, 8 in flight, interleaved with raw reqwest that first waits for a round trip to a thread answering at once (the floor of a journal written by a thread of its own)",
        );
    // Where the ratio comes from: when the client's thread is on a CPU all the time, each
    // side's rate is that thread's CPU time a delivery, and 0.95× leaves the guard and
    // its journal a twentieth of raw reqwest's.
    let micros = |spent: Duration| spent.as_secs_f64() * 1e6;
    let unit = "µs/delivery (CPU time of the client's thread, mean over every chunk, 8 in flight)";
    report
        .figure(
            "webhook.client_thread.in_flight_8.raw_reqwest.busy",
            times.raw_busy,
            "share of raw reqwest's time the client's thread was on a CPU (1.0: its own work sets the pace)",
        )
        .figure(
            "webhook.client_thread.in_flight_8.guarded.busy",
            times.guarded_busy,
            "share of the guarded client's time its thread was on a CPU (below 1.0: deliveries waited, as for a batch's write)",
        )
        .figure(
            "webhook.client_thread.in_flight_8.raw_reqwest.cpu_per_delivery",
            micros(times.raw_cpu),
            unit,
        )
        .figure(
            "webhook.client_thread.in_flight_8.guarded.cpu_per_delivery",
            micros(times.guarded_cpu),
            unit,
        )
        .figure(
            "webhook.client_thread.in_flight_8.guarded_no_journal.cpu_per_delivery",
            micros(times.unjournaled_cpu),
            unit,
        )
        .figure(
            "webhook.client_thread.in_flight_8.cpu_budget_for_0_95",
            micros(times.raw_cpu) * (1.0 / 0.95 - 1.0),
            "µs/delivery the guard and its journal may add on the client's thread for 0.95× of raw reqwest, when that thread sets the pace",
        );
}

/// How long the receiver of the comparison at a partner's pace takes to answer: a fast
/// partner (real ones take tens to hundreds of milliseconds).
const PARTNER_ANSWER: Duration = Duration::from_millis(1);

/// Webhooks a chunk of the comparison at a partner's pace.
const PARTNER_CHUNK: usize = 200;

/// [`IN_FLIGHT`] deliveries in flight on both sides to a receiver that answers after
/// [`PARTNER_ANSWER`], the guard on a durable journal of its own: what the guard costs
/// where a delivery waits for its receiver, beside the worst case of a receiver that
/// answers at once.
fn in_flight_8_at_a_partners_pace(
    report: &mut Report,
    runtime: &tokio::runtime::Runtime,
    raw: &reqwest::Client,
    key: &IdempotencyKey,
) {
    let address = start_receiver(PARTNER_ANSWER);
    let url = format!("http://{address}/hooks/orders");
    let journal_dir = tempfile::tempdir().expect("temporary folder");
    let journal = Arc::new(
        replaysafe_core::JsonlJournal::open(journal_dir.path().join("journal.jsonl"))
            .expect("journal"),
    );
    let guarded = guarded_client(&url, journal.clone());
    let (guarded_best, raw_best) = Race {
        runtime,
        raw,
        url: &url,
        key,
        in_flight: IN_FLIGHT,
        chunk: PARTNER_CHUNK,
        chunks: SLOW_CHUNKS,
        repeats: SLOW_REPEATS,
    }
    .run(&guarded);
    journal.flush().expect("flush the journal");
    race_figures(
        report,
        [
            "webhook.receiver_1ms.guarded.in_flight_8.deliveries_per_second",
            "webhook.receiver_1ms.raw_reqwest.in_flight_8.deliveries_per_second",
            "webhook.receiver_1ms.guarded_vs_raw_throughput_in_flight_8",
        ],
        SLOW_CHUNKS * PARTNER_CHUNK,
        (guarded_best, raw_best),
        "webhooks/s (receiver answering after 1 ms, 8 in flight)",
        "raw reqwest, same requests and client settings, receiver on loopback answering after 1 ms, 8 in flight on both sides, interleaved; target >= 0.95",
    );
}

fn main() {
    let address = start_receiver(Duration::ZERO);
    let url = format!("http://{address}/hooks/orders");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");

    let journal_dir = tempfile::tempdir().expect("temporary folder");
    let journal = std::sync::Arc::new(
        replaysafe_core::JsonlJournal::open(journal_dir.path().join("journal.jsonl"))
            .expect("journal"),
    );
    let guarded = guarded_client(&url, journal.clone());
    // The same settings the webhook client gives reqwest.
    let raw = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(15))
        .connect_timeout(Duration::from_secs(15))
        .no_proxy()
        .user_agent(concat!("replaysafe-webhook/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("raw client");
    let key = IdempotencyKey::parse(&"ab".repeat(32)).expect("key");
    // The same guarded client with a journal that keeps nothing: what the gate, the key and
    // the HTTP layer cost without the two journal writes a durable delivery makes.
    let unjournaled = guarded_client(&url, replaysafe_core::journal::NoopJournal);

    let subjects = Subjects {
        runtime: &runtime,
        guarded: &guarded,
        unjournaled: &unjournaled,
        raw: &raw,
        url: &url,
        key: &key,
    };
    let mut report = Report::new("webhook");
    // `REPLAYSAFE_BENCH_ONLY=in_flight` measures 8 deliveries in flight alone.
    let only = std::env::var("REPLAYSAFE_BENCH_ONLY").unwrap_or_default();
    if only != "in_flight" {
        one_in_flight(&mut report, &subjects);
    }
    in_flight_8(&mut report, &subjects);
    journal.flush().expect("flush the journal");
    in_flight_8_at_a_partners_pace(&mut report, &runtime, &raw, &key);
    if only == "in_flight" {
        let path = report.write().expect("write the report");
        println!("report: {}", path.display());
        return;
    }

    match std::env::var("REPLAYSAFE_TEST_POSTGRES_URL") {
        Ok(admin) if !admin.is_empty() => {
            postgres_journal(&mut report, &runtime, &raw, &key, &admin)
        }
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            replaysafe_test::services::require("REPLAYSAFE_TEST_POSTGRES_URL");
        }
        _ => println!(
            "skipped the PostgreSQL-journaled comparison: REPLAYSAFE_TEST_POSTGRES_URL is not set \
             (`cargo xtask bench` starts the server and sets it)"
        ),
    }
    let path = report.write().expect("write the report");
    println!("report: {}", path.display());
}
