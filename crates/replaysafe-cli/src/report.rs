//! `replaysafe report`: what a run or a backfill delivered, suppressed and failed.
//!
//! The journal is read line by line; memory grows with the number of distinct
//! groups, windows and targets, never with the number of lines.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::Serialize;

use replaysafe_core::journal::{JournalDecision, JournalRecord};

use crate::input::{self, Progress};
use crate::render::{Format, Table, time_text};

/// What to break the report down by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
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

impl Breakdown {
    /// The column heading.
    pub fn heading(self) -> &'static str {
        match self {
            Breakdown::Kind => "kind",
            Breakdown::MessageType => "message type",
            Breakdown::Target => "target",
            Breakdown::Window => "window",
            Breakdown::Reason => "reason",
        }
    }
}

/// Lines, delivered, suppressed and failed attempts under one breakdown value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Delivered lines.
    pub delivered: u64,
    /// Suppressed lines.
    pub suppressed: u64,
    /// Failed attempts.
    pub failed: u64,
}

impl Counts {
    fn add(&mut self, decision: JournalDecision) {
        match decision {
            JournalDecision::Delivered => self.delivered += 1,
            JournalDecision::Suppressed => self.suppressed += 1,
            JournalDecision::Failed => self.failed += 1,
        }
    }
}

/// Suppressed effects of one kind in a group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindTotal {
    /// Effects.
    pub effects: u64,
    /// Distinct targets.
    pub targets: u64,
}

/// One run, or one backfill (all runs sharing a backfill id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Group {
    /// `backfill` or `run`.
    pub kind: &'static str,
    /// The backfill id or the run id.
    pub id: String,
    /// Distinct windows.
    pub windows: u64,
    /// Earliest window start.
    pub first_start: Option<DateTime<Utc>>,
    /// Latest window end.
    pub last_end: Option<DateTime<Utc>>,
    /// Suppressed effects per kind.
    pub would_have_sent: BTreeMap<String, KindTotal>,
    /// Delivered effects.
    pub delivered: u64,
    /// Effects whose attempts failed and that were not delivered.
    pub failed: u64,
    /// Failed attempts, including those later retried successfully.
    pub failed_attempts: u64,
    /// The plain-words summary.
    pub headline: String,
}

/// A delivery an opt-in enabled, listed on its own for reviewers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OptInDelivery {
    /// Effect kind.
    pub kind: String,
    /// Message type.
    pub message_type: String,
    /// Target, redacted.
    pub target: String,
    /// Window start.
    pub window_start: DateTime<Utc>,
    /// Why.
    pub reason: String,
    /// Who approved.
    pub approved_by: String,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Journals read.
    pub journals: Vec<String>,
    /// Records read.
    pub records: u64,
    /// Malformed lines skipped (only with `--skip-invalid`).
    pub skipped_invalid: u64,
    /// Per run or backfill.
    pub groups: Vec<Group>,
    /// Requested breakdowns, each value with its counts.
    pub breakdowns: BTreeMap<Breakdown, BTreeMap<String, Counts>>,
    /// Deliveries enabled by opt-ins.
    pub opt_in_deliveries: Vec<OptInDelivery>,
}

#[derive(Debug, Default)]
struct GroupState {
    windows: BTreeSet<(DateTime<Utc>, DateTime<Utc>)>,
    suppressed: BTreeMap<String, (u64, HashSet<String>)>,
    delivered: u64,
    failed_attempts: u64,
    pending_failures: HashSet<String>,
}

/// Builds a report from records, one at a time.
#[derive(Debug, Default)]
pub struct Builder {
    by: Vec<Breakdown>,
    order: Vec<(&'static str, String)>,
    groups: HashMap<(&'static str, String), GroupState>,
    breakdowns: BTreeMap<Breakdown, BTreeMap<String, Counts>>,
    windows: BTreeMap<(DateTime<Utc>, DateTime<Utc>), Counts>,
    opt_in_deliveries: Vec<OptInDelivery>,
    records: u64,
}

impl Builder {
    /// A builder for the given breakdowns.
    pub fn new(by: &[Breakdown]) -> Self {
        let mut by = by.to_vec();
        by.sort();
        by.dedup();
        Builder {
            breakdowns: by.iter().map(|b| (*b, BTreeMap::new())).collect(),
            by,
            ..Builder::default()
        }
    }

    /// Adds one record.
    pub fn add(&mut self, record: JournalRecord) {
        self.records += 1;
        let group = match &record.backfill_id {
            Some(id) => ("backfill", id.clone()),
            None => ("run", record.run_id.clone()),
        };
        if !self.groups.contains_key(&group) {
            self.order.push(group.clone());
        }
        let state = self.groups.entry(group).or_default();
        state
            .windows
            .insert((record.window.start, record.window.end));
        let key = &record.effect.idempotency_key;
        match record.decision {
            JournalDecision::Suppressed => {
                let (effects, targets) = state
                    .suppressed
                    .entry(record.effect.kind.clone())
                    .or_default();
                *effects += 1;
                if !targets.contains(&record.effect.target) {
                    targets.insert(record.effect.target.clone());
                }
            }
            JournalDecision::Delivered => {
                state.delivered += 1;
                state.pending_failures.remove(key);
            }
            JournalDecision::Failed => {
                state.failed_attempts += 1;
                if !state.pending_failures.contains(key) {
                    state.pending_failures.insert(key.clone());
                }
            }
        }

        for breakdown in &self.by {
            let table = self.breakdowns.entry(*breakdown).or_default();
            let mut count = |value: &str| {
                if let Some(counts) = table.get_mut(value) {
                    counts.add(record.decision);
                } else {
                    let mut counts = Counts::default();
                    counts.add(record.decision);
                    table.insert(value.to_owned(), counts);
                }
            };
            match breakdown {
                Breakdown::Kind => count(&record.effect.kind),
                Breakdown::MessageType => count(&record.effect.message_type),
                Breakdown::Target => count(&record.effect.target),
                Breakdown::Window => count(&format!(
                    "{} → {}",
                    time_text(record.window.start),
                    time_text(record.window.end)
                )),
                Breakdown::Reason => {
                    for reason in &record.reasons {
                        count(reason);
                    }
                }
            }
        }

        if record.decision == JournalDecision::Delivered
            && let Some(opt_in) = record.opt_in
        {
            self.opt_in_deliveries.push(OptInDelivery {
                kind: record.effect.kind,
                message_type: record.effect.message_type,
                target: record.effect.target,
                window_start: record.window.start,
                reason: opt_in.reason,
                approved_by: opt_in.approved_by,
                expires_at: opt_in.expires_at,
            });
        }
    }

    /// Finishes the report.
    pub fn finish(mut self, journals: Vec<String>, skipped_invalid: u64) -> Report {
        if let Some(table) = self.breakdowns.get_mut(&Breakdown::Window) {
            for ((start, end), counts) in std::mem::take(&mut self.windows) {
                table.insert(format!("{} → {}", time_text(start), time_text(end)), counts);
            }
        }
        let mut groups_state = self.groups;
        let groups = self
            .order
            .into_iter()
            .map(|key| {
                let state = groups_state.remove(&key).unwrap_or_default();
                group(key.0, key.1, state)
            })
            .collect();
        Report {
            journals,
            records: self.records,
            skipped_invalid,
            groups,
            breakdowns: self.breakdowns,
            opt_in_deliveries: self.opt_in_deliveries,
        }
    }
}

fn group(kind: &'static str, id: String, state: GroupState) -> Group {
    let would_have_sent: BTreeMap<String, KindTotal> = state
        .suppressed
        .into_iter()
        .map(|(kind, (effects, targets))| {
            (
                kind,
                KindTotal {
                    effects,
                    targets: targets.len() as u64,
                },
            )
        })
        .collect();
    let mut group = Group {
        kind,
        id,
        windows: state.windows.len() as u64,
        first_start: state.windows.iter().map(|w| w.0).min(),
        last_end: state.windows.iter().map(|w| w.1).max(),
        would_have_sent,
        delivered: state.delivered,
        failed: state.pending_failures.len() as u64,
        failed_attempts: state.failed_attempts,
        headline: String::new(),
    };
    group.headline = headline(&group);
    group
}

/// Nouns for a kind: effect (singular, plural) and target (singular, plural), if worth counting.
fn nouns(kind: &str) -> (String, String, Option<(&'static str, &'static str)>) {
    let (one, many, targets) = match kind {
        "email" => ("email", "emails", Some(("recipient", "recipients"))),
        "webhook" => ("webhook", "webhooks", Some(("endpoint", "endpoints"))),
        "file_drop" => ("file drop", "file drops", None),
        "trigger" => (
            "downstream trigger",
            "downstream triggers",
            Some(("endpoint", "endpoints")),
        ),
        "metric" => (
            "metric update",
            "metric updates",
            Some(("series", "series")),
        ),
        "alert" => ("alert", "alerts", Some(("route", "routes"))),
        other => return (format!("{other} effect"), format!("{other} effects"), None),
    };
    (one.to_owned(), many.to_owned(), targets)
}

const KIND_ORDER: [&str; 6] = [
    "email",
    "webhook",
    "file_drop",
    "trigger",
    "metric",
    "alert",
];

fn plural(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

fn headline(group: &Group) -> String {
    let range = match (group.first_start, group.last_end) {
        (Some(start), Some(end)) => format!(", {} → {}", time_text(start), time_text(end)),
        _ => String::new(),
    };
    let mut kinds: Vec<&String> = group.would_have_sent.keys().collect();
    kinds.sort_by_key(|kind| {
        (
            KIND_ORDER
                .iter()
                .position(|k| k == kind)
                .unwrap_or(KIND_ORDER.len()),
            *kind,
        )
    });
    let parts: Vec<String> = kinds
        .into_iter()
        .map(|kind| {
            let total = &group.would_have_sent[kind];
            let (one, many, targets) = nouns(kind);
            let mut part = plural(total.effects, &one, &many);
            if let Some((target_one, target_many)) = targets {
                part.push_str(&format!(
                    " to {}",
                    plural(total.targets, target_one, target_many)
                ));
            }
            part
        })
        .collect();
    let would = if parts.is_empty() {
        "would have sent nothing".to_owned()
    } else {
        format!("would have sent {}", parts.join(", "))
    };
    format!(
        "{} {} ({}{}): {would}; delivered {}; failed {}",
        group.kind,
        group.id,
        plural(group.windows, "window", "windows"),
        range,
        group.delivered,
        group.failed
    )
}

/// Reads `journals` and builds the report.
pub fn build(
    journals: &[PathBuf],
    by: &[Breakdown],
    skip_invalid: bool,
    progress: &Progress,
) -> anyhow::Result<Report> {
    let mut builder = Builder::new(by);
    let mut skipped = 0;
    for path in journals {
        skipped +=
            input::for_each_record(path, skip_invalid, progress, |record| builder.add(record))?;
    }
    progress.finish();
    Ok(builder.finish(
        journals.iter().map(|p| p.display().to_string()).collect(),
        skipped,
    ))
}

/// Renders the report.
pub fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(report).unwrap_or_default() + "\n",
        Format::Table | Format::Markdown => {
            let mut out = String::new();
            if format == Format::Markdown {
                out.push_str("## replaysafe report\n\n");
            }
            if report.groups.is_empty() {
                out.push_str(if format == Format::Markdown { "- " } else { "" });
                out.push_str("no effects journaled\n");
            }
            for group in &report.groups {
                out.push_str(if format == Format::Markdown { "- " } else { "" });
                out.push_str(&group.headline);
                out.push('\n');
            }
            for (breakdown, values) in &report.breakdowns {
                let mut table = Table::new(
                    format!("by {}", breakdown.heading()),
                    [
                        breakdown.heading(),
                        "delivered",
                        "suppressed",
                        "failed attempts",
                    ],
                );
                for (value, counts) in values {
                    table.row([
                        value.clone(),
                        counts.delivered.to_string(),
                        counts.suppressed.to_string(),
                        counts.failed.to_string(),
                    ]);
                }
                out.push('\n');
                out.push_str(&table.render(format));
            }
            if !report.opt_in_deliveries.is_empty() {
                let mut table = Table::new(
                    "delivered by opt-in",
                    [
                        "kind",
                        "message type",
                        "target",
                        "window start",
                        "reason",
                        "approved by",
                        "expires",
                    ],
                );
                for delivery in &report.opt_in_deliveries {
                    table.row([
                        delivery.kind.clone(),
                        delivery.message_type.clone(),
                        delivery.target.clone(),
                        time_text(delivery.window_start),
                        delivery.reason.clone(),
                        delivery.approved_by.clone(),
                        replaysafe_core::rfc3339(delivery.expires_at),
                    ]);
                }
                out.push('\n');
                out.push_str(&table.render(format));
            }
            if report.skipped_invalid > 0 {
                out.push_str(&format!(
                    "\nskipped {} invalid lines\n",
                    report.skipped_invalid
                ));
            }
            out
        }
    }
}
