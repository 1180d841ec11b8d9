use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{Journal, JournalEntry, JournalError};

const BUFFER_BYTES: usize = 64 * 1024;

/// A JSON Lines file journal, appended to, buffered in 64 KiB.
///
/// Many tasks may write at once: each record is serialised and written as one whole
/// line under a lock, so lines never interleave. A writer waits for the lock rather
/// than dropping a record. Buffered lines reach the file on [`Journal::flush`] and on
/// drop; a process that must not lose the tail calls `flush` before it exits.
#[derive(Debug)]
pub struct JsonlJournal {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    writer: BufWriter<File>,
    line: Vec<u8>,
}

impl JsonlJournal {
    /// Opens `path` for appending, creating it and its parent folders.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| JournalError::io(&shown, e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| JournalError::io(&shown, e))?;
        Ok(JsonlJournal {
            path,
            state: Mutex::new(State {
                writer: BufWriter::with_capacity(BUFFER_BYTES, file),
                line: Vec::with_capacity(512),
            }),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, source: std::io::Error) -> JournalError {
        JournalError::io(self.path.display().to_string(), source)
    }
}

impl Journal for JsonlJournal {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let State { writer, line } = &mut *state;
        line.clear();
        entry.write_json(line);
        line.push(b'\n');
        writer.write_all(line).map_err(|e| self.error(e))
    }

    fn flush(&self) -> Result<(), JournalError> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.writer.flush().map_err(|e| self.error(e))
    }
}

impl Drop for JsonlJournal {
    fn drop(&mut self) {
        if let Err(error) = Journal::flush(self) {
            tracing::error!(target: "replaysafe::journal", %error, "journal tail not flushed");
        }
    }
}
