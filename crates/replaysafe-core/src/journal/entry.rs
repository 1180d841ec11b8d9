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
#[non_exhaustive]
pub struct JournalEntry<'a> {
    /// When the decision was made.
    pub(crate) ts: DateTime<Utc>,
    /// Delivered, suppressed, failed or attempting.
    pub(crate) decision: JournalDecision,
    /// The reasons.
    pub(crate) reasons: EntryReasons<'a>,
    /// Pipeline name.
    pub(crate) pipeline: &'a str,
    /// Execution attempt id.
    pub(crate) run_id: &'a str,
    /// Run kind.
    pub(crate) run_kind: &'a str,
    /// Backfill id.
    pub(crate) backfill_id: Option<&'a str>,
    /// Window start.
    pub(crate) window_start: EntryTime<'a>,
    /// Window end (exclusive).
    pub(crate) window_end: EntryTime<'a>,
    /// Effect kind.
    pub(crate) kind: &'a str,
    /// Message type.
    pub(crate) message_type: &'a str,
    /// Redacted target.
    pub(crate) target: &'a str,
    /// Idempotency key.
    pub(crate) idempotency_key: &'a str,
    /// Summary, when shown.
    pub(crate) summary: Option<&'a str>,
    /// The action of a key that names several; left out of the line when there is none.
    pub(crate) action: Option<&'a str>,
    /// Payload SHA-256, hex.
    pub payload_sha256: &'a str,
    /// Payload size.
    pub(crate) payload_bytes: u64,
    /// The opt-in, if any.
    pub(crate) opt_in: Option<&'a RecordOptIn>,
    /// Attempt, from 1; 0 when suppressed.
    pub(crate) attempt: u32,
    /// The error of a failed attempt.
    pub(crate) error: Option<&'a str>,
    /// The class of that error ([`Classify::error_type`](crate::Classify::error_type)),
    /// when the failure was just decided; not part of the line (a record read back has
    /// none).
    pub(crate) error_type: Option<&'a str>,
    /// A note for the reader (who asked for an operator action and why); the field is
    /// left out of the line when there is none.
    pub(crate) note: Option<&'a str>,
}

/// Reasons as the gate gave them, or as text read back from a journal.
#[derive(Clone, Copy, Debug)]
pub(crate) enum EntryReasons<'a> {
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
    pub(crate) fn to_strings(self) -> Vec<String> {
        match self {
            EntryReasons::Typed(reasons) => reasons.iter().map(|r| r.as_str().to_owned()).collect(),
            EntryReasons::Text(reasons) => reasons.to_vec(),
        }
    }
}

/// A time, as canonical RFC 3339 text already formatted, or to be formatted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum EntryTime<'a> {
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
    /// The canonical RFC 3339 text.
    #[cfg(feature = "otel")]
    pub(crate) fn to_text(self) -> String {
        match self {
            EntryTime::Text(text) => text.to_owned(),
            EntryTime::Time(time) => crate::rfc3339(time),
        }
    }

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
        let fields = 7 + usize::from(entry.action.is_some());
        let mut effect = serializer.serialize_struct("effect", fields)?;
        effect.serialize_field("kind", entry.kind)?;
        effect.serialize_field("message_type", entry.message_type)?;
        effect.serialize_field("target", entry.target)?;
        effect.serialize_field("idempotency_key", entry.idempotency_key)?;
        effect.serialize_field("summary", &entry.summary)?;
        effect.serialize_field("payload_sha256", entry.payload_sha256)?;
        effect.serialize_field("payload_bytes", &entry.payload_bytes)?;
        if let Some(action) = entry.action {
            effect.serialize_field("action", action)?;
        }
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
        if let Some(note) = self.note {
            line.serialize_field("note", note)?;
        }
        line.end()
    }
}

impl<'a> JournalEntry<'a> {
    /// When the decision was made.
    pub fn ts(&self) -> DateTime<Utc> {
        self.ts
    }

    /// Delivered, suppressed, failed, attempting, requeued or circuit.
    pub fn decision(&self) -> JournalDecision {
        self.decision
    }

    /// Pipeline name.
    pub fn pipeline(&self) -> &'a str {
        self.pipeline
    }

    /// Execution attempt id.
    pub fn run_id(&self) -> &'a str {
        self.run_id
    }

    /// Effect kind.
    pub fn kind(&self) -> &'a str {
        self.kind
    }

    /// The action of a key that names several (`effect.action`).
    pub fn action(&self) -> Option<&'a str> {
        self.action
    }

    /// Idempotency key.
    pub fn idempotency_key(&self) -> &'a str {
        self.idempotency_key
    }

    /// Attempt, from 1; 0 when suppressed.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The class of a failure just decided, as the client's error named it
    /// ([`Classify::error_type`](crate::Classify::error_type)): for sinks that export
    /// decisions (OpenTelemetry's `error.type`). `None` for other decisions and for a
    /// record read back from a journal, whose line does not keep it.
    pub fn error_type(&self) -> Option<&'a str> {
        self.error_type
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
                action: self.action.map(str::to_owned),
                payload_sha256: self.payload_sha256.to_owned(),
                payload_bytes: self.payload_bytes,
            },
            opt_in: self.opt_in.cloned(),
            attempt: self.attempt,
            error: self.error.map(str::to_owned),
            note: self.note.map(str::to_owned),
        }
    }
}

impl JournalEntry<'_> {
    /// Appends the entry as one line of JSON, without the newline.
    ///
    /// The bytes are exactly those `serde_json` writes for the same record (a test holds
    /// them equal); this hand-rolled writer exists because the journal is on the hot path
    /// of every effect and it is several times faster than the generic serialiser.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"v\":");
        push_u64(out, u64::from(SCHEMA_VERSION));
        out.extend_from_slice(b",\"ts\":");
        push_time(out, EntryTime::Time(self.ts));
        out.extend_from_slice(b",\"decision\":\"");
        out.extend_from_slice(self.decision.as_str().as_bytes());
        out.extend_from_slice(b"\",\"reasons\":[");
        match self.reasons {
            EntryReasons::Typed(reasons) => {
                for (index, reason) in reasons.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    push_str(out, reason.as_str());
                }
            }
            EntryReasons::Text(reasons) => {
                for (index, reason) in reasons.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    push_str(out, reason);
                }
            }
        }
        out.extend_from_slice(b"],\"pipeline\":");
        push_str(out, self.pipeline);
        out.extend_from_slice(b",\"run_id\":");
        push_str(out, self.run_id);
        out.extend_from_slice(b",\"run_kind\":");
        push_str(out, self.run_kind);
        out.extend_from_slice(b",\"backfill_id\":");
        push_optional(out, self.backfill_id);
        out.extend_from_slice(b",\"window\":{\"start\":");
        push_time(out, self.window_start);
        out.extend_from_slice(b",\"end\":");
        push_time(out, self.window_end);
        out.extend_from_slice(b"},\"effect\":{\"kind\":");
        push_str(out, self.kind);
        out.extend_from_slice(b",\"message_type\":");
        push_str(out, self.message_type);
        out.extend_from_slice(b",\"target\":");
        push_str(out, self.target);
        out.extend_from_slice(b",\"idempotency_key\":");
        push_str(out, self.idempotency_key);
        out.extend_from_slice(b",\"summary\":");
        push_optional(out, self.summary);
        out.extend_from_slice(b",\"payload_sha256\":");
        push_str(out, self.payload_sha256);
        out.extend_from_slice(b",\"payload_bytes\":");
        push_u64(out, self.payload_bytes);
        if let Some(action) = self.action {
            out.extend_from_slice(b",\"action\":");
            push_str(out, action);
        }
        out.extend_from_slice(b"},\"opt_in\":");
        match self.opt_in {
            None => out.extend_from_slice(b"null"),
            Some(opt_in) => {
                out.extend_from_slice(b"{\"reason\":");
                push_str(out, &opt_in.reason);
                out.extend_from_slice(b",\"approved_by\":");
                push_str(out, &opt_in.approved_by);
                out.extend_from_slice(b",\"expires_at\":");
                push_time(out, EntryTime::Time(opt_in.expires_at));
                out.extend_from_slice(b",\"kinds\":");
                push_list(out, &opt_in.kinds);
                out.extend_from_slice(b",\"targets\":");
                match &opt_in.targets {
                    Some(targets) => push_list(out, targets),
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"pipeline\":");
                push_optional(out, opt_in.pipeline.as_deref());
                out.extend_from_slice(b",\"backfill_id\":");
                push_optional(out, opt_in.backfill_id.as_deref());
                out.extend_from_slice(b",\"run_id_pattern\":");
                push_optional(out, opt_in.run_id_pattern.as_deref());
                out.extend_from_slice(b",\"signer\":");
                push_optional(out, opt_in.signer.as_deref());
                out.extend_from_slice(b",\"signer_fingerprint\":");
                push_optional(out, opt_in.signer_fingerprint.as_deref());
                out.push(b'}');
            }
        }
        out.extend_from_slice(b",\"attempt\":");
        push_u64(out, u64::from(self.attempt));
        out.extend_from_slice(b",\"error\":");
        push_optional(out, self.error);
        if let Some(note) = self.note {
            out.extend_from_slice(b",\"note\":");
            push_str(out, note);
        }
        out.push(b'}');
    }
}

fn push_list(out: &mut Vec<u8>, items: &[String]) {
    out.push(b'[');
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        push_str(out, item);
    }
    out.push(b']');
}

fn push_optional(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(text) => push_str(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

fn push_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

/// A JSON string with serde_json's escapes: `"`, `\` and control characters below 0x20.
fn push_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    // Most journal text needs no escape: check it in one branch-free pass the compiler vectorises.
    let needs_escape = bytes.iter().fold(false, |found, &b| {
        found | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if !needs_escape {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut clean_from = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[clean_from..index]);
        out.extend_from_slice(escape);
        clean_from = index + 1;
    }
    out.extend_from_slice(&bytes[clean_from..]);
    out.push(b'"');
}

fn push_time(out: &mut Vec<u8>, time: EntryTime<'_>) {
    use chrono::{Datelike, Timelike};
    let instant = match time {
        EntryTime::Text(text) => return push_str(out, text),
        EntryTime::Time(instant) => instant,
    };
    let nanos = instant.nanosecond();
    if !(0..=9999).contains(&instant.year()) || nanos >= 1_000_000_000 {
        // Outside the fast path (years beyond 4 digits, leap seconds): let chrono format it.
        return push_str(out, &crate::key::rfc3339(instant));
    }
    let two = |value: u32, out: &mut Vec<u8>| {
        out.push(b'0' + (value / 10) as u8);
        out.push(b'0' + (value % 10) as u8);
    };
    out.push(b'"');
    let year = instant.year() as u32;
    two(year / 100, out);
    two(year % 100, out);
    out.push(b'-');
    two(instant.month(), out);
    out.push(b'-');
    two(instant.day(), out);
    out.push(b'T');
    two(instant.hour(), out);
    out.push(b':');
    two(instant.minute(), out);
    out.push(b':');
    two(instant.second(), out);
    let (fraction, digits) = if nanos == 0 {
        (0, 0)
    } else if nanos % 1_000_000 == 0 {
        (nanos / 1_000_000, 3)
    } else if nanos % 1_000 == 0 {
        (nanos / 1_000, 6)
    } else {
        (nanos, 9)
    };
    if digits > 0 {
        out.push(b'.');
        let mut buffer = [0u8; 9];
        let mut value = fraction;
        for slot in buffer[..digits].iter_mut().rev() {
            *slot = b'0' + (value % 10) as u8;
            value /= 10;
        }
        out.extend_from_slice(&buffer[..digits]);
    }
    out.extend_from_slice(b"Z\"");
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, TimeZone};
    use proptest::prelude::*;

    use super::*;
    use crate::journal::{RecordEffect, RecordWindow};

    fn record(text: &str, nanos: i64) -> JournalRecord {
        let ts = Utc.with_ymd_and_hms(2026, 8, 6, 1, 2, 3).unwrap() + TimeDelta::nanoseconds(nanos);
        JournalRecord {
            v: SCHEMA_VERSION,
            ts,
            decision: JournalDecision::Failed,
            reasons: vec!["replay_run".into(), text.into()],
            pipeline: text.into(),
            run_id: format!("run {text}"),
            run_kind: "backfill".into(),
            backfill_id: Some(text.into()),
            window: RecordWindow {
                start: ts - TimeDelta::days(1),
                end: ts,
            },
            effect: RecordEffect {
                kind: "email".into(),
                message_type: text.into(),
                target: text.into(),
                idempotency_key: "ab".repeat(32),
                summary: if nanos % 2 == 0 {
                    Some(text.into())
                } else {
                    None
                },
                payload_sha256: "cd".repeat(32),
                payload_bytes: nanos.unsigned_abs(),
                action: (nanos % 4 == 1).then(|| text.into()),
            },
            opt_in: (nanos % 3 != 1).then(|| RecordOptIn {
                reason: text.into(),
                approved_by: "jane".into(),
                expires_at: ts + TimeDelta::milliseconds(nanos % 5_000),
                kinds: vec!["email".into(), text.into()],
                targets: (nanos % 2 == 0).then(|| vec![text.into(), String::new()]),
                pipeline: Some(text.into()),
                backfill_id: (nanos % 3 == 0).then(|| text.into()),
                run_id_pattern: (nanos % 3 == 2).then(|| format!("{text}*")),
                signer: (nanos % 2 == 1).then(|| text.into()),
                signer_fingerprint: (nanos % 2 == 1).then(|| "SHA256:abc+/".into()),
            }),
            attempt: (nanos % 7) as u32,
            error: (nanos % 2 == 1).then(|| format!("sending: {text}")),
            note: (nanos % 4 == 0).then(|| format!("resend by jane: {text}")),
        }
    }

    fn hand_written(record: &JournalRecord) -> String {
        let mut out = Vec::new();
        record.entry().write_json(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_what_serde_writes_for_awkward_text() {
        for text in [
            "plain",
            "quote \" and \\ back",
            "ctl \u{0}\u{1}\u{8}\u{9}\u{a}\u{c}\u{d}\u{1f}\u{7f}",
            "ünï 🦀 </script>",
            "",
        ] {
            for nanos in [0, 500_000_000, 123_456_000, 123_456_789, 7] {
                let record = record(text, nanos);
                assert_eq!(
                    hand_written(&record),
                    serde_json::to_string(&record).unwrap(),
                    "{text:?} {nanos}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn writes_what_serde_writes(text in "\\PC*|[\\x00-\\x7f]{0,40}", nanos in 0i64..2_000_000_000) {
            let record = record(&text, nanos);
            prop_assert_eq!(hand_written(&record), serde_json::to_string(&record).unwrap());
        }
    }
}
