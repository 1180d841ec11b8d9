//! [`Reader`]: how journals are read into a report or a diff.

use std::path::Path;

use crate::Error;
use crate::diff::{self, Diff};
use crate::report::{self, Breakdown, Report};

/// Told how far the reading of journals has got, to draw a progress bar.
///
/// A [`Reader`] given one calls [`advance`](Progress::advance) as the bytes of the
/// journals go by (in chunks of up to 256 KiB) and [`finish`](Progress::finish) once
/// every journal of a report, or both sides of a diff, has been read. The total to expect
/// is the sum of the journals' file sizes; a journal read from a pipe has none.
pub trait Progress {
    /// `bytes` more bytes of the journals have been read.
    fn advance(&self, bytes: u64);

    /// Every journal has been read; what is left is listing and writing. Does nothing
    /// unless overridden.
    fn finish(&self) {}
}

/// Reads journals (JSON Lines, schema 1), one or many as one, into a [`Report`] or a
/// [`Diff`].
///
/// Each journal is read once, line by line, and memory does not grow with its lines: what
/// is kept per effect is its idempotency key in 33 bytes and the offsets of its lines,
/// for the effects whose delivery is under way or failed (a report) or for every distinct
/// effect (a diff). The effects a report or a diff lists are read again from their lines
/// at the end, into unnamed temporary files in `$TMPDIR` ([`Rows`](crate::Rows)). A
/// journal that is not a regular file (a pipe) is copied to such a file as it is read, so
/// that its lines can be read again.
///
/// By default a line that cannot be read (malformed, not UTF-8, over 1 MiB) is an
/// [`Error`] naming the file and the line; [`with_skip_invalid`](Reader::with_skip_invalid)
/// skips and counts such lines instead. A line of another schema version is always an
/// error.
#[derive(Clone, Copy, Default)]
pub struct Reader<'a> {
    skip_invalid: bool,
    progress: Option<&'a dyn Progress>,
}

impl std::fmt::Debug for Reader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("skip_invalid", &self.skip_invalid)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl<'a> Reader<'a> {
    /// A reader that skips invalid lines (malformed, not UTF-8, over 1 MiB), when
    /// `skip_invalid`, and names them in the report: the first 100 by file and line, the
    /// rest counted. A skipped line that may be an `attempting` record cut short counts
    /// as possibly in doubt ([`FailOn::InDoubt`](crate::report::FailOn::InDoubt)).
    pub fn with_skip_invalid(self, skip_invalid: bool) -> Self {
        Reader {
            skip_invalid,
            ..self
        }
    }

    /// A reader that tells `progress` how far it has got.
    pub fn with_progress<'b>(self, progress: &'b dyn Progress) -> Reader<'b> {
        Reader {
            skip_invalid: self.skip_invalid,
            progress: Some(progress),
        }
    }

    /// Reads `journals`, in order, as one, and builds the report with the breakdowns `by`
    /// (each at most once, whatever the order given).
    ///
    /// At most 65,535 journals, each up to 256 TiB.
    pub fn report(&self, journals: &[impl AsRef<Path>], by: &[Breakdown]) -> Result<Report, Error> {
        let journals: Vec<&Path> = journals.iter().map(AsRef::as_ref).collect();
        report::build(&journals, by, self.skip_invalid, self.progress).map_err(Error)
    }

    /// Reads the `base` journals as one and the `new` ones as one, and compares their
    /// effects by idempotency key: the effects only one side has, and those whose payload
    /// or decision changed.
    ///
    /// At most 65,535 journals a side, each up to 256 TiB.
    pub fn diff(&self, base: &[impl AsRef<Path>], new: &[impl AsRef<Path>]) -> Result<Diff, Error> {
        let base: Vec<&Path> = base.iter().map(AsRef::as_ref).collect();
        let new: Vec<&Path> = new.iter().map(AsRef::as_ref).collect();
        diff::compare(&base, &new, self.skip_invalid, self.progress).map_err(Error)
    }
}
