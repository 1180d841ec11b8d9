//! Reading a [`ReplayContext`] from `REPLAYSAFE_*` and Airflow's `AIRFLOW_CTX_*` variables.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::{Error, Mode, ReplayContext, RunKind, Window};

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
    /// Window end (exclusive), RFC 3339.
    pub const WINDOW_END: &str = "REPLAYSAFE_WINDOW_END";
    /// Backfill id grouping the runs of one backfill.
    pub const BACKFILL_ID: &str = "REPLAYSAFE_BACKFILL_ID";
    /// `live` (default) or `dry-run`.
    pub const MODE: &str = "REPLAYSAFE_MODE";
    /// Journal path.
    pub const JOURNAL: &str = "REPLAYSAFE_JOURNAL";
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
}

use vars::*;

pub(crate) fn resolve(env: &HashMap<String, String>) -> Result<ReplayContext, Error> {
    let get = |name: &str| env.get(name).map(|v| v.trim().to_owned());

    let pipeline = get(PIPELINE)
        .or_else(|| get(AIRFLOW_DAG_ID))
        .ok_or(Error::Missing {
            field: PIPELINE,
            hint: "set REPLAYSAFE_PIPELINE (or run under Airflow, which sets AIRFLOW_CTX_DAG_ID)",
        })?;
    let run_id = get(RUN_ID)
        .or_else(|| get(AIRFLOW_DAG_RUN_ID))
        .ok_or(Error::Missing {
            field: RUN_ID,
            hint: "set REPLAYSAFE_RUN_ID (or run under Airflow, which sets AIRFLOW_CTX_DAG_RUN_ID)",
        })?;

    let (run_kind, conflict) = match get(RUN_KIND) {
        Some(explicit) => (
            explicit
                .parse()
                .map_err(|_| invalid_kind(RUN_KIND, &explicit))?,
            None,
        ),
        None => airflow_run_kind(env)?,
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
    let window = resolve_window(env)?;

    let mut builder = ReplayContext::builder()
        .pipeline(pipeline)
        .run_id(run_id)
        .run_kind(run_kind)
        .window(window)
        .mode(mode);
    if let Some(flag) = replay_flag {
        builder = builder.replay_flag(flag);
    }
    if let Some(backfill_id) = get(BACKFILL_ID) {
        builder = builder.backfill_id(backfill_id);
    }
    if let Some(path) = get(JOURNAL) {
        builder = builder.journal_path(path);
    }
    if let Some(conflict) = conflict {
        builder = builder.conflict(conflict);
    }
    builder.build()
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

fn airflow_run_kind(env: &HashMap<String, String>) -> Result<(RunKind, Option<String>), Error> {
    let from_prefix = env.get(AIRFLOW_DAG_RUN_ID).map(|run_id| {
        let prefix = run_id.split_once("__").map_or("", |(prefix, _)| prefix);
        (prefix.to_owned(), airflow_kind(prefix))
    });
    let from_type = env
        .get(AIRFLOW_RUN_TYPE)
        .map(|run_type| airflow_kind(run_type.trim()));

    let (mut kind, conflict) = match (from_prefix, from_type) {
        (None, None) => return Ok((RunKind::Unknown, None)),
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
    Ok((kind, conflict))
}

fn parse_bool(variable: &'static str, value: &str) -> Result<bool, Error> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(Error::invalid(variable, value, "expected true or false")),
    }
}

fn parse_time(variable: &'static str, value: &str) -> Result<DateTime<Utc>, Error> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Error::invalid(variable, value, format!("not an RFC 3339 timestamp ({e})")))
}

fn resolve_window(env: &HashMap<String, String>) -> Result<Window, Error> {
    let pairs = [
        (WINDOW_START, WINDOW_END, "REPLAYSAFE_WINDOW_START/_END"),
        (
            AIRFLOW_DATA_INTERVAL_START,
            AIRFLOW_DATA_INTERVAL_END,
            "AIRFLOW_CTX_DATA_INTERVAL_START/_END",
        ),
    ];
    for (start_var, end_var, source_vars) in pairs {
        match (env.get(start_var), env.get(end_var)) {
            (None, None) => continue,
            (Some(_), None) => {
                return Err(Error::Missing {
                    field: end_var,
                    hint: "a window needs both its start and its end",
                });
            }
            (None, Some(_)) => {
                return Err(Error::Missing {
                    field: start_var,
                    hint: "a window needs both its start and its end",
                });
            }
            (Some(start), Some(end)) => {
                let start = parse_time(start_var, start.trim())?;
                let end = parse_time(end_var, end.trim())?;
                return Window::new(start, end).map_err(|_| Error::EmptyWindow {
                    source_vars,
                    start,
                    end,
                });
            }
        }
    }
    Err(Error::Missing {
        field: WINDOW_START,
        hint: "set REPLAYSAFE_WINDOW_START and REPLAYSAFE_WINDOW_END (RFC 3339), or export the data interval \
               through get_airflow_context_vars",
    })
}
