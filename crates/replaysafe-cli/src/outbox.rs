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
use replaysafe_core::{EnvVarName, JsonlJournal};
use replaysafe_outbox::postgres::PostgresOutbox;
use replaysafe_outbox::sqlite::SqliteOutbox;
use replaysafe_outbox::{Approval, OutboxStore, RowSummary, Status, Worker, WorkerBuilder};
use secrecy::SecretString;
use serde::Deserialize;

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

/// An operator's approval, for `retry` and `resend`.
#[derive(Debug, clap::Args)]
pub struct ApprovalArgs {
    /// Why (recorded in the audit table and, as the rows' opt-in, in the delivery's journal record).
    #[arg(long)]
    reason: String,
    /// Who approved.
    #[arg(long)]
    approved_by: String,
    /// When the approval stops enabling anything: a duration from now (`2h`) or an RFC 3339 time.
    #[arg(long, value_name = "DURATION|RFC3339")]
    expires: String,
}

/// The outbox subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum OutboxCommand {
    /// Run a delivery worker until SIGINT or SIGTERM (or, with --drain, until nothing is due).
    #[command(
        after_help = "Routes come from a JSON file; secrets come from environment variables named there, never from the file.\n\nExample routes.json:\n  {\"routes\": {\n    \"partner_webhook\": {\"kind\": \"webhook\", \"url\": \"https://partner.example/hooks\", \"secret_env\": \"PARTNER_SECRET\"},\n    \"reports\": {\"kind\": \"email\", \"smtp\": \"smtp://mail.internal:587\", \"starttls\": true, \"user\": \"reports\", \"password_env\": \"SMTP_PASSWORD\"}\n  }}\n\nExample:\n  REPLAYSAFE_JOURNAL=worker.jsonl replaysafe outbox work --database postgres://outbox@db:5432/pipelines --routes routes.json --in-flight 8"
    )]
    Work {
        /// The routes file (JSON).
        #[arg(long)]
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
    },
    /// Counts by status, route and pipeline; the oldest pending row's age; rows in doubt.
    Status {
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Output,
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
    /// Put dead rows back to pending, audited.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["keys", "all"])))]
    Retry {
        /// A dead row's idempotency key (repeatable).
        #[arg(long = "key")]
        keys: Vec<String>,
        /// Every dead row.
        #[arg(long)]
        all: bool,
        /// Who approved it, why, and until when.
        #[command(flatten)]
        approval: ApprovalArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Output,
    },
    /// Send delivered (or suppressed) rows again, audited: the approval is their opt-in.
    Resend {
        /// The row's idempotency key (repeatable).
        #[arg(long = "key", required = true)]
        keys: Vec<String>,
        /// Who approved it, why, and until when.
        #[command(flatten)]
        approval: ApprovalArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Output,
    },
    /// Delete delivered rows delivered before a cut-off.
    Purge {
        /// A duration before now (`30d`) or an RFC 3339 time.
        #[arg(long, value_name = "DURATION|RFC3339")]
        delivered_before: String,
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

impl Database {
    async fn open(text: &str, pool_size: usize) -> anyhow::Result<Self> {
        if let Some(path) = text.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                bail!("--database: sqlite: needs a path, as in sqlite:outbox.db");
            }
            let outbox =
                SqliteOutbox::open(path).with_context(|| format!("--database: opening {path}"))?;
            return Ok(Database::Sqlite(outbox));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            let mut config = replaysafe_outbox::postgres::parse_url(text)
                .map_err(|e| anyhow!("--database: {e}"))?;
            if config.get_password().is_none()
                && let Ok(password) = std::env::var("PGPASSWORD")
            {
                config.password(password);
            }
            // Errors name the database without its password or query.
            let shown = url::Url::parse(text)
                .map(|mut url| {
                    let _ = url.set_password(None);
                    url.set_query(None);
                    url.to_string()
                })
                .unwrap_or_else(|_| "postgres://…".to_owned());
            let outbox = PostgresOutbox::builder(config)
                .pool_size(pool_size)
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
    let pool_size = match &args.command {
        OutboxCommand::Work { in_flight, .. } => (*in_flight + 1).max(2),
        _ => 2,
    };
    let db = Database::open(&database, pool_size).await?;
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
        } => {
            let journal = open_journal(journal.as_deref())?;
            let config = RoutesFile::read(&routes)?;
            let builder = match &db {
                Database::Sqlite(outbox) => Worker::builder(outbox.clone()),
                Database::Postgres(outbox) => Worker::builder(outbox.clone()),
            };
            let builder = config.add_to(builder, &journal)?;
            let worker = builder
                .in_flight(in_flight)
                .batch_size(batch)
                .lease(Duration::from_secs(lease_secs))
                .poll_interval(Duration::from_millis(poll_ms))
                .build()
                .map_err(|e| anyhow!("--routes: {}", replaysafe_core::error_chain(&e)))?;
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
        OutboxCommand::Status { format } => {
            let spinner = spinner("counting rows");
            let counts = store.counts().await.map_err(chain)?;
            let oldest = store.oldest_pending_age(now).await.map_err(chain)?;
            let in_doubt = store.in_doubt(now).await.map_err(chain)?;
            let counters = store.counters().await.map_err(chain)?;
            spinner.finish_and_clear();
            let mut by_status: BTreeMap<&str, u64> =
                Status::ALL.iter().map(|s| (s.as_str(), 0)).collect();
            for count in &counts {
                *by_status.entry(count.status.as_str()).or_default() += count.rows;
            }
            match format {
                Output::Json => {
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
                    });
                    println!("{}", serde_json::to_string_pretty(&value)?);
                }
                Output::Table => {
                    println!("outbox {}", describe(&db));
                    let mut table = comfy_table::Table::new();
                    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
                    table.set_header(["status", "route", "pipeline", "rows"]);
                    for c in &counts {
                        table.add_row([
                            c.status.as_str().to_owned(),
                            c.route.clone(),
                            c.pipeline.clone(),
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
                        "in doubt: {in_doubt} (claimed, lease over: a delivery may have been made; the row will be reclaimed and sent again under its key)"
                    );
                    println!(
                        "stale completions rejected: {}, rows reclaimed: {}",
                        counters.stale_completions, counters.reclaimed
                    );
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
            approval,
            format,
        } => {
            let approval = approval.parse(now)?;
            let spinner = spinner("retrying dead rows");
            let keys = (!all).then_some(keys.as_slice());
            let changed = store
                .retry_dead(keys, &approval, now)
                .await
                .map_err(chain)?;
            spinner.finish_and_clear();
            report_changed("retried", changed, format)?;
        }
        OutboxCommand::Resend {
            keys,
            approval,
            format,
        } => {
            let approval = approval.parse(now)?;
            let spinner = spinner("reopening rows");
            let changed = store.resend(&keys, &approval, now).await.map_err(chain)?;
            spinner.finish_and_clear();
            if changed < keys.len() as u64 {
                eprintln!(
                    "replaysafe: {} of {} keys were not delivered or suppressed rows and were left alone",
                    keys.len() as u64 - changed,
                    keys.len()
                );
            }
            report_changed("resent", changed, format)?;
        }
        OutboxCommand::Purge {
            delivered_before,
            format,
        } => {
            let cutoff = time_or_duration("--delivered-before", &delivered_before, now, -1)?;
            let spinner = spinner("purging delivered rows");
            let purged = store.purge_delivered(cutoff).await.map_err(chain)?;
            spinner.finish_and_clear();
            report_changed("purged", purged, format)?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
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
                        "effect_kind": r.effect_kind, "message_type": r.message_type,
                        "target": r.target, "window_start": r.window_start,
                        "window_end": r.window_end, "status": r.status.as_str(),
                        "reasons": r.reasons, "attempts": r.attempts,
                        "last_error": r.last_error,
                        "changed_after_delivery": r.changed_after_delivery,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Output::Table => {
            let mut table = comfy_table::Table::new();
            table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
            table.set_header([
                "key",
                "route",
                "kind",
                "message type",
                "target",
                "window",
                "attempts",
                "last error",
            ]);
            for r in rows {
                table.add_row([
                    r.key.clone(),
                    r.route.clone(),
                    r.effect_kind.clone(),
                    r.message_type.clone(),
                    r.target.clone(),
                    format!("{} .. {}", r.window_start, r.window_end),
                    r.attempts.to_string(),
                    r.last_error.clone().unwrap_or_default(),
                ]);
            }
            println!("{table}");
            println!("{} rows", rows.len());
        }
    }
    Ok(())
}

impl ApprovalArgs {
    fn parse(&self, now: DateTime<Utc>) -> anyhow::Result<Approval> {
        let expires = time_or_duration("--expires", &self.expires, now, 1)?;
        if expires <= now {
            bail!("--expires: the approval would have expired already");
        }
        Approval::new(&self.reason, &self.approved_by, expires).map_err(|e| match e {
            replaysafe_outbox::OutboxError::Invalid { field, reason } => {
                anyhow!("--{}: {reason}", field.replace('_', "-"))
            }
            other => anyhow!("{other}"),
        })
    }
}

/// An RFC 3339 time, or a duration after (`sign` 1) or before (`sign` -1) now.
fn time_or_duration(
    flag: &str,
    text: &str,
    now: DateTime<Utc>,
    sign: i32,
) -> anyhow::Result<DateTime<Utc>> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text.trim()) {
        return Ok(time.with_timezone(&Utc));
    }
    let duration = crate::duration::parse(text).map_err(|_| {
        anyhow!("{flag}: expected a duration such as 2h or 30d, or an RFC 3339 time")
    })?;
    let moved = if sign < 0 {
        now.checked_sub_signed(duration)
    } else {
        now.checked_add_signed(duration)
    };
    moved.ok_or_else(|| anyhow!("{flag}: out of range"))
}

fn open_journal(path: Option<&Path>) -> anyhow::Result<Arc<JsonlJournal>> {
    let path = path
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("REPLAYSAFE_JOURNAL").map(PathBuf::from))
        .ok_or_else(|| {
            anyhow!(
                "no journal: set REPLAYSAFE_JOURNAL or pass --journal (every decision is journaled)"
            )
        })?;
    Ok(Arc::new(JsonlJournal::open(&path)?))
}

/// The routes file: route names mapped to how to reach them. Secrets are named by
/// environment variable (`…_env`); a field that would hold one is refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutesFile {
    /// Route name → route.
    pub routes: BTreeMap<String, RouteConfig>,
}

/// One route of the routes file.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RouteConfig {
    /// A webhook (reqwest), Standard Webhooks signed when `secret_env` is set.
    Webhook {
        /// The endpoint.
        url: String,
        /// Variable holding the Standard Webhooks signing secret.
        secret_env: Option<EnvVarName>,
        /// Plain headers; one that carries credentials (`Authorization`, ...) is refused:
        /// it goes in `secret_headers_env`.
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// Headers whose values are secrets: header name → variable.
        #[serde(default)]
        secret_headers_env: BTreeMap<String, EnvVarName>,
        /// Hosts, IPs or CIDRs allowed past the SSRF policy.
        #[serde(default)]
        allow_hosts: Vec<String>,
    },
    /// A downstream trigger: Airflow's REST API (`airflow`) or a URL (`url`).
    Trigger {
        /// Airflow's base URL.
        airflow: Option<String>,
        /// A trigger URL.
        url: Option<String>,
        /// Variable holding a bearer token.
        token_env: Option<EnvVarName>,
        /// Basic auth user, with `password_env`.
        user: Option<String>,
        /// Variable holding the basic auth password.
        password_env: Option<EnvVarName>,
        /// Hosts, IPs or CIDRs allowed past the SSRF policy.
        #[serde(default)]
        allow_hosts: Vec<String>,
    },
    /// Email over SMTP.
    Email {
        /// `smtp://HOST:PORT`.
        smtp: String,
        /// Require STARTTLS.
        #[serde(default)]
        starttls: bool,
        /// Login user, with `password_env`.
        user: Option<String>,
        /// Variable holding the SMTP password.
        password_env: Option<EnvVarName>,
        /// PEM file of a CA to trust.
        ca_file: Option<PathBuf>,
    },
    /// A partner file drop over SFTP.
    Sftp {
        /// Host.
        host: String,
        /// Port (22).
        port: Option<u16>,
        /// Login user.
        user: String,
        /// Private key file.
        key: PathBuf,
        /// Variable holding the key's passphrase.
        passphrase_env: Option<EnvVarName>,
        /// known_hosts file with the server's key.
        known_hosts: PathBuf,
        /// Remote folder.
        dir: String,
    },
    /// Alertmanager v2.
    Alertmanager {
        /// Base URL.
        url: String,
        /// Hosts, IPs or CIDRs allowed past the SSRF policy.
        #[serde(default)]
        allow_hosts: Vec<String>,
    },
    /// PagerDuty Events v2.
    Pagerduty {
        /// Variable holding the routing key.
        routing_key_env: EnvVarName,
        /// Events API base URL (default PagerDuty's).
        url: Option<String>,
        /// Hosts, IPs or CIDRs allowed past the SSRF policy.
        #[serde(default)]
        allow_hosts: Vec<String>,
    },
    /// A Slack incoming webhook.
    Slack {
        /// Variable holding the webhook URL (it is a secret).
        url_env: EnvVarName,
        /// Hosts, IPs or CIDRs allowed past the SSRF policy.
        #[serde(default)]
        allow_hosts: Vec<String>,
    },
    /// Prometheus Pushgateway.
    Pushgateway {
        /// Base URL.
        url: String,
        /// Basic auth user, with `password_env`.
        user: Option<String>,
        /// Variable holding the basic auth password.
        password_env: Option<EnvVarName>,
        /// Hosts, IPs or CIDRs allowed past the SSRF policy.
        #[serde(default)]
        allow_hosts: Vec<String>,
    },
    /// StatsD over UDP.
    Statsd {
        /// Host.
        host: String,
        /// Port.
        port: u16,
        /// Metric name prefix.
        prefix: Option<String>,
    },
}

fn secret(route: &str, field: &str, variable: &EnvVarName) -> anyhow::Result<SecretString> {
    variable
        .read()
        .map(SecretString::from)
        .map_err(|e| anyhow!("--routes: route {route}: {field}: {e}"))
}

/// Refuses, naming the route and the field and never quoting the value, every `…_env`
/// field (or map entry of one) that is not a variable name, and every plain `headers` entry
/// that carries credentials. Runs on the file's JSON before it is read into routes, so the
/// message can name the field, which the routes' own deserialization cannot.
fn check_secret_fields(file: &serde_json::Value) -> anyhow::Result<()> {
    let routes = file.get("routes").and_then(serde_json::Value::as_object);
    for (route, config) in routes.into_iter().flatten() {
        for (field, value) in config.as_object().into_iter().flatten() {
            if field.ends_with("_env") {
                let names: Vec<(String, &serde_json::Value)> = match value {
                    serde_json::Value::Object(map) => map
                        .iter()
                        .map(|(key, value)| (format!("{field}.{key}"), value))
                        .collect(),
                    other => vec![(field.clone(), other)],
                };
                for (at, name) in names {
                    if let Some(name) = name.as_str() {
                        EnvVarName::parse(format!("--routes: route {route}: {at}"), name)?;
                    }
                }
            }
            if field == "headers" {
                for name in value.as_object().into_iter().flatten().map(|(k, _)| k) {
                    if let Some(credential) = replaysafe_http::credential_header(name) {
                        bail!(
                            "--routes: route {route}: headers: {credential} carries credentials and is never \
                             written in the routes file: put its value in an environment variable and name \
                             it in secret_headers_env"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

fn policy(route: &str, hosts: &[String]) -> anyhow::Result<replaysafe_webhook::SsrfPolicy> {
    let mut policy = replaysafe_webhook::SsrfPolicy::default();
    for host in hosts {
        policy = policy
            .allow(host)
            .map_err(|e| anyhow!("--routes: route {route}: allow_hosts: {e}"))?;
    }
    Ok(policy)
}

impl RoutesFile {
    /// Reads and checks a routes file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--routes: reading {}", path.display()))?;
        let located = |e: serde_json::Error| {
            anyhow!(
                "--routes: {}: line {}, column {}: {}",
                path.display(),
                e.line(),
                e.column(),
                classify(&e)
            )
        };
        check_secret_fields(&serde_json::from_str(&text).map_err(located)?)?;
        let file: RoutesFile = serde_json::from_str(&text).map_err(located)?;
        if file.routes.is_empty() {
            bail!("--routes: {}: no routes", path.display());
        }
        Ok(file)
    }

    /// Adds a guarded client per route, journaling to `journal`.
    pub fn add_to(
        &self,
        mut builder: WorkerBuilder,
        journal: &Arc<JsonlJournal>,
    ) -> anyhow::Result<WorkerBuilder> {
        for (name, route) in &self.routes {
            let failed = |e: &(dyn std::error::Error + 'static)| {
                anyhow!(
                    "--routes: route {name}: {}",
                    replaysafe_core::error_chain(e)
                )
            };
            builder = match route {
                RouteConfig::Webhook {
                    url,
                    secret_env,
                    headers,
                    secret_headers_env,
                    allow_hosts,
                } => {
                    let mut client = replaysafe_webhook::WebhookClient::builder(url)
                        .ssrf_policy(policy(name, allow_hosts)?);
                    for (header, value) in headers {
                        client = client.header(header, value);
                    }
                    for (header, variable) in secret_headers_env {
                        client = client
                            .secret_header(header, secret(name, "secret_headers_env", variable)?);
                    }
                    if let Some(variable) = secret_env {
                        client = client.signing_secret(secret(name, "secret_env", variable)?);
                    }
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
                RouteConfig::Trigger {
                    airflow,
                    url,
                    token_env,
                    user,
                    password_env,
                    allow_hosts,
                } => {
                    let mut client = match (airflow, url) {
                        (Some(base), None) => replaysafe_webhook::TriggerClient::airflow(base),
                        (None, Some(url)) => replaysafe_webhook::TriggerClient::url(url),
                        _ => bail!(
                            "--routes: route {name}: a trigger has airflow or url, one of them"
                        ),
                    }
                    .ssrf_policy(policy(name, allow_hosts)?);
                    if let Some(variable) = token_env {
                        client = client.bearer_token(secret(name, "token_env", variable)?);
                    }
                    match (user, password_env) {
                        (Some(user), Some(variable)) => {
                            client =
                                client.basic_auth(user, secret(name, "password_env", variable)?);
                        }
                        (None, None) => {}
                        _ => bail!("--routes: route {name}: user and password_env go together"),
                    }
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
                RouteConfig::Email {
                    smtp,
                    starttls,
                    user,
                    password_env,
                    ca_file,
                } => {
                    use replaysafe_email::{EmailClient, TlsMode};
                    let url = url::Url::parse(smtp)
                        .ok()
                        .filter(|u| {
                            u.scheme() == "smtp"
                                && u.username().is_empty()
                                && u.password().is_none()
                        })
                        .ok_or_else(|| {
                            anyhow!("--routes: route {name}: smtp: expected smtp://HOST:PORT")
                        })?;
                    let host = url
                        .host_str()
                        .unwrap_or_default()
                        .trim_matches(['[', ']'])
                        .to_owned();
                    let port = url.port().ok_or_else(|| {
                        anyhow!("--routes: route {name}: smtp: expected smtp://HOST:PORT (no port)")
                    })?;
                    let mut client = EmailClient::smtp(&host, port).tls(if *starttls {
                        TlsMode::StartTls
                    } else {
                        TlsMode::Plaintext
                    });
                    match (user, password_env) {
                        (Some(user), Some(variable)) => {
                            client =
                                client.credentials(user, secret(name, "password_env", variable)?);
                        }
                        (None, None) => {}
                        _ => bail!("--routes: route {name}: user and password_env go together"),
                    }
                    if let Some(path) = ca_file {
                        let pem = std::fs::read(path).with_context(|| {
                            format!(
                                "--routes: route {name}: ca_file: reading {}",
                                path.display()
                            )
                        })?;
                        client = client.root_certificate_pem(pem);
                    }
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
                RouteConfig::Sftp {
                    host,
                    port,
                    user,
                    key,
                    passphrase_env,
                    known_hosts,
                    dir,
                } => {
                    let mut client = replaysafe_sftp::SftpClient::builder(host, user)
                        .port(port.unwrap_or(22))
                        .private_key(key)
                        .known_hosts(known_hosts)
                        .remote_dir(dir);
                    if let Some(variable) = passphrase_env {
                        client = client.passphrase(secret(name, "passphrase_env", variable)?);
                    }
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
                RouteConfig::Alertmanager { url, allow_hosts } => {
                    let client = replaysafe_alert::AlertmanagerClient::builder(url)
                        .ssrf_policy(policy(name, allow_hosts)?);
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
                RouteConfig::Pagerduty {
                    routing_key_env,
                    url,
                    allow_hosts,
                } => {
                    let mut client = replaysafe_alert::PagerDutyClient::builder(secret(
                        name,
                        "routing_key_env",
                        routing_key_env,
                    )?)
                    .ssrf_policy(policy(name, allow_hosts)?);
                    if let Some(url) = url {
                        client = client.base_url(url);
                    }
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
                RouteConfig::Slack {
                    url_env,
                    allow_hosts,
                } => {
                    let client =
                        replaysafe_alert::SlackClient::builder(secret(name, "url_env", url_env)?)
                            .ssrf_policy(policy(name, allow_hosts)?);
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
                RouteConfig::Pushgateway {
                    url,
                    user,
                    password_env,
                    allow_hosts,
                } => {
                    let mut client = replaysafe_metrics::PushgatewayClient::builder(url)
                        .ssrf_policy(policy(name, allow_hosts)?);
                    match (user, password_env) {
                        (Some(user), Some(variable)) => {
                            client =
                                client.basic_auth(user, secret(name, "password_env", variable)?);
                        }
                        (None, None) => {}
                        _ => bail!("--routes: route {name}: user and password_env go together"),
                    }
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
                RouteConfig::Statsd { host, port, prefix } => {
                    let mut client = replaysafe_metrics::StatsdClient::builder(host, *port);
                    if let Some(prefix) = prefix {
                        client = client.prefix(prefix);
                    }
                    builder.route(name, client.build(journal.clone()).map_err(|e| failed(&e))?)
                }
            };
        }
        Ok(builder)
    }
}

/// What is wrong with a routes file, without quoting its values.
fn classify(error: &serde_json::Error) -> String {
    let text = error.to_string();
    // serde's messages for unknown fields and variants name the field, not a value.
    if text.starts_with("unknown field")
        || text.starts_with("unknown variant")
        || text.starts_with("missing field")
    {
        return text
            .split(" at line")
            .next()
            .unwrap_or("invalid")
            .to_owned();
    }
    // EnvVarName's refusal never quotes the value (the fields are checked by name first).
    if text.starts_with(EnvVarName::NOT_A_NAME) {
        return EnvVarName::NOT_A_NAME.to_owned();
    }
    match error.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            "not valid JSON".to_owned()
        }
        _ => "a value has the wrong type".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_in_the_routes_file_is_refused_by_name_and_not_repeated() {
        let text = r#"{"routes": {"p": {"kind": "webhook", "url": "http://127.0.0.1/h", "secret": "hunter2"}}}"#;
        let error = serde_json::from_str::<RoutesFile>(text).unwrap_err();
        let shown = classify(&error);
        assert!(shown.contains("unknown field `secret`"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn every_route_kind_parses() {
        let text = r#"{"routes": {
            "w": {"kind": "webhook", "url": "http://127.0.0.1/h", "secret_env": "S", "allow_hosts": ["127.0.0.1"]},
            "t": {"kind": "trigger", "airflow": "http://127.0.0.1:8080", "token_env": "T"},
            "e": {"kind": "email", "smtp": "smtp://127.0.0.1:25"},
            "f": {"kind": "sftp", "host": "127.0.0.1", "user": "u", "key": "k", "known_hosts": "kh", "dir": "/in"},
            "a": {"kind": "alertmanager", "url": "http://127.0.0.1:9093"},
            "p": {"kind": "pagerduty", "routing_key_env": "R"},
            "s": {"kind": "slack", "url_env": "U"},
            "g": {"kind": "pushgateway", "url": "http://127.0.0.1:9091"},
            "d": {"kind": "statsd", "host": "127.0.0.1", "port": 8125}
        }}"#;
        let file: RoutesFile = serde_json::from_str(text).unwrap();
        assert_eq!(file.routes.len(), 9);
    }

    #[test]
    fn durations_and_times_are_read_both_ways() {
        let now = DateTime::parse_from_rfc3339("2026-08-06T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            time_or_duration("--x", "2h", now, 1).unwrap(),
            now + chrono::TimeDelta::hours(2)
        );
        assert_eq!(
            time_or_duration("--x", "1d", now, -1).unwrap(),
            now - chrono::TimeDelta::days(1)
        );
        assert_eq!(
            time_or_duration("--x", "2026-08-01T00:00:00Z", now, -1).unwrap(),
            DateTime::parse_from_rfc3339("2026-08-01T00:00:00Z").unwrap()
        );
        let error = time_or_duration("--x", "soon", now, 1)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("--x:"), "{error}");
    }
}
