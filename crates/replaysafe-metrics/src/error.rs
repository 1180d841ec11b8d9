//! The one error type of this crate.

use std::time::Duration;

use replaysafe_core::Classify;
use replaysafe_core::journal::JournalError;

/// Why describing, pushing, sending or journaling a metric failed.
///
/// Opaque: ask [`Error::is_invalid`], [`Error::field`], [`Error::status`],
/// [`Error::is_journal`] and the [`Classify`] predicates. Network and HTTP failures have
/// the shape of every HTTP adapter's ([`replaysafe_http::Error`], reachable as the
/// source); the message says what was being done and never holds a password, a token or
/// a label value of a metric that was suppressed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error(Repr);

#[derive(Debug, thiserror::Error)]
enum Repr {
    #[error(transparent)]
    Network(replaysafe_http::Error),
    #[error("journaling suppressed metrics")]
    Journal(#[source] JournalError),
}

impl From<replaysafe_http::Error> for Error {
    fn from(error: replaysafe_http::Error) -> Self {
        Error(Repr::Network(error))
    }
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl std::fmt::Display) -> Self {
        replaysafe_http::Error::invalid(field, reason).into()
    }

    pub(crate) fn journal(source: JournalError) -> Self {
        Error(Repr::Journal(source))
    }

    fn network(&self) -> Option<&replaysafe_http::Error> {
        match &self.0 {
            Repr::Network(error) => Some(error),
            Repr::Journal(_) => None,
        }
    }

    /// The same error, reported against the configuration field `field` (see
    /// [`replaysafe_http::Error::at_field`]); a journal error is returned as it is.
    pub fn at_field(self, field: &'static str) -> Self {
        match self.0 {
            Repr::Network(error) => Error(Repr::Network(error.at_field(field))),
            journal => Error(journal),
        }
    }

    /// Whether the input was refused before anything was sent.
    pub fn is_invalid(&self) -> bool {
        self.network()
            .is_some_and(replaysafe_http::Error::is_invalid)
    }

    /// The input field at fault, for an invalid input (`metric name`, `label name`, `job`, ...).
    pub fn field(&self) -> Option<&'static str> {
        self.network().and_then(replaysafe_http::Error::field)
    }

    /// The HTTP status the receiver answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        self.network().and_then(replaysafe_http::Error::status)
    }

    /// Whether the SSRF policy refused the Pushgateway's address; nothing was sent.
    pub fn is_ssrf_refused(&self) -> bool {
        self.network()
            .is_some_and(replaysafe_http::Error::is_ssrf_refused)
    }

    /// Whether the journal could not be written.
    pub fn is_journal(&self) -> bool {
        matches!(self.0, Repr::Journal(_))
    }
}

impl Classify for Error {
    /// Network failures, timeouts, HTTP 408, 425, 429 and 5xx, and journal failures.
    fn is_transient(&self) -> bool {
        match &self.0 {
            Repr::Network(error) => error.is_transient(),
            Repr::Journal(_) => true,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        self.network().and_then(Classify::retry_after)
    }

    /// As every HTTP adapter's error ([`replaysafe_http::Error`]); `journal` when the
    /// journal could not be written.
    fn error_type(&self) -> std::borrow::Cow<'static, str> {
        match &self.0 {
            Repr::Network(error) => error.error_type(),
            Repr::Journal(_) => "journal".into(),
        }
    }
}
