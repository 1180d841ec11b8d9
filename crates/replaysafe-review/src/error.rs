//! The one error type of the crate.

use replaysafe_core::journal::ReadError;

/// What went wrong reading journals or planning a backfill.
///
/// The message says what was being done (`opening journal runs/a.jsonl`); the cause, when
/// there is one, is the [`source`](std::error::Error::source) and is not repeated in the
/// message, so [`replaysafe_core::error_chain`] prints each cause once. A line that cannot
/// be read is shown as the journal reader words it (`runs/a.jsonl:2: journal line is not
/// valid UTF-8`), naming the file and the line.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error(pub(crate) Repr);

#[derive(Debug, thiserror::Error)]
pub(crate) enum Repr {
    #[error(transparent)]
    Line(#[from] ReadError),
    #[error("opening journal {path}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("keeping a copy of journal {path} as it is read")]
    Copy {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reading journal {path} again")]
    ReadAgain {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reading journal number {number} again: no such journal")]
    NoSuchJournal { number: usize },
    #[error("{command} reads at most {max} journals{per}")]
    TooManyJournals {
        command: &'static str,
        max: usize,
        per: &'static str,
    },
    #[error("{command} reads journals up to 256 TiB: {path} is longer")]
    TooLong { command: &'static str, path: String },
    #[error("keeping {what} in a temporary file")]
    Spill {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "invalid every {every}: it splits the range into more than {max} windows; choose a longer step"
    )]
    TooManyWindows { every: String, max: usize },
    #[error(transparent)]
    Core(#[from] replaysafe_core::Error),
}
