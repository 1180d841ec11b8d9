//! Journals named by text, as `REPLAYSAFE_JOURNAL`, the command line and the Python API
//! name them: a JSON Lines file, a SQLite database (`sqlite:PATH`), or a PostgreSQL
//! database (`postgres://…`, its password from `PGPASSWORD` when the URL has none). A
//! database journal is also the ledger of every process that shares it.

use std::path::Path;
use std::sync::Arc;

use replaysafe_core::journal::JournalError;
use replaysafe_core::{Journal, JsonlJournal};

use crate::OutboxError;

/// What a journal's text names.
pub enum JournalAt<'a> {
    /// A JSON Lines file.
    File(&'a Path),
    /// A SQLite database.
    Sqlite(&'a Path),
    /// A PostgreSQL database, by URL.
    Postgres(&'a str),
}

/// Never shows a URL, which may hold a password.
impl std::fmt::Debug for JournalAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JournalAt::File(path) => f.debug_tuple("File").field(path).finish(),
            JournalAt::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            JournalAt::Postgres(_) => f.write_str("Postgres(..)"),
        }
    }
}

impl<'a> JournalAt<'a> {
    /// Reads `text`: `sqlite:PATH`, `postgres://…`, `postgresql://…`, or a file path.
    ///
    /// # Errors
    /// [`OutboxError::Invalid`] for `sqlite:` without a path.
    pub fn parse(text: &'a Path) -> Result<Self, OutboxError> {
        let Some(utf8) = text.to_str() else {
            return Ok(JournalAt::File(text));
        };
        if utf8.starts_with("postgres://") || utf8.starts_with("postgresql://") {
            return Ok(JournalAt::Postgres(utf8));
        }
        if let Some(path) = utf8.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(OutboxError::invalid(
                    "journal",
                    "sqlite: needs a path, as in sqlite:journal.db",
                ));
            }
            return Ok(JournalAt::Sqlite(Path::new(path)));
        }
        Ok(JournalAt::File(text))
    }
}

/// A PostgreSQL URL's connection settings, the password taken from `PGPASSWORD` when the
/// URL has none, and the database as messages show it (user, host, port and database:
/// no password, no query).
///
/// # Errors
/// [`OutboxError::Invalid`] when the URL does not parse; its text is not repeated.
pub fn postgres_config(url: &str) -> Result<(tokio_postgres::Config, String), OutboxError> {
    let mut config = crate::postgres::parse_url(url)?;
    if config.get_password().is_none()
        && let Ok(password) = std::env::var("PGPASSWORD")
    {
        config.password(password);
    }
    let shown = crate::postgres::describe(&config);
    Ok((config, shown))
}

/// Why a named journal could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenJournalError {
    /// The text is not a journal's name (`sqlite:` without a path, a URL that does not parse).
    #[error(transparent)]
    Name(OutboxError),
    /// The JSON Lines file cannot be a journal or cannot be opened.
    #[error(transparent)]
    File(JournalError),
    /// The database refused; `shown` names it without its password.
    #[error("{shown}")]
    Database {
        /// `sqlite:PATH`, or `postgres://USER@HOST:PORT/DB`.
        shown: String,
        /// The database's error.
        #[source]
        source: OutboxError,
    },
}

/// Opens the journal `text` names. A file that is not a regular file (`/dev/null`, a
/// FIFO) is refused: it keeps nothing. A database's tables are created when missing.
///
/// # Errors
/// [`OpenJournalError`]; a message names a database without its password.
pub fn open_journal(text: &Path) -> Result<Arc<dyn Journal>, OpenJournalError> {
    Ok(
        match JournalAt::parse(text).map_err(OpenJournalError::Name)? {
            JournalAt::File(path) => {
                Arc::new(JsonlJournal::open(path).map_err(OpenJournalError::File)?)
            }
            JournalAt::Sqlite(path) => {
                Arc::new(crate::sqlite::SqliteJournal::open(path).map_err(|source| {
                    OpenJournalError::Database {
                        shown: format!("sqlite:{}", path.display()),
                        source,
                    }
                })?)
            }
            JournalAt::Postgres(url) => {
                let (config, shown) = postgres_config(url).map_err(OpenJournalError::Name)?;
                match crate::postgres::PostgresJournal::connect(config, &shown) {
                    Ok(journal) => Arc::new(journal),
                    Err(source) => return Err(OpenJournalError::Database { shown, source }),
                }
            }
        },
    )
}
