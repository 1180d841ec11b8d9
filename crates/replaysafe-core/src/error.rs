//! The core crate's error type.

use chrono::{DateTime, TimeDelta, Utc};

/// Errors from building windows, contexts, opt-ins and effect descriptions.
///
/// Every variant names the field or variable that was wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A window whose end is not after its start.
    #[error("invalid window: end {end} is not after start {start}")]
    InvalidWindow {
        /// The start given.
        start: DateTime<Utc>,
        /// The end given.
        end: DateTime<Utc>,
    },
    /// A step for splitting a window that is zero or negative.
    #[error("invalid step {step}: a window step must be positive")]
    InvalidStep {
        /// The step given.
        step: TimeDelta,
    },
    /// A required value is missing.
    #[error("missing {field}: {hint}")]
    Missing {
        /// The field or environment variable.
        field: &'static str,
        /// What to set.
        hint: &'static str,
    },
    /// A value that could not be parsed or is out of range.
    #[error("invalid {field} {value:?}: {problem}")]
    Invalid {
        /// The field or environment variable.
        field: &'static str,
        /// The offending value (never a secret).
        value: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A file named by a variable or a flag (an opt-in, a key, the trusted approvers) could
    /// not be read or is malformed; the cause says which.
    #[error("reading {what} {path}")]
    File {
        /// What the file is.
        what: &'static str,
        /// Its path.
        path: String,
        /// Why it could not be read.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A secret file (an approver's key) that group or others may read or write: it is not
    /// used until its owner alone can.
    #[error("{what} {path} is open to group or others (mode {mode:04o}): run chmod 600 {path}")]
    NotPrivate {
        /// What the file is.
        what: &'static str,
        /// Its path.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Text that is not what it should be (an opt-in file, a key, a list of trusted
    /// approvers), where the value itself is not worth repeating or must not be.
    #[error("malformed {field}: {problem}")]
    Malformed {
        /// The field, or what the text is.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The journal `REPLAYSAFE_JOURNAL` names could not be opened, or is not a regular
    /// file ([`JournalError::is_not_a_regular_file`](crate::journal::JournalError::is_not_a_regular_file)).
    #[error("opening the journal REPLAYSAFE_JOURNAL names")]
    Journal(#[source] crate::journal::JournalError),
    /// Text given where the name of an environment variable belongs (`--secret-env`, a
    /// routes file's `secret_env`) that is not one, most likely the secret itself: the
    /// message names the field and never repeats the text.
    #[error("{field}: {}", crate::EnvVarName::NOT_A_NAME)]
    NotAVariableName {
        /// Where the text was given: a flag, a configuration field.
        field: std::borrow::Cow<'static, str>,
    },
    /// An environment variable named by configuration is unset, empty or not UTF-8. The
    /// message shows the name only when it has no lower-case letter (see
    /// [`crate::EnvVarName`]) and never the value.
    #[error("environment variable {variable} {problem}")]
    Variable {
        /// The variable.
        variable: crate::EnvVarName,
        /// `is not set`, `is empty` or `is not valid UTF-8`.
        problem: &'static str,
    },
    /// The data window read from the environment is inverted (its end is before its start).
    #[error(
        "inverted data window from {source_vars}: end {end} is before start {start}; \
         set REPLAYSAFE_WINDOW_START and REPLAYSAFE_WINDOW_END with start <= end"
    )]
    InvertedWindow {
        /// Which variables the window came from.
        source_vars: &'static str,
        /// Start read.
        start: DateTime<Utc>,
        /// End read.
        end: DateTime<Utc>,
    },
}

impl From<crate::journal::JournalError> for Error {
    fn from(source: crate::journal::JournalError) -> Self {
        Error::Journal(source)
    }
}

impl Error {
    pub(crate) fn malformed(field: &'static str, problem: impl Into<String>) -> Self {
        Error::Malformed {
            field,
            problem: problem.into(),
        }
    }

    pub(crate) fn invalid(
        field: &'static str,
        value: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Error::Invalid {
            field,
            value: value.into(),
            problem: problem.into(),
        }
    }
}

/// An error and its causes on one line, joined with `: `.
///
/// replaysafe's errors say what they were doing and leave the cause to `source()`, so
/// each cause appears once. This is how the command line prints errors and how the
/// journal records a failed attempt; tests use it to check what a person would read.
///
/// ```
/// #[derive(Debug, thiserror::Error)]
/// #[error("sending webhook to https://partner.example/hooks")]
/// struct Sending(#[source] std::io::Error);
/// let error = Sending(std::io::Error::other("connection refused"));
/// assert_eq!(
///     replaysafe_core::error_chain(&error),
///     "sending webhook to https://partner.example/hooks: connection refused"
/// );
/// ```
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{message}")]
    struct Layer {
        message: &'static str,
        #[source]
        source: Option<Box<Layer>>,
    }

    #[test]
    fn chains_are_joined_each_cause_once() {
        let inner = Layer {
            message: "503 service unavailable",
            source: None,
        };
        let middle = Layer {
            message: "sending webhook to https://h/p",
            source: Some(Box::new(inner)),
        };
        let outer = Layer {
            message: "delivery failed after 3 attempt(s)",
            source: Some(Box::new(middle)),
        };
        assert_eq!(
            error_chain(&outer),
            "delivery failed after 3 attempt(s): sending webhook to https://h/p: 503 service unavailable"
        );
    }
}
