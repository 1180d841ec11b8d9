//! The one error type of this crate.

use std::time::Duration;

use replaysafe_core::Classify;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why describing, pushing, sending or journaling a metric failed.
///
/// Opaque: ask [`Error::is_invalid`], [`Error::field`], [`Error::status`] and the
/// [`Classify`] predicates. The message says what was being done and never holds a
/// password, a token or a label value of a metric that was suppressed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: Kind,
    message: String,
    #[source]
    source: Option<BoxError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Bad input, refused before anything was sent.
    Invalid { field: &'static str },
    /// A receiver answered with a status that may pass, or the network failed.
    Transient {
        status: Option<u16>,
        retry_after: Option<Duration>,
    },
    /// A receiver refused for good (4xx other than 408, 425 and 429; a redirect).
    Permanent { status: Option<u16> },
    /// The journal could not be written.
    Journal,
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl std::fmt::Display) -> Self {
        Error {
            kind: Kind::Invalid { field },
            message: format!("invalid {field}: {reason}"),
            source: None,
        }
    }

    pub(crate) fn transient(
        message: String,
        status: Option<u16>,
        retry_after: Option<Duration>,
        source: Option<BoxError>,
    ) -> Self {
        Error {
            kind: Kind::Transient {
                status,
                retry_after,
            },
            message,
            source,
        }
    }

    pub(crate) fn permanent(
        message: String,
        status: Option<u16>,
        source: Option<BoxError>,
    ) -> Self {
        Error {
            kind: Kind::Permanent { status },
            message,
            source,
        }
    }

    pub(crate) fn journal(source: replaysafe_core::journal::JournalError) -> Self {
        Error {
            kind: Kind::Journal,
            message: format!("journaling suppressed metrics: {source}"),
            source: Some(Box::new(source)),
        }
    }

    /// Whether the input was refused before anything was sent.
    pub fn is_invalid(&self) -> bool {
        matches!(self.kind, Kind::Invalid { .. })
    }

    /// The input field at fault, for an invalid input (`metric name`, `label name`, `job`, ...).
    pub fn field(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Invalid { field } => Some(field),
            _ => None,
        }
    }

    /// The HTTP status the receiver answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self.kind {
            Kind::Transient { status, .. } | Kind::Permanent { status } => status,
            _ => None,
        }
    }

    /// Whether the journal could not be written.
    pub fn is_journal(&self) -> bool {
        self.kind == Kind::Journal
    }
}

impl Classify for Error {
    /// Network failures, timeouts, HTTP 408, 425, 429 and 5xx, and journal failures.
    fn is_transient(&self) -> bool {
        matches!(self.kind, Kind::Transient { .. } | Kind::Journal)
    }

    fn retry_after(&self) -> Option<Duration> {
        match self.kind {
            Kind::Transient { retry_after, .. } => retry_after,
            _ => None,
        }
    }
}
