//! Lineage: the runs that caused this one (`REPLAYSAFE_UPSTREAM`).
//!
//! A downstream run (an Airflow asset consumer, a DAG triggered by another) is a replay
//! when what caused it was: a backfill of the upstream pipeline makes its consumers run
//! once per backfilled window, and each would notify the partner again. So any upstream
//! replay suppresses every effect (`upstream_replay`), an upstream run of unknown kind
//! makes the run's kind unknown, and a run with no window of its own takes the span of its
//! upstream runs' windows, so a consumer run created again for the same upstream events
//! derives the same keys.
//!
//! Lineage can only make a run suppress, never deliver (`docs/adr/0010-trust-at-the-boundaries.md`:
//! a decision relies only on what the deciding process can verify, and a claimed lineage is
//! not verified): a current upstream adds nothing, a replay or an unknown one suppresses.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Error, RunKind, Window};

/// One run that caused this one.
///
/// Its kind is what `run_kind` says and what its run id's Airflow prefix (`backfill__`,
/// `scheduled__`, ...) says, toward suppression when they disagree; an explicit replay flag
/// makes it a replay. Without either the kind is [`RunKind::Unknown`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamRun {
    pipeline: String,
    run_id: String,
    kind: RunKind,
    window: Option<Window>,
}

/// The JSON of one upstream run, as `REPLAYSAFE_UPSTREAM` lists them.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamJson {
    pipeline: String,
    run_id: String,
    #[serde(default)]
    run_kind: Option<String>,
    #[serde(default)]
    replay: Option<bool>,
    #[serde(default)]
    window_start: Option<String>,
    #[serde(default)]
    window_end: Option<String>,
    #[serde(default)]
    logical_date: Option<String>,
}

impl UpstreamRun {
    /// An upstream run of `pipeline`, `run_id`, whose kind comes from `run_kind` (when
    /// given) and the run id's Airflow prefix, and whose window is `window` (an instant
    /// for a logical date), when known.
    pub fn new(
        pipeline: impl Into<String>,
        run_id: impl Into<String>,
        run_kind: Option<RunKind>,
        window: Option<Window>,
    ) -> Result<Self, Error> {
        let pipeline = crate::context::checked_name("upstream.pipeline", pipeline.into())?;
        let run_id = crate::context::checked_name("upstream.run_id", run_id.into())?;
        let kind = upstream_kind(run_kind, &run_id);
        Ok(UpstreamRun {
            pipeline,
            run_id,
            kind,
            window,
        })
    }

    /// Parses `REPLAYSAFE_UPSTREAM`'s JSON array; anything malformed (not JSON, an unknown
    /// field, a run kind that is not one, a time that is not RFC 3339, a window with one end
    /// or inverted) is an error naming `variable`.
    pub fn parse_list(variable: &'static str, text: &str) -> Result<Vec<UpstreamRun>, Error> {
        let runs: Vec<UpstreamJson> = serde_json::from_str(text).map_err(|e| {
            Error::malformed(
                variable,
                format!(
                    "expected a JSON array of {{\"pipeline\", \"run_id\", \"run_kind\"?, \"window_start\"?, \
                     \"window_end\"?, \"logical_date\"?}} ({})",
                    e.to_string().split(" at line").next().unwrap_or("not JSON")
                ),
            )
        })?;
        runs.into_iter()
            .map(|run| UpstreamRun::from_json(variable, run))
            .collect()
    }

    fn from_json(variable: &'static str, run: UpstreamJson) -> Result<UpstreamRun, Error> {
        let time = |text: &str| crate::parse_rfc3339(variable, text);
        let run_kind = run
            .run_kind
            .as_deref()
            .map(|kind| {
                kind.parse::<RunKind>().map_err(|_| {
                    Error::invalid(
                        variable,
                        kind,
                        "an upstream run_kind is one of scheduled, manual, retry, resume, replay, backfill, rebuild",
                    )
                })
            })
            .transpose()?;
        let window = match (&run.window_start, &run.window_end) {
            (Some(start), Some(end)) => {
                Some(Window::from_bounds(time(start)?, time(end)?).map_err(|_| {
                    Error::malformed(variable, "an upstream window ends before it starts")
                })?)
            }
            (None, None) => None,
            _ => {
                return Err(Error::malformed(
                    variable,
                    "an upstream run gives window_start and window_end together, or neither",
                ));
            }
        };
        let window = match (window, &run.logical_date) {
            (Some(window), _) => Some(window),
            (None, Some(logical)) if logical != "None" => Some(Window::instant(time(logical)?)),
            (None, _) => None,
        };
        let run_kind = match (run_kind, run.replay) {
            (_, Some(true)) => Some(RunKind::Replay),
            (kind, _) => kind,
        };
        UpstreamRun::new(run.pipeline, run.run_id, run_kind, window)
            .map_err(|e| Error::malformed(variable, e.to_string()))
    }

    /// The upstream pipeline.
    pub fn pipeline(&self) -> &str {
        &self.pipeline
    }

    /// The upstream run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The upstream run's kind, as resolved.
    pub fn kind(&self) -> RunKind {
        self.kind
    }

    /// The upstream run's window (an instant for a logical date), when known.
    pub fn window(&self) -> Option<&Window> {
        self.window.as_ref()
    }

    /// The JSON object `REPLAYSAFE_UPSTREAM` lists for this run.
    pub fn to_json(&self) -> serde_json::Value {
        let time = |t: DateTime<Utc>| serde_json::Value::String(crate::rfc3339(t));
        let mut object = serde_json::Map::new();
        object.insert("pipeline".into(), self.pipeline.clone().into());
        object.insert("run_id".into(), self.run_id.clone().into());
        object.insert("run_kind".into(), self.kind.as_str().into());
        if let Some(window) = &self.window {
            object.insert("window_start".into(), time(window.start()));
            object.insert("window_end".into(), time(window.end()));
        }
        serde_json::Value::Object(object)
    }
}

/// An upstream run's kind: the explicit kind and the Airflow prefix of its run id, toward
/// suppression when they disagree; unknown when neither tells.
fn upstream_kind(explicit: Option<RunKind>, run_id: &str) -> RunKind {
    let by_prefix = run_id
        .split_once("__")
        .map(|(prefix, _)| crate::env::airflow_kind(prefix));
    match (explicit, by_prefix) {
        (Some(explicit), Some(prefix)) if explicit.suppresses() != prefix.suppresses() => {
            if explicit.suppresses() {
                explicit
            } else {
                prefix
            }
        }
        (Some(kind), _) | (None, Some(kind)) => kind,
        (None, None) => RunKind::Unknown,
    }
}

/// The span of the windows of `upstream` that have one: from the earliest start to the
/// latest end; `None` when none has a window.
pub(crate) fn span(upstream: &[UpstreamRun]) -> Option<Window> {
    let windows = upstream.iter().filter_map(UpstreamRun::window);
    let start = windows.clone().map(Window::start).min()?;
    let end = windows.map(Window::end).max()?;
    Window::from_bounds(start, end).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_come_from_the_run_kind_and_the_prefix_toward_suppression() {
        let kind = |explicit, run_id| upstream_kind(explicit, run_id);
        assert_eq!(kind(None, "backfill__2026-07-05"), RunKind::Backfill);
        assert_eq!(kind(None, "scheduled__2026-07-05"), RunKind::Scheduled);
        assert_eq!(kind(None, "asset_triggered__x"), RunKind::Scheduled);
        assert_eq!(kind(None, "run-42"), RunKind::Unknown);
        assert_eq!(kind(None, "odd__x"), RunKind::Unknown);
        assert_eq!(kind(Some(RunKind::Scheduled), "run-42"), RunKind::Scheduled);
        assert_eq!(
            kind(Some(RunKind::Scheduled), "backfill__x"),
            RunKind::Backfill
        );
        assert_eq!(
            kind(Some(RunKind::Backfill), "scheduled__x"),
            RunKind::Backfill
        );
    }

    #[test]
    fn a_list_is_parsed_strictly_naming_the_variable() {
        let runs = UpstreamRun::parse_list(
            "V",
            r#"[{"pipeline": "a", "run_id": "scheduled__2026-08-05T00:00:00+00:00",
                 "logical_date": "2026-08-05T00:00:00+00:00"},
                {"pipeline": "a", "run_id": "r", "run_kind": "manual", "replay": true,
                 "window_start": "2026-08-04T00:00:00Z", "window_end": "2026-08-05T00:00:00Z"}]"#,
        )
        .unwrap();
        assert_eq!(runs[0].kind(), RunKind::Scheduled);
        assert!(runs[0].window().unwrap().is_instant());
        assert_eq!(runs[1].kind(), RunKind::Replay);
        let span = span(&runs).unwrap();
        assert_eq!(crate::rfc3339(span.start()), "2026-08-04T00:00:00Z");
        assert_eq!(crate::rfc3339(span.end()), "2026-08-05T00:00:00Z");
        for bad in [
            "{}",
            "[{\"pipeline\": \"a\"}]",
            "[{\"pipeline\": \"a\", \"run_id\": \"r\", \"extra\": 1}]",
            "[{\"pipeline\": \"a\", \"run_id\": \"r\", \"run_kind\": \"weekly\"}]",
            "[{\"pipeline\": \"a\", \"run_id\": \"r\", \"window_start\": \"2026-08-04T00:00:00Z\"}]",
            "[{\"pipeline\": \"a\", \"run_id\": \"r\", \"logical_date\": \"yesterday\"}]",
            "[{\"pipeline\": \"\", \"run_id\": \"r\"}]",
        ] {
            let error = UpstreamRun::parse_list("REPLAYSAFE_UPSTREAM", bad).unwrap_err();
            assert!(
                error.to_string().contains("REPLAYSAFE_UPSTREAM"),
                "{bad}: {error}"
            );
        }
    }
}
