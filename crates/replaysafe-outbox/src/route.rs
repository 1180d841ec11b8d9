//! Routes: a name stored in each row, mapped by a worker to a guarded client.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use replaysafe_core::{
    Classify, EffectClient, Guard, Journal, Outcome, Reason, ReplayContext, RetryPolicy, SendError,
    error_chain,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::OutboxError;

/// The longest route name, in bytes.
pub const MAX_ROUTE_NAME: usize = 100;

/// A named guarded client: rows store the name and the effect as data, and a worker
/// delivers each row through the route of its name.
///
/// The guard makes one attempt per claim: the outbox, not the guard, schedules retries,
/// so that a retry survives the process (see [`crate::WorkerBuilder::retry`]).
/// Clones share the client.
pub struct Route<C: EffectClient> {
    name: Arc<str>,
    guard: Arc<Guard<C>>,
}

impl<C: EffectClient> Clone for Route<C> {
    fn clone(&self) -> Self {
        Route {
            name: Arc::clone(&self.name),
            guard: Arc::clone(&self.guard),
        }
    }
}

impl<C: EffectClient + fmt::Debug> fmt::Debug for Route<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("name", &self.name)
            .field("guard", &self.guard)
            .finish()
    }
}

impl<C> Route<C>
where
    C: EffectClient + 'static,
    C::Effect: Serialize + DeserializeOwned,
{
    /// Names a guarded client. The name is 1 to 100 bytes of ASCII letters, digits, `_`,
    /// `-` and `.`; anything else is [`OutboxError::Invalid`] for `route`.
    pub fn new(name: impl Into<String>, guard: Guard<C>) -> Result<Self, OutboxError> {
        let name = name.into();
        check_route_name(&name)?;
        Ok(Route {
            name: name.into(),
            guard: Arc::new(guard.with_retry(RetryPolicy::none())),
        })
    }

    /// The route name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The guard (one attempt per call).
    pub fn guard(&self) -> &Guard<C> {
        &self.guard
    }
}

/// Refuses a route name that is not 1 to [`MAX_ROUTE_NAME`] characters of A-Z, a-z, 0-9,
/// `_`, `-` and `.` ([`OutboxError::Invalid`] for `route`), as [`Route::new`] does; for a
/// front end that reads names (a routes file) and can say which one is wrong.
///
/// # Errors
/// [`OutboxError::Invalid`] for the field `route`.
pub fn check_route_name(name: &str) -> Result<(), OutboxError> {
    let well_formed = !name.is_empty()
        && name.len() <= MAX_ROUTE_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if well_formed {
        Ok(())
    } else {
        Err(OutboxError::invalid(
            "route",
            "a route name is 1 to 100 characters of A-Z, a-z, 0-9, _, - and .",
        ))
    }
}

/// What one delivery attempt of a row came to.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The receiver accepted it.
    Delivered,
    /// The gate, on the row's own context, stopped it.
    Suppressed(Vec<Reason>),
    /// The attempt failed.
    Failed {
        transient: bool,
        retry_after: Option<Duration>,
        error: String,
    },
    /// The row could not be attempted at all (no such route, an unreadable row, an effect
    /// that does not decode or no longer derives the row's key): dead-lettered before any
    /// attempt, and journaled as `failed` with `reason`.
    Refused { reason: &'static str, error: String },
}

/// The journal reasons of rows refused before any attempt (`docs/reference/journal.md`).
pub(crate) const REFUSALS: [&str; 5] = [
    "unknown_route",
    "unreadable_row",
    "undecodable_effect",
    "invalid_effect",
    "key_mismatch",
];

impl Attempt {
    pub(crate) fn refused(reason: &'static str, error: String) -> Self {
        debug_assert!(REFUSALS.contains(&reason), "{reason}");
        Attempt::Refused { reason, error }
    }
}

/// A route with its effect type erased, so one worker holds routes of many clients.
#[async_trait]
pub(crate) trait ErasedRoute: Send + Sync + fmt::Debug {
    fn name(&self) -> &str;

    /// The journal of the route's guard.
    fn journal(&self) -> &Arc<dyn Journal>;

    /// Decodes the effect and sends it through the guard on `cx`, as attempt `attempt`,
    /// if the route still gives it `key`; `in_doubt` when an earlier claim of the row
    /// ended with no outcome (see [`Guard::send_keyed`]).
    async fn attempt(
        &self,
        cx: &ReplayContext,
        key: &str,
        effect_json: &str,
        attempt: u32,
        in_doubt: bool,
    ) -> Attempt;
}

/// Keeps errors short in the table: the chain, at most this many bytes.
const MAX_ERROR_BYTES: usize = 1000;

pub(crate) fn short_error(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error_chain(error);
    if text.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[async_trait]
impl<C> ErasedRoute for Route<C>
where
    C: EffectClient + fmt::Debug + 'static,
    C::Effect: Serialize + DeserializeOwned,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn journal(&self) -> &Arc<dyn Journal> {
        self.guard.journal()
    }

    async fn attempt(
        &self,
        cx: &ReplayContext,
        key: &str,
        effect_json: &str,
        attempt: u32,
        in_doubt: bool,
    ) -> Attempt {
        let effect: C::Effect = match serde_json::from_str(effect_json) {
            Ok(effect) => effect,
            Err(error) => {
                // serde's message may quote a value of the effect; say only where and what kind.
                let category = match error.classify() {
                    serde_json::error::Category::Io => "unreadable",
                    serde_json::error::Category::Syntax => "malformed JSON",
                    serde_json::error::Category::Data => "JSON of the wrong shape",
                    serde_json::error::Category::Eof => "truncated JSON",
                };
                return Attempt::refused(
                    "undecodable_effect",
                    format!(
                        "decoding the effect for route {}: {category} at line {} column {}",
                        self.name,
                        error.line(),
                        error.column()
                    ),
                );
            }
        };
        match self
            .guard
            .send_keyed(cx, &effect, key, attempt, in_doubt)
            .await
        {
            Ok(Outcome::Delivered(_)) => Attempt::Delivered,
            Ok(Outcome::Suppressed(suppressed)) => Attempt::Suppressed(suppressed.reasons),
            Err(SendError::KeyChanged { derived }) => Attempt::refused(
                "key_mismatch",
                format!(
                    "route {} now derives key {derived} for this effect, not the row's; the route's client changed since staging",
                    self.name
                ),
            ),
            Err(SendError::Invalid(error)) => {
                Attempt::refused("invalid_effect", short_error(&error))
            }
            Err(SendError::Journal {
                delivered: true,
                source,
            }) => {
                tracing::error!(
                    target: "replaysafe::outbox",
                    idempotency_key = key,
                    "delivered, but the journal could not record it: {}",
                    short_error(&source)
                );
                Attempt::Delivered
            }
            Err(error) => Attempt::Failed {
                transient: error.is_transient(),
                retry_after: error.retry_after(),
                error: match &error {
                    SendError::Failed { source, .. } => short_error(source),
                    other => short_error(other),
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_journal_reason_of_the_outbox_is_documented() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/reference/journal.md"
        ))
        .unwrap();
        let commands = [
            crate::OperatorCommand::Retry.reason(),
            crate::OperatorCommand::Resend.reason(),
        ];
        for reason in super::REFUSALS.iter().chain(&commands) {
            assert!(docs.contains(&format!("| `{reason}` |")), "{reason}");
        }
    }
}
