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

/// The journals `report` and `diff` read: each file as it is, and each database journal
/// (`sqlite:PATH`, `postgres://…`) as the records `query` selects, copied line by line into
/// a temporary JSON Lines file that lives as long as this value (so memory stays flat
/// however many records the database holds).
#[derive(Debug)]
pub struct ForReview {
    /// What to read, in the order given.
    pub paths: Vec<std::path::PathBuf>,
    /// How each is named in a report: the file, or the database without its password.
    pub names: Vec<String>,
    _copies: Vec<tempfile::TempPath>,
}

/// Makes [`ForReview`] of the journals `texts` name. `--pipeline` and `--since` (`query`)
/// select a database journal's records; given with no database journal, they are an error,
/// as a file's records are read whole.
pub fn for_review(
    texts: &[std::path::PathBuf],
    query: &replaysafe_outbox::JournalQuery,
) -> anyhow::Result<ForReview> {
    let mut review = ForReview {
        paths: Vec::new(),
        names: Vec::new(),
        _copies: Vec::new(),
    };
    let selective = query.pipeline.is_some() || query.since.is_some();
    let mut databases = 0;
    for text in texts {
        let at = JournalAt::parse(text)?;
        if let JournalAt::File(path) = at {
            review.paths.push(path.to_path_buf());
            review.names.push(path.display().to_string());
            continue;
        }
        databases += 1;
        let copy = tempfile::NamedTempFile::new().context("making a temporary file")?;
        let mut out = std::io::BufWriter::new(copy.as_file());
        let mut write = |line: &str| {
            use std::io::Write as _;
            out.write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|e| replaysafe_outbox::OutboxError::Store {
                    operation: "copying the journal to a temporary file",
                    source: Box::new(e),
                })
        };
        let shown = match at {
            JournalAt::Sqlite(path) => {
                let shown = format!("sqlite:{}", path.display());
                if !path.is_file() {
                    bail!("{shown}: no such database");
                }
                replaysafe_outbox::sqlite::read_journal(path, query, &mut write)
                    .map_err(|e| anyhow!("{shown}: {}", replaysafe_core::error_chain(&e)))?;
                shown
            }
            JournalAt::Postgres(url) => {
                let (config, shown) = postgres_config(url)?;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime
                    .block_on(replaysafe_outbox::postgres::read_journal(
                        &config, query, &mut write,
                    ))
                    .map_err(|e| anyhow!("{shown}: {}", replaysafe_core::error_chain(&e)))?;
                shown
            }
            JournalAt::File(_) => unreachable!("files are taken above"),
        };
        std::io::Write::flush(&mut out).context("copying the journal")?;
        drop(out);
        let path = copy.into_temp_path();
        review.paths.push(path.to_path_buf());
        review.names.push(shown);
        review._copies.push(path);
    }
    if selective && databases == 0 {
        bail!(
            "--pipeline and --since select a database journal's records (sqlite:PATH, postgres://…); a file is read whole"
        );
    }
    Ok(review)
}
