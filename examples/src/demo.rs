//! `cargo xtask demo`: the daily orders pipeline, written
//! against replaysafe, run three times.
//!
//! 1. **The current window** (yesterday, `[today − 1 day, today)` UTC), scheduled. Its
//!    first attempt fails on purpose after committing the first chunk; a retry (new run
//!    id, run kind `retry`) resumes from the checkpoint. Then the daily summary goes out:
//!    an email per customer with their orders attached, a signed webhook and a CSV file
//!    for the partner, a downstream Airflow DAG run, the billed-usage counters, and a
//!    freshness alert, since the window completed after it closed.
//! 2. **A 90-window backfill** of the days before, through the same code. The tables
//!    are recomputed; nothing is sent; the journal records every effect it would have sent.
//! 3. **A 3-window backfill with an audited opt-in** for file drops, after a correction
//!    of those days: the partner gets the corrected files, nobody else hears of it.
//!
//! The partner's webhook goes through the outbox: run one stages it in the same SQLite
//! transaction as the day's totals, the process stops there (a crash between compute and
//! delivery), and a worker started afterwards delivers the committed row; every
//! backfilled window stages its webhook as a suppressed row, one per key, which no worker
//! ever claims, and run three's replay of three of those windows restages their rows
//! without adding any.
//!
//! Then it verifies the data (one row per order, none stale, sums reconcile, one
//! terminal status per run, the checkpoint) and the effects (delivered only for the
//! current window and the opted-in kind), writes `target/demo/summary.json`, prints the
//! `replaysafe report` headlines, writes the report page `target/demo/report.html`, and
//! exits non-zero if a check failed.
//!
//! Default mode needs no server: `.eml` files, a local folder for the partner, an
//! in-process HTTP receiver and an in-process metrics recorder. `--real` delivers to
//! the loopback servers `cargo xtask demo --real` starts (aiosmtpd, sshd, Alertmanager,
//! Pushgateway); the webhook and the trigger still go to the in-process receiver.

mod folder_drop;
mod orders;
mod pipeline;
mod publish;
mod receiver;
mod setup;
mod usage;
mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use chrono::{DurationRound, TimeDelta, Utc};
use replaysafe::outbox::sqlite::SqliteOutbox;
use replaysafe::outbox::{Worker, WorkerStats};
use replaysafe::{EffectKind, Journal, JsonlJournal, OptIn, ReplayContext, Window};
use replaysafe_review::Reader;
use replaysafe_review::report::Breakdown;

use crate::orders::{Interrupted, OrdersDb};
use crate::publish::Landing;
use crate::setup::{Mode, Setup};

/// Windows in run two.
const BACKFILL_WINDOWS: i64 = 90;
/// Windows in run three.
const OPT_IN_WINDOWS: i64 = 3;
/// Run two's backfill id.
const BACKFILL_ID: &str = "bf-daily-orders-90d";
/// Run three's backfill id.
const OPT_IN_BACKFILL_ID: &str = "bf-partner-resend-3d";

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("demo: verification failed; see the checks above");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("demo: error: {}", replaysafe::error_chain(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn parse_args() -> anyhow::Result<Mode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(Mode::Local),
        [flag] if flag == "--real" => Ok(Mode::Real),
        other => bail!("usage: demo [--real] (got {other:?})"),
    }
}

/// `target/demo` of the workspace (or of `CARGO_TARGET_DIR`).
fn demo_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap_or(Path::new("."))
                .join("target")
        },
        PathBuf::from,
    );
    target.join("demo")
}

/// `2026-08-05` for a daily window.
fn day(window: &Window) -> String {
    window.start().format("%Y-%m-%d").to_string()
}

/// The first journal line that `wanted` picks.
fn journal_line(path: &Path, wanted: impl Fn(&str) -> bool) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .find(|line| wanted(line))
        .unwrap_or("(none)")
        .to_owned())
}

fn print_landings(landings: &[Landing]) {
    for landing in landings {
        println!("    {:<9} {}", landing.kind, landing.place);
    }
}

/// What every run shares: the database, the guarded clients and the journal.
#[derive(Debug)]
struct Demo {
    db: OrdersDb,
    db_path: PathBuf,
    setup: Setup,
    journal: Arc<JsonlJournal>,
    journal_path: PathBuf,
}

/// What run one did, for verification.
#[derive(Debug)]
struct RunOne {
    scheduled: ReplayContext,
    retry: ReplayContext,
    interrupted: Interrupted,
    resumed_after: Option<String>,
    /// Rows the worker started after the simulated crash delivered.
    delivered_after_crash: u64,
}

/// A worker over the demo's outbox, as `replaysafe outbox work` would run one: it delivers
/// what is due and returns.
async fn deliver_from_outbox(demo: &Demo) -> anyhow::Result<WorkerStats> {
    let worker = Worker::builder(SqliteOutbox::open(&demo.db_path)?)
        .add_route(demo.setup.publishers.partner_webhook.clone())
        .build()?;
    Ok(worker.drain().await?)
}

async fn run() -> anyhow::Result<bool> {
    let started = Instant::now();
    let mode = parse_args()?;
    let dir = demo_dir();
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cleaning {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let journal_path = dir.join("journal.jsonl");
    let journal = Arc::new(JsonlJournal::open(&journal_path)?);
    let db_path = dir.join("orders.sqlite");
    let db = OrdersDb::open(&db_path)?;
    let setup = setup::build(mode, &dir, &journal).await?;
    let demo = Demo {
        db,
        db_path: db_path.clone(),
        setup,
        journal,
        journal_path,
    };

    let today = Utc::now().duration_trunc(TimeDelta::days(1))?;
    let current = Window::new(today - TimeDelta::days(1), today)?;
    let history = Window::new(
        current.start() - TimeDelta::days(BACKFILL_WINDOWS),
        current.start(),
    )?;
    let resend = Window::new(
        current.start() - TimeDelta::days(OPT_IN_WINDOWS),
        current.start(),
    )?;

    let seeded = demo.db.seed(today, BACKFILL_WINDOWS + 1)?;
    println!(
        "replaysafe demo ({} mode): pipeline {}",
        if mode == Mode::Real {
            "--real"
        } else {
            "local"
        },
        pipeline::PIPELINE,
    );
    println!(
        "  source: {} orders over {} days ({} seen after their day closed, {} corrected) in {}",
        seeded.orders,
        BACKFILL_WINDOWS + 1,
        seeded.late,
        seeded.corrected,
        db_path.display()
    );
    println!(
        "  recency: max age 1 day for every effect kind, so yesterday's window is current all of today"
    );

    let one = run_one(&demo, current).await?;
    run_two(&demo, history).await?;
    run_three(&demo, resend).await?;
    let claimed_after_replays = deliver_from_outbox(&demo).await?.claimed;
    println!(
        "\nafter the replays, a worker finds {claimed_after_replays} row(s) to claim: suppressed rows wait for an audited opt-in"
    );

    let plan = verify::Plan {
        mode,
        current_window: current,
        first_attempt: one.scheduled.run_id().to_string(),
        retry: one.retry.run_id().to_string(),
        checkpoint_after_failure: one.interrupted.checkpoint,
        resumed_after: one.resumed_after,
        resumed_batch: one.interrupted.batch_key,
        current_totals: demo.db.totals(&current)?,
        backfill_id: BACKFILL_ID.to_owned(),
        backfill_range: history,
        opt_in_backfill_id: OPT_IN_BACKFILL_ID.to_owned(),
        opt_in_range: resend,
        opted_in_kind: EffectKind::FileDrop,
        outbox: demo.db.outbox_facts(&current)?,
        outbox_delivered_after_crash: one.delivered_after_crash,
        outbox_claimed_after_replays: claimed_after_replays,
    };
    let evidence = verify::Evidence::gather(&demo.setup).await?;
    let receiver_log = dir.join("receiver.json");
    std::fs::write(
        &receiver_log,
        serde_json::to_string_pretty(&evidence.received)? + "\n",
    )?;
    let summary = verify::summarize(&plan, &demo.journal_path, &demo.db, evidence)?;
    let summary_path = dir.join("summary.json");
    std::fs::write(
        &summary_path,
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    print_summary(&summary, &summary_path);

    // The breakdowns `replaysafe report` shows by default, for the page.
    let report = Reader::default().report(
        std::slice::from_ref(&demo.journal_path),
        &[Breakdown::Kind, Breakdown::Reason],
    )?;
    println!("\nreplaysafe report {}", demo.journal_path.display());
    for group in &report.groups {
        println!("  {}", group.headline);
    }
    let page = dir.join("report.html");
    std::fs::File::create(&page)
        .map(std::io::BufWriter::new)
        .and_then(|mut out| {
            report.write_html(None, &mut out)?;
            std::io::Write::flush(&mut out)
        })
        .with_context(|| format!("writing {}", page.display()))?;
    println!("  the page for reviewers: {}", page.display());
    println!("\nwhere to look");
    for (what, place) in &demo.setup.places {
        println!("  {what:<37} {place}");
    }
    if let Some(copies) = keep_copies(&demo.setup, &dir)? {
        println!(
            "  {:<37} {}",
            "copies of what the servers got",
            copies.display()
        );
    }
    println!(
        "  {:<37} {}",
        "requests the receiver got",
        receiver_log.display()
    );
    println!("\ndone in {:.1} s", started.elapsed().as_secs_f64());
    println!("journal: {}", demo.journal_path.display());
    Ok(summary.ok)
}

/// Run one: the current window, scheduled. The first attempt dies after one chunk; the
/// retry resumes from the checkpoint and publishes.
async fn run_one(demo: &Demo, current: Window) -> anyhow::Result<RunOne> {
    println!(
        "\nrun 1: scheduled run of the current window {} {current}",
        day(&current)
    );
    let scheduled = pipeline::scheduled(current)?;
    let interrupted =
        match pipeline::run_window(&demo.db, &demo.setup.publishers, &scheduled, true).await {
            Ok(_) => bail!("the first attempt was meant to fail after its first chunk"),
            Err(error) => error.downcast::<Interrupted>()?,
        };
    println!(
        "  attempt 1 {} failed: {interrupted}; nothing published",
        scheduled.run_id()
    );
    let retry = pipeline::retry_of(&scheduled)?;
    let resumed = pipeline::run_window(&demo.db, &demo.setup.publishers, &retry, false).await?;
    println!(
        "  attempt 2 {} (retry) resumed after {}, loaded {} more row(s), checkpoint {} complete; delivered:",
        retry.run_id(),
        resumed.load.resumed_after.as_deref().unwrap_or("(start)"),
        resumed.load.rows,
        resumed.load.checkpoint
    );
    print_landings(&resumed.landings);
    println!(
        "  the process stops here, as if it crashed after the commit and before delivering the webhook"
    );
    let stats = deliver_from_outbox(demo).await?;
    println!(
        "  a worker started afterwards claimed {} row(s) from the outbox and delivered {}",
        stats.claimed, stats.delivered
    );
    Ok(RunOne {
        scheduled,
        retry,
        interrupted,
        resumed_after: resumed.load.resumed_after,
        delivered_after_crash: stats.delivered,
    })
}

/// Run two: a backfill of the 90 days before, through the same code; the gate suppresses
/// every effect and journals it.
async fn run_two(demo: &Demo, history: Window) -> anyhow::Result<()> {
    println!(
        "\nrun 2: backfill {BACKFILL_ID} of {BACKFILL_WINDOWS} daily windows {history}, same code path"
    );
    let (mut rows, mut delivered) = (0, 0);
    for window in history.split(TimeDelta::days(1))? {
        let cx = pipeline::backfill(BACKFILL_ID, window)?;
        let run = pipeline::run_window(&demo.db, &demo.setup.publishers, &cx, false).await?;
        rows += run.load.rows;
        delivered += run.landings.len();
    }
    demo.journal.flush()?;
    println!(
        "  loaded {rows} rows; delivered {delivered} effects; the journal has every effect it would have sent, e.g.:"
    );
    let line = journal_line(&demo.journal_path, |line| {
        line.contains(BACKFILL_ID) && line.contains("\"kind\":\"email\"")
    })?;
    println!("    {line}");
    Ok(())
}

/// Run three: a correction arrives for three days; the partner, and only the partner,
/// gets the corrected files, under an audited opt-in for file drops.
async fn run_three(demo: &Demo, resend: Window) -> anyhow::Result<()> {
    let windows: Vec<Window> = resend.split(TimeDelta::days(1))?.collect();
    let corrected = demo.db.correct(&windows, Utc::now())?;
    let opt_in = OptIn::new(
        "partner needs the corrected order files of these days; nothing else is re-sent",
        "maria.keller@shop.example",
        Utc::now().duration_trunc(TimeDelta::seconds(1))? + TimeDelta::hours(4),
    )?
    .for_kind(EffectKind::FileDrop);
    println!(
        "\nrun 3: backfill {OPT_IN_BACKFILL_ID} of {OPT_IN_WINDOWS} windows {resend} after {corrected} corrections,\n  \
         opt-in for file_drop: {:?}, approved by {}, expires {}; delivered:",
        opt_in.reason(),
        opt_in.approved_by(),
        replaysafe::rfc3339(opt_in.expires_at())
    );
    for window in windows {
        let cx = pipeline::backfill(OPT_IN_BACKFILL_ID, window)?.with_opt_in(opt_in.clone());
        let run = pipeline::run_window(&demo.db, &demo.setup.publishers, &cx, false).await?;
        print_landings(&run.landings);
    }
    demo.journal.flush()?;
    println!("  each opt-in delivery is journaled with its opt-in, e.g.:");
    let line = journal_line(&demo.journal_path, |line| {
        line.contains(OPT_IN_BACKFILL_ID) && line.contains("\"decision\":\"delivered\"")
    })?;
    println!("    {line}");
    Ok(())
}

/// With `--real`, the servers' folders go when `cargo xtask demo --real` stops them:
/// keeps copies of the demo's messages and partner files under `target/demo/received/`.
fn keep_copies(setup: &Setup, dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let Some(maildir) = &setup.maildir else {
        return Ok(None);
    };
    let copies = dir.join("received");
    let copy_matching =
        |from: &Path, to: &str, keep: &dyn Fn(&Path) -> bool| -> anyhow::Result<()> {
            std::fs::create_dir_all(copies.join(to))?;
            for entry in
                std::fs::read_dir(from).with_context(|| format!("listing {}", from.display()))?
            {
                let path = entry?.path();
                if let Some(name) = path.file_name().filter(|_| path.is_file() && keep(&path)) {
                    std::fs::copy(&path, copies.join(to).join(name))?;
                }
            }
            Ok(())
        };
    let ours = |path: &Path| {
        std::fs::read_to_string(path).is_ok_and(|text| text.contains("@shop.example>"))
    };
    copy_matching(&maildir.join("new"), "maildir", &ours)?;
    copy_matching(&setup.partner_dir, "sftp", &|path: &Path| {
        path.file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("daily_orders_"))
    })?;
    Ok(Some(copies))
}

fn print_summary(summary: &verify::Summary, path: &Path) {
    let data = &summary.data;
    println!("\nverification: {}", path.display());
    println!(
        "  curated rows {} (source orders {}), duplicate business keys {}, stale rows {}",
        data.curated_rows, data.source_orders, data.duplicate_business_keys, data.stale_rows
    );
    println!(
        "  ledger: {} runs, {} succeeded, {} failed, {} without a terminal status",
        data.ledger_runs,
        data.ledger_succeeded,
        data.ledger_failed,
        data.ledger_runs_without_terminal_status
    );
    if let Some(checkpoint) = &summary.resumed_window.checkpoint {
        println!(
            "  checkpoint {}: {} {} (failed at {})",
            checkpoint.batch_key,
            checkpoint.last_committed_key,
            checkpoint.status,
            summary.resumed_window.checkpoint_after_failure
        );
    }
    println!("  effects (journal)     delivered / suppressed / failed");
    for (group, kinds) in &summary.effects {
        let cells: Vec<String> = kinds
            .iter()
            .map(|(kind, c)| format!("{kind} {}/{}/{}", c.delivered, c.suppressed, c.failed))
            .collect();
        println!("    {group:<21} {}", cells.join(", "));
    }
    if let Some(metrics) = &summary.in_process_metrics {
        // A live bridge forwards straight to the recorder and journals nothing per increment.
        println!(
            "    {:<21} {} counters in the in-process recorder (a live bridge journals nothing)",
            "run1 metrics",
            metrics.len()
        );
    }
    for check in &summary.checks {
        println!(
            "  {} {} ({})",
            if check.ok { "ok  " } else { "FAIL" },
            check.name,
            check.detail
        );
    }
}
