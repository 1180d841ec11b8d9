//! The one error type of this crate.

use std::time::Duration;

use replaysafe_core::Classify;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why describing, sending or reading an alert, or silencing a pipeline, failed.
///
/// Opaque: ask [`Error::is_invalid`], [`Error::field`], [`Error::status`] and the
/// [`Classify`] predicates. The message says what was being done; it never holds a
/// routing key or a Slack webhook URL.
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
    Invalid {
        field: &'static str,
    },
    Transient {
        status: Option<u16>,
        retry_after: Option<Duration>,
    },
    Permanent {
        status: Option<u16>,
    },
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

    /// Whether the input was refused before anything was sent.
    pub fn is_invalid(&self) -> bool {
        matches!(self.kind, Kind::Invalid { .. })
    }

    /// The input field at fault, for an invalid input (`alert name`, `label name`, `reason`, ...).
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
            Kind::Invalid { .. } => None,
        }
    }
}

impl Classify for Error {
    /// Network failures, timeouts, HTTP 408, 425, 429 and 5xx.
    fn is_transient(&self) -> bool {
        matches!(self.kind, Kind::Transient { .. })
    }

    fn retry_after(&self) -> Option<Duration> {
        match self.kind {
            Kind::Transient { retry_after, .. } => retry_after,
            _ => None,
        }
    }
}
