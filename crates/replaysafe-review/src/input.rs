//! Reading journals line by line, keeping each one re-readable by offset, with progress
//! and optional skipping of bad lines.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::num::NonZeroU64;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use replaysafe_core::journal::{
    JournalReader, JournalRecord, MAX_LINE_BYTES, ReadError, SCHEMA_VERSION,
    provably_not_attempting,
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

/// Reads a journal line by line as [`JournalReader`] does, with the same records, errors,
/// line numbers and offsets, and finds where each line ends with `BufRead::read_until`
/// (which searches a word at a time, where the journal reader looks at each byte), so that
/// reading is about as fast as parsing.
///
/// Only a line that is a schema-1 record as it stands (`serde_json` reads it as a
/// [`JournalRecord`] of version [`SCHEMA_VERSION`]) is taken here: every other line
/// (not UTF-8, blank, malformed, of another version) is handed to a [`JournalReader`] of
/// its own, so that what is skipped, what is an error and how an error is worded stay the
/// journal reader's. A test holds the two readers to the same answers.
#[derive(Debug)]
struct Lines<R> {
    input: R,
    name: String,
    /// The last line read, without its newline; empty after a line over the limit.
    line: Vec<u8>,
    line_number: u64,
    /// Bytes of the input read so far.
    consumed: u64,
    /// Where the last line read begins in the input.
    line_start: u64,
    /// Whether the last line was longer than the limit (and so is not in `line`).
    too_long: bool,
}

impl<R: BufRead> Lines<R> {
    fn new(input: R, name: String) -> Self {
        Lines {
            input,
            name,
            line: Vec::new(),
            line_number: 0,
            consumed: 0,
            line_start: 0,
            too_long: false,
        }
    }

    /// As [`JournalReader::line_offset`].
    fn line_offset(&self) -> u64 {
        self.line_start
    }

    /// As [`JournalReader::line_number`].
    fn line_number(&self) -> u64 {
        self.line_number
    }

    /// As [`JournalReader::last_line`].
    fn last_line(&self) -> Option<&[u8]> {
        (self.line_number > 0 && !self.too_long).then_some(self.line.as_slice())
    }

    fn io_error(&self, source: std::io::Error) -> ReadError {
        ReadError::Io {
            path: self.name.clone(),
            source,
        }
    }

    /// As [`JournalReader`]'s `next`.
    fn next_record(&mut self) -> Option<Result<JournalRecord, ReadError>> {
        loop {
            self.line.clear();
            self.line_start = self.consumed;
            // The limit and the newline: a line that fills it is longer than the limit.
            let most = MAX_LINE_BYTES as u64 + 1;
            let read = match (&mut self.input)
                .take(most)
                .read_until(b'\n', &mut self.line)
            {
                Ok(read) => read,
                Err(source) => return Some(Err(self.io_error(source))),
            };
            if read == 0 {
                return None;
            }
            self.consumed += read as u64;
            self.line_number += 1;
            if self.line.last() == Some(&b'\n') {
                self.line.pop();
            } else if self.line.len() > MAX_LINE_BYTES {
                // The rest of the line is skipped, never held.
                self.line = Vec::new();
                self.too_long = true;
                match self.input.skip_until(b'\n') {
                    Ok(skipped) => self.consumed += skipped as u64,
                    Err(source) => return Some(Err(self.io_error(source))),
                }
                return Some(Err(ReadError::LineTooLong {
                    path: self.name.clone(),
                    line: self.line_number,
                    limit: MAX_LINE_BYTES,
                }));
            }
            self.too_long = false;
            if let Ok(text) = std::str::from_utf8(&self.line) {
                let text = text.trim();
                if text.is_empty() {
                    continue;
                }
                if let Ok(record) = serde_json::from_str::<JournalRecord>(text)
                    && record.v == SCHEMA_VERSION
                {
                    return Some(Ok(record));
                }
            }
            match JournalReader::new(self.line.as_slice(), self.name.clone()).next() {
                Some(verdict) => return Some(verdict.map_err(|error| self.numbered(error))),
                None => continue,
            }
        }
    }

    /// `error`, about the last line, with that line's number (a reader of the line alone
    /// calls it line 1).
    fn numbered(&self, mut error: ReadError) -> ReadError {
        match &mut error {
            ReadError::Malformed { line, .. }
            | ReadError::InvalidUtf8 { line, .. }
            | ReadError::LineTooLong { line, .. }
            | ReadError::UnsupportedVersion { line, .. } => *line = self.line_number,
            _ => {}
        }
        error
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
    let mut reader = Lines::new(reader, name.clone());
    while let Some(result) = reader.next_record() {
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

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use proptest::prelude::*;
    use replaysafe_core::journal::{JournalDecision, RecordEffect, RecordWindow};

    use super::*;

    /// What a reader says of each line: the record or the error as worded, where the line
    /// begins, its number, and the line as kept.
    type Said = (Result<JournalRecord, String>, u64, u64, Option<Vec<u8>>);

    fn journal_reader(bytes: &[u8], buffer: usize) -> Vec<Said> {
        let mut reader = JournalReader::new(BufReader::with_capacity(buffer, bytes), "j.jsonl");
        let mut said = Vec::new();
        while let Some(result) = reader.next() {
            said.push((
                result.map_err(|e| e.to_string()),
                reader.line_offset(),
                reader.line_number(),
                reader.last_line().map(<[u8]>::to_vec),
            ));
        }
        said
    }

    fn lines(bytes: &[u8], buffer: usize) -> Vec<Said> {
        let mut reader = Lines::new(BufReader::with_capacity(buffer, bytes), "j.jsonl".into());
        let mut said = Vec::new();
        while let Some(result) = reader.next_record() {
            said.push((
                result.map_err(|e| e.to_string()),
                reader.line_offset(),
                reader.line_number(),
                reader.last_line().map(<[u8]>::to_vec),
            ));
        }
        said
    }

    fn assert_alike(bytes: &[u8]) {
        for buffer in [7, 8 * 1024] {
            assert_eq!(
                lines(bytes, buffer),
                journal_reader(bytes, buffer),
                "{:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            );
        }
    }

    fn record_line(version: u32) -> String {
        let at = Utc.with_ymd_and_hms(2026, 8, 6, 1, 0, 0).unwrap();
        let record = JournalRecord::new(
            at,
            JournalDecision::Attempting,
            "daily_orders",
            "r1",
            "scheduled",
            RecordWindow::new(at, at),
            RecordEffect::new("webhook", "orders", "https://partner.example", "k", "00", 2),
        );
        serde_json::to_string(&record).unwrap().replacen(
            "\"v\":1,",
            &format!("\"v\":{version},"),
            1,
        )
    }

    #[test]
    fn lines_read_as_the_journal_reader_reads_them() {
        let good = record_line(1);
        let padded = |length: usize| format!("{good}{}", " ".repeat(length - good.len()));
        let cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            format!("{good}\n{good}\n").into_bytes(),
            good.clone().into_bytes(),
            format!("{good}\r\n  {good}  \n\n   \n\r\n{good}").into_bytes(),
            format!(
                "{{\"v\":1,\n{good}\n{{\"v\":0}}\n[1]\n{}\n{}\n",
                record_line(0),
                record_line(2)
            )
            .into_bytes(),
            [good.as_bytes(), b"\n\xff\xfe{}\n", good.as_bytes()].concat(),
            // At the limit, one over it, far over it, and over it at the end of the input.
            format!("{}\n{good}\n", padded(MAX_LINE_BYTES)).into_bytes(),
            format!("{}\n{good}\n", padded(MAX_LINE_BYTES + 1)).into_bytes(),
            format!("{good}\n{}\n{good}\n", "x".repeat(3 * MAX_LINE_BYTES)).into_bytes(),
            format!("{good}\n{}", padded(MAX_LINE_BYTES + 1)).into_bytes(),
            format!("{good}\n{}", padded(MAX_LINE_BYTES)).into_bytes(),
        ];
        for bytes in cases {
            assert_alike(&bytes);
        }
    }

    proptest! {
        #[test]
        fn any_mix_of_lines_reads_alike(
            pieces in proptest::collection::vec(0..10usize, 0..12),
            newlines in proptest::collection::vec(any::<bool>(), 12),
            last_newline in any::<bool>(),
        ) {
            let good = record_line(1);
            let mut bytes = Vec::new();
            for (index, piece) in pieces.iter().enumerate() {
                let line: Vec<u8> = match piece {
                    0 | 1 => good.clone().into_bytes(),
                    2 => format!("  {good}\t").into_bytes(),
                    3 => Vec::new(),
                    4 => b" \t ".to_vec(),
                    5 => good.as_bytes()[..good.len() / 2].to_vec(),
                    6 => record_line(2).into_bytes(),
                    7 => record_line(0).into_bytes(),
                    8 => [&good.as_bytes()[..10], b"\xc3\x28", &good.as_bytes()[10..]].concat(),
                    _ => b"{\"v\":1,\"decision\":\"suppressed\"}".to_vec(),
                };
                bytes.extend_from_slice(&line);
                if index + 1 < pieces.len() || last_newline {
                    bytes.extend_from_slice(if newlines[index] { b"\r\n" } else { b"\n" });
                }
            }
            for buffer in [7, 8 * 1024] {
                prop_assert_eq!(lines(&bytes, buffer), journal_reader(&bytes, buffer));
            }
        }
    }
}
