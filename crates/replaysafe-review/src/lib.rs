//! Reviewing replaysafe journals: what a run or a backfill delivered, suppressed and
//! failed, what is in doubt, how two journals differ, and what a backfill would do
//! before it runs.
//!
//! Every decision replaysafe's guard makes is journaled as one JSON line (schema 1,
//! `docs/reference/journal.md`). This crate reads journals for the people who decide
//! whether a backfill may run, and for the CI jobs that gate it; the `replaysafe` command
//! (`report`, `diff`, `plan`, `context`) is a thin front to it.
//!
//! - [`Reader`] reads one journal or many as one, line by line, into a
//!   [`Report`](report::Report) or a [`Diff`](diff::Diff). Memory stays flat in the
//!   number of lines: what is kept per effect is a few dozen bytes, and the effects
//!   listed go to temporary files ([`Rows`]). A [`Progress`] hears how far it has got.
//! - A [`Report`](report::Report) has a headline per run and per backfill ("would have
//!   sent 61 emails to 58 recipients, …; delivered 0; failed 0; in doubt 0"), the
//!   effects **in doubt**, the effects that failed for good, the deliveries opt-ins
//!   enabled, and breakdowns by kind, message type, target, window and reason. It is
//!   written as text tables, Markdown or JSON ([`Format`]), or as one self-contained
//!   HTML page; [`Report::failures`](report::Report::failures) is a CI gate.
//! - A [`Diff`](diff::Diff) compares two sides by idempotency key: the effects only one
//!   side has, changed payloads, and decision flips (suppressed in the dry run, delivered
//!   now).
//! - A [`plan::Request`] asks the gate about every window of a backfill before it runs.
//! - [`context::describe`] says what a resolved `ReplayContext` is and what the gate
//!   would do with each effect kind.
//!
//! # In doubt
//!
//! An effect is in doubt when a delivery attempt began (an `attempting` record) and no
//! outcome for it follows: no `failed` record of the same run and attempt, and no
//! `delivered` record of the same idempotency key from any run. A `delivered` record
//! settles every earlier attempt of its key (the receiver has the effect, and the same
//! key lets it drop a repeat); a `failed` record settles only its own attempt, so an
//! attempt cut short in one run stays in doubt even when a later run's attempt fails.
//! `suppressed` records settle nothing. Before sending an effect in doubt again, ask the
//! receiver whether it has the key.
//!
//! # Example
//!
//! A backfill's dry run suppressed two emails; the report says so in plain words, and a
//! gate on deliveries and doubts passes.
//!
//! ```
//! use replaysafe_review::report::{Breakdown, FailOn};
//! use replaysafe_review::{Format, Reader};
//! # use chrono::{TimeDelta, TimeZone, Utc};
//! # use replaysafe_core::Journal;
//! # use replaysafe_core::journal::{JournalDecision, JournalRecord, JsonlJournal, RecordEffect, RecordWindow};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("backfill.jsonl");
//! # let journal = JsonlJournal::open(&path)?;
//! # let start = Utc.with_ymd_and_hms(2026, 7, 1, 0, 0, 0).unwrap();
//! # for day in 0..2 {
//! #     let window_start = start + TimeDelta::days(day);
//! #     let record = JournalRecord::new(
//! #         Utc.with_ymd_and_hms(2026, 8, 6, 1, 0, 0).unwrap(),
//! #         JournalDecision::Suppressed,
//! #         "daily_orders",
//! #         format!("backfill__{day}"),
//! #         "backfill",
//! #         RecordWindow::new(window_start, window_start + TimeDelta::days(1)),
//! #         RecordEffect::new("email", "daily_summary", "*@shop.example", format!("{day:064x}"), "0".repeat(64), 120),
//! #     )
//! #     .with_reasons(["replay_run", "stale_window"])
//! #     .with_backfill_id(Some("bf-2026-07".into()));
//! #     journal.append(&record.entry())?;
//! # }
//! // `path` is a journal the guard wrote during a backfill's dry run.
//! let report = Reader::default().report(&[&path], &[Breakdown::Kind, Breakdown::Reason])?;
//! assert_eq!(
//!     report.groups[0].headline,
//!     "backfill bf-2026-07 (2 windows, 2026-07-01 → 2026-07-03): \
//!      would have sent 2 emails to 1 recipient; delivered 0; failed 0; in doubt 0"
//! );
//! assert!(report.failures(&[FailOn::Delivered, FailOn::InDoubt]).is_empty());
//!
//! let mut comment = Vec::new();
//! report.write(Format::Markdown, &mut comment)?;
//! let comment = String::from_utf8(comment)?;
//! assert!(comment.starts_with("## replaysafe report\n\n- backfill bf-2026-07 (2 windows"));
//! assert!(comment.contains("| replay_run | 0 | 2 | 0 |"));
//!
//! let mut page = Vec::new();
//! report.write_html(None, &mut page)?;
//! assert!(String::from_utf8(page)?.contains("would have sent 2 emails to 1 recipient"));
//! # Ok(())
//! # }
//! ```
//!
//! # Errors
//!
//! Reading fails with an [`Error`] when a journal cannot be opened or read, when a line
//! is not a record (unless [`Reader::with_skip_invalid`] skips it; a line of another
//! schema version is an error either way), or when a temporary file cannot be written;
//! the message names the journal, and the line when it is about one. Planning fails on a
//! step that is not positive, a negative max age, and more than [`plan::MAX_WINDOWS`]
//! windows. Writing a report or a diff returns the [`std::io::Error`] of the output, or
//! of reading back its own temporary files.
//!
//! Journal text is never trusted: every output [`escape`]s control characters and
//! bidirectional overrides (and, in Markdown, the characters that would end a table
//! cell or make a link), and the HTML page shows markup as text.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod compact;
pub mod context;
pub mod diff;
mod error;
mod html;
mod input;
pub mod plan;
mod reader;
mod render;
pub mod report;
mod spill;

pub use error::Error;
pub use reader::{Progress, Reader};
pub use render::{Format, Table, escape};
pub use spill::Rows;
