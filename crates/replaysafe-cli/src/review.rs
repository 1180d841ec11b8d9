//! `report` and `diff` flags mapped onto the review library's types, and the progress
//! bar they draw while reading journals.

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use replaysafe_review::report;

/// What to break the report down by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Breakdown {
    /// Effect kind.
    Kind,
    /// Message type.
    MessageType,
    /// Target, as journaled (redacted).
    Target,
    /// Data window.
    Window,
    /// Suppression reason.
    Reason,
}

impl From<Breakdown> for report::Breakdown {
    fn from(by: Breakdown) -> Self {
        match by {
            Breakdown::Kind => report::Breakdown::Kind,
            Breakdown::MessageType => report::Breakdown::MessageType,
            Breakdown::Target => report::Breakdown::Target,
            Breakdown::Window => report::Breakdown::Window,
            Breakdown::Reason => report::Breakdown::Reason,
        }
    }
}

/// What `--fail-on` can fail on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// Any delivered effect.
    Delivered,
    /// Any effect whose attempts failed and that was not delivered.
    Failed,
    /// Any effect in doubt: its delivery began and no outcome is recorded.
    InDoubt,
    /// Any run with no data window from any source (its effects suppressed with unknown_window).
    Unknown,
}

impl From<FailOn> for report::FailOn {
    fn from(fail_on: FailOn) -> Self {
        match fail_on {
            FailOn::Delivered => report::FailOn::Delivered,
            FailOn::Failed => report::FailOn::Failed,
            FailOn::InDoubt => report::FailOn::InDoubt,
            FailOn::Unknown => report::FailOn::Unknown,
        }
    }
}

/// A progress bar on stderr when stderr is a terminal, and nothing otherwise.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar sized to the total bytes of `paths` when stderr is a terminal; hidden otherwise.
    pub fn for_files(paths: &[impl AsRef<Path>]) -> Self {
        if !std::io::stderr().is_terminal() {
            return Progress {
                bar: ProgressBar::hidden(),
            };
        }
        let total = paths
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} reading journals {bar:30} {bytes}/{total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress { bar }
    }
}

impl replaysafe_review::Progress for Progress {
    fn advance(&self, bytes: u64) {
        self.bar.inc(bytes);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
