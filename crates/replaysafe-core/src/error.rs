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
    /// The data window read from the environment is empty or inverted.
    #[error(
        "empty or inverted data window from {source_vars}: start {start} is not before end {end}; \
         set REPLAYSAFE_WINDOW_START and REPLAYSAFE_WINDOW_END, or export the data interval \
         through get_airflow_context_vars on a scheduled DAG"
    )]
    EmptyWindow {
        /// Which variables the window came from.
        source_vars: &'static str,
        /// Start read.
        start: DateTime<Utc>,
        /// End read.
        end: DateTime<Utc>,
    },
}

impl Error {
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
