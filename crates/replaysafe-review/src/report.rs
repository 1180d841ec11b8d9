//! [`Report`]: what each run or backfill delivered, suppressed and failed, and what is
//! in doubt.
//!
//! The journals are read line by line; memory grows with the number of distinct
//! groups, windows and targets, and by about a hundred bytes per effect whose delivery
//! is under way or failed at a point of the journal (its key in compact form and where
//! its lines are), never with the number of lines. The effects listed (in doubt, failed)
//! are read again from their lines at the end, into temporary files ([`Rows`]), and
//! written out row by row.
//!
//! An effect is **in doubt** when a delivery attempt began (an `attempting` record) and
//! no outcome for it follows: no `failed` record of the same run and attempt, and no
//! `delivered` record of the same idempotency key from any run. A `delivered` record
//! settles every earlier attempt of its key (the receiver has the effect, and the same
//! key lets it drop a repeat); a `failed` record settles only its own attempt, so an
//! attempt cut short in one run stays in doubt even when a later run's attempt fails.
//! `suppressed` records settle nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use replaysafe_core::journal::{JournalDecision, JournalRecord};

use crate::Progress;
use crate::compact::{Compact, Interner, SmallList};
use crate::error::Repr;
use crate::input::{self, LineAt, Skipped, Source};
use crate::render::{Format, Table, escape, time_text, window_text, write_table};
use crate::spill::{Rows, Spill};

/// What to break the report down by: each breakdown is a table of its values, with the
/// lines delivered, suppressed, failed and attempting under each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
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
    pub(crate) fn heading(self) -> &'static str {
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
#[non_exhaustive]
pub struct Counts {
    /// Delivered lines.
    pub delivered: u64,
    /// Suppressed lines.
    pub suppressed: u64,
    /// Failed attempts.
    pub failed: u64,
    /// Attempts begun (`attempting` lines).
    pub attempting: u64,
}

impl Counts {
    fn add(&mut self, decision: JournalDecision) {
        match decision {
            JournalDecision::Delivered => self.delivered += 1,
            JournalDecision::Suppressed => self.suppressed += 1,
            JournalDecision::Failed => self.failed += 1,
            JournalDecision::Attempting => self.attempting += 1,
            // A decision this version does not know is counted nowhere.
            _ => {}
        }
    }
}

/// What a review gate can fail on ([`Report::count`], [`Report::failures`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailOn {
    /// Any delivered effect.
    Delivered,
    /// Any effect whose attempts failed and that was not delivered.
    Failed,
    /// Any effect in doubt: its delivery began and no outcome is recorded.
    InDoubt,
    /// Any run with no data window from any source: its effects were all suppressed with
    /// `unknown_window`, and nobody can say which data they were about.
    Unknown,
}

impl FailOn {
    /// The words for it, as the headline uses them.
    fn words(self) -> &'static str {
        match self {
            FailOn::Delivered => "delivered",
            FailOn::Failed => "failed",
            FailOn::InDoubt => "in doubt",
            FailOn::Unknown => "without a window",
        }
    }
}

/// Suppressed effects of one kind in a group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KindTotal {
    /// Effects.
    pub effects: u64,
    /// Distinct targets.
    pub targets: u64,
}

/// One run, or one backfill (all runs sharing a backfill id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
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
    /// Effects in doubt: their delivery began and no outcome is recorded.
    pub in_doubt: u64,
    /// The plain-words summary: `backfill bf-2026-07 (5 windows, 2026-07-05 → 2026-07-10):
    /// would have sent 10 emails to 4 recipients, 5 webhooks to 1 endpoint, 5 file drops;
    /// delivered 0; failed 0; in doubt 0`.
    pub headline: String,
}

/// A delivery an opt-in enabled, listed on its own for reviewers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
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
    /// What the opt-in covers: kinds, targets, pipeline, backfill or run-id pattern.
    pub scope: String,
    /// Who signed it: the trusted approver's name and the key's fingerprint, or the
    /// fingerprint alone when no trusted approvers were configured; `None` when unsigned.
    pub signer: Option<String>,
}

/// An opt-in's scope in words: `email, webhook to every target; pipeline p, backfill b`.
fn scope_text(opt_in: &replaysafe_core::journal::RecordOptIn) -> String {
    let mut text = if opt_in.kinds.is_empty() {
        "kinds not journaled".to_owned()
    } else {
        opt_in.kinds.join(", ")
    };
    match &opt_in.targets {
        Some(targets) => text.push_str(&format!(" to {}", targets.join(", "))),
        None => text.push_str(" to every target"),
    }
    for (label, value) in [
        ("pipeline", &opt_in.pipeline),
        ("backfill", &opt_in.backfill_id),
        ("runs", &opt_in.run_id_pattern),
    ] {
        if let Some(value) = value {
            text.push_str(&format!("; {label} {value}"));
        }
    }
    text
}

fn signer_text(opt_in: &replaysafe_core::journal::RecordOptIn) -> Option<String> {
    match (&opt_in.signer, &opt_in.signer_fingerprint) {
        (Some(name), Some(fingerprint)) => Some(format!("{name} ({fingerprint})")),
        (Some(name), None) => Some(name.clone()),
        (None, Some(fingerprint)) => Some(format!("key {fingerprint}, trust not checked")),
        (None, None) => None,
    }
}

/// An effect whose delivery began and whose outcome is not recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InDoubt {
    /// Idempotency key: ask the receiver whether it has an effect with this key.
    pub key: String,
    /// Effect kind.
    pub kind: String,
    /// Message type.
    pub message_type: String,
    /// Target, as journaled (redacted).
    pub target: String,
    /// The run whose attempt has no outcome (the last one, when several have none).
    pub run_id: String,
    /// Its backfill, if any.
    pub backfill_id: Option<String>,
    /// Window start.
    pub window_start: DateTime<Utc>,
    /// Window end (equal to the start for an instant).
    pub window_end: DateTime<Utc>,
    /// The attempt without an outcome.
    pub attempt: u32,
    /// When it began.
    pub began: DateTime<Utc>,
    /// Attempts without an outcome, across runs.
    pub open_attempts: u64,
    /// The error of the effect's last failed attempt, if one failed before.
    pub last_error: Option<String>,
}

/// An effect whose attempts failed, that no line delivered and that is not in doubt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FailedEffect {
    /// Idempotency key.
    pub key: String,
    /// Effect kind.
    pub kind: String,
    /// Message type.
    pub message_type: String,
    /// Target, as journaled (redacted).
    pub target: String,
    /// The run of the last failed attempt.
    pub run_id: String,
    /// Window start.
    pub window_start: DateTime<Utc>,
    /// Window end (equal to the start for an instant).
    pub window_end: DateTime<Utc>,
    /// The last failed attempt.
    pub attempt: u32,
    /// Failed attempts, across runs.
    pub failed_attempts: u64,
    /// The error of the last failed attempt, as journaled.
    pub last_error: Option<String>,
}

/// What happened to the effects of one kind in one window, for the grid of the HTML page.
///
/// Lines count as in a group's headline: `delivered` and `opt_in` are delivered lines
/// (without and with an opt-in), `suppressed` suppressed lines; `failed` and `in_doubt`
/// count effects, as the failed and in-doubt lists do; `unknown` counts lines of a
/// decision this version does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Cell {
    /// Delivered lines without an opt-in.
    pub delivered: u64,
    /// Delivered lines an opt-in enabled.
    pub opt_in: u64,
    /// Suppressed lines.
    pub suppressed: u64,
    /// Effects whose attempts failed, not delivered and not in doubt.
    pub failed: u64,
    /// Effects in doubt.
    pub in_doubt: u64,
    /// Lines of a decision this version does not know.
    pub unknown: u64,
}

impl Cell {
    /// Adds another cell's counts (to fold windows into weeks or months).
    pub(crate) fn add(&mut self, other: &Cell) {
        self.delivered += other.delivered;
        self.opt_in += other.opt_in;
        self.suppressed += other.suppressed;
        self.failed += other.failed;
        self.in_doubt += other.in_doubt;
        self.unknown += other.unknown;
    }
}

/// The runs that had no data window from any source: every effect of theirs was
/// suppressed with `unknown_window`, and journaled with a placeholder window (the Unix
/// epoch's instant) that the groups' windows and the grid leave out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct UnknownWindows {
    /// Such runs (distinct pipeline and run id).
    pub runs: u64,
    /// Their suppressed effects.
    pub effects: u64,
    /// The first of them, `PIPELINE/RUN_ID`, at most [`UnknownWindows::LISTED`].
    pub listed: Vec<String>,
}

impl UnknownWindows {
    /// How many runs are named in [`UnknownWindows::listed`].
    pub const LISTED: usize = 10;

    /// The line a report shows for them, or `None` when there are none.
    pub fn text(&self) -> Option<String> {
        if self.runs == 0 {
            return None;
        }
        let mut named = self.listed.join(", ");
        let unlisted = self.runs - self.listed.len() as u64;
        if unlisted > 0 {
            named.push_str(&format!(" and {unlisted} more"));
        }
        Some(format!(
            "without a window: {} ({} suppressed, unknown_window): {named}; \
             set REPLAYSAFE_WINDOW_START and REPLAYSAFE_WINDOW_END (or REPLAYSAFE_UPSTREAM) for such runs",
            plural(self.runs, "run", "runs"),
            plural(self.effects, "effect", "effects"),
        ))
    }
}

/// A data window as the grid keys it: (start, end), equal for an instant.
pub type WindowKey = (DateTime<Utc>, DateTime<Utc>);

/// The whole report, as [`Reader::report`](crate::Reader::report) builds it.
///
/// The lists that grow with the number of effects (in doubt, failed) are [`Rows`] kept
/// in a temporary file, so a report's memory does not grow with them. Its JSON form
/// ([`Format::Json`]) is its `Serialize` form, without the grid.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// Journals read.
    pub journals: Vec<String>,
    /// Records read.
    pub records: u64,
    /// Invalid lines skipped (only with [`Reader::with_skip_invalid`](crate::Reader::with_skip_invalid)).
    pub skipped_invalid: u64,
    /// The first of them, `FILE:LINE (why)`.
    pub skipped_invalid_lines: Vec<String>,
    /// How many of them may be `attempting` records cut short or damaged (nothing in them
    /// proves otherwise): each counts as possibly in doubt for [`FailOn::InDoubt`].
    pub skipped_possibly_in_doubt: u64,
    /// Effects in doubt, in the order their last open attempt began.
    pub in_doubt: Rows<InDoubt>,
    /// Per run or backfill.
    pub groups: Vec<Group>,
    /// Requested breakdowns, each value with its counts.
    pub breakdowns: BTreeMap<Breakdown, BTreeMap<String, Counts>>,
    /// Deliveries enabled by opt-ins.
    pub opt_in_deliveries: Vec<OptInDelivery>,
    /// Effects whose attempts failed, that no line delivered and that are not in doubt,
    /// in the order of their last failed attempt.
    pub failed_effects: Rows<FailedEffect>,
    /// Runs with no data window from any source (`unknown_window`), on a line of their own.
    pub unknown_window: UnknownWindows,
    /// Per window (in time order) and effect kind, what happened: the HTML page's grid.
    #[serde(skip)]
    pub grid: BTreeMap<WindowKey, BTreeMap<String, Cell>>,
}

#[derive(Debug)]
struct GroupState {
    kind: &'static str,
    id: String,
    windows: BTreeSet<(DateTime<Utc>, DateTime<Utc>)>,
    /// The window of the group's last record: the next one is most often the same.
    last_window: Option<WindowKey>,
    suppressed: BTreeMap<String, (u64, HashSet<String>)>,
    delivered: u64,
    failed_attempts: u64,
    /// Effects whose failure in this group no delivery in this group settled, and that
    /// are not in doubt: counted at the end.
    failed: u64,
    in_doubt: u64,
}

/// An attempt with no outcome yet.
#[derive(Clone, Copy, Debug)]
struct OpenAttempt {
    /// Its run id's number.
    run: u32,
    attempt: u32,
    group: u32,
    /// Its `attempting` line, read again if the effect is listed in doubt.
    at: LineAt,
}

/// An effect in doubt, to list once the journals are read: 32 bytes.
#[derive(Clone, Copy, Debug)]
struct Doubtful {
    /// Its latest attempt without an outcome.
    at: LineAt,
    /// Its key's [`Compact::fingerprint`], to check the line read again.
    key: u64,
    open_attempts: u32,
    group: u32,
    last_failure: Option<LineAt>,
}

/// The last failed attempt of an effect not delivered (yet).
#[derive(Clone, Copy, Debug)]
struct Failing {
    /// Its `failed` line, read again for the effect's last error.
    at: LineAt,
    /// Failed attempts since the last delivery.
    count: u64,
}

/// What the report keeps about an effect with more than one attempt without an outcome,
/// or with a failure: rare, so kept apart from the common case.
#[derive(Debug, Default)]
struct EffectState {
    /// Attempts without an outcome yet, oldest first.
    open: SmallList<OpenAttempt>,
    /// The last failure since the last delivery, if any.
    failing: Option<Failing>,
    /// The groups in which a failure of the effect is not settled by a delivery in that group.
    pending: SmallList<u32>,
}

impl EffectState {
    fn is_empty(&self) -> bool {
        self.open.is_empty() && self.failing.is_none() && self.pending.is_empty()
    }
}

/// Builds a report from records, one at a time.
///
/// Memory grows with the distinct groups, windows, targets and breakdown values, and by
/// about a hundred bytes per effect whose delivery is under way or failed at a point of
/// the journals (its idempotency key in 33 bytes and where its lines are, which are read
/// again at the end for the effects listed); never with the number of lines, nor with
/// their text.
#[derive(Debug, Default)]
pub(crate) struct Builder {
    groups: Vec<GroupState>,
    backfill_groups: HashMap<String, u32>,
    run_groups: HashMap<String, u32>,
    /// The group of the last record: the next one is most often in the same.
    last_group: Option<u32>,
    /// The requested breakdowns, each value with its counts.
    breakdowns: BTreeMap<Breakdown, BTreeMap<String, Counts>>,
    /// The last window shown as text for the window breakdown, and the text.
    last_window_text: Option<(WindowKey, String)>,
    /// Per idempotency key with exactly one attempt under way and nothing else: the
    /// attempt. Most effects in doubt are these. B-trees rather than hash maps: they grow
    /// a node at a time, where a hash map doubles, and at the doubling holds both tables.
    attempting: BTreeMap<Compact, OpenAttempt>,
    /// Per idempotency key with more under way or failed.
    effects: BTreeMap<Compact, EffectState>,
    run_ids: Interner,
    opt_in_deliveries: Vec<OptInDelivery>,
    grid: BTreeMap<WindowKey, BTreeMap<String, Cell>>,
    records: u64,
    /// Runs without a window: `PIPELINE/RUN_ID` → suppressed effects.
    unknown_window: BTreeMap<String, u64>,
    /// Whether a line lay beyond what a [`LineAt`] can point to.
    too_far: bool,
}

impl Builder {
    /// A builder for the given breakdowns.
    pub(crate) fn new(by: &[Breakdown]) -> Self {
        Builder {
            breakdowns: by.iter().map(|b| (*b, BTreeMap::new())).collect(),
            ..Builder::default()
        }
    }

    /// The number of the group of `record`, made when new.
    fn group_of(&mut self, record: &JournalRecord) -> u32 {
        let (kind, id, numbers) = match &record.backfill_id {
            Some(id) => ("backfill", id, &mut self.backfill_groups),
            None => ("run", &record.run_id, &mut self.run_groups),
        };
        if let Some(last) = self.last_group {
            let group = &self.groups[last as usize];
            if group.kind == kind && group.id == *id {
                return last;
            }
        }
        let number = match numbers.get(id.as_str()) {
            Some(number) => *number,
            None => {
                let number = u32::try_from(self.groups.len()).unwrap_or(u32::MAX);
                numbers.insert(id.clone(), number);
                self.groups.push(GroupState {
                    kind,
                    id: id.clone(),
                    windows: BTreeSet::new(),
                    last_window: None,
                    suppressed: BTreeMap::new(),
                    delivered: 0,
                    failed_attempts: 0,
                    failed: 0,
                    in_doubt: 0,
                });
                number
            }
        };
        self.last_group = Some(number);
        number
    }

    /// The full state of `key`, moving it from the common case when it is there.
    fn effect(&mut self, key: Compact) -> &mut EffectState {
        let attempt = self.attempting.remove(&key);
        let effect = self.effects.entry(key).or_default();
        if let Some(attempt) = attempt {
            effect.open.push(attempt);
        }
        effect
    }

    /// Adds one record, whose line is `at`.
    pub(crate) fn add(&mut self, record: JournalRecord, at: LineAt) {
        self.records += 1;
        let group = self.group_of(&record);
        let state = &mut self.groups[group as usize];
        let window = (record.window.start, record.window.end);
        // A run without a window is journaled at a placeholder: counted on its own line,
        // kept out of the windows and the grid.
        let windowless = record
            .reasons
            .iter()
            .any(|reason| reason == "unknown_window");
        if windowless {
            let run = format!("{}/{}", record.pipeline, record.run_id);
            *self.unknown_window.entry(run).or_default() += 1;
        } else if state.last_window != Some(window) {
            state.windows.insert(window);
            state.last_window = Some(window);
        }
        // Only the decisions about deliveries need the key: most lines are suppressed.
        let key = || Compact::new(&record.effect.idempotency_key);
        match record.decision {
            JournalDecision::Attempting => {
                let attempt = OpenAttempt {
                    run: self.run_ids.number(&record.run_id),
                    attempt: record.attempt,
                    group,
                    at,
                };
                let key = key();
                if let Some(effect) = self.effects.get_mut(&key) {
                    effect.open.push(attempt);
                } else {
                    match self.attempting.entry(key) {
                        std::collections::btree_map::Entry::Vacant(vacant) => {
                            vacant.insert(attempt);
                        }
                        std::collections::btree_map::Entry::Occupied(occupied) => {
                            // A second attempt under way: the effect leaves the common case.
                            let first = occupied.remove();
                            let effect = self.effects.entry(key).or_default();
                            effect.open.push(first);
                            effect.open.push(attempt);
                        }
                    }
                }
            }
            JournalDecision::Suppressed => {
                let target = &record.effect.target;
                match state.suppressed.get_mut(&record.effect.kind) {
                    Some((effects, targets)) => {
                        *effects += 1;
                        if !targets.contains(target) {
                            targets.insert(target.clone());
                        }
                    }
                    None => {
                        let targets = HashSet::from([target.clone()]);
                        state
                            .suppressed
                            .insert(record.effect.kind.clone(), (1, targets));
                    }
                }
            }
            JournalDecision::Delivered => {
                state.delivered += 1;
                let key = key();
                self.attempting.remove(&key);
                if let Some(effect) = self.effects.get_mut(&key) {
                    effect.open = SmallList::Empty;
                    effect.failing = None;
                    if let Some(index) = effect.pending.as_slice().iter().position(|g| *g == group)
                    {
                        effect.pending.remove(index);
                    }
                    if effect.is_empty() {
                        self.effects.remove(&key);
                    }
                }
            }
            JournalDecision::Failed => {
                state.failed_attempts += 1;
                let run = self.run_ids.get(&record.run_id);
                let effect = self.effect(key());
                if !effect.pending.as_slice().contains(&group) {
                    effect.pending.push(group);
                }
                let count = effect.failing.map_or(0, |failing| failing.count) + 1;
                effect.failing = Some(Failing { at, count });
                // The open attempt of the same run and attempt, the latest if several.
                let settled = effect
                    .open
                    .as_slice()
                    .iter()
                    .rposition(|open| Some(open.run) == run && open.attempt == record.attempt);
                if let Some(index) = settled {
                    effect.open.remove(index);
                }
            }
            _ => {}
        }

        // Cells count what became of effects: attempts and failures are counted above,
        // and an operator's requeue or a circuit's change is no outcome of its effect.
        if !matches!(
            record.decision,
            JournalDecision::Attempting
                | JournalDecision::Failed
                | JournalDecision::Requeued
                | JournalDecision::Circuit
        ) && !windowless
        {
            let opt_in = record.opt_in.is_some();
            let cell = self.cell(window, &record.effect.kind);
            match record.decision {
                JournalDecision::Delivered if opt_in => cell.opt_in += 1,
                JournalDecision::Delivered => cell.delivered += 1,
                JournalDecision::Suppressed => cell.suppressed += 1,
                _ => cell.unknown += 1,
            }
        }

        for (breakdown, table) in &mut self.breakdowns {
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
                Breakdown::Window => {
                    let shown = match &self.last_window_text {
                        Some((last, text)) if *last == window => text,
                        _ => {
                            let text = window_text(window.0, window.1);
                            &self.last_window_text.insert((window, text)).1
                        }
                    };
                    count(shown)
                }
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
                scope: scope_text(&opt_in),
                signer: signer_text(&opt_in),
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

    /// The grid cell of `window` and `kind`, created empty when new.
    fn cell(&mut self, window: WindowKey, kind: &str) -> &mut Cell {
        let kinds = self.grid.entry(window).or_default();
        if !kinds.contains_key(kind) {
            kinds.insert(kind.to_owned(), Cell::default());
        }
        kinds.get_mut(kind).expect("inserted above")
    }

    /// Finishes the report: lists the effects in doubt and the failed ones, reading their
    /// lines again from `sources` (as [`input::for_each_record`] returned them, by journal
    /// number), into the report's own temporary files.
    pub(crate) fn finish(
        mut self,
        journals: Vec<String>,
        skipped: Skipped,
        sources: &[Source],
    ) -> Result<Report, Repr> {
        // Each in-doubt effect is listed once, as its latest attempt without an outcome.
        let mut doubtful: Vec<Doubtful> = std::mem::take(&mut self.attempting)
            .into_iter()
            .map(|(key, attempt)| Doubtful {
                at: attempt.at,
                key: key.fingerprint(),
                open_attempts: 1,
                group: attempt.group,
                last_failure: None,
            })
            .collect();
        let mut failing: Vec<(LineAt, u64, u64)> = Vec::new();
        for (key, state) in std::mem::take(&mut self.effects) {
            if let Some(last) = state.open.as_slice().last() {
                // In doubt, not failed, in every group: an attempt may have reached the receiver.
                doubtful.push(Doubtful {
                    at: last.at,
                    key: key.fingerprint(),
                    open_attempts: state.open.as_slice().len() as u32,
                    group: last.group,
                    last_failure: state.failing.map(|failing| failing.at),
                });
                continue;
            }
            for group in state.pending.as_slice() {
                self.groups[*group as usize].failed += 1;
            }
            if let Some(Failing { at, count }) = state.failing {
                failing.push((at, key.fingerprint(), count));
            }
        }
        doubtful.sort_unstable_by_key(|doubtful| doubtful.at);
        failing.sort_unstable_by_key(|failing| failing.0);

        // A line read again must be the one read the first time.
        let line = |at: LineAt, key: u64| {
            input::record_at(sources, at, |record| {
                Compact::new(&record.effect.idempotency_key).fingerprint() == key
            })
        };
        let spill_error = |source| Repr::Spill {
            what: "the report's lists",
            source,
        };
        let mut in_doubt = Spill::new();
        for Doubtful {
            at,
            key,
            open_attempts,
            group,
            last_failure,
        } in doubtful
        {
            let record = line(at, key)?;
            let last_error = match last_failure {
                Some(at) => line(at, key)?.error,
                None => None,
            };
            let effect = InDoubt {
                key: record.effect.idempotency_key,
                kind: record.effect.kind,
                message_type: record.effect.message_type,
                target: record.effect.target,
                run_id: record.run_id,
                backfill_id: record.backfill_id,
                window_start: record.window.start,
                window_end: record.window.end,
                attempt: record.attempt,
                began: record.ts,
                open_attempts: u64::from(open_attempts),
                last_error,
            };
            self.groups[group as usize].in_doubt += 1;
            self.cell((effect.window_start, effect.window_end), &effect.kind)
                .in_doubt += 1;
            in_doubt.push(&effect).map_err(spill_error)?;
        }
        let mut failed_effects = Spill::new();
        for (at, key, count) in failing {
            let record = line(at, key)?;
            let effect = FailedEffect {
                key: record.effect.idempotency_key,
                kind: record.effect.kind,
                message_type: record.effect.message_type,
                target: record.effect.target,
                run_id: record.run_id,
                window_start: record.window.start,
                window_end: record.window.end,
                attempt: record.attempt,
                failed_attempts: count,
                last_error: record.error,
            };
            self.cell((effect.window_start, effect.window_end), &effect.kind)
                .failed += 1;
            failed_effects.push(&effect).map_err(spill_error)?;
        }
        let groups = std::mem::take(&mut self.groups)
            .into_iter()
            .map(group)
            .collect();
        Ok(Report {
            journals,
            records: self.records,
            skipped_invalid: skipped.count,
            skipped_invalid_lines: skipped.lines,
            skipped_possibly_in_doubt: skipped.possibly_attempting,
            in_doubt: in_doubt.into_rows().map_err(spill_error)?,
            groups,
            breakdowns: self.breakdowns,
            opt_in_deliveries: self.opt_in_deliveries,
            failed_effects: failed_effects.into_rows().map_err(spill_error)?,
            unknown_window: UnknownWindows {
                runs: self.unknown_window.len() as u64,
                effects: self.unknown_window.values().sum(),
                listed: self
                    .unknown_window
                    .keys()
                    .take(UnknownWindows::LISTED)
                    .cloned()
                    .collect(),
            },
            grid: self.grid,
        })
    }
}

fn group(state: GroupState) -> Group {
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
        kind: state.kind,
        id: state.id,
        windows: state.windows.len() as u64,
        first_start: state.windows.iter().map(|w| w.0).min(),
        last_end: state.windows.iter().map(|w| w.1).max(),
        would_have_sent,
        delivered: state.delivered,
        failed: state.failed,
        failed_attempts: state.failed_attempts,
        in_doubt: state.in_doubt,
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

/// Orders effect kinds as the headline lists them: the built-in kinds first, then by name.
pub(crate) fn kind_order(kind: &str) -> (usize, &str) {
    (
        KIND_ORDER
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(KIND_ORDER.len()),
        kind,
    )
}

/// `1 window`, `2 windows`.
pub(crate) fn plural(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

fn headline(group: &Group) -> String {
    let range = match (group.first_start, group.last_end) {
        (Some(start), Some(end)) => format!(", {}", window_text(start, end)),
        _ => String::new(),
    };
    let mut kinds: Vec<&String> = group.would_have_sent.keys().collect();
    kinds.sort_by_key(|kind| kind_order(kind));
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
        "{} {} ({}{}): {would}; delivered {}; failed {}; in doubt {}",
        group.kind,
        group.id,
        plural(group.windows, "window", "windows"),
        range,
        group.delivered,
        group.failed,
        group.in_doubt
    )
}

/// Reads `journals` and builds the report.
pub(crate) fn build(
    journals: &[&Path],
    by: &[Breakdown],
    skip_invalid: bool,
    progress: Option<&dyn Progress>,
) -> Result<Report, Repr> {
    let mut builder = Builder::new(by);
    let mut skipped = Skipped::default();
    let mut sources = Vec::with_capacity(journals.len());
    if journals.len() > LineAt::MAX_JOURNALS {
        return Err(Repr::TooManyJournals {
            command: "report",
            max: LineAt::MAX_JOURNALS,
            per: "",
        });
    }
    for (journal, path) in journals.iter().enumerate() {
        let (skipped_here, source) = input::for_each_record(
            path,
            skip_invalid,
            progress,
            |record, offset| match LineAt::new(journal, offset) {
                Some(at) => builder.add(record, at),
                None => builder.too_far = true,
            },
        )?;
        if builder.too_far {
            return Err(Repr::TooLong {
                command: "report",
                path: path.display().to_string(),
            });
        }
        skipped.extend(skipped_here);
        sources.push(source);
    }
    if let Some(progress) = progress {
        progress.finish();
    }
    builder.finish(
        journals.iter().map(|p| p.display().to_string()).collect(),
        skipped,
        &sources,
    )
}

/// What the skipped lines that may be `attempting` records mean, when there are any.
pub(crate) fn possibly_in_doubt_text(report: &Report) -> Option<String> {
    match report.skipped_possibly_in_doubt {
        0 => None,
        1 => Some(
            "1 skipped line may be an attempting record (nothing in it proves otherwise): \
             --fail-on in-doubt counts it as possibly in doubt"
                .to_owned(),
        ),
        lines => Some(format!(
            "{lines} skipped lines may be attempting records (nothing in them proves otherwise): \
             --fail-on in-doubt counts them as possibly in doubt"
        )),
    }
}

impl Report {
    /// How many effects `fail_on` matches: delivered lines, failed effects or effects in
    /// doubt, counting as in doubt each skipped line that may be an `attempting` record.
    pub fn count(&self, fail_on: FailOn) -> u64 {
        match fail_on {
            FailOn::Delivered => self.groups.iter().map(|g| g.delivered).sum(),
            FailOn::Failed => self.groups.iter().map(|g| g.failed).sum(),
            FailOn::InDoubt => self.in_doubt.len() as u64 + self.skipped_possibly_in_doubt,
            FailOn::Unknown => self.unknown_window.runs,
        }
    }

    /// What of `fail_on` the journals hold, in words (`2 in doubt`); empty when nothing:
    /// a review gate fails when this is not empty, and says why with these words.
    pub fn failures(&self, fail_on: &[FailOn]) -> Vec<String> {
        let mut words = Vec::new();
        for each in fail_on {
            let count = self.count(*each);
            let mut text = format!("{count} {}", each.words());
            if *each == FailOn::InDoubt && self.skipped_possibly_in_doubt > 0 {
                text.push_str(&match self.skipped_possibly_in_doubt {
                    1 => " (1 of them an invalid line that may be an attempting record)".to_owned(),
                    lines => {
                        format!(" ({lines} of them invalid lines that may be attempting records)")
                    }
                });
            }
            if count > 0 && !words.contains(&text) {
                words.push(text);
            }
        }
        words
    }

    /// Writes the report to `out` as text tables, Markdown or JSON, reading its lists
    /// back from disk as it goes, so the output is never held in memory whole.
    ///
    /// Every text from a journal is [`escape`]d for the format: nothing a
    /// journal holds can move a terminal's cursor or break out of a Markdown table cell.
    /// An error is one of writing to `out` or of reading back the report's temporary files.
    pub fn write(&self, format: Format, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        write(self, format, out)
    }

    /// Writes the report to `out` as one self-contained HTML page for a reviewer's browser:
    /// headlines, totals, a grid of windows by effect kind (folded into weeks or months past
    /// 120 rows), the deliveries opt-ins enabled, the effects in doubt and failed, the
    /// breakdowns, and, given the [`Diff`](crate::diff::Diff) against the original
    /// journals, the differences.
    ///
    /// The page holds no script and fetches nothing (a Content-Security-Policy forbids it);
    /// every text from a journal is shown as text. Its rows are written one at a time.
    pub fn write_html(
        &self,
        base: Option<&crate::diff::Diff>,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        crate::html::write(self, base, out)
    }
}

/// Writes the report to `out`, reading its lists back from disk as it goes, so the
/// output is never held in memory whole.
fn write(report: &Report, format: Format, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, report).map_err(std::io::Error::other)?;
            out.write_all(b"\n")
        }
        Format::Table | Format::Markdown => {
            if format == Format::Markdown {
                out.write_all(b"## replaysafe report\n\n")?;
            }
            if report.groups.is_empty() {
                out.write_all(if format == Format::Markdown {
                    b"- "
                } else {
                    b""
                })?;
                out.write_all(b"no effects journaled\n")?;
            }
            for group in &report.groups {
                out.write_all(if format == Format::Markdown {
                    b"- "
                } else {
                    b""
                })?;
                out.write_all(escape(&group.headline, format).as_bytes())?;
                out.write_all(b"\n")?;
            }
            if let Some(text) = report.unknown_window.text() {
                out.write_all(if format == Format::Markdown {
                    b"\n- "
                } else {
                    b"\n"
                })?;
                out.write_all(escape(&text, format).as_bytes())?;
                out.write_all(b"\n")?;
            }
            if !report.in_doubt.is_empty() {
                out.write_all(b"\n")?;
                let title = format!(
                    "in doubt: {} delivery began and no outcome is recorded; ask the receiver by key before sending again",
                    plural(
                        report.in_doubt.len() as u64,
                        "effect whose",
                        "effects whose"
                    )
                );
                let rows = || {
                    report.in_doubt.iter().map(|effect| {
                        effect.map(|effect| {
                            vec![
                                effect.kind,
                                effect.message_type,
                                effect.target,
                                window_text(effect.window_start, effect.window_end),
                                effect.run_id,
                                effect.attempt.to_string(),
                                replaysafe_core::rfc3339(effect.began),
                                effect.key,
                            ]
                        })
                    })
                };
                write_table(
                    out,
                    &title,
                    &[
                        "kind",
                        "message type",
                        "target",
                        "window",
                        "run",
                        "attempt",
                        "began",
                        "key",
                    ],
                    rows,
                    format,
                )?;
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
                out.write_all(b"\n")?;
                out.write_all(table.render(format).as_bytes())?;
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
                        "scope",
                        "signed by",
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
                        delivery.scope.clone(),
                        delivery
                            .signer
                            .clone()
                            .unwrap_or_else(|| "unsigned".to_owned()),
                    ]);
                }
                out.write_all(b"\n")?;
                out.write_all(table.render(format).as_bytes())?;
            }
            if report.skipped_invalid > 0 {
                let mut lines = report.skipped_invalid_lines.join(", ");
                let unlisted = report.skipped_invalid - report.skipped_invalid_lines.len() as u64;
                if unlisted > 0 {
                    lines.push_str(&format!(" and {unlisted} more"));
                }
                write!(
                    out,
                    "\nskipped {}: {}\n",
                    plural(report.skipped_invalid, "invalid line", "invalid lines"),
                    escape(&lines, format)
                )?;
                if let Some(text) = possibly_in_doubt_text(report) {
                    writeln!(out, "{text}")?;
                }
            }
            Ok(())
        }
    }
}
