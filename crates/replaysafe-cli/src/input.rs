//! Reading journals: line by line, with progress on a terminal and optional skipping of bad lines.

use std::fs::File;
use std::io::{BufReader, IsTerminal};
use std::path::Path;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use replaysafe_core::journal::{JournalReader, JournalRecord, ReadError, provably_not_attempting};

/// A progress bar on stderr when stderr is a terminal, and nothing otherwise.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar sized to the total bytes of `paths` when stderr is a terminal; hidden otherwise.
    pub fn for_files(paths: &[impl AsRef<Path>]) -> Self {
        if !std::io::stderr().is_terminal() {
            return Progress::hidden();
        }
        let total = paths
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} reading journals {bar:30} {bytes}/{total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress { bar }
    }

    /// No bar.
    pub fn hidden() -> Self {
        Progress {
            bar: ProgressBar::hidden(),
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Lines `--skip-invalid` skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// How many.
    pub count: u64,
    /// The first [`Skipped::LISTED`] of them, `FILE:LINE (why)`.
    pub lines: Vec<String>,
    /// How many of them may be `attempting` records: nothing in them proves otherwise
    /// ([`provably_not_attempting`](replaysafe_core::journal::provably_not_attempting)).
    pub possibly_attempting: u64,
}

impl Skipped {
    /// How many skipped lines are named; the rest are counted.
    pub const LISTED: usize = 100;

    fn add(&mut self, path: &str, line: u64, why: &str, possibly_attempting: bool) {
        self.count += 1;
        self.possibly_attempting += u64::from(possibly_attempting);
        if self.lines.len() < Self::LISTED {
            self.lines.push(format!("{path}:{line} ({why})"));
        }
    }

    /// Adds what another file skipped.
    pub fn extend(&mut self, other: Skipped) {
        self.count += other.count;
        self.possibly_attempting += other.possibly_attempting;
        let room = Self::LISTED.saturating_sub(self.lines.len());
        self.lines.extend(other.lines.into_iter().take(room));
    }
}

/// Calls `each` for every record of `path`; returns the lines it skipped.
///
/// A malformed line, a line that is not UTF-8 and a line longer than
/// [`MAX_LINE_BYTES`](replaysafe_core::journal::MAX_LINE_BYTES) are errors naming the
/// file and line unless `skip_invalid`; a line of another schema version (newer, or 0)
/// is always an error. Each skipped line is counted as possibly an `attempting` record
/// unless it provably is not one.
pub fn for_each_record(
    path: &Path,
    skip_invalid: bool,
    progress: &Progress,
    mut each: impl FnMut(JournalRecord),
) -> anyhow::Result<Skipped> {
    let file = File::open(path).with_context(|| format!("opening journal {}", path.display()))?;
    let reader = BufReader::with_capacity(256 * 1024, progress.bar.wrap_read(file));
    let mut skipped = Skipped::default();
    let name = path.display().to_string();
    let mut reader = JournalReader::new(reader, name.clone());
    while let Some(result) = reader.next() {
        let why = match result {
            Ok(record) => {
                each(record);
                continue;
            }
            Err(ReadError::Malformed { .. }) if skip_invalid => "malformed record",
            Err(ReadError::InvalidUtf8 { .. }) if skip_invalid => "not UTF-8",
            Err(ReadError::LineTooLong { .. }) if skip_invalid => "longer than 1 MiB",
            Err(error) => return Err(error.into()),
        };
        let possibly_attempting = !reader.last_line().is_some_and(provably_not_attempting);
        skipped.add(&name, reader.line_number(), why, possibly_attempting);
    }
    Ok(skipped)
}
