//! Journals in a database: every record as the line a JSON Lines journal would hold, in
//! `replaysafe_journal`, and the memory of keys beside it, in `replaysafe_journal_keys`
//! (`docs/reference/journal.md` documents both). A database journal is the ledger of every
//! process that shares the database.

use chrono::{DateTime, Utc};
use replaysafe_core::journal::{JournalDecision, JournalEntry, Memory};

use crate::row::{from_millis, millis};

/// One record, ready for the journal table.
#[derive(Debug)]
pub(crate) struct Line {
    pub(crate) ts_ms: i64,
    pub(crate) pipeline: String,
    pub(crate) run_id: String,
    pub(crate) decision: &'static str,
    pub(crate) key: String,
    /// `''` when the effect has no action (a primary-key column cannot be null).
    pub(crate) action: String,
    /// The state the record leaves its key in, when it is about a delivery.
    pub(crate) state: Option<&'static str>,
    /// The record exactly as a JSON Lines journal holds it, without the newline.
    pub(crate) text: String,
}

impl Line {
    pub(crate) fn of(entry: &JournalEntry<'_>) -> Self {
        let mut text = Vec::with_capacity(512);
        entry.write_json(&mut text);
        Line {
            ts_ms: millis(entry.ts()),
            pipeline: entry.pipeline().to_owned(),
            run_id: entry.run_id().to_owned(),
            decision: entry.decision().as_str(),
            key: entry.idempotency_key().to_owned(),
            action: entry.action().unwrap_or_default().to_owned(),
            state: match entry.decision() {
                JournalDecision::Attempting => Some(OPEN),
                JournalDecision::Delivered => Some(DELIVERED),
                JournalDecision::Failed => Some(CLOSED),
                _ => None,
            },
            // The encoder writes UTF-8 JSON.
            text: String::from_utf8(text).unwrap_or_default(),
        }
    }
}

/// A key with an attempt that began and no outcome yet.
pub(crate) const OPEN: &str = "open";
/// A key delivered; it stays so.
pub(crate) const DELIVERED: &str = "delivered";
/// A key whose last attempt failed: clear to attempt again.
pub(crate) const CLOSED: &str = "closed";

/// What a key's row in `replaysafe_journal_keys` says.
pub(crate) fn memory(state: Option<(String, String, i64)>) -> Memory {
    match state {
        Some((state, run_id, ts_ms)) if state == DELIVERED => Memory::Delivered {
            run_id,
            at: from_millis(ts_ms),
        },
        Some((state, run_id, ts_ms)) if state == OPEN => Memory::InDoubt {
            run_id,
            since: from_millis(ts_ms),
        },
        _ => Memory::Clear,
    }
}

/// Which records of a database journal to read: one pipeline's, or every one, from a time
/// on, in the order they were appended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalQuery {
    /// Only this pipeline's records.
    pub pipeline: Option<String>,
    /// Only records at or after this time (`ts`).
    pub since: Option<DateTime<Utc>>,
}

impl JournalQuery {
    /// Every record.
    pub fn all() -> Self {
        JournalQuery::default()
    }

    /// Only `pipeline`'s records.
    pub fn pipeline(mut self, pipeline: impl Into<String>) -> Self {
        self.pipeline = Some(pipeline.into());
        self
    }

    /// Only records from `since` on.
    pub fn since(mut self, since: DateTime<Utc>) -> Self {
        self.since = Some(since);
        self
    }

    pub(crate) fn since_ms(&self) -> i64 {
        self.since.map(millis).unwrap_or(i64::MIN)
    }
}
