use std::sync::Mutex;

use super::{Journal, JournalEntry, JournalError, JournalRecord};

/// Keeps records in memory; for tests and for in-process reports.
#[derive(Debug, Default)]
pub struct MemoryJournal {
    records: Mutex<Vec<JournalRecord>>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every record so far.
    pub fn records(&self) -> Vec<JournalRecord> {
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// How many records so far.
    pub fn len(&self) -> usize {
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    /// Whether no record was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Journal for MemoryJournal {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        let record = entry.to_record();
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(record);
        Ok(())
    }
}

/// Emits each record as a `tracing` event with target `replaysafe::journal`, at info level.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingJournal;

impl Journal for TracingJournal {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        let reasons = serde_json::to_string(&entry.reasons).unwrap_or_default();
        tracing::info!(
            target: "replaysafe::journal",
            decision = entry.decision.as_str(),
            reasons = %reasons,
            pipeline = entry.pipeline,
            run_id = entry.run_id,
            run_kind = entry.run_kind,
            kind = entry.kind,
            message_type = entry.message_type,
            target = entry.target,
            idempotency_key = entry.idempotency_key,
            attempt = entry.attempt,
            error = entry.error.unwrap_or(""),
            "journal"
        );
        Ok(())
    }
}

/// Discards every record. A no-op, on purpose: for benchmarks of the deliver path only,
/// never for a pipeline (it breaks "every decision is journaled").
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopJournal;

impl Journal for NoopJournal {
    fn append(&self, _entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        Ok(())
    }
}
