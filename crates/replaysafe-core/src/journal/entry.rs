//! The borrowed form of a journal line: what writers serialise without copying.

use chrono::{DateTime, Utc};
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

use super::{JournalDecision, JournalRecord, RecordOptIn, SCHEMA_VERSION};
use crate::Reason;

/// One journal line, borrowed from the decision that produced it.
///
/// It serialises to exactly the JSON of the owned [`JournalRecord`] (schema version 1);
/// sinks receive it so the hot path of a backfill copies nothing it does not have to.
#[derive(Clone, Copy, Debug)]
pub struct JournalEntry<'a> {
    /// When the decision was made.
    pub ts: DateTime<Utc>,
    /// Delivered, suppressed or failed.
    pub decision: JournalDecision,
    /// The reasons.
    pub reasons: EntryReasons<'a>,
    /// Pipeline name.
    pub pipeline: &'a str,
    /// Execution attempt id.
    pub run_id: &'a str,
    /// Run kind.
    pub run_kind: &'a str,
    /// Backfill id.
    pub backfill_id: Option<&'a str>,
    /// Window start.
    pub window_start: EntryTime<'a>,
    /// Window end (exclusive).
    pub window_end: EntryTime<'a>,
    /// Effect kind.
    pub kind: &'a str,
    /// Message type.
    pub message_type: &'a str,
    /// Redacted target.
    pub target: &'a str,
    /// Idempotency key.
    pub idempotency_key: &'a str,
    /// Summary, when shown.
    pub summary: Option<&'a str>,
    /// Payload SHA-256, hex.
    pub payload_sha256: &'a str,
    /// Payload size.
    pub payload_bytes: u64,
    /// The opt-in, if any.
    pub opt_in: Option<&'a RecordOptIn>,
    /// Attempt, from 1; 0 when suppressed.
    pub attempt: u32,
    /// The error of a failed attempt.
    pub error: Option<&'a str>,
}

/// Reasons as the gate gave them, or as text read back from a journal.
#[derive(Clone, Copy, Debug)]
pub enum EntryReasons<'a> {
    /// From the gate.
    Typed(&'a [Reason]),
    /// From a record.
    Text(&'a [String]),
}

impl Serialize for EntryReasons<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            EntryReasons::Typed(reasons) => {
                let mut seq = serializer.serialize_seq(Some(reasons.len()))?;
                for reason in *reasons {
                    seq.serialize_element(reason.as_str())?;
                }
                seq.end()
            }
            EntryReasons::Text(reasons) => reasons.serialize(serializer),
        }
    }
}

impl EntryReasons<'_> {
    fn to_strings(self) -> Vec<String> {
        match self {
            EntryReasons::Typed(reasons) => reasons.iter().map(|r| r.as_str().to_owned()).collect(),
            EntryReasons::Text(reasons) => reasons.to_vec(),
        }
    }
}

/// A time, as canonical RFC 3339 text already formatted, or to be formatted.
#[derive(Clone, Copy, Debug)]
pub enum EntryTime<'a> {
    /// Canonical RFC 3339 text (as [`crate::rfc3339`] writes it).
    Text(&'a str),
    /// A time to format.
    Time(DateTime<Utc>),
}

impl Serialize for EntryTime<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            EntryTime::Text(text) => serializer.serialize_str(text),
            EntryTime::Time(time) => super::rfc3339::serialize(time, serializer),
        }
    }
}

impl EntryTime<'_> {
    fn to_time(self) -> DateTime<Utc> {
        match self {
            EntryTime::Text(text) => chrono::DateTime::parse_from_rfc3339(text)
                .map(|t| t.with_timezone(&Utc))
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
            EntryTime::Time(time) => time,
        }
    }
}

struct Window<'a>(EntryTime<'a>, EntryTime<'a>);

impl Serialize for Window<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut window = serializer.serialize_struct("window", 2)?;
        window.serialize_field("start", &self.0)?;
        window.serialize_field("end", &self.1)?;
        window.end()
    }
}

struct Effect<'e, 'a>(&'e JournalEntry<'a>);

impl Serialize for Effect<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let entry = self.0;
        let mut effect = serializer.serialize_struct("effect", 7)?;
        effect.serialize_field("kind", entry.kind)?;
        effect.serialize_field("message_type", entry.message_type)?;
        effect.serialize_field("target", entry.target)?;
        effect.serialize_field("idempotency_key", entry.idempotency_key)?;
        effect.serialize_field("summary", &entry.summary)?;
        effect.serialize_field("payload_sha256", entry.payload_sha256)?;
        effect.serialize_field("payload_bytes", &entry.payload_bytes)?;
        effect.end()
    }
}

struct Timestamp(DateTime<Utc>);

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        super::rfc3339::serialize(&self.0, serializer)
    }
}

impl Serialize for JournalEntry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut line = serializer.serialize_struct("JournalRecord", 14)?;
        line.serialize_field("v", &SCHEMA_VERSION)?;
        line.serialize_field("ts", &Timestamp(self.ts))?;
        line.serialize_field("decision", &self.decision)?;
        line.serialize_field("reasons", &self.reasons)?;
        line.serialize_field("pipeline", self.pipeline)?;
        line.serialize_field("run_id", self.run_id)?;
        line.serialize_field("run_kind", self.run_kind)?;
        line.serialize_field("backfill_id", &self.backfill_id)?;
        line.serialize_field("window", &Window(self.window_start, self.window_end))?;
        line.serialize_field("effect", &Effect(self))?;
        line.serialize_field("opt_in", &self.opt_in)?;
        line.serialize_field("attempt", &self.attempt)?;
        line.serialize_field("error", &self.error)?;
        line.end()
    }
}

impl JournalEntry<'_> {
    /// An owned copy, as a reader would see the line.
    pub fn to_record(&self) -> JournalRecord {
        JournalRecord {
            v: SCHEMA_VERSION,
            ts: self.ts,
            decision: self.decision,
            reasons: self.reasons.to_strings(),
            pipeline: self.pipeline.to_owned(),
            run_id: self.run_id.to_owned(),
            run_kind: self.run_kind.to_owned(),
            backfill_id: self.backfill_id.map(str::to_owned),
            window: super::RecordWindow {
                start: self.window_start.to_time(),
                end: self.window_end.to_time(),
            },
            effect: super::RecordEffect {
                kind: self.kind.to_owned(),
                message_type: self.message_type.to_owned(),
                target: self.target.to_owned(),
                idempotency_key: self.idempotency_key.to_owned(),
                summary: self.summary.map(str::to_owned),
                payload_sha256: self.payload_sha256.to_owned(),
                payload_bytes: self.payload_bytes,
            },
            opt_in: self.opt_in.cloned(),
            attempt: self.attempt,
            error: self.error.map(str::to_owned),
        }
    }
}
