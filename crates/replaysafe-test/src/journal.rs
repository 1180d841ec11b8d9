//! A JSON Lines journal in a temporary folder, read back by tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use replaysafe_core::journal::JournalReader;
use replaysafe_core::{Journal, JournalRecord, JsonlJournal};

/// A [`JsonlJournal`] in a fresh temporary folder, removed on drop.
///
/// ```
/// let file = replaysafe_test::TempJournal::new();
/// let guard = replaysafe_core::Guard::with_shared_journal(replaysafe_test::RecordingClient::new(), file.journal.clone());
/// # let _ = guard;
/// assert!(file.records().is_empty());
/// ```
#[derive(Debug)]
pub struct TempJournal {
    /// The journal, to share with guards.
    pub journal: Arc<JsonlJournal>,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Default for TempJournal {
    fn default() -> Self {
        Self::new()
    }
}

impl TempJournal {
    /// An empty journal in a new temporary folder.
    ///
    /// # Panics
    ///
    /// When the temporary folder or the file cannot be created.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("creating a temporary folder");
        let path = dir.path().join("journal.jsonl");
        let journal = Arc::new(JsonlJournal::open(&path).expect("opening the journal"));
        TempJournal {
            journal,
            path,
            _dir: dir,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's text, after a flush.
    pub fn text(&self) -> String {
        self.journal.flush().expect("flushing the journal");
        std::fs::read_to_string(&self.path).expect("reading the journal")
    }

    /// Every line, after a flush.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    /// Every record, read with the schema-1 reader, after a flush.
    pub fn records(&self) -> Vec<JournalRecord> {
        self.journal.flush().expect("flushing the journal");
        JournalReader::open(&self.path)
            .expect("opening the journal")
            .collect::<Result<_, _>>()
            .expect("every line is a record")
    }
}
