//! Reading a Dagster Pipes context (`DAGSTER_PIPES_CONTEXT`).
//!
//! Dagster's Pipes clients start an external process with `DAGSTER_PIPES_CONTEXT` set to
//! base64 of zlib of JSON: `{"path": FILE}` (the context is in that file, the subprocess
//! client's default) or `{"data": {...}}` (the context itself). The context names the run
//! (`run_id`, `job_name`, `retry_number`), the assets and partitions in scope
//! (`asset_keys`, `partition_key`, `partition_key_range`, `partition_time_window`) and the
//! orchestrator's `extras`.
//!
//! Pipes carries no run tags, so a backfill is known only from `extras["dagster/backfill"]`
//! (the orchestrator side passes it, null for a run of no backfill;
//! `replaysafe.dagster.extras(context)` builds the extras), and a re-execution from
//! `extras["dagster/parent_run_id"]` and `extras["dagster/is_resume_retry"]`. Extras without
//! `dagster/backfill` cannot tell a backfill's run from a fresh one: the run's kind is
//! unknown, and every effect is suppressed. The window is `partition_time_window`; without one
//! the run has no window and every effect is suppressed (`unknown_window`).
//!
//! The pipeline is `extras["replaysafe/pipeline"]` (the asset definition's keys, which the
//! helper passes: the same for every run, whichever keys it selects), else the one asset
//! key in scope, else the job's name unless it is the implicit asset job; without any, the
//! context has no pipeline and `REPLAYSAFE_PIPELINE` must name it. A run over a range of
//! several partitions is a backfill of them.
//!
//! [`decode_params`] also decodes `DAGSTER_PIPES_MESSAGES`, where the `replaysafe` command
//! reports what it did back to Dagster.

use std::io::Read;

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::env::vars::DAGSTER_PIPES_CONTEXT;
use crate::{Error, RunKind, Window};

/// The extra that says whether the run belongs to a backfill (its id, or null).
const BACKFILL_EXTRA: &str = "dagster/backfill";
/// The extra that names the pipeline, the same for every run of the asset (or op)
/// whichever of its keys a run selects: `replaysafe.dagster.extras` passes the asset
/// definition's keys.
const PIPELINE_EXTRA: &str = "replaysafe/pipeline";

/// The largest context accepted, decompressed: a context is a few kilobytes.
const MAX_CONTEXT: u64 = 16 << 20;

/// What a Pipes context says about the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PipesRun {
    /// `extras["replaysafe/pipeline"]`; else the one asset key in scope; else the job's
    /// name, unless it is Dagster's implicit asset job (shared by every asset).
    pub(crate) pipeline: Option<String>,
    pub(crate) run_id: String,
    pub(crate) kind: RunKind,
    pub(crate) window: Option<Window>,
    pub(crate) backfill_id: Option<String>,
}

#[derive(Deserialize)]
struct Params {
    path: Option<String>,
    data: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ContextData {
    run_id: String,
    #[serde(default)]
    job_name: Option<String>,
    #[serde(default)]
    retry_number: u32,
    #[serde(default)]
    asset_keys: Option<Vec<String>>,
    #[serde(default)]
    partition_key_range: Option<KeyRange>,
    #[serde(default)]
    partition_time_window: Option<TimeWindow>,
    #[serde(default)]
    extras: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Deserialize)]
struct KeyRange {
    start: String,
    end: String,
}

#[derive(Deserialize)]
struct TimeWindow {
    start: String,
    end: String,
}

fn malformed(message: impl Into<String>) -> Error {
    Error::malformed(DAGSTER_PIPES_CONTEXT, message.into())
}

/// Decodes one of Dagster Pipes' parameters (`DAGSTER_PIPES_CONTEXT`,
/// `DAGSTER_PIPES_MESSAGES`): base64 of zlib of a JSON object. Anything else is an error
/// naming `variable`.
pub fn decode_params(
    variable: &'static str,
    value: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, Error> {
    let malformed = |message: &str| Error::malformed(variable, message.to_owned());
    let compressed = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .map_err(|_| {
            malformed("not base64 (Dagster Pipes encodes its parameters as base64 of zlib of JSON)")
        })?;
    let mut json = Vec::new();
    flate2::read::ZlibDecoder::new(compressed.as_slice())
        .take(MAX_CONTEXT + 1)
        .read_to_end(&mut json)
        .map_err(|_| malformed("not zlib-compressed after base64"))?;
    if json.len() as u64 > MAX_CONTEXT {
        return Err(malformed("larger than 16 MiB once decompressed"));
    }
    serde_json::from_slice(&json).map_err(|_| malformed("not a JSON object after zlib"))
}

/// Decodes `DAGSTER_PIPES_CONTEXT` and reads the context it names.
pub(crate) fn read(value: &str) -> Result<PipesRun, Error> {
    let params = decode_params(DAGSTER_PIPES_CONTEXT, value)?;
    let params: Params = serde_json::from_value(serde_json::Value::Object(params))
        .map_err(|_| malformed("not the JSON {\"path\": FILE} or {\"data\": {...}}"))?;
    let data = match (params.path, params.data) {
        (Some(path), None) => {
            let mut text = Vec::new();
            std::fs::File::open(&path)
                .and_then(|file| file.take(MAX_CONTEXT + 1).read_to_end(&mut text))
                .map_err(|e| malformed(format!("the context file {path} cannot be read ({e})")))?;
            if text.len() as u64 > MAX_CONTEXT {
                return Err(malformed(format!(
                    "the context file {path} is larger than 16 MiB"
                )));
            }
            serde_json::from_slice(&text)
                .map_err(|e| malformed(format!("the context file {path} is not a context ({e})")))?
        }
        (None, Some(data)) => data,
        _ => {
            return Err(malformed(
                "names neither a context file (path) nor a context (data)",
            ));
        }
    };
    let data: ContextData = serde_json::from_value(data)
        .map_err(|e| malformed(format!("not a Pipes context ({e})")))?;
    interpret(data)
}

fn interpret(data: ContextData) -> Result<PipesRun, Error> {
    let extras = data.extras.unwrap_or_default();
    let text = |key: &str| -> Option<String> {
        match extras.get(key)? {
            serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            serde_json::Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    };
    let backfill_id = text(BACKFILL_EXTRA);
    let resumed = text("dagster/is_resume_retry").is_some_and(|v| v == "true");
    let re_executed = text("dagster/parent_run_id").is_some();
    // Pipes passes no run tags: only extras that name `dagster/backfill` (its id, or null
    // for a run of no backfill) tell a backfill's run from a fresh one. Without the key,
    // or with a value that is no id, the run's kind is unknown, and it suppresses.
    let told = match extras.get(BACKFILL_EXTRA) {
        None => false,
        Some(serde_json::Value::Null) => true,
        Some(_) => backfill_id.is_some(),
    };
    // A run over several partitions at once is a backfill of them, however it was started.
    let over_a_range = data
        .partition_key_range
        .as_ref()
        .is_some_and(|range| range.start != range.end);
    let kind = if !told {
        RunKind::Unknown
    } else if backfill_id.is_some() || over_a_range {
        RunKind::Backfill
    } else if resumed {
        RunKind::Resume
    } else if re_executed || data.retry_number > 0 {
        RunKind::Retry
    } else {
        RunKind::Scheduled
    };
    let window = data
        .partition_time_window
        .map(|window| {
            let time = |field: &str, text: &str| -> Result<DateTime<Utc>, Error> {
                crate::parse_rfc3339(DAGSTER_PIPES_CONTEXT, text).map_err(|_| {
                    malformed(format!(
                        "partition_time_window.{field} is not a time: {text:?}"
                    ))
                })
            };
            Window::from_bounds(time("start", &window.start)?, time("end", &window.end)?)
                .map_err(|_| malformed("partition_time_window ends before it starts"))
        })
        .transpose()?;
    let pipeline = match (text(PIPELINE_EXTRA), data.asset_keys.as_deref()) {
        (Some(named), _) => Some(named),
        (None, Some([key])) => Some(key.clone()),
        // Several keys: a re-execution may select fewer of them, and the name (the key's
        // first field) would change with the selection. The job's name, unless it is the
        // implicit asset job every asset shares.
        (None, _) => data
            .job_name
            .filter(|name| !name.trim().is_empty() && !name.starts_with("__ASSET_JOB")),
    };
    Ok(PipesRun {
        pipeline,
        run_id: data.run_id,
        kind,
        window,
        backfill_id,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn encode(json: &serde_json::Value) -> String {
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(json.to_string().as_bytes()).unwrap();
        base64::engine::general_purpose::STANDARD.encode(encoder.finish().unwrap())
    }

    #[test]
    fn a_context_in_data_or_in_a_file_is_read() {
        let context = serde_json::json!({
            "run_id": "r1", "job_name": "__ASSET_JOB", "retry_number": 0,
            "asset_keys": ["orders/daily"], "partition_key": "2026-11-30",
            "partition_time_window": {"start": "2026-11-30T00:00:00+00:00", "end": "2026-12-01T00:00:00+00:00"},
            "extras": {"dagster/backfill": null},
        });
        let run = read(&encode(&serde_json::json!({"data": context}))).unwrap();
        assert_eq!(run.pipeline.as_deref(), Some("orders/daily"));
        assert_eq!(run.kind, RunKind::Scheduled);
        assert!(run.window.is_some());
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), context.to_string()).unwrap();
        let path = file.path().display().to_string();
        assert_eq!(
            read(&encode(&serde_json::json!({"path": path}))).unwrap(),
            run
        );
    }

    #[test]
    fn extras_make_a_backfill_a_resume_or_a_retry() {
        let with = |extras: serde_json::Value, retry: u32| {
            let data = serde_json::json!({"run_id": "r", "retry_number": retry, "extras": extras});
            read(&encode(&serde_json::json!({"data": data}))).unwrap()
        };
        let backfill = with(serde_json::json!({"dagster/backfill": "bf1"}), 0);
        assert_eq!(
            (backfill.kind, backfill.backfill_id.as_deref()),
            (RunKind::Backfill, Some("bf1"))
        );
        assert_eq!(
            with(serde_json::json!({"dagster/backfill": null}), 0).kind,
            RunKind::Scheduled
        );
        // The extras of a run of no backfill name the key, as null.
        let told = |key: &str, value: serde_json::Value| serde_json::json!({"dagster/backfill": null, key: value});
        assert_eq!(
            with(told("dagster/is_resume_retry", "true".into()), 0).kind,
            RunKind::Resume
        );
        assert_eq!(
            with(told("dagster/parent_run_id", "p".into()), 0).kind,
            RunKind::Retry
        );
        assert_eq!(with(told("other", 1.into()), 1).kind, RunKind::Retry);
        // Extras that do not say whether the run is a backfill's, or say it in no usable
        // form, leave the kind unknown.
        for untold in [
            serde_json::json!({}),
            serde_json::json!({"dagster/parent_run_id": "p"}),
            serde_json::json!({"dagster/backfill": 7}),
            serde_json::json!({"dagster/backfill": " "}),
        ] {
            assert_eq!(with(untold.clone(), 0).kind, RunKind::Unknown, "{untold}");
        }
        // A backfill retried is still a backfill.
        assert_eq!(
            with(serde_json::json!({"dagster/backfill": "bf1"}), 2).kind,
            RunKind::Backfill
        );
    }

    #[test]
    fn the_pipeline_stays_the_same_whichever_keys_a_run_selects() {
        let with =
            |data: serde_json::Value| read(&encode(&serde_json::json!({"data": data}))).unwrap();
        let named = with(
            serde_json::json!({"run_id": "r", "asset_keys": ["a"], "job_name": "__ASSET_JOB",
            "extras": {"dagster/backfill": null, "replaysafe/pipeline": "a,b"}}),
        );
        assert_eq!(named.pipeline.as_deref(), Some("a,b"));
        let one = with(serde_json::json!({"run_id": "r", "asset_keys": ["a"], "extras": {}}));
        assert_eq!(one.pipeline.as_deref(), Some("a"));
        // Several keys and the implicit asset job: no name to trust.
        let several = with(serde_json::json!({"run_id": "r", "asset_keys": ["a", "b"],
            "job_name": "__ASSET_JOB_0", "extras": {}}));
        assert_eq!(several.pipeline, None);
        let job = with(serde_json::json!({"run_id": "r", "job_name": "nightly", "extras": {}}));
        assert_eq!(job.pipeline.as_deref(), Some("nightly"));
    }

    #[test]
    fn a_run_over_several_partitions_is_a_backfill() {
        let run = read(&encode(&serde_json::json!({"data": {
            "run_id": "r", "extras": {"dagster/backfill": null},
            "partition_key_range": {"start": "2026-11-01", "end": "2026-11-03"},
        }})))
        .unwrap();
        assert_eq!(run.kind, RunKind::Backfill);
        let single = read(&encode(&serde_json::json!({"data": {
            "run_id": "r", "extras": {"dagster/backfill": null},
            "partition_key_range": {"start": "2026-11-03", "end": "2026-11-03"},
        }})))
        .unwrap();
        assert_eq!(single.kind, RunKind::Scheduled);
    }

    #[test]
    fn malformed_contexts_are_errors_naming_the_variable() {
        for bad in [
            "not base64!".to_owned(),
            base64::engine::general_purpose::STANDARD.encode(b"not zlib"),
            encode(&serde_json::json!({"neither": 1})),
            encode(&serde_json::json!({"path": "/nonexistent/context.json"})),
            encode(&serde_json::json!({"data": {"no_run_id": 1}})),
            encode(
                &serde_json::json!({"data": {"run_id": "r", "partition_time_window": {"start": "x", "end": "y"}}}),
            ),
            encode(
                &serde_json::json!({"data": {"run_id": "r", "partition_time_window":
                {"start": "2026-12-01T00:00:00Z", "end": "2026-11-30T00:00:00Z"}}}),
            ),
        ] {
            let error = read(&bad).unwrap_err().to_string();
            assert!(error.contains("DAGSTER_PIPES_CONTEXT"), "{error}");
        }
    }
}
