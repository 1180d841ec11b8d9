//! The trait every adapter implements, and how its errors are classified.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{EffectDescription, IdempotencyKey, RedactionPolicy, ReplayContext};

/// How the retry policy and the outbox tell a passing failure from a final one,
/// without knowing the backend.
///
/// Connection errors, timeouts, HTTP 408, 425, 429 and 5xx, and SMTP 4xx replies are
/// transient; other refusals are permanent.
pub trait Classify {
    /// Whether trying again later may succeed.
    fn is_transient(&self) -> bool;

    /// Whether trying again cannot succeed; the default is `!is_transient()`.
    fn is_permanent(&self) -> bool {
        !self.is_transient()
    }

    /// How long the receiver asked us to wait (`Retry-After`); it wins over computed backoff.
    fn retry_after(&self) -> Option<Duration> {
        None
    }

    /// What class of failure this is, as OpenTelemetry's `error.type` names it: few
    /// values, none carrying a target, an address or a secret. The receiver's status code
    /// when it answered with one (`503`, SMTP's `550`), `timeout` or `connect` when it
    /// gave no answer for that reason, a word of the adapter's own for other known
    /// classes (`host_key`), and [`ERROR_TYPE_OTHER`] (`_OTHER`, the default) when none
    /// fits.
    fn error_type(&self) -> Cow<'static, str> {
        Cow::Borrowed(ERROR_TYPE_OTHER)
    }
}

/// The `error.type` of a failure of no known class (OpenTelemetry's fallback value).
pub const ERROR_TYPE_OTHER: &str = "_OTHER";

/// One delivery attempt, handed by [`crate::Guard`] to [`EffectClient::deliver`].
///
/// It cannot be built outside this crate, so an adapter's `deliver` can only be reached
/// through a guard: an unguarded send does not compile.
///
/// ```compile_fail
/// use replaysafe_core::{Delivery, ReplayContext};
/// fn sneak(cx: &ReplayContext, key: &replaysafe_core::IdempotencyKey, d: &replaysafe_core::EffectDescription) {
///     let _ = Delivery { context: cx, key, description: d, attempt: 1 };
/// }
/// ```
#[derive(Debug)]
pub struct Delivery<'a> {
    pub(crate) context: &'a ReplayContext,
    pub(crate) key: &'a IdempotencyKey,
    pub(crate) description: &'a EffectDescription,
    pub(crate) attempt: u32,
}

impl<'a> Delivery<'a> {
    /// The context of the run.
    pub fn context(&self) -> &'a ReplayContext {
        self.context
    }

    /// The idempotency key to pass to the receiver (`Idempotency-Key`, `webhook-id`, `Message-ID`, `dedup_key`).
    pub fn key(&self) -> &'a IdempotencyKey {
        self.key
    }

    /// The effect as described by [`EffectClient::describe`].
    pub fn description(&self) -> &'a EffectDescription {
        self.description
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// An external client whose effects replaysafe gates: an email transport, a webhook
/// client, an SFTP session, a metrics pusher.
///
/// # Contract
///
/// - [`describe`](EffectClient::describe) does no I/O. It validates the effect (a bad
///   address, a header with CR or LF, a path leaving its directory is an `Err`, and
///   nothing is sent) and says what the effect is for the gate and the journal.
/// - [`deliver`](EffectClient::deliver) makes one attempt. It does not retry: the
///   [`crate::Guard`] retries transient errors under its [`crate::RetryPolicy`].
///   `Err` means a real delivery was attempted and failed; suppression never reaches it.
/// - Errors carry no secret in `Display` or `Debug`: they are journaled and logged.
///
/// `async-trait` keeps the trait `dyn`-compatible and its futures `Send` in one place;
/// `docs/adr/0001-async-trait.md` says why it stays.
#[async_trait]
pub trait EffectClient: Send + Sync {
    /// What the caller asks to send.
    type Effect: Send + Sync;
    /// What a successful delivery returns.
    type Receipt: Send;
    /// Why a delivery or a description failed.
    type Error: std::error::Error + Classify + Send + Sync + 'static;

    /// Validates `effect` and describes it; no I/O.
    fn describe(
        &self,
        cx: &ReplayContext,
        effect: &Self::Effect,
    ) -> Result<EffectDescription, Self::Error>;

    /// Makes one delivery attempt, passing `delivery.key()` to the receiver where it accepts one.
    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        effect: &Self::Effect,
    ) -> Result<Self::Receipt, Self::Error>;

    /// How this client's targets appear in the journal unless the guard says otherwise.
    fn redaction(&self) -> RedactionPolicy {
        RedactionPolicy::default()
    }

    /// Whether this client's receiver drops a repeat of an effect it already has, by the
    /// idempotency key the client passes it (a webhook's `Idempotency-Key`, PagerDuty's
    /// `dedup_key`, an Airflow run id, an SFTP file already present).
    ///
    /// It decides what happens to an effect **in doubt** (an attempt began and no outcome
    /// was recorded, see [`crate::journal::Ledger`]): a receiver that de-duplicates gets
    /// it again under the same key; one that does not (email, Slack, counters) does not
    /// get it again until an audited opt-in says so. Default `false`: the safe answer.
    fn dedupes_by_key(&self) -> bool {
        false
    }
}

macro_rules! forward_effect_client {
    ($($ptr:ty),*) => {$(
        #[async_trait]
        impl<C: EffectClient + ?Sized> EffectClient for $ptr {
            type Effect = C::Effect;
            type Receipt = C::Receipt;
            type Error = C::Error;

            fn describe(&self, cx: &ReplayContext, effect: &Self::Effect) -> Result<EffectDescription, Self::Error> {
                (**self).describe(cx, effect)
            }

            async fn deliver(&self, delivery: &Delivery<'_>, effect: &Self::Effect) -> Result<Self::Receipt, Self::Error> {
                (**self).deliver(delivery, effect).await
            }

            fn redaction(&self) -> RedactionPolicy {
                (**self).redaction()
            }

            fn dedupes_by_key(&self) -> bool {
                (**self).dedupes_by_key()
            }
        }
    )*};
}

forward_effect_client!(&C, Box<C>, Arc<C>);
