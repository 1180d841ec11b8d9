//! Reading journals line by line, keeping each one re-readable by offset, with progress
//! and optional skipping of bad lines.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::num::NonZeroU64;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use replaysafe_core::journal::{
    JournalReader, JournalRecord, MAX_LINE_BYTES, ReadError, provably_not_attempting,
};

use crate::Progress;
use crate::error::Repr;

/// Lines skipped as invalid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Skipped {
    /// How many.
    pub(crate) count: u64,
    /// The first [`Skipped::LISTED`] of them, `FILE:LINE (why)`.
    pub(crate) lines: Vec<String>,
    /// How many of them may be `attempting` records: nothing in them proves otherwise
    /// ([`provably_not_attempting`]).
    pub(crate) possibly_attempting: u64,
}

impl Skipped {
    /// How many skipped lines are named; the rest are counted.
    const LISTED: usize = 100;

    fn add(&mut self, path: &str, line: u64, why: &str, possibly_attempting: bool) {
        self.count += 1;
        self.possibly_attempting += u64::from(possibly_attempting);
        if self.lines.len() < Self::LISTED {
            self.lines.push(format!("{path}:{line} ({why})"));
        }
    }

    /// Adds what another file skipped.
    pub(crate) fn extend(&mut self, other: Skipped) {
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
pub(crate) struct LineAt(NonZeroU64);

impl LineAt {
    /// How many journals one command reads at most.
    pub(crate) const MAX_JOURNALS: usize = (1 << 16) - 1;

    /// The position of the line at `offset` of journal `journal`; `None` past
    /// [`LineAt::MAX_JOURNALS`] journals or 256 TiB into one.
    pub(crate) fn new(journal: usize, offset: u64) -> Option<LineAt> {
        if journal >= Self::MAX_JOURNALS || offset >= 1 << 48 {
            return None;
        }
        NonZeroU64::new(((journal as u64) << 48 | offset) + 1).map(LineAt)
    }

    /// The journal's number.
    pub(crate) fn journal(self) -> usize {
        ((self.0.get() - 1) >> 48) as usize
    }

    /// The line's offset in its journal.
    pub(crate) fn offset(self) -> u64 {
        (self.0.get() - 1) & ((1 << 48) - 1)
    }
}

/// The record at `at` among the journals `sources` (by number), read again; `expected`
/// says whether it is still the line read the first time.
pub(crate) fn record_at(
    sources: &[Source],
    at: LineAt,
    expected: impl Fn(&JournalRecord) -> bool,
) -> Result<JournalRecord, Repr> {
    let source = sources.get(at.journal()).ok_or(Repr::NoSuchJournal {
        number: at.journal(),
    })?;
    let record = source.record_at(at.offset())?;
    if !expected(&record) {
        return Err(changed(&source.name).into());
    }
    Ok(record)
}

/// A journal as it was read, kept so that a line can be read again by its offset: the file
/// itself when it is a regular file, else a temporary copy of what was read (a pipe can be
/// read only once). Reports and diffs keep offsets rather than the lines' text.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    name: String,
    file: Arc<File>,
}

impl Source {
    /// The record of the line that begins at `offset`, which was read as a record before.
    fn record_at(&self, offset: u64) -> Result<JournalRecord, Repr> {
        let mut line = Vec::new();
        let mut chunk = vec![0; 8 * 1024];
        loop {
            let read = self
                .file
                .read_at(&mut chunk, offset + line.len() as u64)
                .map_err(|source| Repr::ReadAgain {
                    path: self.name.clone(),
                    source,
                })?;
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

/// Reads through `inner` and tells `progress` how many bytes went by.
struct Counted<'a, R> {
    inner: R,
    progress: &'a dyn Progress,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buffer)?;
        self.progress.advance(read as u64);
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
pub(crate) fn for_each_record(
    path: &Path,
    skip_invalid: bool,
    progress: Option<&dyn Progress>,
    mut each: impl FnMut(JournalRecord, u64),
) -> Result<(Skipped, Source), Repr> {
    let name = path.display().to_string();
    let opening = |source| Repr::Open {
        path: name.clone(),
        source,
    };
    let file = File::open(path).map_err(opening)?;
    let regular = file.metadata().is_ok_and(|metadata| metadata.is_file());
    let (input, kept): (Box<dyn Read + '_>, File) = if regular {
        let kept = file.try_clone().map_err(opening)?;
        (Box::new(file), kept)
    } else {
        let copying = |source| Repr::Copy {
            path: name.clone(),
            source,
        };
        let copy = tempfile::tempfile().map_err(copying)?;
        let writer = BufWriter::with_capacity(256 * 1024, copy.try_clone().map_err(copying)?);
        (
            Box::new(Tee {
                inner: file,
                copy: writer,
            }),
            copy,
        )
    };
    let input: Box<dyn Read + '_> = match progress {
        Some(progress) => Box::new(Counted {
            inner: input,
            progress,
        }),
        None => input,
    };
    let reader = BufReader::with_capacity(256 * 1024, input);
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
