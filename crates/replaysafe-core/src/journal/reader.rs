use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::{JournalRecord, SCHEMA_VERSION};

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
    /// A line from a newer writer.
    #[error(
        "{path}:{line}: journal schema version {version} is newer than this reader (version {SCHEMA_VERSION}); upgrade replaysafe"
    )]
    UnsupportedVersion {
        /// The file.
        path: String,
        /// 1-based line number.
        line: u64,
        /// The version found.
        version: u64,
    },
}

/// Reads schema-1 records from JSON Lines, one at a time (memory stays flat).
///
/// Unknown fields are accepted; blank lines are skipped; a malformed line is an error
/// naming its line number, after which reading may continue.
#[derive(Debug)]
pub struct JournalReader<R> {
    input: R,
    name: String,
    line_number: u64,
    buffer: String,
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

impl<R: BufRead> JournalReader<R> {
    /// Reads from `input`; `name` is used in error messages.
    pub fn new(input: R, name: impl Into<String>) -> Self {
        JournalReader {
            input,
            name: name.into(),
            line_number: 0,
            buffer: String::new(),
        }
    }

    /// The number of the last line read.
    pub fn line_number(&self) -> u64 {
        self.line_number
    }

    fn parse(&self, text: &str) -> Result<JournalRecord, ReadError> {
        #[derive(serde::Deserialize)]
        struct Version {
            v: Option<u64>,
        }
        match serde_json::from_str::<JournalRecord>(text) {
            Ok(record) if u64::from(record.v) > u64::from(SCHEMA_VERSION) => {
                Err(ReadError::UnsupportedVersion {
                    path: self.name.clone(),
                    line: self.line_number,
                    version: u64::from(record.v),
                })
            }
            Ok(record) => Ok(record),
            Err(error) => match serde_json::from_str::<Version>(text) {
                Ok(Version { v: Some(version) }) if version > u64::from(SCHEMA_VERSION) => {
                    Err(ReadError::UnsupportedVersion {
                        path: self.name.clone(),
                        line: self.line_number,
                        version,
                    })
                }
                _ => Err(ReadError::Malformed {
                    path: self.name.clone(),
                    line: self.line_number,
                    problem: error.to_string(),
                }),
            },
        }
    }
}

impl<R: BufRead> Iterator for JournalReader<R> {
    type Item = Result<JournalRecord, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.buffer.clear();
            match self.input.read_line(&mut self.buffer) {
                Ok(0) => return None,
                Ok(_) => {
                    self.line_number += 1;
                    let text = self.buffer.trim();
                    if text.is_empty() {
                        continue;
                    }
                    return Some(self.parse(text));
                }
                Err(source) => {
                    return Some(Err(ReadError::Io {
                        path: self.name.clone(),
                        source,
                    }));
                }
            }
        }
    }
}
