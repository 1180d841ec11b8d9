//! Reading a [`ReplayContext`] from `REPLAYSAFE_*` and Airflow's `AIRFLOW_CTX_*` variables.
//!
//! Two sources may speak: explicit `REPLAYSAFE_*` values, and what Airflow exports to a
//! task. The gate delivers only when every source that speaks agrees on a current,
//! non-replay run; `docs/reference/environment.md` states the rules whole.

use std::collections::HashMap;
use std::ffi::OsString;

use chrono::{DateTime, Utc};

use crate::{Error, Mode, OptIn, RecencyPolicy, ReplayContext, RunKind, TrustedApprovers, Window};

/// Names of the environment variables replaysafe reads.
pub mod vars {
    /// Pipeline name.
    pub const PIPELINE: &str = "REPLAYSAFE_PIPELINE";
    /// Execution attempt id.
    pub const RUN_ID: &str = "REPLAYSAFE_RUN_ID";
    /// Run kind: scheduled, manual, retry, resume, replay, backfill, rebuild.
    pub const RUN_KIND: &str = "REPLAYSAFE_RUN_KIND";
    /// Explicit replay flag, `true` or `false`.
    pub const REPLAY: &str = "REPLAYSAFE_REPLAY";
    /// Window start, RFC 3339.
    pub const WINDOW_START: &str = "REPLAYSAFE_WINDOW_START";
    /// Window end (exclusive), RFC 3339; equal to the start for an instant.
    pub const WINDOW_END: &str = "REPLAYSAFE_WINDOW_END";
    /// Backfill id grouping the runs of one backfill.
    pub const BACKFILL_ID: &str = "REPLAYSAFE_BACKFILL_ID";
    /// `live` (default) or `dry-run`.
    pub const MODE: &str = "REPLAYSAFE_MODE";
    /// Journal path.
    pub const JOURNAL: &str = "REPLAYSAFE_JOURNAL";
    /// Max ages per effect kind, `KIND=DURATION` pairs separated by commas (`email=2h,alert=30m`).
    pub const MAX_AGE: &str = "REPLAYSAFE_MAX_AGE";
    /// An opt-in file (`replaysafe approve` writes one) to add to the context.
    pub const OPT_IN: &str = "REPLAYSAFE_OPT_IN";
    /// A trusted-approvers file (`NAME KEY` lines): when set, only opt-ins signed by one of
    /// its keys lift anything.
    pub const TRUSTED_APPROVERS: &str = "REPLAYSAFE_TRUSTED_APPROVERS";
    /// The runs that caused this one: a JSON array of `{"pipeline", "run_id", "run_kind"?,
    /// "replay"?, "window_start"?, "window_end"?, "logical_date"?}`. An upstream replay
    /// suppresses every effect; a run without a window of its own takes their span.
    pub const UPSTREAM: &str = "REPLAYSAFE_UPSTREAM";
    /// Airflow: DAG id (pipeline fallback).
    pub const AIRFLOW_DAG_ID: &str = "AIRFLOW_CTX_DAG_ID";
    /// Airflow: DAG run id (run id fallback; its prefix gives the run kind).
    pub const AIRFLOW_DAG_RUN_ID: &str = "AIRFLOW_CTX_DAG_RUN_ID";
    /// Airflow: try number; above 1 a scheduled or manual run is a retry.
    pub const AIRFLOW_TRY_NUMBER: &str = "AIRFLOW_CTX_TRY_NUMBER";
    /// Airflow: run type, exported through `get_airflow_context_vars`.
    pub const AIRFLOW_RUN_TYPE: &str = "AIRFLOW_CTX_RUN_TYPE";
    /// Airflow: data interval start, exported through `get_airflow_context_vars`.
    pub const AIRFLOW_DATA_INTERVAL_START: &str = "AIRFLOW_CTX_DATA_INTERVAL_START";
    /// Airflow: data interval end, exported through `get_airflow_context_vars`.
    pub const AIRFLOW_DATA_INTERVAL_END: &str = "AIRFLOW_CTX_DATA_INTERVAL_END";
    /// Airflow 3: the run's logical date, exported by default; without an exported
    /// interval the run is the instant of this date.
    pub const AIRFLOW_LOGICAL_DATE: &str = "AIRFLOW_CTX_LOGICAL_DATE";
    /// Airflow: the id of the backfill the run belongs to, exported by the
    /// `replaysafe.airflow` hook; it must agree with `REPLAYSAFE_BACKFILL_ID` when both are set.
    pub const AIRFLOW_BACKFILL_ID: &str = "AIRFLOW_CTX_BACKFILL_ID";
    /// Airflow: how many times the DAG run was cleared, exported by the `replaysafe.airflow`
    /// hook; above 0 a scheduled or manual run is a retry.
    pub const AIRFLOW_CLEAR_NUMBER: &str = "AIRFLOW_CTX_CLEAR_NUMBER";
    /// Airflow: lineage as the `replaysafe.airflow` hook exports it (Airflow prefixes every
    /// key the hook returns with `AIRFLOW_CTX_`); the same JSON as [`UPSTREAM`], and the
    /// runs of both are the run's upstream.
    pub const AIRFLOW_UPSTREAM: &str = "AIRFLOW_CTX_REPLAYSAFE_UPSTREAM";
    /// Dagster Pipes: the context of the run that started this process (base64 of zlib of
    /// JSON `{"path": FILE}` or `{"data": {...}}`), as Dagster's Pipes clients set it.
    pub const DAGSTER_PIPES_CONTEXT: &str = "DAGSTER_PIPES_CONTEXT";

    /// Every variable above.
    pub const ALL: [&str; 24] = [
        PIPELINE,
        RUN_ID,
        RUN_KIND,
        REPLAY,
        WINDOW_START,
        WINDOW_END,
        BACKFILL_ID,
        MODE,
        JOURNAL,
        MAX_AGE,
        OPT_IN,
        TRUSTED_APPROVERS,
        UPSTREAM,
        AIRFLOW_DAG_ID,
        AIRFLOW_DAG_RUN_ID,
        AIRFLOW_TRY_NUMBER,
        AIRFLOW_RUN_TYPE,
        AIRFLOW_DATA_INTERVAL_START,
        AIRFLOW_DATA_INTERVAL_END,
        AIRFLOW_LOGICAL_DATE,
        AIRFLOW_BACKFILL_ID,
        AIRFLOW_CLEAR_NUMBER,
        AIRFLOW_UPSTREAM,
        DAGSTER_PIPES_CONTEXT,
    ];
}

use vars::*;

/// Variables whose being set turns a check on: set but blank, they are an error naming
/// them rather than unset, which would turn the check off without a word.
const SET_TURNS_A_CHECK_ON: [&str; 1] = [TRUSTED_APPROVERS];

/// Whether a variable read as `value` is kept: a blank value counts as unset, except for
/// the variables of [`SET_TURNS_A_CHECK_ON`], which `resolve` refuses when blank.
pub(crate) fn keep(name: &str, value: &str) -> bool {
    !value.trim().is_empty() || SET_TURNS_A_CHECK_ON.contains(&name)
}

/// Keeps the variables replaysafe reads, as UTF-8, without blank values (see [`keep`]); one
/// of them that is not UTF-8 is an error naming it. Every other variable is ignored,
/// whatever its bytes.
pub(crate) fn read_os(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<HashMap<String, String>, Error> {
    let mut read = HashMap::new();
    for (name, value) in vars {
        let Some(name) = name
            .to_str()
            .and_then(|n| ALL.iter().find(|known| **known == n))
        else {
            continue;
        };
        let value = value.into_string().map_err(|raw| {
            Error::invalid(
                name,
                raw.to_string_lossy().escape_debug().to_string(),
                "not valid UTF-8",
            )
        })?;
        if keep(name, &value) {
            read.insert((*name).to_owned(), value);
        }
    }
    Ok(read)
}

pub(crate) fn resolve(env: &HashMap<String, String>) -> Result<ReplayContext, Error> {
    let get = |name: &str| env.get(name).map(|v| v.trim().to_owned());

    let dagster = get(DAGSTER_PIPES_CONTEXT)
        .map(|value| crate::dagster::read(&value))
        .transpose()?;
    let pipeline = get(PIPELINE)
        .or_else(|| get(AIRFLOW_DAG_ID))
        .or_else(|| dagster.as_ref().and_then(|d| d.pipeline.clone()))
        .ok_or(Error::Missing {
            field: PIPELINE,
            hint: "set REPLAYSAFE_PIPELINE (or run under Airflow, which sets AIRFLOW_CTX_DAG_ID, or Dagster Pipes, whose context names the assets)",
        })?;
    let run_id = get(RUN_ID)
        .or_else(|| get(AIRFLOW_DAG_RUN_ID))
        .or_else(|| dagster.as_ref().map(|d| d.run_id.clone()))
        .ok_or(Error::Missing {
            field: RUN_ID,
            hint: "set REPLAYSAFE_RUN_ID (or run under Airflow, which sets AIRFLOW_CTX_DAG_RUN_ID, or Dagster Pipes)",
        })?;

    let explicit_kind = get(RUN_KIND)
        .map(|value| value.parse().map_err(|_| invalid_kind(RUN_KIND, &value)))
        .transpose()?;
    let airflow = airflow_run_kind(env)?;
    let mut conflicts: Vec<String> = airflow.iter().filter_map(|a| a.conflict.clone()).collect();
    let orchestrator = match (airflow.map(|a| a.kind), dagster.as_ref().map(|d| d.kind)) {
        (Some(airflow), Some(dagster)) => {
            conflicts.push(format!(
                "both Airflow ({AIRFLOW_DAG_RUN_ID}: {airflow}) and Dagster ({DAGSTER_PIPES_CONTEXT}: {dagster}) describe this run"
            ));
            let kind = if airflow.suppresses() {
                airflow
            } else {
                dagster
            };
            Some(("Airflow", kind))
        }
        (Some(airflow), None) => Some(("Airflow", airflow)),
        (None, Some(dagster)) => Some(("Dagster", dagster)),
        (None, None) => None,
    };
    let run_kind = match (explicit_kind, orchestrator) {
        (None, None) => RunKind::Unknown,
        (Some(kind), None) | (None, Some((_, kind))) => kind,
        (Some(explicit), Some((source, orchestrator))) => {
            let (kind, conflict) = combine_kinds(explicit, orchestrator, source);
            conflicts.extend(conflict);
            kind
        }
    };

    let replay_flag = get(REPLAY)
        .map(|value| parse_bool(REPLAY, &value))
        .transpose()?;
    let mode = match get(MODE) {
        Some(value) => value
            .parse::<Mode>()
            .map_err(|_| Error::invalid(MODE, value, "expected live or dry-run"))?,
        None => Mode::Live,
    };

    let explicit_window = window_from(
        env,
        WINDOW_START,
        WINDOW_END,
        "REPLAYSAFE_WINDOW_START/_END",
    )?;
    let airflow_interval = window_from(
        env,
        AIRFLOW_DATA_INTERVAL_START,
        AIRFLOW_DATA_INTERVAL_END,
        "AIRFLOW_CTX_DATA_INTERVAL_START/_END",
    )?;
    let logical_date = get(AIRFLOW_LOGICAL_DATE)
        // Python's str(None): a run without a logical date.
        .filter(|value| value != "None")
        .map(|value| parse_time(AIRFLOW_LOGICAL_DATE, &value))
        .transpose()?;
    let pipes_window = dagster.as_ref().and_then(|d| d.window);
    if let (Some(explicit), Some(pipes)) = (explicit_window, pipes_window)
        && explicit != pipes
    {
        conflicts.push(format!(
            "REPLAYSAFE_WINDOW_START/_END say {explicit} but the Dagster partition is {pipes}"
        ));
    }
    let window = explicit_window
        .or(airflow_interval)
        .or(logical_date.map(Window::instant))
        .or(pipes_window);
    let mut upstream = Vec::new();
    for variable in [UPSTREAM, AIRFLOW_UPSTREAM] {
        if let Some(text) = get(variable) {
            upstream.extend(crate::UpstreamRun::parse_list(variable, &text)?);
        }
    }
    let orchestrator_backfill = get(AIRFLOW_BACKFILL_ID)
        .map(|id| ("Airflow's run", id))
        .or_else(|| {
            let id = dagster.as_ref()?.backfill_id.clone()?;
            Some(("the Dagster run", id))
        });
    let backfill_id = match (get(BACKFILL_ID), orchestrator_backfill) {
        (Some(explicit), Some((whose, theirs))) if explicit != theirs => {
            conflicts.push(format!(
                "{BACKFILL_ID} says {explicit:?} but {whose} belongs to backfill {theirs:?}"
            ));
            Some(explicit)
        }
        (explicit, theirs) => explicit.or(theirs.map(|(_, id)| id)),
    };

    // Without a window from any source, the context has none: every effect is suppressed
    // with `unknown_window` (not an error, so a task without one runs and says why).
    let mut builder = ReplayContext::builder()
        .pipeline(pipeline)
        .run_id(run_id)
        .run_kind(run_kind)
        .upstream(upstream)
        .mode(mode);
    if let Some(window) = window {
        builder = builder.window(window);
    }
    if let Some(interval) = airflow_interval {
        builder = builder.run_interval(interval);
    }
    if let Some(logical_date) = logical_date {
        builder = builder.logical_date(logical_date);
    }
    if let Some(flag) = replay_flag {
        builder = builder.replay_flag(flag);
    }
    if let Some(backfill_id) = backfill_id {
        builder = builder.backfill_id(backfill_id);
    }
    if let Some(path) = get(JOURNAL) {
        builder = builder.journal_path(path);
    }
    if let Some(max_ages) = get(MAX_AGE) {
        builder = builder.recency(RecencyPolicy::default().with_max_ages(MAX_AGE, &max_ages)?);
    }
    if let Some(path) = get(OPT_IN) {
        builder = builder.opt_in(OptIn::read_file(path)?);
    }
    if let Some(path) = get(TRUSTED_APPROVERS) {
        if path.is_empty() {
            return Err(Error::invalid(
                TRUSTED_APPROVERS,
                path,
                "is set but blank, which would turn the trusted-approvers check off: \
                 name the file of trusted keys, or unset the variable",
            ));
        }
        builder = builder.trusted_approvers(TrustedApprovers::read_file(path)?);
    }
    if !conflicts.is_empty() {
        builder = builder.conflict(conflicts.join("; "));
    }
    builder.build()
}

/// The run kind when `REPLAYSAFE_RUN_KIND` and the orchestrator (`source`: Airflow or
/// Dagster) both give one, and what disagreed.
///
/// Explicit values refine (scheduled → retry, backfill → rebuild) but never make a replay
/// look current: when only one of the two suppresses, the context conflicts and the
/// suppressing kind stands. `unknown` on either side stays unknown.
fn combine_kinds(explicit: RunKind, airflow: RunKind, source: &str) -> (RunKind, Option<String>) {
    let conflict = (explicit.suppresses() != airflow.suppresses())
        .then(|| format!("{RUN_KIND} says {explicit} but {source}'s run is {airflow}"));
    let kind = if explicit == RunKind::Unknown || airflow == RunKind::Unknown {
        RunKind::Unknown
    } else if conflict.is_some() {
        if explicit.suppresses() {
            explicit
        } else {
            airflow
        }
    } else {
        explicit
    };
    (kind, conflict)
}

fn invalid_kind(variable: &'static str, value: &str) -> Error {
    Error::invalid(
        variable,
        value,
        "expected one of scheduled, manual, retry, resume, replay, backfill, rebuild",
    )
}

/// The kind an Airflow run-id prefix or run type names; `Unknown` for anything else.
pub fn airflow_kind(run_type: &str) -> RunKind {
    match run_type {
        "scheduled" | "asset_triggered" | "dataset_triggered" => RunKind::Scheduled,
        "manual" => RunKind::Manual,
        "backfill" => RunKind::Backfill,
        _ => RunKind::Unknown,
    }
}

/// What Airflow's variables say about the run kind.
#[derive(Clone, Debug)]
struct AirflowKind {
    kind: RunKind,
    conflict: Option<String>,
}

/// Airflow's run kind, when it gives one: from the run type and the run-id prefix, a try
/// number above 1 making a scheduled or manual run a retry.
fn airflow_run_kind(env: &HashMap<String, String>) -> Result<Option<AirflowKind>, Error> {
    let from_prefix = env.get(AIRFLOW_DAG_RUN_ID).map(|run_id| {
        let prefix = run_id
            .trim()
            .split_once("__")
            .map_or("", |(prefix, _)| prefix);
        (prefix.to_owned(), airflow_kind(prefix))
    });
    let from_type = env
        .get(AIRFLOW_RUN_TYPE)
        .map(|run_type| airflow_kind(run_type.trim()));

    let (mut kind, conflict) = match (from_prefix, from_type) {
        (None, None) => return Ok(None),
        (Some((_, kind)), None) | (None, Some(kind)) => (kind, None),
        (Some((_, by_prefix)), Some(by_type)) if by_prefix == by_type => (by_type, None),
        (Some((prefix, by_prefix)), Some(by_type)) => {
            // The run type is the more reliable source, but a disagreement resolves toward suppression.
            let kind = if by_prefix.suppresses() && !by_type.suppresses() {
                by_prefix
            } else {
                by_type
            };
            let note = format!(
                "{AIRFLOW_RUN_TYPE} says {by_type} but the run id prefix {prefix:?} says {by_prefix}"
            );
            (kind, Some(note))
        }
    };

    if let Some(try_number) = env.get(AIRFLOW_TRY_NUMBER) {
        let try_number: u32 = try_number
            .trim()
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                Error::invalid(
                    AIRFLOW_TRY_NUMBER,
                    try_number.as_str(),
                    "expected a positive integer",
                )
            })?;
        if try_number > 1 && matches!(kind, RunKind::Scheduled | RunKind::Manual) {
            kind = RunKind::Retry;
        }
    }
    if let Some(clear_number) = env.get(AIRFLOW_CLEAR_NUMBER) {
        let clear_number: u32 = clear_number.trim().parse().map_err(|_| {
            Error::invalid(
                AIRFLOW_CLEAR_NUMBER,
                clear_number.as_str(),
                "expected a non-negative integer",
            )
        })?;
        if clear_number > 0 && matches!(kind, RunKind::Scheduled | RunKind::Manual) {
            kind = RunKind::Retry;
        }
    }
    Ok(Some(AirflowKind { kind, conflict }))
}

fn parse_bool(variable: &'static str, value: &str) -> Result<bool, Error> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(Error::invalid(variable, value, "expected true or false")),
    }
}

fn parse_time(variable: &'static str, value: &str) -> Result<DateTime<Utc>, Error> {
    crate::parse_rfc3339(variable, value)
}

/// The window a pair of variables gives: none when both are unset, an instant when they
/// are equal, and an error naming the variable when only one is set or they are inverted.
fn window_from(
    env: &HashMap<String, String>,
    start_var: &'static str,
    end_var: &'static str,
    source_vars: &'static str,
) -> Result<Option<Window>, Error> {
    match (env.get(start_var), env.get(end_var)) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::Missing {
            field: end_var,
            hint: "a window needs both its start and its end",
        }),
        (None, Some(_)) => Err(Error::Missing {
            field: start_var,
            hint: "a window needs both its start and its end",
        }),
        (Some(start), Some(end)) => {
            let start = parse_time(start_var, start.trim())?;
            let end = parse_time(end_var, end.trim())?;
            Window::from_bounds(start, end)
                .map(Some)
                .map_err(|_| Error::InvertedWindow {
                    source_vars,
                    start,
                    end,
                })
        }
    }
}
