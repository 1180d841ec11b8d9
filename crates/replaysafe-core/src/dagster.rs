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
//! (the orchestrator side passes it; `replaysafe.dagster.extras(context)` builds the extras),
//! and a re-execution from `extras["dagster/parent_run_id"]` and
//! `extras["dagster/is_resume_retry"]`. The window is `partition_time_window`; without one
//! the run has no window and every effect is suppressed (`unknown_window`).
//!
//! [`decode_params`] also decodes `DAGSTER_PIPES_MESSAGES`, where the `replaysafe` command
//! reports what it did back to Dagster.

use std::io::Read;

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::env::vars::DAGSTER_PIPES_CONTEXT;
use crate::{Error, RunKind, Window};

/// The largest context accepted, decompressed: a context is a few kilobytes.
const MAX_CONTEXT: u64 = 16 << 20;

/// What a Pipes context says about the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PipesRun {
    /// The asset keys in scope (`a/b` for `["a", "b"]`), joined by `,`; else the job name.
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
    partition_time_window: Option<TimeWindow>,
    #[serde(default)]
    extras: Option<serde_json::Map<String, serde_json::Value>>,
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
        .take(MAX_CONTEXT)
        .read_to_end(&mut json)
        .map_err(|_| malformed("not zlib-compressed after base64"))?;
    serde_json::from_slice(&json).map_err(|_| malformed("not a JSON object after zlib"))
}

/// Decodes `DAGSTER_PIPES_CONTEXT` and reads the context it names.
pub(crate) fn read(value: &str) -> Result<PipesRun, Error> {
    let params = decode_params(DAGSTER_PIPES_CONTEXT, value)?;
    let params: Params = serde_json::from_value(serde_json::Value::Object(params))
        .map_err(|_| malformed("not the JSON {\"path\": FILE} or {\"data\": {...}}"))?;
    let data = match (params.path, params.data) {
        (Some(path), None) => {
            let text = std::fs::read(&path)
                .map_err(|e| malformed(format!("the context file {path} cannot be read ({e})")))?;
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
    let backfill_id = text("dagster/backfill");
    let resumed = text("dagster/is_resume_retry").is_some_and(|v| v == "true");
    let re_executed = text("dagster/parent_run_id").is_some();
    let kind = if backfill_id.is_some() {
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
    let pipeline = match data.asset_keys {
        Some(keys) if !keys.is_empty() => {
            let mut keys = keys;
            keys.sort();
            Some(keys.join(","))
        }
        _ => data.job_name.filter(|name| !name.trim().is_empty()),
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
            "extras": {},
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
        assert_eq!(
            with(serde_json::json!({"dagster/is_resume_retry": "true"}), 0).kind,
            RunKind::Resume
        );
        assert_eq!(
            with(serde_json::json!({"dagster/parent_run_id": "p"}), 0).kind,
            RunKind::Retry
        );
        assert_eq!(with(serde_json::json!({}), 1).kind, RunKind::Retry);
        // A backfill retried is still a backfill.
        assert_eq!(
            with(serde_json::json!({"dagster/backfill": "bf1"}), 2).kind,
            RunKind::Backfill
        );
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
