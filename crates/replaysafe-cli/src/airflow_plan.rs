//! `replaysafe plan --airflow`: the downstream graph of a backfill, before it runs.
//!
//! From the DAG to backfill (`--dag-id`), the walk follows the assets each DAG updates to
//! the DAGs scheduled on them, and each DAG's TriggerDagRunOperators to the DAGs they start,
//! recursively, each DAG once (a link back to a DAG already upstream is a cycle: reported,
//! not followed). For each DAG it says how many runs the backfill would give it and which
//! of its tasks `replaysafe.airflow`'s cluster policy gates.
//!
//! What is read from Airflow 3's API server, and why (verified against Airflow 3.3.2):
//!
//! - `POST /auth/token` `{"username", "password"}`: the JWT every other request carries,
//!   as `send trigger --airflow --user … --password-env …` gets it
//!   ([`replaysafe_webhook::airflow_token`]); or a token from `--token-env`.
//! - `GET /api/v2/dags/{dag_id}`: whether the DAG exists (404: exit 2, "Airflow has no
//!   DAG …"), is paused, and its schedule (`timetable_summary`).
//! - `POST /api/v2/backfills/dry_run` `{"dag_id", "from_date", "to_date",
//!   "reprocess_behavior"}` (without `--every`): the runs `airflow backfill create` would
//!   make, `{"backfills": [{"logical_date", "partition_key", "partition_date"}],
//!   "total_entries"}`. Airflow's range is inclusive at both ends (of the times the runs are
//!   due), so `[start, end)` is sent as `from_date` start and `to_date` end less 1 µs. A DAG
//!   that is not on a periodic schedule answers 422, which says so.
//! - `GET /api/v2/assets?dag_ids={dag_id}`: the assets related to the DAG, with
//!   `producing_tasks` and `scheduled_dags`; the filter matches any relation, so only the
//!   assets one of the DAG's own tasks produces are followed.
//! - `GET /api/v2/dags/{dag_id}/tasks`: each task's `operator_name` and `class_ref`
//!   (`module_path`, `class_name`), which the policy's match is made on.
//! - `GET /ui/dependencies`: the scheduling graph the UI draws, the only place Airflow says
//!   which DAG a TriggerDagRunOperator starts (the public task detail lists
//!   `trigger_dag_id` among `template_fields`, not its value). Its trigger nodes are
//!   `trigger:{dag}:{target}:{task}`, between edges from `dag:{dag}` and to `dag:{target}`.
//!   It is the UI's API, not the stable one: when it cannot be read, the plan says so (on
//!   stderr and in a note) and follows assets only.

mod api;
mod graph;
mod render;

use anyhow::{Context, anyhow, bail};
use chrono::{DateTime, TimeDelta, Utc};
use replaysafe_core::{EnvVarName, Window};
use secrecy::SecretString;
use serde::Serialize;

use crate::send::{EnvVar, Utf8Text};

pub use render::render;

/// The flags of `plan --airflow`.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "The downstream graph in Airflow (--airflow)")]
pub struct AirflowArgs {
    /// Airflow 3 API server base URL: show the DAGs downstream of --dag-id that a backfill over [--start, --end) would run, and which of their tasks the replaysafe.airflow policy gates.
    #[arg(long, value_name = "BASE_URL", value_parser = Utf8Text, requires = "dag_id")]
    pub airflow: Option<String>,
    /// The DAG to backfill.
    #[arg(long, value_parser = Utf8Text, requires = "airflow")]
    pub dag_id: Option<String>,
    /// Airflow user to log in as: the password (--password-env) is exchanged for a JWT at BASE_URL/auth/token.
    #[arg(long, value_parser = Utf8Text, requires_all = ["airflow", "password_env"])]
    pub user: Option<String>,
    /// Environment variable holding the Airflow user's password: its name, never the password.
    #[arg(long, value_name = "VARIABLE", value_parser = EnvVar, requires = "user")]
    pub password_env: Option<EnvVarName>,
    /// Environment variable holding a bearer token (instead of --user and --password-env): its name, never the token.
    #[arg(long, value_name = "VARIABLE", value_parser = EnvVar, conflicts_with = "user", requires = "airflow")]
    pub token_env: Option<EnvVarName>,
    /// The SSRF guard: the Airflow host, when it is internal (as a loopback or private
    /// address is), must be let through with `--allow-host`, as for `send trigger`.
    #[command(flatten)]
    pub ssrf: crate::send::AllowHosts,
    /// Which existing runs the backfill would run again, as `airflow backfill create` takes it (default none: only missing runs); without --every, Airflow's dry run counts with it.
    #[arg(long, value_enum, requires = "airflow", conflicts_with = "every")]
    pub reprocess_behavior: Option<Reprocess>,
}

/// `airflow backfill create --reprocess-behavior`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reprocess {
    /// Only runs that do not exist yet (Airflow's default).
    #[default]
    None,
    /// Also runs that failed.
    Failed,
    /// Also runs that completed, whether they failed or succeeded.
    Completed,
}

impl Reprocess {
    /// As Airflow spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reprocess::None => "none",
            Reprocess::Failed => "failed",
            Reprocess::Completed => "completed",
        }
    }
}

/// How to log in.
#[derive(Debug)]
pub(crate) enum Auth {
    /// No credentials (an API server that needs none).
    None,
    /// A bearer token.
    Token(SecretString),
    /// A user and password exchanged for a JWT.
    Login {
        /// The user.
        user: String,
        /// The password.
        password: SecretString,
    },
}

impl Auth {
    /// The credentials the flags name, read from the environment (errors name the flag and
    /// the variable, never the value).
    fn from_args(args: &AirflowArgs) -> anyhow::Result<Self> {
        let login = replaysafe_core::login(args.user.as_deref(), args.password_env.as_ref())
            .map_err(|error| match &error {
                replaysafe_core::Error::Missing { field: "user", .. } => anyhow!("--user: {error}"),
                _ => anyhow!("--password-env: {error}"),
            })?;
        Ok(match (&args.token_env, login) {
            (Some(_), Some(_)) => {
                bail!("--token-env: give --token-env, or --user and --password-env, not both")
            }
            (Some(variable), None) => {
                let token = variable
                    .read()
                    .map_err(|error| anyhow!("--token-env: {error}"))?;
                // A header value cannot hold it: said here, naming the flag, not as a
                // request that fails to build.
                if token.trim().is_empty() || token.trim().chars().any(char::is_control) {
                    bail!(
                        "--token-env: {} holds no usable token (empty, or a control character in it)",
                        variable.as_str()
                    );
                }
                Auth::Token(SecretString::from(token))
            }
            (None, Some((user, password))) => Auth::Login {
                user,
                password: SecretString::from(password),
            },
            (None, None) => Auth::None,
        })
    }
}

/// The downstream graph of a backfill: its JSON form (`--format json`) is its `Serialize` form.
#[derive(Clone, Debug, Serialize)]
pub struct Downstream {
    /// The API server, as scheme, host, port and path.
    pub airflow: String,
    /// The DAG backfilled.
    pub dag_id: String,
    /// The backfill's range start.
    pub start: DateTime<Utc>,
    /// The backfill's range end (exclusive).
    pub end: DateTime<Utc>,
    /// Where the backfilled DAG's run count comes from: `airflow_dry_run` or `every`.
    pub runs_source: RunsSource,
    /// With `--every`: the step, as given.
    pub every: Option<String>,
    /// Without `--every`: the reprocess behavior Airflow's dry run counted with.
    pub reprocess_behavior: Option<Reprocess>,
    /// The backfilled DAG's runs.
    pub runs: u64,
    /// Their logical dates (a partition's date or key for a partitioned timetable; each
    /// tick's start with `--every`).
    pub run_dates: Vec<String>,
    /// The backfilled DAG first, then every DAG downstream of it by distance.
    pub dags: Vec<PlannedDag>,
    /// Links back to a DAG already upstream: not followed, not counted.
    pub cycles: Vec<Cycle>,
    /// What the counts mean and what the plan cannot see.
    pub notes: Vec<String>,
}

/// Where the backfilled DAG's run count comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunsSource {
    /// Airflow's `POST /api/v2/backfills/dry_run`.
    AirflowDryRun,
    /// The ticks of `--every` in `[start, end)`.
    Every,
}

/// One DAG of the graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedDag {
    /// DAG id.
    pub dag_id: String,
    /// Links from the backfilled DAG (0 for itself).
    pub depth: usize,
    /// The runs it would get.
    pub runs: u64,
    /// Whether `runs` is an upper bound (an asset on the way: Airflow may batch its events).
    pub up_to: bool,
    /// Whether it may get more runs than `runs`, without a bound the plan can give: a link
    /// back upstream (a cycle) or a mapped TriggerDagRunOperator (one run per map index)
    /// on the way. It wins over `up_to`.
    pub at_least: bool,
    /// The runs it would get with `replaysafe.airflow` installed: its TriggerDagRunOperators
    /// are suppressed in the backfill and downstream of it, so only assets carry it on (an
    /// upper bound too when `up_to`).
    pub runs_with_policy: u64,
    /// Whether it may get more than `runs_with_policy` (a cycle through assets).
    pub at_least_with_policy: bool,
    /// Whether the DAG is paused.
    pub paused: bool,
    /// Its schedule, as Airflow summarises it.
    pub schedule: Option<String>,
    /// What starts it within this graph.
    pub started_by: Vec<StartedBy>,
    /// Its tasks.
    pub tasks: Vec<PlannedTask>,
}

/// One link into a DAG: the DAG upstream and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StartedBy {
    /// The DAG upstream.
    pub dag_id: String,
    /// How it starts this one.
    #[serde(flatten)]
    pub via: Via,
}

/// How one DAG starts another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "via", rename_all = "snake_case")]
pub enum Via {
    /// It updates an asset the other is scheduled on.
    Asset {
        /// The asset's name.
        asset: String,
    },
    /// One of its TriggerDagRunOperator tasks starts it.
    Trigger {
        /// The task.
        task_id: String,
    },
}

/// A link that leads back upstream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cycle {
    /// The DAG the link leaves.
    pub dag_id: String,
    /// The DAG upstream it starts again.
    pub starts: String,
    /// How.
    #[serde(flatten)]
    pub via: Via,
}

/// One task and what the policy does with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedTask {
    /// Task id.
    pub task_id: String,
    /// Its operator, as Airflow names it.
    pub operator: String,
    /// Its class, `module.Class`.
    pub class: Option<String>,
    /// Whether the policy gates it.
    pub gated: bool,
    /// The effect kind the policy journals it as.
    pub effect_kind: Option<String>,
    /// Whether it is mapped (one instance per map index).
    pub mapped: bool,
    /// For a TriggerDagRunOperator: the DAGs it starts.
    pub starts: Vec<String>,
    /// In words.
    pub note: String,
}

/// What `plan --airflow` plans.
#[derive(Debug)]
pub struct Request<'a> {
    /// The flags.
    pub args: &'a AirflowArgs,
    /// `[--start, --end)`.
    pub range: Window,
    /// `--every`, when given.
    pub every: Option<TimeDelta>,
}

/// Reads the graph from Airflow.
pub fn plan(request: &Request<'_>) -> anyhow::Result<Downstream> {
    let args = request.args;
    let base_url = args
        .airflow
        .as_deref()
        .ok_or_else(|| anyhow!("--airflow is required"))?;
    let dag_id = args
        .dag_id
        .as_deref()
        .ok_or_else(|| anyhow!("--dag-id is required with --airflow"))?;
    let auth = Auth::from_args(args)?;
    let mut airflow = api::Airflow::connect(base_url, &args.ssrf.allow_hosts, auth)?;
    let (start, end) = (request.range.start(), request.range.end());
    // The DAG first: an unknown one, or a login Airflow refuses, is named before anything
    // else is asked.
    let root = airflow.backfilled_dag(dag_id)?;
    let (runs_source, run_dates) = match request.every {
        Some(every) => {
            let ticks = request
                .range
                .split(every)
                .context("--every")?
                .take(replaysafe_review::plan::MAX_WINDOWS + 1)
                .map(|window| replaysafe_core::rfc3339(window.start()))
                .collect::<Vec<_>>();
            if ticks.len() > replaysafe_review::plan::MAX_WINDOWS {
                bail!(
                    "--every: [--start, --end) holds more than {} steps of {}",
                    replaysafe_review::plan::MAX_WINDOWS,
                    crate::duration::format(every)
                );
            }
            (RunsSource::Every, ticks)
        }
        None => {
            let reprocess = args.reprocess_behavior.unwrap_or_default();
            let dry_run = airflow.dry_run(dag_id, start, end, reprocess)?;
            let dates = dry_run
                .backfills
                .iter()
                .map(
                    |run| match (&run.logical_date, &run.partition_date, &run.partition_key) {
                        (Some(date), _, _) | (None, Some(date), _) => {
                            replaysafe_core::rfc3339(*date)
                        }
                        (None, None, Some(key)) => key.clone(),
                        (None, None, None) => "(no date)".to_owned(),
                    },
                )
                .collect();
            (RunsSource::AirflowDryRun, dates)
        }
    };
    let runs = u64::try_from(run_dates.len()).unwrap_or(u64::MAX);
    let mut notes = Vec::new();
    let triggers = match airflow.dependencies() {
        Ok(graph) => graph::Triggers::from_graph(&graph),
        Err(failed) => {
            let error = anyhow::Error::from(failed);
            eprintln!(
                "replaysafe: warning: the DAGs TriggerDagRunOperators start are not shown: {error:#}"
            );
            notes.push(format!(
                "The DAGs TriggerDagRunOperators start could not be read ({error:#}): only DAGs scheduled on assets are shown."
            ));
            graph::Triggers::default()
        }
    };
    let walked = graph::walk(&mut airflow, &triggers, root, runs)?;
    notes.extend(walked.notes);
    notes.extend(standing_notes(dag_id, &walked.dags));
    Ok(Downstream {
        airflow: airflow.shown().trim_end_matches('/').to_owned(),
        dag_id: dag_id.to_owned(),
        start,
        end,
        runs_source,
        every: request.every.map(crate::duration::format),
        reprocess_behavior: request
            .every
            .is_none()
            .then(|| args.reprocess_behavior.unwrap_or_default()),
        runs,
        run_dates,
        dags: walked.dags,
        cycles: walked.cycles,
        notes,
    })
}

/// What every plan says: what the counts mean and what the API does not show.
fn standing_notes(dag_id: &str, dags: &[PlannedDag]) -> Vec<String> {
    let mut notes = vec![
        "The runs column is what would run. With replaysafe.airflow installed (airflow_local_settings.py), what the gated tasks would send is suppressed and journaled instead: as replay_run in the backfill's own runs, as upstream_replay in the runs downstream of it. A gated TriggerDagRunOperator then starts nothing, so a DAG that only such operators start gets no run (the runs with the policy column); tasks that are not gated run as written.".to_owned(),
        "A DAG scheduled on an asset gets up to one run per run that updates it: Airflow may batch asset events into fewer runs.".to_owned(),
        "Notifiers in callbacks (SmtpNotifier, SlackWebhookNotifier, which the policy gates) are not visible through Airflow's API and are not listed.".to_owned(),
        "The policy gates a class by name, a subclass of a gated operator too; the API names only a task's own class, so such a subclass shows as not gated here.".to_owned(),
    ];
    let paused: Vec<&str> = dags
        .iter()
        .filter(|dag| dag.paused && dag.dag_id != dag_id)
        .map(|dag| dag.dag_id.as_str())
        .collect();
    if !paused.is_empty() {
        notes.push(format!(
            "Paused: {}. A paused DAG scheduled on an asset gets no run for events that arrive while it is paused; a triggered run of a paused DAG waits until it is unpaused.",
            paused.join(", ")
        ));
    }
    notes
}
