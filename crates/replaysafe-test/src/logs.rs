//! Captured `tracing` output, for tests that check what a log line says (and that no
//! secret is in it).

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;

/// Everything a `tracing` subscriber wrote, at every level, without colours.
///
/// ```
/// let (logs, _guard) = replaysafe_test::logs::CapturedLogs::capture_thread();
/// tracing::info!(target: "replaysafe::suppressed", "would have sent email");
/// assert!(logs.text().contains("would have sent email"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Captures the current thread's events until the guard drops (use a current-thread runtime).
    pub fn capture_thread() -> (CapturedLogs, DefaultGuard) {
        let logs = CapturedLogs::default();
        let guard = tracing::subscriber::set_default(logs.subscriber());
        // Another test thread may have cached "no interest" for a callsite while no
        // subscriber of this thread existed yet: ask every callsite again.
        tracing::callsite::rebuild_interest_cache();
        (logs, guard)
    }

    /// Captures every thread's events for the rest of the process (work on blocking pools
    /// included). Only one test binary's test may do this: it fails if a global subscriber exists.
    pub fn capture_global() -> Result<CapturedLogs, tracing::subscriber::SetGlobalDefaultError> {
        let logs = CapturedLogs::default();
        tracing::subscriber::set_global_default(logs.subscriber())?;
        Ok(logs)
    }

    /// A subscriber writing every event here. With `tracing::subscriber::with_default`,
    /// call `tracing::callsite::rebuild_interest_cache()` inside the closure, as
    /// [`CapturedLogs::capture_thread`] does, so no callsite keeps a stale "no interest".
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(self.clone())
            .finish()
    }

    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
        .into_owned()
    }
}

impl Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLogs {
    type Writer = CapturedLogs;

    fn make_writer(&'a self) -> CapturedLogs {
        self.clone()
    }
}
