//! The journal: one JSON object per decision, delivered and suppressed alike.
//!
//! Schema version 1 is a compatibility promise: readers accept unknown fields,
//! writers never rename one. See `docs/reference/journal.md`.

mod entry;
mod file;
mod ledger;
#[cfg(feature = "otel")]
mod otel;
mod reader;
mod sinks;

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use entry::JournalEntry;
pub(crate) use entry::{EntryReasons, EntryTime};
pub use file::{Durability, GroupCommit, JsonlJournal, JsonlOptions};
pub use ledger::{Claim, Ledger, Memory};
#[cfg(feature = "otel")]
pub use otel::OtelJournal;
pub use reader::{JournalReader, MAX_LINE_BYTES, ReadError, provably_not_attempting};
pub use sinks::{MemoryJournal, NoopJournal, TracingJournal};

use crate::OptIn;

/// The schema version this crate writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Where journal records go.
///
/// **Architecture Invariant:** a record handed to a journal is never dropped: a sink
/// under load makes the caller wait (backpressure), or returns an error.
pub trait Journal: Send + Sync + fmt::Debug {
    /// Appends one record.
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError>;

    /// Pushes buffered records to their destination.
    ///
    /// [`Guard`](crate::Guard) calls it after every record about a delivery (`attempting`,
    /// `delivered`, `failed`) and before it goes on, so a sink that buffers still has
    /// those records out of the process before the delivery starts and before `send`
    /// returns. A sink that writes every record through at once does nothing here.
    fn flush(&self) -> Result<(), JournalError> {
        Ok(())
    }

    /// The memory of keys this journal keeps, if it keeps one ([`JsonlJournal`],
    /// [`MemoryJournal`]; a database journal): the guard consults it before each
    /// delivery. A sink that keeps nothing to read back (tracing, no-op) has none.
    fn ledger(&self) -> Option<&dyn Ledger> {
        None
    }

    /// [`Journal::append`], for a record about a delivery (`attempting`, `delivered`,
    /// `failed`) made by an asynchronous sender: the journal may hold it for a moment to
    /// write it together with the records of other deliveries in flight (group commit).
    /// When the future completes the record is where [`Journal::append`] would have put
    /// it. The default appends at once.
    fn append_grouped<'a>(&'a self, entry: &'a JournalEntry<'_>) -> JournalFuture<'a, ()> {
        Box::pin(std::future::ready(self.append(entry)))
    }
}

/// What the asynchronous journal calls ([`Journal::append_grouped`],
/// [`Ledger::begin_grouped`]) return.
pub type JournalFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, JournalError>> + Send + 'a>>;

impl<J: Journal + ?Sized> Journal for &J {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        (**self).append(entry)
    }
    fn flush(&self) -> Result<(), JournalError> {
        (**self).flush()
    }
    fn ledger(&self) -> Option<&dyn Ledger> {
        (**self).ledger()
    }
    fn append_grouped<'a>(&'a self, entry: &'a JournalEntry<'_>) -> JournalFuture<'a, ()> {
        (**self).append_grouped(entry)
    }
}

impl<J: Journal + ?Sized> Journal for Box<J> {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        (**self).append(entry)
    }
    fn flush(&self) -> Result<(), JournalError> {
        (**self).flush()
    }
    fn ledger(&self) -> Option<&dyn Ledger> {
        (**self).ledger()
    }
    fn append_grouped<'a>(&'a self, entry: &'a JournalEntry<'_>) -> JournalFuture<'a, ()> {
        (**self).append_grouped(entry)
    }
}

impl<J: Journal + ?Sized> Journal for Arc<J> {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        (**self).append(entry)
    }
    fn flush(&self) -> Result<(), JournalError> {
        (**self).flush()
    }
    fn ledger(&self) -> Option<&dyn Ledger> {
        (**self).ledger()
    }
    fn append_grouped<'a>(&'a self, entry: &'a JournalEntry<'_>) -> JournalFuture<'a, ()> {
        (**self).append_grouped(entry)
    }
}

/// Both journals get every record (a file and `tracing`, say). The pair's memory of
/// keys is the first one's that keeps one; a claim it grants reaches the other journal
/// too.
impl<A: Journal, B: Journal> Journal for (A, B) {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        self.0.append(entry)?;
        self.1.append(entry)
    }
    fn flush(&self) -> Result<(), JournalError> {
        self.0.flush()?;
        self.1.flush()
    }
    fn ledger(&self) -> Option<&dyn Ledger> {
        keeper(self).map(|_| self as &dyn Ledger)
    }
    fn append_grouped<'a>(&'a self, entry: &'a JournalEntry<'_>) -> JournalFuture<'a, ()> {
        Box::pin(async move {
            self.0.append_grouped(entry).await?;
            self.1.append_grouped(entry).await
        })
    }
}

impl<A: Journal, B: Journal> Ledger for (A, B) {
    fn begin(
        &self,
        attempting: &JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> Result<Claim, JournalError> {
        // Offered by `ledger` only when one of the two keeps a memory; the other gets the
        // claim appended. With neither, nothing may be claimed.
        let Some((ledger, other)) = keeper(self) else {
            return Ok(Claim::new(Memory::Clear, false));
        };
        let claim = ledger.begin(attempting, retry_in_doubt)?;
        if claim.claimed {
            other.append(attempting)?;
        }
        Ok(claim)
    }

    fn begin_grouped<'a>(
        &'a self,
        attempting: &'a JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> JournalFuture<'a, Claim> {
        Box::pin(async move {
            let Some((ledger, other)) = keeper(self) else {
                return Ok(Claim::new(Memory::Clear, false));
            };
            let claim = ledger.begin_grouped(attempting, retry_in_doubt).await?;
            if claim.claimed {
                other.append_grouped(attempting).await?;
            }
            Ok(claim)
        })
    }
}

/// Which of a pair of journals keeps the memory (the first that does), and the other one.
fn keeper<A: Journal, B: Journal>(pair: &(A, B)) -> Option<(&dyn Ledger, &dyn Journal)> {
    match (pair.0.ledger(), pair.1.ledger()) {
        (Some(ledger), _) => Some((ledger, &pair.1)),
        (None, Some(ledger)) => Some((ledger, &pair.0)),
        (None, None) => None,
    }
}

/// A journal could not be opened or written.
///
/// Its message names the journal's path and what was being done: opening it, or writing
/// the record of which decision about which idempotency key. The operating system's error
/// is its [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[error("{}", self.doing())]
pub struct JournalError {
    path: String,
    step: JournalStep,
    #[source]
    source: std::io::Error,
}

/// What a journal was doing when it failed.
#[derive(Debug)]
enum JournalStep {
    Opening,
    /// Writing records collected earlier (a buffer, or a flush).
    Writing,
    /// Writing the record of one decision about one effect.
    WritingRecord {
        decision: JournalDecision,
        key: String,
    },
    /// Reading what the journal knows of a key, before a delivery.
    Recalling {
        key: String,
    },
    /// Something a journal of another kind (a database) was doing.
    Other(String),
}

impl JournalError {
    pub(crate) fn opening(path: impl Into<String>, source: std::io::Error) -> Self {
        JournalError {
            path: path.into(),
            step: JournalStep::Opening,
            source,
        }
    }

    pub(crate) fn writing(path: impl Into<String>, source: std::io::Error) -> Self {
        JournalError {
            path: path.into(),
            step: JournalStep::Writing,
            source,
        }
    }

    pub(crate) fn writing_record(
        path: impl Into<String>,
        entry: &JournalEntry<'_>,
        source: std::io::Error,
    ) -> Self {
        JournalError {
            path: path.into(),
            step: JournalStep::WritingRecord {
                decision: entry.decision,
                key: entry.idempotency_key.to_owned(),
            },
            source,
        }
    }

    pub(crate) fn recalling(path: impl Into<String>, key: &str, source: std::io::Error) -> Self {
        JournalError {
            path: path.into(),
            step: JournalStep::Recalling {
                key: key.to_owned(),
            },
            source,
        }
    }

    /// A journal of another kind than this crate's (a database journal) could not write
    /// the record `entry`: the error names its decision and key, as the file journal's do,
    /// so a sender can tell an outcome that was not recorded. `journal` names the journal
    /// as people may see it (no password).
    pub fn record_not_written(
        journal: impl Into<String>,
        entry: &JournalEntry<'_>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::writing_record(journal, entry, std::io::Error::other(source))
    }

    /// A journal of another kind than this crate's could not tell what it knows of `key`
    /// before a delivery ([`Ledger::begin`]); nothing was appended.
    pub fn key_not_recalled(
        journal: impl Into<String>,
        key: &str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::recalling(journal, key, std::io::Error::other(source))
    }

    /// An error of a journal of another kind than this crate's (a database journal):
    /// `journal` names it as people may see it (no password), `doing` says what was being
    /// done (`appending the delivered record of effect 3f…`), `source` is the cause.
    pub fn other(
        journal: impl Into<String>,
        doing: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        JournalError {
            path: journal.into(),
            step: JournalStep::Other(doing.into()),
            source: std::io::Error::other(source),
        }
    }

    fn doing(&self) -> String {
        let path = &self.path;
        match &self.step {
            JournalStep::Opening => format!("opening journal {path}"),
            JournalStep::Writing => format!("writing journal {path}"),
            JournalStep::Recalling { key } => {
                format!("reading journal {path} for what it knows of effect {key}")
            }
            JournalStep::Other(doing) => format!("{doing} in journal {path}"),
            JournalStep::WritingRecord { decision, key } => format!(
                "writing the {} record of effect {key} to journal {path}",
                decision.as_str()
            ),
        }
    }

    /// The journal's path, as given.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The decision whose record could not be written, when one record was being
    /// written: `attempting` means the attempt was not made; `delivered` or `failed` means
    /// the attempt was made and the journal lacks its outcome (the effect is in doubt there).
    pub fn decision(&self) -> Option<JournalDecision> {
        match &self.step {
            JournalStep::WritingRecord { decision, .. } => Some(*decision),
            _ => None,
        }
    }

    /// The idempotency key of the effect whose record could not be written, when one
    /// record was being written.
    pub fn idempotency_key(&self) -> Option<&str> {
        match &self.step {
            JournalStep::WritingRecord { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Whether the journal was refused because its path is not a regular file (a device
    /// such as `/dev/null`, a FIFO, a socket, a folder): a journal must keep its records.
    pub fn is_not_a_regular_file(&self) -> bool {
        matches!(self.step, JournalStep::Opening)
            && self
                .source
                .get_ref()
                .is_some_and(|inner| inner.is::<file::NotARegularFile>())
    }
}

/// What happened to an effect.
///
/// New values are additive within schema version 1 and documented before they are
/// written; a match over this type should keep a wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JournalDecision {
    /// The receiver accepted it.
    Delivered,
    /// The gate stopped it; nothing left the process.
    Suppressed,
    /// A delivery attempt failed (one record per failed attempt).
    Failed,
    /// A delivery attempt is about to start (one record per attempt, written before it).
    /// Without a `delivered` or `failed` record for the attempt after it, the effect is
    /// in doubt: the receiver may or may not have it.
    Attempting,
    /// An operator put an outbox row back to be delivered (`replaysafe outbox retry` or
    /// `resend`); the record's `note` says who and why, its `opt_in` the approval file
    /// given, if any. Nothing was sent: the worker decides again at delivery.
    Requeued,
    /// An outbox route's circuit opened or closed (reasons `circuit_opened`,
    /// `circuit_closed`), written on the row whose delivery changed it; `note` names the
    /// route and the failures. Nothing was sent by this record: the row's own outcome is
    /// its own `failed` or `delivered` record.
    Circuit,
    /// A decision this version does not know, read from a newer writer's line (schema
    /// version 1 adds decision values without a new version). Never written by this crate.
    #[serde(other)]
    Unknown,
}

impl JournalDecision {
    /// Whether a record of this decision is about a delivery (`attempting`, `delivered`,
    /// `failed`): the records a ledger remembers keys by.
    pub(crate) fn is_about_a_delivery(self) -> bool {
        matches!(
            self,
            JournalDecision::Attempting | JournalDecision::Delivered | JournalDecision::Failed
        )
    }

    /// `delivered`, `suppressed`, `failed`, `attempting`, `requeued`, `circuit`, or `unknown` for a value read
    /// from a newer writer.
    pub fn as_str(self) -> &'static str {
        match self {
            JournalDecision::Delivered => "delivered",
            JournalDecision::Suppressed => "suppressed",
            JournalDecision::Failed => "failed",
            JournalDecision::Attempting => "attempting",
            JournalDecision::Requeued => "requeued",
            JournalDecision::Circuit => "circuit",
            JournalDecision::Unknown => "unknown",
        }
    }
}

/// One journal line, schema version 1.
///
/// Kinds, reasons and run kinds are kept as text so a reader of version 1 accepts the
/// words a later writer adds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JournalRecord {
    /// Schema version (1).
    pub v: u32,
    /// When the decision was made.
    #[serde(with = "rfc3339")]
    pub ts: DateTime<Utc>,
    /// Delivered, suppressed, failed or attempting.
    pub decision: JournalDecision,
    /// Snake_case reasons (`replay_run`, `stale_window`, ...).
    pub reasons: Vec<String>,
    /// Pipeline name.
    pub pipeline: String,
    /// Execution attempt id.
    pub run_id: String,
    /// Run kind.
    pub run_kind: String,
    /// Backfill id, if any.
    pub backfill_id: Option<String>,
    /// The data window.
    pub window: RecordWindow,
    /// The effect, redacted.
    pub effect: RecordEffect,
    /// The opt-in that enabled delivery, or that had expired.
    pub opt_in: Option<RecordOptIn>,
    /// Delivery attempt, from 1 (`attempting`, `failed`, `delivered`); 0 when suppressed.
    pub attempt: u32,
    /// What went wrong, for failed attempts.
    pub error: Option<String>,
    /// A note for the reader: who asked for an operator action and why (`requeued`).
    /// Added within schema version 1; written only when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The window of a record. Not validated on read: a journal is evidence, even when odd.
/// An instant run has `start == end`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordWindow {
    /// Inclusive start.
    #[serde(with = "rfc3339")]
    pub start: DateTime<Utc>,
    /// Exclusive end (equal to `start` for an instant).
    #[serde(with = "rfc3339")]
    pub end: DateTime<Utc>,
}

impl RecordWindow {
    /// The window `[start, end)`, or the instant `[start, start]`; not validated.
    pub fn new(start: DateTime<Utc>, end: DateTime<Utc>) -> Self {
        RecordWindow { start, end }
    }

    /// Whether the window is an instant (`start == end`).
    pub fn is_instant(&self) -> bool {
        self.start == self.end
    }
}

/// The effect of a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordEffect {
    /// `email`, `webhook`, `file_drop`, `metric`, `alert`, `trigger` or a custom name.
    pub kind: String,
    /// Message type.
    pub message_type: String,
    /// Target after redaction.
    pub target: String,
    /// Idempotency key.
    pub idempotency_key: String,
    /// Short summary, unless the policy hides it.
    pub summary: Option<String>,
    /// SHA-256 of the payload, hex.
    pub payload_sha256: String,
    /// Payload size in bytes.
    pub payload_bytes: u64,
    /// The action of a key that names several (an alert's `trigger` or `resolve`); the
    /// field is left out of the line when there is none. Added within schema version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// The audited opt-in of a record: who approved what, and how far it reaches.
///
/// The fields after `expires_at` were added within schema version 1; a line written
/// before them reads with `kinds` empty and the rest `None`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordOptIn {
    /// Why.
    pub reason: String,
    /// Who approved: the trusted approver's key name when a trusted key signed it, else
    /// the approver the opt-in names.
    pub approved_by: String,
    /// Expiry.
    #[serde(with = "rfc3339")]
    pub expires_at: DateTime<Utc>,
    /// The effect kinds it covers.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// The exact targets it is restricted to (as the adapter describes them, before
    /// redaction), or `None` for every target.
    #[serde(default)]
    pub targets: Option<Vec<String>>,
    /// The pipeline it is restricted to.
    #[serde(default)]
    pub pipeline: Option<String>,
    /// The backfill it is restricted to.
    #[serde(default)]
    pub backfill_id: Option<String>,
    /// The run-id pattern it is restricted to.
    #[serde(default)]
    pub run_id_pattern: Option<String>,
    /// The trusted approver whose key signed it (the key's name in
    /// `REPLAYSAFE_TRUSTED_APPROVERS`).
    #[serde(default)]
    pub signer: Option<String>,
    /// The fingerprint of the key that signed it, trusted or not.
    #[serde(default)]
    pub signer_fingerprint: Option<String>,
}

impl RecordEffect {
    /// An effect of `kind` and `message_type` to `target` (as redacted for the journal),
    /// keyed `idempotency_key`, whose payload has this digest and size; no summary.
    pub fn new(
        kind: impl Into<String>,
        message_type: impl Into<String>,
        target: impl Into<String>,
        idempotency_key: impl Into<String>,
        payload_sha256: impl Into<String>,
        payload_bytes: u64,
    ) -> Self {
        RecordEffect {
            kind: kind.into(),
            message_type: message_type.into(),
            target: target.into(),
            idempotency_key: idempotency_key.into(),
            summary: None,
            payload_sha256: payload_sha256.into(),
            payload_bytes,
            action: None,
        }
    }

    /// With the action of a key that names several.
    pub fn with_action(mut self, action: Option<String>) -> Self {
        self.action = action;
        self
    }

    /// With a summary.
    pub fn with_summary(mut self, summary: Option<String>) -> Self {
        self.summary = summary;
        self
    }
}

impl RecordOptIn {
    /// An opt-in's reason, approver and expiry, with no scope; set the scope's fields
    /// after (they are public), or take one whole from an [`OptIn`] with `From`.
    pub fn new(
        reason: impl Into<String>,
        approved_by: impl Into<String>,
        expires_at: DateTime<Utc>,
    ) -> Self {
        RecordOptIn {
            reason: reason.into(),
            approved_by: approved_by.into(),
            expires_at,
            kinds: Vec::new(),
            targets: None,
            pipeline: None,
            backfill_id: None,
            run_id_pattern: None,
            signer: None,
            signer_fingerprint: None,
        }
    }
}

impl From<&OptIn> for RecordOptIn {
    fn from(opt_in: &OptIn) -> Self {
        RecordOptIn {
            reason: opt_in.reason().to_owned(),
            approved_by: opt_in.signer().unwrap_or(opt_in.approved_by()).to_owned(),
            expires_at: opt_in.expires_at(),
            kinds: opt_in
                .kinds()
                .iter()
                .map(|k| k.as_str().to_owned())
                .collect(),
            targets: opt_in.targets().map(|t| t.iter().cloned().collect()),
            pipeline: opt_in.pipeline().map(str::to_owned),
            backfill_id: opt_in.backfill_id().map(str::to_owned),
            run_id_pattern: opt_in.run_id_pattern().map(str::to_owned),
            signer: opt_in.signer().map(str::to_owned),
            signer_fingerprint: opt_in.signer_fingerprint(),
        }
    }
}

impl JournalRecord {
    /// A record of schema version 1: `decision` on `effect`, in the run `run_id` of
    /// `pipeline`, of kind `run_kind`, over `window`, at `ts`; no reasons, backfill,
    /// opt-in, attempt, error or note yet (the `with_*` methods add them).
    pub fn new(
        ts: DateTime<Utc>,
        decision: JournalDecision,
        pipeline: impl Into<String>,
        run_id: impl Into<String>,
        run_kind: impl Into<String>,
        window: RecordWindow,
        effect: RecordEffect,
    ) -> Self {
        JournalRecord {
            v: SCHEMA_VERSION,
            ts,
            decision,
            reasons: Vec::new(),
            pipeline: pipeline.into(),
            run_id: run_id.into(),
            run_kind: run_kind.into(),
            backfill_id: None,
            window,
            effect,
            opt_in: None,
            attempt: 0,
            error: None,
            note: None,
        }
    }

    /// With these reasons.
    pub fn with_reasons<S: Into<String>>(mut self, reasons: impl IntoIterator<Item = S>) -> Self {
        self.reasons = reasons.into_iter().map(Into::into).collect();
        self
    }

    /// With a backfill id.
    pub fn with_backfill_id(mut self, backfill_id: Option<String>) -> Self {
        self.backfill_id = backfill_id;
        self
    }

    /// With an opt-in.
    pub fn with_opt_in(mut self, opt_in: Option<RecordOptIn>) -> Self {
        self.opt_in = opt_in;
        self
    }

    /// With an attempt number.
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// With an error.
    pub fn with_error(mut self, error: Option<String>) -> Self {
        self.error = error;
        self
    }

    /// With a note.
    pub fn with_note(mut self, note: Option<String>) -> Self {
        self.note = note;
        self
    }

    /// The borrowed view a [`Journal`] takes.
    pub fn entry(&self) -> JournalEntry<'_> {
        JournalEntry {
            ts: self.ts,
            decision: self.decision,
            reasons: EntryReasons::Text(&self.reasons),
            pipeline: &self.pipeline,
            run_id: &self.run_id,
            run_kind: &self.run_kind,
            backfill_id: self.backfill_id.as_deref(),
            window_start: EntryTime::Time(self.window.start),
            window_end: EntryTime::Time(self.window.end),
            kind: &self.effect.kind,
            message_type: &self.effect.message_type,
            target: &self.effect.target,
            idempotency_key: &self.effect.idempotency_key,
            summary: self.effect.summary.as_deref(),
            action: self.effect.action.as_deref(),
            payload_sha256: &self.effect.payload_sha256,
            payload_bytes: self.effect.payload_bytes,
            opt_in: self.opt_in.as_ref(),
            attempt: self.attempt,
            error: self.error.as_deref(),
            error_type: None,
            note: self.note.as_deref(),
        }
    }
}

/// Serde helpers writing times as canonical RFC 3339 (`2026-08-05T00:00:00Z`).
pub mod rfc3339 {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the canonical form.
    pub fn serialize<S: Serializer>(
        instant: &DateTime<Utc>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&crate::key::rfc3339(*instant))
    }

    /// Reads any RFC 3339 time and converts it to UTC.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<DateTime<Utc>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(serde::de::Error::custom)
    }
}
