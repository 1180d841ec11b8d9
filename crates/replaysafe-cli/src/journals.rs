//! Journals named on the command line or in `REPLAYSAFE_JOURNAL`: a JSON Lines file, a
//! SQLite database (`sqlite:PATH`), or a PostgreSQL database (`postgres://…`, its password
//! from `PGPASSWORD` when the URL has none). A database journal is also the ledger of
//! every process that shares it.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use replaysafe_core::{Journal, JsonlJournal};

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
    /// Reads `text` (`sqlite:PATH`, `postgres://…`, `postgresql://…`, or a file path).
    pub fn parse(text: &'a Path) -> anyhow::Result<Self> {
        let Some(utf8) = text.to_str() else {
            return Ok(JournalAt::File(text));
        };
        if utf8.starts_with("postgres://") || utf8.starts_with("postgresql://") {
            return Ok(JournalAt::Postgres(utf8));
        }
        if let Some(path) = utf8.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                bail!("sqlite: needs a path, as in sqlite:journal.db");
            }
            return Ok(JournalAt::Sqlite(Path::new(path)));
        }
        Ok(JournalAt::File(text))
    }
}

/// A PostgreSQL URL's connection settings, the password taken from `PGPASSWORD` when the
/// URL has none, and the URL as errors show it (no password, no query).
pub fn postgres_config(
    url: &str,
) -> anyhow::Result<(replaysafe_outbox::tokio_postgres::Config, String)> {
    let mut config = replaysafe_outbox::postgres::parse_url(url).map_err(|e| anyhow!("{e}"))?;
    if config.get_password().is_none()
        && let Ok(password) = std::env::var("PGPASSWORD")
    {
        config.password(password);
    }
    let shown = url::Url::parse(url)
        .map(|mut url| {
            let _ = url.set_password(None);
            url.set_query(None);
            url.to_string()
        })
        .unwrap_or_else(|_| "postgres://…".to_owned());
    Ok((config, shown))
}

/// Opens the journal `text` names; errors start with `named_by` (`--journal`,
/// `REPLAYSAFE_JOURNAL`). A file that is not a regular file (`/dev/null`, a FIFO) is
/// refused: it keeps nothing.
pub fn open(text: &Path, named_by: &str) -> anyhow::Result<Arc<dyn Journal>> {
    Ok(
        match JournalAt::parse(text).with_context(|| named_by.to_owned())? {
            JournalAt::File(path) => {
                Arc::new(JsonlJournal::open(path).with_context(|| named_by.to_owned())?)
            }
            JournalAt::Sqlite(path) => Arc::new(
                replaysafe_outbox::sqlite::SqliteJournal::open(path)
                    .map_err(|e| anyhow!("{named_by}: {}", replaysafe_core::error_chain(&e)))?,
            ),
            JournalAt::Postgres(url) => {
                let (config, shown) = postgres_config(url).with_context(|| named_by.to_owned())?;
                Arc::new(
                    replaysafe_outbox::postgres::PostgresJournal::connect(config, &shown).map_err(
                        |e| anyhow!("{named_by} {shown}: {}", replaysafe_core::error_chain(&e)),
                    )?,
                )
            }
        },
    )
}
