//! What kind of run this is, and which attempt.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Error;

/// Why a pipeline is running. The vocabulary of recovery runbooks, plus `unknown`.
///
/// `Backfill`, `Replay` and `Rebuild` are replays: the gate suppresses effects for them.
/// `Unknown` suppresses everything (fail closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// A run the scheduler started for its own interval.
    Scheduled,
    /// A run started by a person (UI, CLI); gated like any other.
    Manual,
    /// A repeat of a failed attempt, same run and interval.
    Retry,
    /// Continuing after a checkpoint.
    Resume,
    /// Processing the same historical input again.
    Replay,
    /// Recomputing an explicit historical range.
    Backfill,
    /// Recreating a derived asset.
    Rebuild,
    /// The kind could not be established: every effect is suppressed.
    Unknown,
}

impl RunKind {
    /// Every kind, in declaration order.
    pub const ALL: [RunKind; 8] = [
        RunKind::Scheduled,
        RunKind::Manual,
        RunKind::Retry,
        RunKind::Resume,
        RunKind::Replay,
        RunKind::Backfill,
        RunKind::Rebuild,
        RunKind::Unknown,
    ];

    /// The snake_case name used in the environment and the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Scheduled => "scheduled",
            RunKind::Manual => "manual",
            RunKind::Retry => "retry",
            RunKind::Resume => "resume",
            RunKind::Replay => "replay",
            RunKind::Backfill => "backfill",
            RunKind::Rebuild => "rebuild",
            RunKind::Unknown => "unknown",
        }
    }

    /// `Backfill`, `Replay` or `Rebuild`: a run over history.
    pub fn is_replay(self) -> bool {
        matches!(self, RunKind::Backfill | RunKind::Replay | RunKind::Rebuild)
    }

    /// Whether the gate suppresses this kind before any other check (replay kinds and `Unknown`).
    pub fn suppresses(self) -> bool {
        self.is_replay() || self == RunKind::Unknown
    }
}

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunKind {
    type Err = Error;

    /// Parses the snake_case name; anything else is [`Error::Invalid`] for `run_kind`.
    fn from_str(value: &str) -> Result<Self, Error> {
        RunKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == value)
            .ok_or_else(|| {
                Error::invalid(
                    "run_kind",
                    value,
                    "expected one of scheduled, manual, retry, resume, replay, backfill, rebuild, unknown",
                )
            })
    }
}

/// Whether `c` may not appear in a name that people read and the journal records (a
/// pipeline, a run id, a backfill id, an opt-in's scope): a control character, or a
/// bidirectional override or isolate (U+202A to U+202E, U+2066 to U+2069), which reorders
/// the text around it on screen so that what a reviewer reads is not what is compared.
pub(crate) fn is_hidden_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// What is wrong with a name holding a character [`is_hidden_char`] refuses.
pub(crate) const HIDDEN_CHARS: &str =
    "must not contain control characters or bidirectional overrides (U+202A-U+202E, U+2066-U+2069)";

/// Names one execution attempt, such as `scheduled__2026-08-06T01:00:00Z__attempt_2`.
///
/// A run id is **not** an idempotency key: retries get new run ids, the logical
/// effect keeps its key (see [`crate::IdempotencyKey`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(String);

impl RunId {
    /// A non-empty id without control characters or bidirectional overrides and isolates
    /// (U+202A to U+202E, U+2066 to U+2069), which reorder what a reviewer reads on screen.
    pub fn new(id: impl Into<String>) -> Result<Self, Error> {
        let id = id.into();
        if id.trim().is_empty() {
            return Err(Error::invalid("run_id", id, "must not be empty"));
        }
        if id.chars().any(is_hidden_char) {
            return Err(Error::invalid("run_id", id, HIDDEN_CHARS));
        }
        Ok(RunId(id))
    }

    /// The id as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in RunKind::ALL {
            assert_eq!(kind.as_str().parse::<RunKind>().unwrap(), kind);
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{}\"", kind.as_str())
            );
        }
        let err = "Backfill".parse::<RunKind>().unwrap_err().to_string();
        assert!(
            err.contains("run_kind") && err.contains("Backfill"),
            "{err}"
        );
    }

    #[test]
    fn replay_kinds() {
        let replays: Vec<_> = RunKind::ALL.into_iter().filter(|k| k.is_replay()).collect();
        assert_eq!(
            replays,
            [RunKind::Replay, RunKind::Backfill, RunKind::Rebuild]
        );
        assert!(RunKind::Unknown.suppresses());
        assert!(!RunKind::Retry.suppresses());
    }

    #[test]
    fn run_id_rejects_empty_and_control() {
        assert!(RunId::new("  ").is_err());
        assert!(RunId::new("a\nb").is_err());
        for hidden in ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}'] {
            let error = RunId::new(format!("backfill__{hidden}x"))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("run_id") && error.contains("bidirectional"),
                "{error}"
            );
            assert!(!error.contains(hidden), "{error}");
        }
        assert!(RunId::new("backfill__\u{2065}x").is_ok());
        assert_eq!(RunId::new("manual__x").unwrap().as_str(), "manual__x");
    }
}
