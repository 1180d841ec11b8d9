use std::sync::Arc;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use replaysafe_core::{FixedClock, ReplayContext, RunKind, Window};

pub(crate) fn at(year: i32, month: u32, day: u32, hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(year, month, day, hour, 0, 0).unwrap()
}

pub(crate) fn day(start: DateTime<Utc>) -> Window {
    Window::new(start, start + TimeDelta::days(1)).unwrap()
}

/// A context of `kind` over `window`, with the clock at `now`.
pub(crate) fn context(kind: RunKind, window: Window, now: DateTime<Utc>) -> ReplayContext {
    ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id("run-1")
        .run_kind(kind)
        .window(window)
        .clock(Arc::new(FixedClock::new(now)))
        .build()
        .unwrap()
}

/// Runs the test `test` of this binary again in a child process, under a file-size limit
/// of `limit` bytes with `SIGXFSZ` ignored (a write past it is cut short, then fails with
/// `EFBIG`), with `path` in the variable `variable`; the child's exit status.
pub(crate) fn run_under_file_size_limit(
    test: &str,
    variable: &str,
    path: &std::path::Path,
    limit: usize,
) -> std::process::ExitStatus {
    std::process::Command::new("sh")
        .args([
            "-c",
            &format!(r#"trap '' XFSZ; exec prlimit --fsize={limit} -- "$@""#),
            "sh",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([test, "--exact", "--quiet", "--test-threads=1"])
        .env(variable, path)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
}
