//! `Guard<C>`: the only way an effect leaves the process.

use std::fmt;
use std::sync::Arc;

use crate::journal::{Journal, JournalError, Memory};
use crate::record::{EffectRecord, Step};
use crate::{
    Classify, Decision, Delivery, EffectClient, EffectDescription, IdempotencyKey, Reason,
    RedactionPolicy, ReplayContext, RetryPolicy,
};

/// Wraps an [`EffectClient`] so that every effect goes through the gate and the journal.
///
/// `send` describes the effect, derives its idempotency key, asks the gate
/// ([`ReplayContext::decide`]) and then either
///
/// - **suppresses**: the inner client is never called, a `tracing` event at info level with
///   target `replaysafe::suppressed` says "would have sent …", one `suppressed` record is
///   journaled, and `Ok(Outcome::Suppressed(..))` is returned; or
/// - **delivers**: before each attempt an `attempting` record is journaled and flushed
///   (if that fails, nothing is sent and `send` returns [`SendError::Journal`]); the inner
///   client is then called with the key; transient errors are retried under the
///   [`RetryPolicy`] (a receiver's `Retry-After` wins over the computed delay), permanent
///   ones are not; each attempt's result is journaled (`failed` or `delivered`) and
///   flushed before `send` goes on or returns.
///
/// So a process killed in the middle of a delivery leaves an `attempting` record with no
/// outcome after it: the effect is *in doubt*, and `replaysafe report` lists it.
///
/// **Architecture Invariant:** the gate runs before any client I/O, so a suppressed
/// effect touches nothing outside the process but the journal.
///
/// The raw client is reachable only through the deliberately named
/// [`Guard::unguarded_ref`] and [`Guard::into_unguarded`].
pub struct Guard<C> {
    inner: C,
    config: GuardLayer,
}

impl<C: fmt::Debug> fmt::Debug for Guard<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("inner", &self.inner)
            .field("journal", &self.config.journal)
            .field("retry", &self.config.retry)
            .field("redaction", &self.config.redaction)
            .finish()
    }
}

/// What [`Guard::preview`] found: the effect described, its key, and the gate's decision.
#[derive(Debug)]
#[non_exhaustive]
pub struct Preview {
    /// What the effect is (kind, message type, target, payload digest, summary).
    pub description: EffectDescription,
    /// Its idempotency key.
    pub key: IdempotencyKey,
    /// Whether it may be delivered, and why.
    pub decision: Decision,
}

/// What [`Guard::send`] did with an effect. Suppression is an outcome, not an error.
#[derive(Debug)]
pub enum Outcome<R> {
    /// The receiver accepted the effect.
    Delivered(Delivered<R>),
    /// The gate stopped the effect; nothing left the process.
    Suppressed(Suppressed),
}

impl<R> Outcome<R> {
    /// Whether the effect was delivered.
    pub fn is_delivered(&self) -> bool {
        matches!(self, Outcome::Delivered(_))
    }

    /// Whether the effect was suppressed.
    pub fn is_suppressed(&self) -> bool {
        matches!(self, Outcome::Suppressed(_))
    }

    /// The idempotency key of the effect.
    pub fn key(&self) -> &IdempotencyKey {
        match self {
            Outcome::Delivered(delivered) => &delivered.key,
            Outcome::Suppressed(suppressed) => &suppressed.key,
        }
    }

    /// The receipt, when delivered.
    pub fn receipt(&self) -> Option<&R> {
        match self {
            Outcome::Delivered(delivered) => Some(&delivered.receipt),
            Outcome::Suppressed(_) => None,
        }
    }
}

/// A delivered effect.
#[derive(Debug)]
#[non_exhaustive]
pub struct Delivered<R> {
    /// What the client returned.
    pub receipt: R,
    /// The idempotency key the receiver got.
    pub key: IdempotencyKey,
    /// Attempts it took, from 1.
    pub attempts: u32,
    /// The gate's reasons (`current_window`, or the lifted ones plus `opt_in`).
    pub reasons: Vec<Reason>,
}

/// A suppressed effect.
#[derive(Debug)]
#[non_exhaustive]
pub struct Suppressed {
    /// The idempotency key it would have had.
    pub key: IdempotencyKey,
    /// Every reason the gate gave.
    pub reasons: Vec<Reason>,
    /// What would have been sent.
    pub description: EffectDescription,
}

/// Why [`Guard::send`] failed. Never a suppression.
///
/// Its message says what failed; the cause is its [`source`](std::error::Error::source),
/// so `{:#}` with anyhow, or walking the chain, prints each cause once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError<E: std::error::Error + 'static> {
    /// The effect is invalid; nothing was sent and nothing journaled. The source says what was wrong.
    #[error("invalid effect")]
    Invalid(#[source] E),
    /// Delivery was attempted and failed: a permanent error, or transient ones until the
    /// attempts or the time ran out.
    #[error("delivery failed after {attempts} attempt(s)")]
    Failed {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        #[source]
        source: E,
    },
    /// The journal could not record the decision. When `delivered` is true the receiver
    /// did get the effect; the journal is what is missing. When it is false the effect was
    /// not delivered: in particular, when the `attempting` record before an attempt cannot
    /// be written, the attempt is not made.
    #[error("{}", if *.delivered { "journaling a delivered effect" } else { "journaling an effect that was not delivered" })]
    Journal {
        /// Whether the effect reached the receiver.
        delivered: bool,
        /// The journal's error.
        #[source]
        source: JournalError,
    },
    /// The effect derives another idempotency key than the caller expected
    /// ([`Guard::send_keyed`]): the client's configuration changed since the key was
    /// stored. Nothing was sent and nothing journaled.
    #[error("the effect now derives idempotency key {derived}, not the one expected")]
    KeyChanged {
        /// The key the effect derives now.
        derived: IdempotencyKey,
    },
}

impl<E: std::error::Error + Classify + 'static> Classify for SendError<E> {
    fn is_transient(&self) -> bool {
        match self {
            SendError::Invalid(_) => false,
            SendError::Failed { source, .. } => source.is_transient(),
            SendError::Journal { delivered, .. } => !delivered,
            SendError::KeyChanged { .. } => false,
        }
    }

    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            SendError::Failed { source, .. } => source.retry_after(),
            _ => None,
        }
    }

    /// The client error's class when delivery failed; `invalid`, `journal` and
    /// `key_changed` otherwise.
    fn error_type(&self) -> std::borrow::Cow<'static, str> {
        match self {
            SendError::Failed { source, .. } => source.error_type(),
            SendError::Invalid(_) => "invalid".into(),
            SendError::Journal { .. } => "journal".into(),
            SendError::KeyChanged { .. } => "key_changed".into(),
        }
    }
}

impl<C: EffectClient> Guard<C> {
    /// Guards `inner`, journaling to `journal`, with the default retry policy and the
    /// client's own redaction policy.
    pub fn new(inner: C, journal: impl Journal + 'static) -> Self {
        GuardLayer::new(Arc::new(journal)).layer(inner)
    }

    /// Guards `inner` with a journal shared with other guards.
    pub fn with_shared_journal(inner: C, journal: Arc<dyn Journal>) -> Self {
        GuardLayer::new(journal).layer(inner)
    }

    /// Replaces the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.config.retry = retry;
        self
    }

    /// Whether this guard consults the journal's ledger before a delivery (default
    /// `true`); see [`GuardLayer::with_ledger`].
    pub fn with_ledger(mut self, ledger: bool) -> Self {
        self.config.ledger = ledger;
        self
    }

    /// Overrides the client's redaction policy in the journal and the log lines. An
    /// adapter's own error messages follow the redaction its builder was given.
    pub fn with_redaction(mut self, redaction: RedactionPolicy) -> Self {
        self.config.redaction = Some(redaction);
        self
    }

    /// The retry policy.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.config.retry
    }

    /// The journal.
    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.config.journal
    }

    /// The redaction policy in force.
    pub fn redaction(&self) -> RedactionPolicy {
        self.config
            .redaction
            .unwrap_or_else(|| self.inner.redaction())
    }

    /// **Escape hatch.** The raw client, outside the gate and the journal. Whatever is
    /// sent through it is not replay-safe.
    pub fn unguarded_ref(&self) -> &C {
        &self.inner
    }

    /// **Escape hatch.** Unwraps the raw client, outside the gate and the journal.
    pub fn into_unguarded(self) -> C {
        self.inner
    }

    /// Describes `effect`, derives its key and asks the gate, without sending or journaling.
    pub fn preview(
        &self,
        cx: &ReplayContext,
        effect: &C::Effect,
    ) -> Result<Preview, SendError<C::Error>> {
        let description = self
            .inner
            .describe(cx, effect)
            .map_err(SendError::Invalid)?;
        let (window_start, window_end) = cx.window_text();
        let key = IdempotencyKey::derive_from_text(
            cx.pipeline(),
            description.kind(),
            description.message_type(),
            description.target(),
            window_start,
            window_end,
        );
        let decision = cx.decide(description.kind(), description.target());
        Ok(Preview {
            description,
            key,
            decision,
        })
    }

    /// Sends `effect` if the gate allows it; see the type's docs for what happens.
    pub async fn send(
        &self,
        cx: &ReplayContext,
        effect: &C::Effect,
    ) -> Result<Outcome<C::Receipt>, SendError<C::Error>> {
        let preview = self.preview(cx, effect)?;
        let recall = if self.config.ledger {
            Recall::Ledger
        } else {
            Recall::Off
        };
        self.send_previewed(cx, effect, preview, 1, recall).await
    }

    /// Sends `effect` as [`Guard::send`] does, for a caller that keeps the effect's life
    /// and its memory elsewhere, such as an outbox row: only when the effect still derives
    /// `expected_key` (otherwise [`SendError::KeyChanged`], and nothing is sent or
    /// journaled), with its attempts numbered from `first_attempt` in the journal and in
    /// [`Delivery::attempt`] (the row's attempt count, so a delivery after a reclaim is
    /// journaled as attempt 2).
    ///
    /// The caller's row is the key's memory, so the journal's ledger is consulted only when
    /// `in_doubt`: an earlier attempt may have begun with no outcome recorded (the row was
    /// claimed again after a lease ran out). Then the journal's memory decides as it does
    /// for [`Guard::send`]: a key it saw delivered is suppressed `already_delivered`, a key
    /// in doubt is attempted again only when the receiver de-duplicates by key, and is
    /// otherwise suppressed `in_doubt`, which is also what happens when the journal keeps
    /// no memory to tell (a key it never saw attempted is sent).
    pub async fn send_keyed(
        &self,
        cx: &ReplayContext,
        effect: &C::Effect,
        expected_key: &str,
        first_attempt: u32,
        in_doubt: bool,
    ) -> Result<Outcome<C::Receipt>, SendError<C::Error>> {
        let preview = self.preview(cx, effect)?;
        if preview.key.as_str() != expected_key {
            return Err(SendError::KeyChanged {
                derived: preview.key,
            });
        }
        let recall = if in_doubt {
            Recall::InDoubt
        } else {
            Recall::Skip
        };
        self.send_previewed(cx, effect, preview, first_attempt.max(1), recall)
            .await
    }

    async fn send_previewed(
        &self,
        cx: &ReplayContext,
        effect: &C::Effect,
        preview: Preview,
        first_attempt: u32,
        recall: Recall,
    ) -> Result<Outcome<C::Receipt>, SendError<C::Error>> {
        let Preview {
            description,
            key,
            decision,
        } = preview;
        let redaction = self.redaction();
        if decision.suppresses() {
            return self.suppress(cx, description, key, decision, None);
        }
        // Memory: before the first attempt, what the journal knows of the key. Claiming
        // writes the `attempting` record in the same step.
        let mut decision = decision;
        let mut note = None;
        let mut claimed = false;
        let ledger = match recall {
            Recall::Ledger | Recall::InDoubt if self.config.ledger => self.config.journal.ledger(),
            _ => None,
        };
        match ledger {
            Some(ledger) => {
                let record = EffectRecord::new(cx, &description, &key, &decision, redaction);
                let claim = ledger
                    .begin_grouped(
                        &record.entry(Step::Attempting(first_attempt)),
                        self.inner.dedupes_by_key(),
                    )
                    .await
                    .map_err(|source| SendError::Journal {
                        delivered: false,
                        source,
                    })?;
                if claim.claimed {
                    record.log(Step::Attempting(first_attempt));
                    claimed = true;
                } else {
                    let reason = match claim.memory {
                        Memory::Delivered { .. } => Reason::AlreadyDelivered,
                        _ => Reason::InDoubt,
                    };
                    note = claim.memory.note();
                    let remembered =
                        cx.decide_remembered(description.kind(), description.target(), reason);
                    if remembered.suppresses() {
                        return self.suppress(cx, description, key, remembered, note);
                    }
                    // An audited opt-in lifted it: delivered again, journaled with it.
                    decision = remembered;
                }
            }
            None if recall == Recall::InDoubt && !self.inner.dedupes_by_key() => {
                // Nothing can tell whether the earlier attempt reached the receiver.
                let note = Some(format!(
                    "in doubt: attempt {} began with no outcome recorded, and the journal keeps no memory of the key to tell whether it reached the receiver",
                    first_attempt.saturating_sub(1).max(1)
                ));
                let remembered =
                    cx.decide_remembered(description.kind(), description.target(), Reason::InDoubt);
                if remembered.suppresses() {
                    return self.suppress(cx, description, key, remembered, note);
                }
                decision = remembered;
            }
            None if recall == Recall::Off && self.config.journal.ledger().is_some() => {
                note = Some(
                    "ledger off for this client: delivered whatever the journal knows of the key"
                        .to_owned(),
                );
            }
            None => {}
        }
        let record =
            EffectRecord::new(cx, &description, &key, &decision, redaction).with_note(note);
        let (receipt, attempts) = self
            .deliver_with_retries(
                cx,
                effect,
                &record,
                &key,
                &description,
                first_attempt,
                claimed,
            )
            .await?;
        Ok(Outcome::Delivered(Delivered {
            receipt,
            key: key.clone(),
            attempts,
            reasons: decision.reasons().to_vec(),
        }))
    }

    /// Journals and logs a suppression ("would have sent …") and returns it.
    fn suppress(
        &self,
        cx: &ReplayContext,
        description: EffectDescription,
        key: IdempotencyKey,
        decision: Decision,
        note: Option<String>,
    ) -> Result<Outcome<C::Receipt>, SendError<C::Error>> {
        EffectRecord::new(cx, &description, &key, &decision, self.redaction())
            .with_note(note)
            .write(&*self.config.journal, Step::Suppressed)
            .map_err(|source| SendError::Journal {
                delivered: false,
                source,
            })?;
        Ok(Outcome::Suppressed(Suppressed {
            key,
            reasons: decision.reasons().to_vec(),
            description,
        }))
    }

    /// Attempts delivery until it succeeds, fails for good, or runs out of attempts or
    /// time; every attempt is recorded before it begins, and its outcome after. Attempts
    /// are numbered from `first_attempt`; the retry policy counts those of this call. When
    /// `claimed`, the first attempt's record was written by the ledger's claim.
    #[allow(clippy::too_many_arguments, reason = "one private step of send")]
    async fn deliver_with_retries(
        &self,
        cx: &ReplayContext,
        effect: &C::Effect,
        record: &EffectRecord<'_>,
        key: &IdempotencyKey,
        description: &EffectDescription,
        first_attempt: u32,
        claimed: bool,
    ) -> Result<(C::Receipt, u32), SendError<C::Error>> {
        let journal = &*self.config.journal;
        let retry = &self.config.retry;
        let journal_error = |delivered| move |source| SendError::Journal { delivered, source };
        let started = tokio::time::Instant::now();
        let mut made = 0;
        loop {
            made += 1;
            let attempt = first_attempt.saturating_add(made - 1);
            // The record that the attempt began is out of the process before the attempt is.
            if !(claimed && made == 1) {
                record
                    .write_grouped(journal, Step::Attempting(attempt))
                    .await
                    .map_err(journal_error(false))?;
            }
            let delivery = Delivery {
                context: cx,
                key,
                description,
                attempt,
            };
            match self.inner.deliver(&delivery, effect).await {
                Ok(receipt) => {
                    record
                        .write_grouped(journal, Step::Delivered(attempt))
                        .await
                        .map_err(journal_error(true))?;
                    return Ok((receipt, attempt));
                }
                Err(error) => {
                    // The whole chain: each layer says what it was doing, once.
                    let message = crate::error_chain(&error);
                    let error_type = error.error_type();
                    let failed = Step::Failed {
                        attempt,
                        error: &message,
                        transient: error.is_transient(),
                        error_type: &error_type,
                    };
                    record
                        .write_grouped(journal, failed)
                        .await
                        .map_err(journal_error(false))?;
                    let delay = retry.delay(made, error.retry_after());
                    let out_of_time = started.elapsed() + delay > retry.max_elapsed();
                    if error.is_permanent() || made >= retry.max_attempts() || out_of_time {
                        return Err(SendError::Failed {
                            attempts: attempt,
                            source: error,
                        });
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// Every adapter builder's `build` takes what a guard needs as `impl Into<GuardLayer>`:
/// a journal (`JsonlJournal`, or one shared as `Arc<JsonlJournal>`), or a layer
/// (`&layer`) when several guards share a retry or redaction policy too.
impl<J: Journal + 'static> From<J> for GuardLayer {
    fn from(journal: J) -> Self {
        GuardLayer::new(Arc::new(journal))
    }
}

impl From<&GuardLayer> for GuardLayer {
    fn from(layer: &GuardLayer) -> Self {
        layer.clone()
    }
}

/// Builds [`Guard`]s that share one journal and one configuration, in the manner of a tower layer.
#[derive(Clone, Debug)]
pub struct GuardLayer {
    journal: Arc<dyn Journal>,
    retry: RetryPolicy,
    redaction: Option<RedactionPolicy>,
    ledger: bool,
}

impl GuardLayer {
    /// Guards will journal to `journal`.
    pub fn new(journal: Arc<dyn Journal>) -> Self {
        GuardLayer {
            journal,
            retry: RetryPolicy::default(),
            redaction: None,
            ledger: true,
        }
    }

    /// Guards will retry under `retry`.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Guards will redact with `redaction` instead of each client's default.
    pub fn with_redaction(mut self, redaction: RedactionPolicy) -> Self {
        self.redaction = Some(redaction);
        self
    }

    /// Whether guards consult the journal's ledger before a delivery (default `true`):
    /// turn it off only for effects meant to repeat (a heartbeat, a counter that must
    /// count every run); their deliveries are journaled with a note saying so.
    pub fn with_ledger(mut self, ledger: bool) -> Self {
        self.ledger = ledger;
        self
    }

    /// The journal guards will write to.
    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.journal
    }

    /// Wraps a client.
    pub fn layer<C: EffectClient>(&self, client: C) -> Guard<C> {
        Guard {
            inner: client,
            config: self.clone(),
        }
    }
}

/// Whether a send consults the journal's memory of the key before its first attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Recall {
    /// [`Guard::send`] with the ledger on: the journal's memory decides.
    Ledger,
    /// [`Guard::send`] with the ledger off: delivered whatever the journal knows.
    Off,
    /// [`Guard::send_keyed`] of a row nobody attempted without recording the outcome: the
    /// row is the memory.
    Skip,
    /// [`Guard::send_keyed`] of a row claimed again after a lease ran out.
    InDoubt,
}
