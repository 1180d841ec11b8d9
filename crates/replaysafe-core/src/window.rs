//! Half-open data windows `[start, end)` in UTC.

use std::fmt;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::Error;

/// A half-open interval of data time, `[start, end)`, in UTC.
///
/// **Architecture Invariant:** `start < end`. A window with `end <= start`
/// cannot be built; [`Window::new`] returns [`Error::InvalidWindow`].
/// Adjacent windows share a boundary and never overlap.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use replaysafe_core::Window;
///
/// let day = Window::new(
///     Utc.with_ymd_and_hms(2026, 8, 5, 0, 0, 0).unwrap(),
///     Utc.with_ymd_and_hms(2026, 8, 6, 0, 0, 0).unwrap(),
/// )?;
/// assert!(day.contains(Utc.with_ymd_and_hms(2026, 8, 5, 23, 59, 59).unwrap()));
/// assert!(!day.contains(day.end()));
/// # Ok::<(), replaysafe_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawWindow", into = "RawWindow")]
pub struct Window {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
struct RawWindow {
    #[serde(with = "crate::journal::rfc3339")]
    start: DateTime<Utc>,
    #[serde(with = "crate::journal::rfc3339")]
    end: DateTime<Utc>,
}

impl TryFrom<RawWindow> for Window {
    type Error = Error;
    fn try_from(raw: RawWindow) -> Result<Self, Error> {
        Window::new(raw.start, raw.end)
    }
}

impl From<Window> for RawWindow {
    fn from(window: Window) -> Self {
        RawWindow {
            start: window.start,
            end: window.end,
        }
    }
}

impl Window {
    /// Builds `[start, end)`; `end <= start` is [`Error::InvalidWindow`].
    pub fn new(start: DateTime<Utc>, end: DateTime<Utc>) -> Result<Self, Error> {
        if end <= start {
            return Err(Error::InvalidWindow { start, end });
        }
        Ok(Window { start, end })
    }

    /// Inclusive start.
    pub fn start(&self) -> DateTime<Utc> {
        self.start
    }

    /// Exclusive end.
    pub fn end(&self) -> DateTime<Utc> {
        self.end
    }

    /// `end - start`, always positive.
    pub fn duration(&self) -> TimeDelta {
        self.end - self.start
    }

    /// Whether `instant` lies in `[start, end)`.
    pub fn contains(&self, instant: DateTime<Utc>) -> bool {
        self.start <= instant && instant < self.end
    }

    /// Whether the two windows share any instant.
    pub fn overlaps(&self, other: &Window) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// Whether `step` divides the window into whole steps, with no short last window.
    pub fn is_aligned_to(&self, step: TimeDelta) -> bool {
        step > TimeDelta::zero()
            && match (self.duration().num_nanoseconds(), step.num_nanoseconds()) {
                (Some(total), Some(step)) => total % step == 0,
                _ => self.duration().num_seconds() % step.num_seconds().max(1) == 0,
            }
    }

    /// Splits the window into consecutive windows of `step`, for backfill plans.
    ///
    /// The windows cover `[start, end)` exactly: no overlap, no gap.
    /// When `step` does not divide the range evenly the **last window is
    /// short** and ends at `end`; [`Window::is_aligned_to`] tells in advance.
    /// A step that is zero or negative is [`Error::InvalidStep`].
    ///
    /// ```
    /// use chrono::{TimeDelta, TimeZone, Utc};
    /// use replaysafe_core::Window;
    ///
    /// let august = Window::new(
    ///     Utc.with_ymd_and_hms(2026, 8, 1, 0, 0, 0).unwrap(),
    ///     Utc.with_ymd_and_hms(2026, 9, 1, 0, 0, 0).unwrap(),
    /// )?;
    /// let days: Vec<_> = august.split(TimeDelta::days(1))?.collect();
    /// assert_eq!(days.len(), 31);
    /// assert_eq!(days[0].end(), days[1].start());
    /// # Ok::<(), replaysafe_core::Error>(())
    /// ```
    pub fn split(&self, step: TimeDelta) -> Result<Windows, Error> {
        if step <= TimeDelta::zero() {
            return Err(Error::InvalidStep { step });
        }
        Ok(Windows {
            next_start: self.start,
            end: self.end,
            step,
        })
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}, {})",
            self.start.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            self.end.to_rfc3339_opts(SecondsFormat::AutoSi, true)
        )
    }
}

/// Iterator over consecutive windows, made by [`Window::split`].
#[derive(Clone, Debug)]
pub struct Windows {
    next_start: DateTime<Utc>,
    end: DateTime<Utc>,
    step: TimeDelta,
}

impl Iterator for Windows {
    type Item = Window;

    fn next(&mut self) -> Option<Window> {
        if self.next_start >= self.end {
            return None;
        }
        let start = self.next_start;
        let end = start
            .checked_add_signed(self.step)
            .map_or(self.end, |e| e.min(self.end));
        self.next_start = end;
        Some(Window { start, end })
    }
}

impl std::iter::FusedIterator for Windows {}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(d: u32, h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 8, d, h, 0, 0).unwrap()
    }

    #[test]
    fn inverted_and_empty_windows_are_errors() {
        assert!(matches!(
            Window::new(at(2, 0), at(1, 0)),
            Err(Error::InvalidWindow { .. })
        ));
        assert!(matches!(
            Window::new(at(2, 0), at(2, 0)),
            Err(Error::InvalidWindow { .. })
        ));
    }

    #[test]
    fn split_covers_range_without_gap_or_overlap() {
        let range = Window::new(at(1, 0), at(4, 5)).unwrap();
        let parts: Vec<_> = range.split(TimeDelta::days(1)).unwrap().collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0].start(), range.start());
        assert_eq!(parts.last().unwrap().end(), range.end());
        assert_eq!(parts.last().unwrap().duration(), TimeDelta::hours(5));
        for pair in parts.windows(2) {
            assert_eq!(pair[0].end(), pair[1].start());
            assert!(!pair[0].overlaps(&pair[1]));
        }
        assert!(!range.is_aligned_to(TimeDelta::days(1)));
        assert!(range.is_aligned_to(TimeDelta::hours(1)));
    }

    #[test]
    fn zero_step_is_an_error() {
        let range = Window::new(at(1, 0), at(2, 0)).unwrap();
        assert!(matches!(
            range.split(TimeDelta::zero()),
            Err(Error::InvalidStep { .. })
        ));
    }

    #[test]
    fn serde_round_trip_rejects_inverted() {
        let window = Window::new(at(1, 0), at(2, 0)).unwrap();
        let json = serde_json::to_string(&window).unwrap();
        assert_eq!(
            json,
            r#"{"start":"2026-08-01T00:00:00Z","end":"2026-08-02T00:00:00Z"}"#
        );
        assert_eq!(serde_json::from_str::<Window>(&json).unwrap(), window);
        let inverted = r#"{"start":"2026-08-02T00:00:00Z","end":"2026-08-01T00:00:00Z"}"#;
        assert!(serde_json::from_str::<Window>(inverted).is_err());
    }
}
