use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::{JournalRecord, SCHEMA_VERSION};

/// The longest line [`JournalReader`] reads: 1 MiB. A longer line is an error naming it
/// ([`ReadError::LineTooLong`]); the reader skips its bytes without holding them.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// A journal line that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("reading journal {path}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a valid schema-1 record.
    #[error("{path}:{line}: malformed journal record: {problem}")]
    Malformed {
        /// The file.
        path: String,
        /// 1-based line number.
        line: u64,
        /// What serde said.
        problem: String,
    },
    /// A line is not UTF-8.
    #[error("{path}:{line}: journal line is not valid UTF-8")]
    InvalidUtf8 {
        /// The file.
        path: String,
        /// 1-based line number.
        line: u64,
    },
    /// A line is longer than [`MAX_LINE_BYTES`].
    #[error("{path}:{line}: journal line is longer than {limit} bytes")]
    LineTooLong {
        /// The file.
        path: String,
        /// 1-based line number.
        line: u64,
        /// The limit, [`MAX_LINE_BYTES`].
        limit: usize,
    },
    /// A line of a schema version this reader does not read: a newer one, or `0`.
    #[error("{path}:{line}: journal schema version {version} {}", version_advice(*.version))]
    UnsupportedVersion {
        /// The file.
        path: String,
        /// 1-based line number.
        line: u64,
        /// The version found.
        version: u64,
    },
}

fn version_advice(version: u64) -> String {
    if version > u64::from(SCHEMA_VERSION) {
        format!("is newer than this reader (version {SCHEMA_VERSION}); upgrade replaysafe")
    } else {
        format!("is not a version this reader knows (it reads version {SCHEMA_VERSION})")
    }
}

/// serde's message with every control character shown as an escape: serde quotes the
/// offending text, and a journal must not be able to drive the terminal that reads an error.
fn visible(message: &str) -> String {
    message
        .chars()
        .map(|c| {
            if c.is_control() {
                format!("\\u{{{:x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Reads schema-1 records from JSON Lines, one at a time (memory stays flat).
///
/// Unknown fields are accepted; blank lines are skipped. A line that is malformed, not
/// UTF-8, longer than [`MAX_LINE_BYTES`] or of another schema version is an error naming
/// its line number, after which reading may continue with the next line.
#[derive(Debug)]
pub struct JournalReader<R> {
    input: R,
    name: String,
    line_number: u64,
    buffer: Vec<u8>,
    /// Whether the last line was longer than the limit (and so is not in `buffer`).
    too_long: bool,
    /// Bytes of the input read so far.
    consumed: u64,
    /// Where the last line read begins in the input.
    line_start: u64,
}

impl JournalReader<BufReader<File>> {
    /// Opens a journal file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ReadError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| ReadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(JournalReader::new(
            BufReader::with_capacity(256 * 1024, file),
            path.display().to_string(),
        ))
    }
}

/// What [`JournalReader::read_line`] found.
enum Line {
    /// The end of the input.
    End,
    /// A line, in the buffer, without its newline.
    Complete,
    /// A line longer than the limit; its bytes were skipped.
    TooLong,
}

impl<R: BufRead> JournalReader<R> {
    /// Reads from `input`; `name` is used in error messages.
    pub fn new(input: R, name: impl Into<String>) -> Self {
        JournalReader {
            input,
            name: name.into(),
            line_number: 0,
            buffer: Vec::new(),
            too_long: false,
            consumed: 0,
            line_start: 0,
        }
    }

    /// The number of the last line read.
    pub fn line_number(&self) -> u64 {
        self.line_number
    }

    /// Where the last line read begins: its offset in bytes from the start of the input.
    /// A reader that keeps only offsets can read a line again from a file (`pread`).
    pub fn line_offset(&self) -> u64 {
        self.line_start
    }

    /// The bytes of the last line read, without its newline; `None` before the first
    /// line and after a line longer than [`MAX_LINE_BYTES`], whose bytes are not kept.
    ///
    /// After an error about a line, this is the line: [`provably_not_attempting`] tells
    /// whether it could be an `attempting` record cut short.
    pub fn last_line(&self) -> Option<&[u8]> {
        (self.line_number > 0 && !self.too_long).then_some(self.buffer.as_slice())
    }

    /// Reads the next line into the buffer, holding at most [`MAX_LINE_BYTES`] of it.
    fn read_line(&mut self) -> std::io::Result<Line> {
        self.buffer.clear();
        self.line_start = self.consumed;
        let mut seen = false;
        let mut too_long = false;
        loop {
            let available = match self.input.fill_buf() {
                Ok(bytes) => bytes,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if available.is_empty() {
                break;
            }
            seen = true;
            let (take, ends) = match available.iter().position(|&b| b == b'\n') {
                Some(index) => (index + 1, true),
                None => (available.len(), false),
            };
            let content = &available[..if ends { take - 1 } else { take }];
            if !too_long {
                if self.buffer.len() + content.len() > MAX_LINE_BYTES {
                    too_long = true;
                    self.buffer = Vec::new();
                } else {
                    self.buffer.extend_from_slice(content);
                }
            }
            self.input.consume(take);
            self.consumed += take as u64;
            if ends {
                break;
            }
        }
        self.too_long = too_long;
        Ok(match (seen, too_long) {
            (false, _) => Line::End,
            (true, true) => Line::TooLong,
            (true, false) => Line::Complete,
        })
    }

    fn parse(&self, text: &str) -> Result<JournalRecord, ReadError> {
        #[derive(serde::Deserialize)]
        struct Version {
            v: Option<u64>,
        }
        let unsupported = |version: u64| ReadError::UnsupportedVersion {
            path: self.name.clone(),
            line: self.line_number,
            version,
        };
        match serde_json::from_str::<JournalRecord>(text) {
            Ok(record) if record.v != SCHEMA_VERSION => Err(unsupported(u64::from(record.v))),
            Ok(record) => Ok(record),
            Err(error) => match serde_json::from_str::<Version>(text) {
                Ok(Version { v: Some(version) }) if version != u64::from(SCHEMA_VERSION) => {
                    Err(unsupported(version))
                }
                _ => Err(ReadError::Malformed {
                    path: self.name.clone(),
                    line: self.line_number,
                    problem: visible(&error.to_string()),
                }),
            },
        }
    }
}

impl<R: BufRead> Iterator for JournalReader<R> {
    type Item = Result<JournalRecord, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let line = match self.read_line() {
                Ok(line) => line,
                Err(source) => {
                    return Some(Err(ReadError::Io {
                        path: self.name.clone(),
                        source,
                    }));
                }
            };
            match line {
                Line::End => return None,
                Line::TooLong => {
                    self.line_number += 1;
                    return Some(Err(ReadError::LineTooLong {
                        path: self.name.clone(),
                        line: self.line_number,
                        limit: MAX_LINE_BYTES,
                    }));
                }
                Line::Complete => {
                    self.line_number += 1;
                    let Ok(text) = std::str::from_utf8(&self.buffer) else {
                        return Some(Err(ReadError::InvalidUtf8 {
                            path: self.name.clone(),
                            line: self.line_number,
                        }));
                    };
                    let text = text.trim();
                    if text.is_empty() {
                        continue;
                    }
                    return Some(self.parse(text));
                }
            }
        }
    }
}

/// Whether a journal line that is not a valid record is provably **not** an `attempting`
/// record, so that a reader skipping it cannot be hiding a delivery in doubt.
///
/// Only one kind of line proves it: the whole line is one JSON object (nothing before
/// or after it), and it has a top-level `decision` field whose value is a string other
/// than `attempting` (escapes decoded; when the field appears more than once, every
/// occurrence must be such a string). Such a line is whole, so it is no record cut short,
/// and whatever made it invalid (a missing field, a malformed time), it says it is not
/// an attempt.
///
/// Everything else may be an `attempting` record damaged: part of a line cut short by a
/// full disk or a file-size limit (a prefix of a record never parses), text that is not
/// JSON, bytes that are not UTF-8, several records run together on one line, an object
/// with no `decision`, or with one that is not a string. A line that merely *contains*
/// `"decision":"suppressed"` proves nothing: an `attempting` record cut short and a whole
/// record appended to it by an older writer make such a line.
pub fn provably_not_attempting(line: &[u8]) -> bool {
    struct Decisions;

    impl<'de> serde::de::Visitor<'de> for Decisions {
        type Value = bool;

        fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("a journal record")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut other_decision = false;
            let mut maybe_attempting = false;
            while let Some(field) = map.next_key::<String>()? {
                if field != "decision" {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
                match map.next_value::<serde_json::Value>()? {
                    serde_json::Value::String(decision) if decision != "attempting" => {
                        other_decision = true;
                    }
                    _ => maybe_attempting = true,
                }
            }
            Ok(other_decision && !maybe_attempting)
        }
    }

    let mut deserializer = serde_json::Deserializer::from_slice(line);
    let verdict = serde::Deserializer::deserialize_map(&mut deserializer, Decisions);
    matches!(verdict, Ok(true)) && deserializer.end().is_ok()
}
