//! The one way replaysafe records a decision: a journal record and a log line that agree.

use std::borrow::Cow;

use crate::journal::{
    EntryReasons, EntryTime, Journal, JournalDecision, JournalEntry, JournalError, RecordOptIn,
};
use crate::{Decision, EffectDescription, IdempotencyKey, RedactionPolicy, ReplayContext};

/// What happened to an effect at one step, for [`EffectRecord::write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step<'a> {
    /// The gate stopped the effect; nothing left the process.
    Suppressed,
    /// Delivery attempt `n` (from 1) is about to begin.
    Attempting(u32),
    /// Attempt `n` was accepted by the receiver.
    Delivered(u32),
    /// Attempt `n` failed with this (secret-free) message.
    Failed {
        /// The attempt, from 1.
        attempt: u32,
        /// What went wrong.
        error: &'a str,
        /// Whether trying again may help.
        transient: bool,
        /// Its class, as [`Classify::error_type`](crate::Classify::error_type) names it.
        error_type: &'a str,
    },
}

/// One gate decision on one effect, ready to be recorded at each step of its life:
/// suppressed, or attempting, delivered, failed.
///
/// Every record goes through [`EffectRecord::write`], which puts the journal line and the
/// `tracing` event side by side, so they always agree: [`Guard`](crate::Guard) uses it
/// for every suppression and every attempt, and adapters that decide outside a guard (the
/// `metrics` bridge, which journals one aggregated record per metric and window) use it too.
///
/// The target is redacted and the payload digested once, when the record is made.
///
/// ```
/// use replaysafe_core::adapter::{EffectRecord, Step};
/// use replaysafe_core::{EffectDescription, EffectKind, IdempotencyKey, MemoryJournal, RedactionPolicy, TargetRedaction};
/// # let cx = replaysafe_core::ReplayContext::builder().pipeline("p").run_id("r")
/// #     .window(replaysafe_core::Window::instant(chrono::Utc::now())).build()?;
/// let description = EffectDescription::new(EffectKind::Email, "daily_summary", "ana@shop.example")?;
/// let key = IdempotencyKey::derive(cx.pipeline(), description.kind(), "daily_summary", description.target(), cx.window());
/// let decision = cx.decide(description.kind(), description.target());
/// let journal = MemoryJournal::new();
/// let domain_only = RedactionPolicy::new(TargetRedaction::DomainOnly);
/// let record = EffectRecord::new(&cx, &description, &key, &decision, domain_only);
/// record.write(&journal, Step::Suppressed)?;
/// assert_eq!(journal.records()[0].effect.target, "*@shop.example");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct EffectRecord<'a> {
    cx: &'a ReplayContext,
    description: &'a EffectDescription,
    key: &'a IdempotencyKey,
    decision: &'a Decision,
    target: Cow<'a, str>,
    summary: Option<&'a str>,
    payload_sha256: [u8; 64],
    opt_in: Option<RecordOptIn>,
    note: Option<String>,
}

impl<'a> EffectRecord<'a> {
    /// The record of `decision` on the effect `description` names, keyed `key`, in `cx`,
    /// its target and summary shown as `redaction` says.
    pub fn new(
        cx: &'a ReplayContext,
        description: &'a EffectDescription,
        key: &'a IdempotencyKey,
        decision: &'a Decision,
        redaction: RedactionPolicy,
    ) -> Self {
        EffectRecord {
            cx,
            description,
            key,
            decision,
            target: redaction.target().apply(description.target()),
            summary: if redaction.shows_summaries() {
                description.summary()
            } else {
                None
            },
            payload_sha256: description.payload().sha256_hex_bytes(),
            opt_in: decision.opt_in().map(|opt_in| {
                let mut record = RecordOptIn::from(opt_in);
                // An opt-in's targets are effect targets: journaled as the policy shows them.
                for target in record.targets.iter_mut().flatten() {
                    *target = redaction.target().apply(target).into_owned();
                }
                record
            }),
            note: None,
        }
    }

    /// With a note for the reader (what the ledger found, say); without one, a run that
    /// has no window notes what to set.
    pub fn with_note(mut self, note: Option<String>) -> Self {
        self.note = note;
        self
    }

    /// The target as the journal shows it.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The journal entry of `step`, stamped now by the context's clock.
    pub fn entry(&self, step: Step<'a>) -> JournalEntry<'_> {
        let (decision, attempt, error, error_type) = match step {
            Step::Suppressed => (JournalDecision::Suppressed, 0, None, None),
            Step::Attempting(attempt) => (JournalDecision::Attempting, attempt, None, None),
            Step::Delivered(attempt) => (JournalDecision::Delivered, attempt, None, None),
            Step::Failed {
                attempt,
                error,
                error_type,
                ..
            } => (
                JournalDecision::Failed,
                attempt,
                Some(error),
                Some(error_type),
            ),
        };
        let (window_start, window_end) = self.cx.window_text();
        JournalEntry {
            ts: self.cx.now(),
            decision,
            reasons: EntryReasons::Typed(self.decision.reasons()),
            pipeline: self.cx.pipeline(),
            run_id: self.cx.run_id().as_str(),
            run_kind: self.cx.run_kind().as_str(),
            backfill_id: self.cx.backfill_id(),
            window_start: EntryTime::Text(window_start),
            window_end: EntryTime::Text(window_end),
            kind: self.description.kind().as_str(),
            message_type: self.description.message_type(),
            target: &self.target,
            idempotency_key: self.key.as_str(),
            summary: self.summary,
            action: self.description.action(),
            payload_sha256: std::str::from_utf8(&self.payload_sha256).unwrap_or_default(),
            payload_bytes: self.description.payload().bytes(),
            opt_in: self.opt_in.as_ref(),
            attempt,
            error,
            error_type,
            note: self.note.as_deref().or(self.cx.window_note()),
        }
    }

    /// Logs `step` and appends its record to `journal`.
    ///
    /// A suppression is appended (a buffered journal may hold it until it is flushed); a
    /// step of a delivery is appended and flushed, so it is out of the process before the
    /// caller goes on: the record that an attempt began, before the attempt.
    pub fn write(&self, journal: &dyn Journal, step: Step<'a>) -> Result<(), JournalError> {
        self.log(step);
        journal.append(&self.entry(step))?;
        match step {
            Step::Suppressed => Ok(()),
            _ => journal.flush(),
        }
    }

    /// [`EffectRecord::write`] of a step of a delivery by an asynchronous sender: the
    /// journal may write it together with other deliveries' records
    /// ([`Journal::append_grouped`]); it is out of the process when this returns.
    pub async fn write_grouped(
        &self,
        journal: &dyn Journal,
        step: Step<'a>,
    ) -> Result<(), JournalError> {
        self.log(step);
        journal.append_grouped(&self.entry(step)).await?;
        journal.flush()
    }

    /// The log line of `step`, without its journal record (written elsewhere, as a
    /// ledger's claim is).
    pub(crate) fn log(&self, step: Step<'_>) {
        let (kind, message_type, target) = (
            self.description.kind().as_str(),
            self.description.message_type(),
            &*self.target,
        );
        let key = self.key.as_str();
        match step {
            Step::Suppressed => tracing::info!(
                target: "replaysafe::suppressed",
                pipeline = self.cx.pipeline(),
                run_id = self.cx.run_id().as_str(),
                window = %self.cx.window(),
                idempotency_key = key,
                reasons = ?self.decision.reasons(),
                "would have sent {kind} {message_type} to {target}",
            ),
            Step::Attempting(attempt) => tracing::trace!(
                target: "replaysafe::attempting",
                idempotency_key = key,
                attempt,
                "delivering {kind} {message_type} to {target}",
            ),
            Step::Delivered(attempt) => tracing::debug!(
                target: "replaysafe::delivered",
                idempotency_key = key,
                attempt,
                "delivered {kind} {message_type} to {target}",
            ),
            Step::Failed {
                attempt,
                error,
                transient,
                ..
            } => tracing::warn!(
                target: "replaysafe::failed",
                idempotency_key = key,
                attempt,
                transient,
                "delivering {kind} {message_type} to {target}: {error}",
            ),
        }
    }
}
