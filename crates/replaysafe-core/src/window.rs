//! Data windows in UTC: half-open `[start, end)`, or an instant `[t, t]`.

use std::fmt;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::Error;

/// The data a run is about: a half-open interval `[start, end)` in UTC, or an instant `[t, t]`.
///
/// **Architecture Invariant:** a window is never inverted. [`Window::new`] builds a
/// half-open window and refuses `end <= start` with [`Error::InvalidWindow`];
/// [`Window::instant`] builds the point in time that a run of Airflow 3's default cron
/// timetable is about (its data interval has start = end = the moment the run was due).
/// Adjacent half-open windows share a boundary and never overlap.
///
/// Recency is measured from [`Window::end`] (for an instant, from `t`), and the
/// idempotency key hashes start and end (for an instant, `t` twice).
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
///
/// let tick = Window::instant(Utc.with_ymd_and_hms(2026, 8, 6, 1, 0, 0).unwrap());
/// assert!(tick.is_instant() && tick.start() == tick.end());
/// assert_eq!(tick.to_string(), "[2026-08-06T01:00:00Z, 2026-08-06T01:00:00Z]");
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
        Window::from_bounds(raw.start, raw.end)
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

    /// The instant `[t, t]`: a run about one point in time.
    pub fn instant(t: DateTime<Utc>) -> Self {
        Window { start: t, end: t }
    }

    /// `[start, end)` when `start < end`, the instant `[t, t]` when they are equal;
    /// an inverted pair is [`Error::InvalidWindow`].
    pub fn from_bounds(start: DateTime<Utc>, end: DateTime<Utc>) -> Result<Self, Error> {
        if start == end {
            Ok(Window::instant(start))
        } else {
            Window::new(start, end)
        }
    }

    /// Whether this is an instant (`start == end`).
    pub fn is_instant(&self) -> bool {
        self.start == self.end
    }

    /// Inclusive start.
    pub fn start(&self) -> DateTime<Utc> {
        self.start
    }

    /// Exclusive end; for an instant, the instant itself.
    pub fn end(&self) -> DateTime<Utc> {
        self.end
    }

    /// `end - start`: positive, or zero for an instant.
    pub fn duration(&self) -> TimeDelta {
        self.end - self.start
    }

    /// Whether `instant` lies in `[start, end)`, or equals `t` for an instant.
    pub fn contains(&self, instant: DateTime<Utc>) -> bool {
        if self.is_instant() {
            return instant == self.start;
        }
        self.start <= instant && instant < self.end
    }

    /// Whether the two windows share any instant.
    pub fn overlaps(&self, other: &Window) -> bool {
        match (self.is_instant(), other.is_instant()) {
            (true, _) => other.contains(self.start),
            (false, true) => self.contains(other.start),
            (false, false) => self.start < other.end && other.start < self.end,
        }
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
    /// An instant splits into itself.
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
            instant_pending: self.is_instant(),
        })
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}, {}{}",
            self.start.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            self.end.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            if self.is_instant() { "]" } else { ")" }
        )
    }
}

/// Iterator over consecutive windows, made by [`Window::split`].
#[derive(Clone, Debug)]
pub struct Windows {
    next_start: DateTime<Utc>,
    end: DateTime<Utc>,
    step: TimeDelta,
    instant_pending: bool,
}

impl Iterator for Windows {
    type Item = Window;

    fn next(&mut self) -> Option<Window> {
        if std::mem::take(&mut self.instant_pending) {
            return Some(Window::instant(self.next_start));
        }
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
    fn instants_are_points_in_time() {
        let tick = Window::instant(at(6, 1));
        assert!(tick.is_instant());
        assert_eq!(tick.duration(), TimeDelta::zero());
        assert!(tick.contains(at(6, 1)) && !tick.contains(at(6, 2)));
        let day = Window::new(at(6, 0), at(7, 0)).unwrap();
        assert!(tick.overlaps(&day) && day.overlaps(&tick));
        assert!(
            !Window::instant(at(7, 0)).overlaps(&day),
            "the end is excluded"
        );
        assert!(tick.overlaps(&tick) && !tick.overlaps(&Window::instant(at(6, 2))));
        let parts: Vec<_> = tick.split(TimeDelta::hours(1)).unwrap().collect();
        assert_eq!(parts, [tick]);
        assert_eq!(Window::from_bounds(at(6, 1), at(6, 1)).unwrap(), tick);
        assert!(Window::from_bounds(at(6, 2), at(6, 1)).is_err());
        let json = serde_json::to_string(&tick).unwrap();
        assert_eq!(serde_json::from_str::<Window>(&json).unwrap(), tick);
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
