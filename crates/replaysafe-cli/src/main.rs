//! The `replaysafe` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use chrono::{DateTime, SubsecRound, Utc};
use clap::{CommandFactory, Parser, Subcommand};
use replaysafe_cli::render::{Format, ReportFormat};
use replaysafe_cli::review::{Breakdown, FailOn, Progress};
use replaysafe_cli::{airflow_plan, approve, duration, journals, plan, send};
use replaysafe_core::{EffectKind, ReplayContext, RunKind, Window};
use replaysafe_review::{Reader, context, report};

/// Replay-safe side effects: report, diff and plan backfills; send through the gate.
#[derive(Debug, Parser)]
#[command(name = "replaysafe", version = VERSION, about, long_about = None, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Print the peak memory of this process on stderr when done.
    #[arg(long, global = true, hide = true)]
    print_peak_memory: bool,
}

/// `replaysafe --version`: the release and the journal schema version it writes
/// ([`replaysafe_core::journal::SCHEMA_VERSION`]; a test holds the two together).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (journal schema 1)");

const EXIT_CODES: &str = "\
Exit codes:
  0  success (for send: delivered or suppressed)
  1  a negative answer: diff found differences, report --fail-on found such an effect,
     send failed to deliver
  2  bad input, unreadable journal or another error (for send: nothing was sent)
  3  send made an attempt and could not journal its outcome: the journal shows the effect
     in doubt, and the message names the journal and the key";

/// The exit codes of every `send` subcommand, for their help.
macro_rules! send_exit_codes {
    () => {
        "Exit codes:\n  0  delivered or suppressed\n  1  a delivery was attempted and failed (the failure is journaled)\n  2  bad input, or a journal that cannot be opened or cannot record the attempt: nothing was sent\n  3  an attempt was made and its outcome (delivered or failed) could not be journaled: the journal\n     shows the effect in doubt; the message names the journal and the key to ask the receiver about"
    };
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Summarise journals for reviewers: what each run or backfill delivered, suppressed and failed, and what is in doubt.
    #[command(
        after_help = "An effect is in doubt when its delivery began (an attempting line) and no outcome is recorded after it.\n\nExit codes:\n  0  the report was printed (and --fail-on found nothing)\n  1  the report was printed and the journals hold an effect --fail-on names\n  2  bad input or an unreadable journal\n\nExamples:\n  replaysafe report backfill.jsonl\n  replaysafe report --format markdown --by kind --by reason runs/*.jsonl > comment.md\n  replaysafe report --fail-on delivered --fail-on in-doubt backfill.jsonl   # a CI gate\n  replaysafe report --format html --base original.jsonl -o review.html backfill.jsonl"
    )]
    Report {
        /// Journals: JSON Lines files (schema 1), sqlite:PATH or postgres://… (its password from PGPASSWORD).
        #[arg(required = true)]
        journals: Vec<PathBuf>,
        #[command(flatten)]
        select: Select,
        /// Output format; html writes one self-contained page.
        #[arg(long, value_enum, default_value_t)]
        format: ReportFormat,
        /// Write the report to this file instead of standard output.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
        /// With --format html: compare with this journal (the original runs) and show the differences by idempotency key, as `diff` does (repeatable).
        #[arg(long = "base", value_name = "JOURNAL")]
        base: Vec<PathBuf>,
        /// Breakdowns to show (repeatable); default: kind and reason.
        #[arg(long = "by", value_enum)]
        by: Vec<Breakdown>,
        /// Skip invalid lines (malformed, not UTF-8, over 1 MiB) and name them, instead of failing on the first.
        #[arg(long)]
        skip_invalid: bool,
        /// Exit 1, after printing the report, when the journals hold any such effect (repeatable).
        #[arg(long = "fail-on", value_enum)]
        fail_on: Vec<FailOn>,
    },
    /// Compare two journals by idempotency key (payloads and decisions); exit 1 when they differ.
    #[command(
        after_help = "Examples:\n  replaysafe diff original.jsonl backfill-dry-run.jsonl\n  replaysafe diff --format json a.jsonl b.jsonl | jq .changed"
    )]
    Diff {
        /// The journal to compare against: a JSON Lines file, sqlite:PATH or postgres://….
        base: PathBuf,
        /// The new journal.
        new: PathBuf,
        #[command(flatten)]
        select: Select,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
        /// Skip invalid lines (malformed, not UTF-8, over 1 MiB) instead of failing on the first.
        #[arg(long)]
        skip_invalid: bool,
    },
    /// List a backfill's windows and what the gate would do with each effect kind; with --airflow, the DAGs downstream of a backfill in Airflow and which of their tasks are gated.
    #[command(
        override_usage = "replaysafe plan [OPTIONS] --pipeline <PIPELINE> --start <START> --end <END> --every <EVERY>\n       replaysafe plan --airflow <BASE_URL> --dag-id <DAG_ID> --start <START> --end <END> [--every <EVERY>] [OPTIONS]",
        after_help = "With --airflow, the runs of --dag-id are Airflow's own answer (its backfill dry run) unless --every is given; each DAG scheduled on an asset it updates gets up to one run per run, each DAG a TriggerDagRunOperator starts one run per run, recursively. Tasks are marked gated when replaysafe.airflow's cluster policy gates their operator (EmailOperator, HttpOperator, SlackWebhookOperator, SFTPOperator, TriggerDagRunOperator).\n\nExamples:\n  replaysafe plan --pipeline daily_orders --start 2026-05-01T00:00:00Z --end 2026-07-30T00:00:00Z --every 1d\n  replaysafe plan --pipeline p --start 2026-08-05T00:00:00Z --end 2026-08-06T00:00:00Z --every 1h --kind scheduled --max-age email=2h\n  replaysafe plan --airflow https://airflow.internal:8080 --dag-id daily_orders \\\n    --start 2026-07-01T00:00:00Z --end 2026-08-01T00:00:00Z --user planner --password-env AIRFLOW_PASSWORD"
    )]
    Plan {
        /// Pipeline name (without --airflow).
        #[arg(long, required_unless_present = "airflow", conflicts_with = "airflow")]
        pipeline: Option<String>,
        /// Range start, RFC 3339.
        #[arg(long, value_parser = parse_time)]
        start: DateTime<Utc>,
        /// Range end (exclusive), RFC 3339.
        #[arg(long, value_parser = parse_time)]
        end: DateTime<Utc>,
        /// Window length: 90s, 30m, 6h, 1d, 1w. With --airflow: count the runs of --dag-id as these ticks instead of asking Airflow.
        #[arg(long, value_parser = duration::parse, required_unless_present = "airflow")]
        every: Option<chrono::TimeDelta>,
        /// Each run is the instant at the start of its step (Airflow 3's cron timetable), not a window.
        #[arg(long, conflicts_with = "airflow")]
        instants: bool,
        /// Run kind of the runs.
        #[arg(long, default_value = "backfill", value_parser = parse_run_kind, conflicts_with = "airflow")]
        kind: RunKind,
        /// Evaluate as of this time (default: now).
        #[arg(long, value_parser = parse_time, conflicts_with = "airflow")]
        now: Option<DateTime<Utc>>,
        /// Override a kind's max age, KIND=DURATION (repeatable).
        #[arg(long = "max-age", value_parser = parse_max_age, conflicts_with = "airflow")]
        max_age: Vec<(EffectKind, chrono::TimeDelta)>,
        /// Effect kinds to show (repeatable); default: every built-in kind.
        #[arg(long = "effect", value_parser = parse_effect_kind, conflicts_with = "airflow")]
        effects: Vec<EffectKind>,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
        #[command(flatten)]
        airflow: airflow_plan::AirflowArgs,
    },
    /// Resolve the context from the environment (REPLAYSAFE_*, AIRFLOW_CTX_*) exactly as the SDK does.
    #[command(
        after_help = "Example:\n  REPLAYSAFE_PIPELINE=p REPLAYSAFE_RUN_ID=r REPLAYSAFE_RUN_KIND=backfill \\\n  REPLAYSAFE_WINDOW_START=2026-08-05T00:00:00Z REPLAYSAFE_WINDOW_END=2026-08-06T00:00:00Z replaysafe context"
    )]
    Context {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Send one effect through the gate, for shell scripts and Airflow BashOperator tasks.
    #[command(subcommand, after_help = send_exit_codes!())]
    Send(Box<SendCommand>),
    /// Write an opt-in file that lets a backfill deliver some effects, after showing what it covers; sign it with --key.
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        after_help = "The file takes effect in a run through REPLAYSAFE_OPT_IN=FILE or send --opt-in FILE.\nWith REPLAYSAFE_TRUSTED_APPROVERS=FILE set (NAME KEY lines, the .pub files of approve keygen), only a file signed by one of those keys lifts anything.\nAn approval for every run (a --run-id-pattern of stars only) or for more than 30 days is shown and refused unless --broad is given. Neither approve --out nor keygen writes over a file unless --force is given, and --key refuses a key file that group or others can read (chmod 600 it).\n\nExamples:\n  replaysafe approve keygen --name jane --out ~/.replaysafe\n  replaysafe approve --pipeline daily_orders --backfill-id bf-2026-07 --kind email \\\n    --reason 'corrected invoices' --approved-by jane@ops --expires 1d \\\n    --start 2026-07-01T00:00:00Z --end 2026-07-31T00:00:00Z --every 1d \\\n    --key ~/.replaysafe/jane.key --out approval.json"
    )]
    Approve(Box<ApproveArgs>),
    /// Operate the outbox on SQLite or PostgreSQL: work, status, list, retry, resend, purge.
    Outbox(replaysafe_cli::outbox::OutboxArgs),
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Which records of a database journal to read.
#[derive(Debug, clap::Args)]
struct Select {
    /// With a database journal: only this pipeline's records.
    #[arg(long)]
    pipeline: Option<String>,
    /// With a database journal: only records journaled at or after this time, RFC 3339 or a date (2026-08-05).
    #[arg(long, value_parser = parse_since)]
    since: Option<DateTime<Utc>>,
}

impl Select {
    fn query(&self) -> replaysafe_outbox::JournalQuery {
        let mut query = replaysafe_outbox::JournalQuery::all();
        query.pipeline.clone_from(&self.pipeline);
        query.since = self.since;
        query
    }
}

/// `--since`: an RFC 3339 time, or a date meaning its midnight UTC.
fn parse_since(text: &str) -> Result<DateTime<Utc>, String> {
    match chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        Ok(date) => Ok(date.and_time(chrono::NaiveTime::MIN).and_utc()),
        Err(_) => parse_time(text),
    }
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("runs").required(true).args(["backfill_id", "run_id_pattern"])))]
struct ApproveArgs {
    #[command(subcommand)]
    command: Option<ApproveCommand>,
    /// Pipeline the approval covers.
    #[arg(long, required = true)]
    pipeline: Option<String>,
    /// Backfill id it covers (REPLAYSAFE_BACKFILL_ID of the backfill's runs).
    #[arg(long)]
    backfill_id: Option<String>,
    /// Instead of a backfill id: the run ids it covers, with * for any characters (backfill__2026-07-*).
    #[arg(long)]
    run_id_pattern: Option<String>,
    /// Effect kind it lets through (repeatable).
    #[arg(long = "kind", required = true, value_parser = parse_effect_kind)]
    kinds: Vec<EffectKind>,
    /// An exact target it is restricted to, as the adapter describes it (repeatable; default: every target).
    #[arg(long = "target")]
    targets: Vec<String>,
    /// Why delivery from the backfill is wanted.
    #[arg(long, required = true)]
    reason: Option<String>,
    /// Who approves.
    #[arg(long, required = true)]
    approved_by: Option<String>,
    /// When it stops counting: a duration from now (12h, 2d) or an RFC 3339 time.
    #[arg(long, required = true)]
    expires: Option<String>,
    /// Secret key (approve keygen) to sign it with.
    #[arg(long)]
    key: Option<PathBuf>,
    /// Where to write the opt-in file (never over an existing file unless --force is given).
    #[arg(long, required = true)]
    out: Option<PathBuf>,
    /// Replace a file already at --out.
    #[arg(long)]
    force: bool,
    /// Write an approval that covers every run (a --run-id-pattern of stars only) or lasts longer than 30 days; without it such an approval is shown and refused.
    #[arg(long)]
    broad: bool,
    /// Start of the backfill's range, RFC 3339, to show its plan.
    #[arg(long, value_parser = parse_time, requires_all = ["end", "every"])]
    start: Option<DateTime<Utc>>,
    /// End of the backfill's range (exclusive), RFC 3339.
    #[arg(long, value_parser = parse_time, requires_all = ["start", "every"])]
    end: Option<DateTime<Utc>>,
    /// Window length of the backfill's runs: 30m, 6h, 1d.
    #[arg(long, value_parser = duration::parse, requires_all = ["start", "end"])]
    every: Option<chrono::TimeDelta>,
    /// Each run is the instant at the start of its step (Airflow 3's cron timetable).
    #[arg(long)]
    instants: bool,
}

#[derive(Debug, Subcommand)]
enum ApproveCommand {
    /// Make an approver's ed25519 key pair: DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub (NAME KEY).
    Keygen {
        /// The approver's name: one plain word (no /, \, .., leading . or control characters); the name journaled for approvals this key signs.
        #[arg(long)]
        name: String,
        /// Folder to write the keys to.
        #[arg(long)]
        out: PathBuf,
        /// Replace key files already there (the old key stops working wherever it was trusted).
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SendCommand {
    /// Send a JSON webhook (Standard Webhooks signing with --secret-env).
    #[command(
        after_help = concat!("Exit 0 when delivered or suppressed (one line on stderr says which and why).\n\nThe URL's query string is sent but never printed or journaled. When the path itself is a secret (a Slack incoming webhook, say), read the URL with --url-env and pass --redact origin or --redact hashed.\n\n", send_exit_codes!(), "\n\nExample:\n  REPLAYSAFE_JOURNAL=journal.jsonl replaysafe send webhook --url https://partner.example/hooks \\\n    --event-type orders.published --data @totals.json --secret-env PARTNER_WEBHOOK_SECRET")
    )]
    #[command(group(clap::ArgGroup::new("endpoint").required(true).args(["url", "url_env"])))]
    Webhook {
        /// Endpoint URL.
        #[arg(long, value_parser = send::Utf8Text)]
        url: Option<String>,
        /// Environment variable holding the whole endpoint URL (instead of --url): its name, [A-Za-z_][A-Za-z0-9_]*, never the URL itself.
        #[arg(long, value_name = "VARIABLE", value_parser = send::EnvVar)]
        url_env: Option<replaysafe_core::EnvVarName>,
        /// Event type; also the message type of the effect.
        #[arg(long, value_parser = send::Utf8Text)]
        event_type: String,
        /// JSON body, or @FILE to read it from a file.
        #[arg(long, value_parser = send::Utf8Text)]
        data: String,
        /// A plain header, NAME:VALUE (repeatable); Authorization, Proxy-Authorization, Cookie and API-key headers are refused here: they go in --secret-header-env.
        #[arg(long = "header", value_name = "NAME:VALUE", value_parser = send::Utf8Text)]
        headers: Vec<String>,
        /// A header whose value is read from an environment variable, NAME=VARIABLE, such as Authorization=PARTNER_TOKEN (repeatable).
        #[arg(long = "secret-header-env", value_name = "NAME=VARIABLE", value_parser = send::SecretHeaderEnv)]
        secret_headers: Vec<(String, replaysafe_core::EnvVarName)>,
        /// Environment variable holding a whsec_ signing secret: its name, never the secret.
        #[arg(long, value_name = "VARIABLE", value_parser = send::EnvVar)]
        secret_env: Option<replaysafe_core::EnvVarName>,
        /// Host, IP address or CIDR network (127.0.0.0/8, ::1/128) the SSRF guard lets through even if internal (repeatable).
        #[arg(long = "allow-host", value_name = "HOST|CIDR", value_parser = send::Utf8Text)]
        allow_hosts: Vec<String>,
        /// How the endpoint appears on stderr and in the journal: full (scheme, host, port and path), origin (scheme, host and port) or hashed.
        #[arg(long, value_enum, default_value = "full")]
        redact: send::Redact,
        #[command(flatten)]
        common: send::Common,
    },
    /// Send an email over SMTP, one message per recipient.
    #[command(
        after_help = concat!("Exit 0 when delivered or suppressed (one line per recipient on stderr says which and why).\n\n", send_exit_codes!(), "\n\nExample:\n  REPLAYSAFE_JOURNAL=journal.jsonl replaysafe send email --smtp smtp://mail.internal:587 --starttls \\\n    --user reports --password-env SMTP_PASSWORD --from reports@shop.example --to ana@shop.example \\\n    --subject 'Orders for 2026-08-05' --body @summary.txt --message-type daily_summary")
    )]
    Email {
        /// SMTP server, smtp://HOST:PORT (no credentials in it: use --user and --password-env).
        #[arg(long, value_parser = send::Utf8Text)]
        smtp: String,
        /// Require STARTTLS (without it, plain SMTP is allowed to loopback hosts only).
        #[arg(long)]
        starttls: bool,
        /// Login user.
        #[arg(long, value_parser = send::Utf8Text)]
        user: Option<String>,
        /// Environment variable holding the password: its name, never the password.
        #[arg(long, value_name = "VARIABLE", value_parser = send::EnvVar)]
        password_env: Option<replaysafe_core::EnvVarName>,
        /// Extra trusted root certificate, PEM.
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// Sender address.
        #[arg(long, value_parser = send::Utf8Text)]
        from: String,
        /// Recipient (repeatable).
        #[arg(long, required = true, value_parser = send::Utf8Text)]
        to: Vec<String>,
        /// Subject.
        #[arg(long, value_parser = send::Utf8Text)]
        subject: String,
        /// Text body, or @FILE.
        #[arg(long, value_parser = send::Utf8Text)]
        body: String,
        /// Message type (part of the idempotency key).
        #[arg(long, default_value = "notification", value_parser = send::Utf8Text)]
        message_type: String,
        /// How recipients appear on stderr and in the journal: origin (*@domain), hashed, or full (the whole address, which is personal data).
        #[arg(long, value_enum, default_value = "origin")]
        redact: send::Redact,
        #[command(flatten)]
        common: send::Common,
    },
    /// Upload a file to a partner over SFTP (a file drop): host key checked first, uploaded under a temporary name, then renamed.
    #[command(
        after_help = concat!("Exit 0 when delivered or suppressed (one line on stderr says which and why).\n\n", send_exit_codes!(), "\n\nExample:\n  REPLAYSAFE_JOURNAL=journal.jsonl replaysafe send sftp --host files.partner.example --user orders \\\n    --key /etc/pipeline/id_ed25519 --passphrase-env PARTNER_KEY_PASSPHRASE --known-hosts /etc/pipeline/known_hosts \\\n    --dir /inbound --name 'orders_{window_start:%Y%m%d}.csv' --file orders.csv --message-type orders_csv")
    )]
    Sftp(send::sftp::SftpArgs),
    /// Raise an alert: Alertmanager, PagerDuty Events v2 or a Slack incoming webhook (routing keys and webhook URLs from the environment).
    #[command(
        after_help = concat!("Exit 0 when delivered or suppressed (one line on stderr says which and why). Alerts go stale after 1 h by default.\n\n", send_exit_codes!(), "\n\nExamples:\n  replaysafe send alert --alertmanager http://alertmanager:9093 --alertname orders_late \\\n    --summary 'orders are 3 h late' --severity critical --label team=data --allow-host alertmanager\n  replaysafe send alert --pagerduty-routing-key-env PD_ROUTING_KEY --alertname orders_late --summary 'orders are 3 h late'\n  replaysafe send alert --slack-url-env SLACK_WEBHOOK_URL --channel data-alerts --text 'orders are 3 h late'")
    )]
    Alert(send::alert::AlertArgs),
    /// Start downstream work: an Airflow DAG run (REST API) or a call to a trigger URL.
    #[command(
        after_help = concat!("Exit 0 when delivered or suppressed (one line on stderr says which and why). Airflow answers 409 when a run already holds the logical date: the run is looked up, and only this trigger's own run counts as delivered.\n\n", send_exit_codes!(), "\n\nExamples:\n  replaysafe send trigger --airflow https://airflow.internal:8080 --dag-id daily_reports \\\n    --conf '{\"source\": \"orders\"}' --user pipeline --password-env AIRFLOW_PASSWORD\n  replaysafe send trigger --url https://ci.internal/hooks/rebuild --data '{}' --message-type rebuild_reports")
    )]
    Trigger(send::trigger::TriggerArgs),
    /// Push metrics: a Pushgateway group (replaced) or StatsD lines.
    #[command(
        after_help = concat!("Exit 0 when delivered or suppressed (one line per effect on stderr says which and why).\n\n", send_exit_codes!(), "\n\nExamples:\n  replaysafe send metric --pushgateway http://pushgateway:9091 --job nightly_export \\\n    --metric orders_exported=1204 --type gauge --allow-host pushgateway\n  replaysafe send metric --statsd 127.0.0.1:8125 --metric orders.sent:1204|c")
    )]
    Metric(send::metric::MetricArgs),
}

fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    replaysafe_core::parse_rfc3339("time", text).map_err(|e| match e {
        replaysafe_core::Error::Invalid { problem, .. } => {
            format!("{text:?} is not an RFC 3339 time such as 2026-08-05T00:00:00Z: {problem}")
        }
        other => other.to_string(),
    })
}

fn parse_run_kind(text: &str) -> Result<RunKind, String> {
    text.parse()
        .map_err(|e: replaysafe_core::Error| e.to_string())
}

fn parse_effect_kind(text: &str) -> Result<EffectKind, String> {
    text.parse()
        .map_err(|e: replaysafe_core::Error| e.to_string())
}

fn parse_max_age(text: &str) -> Result<(EffectKind, chrono::TimeDelta), String> {
    let (kind, age) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KIND=DURATION, e.g. email=2h"))?;
    Ok((parse_effect_kind(kind)?, duration::parse(age)?))
}

/// Lets a write past the file-size limit (`RLIMIT_FSIZE`) fail with `EFBIG`, which the
/// journal reports naming its path and the record it was writing, instead of `SIGXFSZ`
/// killing the process in the middle of a delivery with nothing said. The handler tokio
/// installs stays for the life of the process; it only notes the signal.
fn survive_file_size_limit() {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    else {
        return;
    };
    let _entered = runtime.enter();
    let signal = tokio::signal::unix::SignalKind::from_raw(libc::SIGXFSZ);
    if let Err(error) = tokio::signal::unix::signal(signal) {
        eprintln!("replaysafe: warning: SIGXFSZ stays fatal: {error}");
    }
}

fn main() -> ExitCode {
    survive_file_size_limit();
    let cli = Cli::parse();
    let result = run(cli.command);
    if cli.print_peak_memory
        && let Some(kib) = replaysafe_cli::peak_memory_kib()
    {
        eprintln!("peak memory: {kib} KiB");
    }
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("replaysafe: error: {error:#}");
            if error.is::<send::OutcomeNotJournaled>() {
                ExitCode::from(send::EXIT_OUTCOME_NOT_JOURNALED)
            } else {
                ExitCode::from(2)
            }
        }
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Outbox(args) => replaysafe_cli::outbox::run(args),
        Command::Report {
            journals,
            select,
            format,
            output,
            base,
            by,
            skip_invalid,
            fail_on,
        } => {
            if !base.is_empty() && format != ReportFormat::Html {
                anyhow::bail!(
                    "--base: only --format html shows a comparison; use `replaysafe diff BASE NEW` for text"
                );
            }
            let by: Vec<report::Breakdown> = if by.is_empty() {
                vec![report::Breakdown::Kind, report::Breakdown::Reason]
            } else {
                by.into_iter().map(Into::into).collect()
            };
            let reader = Reader::default().with_skip_invalid(skip_invalid);
            let inputs = journals::for_review(&journals, &select.query())?;
            let journals = &inputs.paths;
            let progress = Progress::for_files(journals);
            let mut report = reader.with_progress(&progress).report(journals, &by)?;
            report.journals.clone_from(&inputs.names);
            let compared = match format.text() {
                Some(_) => None,
                None if base.is_empty() => None,
                None => {
                    let base = journals::for_review(&base, &select.query())?;
                    let progress = Progress::for_files(&[base.paths.as_slice(), journals].concat());
                    Some(
                        reader
                            .with_progress(&progress)
                            .diff(&base.paths, journals)?,
                    )
                }
            };
            // Written as it is made: the lists are read back from disk row by row.
            let write = |out: &mut dyn std::io::Write| -> std::io::Result<()> {
                match format.text() {
                    Some(format) => report.write(format.into(), out)?,
                    None => report.write_html(compared.as_ref(), out)?,
                }
                out.flush()
            };
            match &output {
                Some(path) => std::fs::File::create(path)
                    .and_then(|file| write(&mut std::io::BufWriter::new(file)))
                    .with_context(|| format!("writing the report to {}", path.display()))?,
                None => write(&mut std::io::BufWriter::new(std::io::stdout().lock()))
                    .context("writing the report")?,
            }
            let fail_on: Vec<report::FailOn> = fail_on.into_iter().map(Into::into).collect();
            let failures = report.failures(&fail_on);
            if failures.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!(
                "replaysafe: report --fail-on: the journals hold {}",
                failures.join(", ")
            );
            Ok(ExitCode::from(1))
        }
        Command::Diff {
            base,
            new,
            select,
            format,
            skip_invalid,
        } => {
            let inputs = journals::for_review(&[base, new], &select.query())?;
            let [base, new] = [&inputs.paths[0], &inputs.paths[1]];
            let progress = Progress::for_files(&[base, new]);
            let diff = Reader::default()
                .with_skip_invalid(skip_invalid)
                .with_progress(&progress)
                .diff(&[base], &[new])?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            diff.write(format.into(), &mut out)
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing the differences")?;
            Ok(if diff.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Plan {
            pipeline,
            start,
            end,
            every,
            instants,
            kind,
            now,
            max_age,
            effects,
            format,
            airflow,
        } => {
            let range = Window::from_bounds(start, end).context("--start and --end")?;
            if airflow.airflow.is_some() {
                let request = airflow_plan::Request {
                    args: &airflow,
                    range,
                    every,
                };
                let plan = airflow_plan::plan(&request)?;
                print!("{}", airflow_plan::render(&plan, format));
                return Ok(ExitCode::SUCCESS);
            }
            let pipeline = pipeline.ok_or_else(|| anyhow::anyhow!("--pipeline is required"))?;
            let every = every.ok_or_else(|| anyhow::anyhow!("--every is required"))?;
            let effects = if effects.is_empty() {
                EffectKind::BUILT_IN.to_vec()
            } else {
                effects
            };
            let request = plan::Request {
                pipeline,
                range,
                every,
                instants,
                kind,
                now: now.unwrap_or_else(Utc::now),
                max_age,
                effects,
            };
            let plan = plan::build(&request)?;
            if !plan.aligned && !instants {
                eprintln!(
                    "replaysafe: warning: {range} is not a whole number of {} steps; the last window is short",
                    plan.every
                );
            }
            print!("{}", plan::render(&plan, format));
            Ok(ExitCode::SUCCESS)
        }
        Command::Context { json } => {
            let cx =
                ReplayContext::from_env().context("resolving the context from the environment")?;
            let description = context::describe(&cx);
            if json {
                println!("{}", serde_json::to_string_pretty(&description)?);
            } else {
                print!("{description}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Send(send) => {
            let (name, common) = send.describe();
            replaysafe_cli::telemetry::start(common.otel, &format!("replaysafe send {name}"))?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let ended = runtime.block_on(run_send(*send));
            send::pipes::report();
            replaysafe_cli::telemetry::finish();
            Ok(match ended? {
                send::Ended::Done => ExitCode::SUCCESS,
                send::Ended::Failed => ExitCode::from(1),
            })
        }
        Command::Approve(args) => {
            print!("{}", run_approve(*args)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "replaysafe",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_approve(args: ApproveArgs) -> anyhow::Result<String> {
    if let Some(ApproveCommand::Keygen { name, out, force }) = args.command {
        return approve::keygen(&name, &out, force);
    }
    let now = Utc::now().trunc_subsecs(0);
    let required = |value: Option<String>, flag: &str| {
        value.ok_or_else(|| anyhow::anyhow!("{flag} is required"))
    };
    let runs = match (args.backfill_id, args.run_id_pattern) {
        (Some(id), _) => approve::Runs::Backfill(id),
        (None, Some(pattern)) => approve::Runs::Pattern(pattern),
        (None, None) => anyhow::bail!("--backfill-id or --run-id-pattern is required"),
    };
    let range = match (args.start, args.end, args.every) {
        (Some(start), Some(end), Some(every)) => Some(approve::Range {
            range: Window::from_bounds(start, end).context("--start and --end")?,
            every,
            instants: args.instants,
        }),
        _ => None,
    };
    let request = approve::Request {
        pipeline: required(args.pipeline, "--pipeline")?,
        runs,
        kinds: args.kinds,
        targets: args.targets,
        reason: required(args.reason, "--reason")?,
        approved_by: required(args.approved_by, "--approved-by")?,
        expires_at: approve::parse_expiry(&required(args.expires, "--expires")?, now)?,
        key: args.key,
        out: args
            .out
            .ok_or_else(|| anyhow::anyhow!("--out is required"))?,
        force: args.force,
        broad: args.broad,
        range,
        now,
    };
    approve::approve(&request)
}

impl SendCommand {
    /// The subcommand's name and the flags every send takes.
    fn describe(&self) -> (&'static str, &send::Common) {
        match self {
            SendCommand::Webhook { common, .. } => ("webhook", common),
            SendCommand::Email { common, .. } => ("email", common),
            SendCommand::Sftp(args) => ("sftp", &args.common),
            SendCommand::Alert(args) => ("alert", &args.common),
            SendCommand::Trigger(args) => ("trigger", &args.common),
            SendCommand::Metric(args) => ("metric", &args.common),
        }
    }
}

async fn run_send(command: SendCommand) -> anyhow::Result<send::Ended> {
    match command {
        SendCommand::Webhook {
            url,
            url_env,
            event_type,
            data,
            headers,
            secret_headers,
            secret_env,
            allow_hosts,
            redact,
            common,
        } => {
            let data = send::json_value("--data", &data)?;
            let url = match (url, url_env) {
                (Some(url), _) => send::UrlSource::Flag(url),
                (None, Some(variable)) => send::UrlSource::Env(variable),
                (None, None) => anyhow::bail!("--url or --url-env is required"),
            };
            let request = send::WebhookRequest {
                url,
                event_type,
                data,
                headers,
                secret_headers,
                secret_env,
                allow_hosts,
                redact,
            };
            send::webhook(request, &common).await
        }
        SendCommand::Email {
            smtp,
            starttls,
            user,
            password_env,
            ca_file,
            from,
            to,
            subject,
            body,
            message_type,
            redact,
            common,
        } => {
            let body = send::text_or_file("--body", &body)?;
            let request = send::EmailRequest {
                smtp,
                starttls,
                user,
                password_env,
                ca_file,
                from,
                to,
                subject,
                body,
                message_type,
                redact,
            };
            send::email(request, &common).await
        }
        SendCommand::Sftp(args) => send::sftp::send(args).await,
        SendCommand::Alert(args) => send::alert::send(args).await,
        SendCommand::Trigger(args) => send::trigger::send(args).await,
        SendCommand::Metric(args) => send::metric::send(args).await,
    }
}
