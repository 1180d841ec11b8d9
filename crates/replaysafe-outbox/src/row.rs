//! What a row holds, independent of the database: its status, its own context, and
//! the staging of an effect into a row.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use replaysafe_core::adapter::{EffectRecord, Step};
use replaysafe_core::{
    Clock, EffectClient, EffectKind, Preview, ReplayContext, SendError, StoredContext,
    TrustedApprovers,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{OutboxError, Route};

/// Where a row stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Waiting for a worker, from `next_attempt_at`.
    Pending,
    /// Claimed by a worker until its lease ends.
    Claimed,
    /// The receiver accepted it.
    Delivered,
    /// The gate stopped it, at staging or at delivery; never claimed without an audited opt-in.
    Suppressed,
    /// Failed permanently or ran out of attempts; `last_error` says why.
    Dead,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Claimed,
        Status::Delivered,
        Status::Suppressed,
        Status::Dead,
    ];

    /// The word stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Claimed => "claimed",
            Status::Delivered => "delivered",
            Status::Suppressed => "suppressed",
            Status::Dead => "dead",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = OutboxError;

    fn from_str(value: &str) -> Result<Self, OutboxError> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == value)
            .ok_or_else(|| {
                OutboxError::invalid(
                    "status",
                    "expected one of pending, claimed, delivered, suppressed, dead",
                )
            })
    }
}

/// Milliseconds since the Unix epoch, as the table stores operational times.
pub(crate) fn millis(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

pub(crate) fn from_millis(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The context a row was staged under: everything the gate needs to decide again at
/// delivery ([`StoredContext`], one field a column), so that a worker's own environment
/// cannot make the row look current.
pub(crate) type RowContext = StoredContext;

/// Rebuilds a row's context: only the clock and the trusted approvers are the worker's;
/// the approval document is checked again by the gate as `send` checks an opt-in file.
pub(crate) fn row_context(
    context: &RowContext,
    key: &str,
    kind: &EffectKind,
    clock: Arc<dyn Clock>,
    trusted: Option<&TrustedApprovers>,
) -> Result<ReplayContext, OutboxError> {
    context
        .restore(kind, clock, trusted)
        .map_err(|error| OutboxError::corrupt(key, "context", error))
}

/// A row ready to be upserted: the product of the gate at staging.
#[derive(Clone, Debug)]
pub(crate) struct StagedRow {
    pub(crate) key: String,
    pub(crate) route: String,
    pub(crate) effect_kind: String,
    pub(crate) message_type: String,
    pub(crate) target: String,
    pub(crate) context: RowContext,
    pub(crate) effect: String,
    pub(crate) payload_sha256: String,
    pub(crate) payload_bytes: i64,
    pub(crate) summary: Option<String>,
    pub(crate) source_version: i64,
    pub(crate) status: Status,
    pub(crate) reasons: String,
    pub(crate) staged_at_ms: i64,
    pub(crate) ordering_key: Option<String>,
}

/// What staging did with an effect.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Staged {
    /// The row's key: the effect's idempotency key.
    pub key: String,
    /// The gate's verdict at staging: `Pending` when a worker may deliver the effect,
    /// `Suppressed` when the gate stopped it. An existing row keeps its own status where
    /// the staging rules say so (a delivered row stays delivered).
    pub status: Status,
    /// The gate's reasons at staging, snake_case.
    pub reasons: Vec<String>,
    /// Whether the row was inserted or changed: `false` when the row holds a newer source
    /// version, or already holds this effect.
    pub changed: bool,
}

/// The version of the source data an effect reports on, such as its `updated_at`:
/// an older version never overwrites a newer one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceVersion(pub i64);

impl From<DateTime<Utc>> for SourceVersion {
    /// Microseconds since the Unix epoch.
    fn from(time: DateTime<Utc>) -> Self {
        SourceVersion(time.timestamp_micros())
    }
}

impl From<i64> for SourceVersion {
    fn from(version: i64) -> Self {
        SourceVersion(version)
    }
}

/// The longest ordering key, in bytes.
pub const MAX_ORDERING_KEY: usize = 200;

/// How an effect is staged beyond its context and route: the version of the source data
/// it reports on, and the ordering key it is delivered in turn with.
///
/// Rows staged with one ordering key (a customer, an account, a partner's order) are
/// delivered in the order they were first staged, one at a time, whatever the number of
/// workers: a row of a key is claimed only when no earlier row of that key is pending and
/// no row of it is claimed. Rows without one keep the outbox's parallelism. A restaging
/// keeps the row's key and its place. A dead letter does not hold its key (the rows after
/// it go on, as a FIFO queue moves a message to its dead-letter queue); an operator's
/// retry of it puts it before the later rows still waiting. On PostgreSQL, staging a
/// keyed row takes a transaction-level lock of its key, so two transactions staging one
/// key commit one after the other (`docs/reference/outbox.md`, "Ordering keys").
///
/// ```
/// use replaysafe_outbox::{SourceVersion, StageOptions};
///
/// let options = StageOptions::new()
///     .version(SourceVersion(1_700_000_000))
///     .ordering_key("customer-42");
/// assert_eq!(options.ordering_key_str(), Some("customer-42"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageOptions {
    version: SourceVersion,
    ordering_key: Option<String>,
}

impl StageOptions {
    /// Source version 0, no ordering key.
    pub fn new() -> Self {
        StageOptions::default()
    }

    /// The version of the source data: a staging with an older version than the row's
    /// changes nothing.
    pub fn version(mut self, version: impl Into<SourceVersion>) -> Self {
        self.version = version.into();
        self
    }

    /// The ordering key: 1 to [`MAX_ORDERING_KEY`] bytes without control characters,
    /// checked at staging ([`OutboxError::Invalid`] for `ordering_key`).
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// The source version.
    pub fn source_version(&self) -> SourceVersion {
        self.version
    }

    /// The ordering key, if any.
    pub fn ordering_key_str(&self) -> Option<&str> {
        self.ordering_key.as_deref()
    }
}

impl From<SourceVersion> for StageOptions {
    fn from(version: SourceVersion) -> Self {
        StageOptions::new().version(version)
    }
}

/// Checks an ordering key: what a claim compares must be short and printable.
fn check_ordering_key(key: &str) -> Result<(), OutboxError> {
    if key.is_empty() {
        return Err(OutboxError::invalid("ordering_key", "empty"));
    }
    if key.len() > MAX_ORDERING_KEY {
        return Err(OutboxError::invalid(
            "ordering_key",
            format!("{} bytes, longer than {MAX_ORDERING_KEY}", key.len()),
        ));
    }
    if key.chars().any(char::is_control) {
        return Err(OutboxError::invalid(
            "ordering_key",
            "holds a control character",
        ));
    }
    Ok(())
}

/// Runs the gate at staging and builds the row; journals a suppressed one.
pub(crate) fn prepare<C>(
    cx: &ReplayContext,
    route: &Route<C>,
    effect: &C::Effect,
    options: &StageOptions,
) -> Result<(StagedRow, Staged), OutboxError>
where
    C: EffectClient + 'static,
    C::Effect: Serialize + DeserializeOwned,
{
    if let Some(key) = &options.ordering_key {
        check_ordering_key(key)?;
    }
    let guard = route.guard();
    let Preview {
        description,
        key,
        decision,
        ..
    } = guard
        .preview(cx, effect)
        .map_err(|error| OutboxError::InvalidEffect {
            route: route.name().to_owned(),
            source: match error {
                SendError::Invalid(inner) => Box::new(inner),
                other => Box::new(other),
            },
        })?;
    let effect_json = serde_json::to_string(effect).map_err(|source| OutboxError::Encode {
        route: route.name().to_owned(),
        source,
    })?;
    let redaction = guard.redaction();
    let target = redaction.target().apply(description.target()).into_owned();
    let status = if decision.delivers() {
        Status::Pending
    } else {
        Status::Suppressed
    };
    let opt_in = decision.opt_in().filter(|_| decision.delivers());
    let context =
        cx.store(description.kind(), opt_in)
            .map_err(|error| OutboxError::InvalidEffect {
                route: route.name().to_owned(),
                source: Box::new(UnstorableOptIn(error)),
            })?;
    let reasons: Vec<String> = decision
        .reasons()
        .iter()
        .map(|r| r.as_str().to_owned())
        .collect();
    let payload = description.payload();
    let summary = redaction
        .shows_summaries()
        .then(|| description.summary().map(str::to_owned))
        .flatten();

    if status == Status::Suppressed {
        // Journaled and logged as every suppression is: "would have sent".
        EffectRecord::new(cx, &description, &key, &decision, redaction)
            .write(&**guard.journal(), Step::Suppressed)
            .map_err(OutboxError::Journal)?;
    }

    let row = StagedRow {
        key: key.as_str().to_owned(),
        route: route.name().to_owned(),
        effect_kind: description.kind().as_str().to_owned(),
        message_type: description.message_type().to_owned(),
        target,
        context,
        effect: effect_json,
        payload_sha256: payload.sha256_hex(),
        payload_bytes: i64::try_from(payload.bytes()).unwrap_or(i64::MAX),
        summary,
        source_version: options.version.0,
        status,
        reasons: reasons.join(","),
        staged_at_ms: millis(cx.now()),
        ordering_key: options.ordering_key.clone(),
    };
    let staged = Staged {
        key: row.key.clone(),
        status,
        reasons,
        changed: true,
    };
    Ok((row, staged))
}

/// Why an opt-in cannot be stored in a row: only an approval document (an opt-in with a
/// file form: pipeline, backfill or run-id pattern, kinds) can be checked again at delivery.
#[derive(Debug, thiserror::Error)]
#[error(
    "the opt-in that lifts this effect cannot be stored in the row: a row carries the whole approval document \
     (an opt-in scoped to a pipeline and a backfill or run-id pattern, as `replaysafe approve` writes it)"
)]
struct UnstorableOptIn(#[source] replaysafe_core::Error);

/// One parameter of the staging statement, for a driver this crate does not hold: the
/// Python binding runs [`crate::sqlite::STAGE_SQL`] or [`crate::postgres::STAGE_SQL`] on
/// the caller's own connection with these values.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StageParam {
    /// SQL `NULL`.
    Null,
    /// A boolean (`BOOLEAN` on PostgreSQL; 0 or 1 on SQLite).
    Bool(bool),
    /// A 64-bit integer.
    Integer(i64),
    /// Text.
    Text(String),
}

impl From<String> for StageParam {
    fn from(text: String) -> Self {
        StageParam::Text(text)
    }
}

impl From<Option<String>> for StageParam {
    fn from(text: Option<String>) -> Self {
        text.map_or(StageParam::Null, StageParam::Text)
    }
}

/// Runs the gate at staging on `cx` (journaling a suppressed effect, as every staging
/// does) and returns the 31 parameters of the staging statement, in the order of its
/// `?1`…`?31` (SQLite) and `$1`…`$31` (PostgreSQL), with what staging decides. For a
/// driver in another language: the row's status, context, key and opt-in document all
/// come from here, never from the caller. `Staged::changed` is `true`: only the
/// statement's own row count says whether the row changed.
///
/// # Errors
/// [`OutboxError::Invalid`] for `ordering_key` when the options' key is malformed,
/// [`OutboxError::InvalidEffect`] when the route refuses the effect, and a journal error
/// when a suppression cannot be journaled.
pub fn stage_params<C>(
    cx: &ReplayContext,
    route: &Route<C>,
    effect: &C::Effect,
    options: impl Into<StageOptions>,
) -> Result<(Vec<StageParam>, Staged), OutboxError>
where
    C: EffectClient + 'static,
    C::Effect: Serialize + DeserializeOwned,
{
    let (row, staged) = prepare(cx, route, effect, &options.into())?;
    let StagedRow {
        key,
        route,
        effect_kind,
        message_type,
        target,
        context: cx,
        effect,
        payload_sha256,
        payload_bytes,
        summary,
        source_version,
        status,
        reasons,
        staged_at_ms,
        ordering_key,
    } = row;
    let params = vec![
        key.into(),
        route.into(),
        cx.pipeline.into(),
        effect_kind.into(),
        message_type.into(),
        target.into(),
        cx.window_start.into(),
        cx.window_end.into(),
        cx.run_id.into(),
        cx.run_kind.into(),
        cx.replay_flag.map_or(StageParam::Null, StageParam::Bool),
        cx.backfill_id.into(),
        cx.logical_date.into(),
        cx.run_interval_start.into(),
        cx.run_interval_end.into(),
        cx.mode.into(),
        cx.conflict.into(),
        StageParam::Integer(cx.max_age_ms),
        StageParam::Integer(cx.clock_skew_ms),
        cx.opt_in.into(),
        StageParam::Bool(cx.window_known),
        cx.upstream.into(),
        effect.into(),
        payload_sha256.into(),
        StageParam::Integer(payload_bytes),
        summary.into(),
        StageParam::Integer(source_version),
        StageParam::Text(status.as_str().to_owned()),
        reasons.into(),
        StageParam::Integer(staged_at_ms),
        ordering_key.into(),
    ];
    Ok((params, staged))
}
