//! `send_email`: one email, as many effects as its fanout makes, all checked first.

use std::future::Future;

use replaysafe_core::{Guard, Outcome, ReplayContext, SendError};

use crate::{Email, EmailClient, EmailReceipt, Error};

mod sealed {
    pub trait Sealed {}
    impl Sealed for replaysafe_core::Guard<crate::EmailClient> {}
}

/// Sending a whole [`Email`] through a guarded [`EmailClient`].
///
/// Sealed: implemented for `Guard<EmailClient>` only.
pub trait EmailGuardExt: sealed::Sealed {
    /// Sends every effect of `email`: one per distinct recipient by default, one for
    /// the whole recipient set with [`crate::Fanout::OneMessage`].
    ///
    /// The whole email is checked, and every effect described, before the first one is
    /// sent: an invalid email is `Err(SendError::Invalid)` and nothing is sent or
    /// journaled. Then each effect goes through [`Guard::send`] in turn (gate, journal,
    /// retries); a failure for one recipient does not stop the others.
    fn send_email(
        &self,
        cx: &ReplayContext,
        email: &Email,
    ) -> impl Future<Output = Result<EmailOutcomes, SendError<Error>>> + Send;
}

impl EmailGuardExt for Guard<EmailClient> {
    async fn send_email(
        &self,
        cx: &ReplayContext,
        email: &Email,
    ) -> Result<EmailOutcomes, SendError<Error>> {
        let effects = email.copies().map_err(SendError::Invalid)?;
        let mut targets = Vec::with_capacity(effects.len());
        for effect in &effects {
            let description = self.preview(cx, effect)?.description;
            targets.push(description.target().to_owned());
        }
        let mut entries = Vec::with_capacity(effects.len());
        for (effect, target) in effects.iter().zip(targets) {
            entries.push((target, self.send(cx, effect).await));
        }
        Ok(EmailOutcomes { entries })
    }
}

/// The result of one effect.
type EffectResult = Result<Outcome<EmailReceipt>, SendError<Error>>;

/// What [`EmailGuardExt::send_email`] did with each effect of an email, in recipient
/// order (to, cc, bcc; each address once).
#[derive(Debug)]
pub struct EmailOutcomes {
    entries: Vec<(String, EffectResult)>,
}

impl EmailOutcomes {
    /// Each effect's target (the recipient, or the comma-joined recipient set) and result.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &EffectResult)> {
        self.entries
            .iter()
            .map(|(target, result)| (target.as_str(), result))
    }

    /// How many effects the email made.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the email made no effect (never, for a valid email).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many effects were delivered.
    pub fn delivered(&self) -> usize {
        self.count(|result| result.as_ref().is_ok_and(Outcome::is_delivered))
    }

    /// How many effects were suppressed by the gate.
    pub fn suppressed(&self) -> usize {
        self.count(|result| result.as_ref().is_ok_and(Outcome::is_suppressed))
    }

    /// How many effects failed.
    pub fn failed(&self) -> usize {
        self.count(Result::is_err)
    }

    fn count(&self, predicate: impl Fn(&EffectResult) -> bool) -> usize {
        self.entries
            .iter()
            .filter(|(_, result)| predicate(result))
            .count()
    }

    /// The outcomes, or the first failure (every effect was attempted either way).
    pub fn into_result(self) -> Result<Vec<Outcome<EmailReceipt>>, SendError<Error>> {
        self.entries.into_iter().map(|(_, result)| result).collect()
    }
}
