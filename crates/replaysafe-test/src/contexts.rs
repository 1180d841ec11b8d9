//! Ready-made contexts on a fixed clock, for tests.
//!
//! The clock stands at [`now`]; the current window is the day that ended one hour
//! before it. Every context uses pipeline `daily_orders`.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use replaysafe_core::{FixedClock, ReplayContext, RunKind, Window};

/// The fixed "now" of these contexts: 2026-08-06T01:00:00Z.
pub fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 8, 6, 1, 0, 0)
        .single()
        .expect("valid fixed time")
}

/// The current window: `[2026-08-05, 2026-08-06)`.
pub fn current_window() -> Window {
    Window::new(now() - TimeDelta::hours(25), now() - TimeDelta::hours(1)).expect("valid window")
}

/// A window of last month: `[2026-07-05, 2026-07-06)`.
pub fn last_month_window() -> Window {
    let start = current_window().start() - TimeDelta::days(31);
    Window::new(start, start + TimeDelta::days(1)).expect("valid window")
}

/// A context builder on the fixed clock for `kind` over `window`.
pub fn builder(kind: RunKind, window: Window) -> replaysafe_core::ReplayContextBuilder {
    ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id(format!(
            "{}__{}",
            kind.as_str(),
            replaysafe_core::rfc3339(window.start())
        ))
        .run_kind(kind)
        .window(window)
        .clock(Arc::new(FixedClock::new(now())))
}

fn build(builder: replaysafe_core::ReplayContextBuilder) -> ReplayContext {
    builder.build().expect("test context is valid")
}

/// A scheduled run of the current window: effects are delivered.
pub fn live() -> ReplayContext {
    build(builder(RunKind::Scheduled, current_window()))
}

/// A scheduled run of the hour before the current window ended, `[2026-08-05T23:00Z,
/// 2026-08-06T00:00Z)`: delivered, under other keys than [`live`]'s, so a test can send
/// the same effect again as another effect (the ledger suppresses a key delivered once).
pub fn live_hour() -> ReplayContext {
    let end = current_window().end();
    build(builder(
        RunKind::Scheduled,
        Window::new(end - TimeDelta::hours(1), end).expect("valid window"),
    ))
}

/// A backfill of last month: effects are suppressed (`replay_run`, `stale_window`).
pub fn backfill() -> ReplayContext {
    build(builder(RunKind::Backfill, last_month_window()).backfill_id("bf-test"))
}

/// A scheduled run flagged as a replay over the current window: suppressed (`replay_flag`).
pub fn replay() -> ReplayContext {
    build(builder(RunKind::Scheduled, current_window()).replay_flag(true))
}

/// A scheduled run of a window from two days ago: suppressed (`stale_window`).
pub fn stale() -> ReplayContext {
    let end = now() - TimeDelta::days(2);
    build(builder(
        RunKind::Scheduled,
        Window::new(end - TimeDelta::days(1), end).expect("valid window"),
    ))
}

/// A run whose kind could not be established: suppressed (`unknown_context`).
pub fn unknown() -> ReplayContext {
    build(builder(RunKind::Unknown, current_window()))
}
