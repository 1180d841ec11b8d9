//! The one error type of the outbox.

use replaysafe_core::journal::JournalError;

/// A boxed cause, kept opaque so that a backend upgrade is not a breaking change.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an outbox operation failed.
///
/// The message says what was being done; the cause is its
/// [`source`](std::error::Error::source). Nothing in a message is secret: effects and
/// targets are never printed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The database refused or failed an operation.
    #[error("outbox store: {operation}")]
    Store {
        /// What was being done, such as `claiming rows`.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The database holds a schema newer than this version of the crate knows.
    #[error(
        "the outbox schema in this database is version {found}, newer than version {supported} that this replaysafe knows; upgrade replaysafe before using this database"
    )]
    SchemaTooNew {
        /// The version found in the database.
        found: i64,
        /// The newest version this crate knows.
        supported: i64,
    },
    /// The database holds an older outbox schema, and this operation only reads: it does
    /// not migrate. A worker, or `replaysafe outbox init`, migrates it.
    #[error(
        "the outbox schema in this database is version {found}, older than version {supported} that this replaysafe reads; run `replaysafe outbox init` (or start a worker) to migrate it"
    )]
    SchemaTooOld {
        /// The version found in the database.
        found: i64,
        /// The version this crate reads.
        supported: i64,
    },
    /// The database holds no outbox: an operation that only reads created nothing.
    #[error("{database} holds no outbox; `replaysafe outbox init` (or a worker) creates one")]
    NoOutbox {
        /// The database, as shown to people (no password).
        database: String,
    },
    /// The effect could not be staged: its client's `describe` refused it.
    #[error("invalid effect for route {route}")]
    InvalidEffect {
        /// The route name.
        route: String,
        /// What `describe` said.
        #[source]
        source: BoxError,
    },
    /// The effect could not be encoded as JSON.
    #[error("encoding the effect for route {route}")]
    Encode {
        /// The route name.
        route: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A value given by the caller is invalid; `field` names it.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A row holds a value this crate cannot read; `field` names the column.
    #[error("outbox row {key}: unreadable {field}")]
    CorruptRow {
        /// The row's idempotency key.
        key: String,
        /// The column at fault.
        field: &'static str,
        /// Why it could not be read.
        #[source]
        source: BoxError,
    },
    /// The worker could not listen for SIGINT and SIGTERM.
    #[error("installing the stop signal handlers")]
    Signal(#[source] std::io::Error),
    /// The journal could not record a staging decision; the staging was not done.
    #[error("journaling a staged effect")]
    Journal(#[source] JournalError),
}

impl OutboxError {
    pub(crate) fn store(operation: &'static str, source: impl Into<BoxError>) -> Self {
        OutboxError::Store {
            operation,
            source: source.into(),
        }
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        OutboxError::Invalid {
            field,
            reason: reason.into(),
        }
    }

    pub(crate) fn corrupt(
        key: impl Into<String>,
        field: &'static str,
        source: impl Into<BoxError>,
    ) -> Self {
        OutboxError::CorruptRow {
            key: key.into(),
            field,
            source: source.into(),
        }
    }
}
