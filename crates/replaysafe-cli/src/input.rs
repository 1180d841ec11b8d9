//! Reading journals: line by line, with progress on a terminal and optional skipping of bad lines.

use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Read, Write};
use std::num::NonZeroU64;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use replaysafe_core::journal::{
    JournalReader, JournalRecord, MAX_LINE_BYTES, ReadError, provably_not_attempting,
};

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

/// Where a line is: its journal's number, in the order the journals are read, and its
/// offset there; 8 bytes (16 bits of journal, 48 of offset). Positions order the lines
/// as they were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineAt(NonZeroU64);

impl LineAt {
    /// How many journals one command reads at most.
    pub const MAX_JOURNALS: usize = (1 << 16) - 1;

    /// The position of the line at `offset` of journal `journal`; `None` past
    /// [`LineAt::MAX_JOURNALS`] journals or 256 TiB into one.
    pub fn new(journal: usize, offset: u64) -> Option<LineAt> {
        if journal >= Self::MAX_JOURNALS || offset >= 1 << 48 {
            return None;
        }
        NonZeroU64::new(((journal as u64) << 48 | offset) + 1).map(LineAt)
    }

    /// The journal's number.
    pub fn journal(self) -> usize {
        ((self.0.get() - 1) >> 48) as usize
    }

    /// The line's offset in its journal.
    pub fn offset(self) -> u64 {
        (self.0.get() - 1) & ((1 << 48) - 1)
    }
}

/// The record at `at` among the journals `sources` (by number), read again; `expected`
/// says whether it is still the line read the first time.
pub fn record_at(
    sources: &[Source],
    at: LineAt,
    expected: impl Fn(&JournalRecord) -> bool,
) -> anyhow::Result<JournalRecord> {
    let source = sources.get(at.journal()).ok_or_else(|| {
        anyhow::anyhow!(
            "reading journal number {} again: no such journal",
            at.journal()
        )
    })?;
    let record = source.record_at(at.offset())?;
    if !expected(&record) {
        return Err(changed(&source.name).into());
    }
    Ok(record)
}

/// A journal as it was read, kept so that a line can be read again by its offset: the file
/// itself when it is a regular file, else a temporary copy of what was read (a pipe can be
/// read only once). `report` and `diff` keep offsets rather than the lines' text.
#[derive(Clone, Debug)]
pub struct Source {
    name: String,
    file: Arc<File>,
}

impl Source {
    /// The journal's name, as errors show it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The record of the line that begins at `offset`, which was read as a record before.
    pub fn record_at(&self, offset: u64) -> anyhow::Result<JournalRecord> {
        let mut line = Vec::new();
        let mut chunk = vec![0; 8 * 1024];
        loop {
            let read = self
                .file
                .read_at(&mut chunk, offset + line.len() as u64)
                .with_context(|| format!("reading journal {} again", self.name))?;
            let bytes = &chunk[..read];
            match bytes.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    line.extend_from_slice(&bytes[..end]);
                    break;
                }
                None => line.extend_from_slice(bytes),
            }
            if read == 0 || line.len() > MAX_LINE_BYTES {
                break;
            }
        }
        let record = JournalReader::new(line.as_slice(), self.name.clone())
            .next()
            .unwrap_or_else(|| Err(changed(&self.name)));
        record.map_err(|_| changed(&self.name).into())
    }
}

fn changed(name: &str) -> ReadError {
    ReadError::Io {
        path: name.to_owned(),
        source: std::io::Error::other("the journal changed while it was read"),
    }
}

/// Reads through `inner` and keeps a copy of every byte in `copy`.
struct Tee<R> {
    inner: R,
    copy: BufWriter<File>,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buffer)?;
        self.copy.write_all(&buffer[..read])?;
        Ok(read)
    }
}

/// Calls `each` for every record of `path` with the offset of its line; returns the lines
/// it skipped and the journal kept re-readable.
///
/// A malformed line, a line that is not UTF-8 and a line longer than
/// [`MAX_LINE_BYTES`] are errors naming the file and line unless `skip_invalid`; a line of
/// another schema version (newer, or 0) is always an error. Each skipped line is counted
/// as possibly an `attempting` record unless it provably is not one.
pub fn for_each_record(
    path: &Path,
    skip_invalid: bool,
    progress: &Progress,
    mut each: impl FnMut(JournalRecord, u64),
) -> anyhow::Result<(Skipped, Source)> {
    let name = path.display().to_string();
    let file = File::open(path).with_context(|| format!("opening journal {name}"))?;
    let regular = file.metadata().is_ok_and(|metadata| metadata.is_file());
    let (input, kept): (Box<dyn Read>, File) = if regular {
        let kept = file
            .try_clone()
            .with_context(|| format!("opening journal {name}"))?;
        (Box::new(file), kept)
    } else {
        let copy = tempfile::tempfile()
            .with_context(|| format!("keeping a copy of journal {name} as it is read"))?;
        let writer = BufWriter::with_capacity(256 * 1024, copy.try_clone()?);
        (
            Box::new(Tee {
                inner: file,
                copy: writer,
            }),
            copy,
        )
    };
    let reader = BufReader::with_capacity(256 * 1024, progress.bar.wrap_read(input));
    let mut skipped = Skipped::default();
    let mut reader = JournalReader::new(reader, name.clone());
    while let Some(result) = reader.next() {
        let why = match result {
            Ok(record) => {
                each(record, reader.line_offset());
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
    // The copy of a pipe is whole once the reader is done with it.
    drop(reader);
    Ok((
        skipped,
        Source {
            name,
            file: Arc::new(kept),
        },
    ))
}
