use std::sync::Mutex;

use super::{Journal, JournalError, JournalRecord};

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
    fn append(&self, record: &JournalRecord) -> Result<(), JournalError> {
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(record.clone());
        Ok(())
    }
}

/// Emits each record as a `tracing` event with target `replaysafe::journal`, at info level.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingJournal;

impl Journal for TracingJournal {
    fn append(&self, record: &JournalRecord) -> Result<(), JournalError> {
        tracing::info!(
            target: "replaysafe::journal",
            decision = record.decision.as_str(),
            reasons = %record.reasons.join(","),
            pipeline = %record.pipeline,
            run_id = %record.run_id,
            run_kind = %record.run_kind,
            window_start = %record.window.start,
            window_end = %record.window.end,
            kind = %record.effect.kind,
            message_type = %record.effect.message_type,
            target = %record.effect.target,
            idempotency_key = %record.effect.idempotency_key,
            attempt = record.attempt,
            error = record.error.as_deref().unwrap_or(""),
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
    fn append(&self, _record: &JournalRecord) -> Result<(), JournalError> {
        Ok(())
    }
}
