use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use chrono::{DateTime, Utc};

use super::ledger::{KeyIndex, slot_key};
use super::{Claim, Journal, JournalDecision, JournalEntry, JournalError, JournalFuture, Ledger};

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

/// When a [`JsonlJournal`] lets the record of one delivery in flight wait for the records
/// of others, to write them together (group commit). Only when records are written
/// depends on it, never whether or in what order: each delivery still goes on only once
/// its own record is written, so a delivery's `attempting` record reaches the operating
/// system before its request starts whatever the choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupCommit {
    /// While the Tokio runtime driving the sends is busy (the default): waiting saves
    /// system calls, that is CPU time, and costs each waiting delivery the time the others
    /// take to join, which pays only while the CPU is what limits the deliveries. When,
    /// over the last few milliseconds, the runtime's workers parked and were busy less
    /// than half of the time, each record is written at once. Outside a Tokio runtime
    /// records wait, as under [`Always`](GroupCommit::Always).
    #[default]
    WhenBusy,
    /// Whenever other deliveries are in flight: the fewest system calls, at the cost of
    /// each delivery's latency when the runtime has time to spare.
    Always,
    /// Never: each record is written at once, one `write` a record.
    Never,
}

/// Options for opening a [`JsonlJournal`]; see [`JsonlJournal::options`].
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonlOptions {
    durability: Durability,
    group_commit: GroupCommit,
}

impl JsonlOptions {
    /// Sets the durability (default [`Durability::OsWrite`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets when records of deliveries in flight wait to be written together (default
    /// [`GroupCommit::WhenBusy`]).
    pub fn group_commit(mut self, group_commit: GroupCommit) -> Self {
        self.group_commit = group_commit;
        self
    }

    /// Opens `path` for appending, creating it and its parent folders.
    ///
    /// A path that names something other than a regular file (`/dev/null`, `/dev/full`,
    /// a FIFO, a socket, a folder), directly or through a symbolic link, is refused before
    /// it is opened: a journal that keeps nothing is not a journal.
    /// [`JournalError::is_not_a_regular_file`] tells that case apart.
    pub fn open(self, path: impl AsRef<Path>) -> Result<JsonlJournal, JournalError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let error = |source| JournalError::opening(&shown, source);
        // Looked at before opening: opening a FIFO or a device may block or act on it.
        match std::fs::metadata(&path) {
            Ok(metadata) => refuse_unless_regular(metadata.file_type()).map_err(error)?,
            Err(missing) if missing.kind() == std::io::ErrorKind::NotFound => {}
            Err(other) => return Err(error(other)),
        }
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            std::fs::create_dir_all(parent).map_err(error)?;
        }
        let (file, readable) = open_for_appending(&path).map_err(error)?;
        if self.durability == Durability::Fsync {
            // The file's entry in its folder must survive a power loss too.
            file.sync_all().map_err(error)?;
            File::open(parent.unwrap_or(Path::new(".")))
                .and_then(|folder| folder.sync_all())
                .map_err(error)?;
        }
        let mut bytes = Vec::with_capacity(if self.durability == Durability::Buffered {
            BUFFER_BYTES + 1
        } else {
            1024
        });
        bytes.push(b'\n');
        Ok(JsonlJournal {
            path,
            durability: self.durability,
            state: Mutex::new(State {
                writer: Writer {
                    file,
                    readable,
                    end: None,
                },
                bytes,
                keys: None,
            }),
            group: Mutex::new(Group::default()),
            in_flight: AtomicUsize::new(0),
            group_commit: self.group_commit,
            pace: Pace::default(),
            process: AtomicU32::new(std::process::id()),
        })
    }
}

/// Opens `path` for appending, creating it, and says whether it could also be read.
///
/// Read access lets each write look at the file's last byte first; a journal the process
/// may only append to is still opened, and then every record starts with a newline, since
/// nothing tells whether the file ends in one. What was opened must be a regular file, in
/// case the path changed since it was looked at.
fn open_for_appending(path: &Path) -> std::io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    let (file, readable) = match options.clone().read(true).open(path) {
        Ok(file) => (file, true),
        Err(denied) if denied.kind() == std::io::ErrorKind::PermissionDenied => {
            (options.open(path)?, false)
        }
        Err(other) => return Err(other),
    };
    refuse_unless_regular(file.metadata()?.file_type())?;
    Ok((file, readable))
}

/// Why a journal path was refused: it names something that is not a regular file.
#[derive(Debug, thiserror::Error)]
#[error("it is {what}, not a regular file: a journal must be a file that keeps every record")]
pub(super) struct NotARegularFile {
    what: &'static str,
}

fn refuse_unless_regular(file_type: std::fs::FileType) -> std::io::Result<()> {
    if file_type.is_file() {
        return Ok(());
    }
    let what = if file_type.is_dir() {
        "a folder"
    } else {
        special_file(file_type)
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        NotARegularFile { what },
    ))
}

#[cfg(unix)]
fn special_file(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_file(_file_type: std::fs::FileType) -> &'static str {
    "a special file"
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
/// **Every record starts on a line of its own**, whatever the file ends with. A write
/// can be cut short (a full disk, a file-size limit, the process killed in the middle of
/// it) and leave part of a line with no newline at the end of the file, written by this
/// process or by any other. So before
/// each write the journal takes an exclusive advisory lock on the file (`flock`), looks
/// at how the file ends (its length; its last byte unless the length is what this
/// journal's own last write left), and starts the write with a newline when the last byte
/// is not one; the lock keeps another replaysafe writer from leaving a fragment between
/// the look and the write. The fragment stays in the file as a line of its own that readers name as
/// invalid, and the record after it reads whole. See `docs/adr/0011-fresh-lines.md`.
///
/// Only regular files are journals: [`JsonlJournal::open`] refuses `/dev/null`, devices,
/// FIFOs and sockets.
///
/// ```
/// use replaysafe_core::journal::{Durability, JsonlJournal};
/// # let dir = std::env::temp_dir().join(format!("replaysafe-doc-{}", std::process::id()));
/// let durable = JsonlJournal::open(dir.join("journal.jsonl"))?;
/// let power_safe = JsonlJournal::options().durability(Durability::Fsync).open(dir.join("audit.jsonl"))?;
/// assert_eq!(durable.durability(), Durability::OsWrite);
/// assert!(JsonlJournal::open("/dev/null").unwrap_err().is_not_a_regular_file());
/// # drop((durable, power_safe)); std::fs::remove_dir_all(dir).unwrap();
/// # Ok::<(), replaysafe_core::journal::JournalError>(())
/// ```
pub struct JsonlJournal {
    path: PathBuf,
    durability: Durability,
    state: Mutex<State>,
    /// Records of asynchronous senders waiting to be written together.
    group: Mutex<Group>,
    /// Deliveries of asynchronous senders between their `attempting` record and their
    /// outcome's: while there are others, a record waits for theirs (see [`Group`]).
    in_flight: AtomicUsize,
    /// When records wait for others.
    group_commit: GroupCommit,
    /// Whether the runtime has lately been busy enough for records to wait for others.
    pace: Pace,
    /// The process whose file this is: a child of `fork` opens the file again (see
    /// [`JsonlJournal::reopen_after_fork`]).
    process: AtomicU32,
}

struct State {
    writer: Writer,
    /// A newline, then the line being written, or the lines buffered under
    /// [`Durability::Buffered`]. The newline is written only when the file does not end
    /// with one.
    bytes: Vec<u8>,
    /// What the file's lines say of each key: read whole at the first delivery, then
    /// the lines written since, before each one (see [`Ledger`]).
    keys: Option<KeyIndex>,
}

/// The file, and what this journal knows of how it ends.
struct Writer {
    file: File,
    /// Whether the file could be opened for reading, to look at its last byte.
    readable: bool,
    /// The file's length after this journal's last write, when that write was whole and
    /// made under the lock: while the length is still that, the file ends with a newline.
    end: Option<u64>,
}

impl Writer {
    /// Appends `lines` (a newline, then whole lines) in one `write`, leaving out the
    /// first newline when the file ends with one.
    fn write_lines(&mut self, lines: &[u8]) -> std::io::Result<()> {
        // Without the lock the look and the write still run back to back; with it no
        // other replaysafe writer can leave a fragment in between, and the file's length
        // after the write is known.
        let locked = self.file.lock().is_ok();
        let length = self.length().ok();
        let written = self.write_held(lines, locked, length);
        if locked {
            let _ = self.file.unlock();
        }
        written
    }

    /// The file's length (a seek to its end: cheaper than asking for its metadata, and
    /// harmless, since appends go to the end whatever the offset and reads say where).
    fn length(&self) -> std::io::Result<u64> {
        use std::io::Seek;
        (&self.file).seek(std::io::SeekFrom::End(0))
    }

    /// [`Writer::write_lines`] with the lock already taken (`locked`) or not to be had,
    /// and the file's `length` looked at under it (`None`: it could not be).
    fn write_held(
        &mut self,
        lines: &[u8],
        locked: bool,
        length: Option<u64>,
    ) -> std::io::Result<()> {
        let fresh = match length {
            Some(0) => true,
            // The file is as this journal's last write left it: it ends with that newline.
            Some(length) if locked && Some(length) == self.end => true,
            Some(length) if self.readable => last_byte(&self.file, length - 1) == Some(b'\n'),
            _ => false,
        };
        let start = usize::from(fresh);
        let written = (&self.file).write_all(&lines[start..]);
        self.end = match (&written, length) {
            (Ok(()), Some(length)) if locked => Some(length + (lines.len() - start) as u64),
            _ => None,
        };
        written
    }

    /// Where the file's offset is: after an append, the end of what was written.
    fn position(&self) -> Option<u64> {
        use std::io::Seek;
        (&self.file).stream_position().ok()
    }

    /// Reads the file from `keys.offset` to `length`, its end, into `keys`, a piece at a
    /// time.
    fn read_keys(&self, keys: &mut KeyIndex, length: u64) -> std::io::Result<()> {
        const PIECE: usize = 4 << 20;
        if length == keys.offset {
            return Ok(());
        }
        if length < keys.offset {
            // The file was truncated or replaced: read it again from the start.
            *keys = KeyIndex::default();
        }
        // As large as what is unread, up to a piece: a look before each delivery usually
        // finds one line, and zeroing a whole piece for it would cost more than the rest.
        let unread = usize::try_from(length - keys.offset).map_or(PIECE, |n| n.min(PIECE));
        let mut piece = vec![0u8; unread];
        while keys.offset < length {
            let wanted = usize::try_from(length - keys.offset).map_or(PIECE, |n| n.min(PIECE));
            let read = read_at(&self.file, &mut piece[..wanted], keys.offset)?;
            if read == 0 {
                break;
            }
            let before = keys.offset;
            keys.read(&piece[..read]);
            if keys.offset == before {
                if read < PIECE {
                    // The rest is part of a line still being written: read it next time.
                    break;
                }
                // A line longer than a piece is not a record anyone wrote: skip it.
                keys.offset += read as u64;
            }
        }
        Ok(())
    }
}

#[cfg(unix)]
fn read_at(file: &File, buffer: &mut [u8], offset: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    file.read_at(buffer, offset)
}

#[cfg(not(unix))]
fn read_at(_file: &File, _buffer: &mut [u8], _offset: u64) -> std::io::Result<usize> {
    Ok(0)
}

#[cfg(unix)]
fn last_byte(file: &File, offset: u64) -> Option<u8> {
    use std::os::unix::fs::FileExt;
    let mut byte = [0];
    match file.read_at(&mut byte, offset) {
        Ok(1) => Some(byte[0]),
        _ => None,
    }
}

#[cfg(not(unix))]
fn last_byte(_file: &File, _offset: u64) -> Option<u8> {
    None
}

impl std::fmt::Debug for JsonlJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlJournal")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("group_commit", &self.group_commit)
            .finish_non_exhaustive()
    }
}

impl JsonlJournal {
    /// Opens `path` for appending with [`Durability::OsWrite`], creating it and its parent
    /// folders; a path that is not a regular file is refused (see [`JsonlOptions::open`]).
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

    /// When records of deliveries in flight wait to be written together.
    pub fn group_commit(&self) -> GroupCommit {
        self.group_commit
    }

    fn shown(&self) -> String {
        self.path.display().to_string()
    }
}

impl Journal for JsonlJournal {
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let State {
            writer,
            bytes,
            keys,
        } = &mut *state;
        if self.durability == Durability::Buffered {
            self.reopen_after_fork(std::process::id(), writer, bytes, keys)
                .map_err(|e| JournalError::writing_record(self.shown(), entry, e))?;
            let before = bytes.len();
            entry.write_json(bytes);
            bytes.push(b'\n');
            if bytes.len() <= BUFFER_BYTES {
                return Ok(());
            }
            // Write whole lines only: the new line goes first when it alone overflows.
            let result = if before > 1 {
                writer.write_lines(&bytes[..before])
            } else {
                Ok(())
            };
            let result = result.and_then(|()| {
                bytes.drain(1..before);
                if bytes.len() > BUFFER_BYTES {
                    let written = writer.write_lines(bytes);
                    bytes.truncate(1);
                    written
                } else {
                    Ok(())
                }
            });
            if result.is_err() {
                bytes.truncate(1);
            }
            return result.map_err(|e| JournalError::writing(self.shown(), e));
        }
        drop(state);
        self.write_now(Record::of(entry, None))
            .map(drop)
            .map_err(|failed| failed.into_error(self.shown(), entry))
    }

    fn append_grouped<'a>(&'a self, entry: &'a JournalEntry<'_>) -> JournalFuture<'a, ()> {
        if self.durability == Durability::Buffered && !entry.decision.is_about_a_delivery() {
            return Box::pin(std::future::ready(self.append(entry)));
        }
        Box::pin(async move {
            self.write_grouped(Record::of(entry, None))
                .await
                .map(drop)
                .map_err(|failed| failed.into_error(self.shown(), entry))
        })
    }

    fn ledger(&self) -> Option<&dyn Ledger> {
        Some(self)
    }

    fn flush(&self) -> Result<(), JournalError> {
        if self.durability != Durability::Buffered {
            return Ok(());
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let State {
            writer,
            bytes,
            keys,
        } = &mut *state;
        self.reopen_after_fork(std::process::id(), writer, bytes, keys)
            .map_err(|e| JournalError::writing(self.shown(), e))?;
        if bytes.len() <= 1 {
            return Ok(());
        }
        let written = writer.write_lines(bytes);
        bytes.truncate(1);
        written.map_err(|e| JournalError::writing(self.shown(), e))
    }
}

/// The file's own memory of keys: its lines, read once and then as they grow.
///
/// The look and the claim are one step under the file's exclusive lock: the lines other
/// processes appended since the last look are read, the key looked up, and the
/// `attempting` record written before the lock is let go, so of two processes racing on
/// a key the second finds the first's claim. The first look reads the whole file (about two
/// seconds per million records); later ones read only what other processes appended
/// since: this journal's own records go into its memory as they are written.
impl Ledger for JsonlJournal {
    fn begin(
        &self,
        attempting: &JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> Result<Claim, JournalError> {
        let claim = self
            .write_now(Record::of(attempting, Some(retry_in_doubt)))
            .map_err(|failed| failed.into_error(self.shown(), attempting))?;
        Ok(claim.expect("a claim's record answers with a claim"))
    }

    fn begin_grouped<'a>(
        &'a self,
        attempting: &'a JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> JournalFuture<'a, Claim> {
        Box::pin(async move {
            let claim = self
                .write_grouped(Record::of(attempting, Some(retry_in_doubt)))
                .await
                .map_err(|failed| failed.into_error(self.shown(), attempting))?;
            Ok(claim.expect("a claim's record answers with a claim"))
        })
    }
}

/// One record to write: its line, and what it tells the memory of keys.
struct Record {
    /// The line, without its newline.
    line: Vec<u8>,
    /// For a record about a delivery, what the memory of keys takes from it.
    remembers: Option<Remembers>,
    /// For a claim (an `attempting` record written only when the key may be attempted):
    /// whether a key in doubt may be.
    claim: Option<bool>,
}

/// What a record about a delivery tells the memory of keys.
struct Remembers {
    /// The key (and action) as the memory holds it.
    slot: [u8; 32],
    decision: JournalDecision,
    run_id: Box<str>,
    ts: DateTime<Utc>,
}

impl Record {
    fn of(entry: &JournalEntry<'_>, claim: Option<bool>) -> Self {
        let mut line = Vec::with_capacity(768);
        entry.write_json(&mut line);
        let remembers = entry.decision.is_about_a_delivery().then(|| Remembers {
            slot: slot_key(entry.idempotency_key, entry.action),
            decision: entry.decision,
            run_id: entry.run_id.into(),
            ts: entry.ts,
        });
        Record {
            line,
            remembers,
            claim,
        }
    }
}

/// Why a record was not written, kept so that each of the records written together can
/// be told with its own decision and key.
#[derive(Clone, Debug)]
struct Failed {
    /// Reading what the file knows of keys failed (only claims fail so).
    recalling: bool,
    kind: std::io::ErrorKind,
    message: String,
}

impl Failed {
    fn new(recalling: bool, error: &std::io::Error) -> Self {
        Failed {
            recalling,
            kind: error.kind(),
            message: error.to_string(),
        }
    }

    fn into_error(self, path: String, entry: &JournalEntry<'_>) -> JournalError {
        let source = std::io::Error::new(self.kind, self.message);
        if self.recalling {
            JournalError::recalling(path, entry.idempotency_key, source)
        } else {
            JournalError::writing_record(path, entry, source)
        }
    }
}

/// What the writing of one record came to: for a claim, what the file knew of the key
/// and whether the record was written.
type Written = Result<Option<Claim>, Failed>;

/// Group commit. An asynchronous sender's record ([`Journal::append_grouped`],
/// [`Ledger::begin_grouped`]) joins the records waiting; the first to join leads: while
/// other deliveries are in flight it lets them run (their outcomes and next claims join
/// meanwhile) until a round brings no new record, [`LEAD_ROUNDS`] at most, then writes
/// every record waiting in one `write` under one lock of the file, and tells each sender
/// what came of its own. Alone, or while the runtime idles between answers (see
/// [`Pace`] and [`GroupCommit`]), a record is written at once.
#[derive(Default)]
struct Group {
    waiting: Vec<(Record, Arc<Done>)>,
    /// Whether a sender has taken on writing what waits.
    led: bool,
    /// The process the records are of (0 before the first).
    process: u32,
}

/// How many times at most a leader lets the other deliveries run before it writes: it
/// writes as soon as a round brings no new record.
const LEAD_ROUNDS: usize = 8;

/// How [`GroupCommit::WhenBusy`] tells a busy runtime: from its workers' busy time and
/// parks, summed ([`RuntimeLoad`]), looked at once a [`PACE_WINDOW`] at most. The runtime
/// idled when, since the last look, its workers parked and were busy less than
/// [`SATURATED`] of the time; with no runtime, or before a first look, it counts as busy.
#[derive(Default)]
struct Pace(Mutex<Option<PaceSample>>);

#[derive(Clone, Copy)]
struct PaceSample {
    at: std::time::Instant,
    /// The runtime's workers' busy time and parks, summed, at `at`.
    busy: std::time::Duration,
    parks: u64,
    saturated: bool,
}

/// How long one look at the runtime stands.
const PACE_WINDOW: std::time::Duration = std::time::Duration::from_millis(2);
/// The share of a window its workers must have been busy for records to wait.
const SATURATED: f64 = 0.5;

impl Pace {
    fn saturated(&self) -> bool {
        let now = std::time::Instant::now();
        let mut sample = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(last) = *sample
            && now.duration_since(last.at) < PACE_WINDOW
        {
            return last.saturated;
        }
        let Some(RuntimeLoad {
            workers,
            busy,
            parks,
        }) = RuntimeLoad::now()
        else {
            return true;
        };
        let saturated = sample.is_none_or(|last| {
            let window = now.duration_since(last.at).as_secs_f64() * workers.max(1) as f64;
            let idled = parks > last.parks
                && busy.saturating_sub(last.busy).as_secs_f64() < SATURATED * window;
            !idled
        });
        *sample = Some(PaceSample {
            at: now,
            busy,
            parks,
            saturated,
        });
        saturated
    }
}

/// What the Tokio runtime driving the caller tells of its workers: their number, busy
/// time and parks, summed. None outside a runtime, or where the target has no 64-bit
/// atomics (Tokio keeps these figures only there).
struct RuntimeLoad {
    workers: usize,
    busy: std::time::Duration,
    parks: u64,
}

impl RuntimeLoad {
    #[cfg(target_has_atomic = "64")]
    fn now() -> Option<RuntimeLoad> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let metrics = runtime.metrics();
        let workers = metrics.num_workers();
        Some(RuntimeLoad {
            workers,
            busy: (0..workers)
                .map(|worker| metrics.worker_total_busy_duration(worker))
                .sum(),
            parks: (0..workers)
                .map(|worker| metrics.worker_park_count(worker))
                .sum(),
        })
    }

    #[cfg(not(target_has_atomic = "64"))]
    fn now() -> Option<RuntimeLoad> {
        None
    }
}

/// Where the leader puts what came of one sender's record, and wakes it.
#[derive(Default)]
struct Done(Mutex<(Option<Written>, Option<Waker>)>);

impl Done {
    fn finish(&self, written: Written) {
        let waker = {
            let mut slot = self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            slot.0 = Some(written);
            slot.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    async fn wait(&self) -> Written {
        std::future::poll_fn(|cx| {
            let mut slot = self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match slot.0.take() {
                Some(written) => Poll::Ready(written),
                None => {
                    slot.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

/// Writes what waits when the leader is done waiting, or is dropped before (a cancelled
/// send): no record that joined is left behind.
struct Lead<'a>(&'a JsonlJournal);

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        self.0.write_waiting_with(None);
    }
}

impl JsonlJournal {
    /// Counts deliveries in flight: one more after a written `attempting` record, one
    /// fewer after an outcome. Whether others were in flight when `record` came.
    fn others_in_flight(&self, record: &Record) -> bool {
        match record.remembers.as_ref().map(|r| r.decision) {
            Some(JournalDecision::Delivered | JournalDecision::Failed) => {
                let before = self
                    .in_flight
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        Some(n.saturating_sub(1))
                    })
                    .unwrap_or(0);
                before > 1
            }
            _ => self.in_flight.load(Ordering::Relaxed) > 0,
        }
    }

    /// Writes `record` with whatever other senders' records wait, now.
    fn write_now(&self, record: Record) -> Written {
        self.write_waiting_with(Some(record))
            .expect("a record of its own is answered")
    }

    /// Writes the records waiting, after `own` when there is one, and tells their
    /// senders; what came of `own`.
    fn write_waiting_with(&self, own: Option<Record>) -> Option<Written> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let process = std::process::id();
        let waiting = self.take_waiting(process);
        if own.is_none() && waiting.is_empty() {
            return None;
        }
        let mut written = self.write_records(
            &mut state,
            process,
            own.iter().chain(waiting.iter().map(|(record, _)| record)),
        );
        drop(state);
        let own = own.map(|_| written.remove(0));
        for ((_, done), written) in waiting.into_iter().zip(written) {
            done.finish(written);
        }
        own
    }

    /// Joins `record` to the records waiting, leads when first, and waits for its
    /// outcome.
    async fn write_grouped(&self, record: Record) -> Written {
        let others = self.others_in_flight(&record);
        let attempting = matches!(
            &record.remembers,
            Some(Remembers {
                decision: JournalDecision::Attempting,
                ..
            })
        );
        let done = Arc::new(Done::default());
        let leads = {
            let mut group = self.group(std::process::id());
            group.waiting.push((record, done.clone()));
            !std::mem::replace(&mut group.led, true)
        };
        if leads {
            let lead = Lead(self);
            let wait = others
                && match self.group_commit {
                    GroupCommit::WhenBusy => self.pace.saturated(),
                    GroupCommit::Always => true,
                    GroupCommit::Never => false,
                };
            if wait {
                // Let the others run while records keep joining.
                let mut joined = self.waiting();
                for _ in 0..LEAD_ROUNDS {
                    tokio::task::yield_now().await;
                    // No new record, or another writer took them: write what waits.
                    let now = self.waiting();
                    if now <= joined {
                        break;
                    }
                    joined = now;
                }
            }
            drop(lead);
        }
        let written = done.wait().await;
        if attempting && matches!(&written, Ok(None) | Ok(Some(Claim { claimed: true, .. }))) {
            self.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        written
    }

    /// The records waiting, in process `process` (this one's id, looked up once by the
    /// caller). In a child of `fork`, those the parent's senders left
    /// waiting, and its count of deliveries in flight, are forgotten first: they are the
    /// parent's to write and finish.
    fn group(&self, process: u32) -> std::sync::MutexGuard<'_, Group> {
        let mut group = self
            .group
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if group.process != process {
            if group.process != 0 {
                group.waiting.clear();
                group.led = false;
                self.in_flight.store(0, Ordering::Relaxed);
            }
            group.process = process;
        }
        group
    }

    /// In a child of `fork`, opens the file again before writing: a descriptor inherited
    /// across `fork` shares its open file, and with it the `flock`, with the parent and
    /// every other child, so the lock would no longer keep their claims apart. The
    /// parent's buffered records are the parent's to write; the key index is read again.
    /// When the file cannot be opened nothing is written (the error says why).
    fn reopen_after_fork(
        &self,
        process: u32,
        writer: &mut Writer,
        bytes: &mut Vec<u8>,
        keys: &mut Option<KeyIndex>,
    ) -> std::io::Result<()> {
        if self.process.load(Ordering::Relaxed) == process {
            return Ok(());
        }
        let (file, readable) = open_for_appending(&self.path)?;
        *writer = Writer {
            file,
            readable,
            end: None,
        };
        bytes.truncate(1);
        *keys = None;
        self.process.store(process, Ordering::Relaxed);
        Ok(())
    }

    /// How many records wait to be written.
    fn waiting(&self) -> usize {
        self.group
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .waiting
            .len()
    }

    fn take_waiting(&self, process: u32) -> Vec<(Record, Arc<Done>)> {
        let mut group = self.group(process);
        group.led = false;
        std::mem::take(&mut group.waiting)
    }

    /// Writes `records`, in order, in one `write` under the file's lock. A claim is
    /// looked up in the memory of keys first (with what other processes appended since
    /// the last look) and written only when its key may be attempted; the claims and
    /// outcomes written go into the memory as they are, so a later look need not read
    /// them back.
    fn write_records<'r>(
        &self,
        state: &mut State,
        process: u32,
        records: impl Iterator<Item = &'r Record>,
    ) -> Vec<Written> {
        let State {
            writer,
            bytes,
            keys,
        } = state;
        let records: Vec<&Record> = records.collect();
        if let Err(error) = self.reopen_after_fork(process, writer, bytes, keys) {
            let failed = Failed::new(false, &error);
            return records.iter().map(|_| Err(failed.clone())).collect();
        }
        let locked = writer.file.lock().is_ok();
        // Records buffered earlier go first, in order; when they cannot be written they
        // stay buffered, and nothing after them is written.
        if self.durability == Durability::Buffered && bytes.len() > 1 {
            let length = writer.length().ok();
            if let Err(error) = writer.write_held(bytes, locked, length) {
                if locked {
                    let _ = writer.file.unlock();
                }
                let failed = Failed::new(false, &error);
                return records.iter().map(|_| Err(failed.clone())).collect();
            }
            bytes.truncate(1);
        }
        let length = writer.length();
        let claims = records.iter().any(|record| record.claim.is_some());
        // What the file knows of keys, up to its end; `None` when it cannot be told.
        let mut recalled = Ok(());
        if let Ok(length) = length
            && (claims || keys.is_some())
            && writer.readable
        {
            let index = keys.get_or_insert_with(KeyIndex::default);
            if let Err(error) = writer.read_keys(index, length) {
                recalled = Err(Failed::new(true, &error));
                *keys = None;
            }
        }
        if let Err(error) = &length {
            recalled = Err(Failed::new(true, error));
            *keys = None;
        }
        let start = keys.as_ref().map(|index| index.offset);
        let mut written = Vec::with_capacity(records.len());
        // Which of `written` are for lines in this write.
        let mut included = Vec::with_capacity(records.len());
        bytes.truncate(1);
        for record in &records {
            included.push(false);
            let claim = match (record.claim, &recalled, keys.as_mut()) {
                (None, _, _) => None,
                (Some(retry_in_doubt), Ok(()), Some(index)) => {
                    let slot = &record
                        .remembers
                        .as_ref()
                        .expect("a claim is about a delivery")
                        .slot;
                    let memory = index.memory_at(slot);
                    let claimed = memory.may_attempt(retry_in_doubt);
                    Some(Claim { memory, claimed })
                }
                (Some(_), Err(failed), _) => {
                    written.push(Err(failed.clone()));
                    continue;
                }
                (Some(_), Ok(()), None) => {
                    written.push(Err(Failed {
                        recalling: true,
                        kind: std::io::ErrorKind::PermissionDenied,
                        message: "the journal can be appended to but not read, so what it knows \
                                  of the key cannot be told: make it readable, or turn the ledger \
                                  off for this client"
                            .into(),
                    }));
                    continue;
                }
            };
            if claim.as_ref().is_none_or(|claim| claim.claimed) {
                *included.last_mut().expect("pushed above") = true;
                bytes.extend_from_slice(&record.line);
                bytes.push(b'\n');
                if let (Some(index), Some(remembers)) = (keys.as_mut(), &record.remembers) {
                    index.apply_at(
                        remembers.slot,
                        remembers.decision,
                        &remembers.run_id,
                        remembers.ts,
                    );
                }
            }
            written.push(Ok(claim));
        }
        if bytes.len() > 1 {
            let mut outcome = writer.write_held(bytes, locked, length.as_ref().ok().copied());
            if outcome.is_ok() && self.durability == Durability::Fsync {
                outcome = writer.file.sync_data();
            }
            match outcome {
                Ok(()) => {
                    // The lines went into the memory as they were taken; the memory is
                    // the file's up to the end of the write when the write began where
                    // the memory ended and nothing else came in between.
                    if let (Some(index), Some(start), Ok(length), Some(end)) =
                        (keys.as_mut(), start, &length, writer.end)
                        && start == *length
                        && writer.position() == Some(end)
                    {
                        index.offset = end;
                    }
                }
                Err(error) => {
                    let failed = Failed::new(false, &error);
                    for (written, _) in written.iter_mut().zip(&included).filter(|(_, i)| **i) {
                        *written = Err(failed.clone());
                    }
                    // Which of the lines reached the file is told by reading it again.
                    *keys = None;
                }
            }
        }
        bytes.truncate(1);
        if locked {
            let _ = writer.file.unlock();
        }
        written
    }
}

impl Drop for JsonlJournal {
    fn drop(&mut self) {
        if let Err(error) = Journal::flush(self) {
            tracing::error!(target: "replaysafe::journal", %error, "journal tail not flushed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{JournalRecord, RecordEffect, RecordWindow};

    fn record(decision: JournalDecision) -> JournalRecord {
        let now = chrono::DateTime::from_timestamp(1_780_000_000, 0).unwrap();
        JournalRecord::new(
            now,
            decision,
            "p",
            "r",
            "scheduled",
            RecordWindow::new(now - chrono::TimeDelta::hours(1), now),
            RecordEffect::new("email", "m", "t", "ab".repeat(32), "00", 1),
        )
        .with_attempt(1)
    }

    /// A journal the process may append to but not read (root reads any file, so the
    /// state is set here rather than by the file's mode).
    #[test]
    fn a_journal_that_cannot_be_read_claims_nothing_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let journal = JsonlJournal::open(&path).unwrap();
        journal.state.lock().unwrap().writer.readable = false;
        let attempting = record(JournalDecision::Attempting);
        let error = journal.begin(&attempting.entry(), false).unwrap_err();
        let text = crate::error_chain(&error);
        assert!(text.contains("appended to but not read"), "{text}");
        assert!(
            text.contains(&"ab".repeat(32)),
            "the error names the key: {text}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"", "nothing was written");
        // Records that claim nothing are still appended.
        journal
            .append(&record(JournalDecision::Delivered).entry())
            .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    }
}
