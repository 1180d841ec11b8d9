//! Reading journals: line by line, with progress on a terminal and optional skipping of bad lines.

use std::fs::File;
use std::io::{BufReader, IsTerminal};
use std::path::Path;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use replaysafe_core::journal::{JournalReader, JournalRecord, ReadError};

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

/// Calls `each` for every record of `path`; returns how many malformed lines were skipped.
///
/// A malformed line is an error naming the file and line unless `skip_invalid`; a line
/// of a newer schema version is always an error.
pub fn for_each_record(
    path: &Path,
    skip_invalid: bool,
    progress: &Progress,
    mut each: impl FnMut(JournalRecord),
) -> anyhow::Result<u64> {
    let file = File::open(path).with_context(|| format!("opening journal {}", path.display()))?;
    let reader = BufReader::with_capacity(256 * 1024, progress.bar.wrap_read(file));
    let mut skipped = 0;
    for result in JournalReader::new(reader, path.display().to_string()) {
        match result {
            Ok(record) => each(record),
            Err(ReadError::Malformed { .. }) if skip_invalid => skipped += 1,
            Err(error) => return Err(error.into()),
        }
    }
    Ok(skipped)
}
