use std::sync::Mutex;

use super::ledger::KeyIndex;
use super::{Claim, Journal, JournalEntry, JournalError, JournalRecord, Ledger};

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

    fn ledger(&self) -> Option<&dyn Ledger> {
        Some(self)
    }
}

/// The records' memory of keys, read from the records themselves.
impl Ledger for MemoryJournal {
    fn begin(
        &self,
        attempting: &JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> Result<Claim, JournalError> {
        let mut records = self
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut index = KeyIndex::default();
        for record in records
            .iter()
            .filter(|r| r.effect.idempotency_key == attempting.idempotency_key)
        {
            index.apply(
                record.decision,
                (
                    &record.effect.idempotency_key,
                    record.effect.action.as_deref(),
                ),
                &record.run_id,
                record.ts,
            );
        }
        let memory = index.memory(attempting.idempotency_key, attempting.action);
        let claimed = memory.may_attempt(retry_in_doubt);
        if claimed {
            records.push(attempting.to_record());
        }
        Ok(Claim { memory, claimed })
    }
}

/// Emits each record as a `tracing` event with target `replaysafe::journal`, at info level.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingJournal;

impl Journal for TracingJournal {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        let reasons = serde_json::to_string(&entry.reasons).unwrap_or_default();
        // No ledger: a tracing journal keeps nothing this process can read back.
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
