use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{Journal, JournalEntry, JournalError};

/// Bytes [`Durability::Buffered`] collects before it writes them.
const BUFFER_BYTES: usize = 64 * 1024;

/// When a [`JsonlJournal`]'s records are safe, and from what.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Durability {
    /// Each record is handed to the operating system with one `write` of the whole line
    /// before `append` returns (the default). Killing the process, even with `SIGKILL`,
    /// loses nothing `append` returned for; a power loss or a kernel crash may lose the
    /// records the kernel had not yet written to disk.
    #[default]
    OsWrite,
    /// As [`OsWrite`](Durability::OsWrite), and each record is also `fsync`ed
    /// (`fdatasync`) before `append` returns, as is the folder when the file is opened:
    /// what `append` returned for survives a power loss. Each record costs a disk flush.
    Fsync,
    /// Records collect in a 64 KiB buffer in the process and are written, whole lines
    /// only, when it fills, on [`Journal::flush`] and on drop. For bulk journaling of
    /// suppressed effects only: [`Guard`](crate::Guard) flushes after every `attempting`,
    /// `delivered` and `failed` record, so records about deliveries still reach the
    /// operating system before a delivery starts and before `send` returns, but up to
    /// 64 KiB of `suppressed` records written since the last flush are lost if the
    /// process is killed or exits without dropping the journal.
    Buffered,
}

/// Options for opening a [`JsonlJournal`]; see [`JsonlJournal::options`].
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonlOptions {
    durability: Durability,
}

impl JsonlOptions {
    /// Sets the durability (default [`Durability::OsWrite`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Opens `path` for appending, creating it and its parent folders.
    pub fn open(self, path: impl AsRef<Path>) -> Result<JsonlJournal, JournalError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let error = |source| JournalError::io(&shown, source);
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            std::fs::create_dir_all(parent).map_err(error)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(error)?;
        if self.durability == Durability::Fsync {
            // The file's entry in its folder must survive a power loss too.
            file.sync_all().map_err(error)?;
            File::open(parent.unwrap_or(Path::new(".")))
                .and_then(|folder| folder.sync_all())
                .map_err(error)?;
        }
        Ok(JsonlJournal {
            path,
            durability: self.durability,
            state: Mutex::new(State {
                file,
                bytes: Vec::with_capacity(if self.durability == Durability::Buffered {
                    BUFFER_BYTES
                } else {
                    1024
                }),
            }),
        })
    }
}

/// A JSON Lines file journal, opened for appending (`O_APPEND`).
///
/// By default ([`Durability::OsWrite`]) every record is one `write` of one whole line,
/// with no buffer in the process, done before [`Journal::append`] returns: a process
/// killed at any moment loses no record it was told was written. [`Durability::Fsync`]
/// adds an `fsync` per record for power loss; [`Durability::Buffered`] trades the
/// suppressed records of the last 64 KiB for speed in bulk dry runs.
///
/// Many tasks and many processes may append to one file at once: a line is written by
/// one `write` call on a file opened with `O_APPEND`, so the kernel appends each line
/// whole, and lines never interleave. A writer in this process waits for the others
/// (backpressure) rather than drop a record.
///
/// ```
/// use replaysafe_core::journal::{Durability, JsonlJournal};
/// # let dir = std::env::temp_dir().join(format!("replaysafe-doc-{}", std::process::id()));
/// let durable = JsonlJournal::open(dir.join("journal.jsonl"))?;
/// let power_safe = JsonlJournal::options().durability(Durability::Fsync).open(dir.join("audit.jsonl"))?;
/// assert_eq!(durable.durability(), Durability::OsWrite);
/// # drop((durable, power_safe)); std::fs::remove_dir_all(dir).unwrap();
/// # Ok::<(), replaysafe_core::journal::JournalError>(())
/// ```
pub struct JsonlJournal {
    path: PathBuf,
    durability: Durability,
    state: Mutex<State>,
}

struct State {
    file: File,
    /// The line being written, or the buffered lines under [`Durability::Buffered`].
    bytes: Vec<u8>,
}

impl std::fmt::Debug for JsonlJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlJournal")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl JsonlJournal {
    /// Opens `path` for appending with [`Durability::OsWrite`], creating it and its parent folders.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        JsonlOptions::default().open(path)
    }

    /// Options: `JsonlJournal::options().durability(Durability::Fsync).open(path)`.
    pub fn options() -> JsonlOptions {
        JsonlOptions::default()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The durability it was opened with.
    pub fn durability(&self) -> Durability {
        self.durability
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
        let State { file, bytes } = &mut *state;
        if self.durability == Durability::Buffered {
            let before = bytes.len();
            entry.write_json(bytes);
            bytes.push(b'\n');
            if bytes.len() < BUFFER_BYTES {
                return Ok(());
            }
            // Write whole lines only: the new line goes first when it alone overflows.
            let result = if before > 0 {
                file.write_all(&bytes[..before])
            } else {
                Ok(())
            };
            let result = result.and_then(|()| {
                bytes.drain(..before);
                if bytes.len() >= BUFFER_BYTES {
                    let written = file.write_all(bytes);
                    bytes.clear();
                    written
                } else {
                    Ok(())
                }
            });
            if result.is_err() {
                bytes.clear();
            }
            return result.map_err(|e| self.error(e));
        }
        bytes.clear();
        entry.write_json(bytes);
        bytes.push(b'\n');
        // One write of the whole line: O_APPEND makes the kernel place it at the end, whole.
        file.write_all(bytes).map_err(|e| self.error(e))?;
        if self.durability == Durability::Fsync {
            file.sync_data().map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), JournalError> {
        if self.durability != Durability::Buffered {
            return Ok(());
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let State { file, bytes } = &mut *state;
        if bytes.is_empty() {
            return Ok(());
        }
        let written = file.write_all(bytes);
        bytes.clear();
        written.map_err(|e| self.error(e))
    }
}

impl Drop for JsonlJournal {
    fn drop(&mut self) {
        if let Err(error) = Journal::flush(self) {
            tracing::error!(target: "replaysafe::journal", %error, "journal tail not flushed");
        }
    }
}
