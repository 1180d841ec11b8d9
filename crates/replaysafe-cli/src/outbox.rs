//! `replaysafe outbox`: operate the outbox on SQLite or PostgreSQL: run a worker over
//! routes from a configuration file, show counts, list rows, retry dead rows, resend
//! delivered ones, purge old ones.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use replaysafe_core::{Journal, OptIn, RecencyPolicy, TrustedApprovers};
use replaysafe_outbox::postgres::PostgresOutbox;
use replaysafe_outbox::sqlite::SqliteOutbox;
use replaysafe_outbox::{OperatorAction, OperatorCommand, OutboxStore, RowSummary, Status, Worker};

use crate::render::{Format, escape};
use replaysafe::routes::{RoutesError, RoutesFile};

/// `replaysafe outbox …`: the database and what to do with it.
#[derive(Debug, clap::Args)]
pub struct OutboxArgs {
    /// The outbox database: `sqlite:PATH`, or `postgres://USER@HOST:PORT/DB` (a password
    /// missing from the URL is read from PGPASSWORD, so it need not be on the command line).
    #[arg(
        long,
        global = true,
        env = "REPLAYSAFE_OUTBOX_DATABASE",
        value_name = "sqlite:PATH|postgres://…"
    )]
    database: Option<String>,
    #[command(subcommand)]
    command: OutboxCommand,
}

/// Output of the reading commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table for people.
    #[default]
    Table,
    /// JSON for scripts.
    Json,
}

/// Output of `outbox status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    /// A table for people.
    #[default]
    Table,
    /// JSON for scripts.
    Json,
    /// The Prometheus text format, for a scrape or a node exporter's textfile.
    Prometheus,
}

/// A row status, as `list --status` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusArg {
    /// Waiting for a worker.
    Pending,
    /// Claimed by a worker.
    Claimed,
    /// Delivered.
    Delivered,
    /// Stopped by the gate.
    Suppressed,
    /// Dead-lettered.
    Dead,
}

impl From<StatusArg> for Status {
    fn from(status: StatusArg) -> Status {
        match status {
            StatusArg::Pending => Status::Pending,
            StatusArg::Claimed => Status::Claimed,
            StatusArg::Delivered => Status::Delivered,
            StatusArg::Suppressed => Status::Suppressed,
            StatusArg::Dead => Status::Dead,
        }
    }
}

/// An operator's action, for `retry` and `resend`.
#[derive(Debug, clap::Args)]
pub struct ActionArgs {
    /// Why (recorded in the audit table and the journal; free text lifts nothing).
    #[arg(long)]
    reason: String,
    /// Who asks for it (recorded in the audit table and the journal).
    #[arg(long)]
    approved_by: String,
    /// A signed approval file (`replaysafe approve`) that lifts a replay's or a stale row's suppression: stored whole in the rows and checked again by the worker against its REPLAYSAFE_TRUSTED_APPROVERS. Without one, such rows are suppressed again at delivery.
    #[arg(long = "opt-in", value_name = "FILE")]
    opt_in: Option<PathBuf>,
    /// The journal the action is recorded in (default: REPLAYSAFE_JOURNAL).
    #[arg(long)]
    journal: Option<PathBuf>,
}

/// The outbox subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum OutboxCommand {
    /// Run a delivery worker until SIGINT or SIGTERM (or, with --drain, until nothing is due).
    #[command(
        after_help = "Routes come from a JSON file; secrets come from environment variables named there, never from the file.\n\nExample routes.json:\n  {\"routes\": {\n    \"partner_webhook\": {\"kind\": \"webhook\", \"url\": \"https://partner.example/hooks\", \"secret_env\": \"PARTNER_SECRET\"},\n    \"reports\": {\"kind\": \"email\", \"smtp\": \"smtp://mail.internal:587\", \"starttls\": true, \"user\": \"reports\", \"password_env\": \"SMTP_PASSWORD\"}\n  }}\n\nExample:\n  REPLAYSAFE_JOURNAL=worker.jsonl replaysafe outbox work --database postgres://outbox@db:5432/pipelines --routes routes.json --in-flight 8"
    )]
    Work {
        /// The routes file (JSON; also REPLAYSAFE_OUTBOX_ROUTES, which Python's outbox.stage reads too).
        #[arg(long, env = "REPLAYSAFE_OUTBOX_ROUTES")]
        routes: PathBuf,
        /// The journal (default: REPLAYSAFE_JOURNAL).
        #[arg(long)]
        journal: Option<PathBuf>,
        /// Deliveries in flight at once.
        #[arg(long, default_value_t = 1)]
        in_flight: usize,
        /// Rows claimed at once.
        #[arg(long, default_value_t = replaysafe_outbox::DEFAULT_BATCH)]
        batch: u32,
        /// How long a claim holds, in seconds.
        #[arg(long, default_value_t = 60)]
        lease_secs: u64,
        /// The longest pause when nothing is due, in milliseconds (PostgreSQL wakes sooner).
        #[arg(long, default_value_t = 500)]
        poll_ms: u64,
        /// Work until nothing is due, then exit.
        #[arg(long)]
        drain: bool,
        /// Deliver nothing and change no row: journal what each due row would send, then exit (also REPLAYSAFE_MODE=dry-run).
        #[arg(long)]
        dry_run: bool,
        /// Serve the queue's metrics at http://ADDR/metrics (Prometheus text format) while the worker runs, e.g. 127.0.0.1:9464.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
    },
    /// Create the outbox tables, or migrate them to this version's schema (workers do it too; the other commands never do).
    Init,
    /// Counts by status, route and pipeline; the oldest pending row's age; rows in doubt.
    Status {
        /// Output format (prometheus: the queue's metrics in the Prometheus text format).
        #[arg(long, value_enum, default_value_t)]
        format: StatusFormat,
    },
    /// Rows of one status, oldest first (no effect bodies; targets as redacted at staging).
    List {
        /// Which rows.
        #[arg(long, value_enum)]
        status: StatusArg,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Output,
    },
    /// Put dead rows back to pending, audited and journaled.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["keys", "all"])))]
    Retry {
        /// A dead row's idempotency key (repeatable).
        #[arg(long = "key")]
        keys: Vec<String>,
        /// Every dead row.
        #[arg(long)]
        all: bool,
        /// Who asks, why, and the approval that lifts a replay's or stale row.
        #[command(flatten)]
        action: ActionArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Output,
    },
    /// Send delivered (or suppressed) rows again, audited and journaled; a replay's or stale row needs a signed approval file (--opt-in).
    Resend {
        /// The row's idempotency key (repeatable).
        #[arg(long = "key", required = true)]
        keys: Vec<String>,
        /// Who asks, why, and the approval that lifts a replay's or stale row.
        #[command(flatten)]
        action: ActionArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Output,
    },
    /// Delete delivered rows delivered longer ago than --older-than (a purged key could be staged and sent again, so never sooner than the longest max age in force).
    Purge {
        /// How long ago a row must have been delivered (default 7d; never shorter than the longest max age in force, REPLAYSAFE_MAX_AGE included).
        #[arg(long, value_name = "DURATION", default_value = "7d")]
        older_than: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Output,
    },
}

/// An opened outbox of either backend.
#[derive(Clone, Debug)]
enum Database {
    Sqlite(SqliteOutbox),
    Postgres(PostgresOutbox),
}

/// How a command opens the outbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Create or migrate the schema (`work`, `init`).
    Migrate,
    /// An existing outbox, to change rows (`retry`, `resend`, `purge`).
    Existing,
    /// An existing outbox, only read (`status`, `list`): nothing is created or changed.
    ReadOnly,
}

impl Database {
    async fn open(text: &str, pool_size: usize, access: Access) -> anyhow::Result<Self> {
        if let Some(path) = text.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                bail!("--database: sqlite: needs a path, as in sqlite:outbox.db");
            }
            let outbox = match access {
                Access::Migrate => SqliteOutbox::open(path),
                Access::Existing => SqliteOutbox::open_existing(path),
                Access::ReadOnly => SqliteOutbox::open_read_only(path),
            }
            .map_err(|e| anyhow!("--database: {}", replaysafe_core::error_chain(&e)))?;
            return Ok(Database::Sqlite(outbox));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            // Errors name the database without its password or query.
            let (config, shown) =
                crate::journals::postgres_config(text).map_err(|e| anyhow!("--database: {e}"))?;
            let mut builder = PostgresOutbox::builder(config).pool_size(pool_size);
            if access != Access::Migrate {
                builder = builder.existing_schema();
            }
            let outbox = builder
                .connect()
                .await
                .map_err(|e| anyhow!("--database {shown}: {}", replaysafe_core::error_chain(&e)))?;
            return Ok(Database::Postgres(outbox));
        }
        bail!("--database: expected sqlite:PATH or postgres://USER@HOST:PORT/DB")
    }

    fn store(&self) -> &dyn OutboxStore {
        match self {
            Database::Sqlite(outbox) => outbox,
            Database::Postgres(outbox) => outbox,
        }
    }
}

/// Runs an outbox subcommand; the exit code is 0 unless it says otherwise.
pub fn run(args: OutboxArgs) -> anyhow::Result<std::process::ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: OutboxArgs) -> anyhow::Result<std::process::ExitCode> {
    let database = args.database.ok_or_else(|| {
        anyhow!(
            "--database: required (sqlite:PATH or postgres://…), or set REPLAYSAFE_OUTBOX_DATABASE"
        )
    })?;
    let dry_run = match &args.command {
        OutboxCommand::Work { dry_run, .. } => *dry_run || dry_run_from_env()?,
        _ => false,
    };
    let (pool_size, access) = match &args.command {
        // A dry run changes nothing, not even the schema.
        OutboxCommand::Work { .. } if dry_run => (2, Access::Existing),
        OutboxCommand::Work { in_flight, .. } => ((*in_flight + 1).max(2), Access::Migrate),
        OutboxCommand::Init => (1, Access::Migrate),
        OutboxCommand::Status { .. } | OutboxCommand::List { .. } => (2, Access::ReadOnly),
        _ => (2, Access::Existing),
    };
    if matches!(args.command, OutboxCommand::Work { .. }) {
        // Before the database is touched: a refused worker changes nothing.
        refuse_replay_environment(dry_run)?;
    }
    let db = Database::open(&database, pool_size, access).await?;
    let store = db.store();
    let now = Utc::now();
    match args.command {
        OutboxCommand::Work {
            routes,
            journal,
            in_flight,
            batch,
            lease_secs,
            poll_ms,
            drain,
            metrics_addr,
            ..
        } => {
            let journal = open_journal(journal.as_deref())?;
            let config = RoutesFile::read(&routes)
                .map_err(|e| anyhow!("--routes: {}", replaysafe_core::error_chain(&e)))?;
            let mut builder = match &db {
                Database::Sqlite(outbox) => Worker::builder(outbox.clone()),
                Database::Postgres(outbox) => Worker::builder(outbox.clone()),
            }
            .journal(journal.clone());
            if let Some(trusted) = trusted_approvers_from_env()? {
                builder = builder.trusted_approvers(trusted);
            }
            let builder = config.add_to(builder, &journal).map_err(|e| match &e {
                RoutesError::Config {
                    route,
                    field,
                    source,
                } => {
                    let file = routes.display();
                    let place = match field {
                        Some(field) => format!("--routes: {file}: route {route}: {field}"),
                        None => format!("--routes: {file}: route {route}"),
                    };
                    crate::send::config_error(place, field.as_deref(), source.as_ref())
                }
                _ => anyhow!("--routes: {e}"),
            })?;
            let worker = builder
                .in_flight(in_flight)
                .batch_size(batch)
                .lease(Duration::from_secs(lease_secs))
                .poll_interval(Duration::from_millis(poll_ms))
                .build()
                .map_err(|e| anyhow!("--routes: {}", replaysafe_core::error_chain(&e)))?;
            if dry_run {
                let stats = worker
                    .dry_run()
                    .await
                    .map_err(|e| anyhow!("{}", replaysafe_core::error_chain(&e)))?;
                replaysafe_core::Journal::flush(&*journal)?;
                eprintln!(
                    "replaysafe: outbox dry run: {} due rows journaled as they would be sent ({} would be dead-lettered); nothing was delivered or changed",
                    stats.suppressed, stats.dead
                );
                return Ok(std::process::ExitCode::SUCCESS);
            }
            let worker = Arc::new(worker);
            if let Some(address) = metrics_addr {
                let store: Arc<dyn replaysafe_outbox::OutboxStore> = match &db {
                    Database::Sqlite(outbox) => Arc::new(outbox.clone()),
                    Database::Postgres(outbox) => Arc::new(outbox.clone()),
                };
                crate::outbox_metrics::serve(address, store, worker.clone()).await?;
            }
            let stats = if drain {
                worker
                    .drain()
                    .await
                    .map_err(|e| anyhow!("{}", replaysafe_core::error_chain(&e)))?
            } else {
                eprintln!(
                    "replaysafe: outbox worker on {}; SIGINT or SIGTERM stops it",
                    describe(&db)
                );
                worker
                    .run_until_signal()
                    .await
                    .map_err(|e| anyhow!("{}", replaysafe_core::error_chain(&e)))?
            };
            replaysafe_core::Journal::flush(&*journal)?;
            eprintln!(
                "replaysafe: outbox worker stopped cleanly: {} claimed, {} delivered, {} suppressed, {} retried, {} dead, {} stale completions, {} released",
                stats.claimed,
                stats.delivered,
                stats.suppressed,
                stats.retried,
                stats.dead,
                stats.stale_completions,
                stats.released
            );
        }
        OutboxCommand::Init => {
            eprintln!(
                "replaysafe: the outbox in {} is at schema version {}",
                describe(&db),
                replaysafe_outbox::sqlite::SCHEMA_VERSION
            );
        }
        OutboxCommand::Status {
            format: StatusFormat::Prometheus,
        } => {
            let queue = crate::outbox_metrics::Queue::read(store).await?;
            print!("{}", queue.exposition());
        }
        OutboxCommand::Status { format } => {
            let spinner = spinner("counting rows");
            let counts = store.counts().await.map_err(chain)?;
            let oldest = store.oldest_pending_age(now).await.map_err(chain)?;
            let in_doubt = store.in_doubt(now).await.map_err(chain)?;
            let counters = store.counters().await.map_err(chain)?;
            let circuits = store.circuits().await.map_err(chain)?;
            let in_key_order = store.waiting_in_key_order().await.map_err(chain)?;
            spinner.finish_and_clear();
            let mut by_status: BTreeMap<&str, u64> =
                Status::ALL.iter().map(|s| (s.as_str(), 0)).collect();
            for count in &counts {
                *by_status.entry(count.status.as_str()).or_default() += count.rows;
            }
            // (`Prometheus` is the arm above.)
            if format == StatusFormat::Json {
                let value = serde_json::json!({
                    "database": describe(&db),
                    "by_status": by_status,
                    "counts": counts.iter().map(|c| serde_json::json!({
                        "status": c.status.as_str(), "route": c.route,
                        "pipeline": c.pipeline, "rows": c.rows,
                    })).collect::<Vec<_>>(),
                    "oldest_pending_age_seconds": oldest.map(|age| age.as_secs()),
                    "in_doubt": in_doubt,
                    "stale_completions": counters.stale_completions,
                    "reclaimed": counters.reclaimed,
                    "waiting_in_key_order": in_key_order,
                    "circuits": circuits.iter().map(|c| serde_json::json!({
                        "route": c.route,
                        "state": if c.open { "open" } else { "closed" },
                        "failures": c.failures,
                        "opened_at": c.opened_at.map(replaysafe_core::rfc3339),
                        "next_probe_at": c.next_probe_at.map(replaysafe_core::rfc3339),
                        "updated_at": replaysafe_core::rfc3339(c.updated_at),
                    })).collect::<Vec<_>>(),
                });
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                println!("outbox {}", safe(&describe(&db)));
                let mut table = comfy_table::Table::new();
                table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
                table.set_header(["status", "route", "pipeline", "rows"]);
                for c in &counts {
                    table.add_row([
                        c.status.as_str().to_owned(),
                        safe(&c.route),
                        safe(&c.pipeline),
                        c.rows.to_string(),
                    ]);
                }
                println!("{table}");
                let totals: Vec<String> = by_status
                    .iter()
                    .map(|(status, rows)| format!("{status} {rows}"))
                    .collect();
                println!("totals: {}", totals.join(", "));
                println!(
                    "oldest pending: {}",
                    oldest.map_or("none".to_owned(), |age| format!("{} s", age.as_secs()))
                );
                println!(
                    "in doubt: {in_doubt} (claimed, lease over: a delivery may have been made; the next claim asks the journal, and a receiver that cannot drop a repeat gets nothing until a resend)"
                );
                println!(
                    "stale completions rejected: {}, rows reclaimed: {}",
                    counters.stale_completions, counters.reclaimed
                );
                if in_key_order > 0 {
                    println!(
                        "waiting in key order: {in_key_order} (pending rows behind an earlier row of their ordering key, claimed or pending)"
                    );
                }
                for c in &circuits {
                    let at = |time: Option<chrono::DateTime<chrono::Utc>>| {
                        time.map_or("?".to_owned(), replaysafe_core::rfc3339)
                    };
                    if c.open {
                        println!(
                            "circuit {}: open since {} after {} consecutive failures; its rows wait; next probe {}",
                            safe(&c.route),
                            at(c.opened_at),
                            c.failures,
                            at(c.next_probe_at)
                        );
                    } else if c.failures > 0 {
                        println!(
                            "circuit {}: closed; {} consecutive transient failures so far",
                            safe(&c.route),
                            c.failures
                        );
                    } else {
                        println!(
                            "circuit {}: closed since {}",
                            safe(&c.route),
                            replaysafe_core::rfc3339(c.updated_at)
                        );
                    }
                }
            }
        }
        OutboxCommand::List {
            status,
            limit,
            format,
        } => {
            let rows = store.list(status.into(), limit).await.map_err(chain)?;
            print_rows(&rows, format)?;
        }
        OutboxCommand::Retry {
            keys,
            all,
            action,
            format,
        } => {
            let (operator, journal, trusted) = action.parse(now)?;
            let spinner = spinner("retrying dead rows");
            let selected = (!all).then_some(keys.as_slice());
            let rows = store
                .retry_dead(selected, &operator, now)
                .await
                .map_err(chain)?;
            spinner.finish_and_clear();
            operator
                .journal(
                    &*journal,
                    OperatorCommand::Retry,
                    &rows,
                    trusted.as_ref(),
                    now,
                )
                .context("journaling the retry")?;
            let missing = if all {
                Vec::new()
            } else {
                missing_keys(store, &keys, &rows).await?
            };
            report_changed("retried", rows.len() as u64, format)?;
            if !missing.is_empty() {
                return not_reopened(&missing, "dead");
            }
        }
        OutboxCommand::Resend {
            keys,
            action,
            format,
        } => {
            let (operator, journal, trusted) = action.parse(now)?;
            let spinner = spinner("reopening rows");
            let rows = store.resend(&keys, &operator, now).await.map_err(chain)?;
            spinner.finish_and_clear();
            operator
                .journal(
                    &*journal,
                    OperatorCommand::Resend,
                    &rows,
                    trusted.as_ref(),
                    now,
                )
                .context("journaling the resend")?;
            let missing = missing_keys(store, &keys, &rows).await?;
            report_changed("resent", rows.len() as u64, format)?;
            if !missing.is_empty() {
                return not_reopened(&missing, "delivered or suppressed");
            }
        }
        OutboxCommand::Purge { older_than, format } => {
            let older_than = purge_age(&older_than)?;
            let spinner = spinner("purging delivered rows");
            let purged = store
                .purge_delivered(older_than, now)
                .await
                .map_err(|e| match e {
                    replaysafe_outbox::OutboxError::Invalid { reason, .. } => {
                        anyhow!("--older-than: {reason}")
                    }
                    other => chain(other),
                })?;
            spinner.finish_and_clear();
            report_changed("purged", purged, format)?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The keys an operator named that no row took: unknown, or in another status.
async fn missing_keys(
    store: &dyn OutboxStore,
    keys: &[String],
    changed: &[RowSummary],
) -> anyhow::Result<Vec<(String, Option<Status>)>> {
    let mut missing = Vec::new();
    for key in keys {
        if changed.iter().any(|row| &row.key == key) || missing.iter().any(|(k, _)| k == key) {
            continue;
        }
        let status = store.get(key).await.map_err(chain)?.map(|row| row.status);
        missing.push((key.clone(), status));
    }
    Ok(missing)
}

/// Says which keys were left alone, and exits 1.
fn not_reopened(
    missing: &[(String, Option<Status>)],
    wanted: &str,
) -> anyhow::Result<std::process::ExitCode> {
    for (key, status) in missing {
        match status {
            None => eprintln!(
                "replaysafe: --key {}: no outbox row has this key",
                safe(key)
            ),
            Some(status) => eprintln!(
                "replaysafe: --key {}: the row is {status}, not {wanted}; left alone",
                safe(key)
            ),
        }
    }
    Ok(std::process::ExitCode::from(1))
}

/// `--older-than`, checked against the longest max age in force here (the defaults and
/// REPLAYSAFE_MAX_AGE); the store checks it against the rows' own max ages too.
fn purge_age(text: &str) -> anyhow::Result<Duration> {
    let age = crate::duration::parse(text)
        .ok()
        .and_then(|age| age.to_std().ok())
        .ok_or_else(|| anyhow!("--older-than: expected a duration such as 7d or 30d"))?;
    let mut policy = RecencyPolicy::default();
    if let Some(text) = std::env::var_os(replaysafe_core::env::vars::MAX_AGE) {
        let text = text
            .into_string()
            .map_err(|_| anyhow!("REPLAYSAFE_MAX_AGE: not valid UTF-8"))?;
        policy = policy
            .with_max_ages(replaysafe_core::env::vars::MAX_AGE, &text)
            .map_err(|e| anyhow!("{e}"))?;
    }
    let longest = policy.longest_max_age() + policy.clock_skew();
    if chrono::TimeDelta::from_std(age).unwrap_or(chrono::TimeDelta::MAX) < longest {
        bail!(
            "--older-than: {text} is shorter than the longest max age in force plus clock skew ({} s): \
             a purged key could be staged again by a current run and sent twice",
            longest.num_seconds()
        );
    }
    Ok(age)
}

/// Whether REPLAYSAFE_MODE asks for a dry run.
fn dry_run_from_env() -> anyhow::Result<bool> {
    match std::env::var_os(replaysafe_core::env::vars::MODE) {
        None => Ok(false),
        Some(value) => match value.to_str().map(str::trim) {
            Some("" | "live") => Ok(false),
            Some("dry-run") => Ok(true),
            _ => bail!("REPLAYSAFE_MODE: expected live or dry-run"),
        },
    }
}

/// A worker delivers each row on the row's own context; an environment that says this
/// process is a replay would have it deliver a replay's rows as if current, so it is
/// refused, unless the worker only dry-runs.
fn refuse_replay_environment(dry_run: bool) -> anyhow::Result<()> {
    if dry_run {
        return Ok(());
    }
    use replaysafe_core::env::vars;
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
    };
    let said = if let Some(flag) = var(vars::REPLAY)
        .filter(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0" | "no"))
    {
        Some(format!("{}={flag}", vars::REPLAY))
    } else if let Some(kind) = var(vars::RUN_KIND).filter(|kind| {
        kind.parse::<replaysafe_core::RunKind>()
            .map_or(true, |k| k.suppresses())
    }) {
        Some(format!("{}={kind}", vars::RUN_KIND))
    } else if var(vars::AIRFLOW_DAG_RUN_ID).is_some_and(|id| id.starts_with("backfill__"))
        || var(vars::AIRFLOW_RUN_TYPE).is_some_and(|t| t == "backfill")
    {
        Some("an Airflow backfill run".to_owned())
    } else {
        None
    };
    match said {
        Some(said) => bail!(
            "outbox work: this worker's environment says replay ({said}); a worker decides each row on the row's own context, \
             so its environment cannot make a row a replay or current. Unset it, or pass --dry-run to journal what the due rows would send without delivering"
        ),
        None => Ok(()),
    }
}

/// REPLAYSAFE_TRUSTED_APPROVERS, as `send` reads it: set but blank is an error.
fn trusted_approvers_from_env() -> anyhow::Result<Option<TrustedApprovers>> {
    let name = replaysafe_core::env::vars::TRUSTED_APPROVERS;
    match std::env::var_os(name) {
        None => Ok(None),
        Some(path) if path.to_str().is_some_and(|p| p.trim().is_empty()) => {
            bail!("{name}: set but empty; name the trusted-approvers file, or unset it")
        }
        Some(path) => TrustedApprovers::read_file(&path)
            .map(Some)
            .map_err(|e| anyhow!("{name}: {}", replaysafe_core::error_chain(&e))),
    }
}

/// Text from a row, safe to print on a terminal (the escaping `report` uses).
fn safe(text: &str) -> String {
    escape(text, Format::Table).into_owned()
}

fn chain(error: replaysafe_outbox::OutboxError) -> anyhow::Error {
    anyhow!("{}", replaysafe_core::error_chain(&error))
}

fn describe(db: &Database) -> String {
    match db {
        Database::Sqlite(outbox) => format!("sqlite:{}", outbox.path().display()),
        Database::Postgres(outbox) => outbox.database().to_owned(),
    }
}

/// A spinner on stderr while a long operation runs, when stderr is a terminal.
fn spinner(what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

fn report_changed(what: &str, rows: u64, format: Output) -> anyhow::Result<()> {
    match format {
        Output::Json => println!("{}", serde_json::json!({ what: rows })),
        Output::Table => println!("{what} {rows} rows"),
    }
    Ok(())
}

fn print_rows(rows: &[RowSummary], format: Output) -> anyhow::Result<()> {
    match format {
        Output::Json => {
            let rows: Vec<_> = rows
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "key": r.key, "route": r.route, "pipeline": r.pipeline,
                        "run_id": r.run_id, "run_kind": r.run_kind, "backfill_id": r.backfill_id,
                        "effect_kind": r.effect_kind, "message_type": r.message_type,
                        "target": r.target, "window_start": r.window_start,
                        "window_end": r.window_end, "status": r.status.as_str(),
                        "reasons": r.reasons, "attempts": r.attempts,
                        "last_error": r.last_error,
                        "changed_after_delivery": r.changed_after_delivery,
                        "has_opt_in": r.has_opt_in,
                        "ordering_key": r.ordering_key,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Output::Table => {
            let mut table = comfy_table::Table::new();
            table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
            // The ordering key's column only when a row has one.
            let keyed = rows.iter().any(|r| r.ordering_key.is_some());
            let mut header = vec![
                "key",
                "route",
                "kind",
                "message type",
                "target",
                "window",
                "attempts",
                "last error",
            ];
            if keyed {
                header.push("ordering key");
            }
            table.set_header(header);
            for r in rows {
                let mut cells = vec![
                    safe(&r.key),
                    safe(&r.route),
                    safe(&r.effect_kind),
                    safe(&r.message_type),
                    safe(&r.target),
                    safe(&format!("{} .. {}", r.window_start, r.window_end)),
                    r.attempts.to_string(),
                    safe(r.last_error.as_deref().unwrap_or_default()),
                ];
                if keyed {
                    cells.push(safe(r.ordering_key.as_deref().unwrap_or_default()));
                }
                table.add_row(cells);
            }
            println!("{table}");
            println!("{} rows", rows.len());
        }
    }
    Ok(())
}

impl ActionArgs {
    /// The action, the journal it is recorded in, and the trusted approvers. An approval
    /// file that does not verify, has expired, or (with trusted approvers configured) is
    /// not signed by one of them is refused here: the worker would refuse it anyway.
    fn parse(
        &self,
        now: DateTime<Utc>,
    ) -> anyhow::Result<(OperatorAction, Arc<dyn Journal>, Option<TrustedApprovers>)> {
        let flag = |e: replaysafe_outbox::OutboxError| match e {
            replaysafe_outbox::OutboxError::Invalid { field, reason } => {
                anyhow!("--{}: {reason}", field.replace('_', "-"))
            }
            other => anyhow!("{other}"),
        };
        let mut action = OperatorAction::new(&self.reason, &self.approved_by).map_err(flag)?;
        let trusted = trusted_approvers_from_env()?;
        if let Some(path) = &self.opt_in {
            let opt_in = OptIn::read_file(path)
                .map_err(|e| anyhow!("--opt-in: {}", replaysafe_core::error_chain(&e)))?;
            if opt_in.has_bad_signature() {
                bail!(
                    "--opt-in: {}: its signature does not match what it says (changed after signing)",
                    path.display()
                );
            }
            if let Some(trusted) = &trusted
                && trusted.name_of(&opt_in).is_none()
            {
                bail!(
                    "--opt-in: {}: not signed by a trusted approver (REPLAYSAFE_TRUSTED_APPROVERS)",
                    path.display()
                );
            }
            if opt_in.is_expired(now) {
                bail!("--opt-in: {}: the approval has expired", path.display());
            }
            action = action.with_opt_in(opt_in).map_err(flag)?;
        }
        let journal = open_journal(self.journal.as_deref())?;
        Ok((action, journal, trusted))
    }
}

fn open_journal(path: Option<&Path>) -> anyhow::Result<Arc<dyn Journal>> {
    let path = path
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("REPLAYSAFE_JOURNAL").map(PathBuf::from))
        .ok_or_else(|| {
            anyhow!(
                "no journal: set REPLAYSAFE_JOURNAL or pass --journal (every decision is journaled)"
            )
        })?;
    crate::journals::open(&path, "the journal")
}
