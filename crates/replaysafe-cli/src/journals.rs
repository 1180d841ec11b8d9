//! Journals named on the command line or in `REPLAYSAFE_JOURNAL`: a JSON Lines file, a
//! SQLite database (`sqlite:PATH`), or a PostgreSQL database (`postgres://…`, its password
//! from `PGPASSWORD` when the URL has none). A database journal is also the ledger of
//! every process that shares it.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use replaysafe_core::Journal;
pub use replaysafe_outbox::named::{JournalAt, postgres_config};

/// Opens the journal `text` names (`replaysafe_outbox::named::open_journal`); errors start
/// with `named_by` (`--journal`, `REPLAYSAFE_JOURNAL`) and never show a password.
pub fn open(text: &Path, named_by: &str) -> anyhow::Result<Arc<dyn Journal>> {
    use replaysafe_outbox::named::OpenJournalError;
    replaysafe_outbox::named::open_journal(text).map_err(|e| match &e {
        // `REPLAYSAFE_JOURNAL postgres://user@host:5432/db: …`
        OpenJournalError::Database { .. } => {
            anyhow!("{named_by} {}", replaysafe_core::error_chain(&e))
        }
        _ => anyhow!("{named_by}: {}", replaysafe_core::error_chain(&e)),
    })
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
