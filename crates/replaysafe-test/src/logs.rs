//! Captured `tracing` output, for tests that check what a log line says (and that no
//! secret is in it).
//!
//! Every capture goes through one process-wide subscriber that is interested in every
//! event and routes each formatted line to the captures of the thread that wrote it (and
//! to a process-wide capture, if a test asked for one). A thread-scoped subscriber would
//! race with tests on other threads: a callsite first reached where no subscriber was
//! set caches "no interest", and a later capture would miss its lines.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// Everything written at every level while a capture is active, without colours.
///
/// ```
/// let (logs, _capture) = replaysafe_test::logs::CapturedLogs::capture_thread();
/// tracing::info!(target: "replaysafe::suppressed", "would have sent email");
/// assert!(logs.text().contains("would have sent email"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

/// While alive, the current thread's events are captured; dropping it stops the capture.
#[derive(Debug)]
#[must_use = "the capture stops when this is dropped"]
pub struct ThreadCapture {
    logs: CapturedLogs,
}

thread_local! {
    static THREAD_CAPTURES: RefCell<Vec<CapturedLogs>> = const { RefCell::new(Vec::new()) };
}

static EVERY_THREAD: Mutex<Option<CapturedLogs>> = Mutex::new(None);

/// Why the process-wide subscriber could not be installed, if it could not.
static ROUTER: OnceLock<Result<(), String>> = OnceLock::new();

fn install_router() -> Result<(), String> {
    ROUTER
        .get_or_init(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(|| Router)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .map_err(|error| format!("another global tracing subscriber exists: {error}"))?;
            tracing::callsite::rebuild_interest_cache();
            Ok(())
        })
        .clone()
}

impl CapturedLogs {
    /// Captures the current thread's events until the returned guard drops (use a
    /// current-thread runtime, or [`CapturedLogs::capture_global`] for work on other threads).
    ///
    /// # Panics
    /// If the test binary installed a global subscriber of its own.
    pub fn capture_thread() -> (CapturedLogs, ThreadCapture) {
        if let Err(why) = install_router() {
            panic!("cannot capture logs: {why}");
        }
        let logs = CapturedLogs::default();
        THREAD_CAPTURES.with(|captures| captures.borrow_mut().push(logs.clone()));
        (logs.clone(), ThreadCapture { logs })
    }

    /// Captures every thread's events for the rest of the process (work on blocking pools
    /// included). Only one test of a test binary may do this.
    ///
    /// # Errors
    /// When another test already captures every thread, or the binary installed a global
    /// subscriber of its own.
    pub fn capture_global() -> Result<CapturedLogs, String> {
        install_router()?;
        let mut every = EVERY_THREAD
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if every.is_some() {
            return Err("another test already captures every thread's logs".into());
        }
        let logs = CapturedLogs::default();
        *every = Some(logs.clone());
        Ok(logs)
    }

    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn append(&self, bytes: &[u8]) {
        self.bytes().extend_from_slice(bytes);
    }
}

impl Drop for ThreadCapture {
    fn drop(&mut self) {
        THREAD_CAPTURES.with(|captures| {
            captures
                .borrow_mut()
                .retain(|logs| !Arc::ptr_eq(&logs.0, &self.logs.0));
        });
    }
}

/// The writer of the process-wide subscriber: one formatted event per `write` call, sent
/// to the writing thread's captures and the process-wide one.
struct Router;

impl Write for Router {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        // A thread being torn down has no captures left to write to.
        let _ = THREAD_CAPTURES.try_with(|captures| {
            for logs in captures.borrow().iter() {
                logs.append(bytes);
            }
        });
        if let Some(logs) = EVERY_THREAD
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
        {
            logs.append(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
