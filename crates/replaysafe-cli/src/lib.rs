//! The `replaysafe` command line: reviewers' reports and diffs of journals, backfill
//! plans, the resolved context of a run, the gate for shell scripts, and signed approvals.
//!
//! The binary is documented by `replaysafe --help`. This library is its implementation,
//! split out only so the commands can be tested directly: it is not published and not an
//! API, and may change in any release. What `report`, `diff`, `plan` and `context` print
//! is made by the `replaysafe-review` library; here are their flags and the progress bar.
//! `plan --airflow` ([`airflow_plan`]) reads the downstream graph of a backfill from
//! Airflow 3's API server and prints it itself.
//!
//! Exit codes: 0 success (a suppressed `send` is a success), 1 a negative answer
//! (`diff` found differences, `report --fail-on` found such an effect, `send` failed to
//! deliver), 2 bad input or an I/O error (for `send`: nothing was sent), 3 `send` made an
//! attempt and could not journal its outcome
//! ([`send::EXIT_OUTCOME_NOT_JOURNALED`]).

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod airflow_plan;
pub mod approve;
pub mod duration;
pub mod journals;
pub mod outbox;
pub mod outbox_metrics;
pub mod plan;
pub mod render;
pub mod review;
pub mod send;
pub mod telemetry;

/// Peak resident memory of this process in KiB (Linux `VmHWM`), when known.
pub fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
