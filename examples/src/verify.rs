//! Verification of the data and, beside it, of the side effects: the data checks
//! (reconciliation, uniqueness, freshness, ledger, checkpoint), the effect checks
//! (delivered only for the current window and the opted-in kind) and what the receivers
//! hold, written as a machine-readable summary next to the journal.
//!
//! The effect counts come from the journal, the evidence a reviewer reads, not from
//! what the demo believes it did.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context;
use chrono::TimeDelta;
use replaysafe::alert::{AlertmanagerApi, Matcher};
use replaysafe::journal::{JournalDecision, JournalReader, JournalRecord};
use replaysafe::{EffectKind, Window, rfc3339};

use crate::orders::{Checkpoint, CustomerTotal, OrdersDb, OutboxFacts, Verification};
use crate::pipeline::PIPELINE;
use crate::publish::{FRESHNESS_ALERT, FRESHNESS_TABLE, drop_name};
use crate::receiver::{Received, Route};
use crate::setup::{Mode, Setup};

/// Run one's group of journal records: the current window (both attempts).
const CURRENT: &str = "run1_current_window";
/// Run two's group: the 90-window backfill.
const BACKFILL: &str = "run2_backfill";
/// Run three's group: the backfill with an opt-in.
const OPT_IN: &str = "run3_opt_in_backfill";
/// Every effect kind the pipeline publishes.
const KINDS: [&str; 6] = [
    "email",
    "webhook",
    "file_drop",
    "trigger",
    "metric",
    "alert",
];

/// What the demo ran, to check the evidence against.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Where the effects went.
    pub(crate) mode: Mode,
    /// Run one's window.
    pub(crate) current_window: Window,
    /// Run one's first attempt (failed after its first chunk).
    pub(crate) first_attempt: String,
    /// Run one's second attempt (the retry that resumed).
    pub(crate) retry: String,
    /// The checkpoint the first attempt committed before failing.
    pub(crate) checkpoint_after_failure: String,
    /// The checkpoint the retry resumed after.
    pub(crate) resumed_after: Option<String>,
    /// The batch key of run one's window.
    pub(crate) resumed_batch: String,
    /// Run one's totals, which the usage meter should hold and nothing more.
    pub(crate) current_totals: Vec<CustomerTotal>,
    /// Run two.
    pub(crate) backfill_id: String,
    /// Run two's range of daily windows.
    pub(crate) backfill_range: Window,
    /// Run three.
    pub(crate) opt_in_backfill_id: String,
    /// Run three's range of daily windows.
    pub(crate) opt_in_range: Window,
    /// The kind run three opted in.
    pub(crate) opted_in_kind: EffectKind,
    /// What the outbox table holds after every run.
    pub(crate) outbox: OutboxFacts,
    /// Rows the worker started after run one's simulated crash delivered.
    pub(crate) outbox_delivered_after_crash: u64,
    /// Rows a worker claimed after the replays.
    pub(crate) outbox_claimed_after_replays: u64,
}

/// What the receivers hold after the runs: evidence gathered outside the journal.
#[derive(Debug, Default)]
pub(crate) struct Evidence {
    /// Requests the in-process receiver got.
    pub(crate) received: Vec<Received>,
    /// The in-process usage recorder's counters (local mode).
    pub(crate) in_process_metrics: Option<BTreeMap<String, u64>>,
    /// File names in the partner's inbox folder or SFTP upload directory.
    pub(crate) partner_files: BTreeSet<String>,
    /// `.eml` files written (local mode).
    pub(crate) eml_files: Option<usize>,
    /// The `window` label of every freshness alert of the pipeline's curated table that
    /// Alertmanager holds (`--real`).
    pub(crate) alertmanager_windows: Option<Vec<String>>,
}

impl Evidence {
    /// Reads what the receivers of `setup` hold.
    pub(crate) async fn gather(setup: &Setup) -> anyhow::Result<Self> {
        let alertmanager_windows = match &setup.alertmanager {
            None => None,
            Some(url) => {
                let matchers = [
                    Matcher::equal("alertname", FRESHNESS_ALERT),
                    Matcher::equal("pipeline", PIPELINE),
                    Matcher::equal("table", FRESHNESS_TABLE),
                ];
                let alerts = AlertmanagerApi::new(
                    url,
                    replaysafe::alert::SsrfPolicy::default().allow_host("127.0.0.1"),
                )?
                .alerts(&matchers)
                .await?;
                Some(
                    alerts
                        .into_iter()
                        .filter_map(|alert| alert.labels.get("window").cloned())
                        .collect(),
                )
            }
        };
        Ok(Evidence {
            received: setup.receiver.requests(),
            in_process_metrics: setup.recorder.as_ref().map(|recorder| recorder.counters()),
            partner_files: file_names(&setup.partner_dir)?,
            eml_files: setup
                .mail_dir
                .as_deref()
                .map(file_names)
                .transpose()?
                .map(|names| names.len()),
            alertmanager_windows,
        })
    }
}

fn file_names(dir: &Path) -> anyhow::Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        names.insert(entry?.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

/// Delivered, suppressed and failed records, and attempts begun.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Counts {
    /// Delivered effects.
    pub(crate) delivered: u64,
    /// Suppressed effects.
    pub(crate) suppressed: u64,
    /// Failed attempts.
    pub(crate) failed: u64,
    /// Attempts begun (`attempting` records).
    pub(crate) attempting: u64,
}

impl Counts {
    fn add(&mut self, decision: JournalDecision) {
        match decision {
            JournalDecision::Delivered => self.delivered += 1,
            JournalDecision::Suppressed => self.suppressed += 1,
            JournalDecision::Failed => self.failed += 1,
            JournalDecision::Attempting => self.attempting += 1,
            _ => {}
        }
    }
}

/// Run one's window: how it failed, and where it resumed.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct ResumedWindow {
    /// The failed first attempt.
    pub(crate) failed_run_id: String,
    /// The retry.
    pub(crate) retry_run_id: String,
    /// The checkpoint committed with the first chunk.
    pub(crate) checkpoint_after_failure: String,
    /// Where the retry resumed.
    pub(crate) resumed_after: Option<String>,
    /// The checkpoint now.
    pub(crate) checkpoint: Option<Checkpoint>,
}

/// Requests the in-process receiver got.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub(crate) struct ReceiverCounts {
    /// Partner webhooks.
    pub(crate) webhooks: u64,
    /// Of which the signature verified.
    pub(crate) webhooks_signed_validly: u64,
    /// Airflow DAG runs asked for.
    pub(crate) dag_runs: u64,
    /// Alerts posted (local mode).
    pub(crate) alerts: u64,
}

impl ReceiverCounts {
    fn of(received: &[Received]) -> Self {
        let mut counts = ReceiverCounts::default();
        for request in received {
            match request.route {
                Route::Webhook => {
                    counts.webhooks += 1;
                    counts.webhooks_signed_validly +=
                        u64::from(request.signature_valid == Some(true));
                }
                Route::Trigger => counts.dag_runs += 1,
                Route::Alert => counts.alerts += 1,
            }
        }
        counts
    }
}

/// One named check.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Check {
    /// What is checked.
    pub(crate) name: String,
    /// Whether it held.
    pub(crate) ok: bool,
    /// What was found.
    pub(crate) detail: String,
}

/// `target/demo/summary.json`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Summary {
    /// `local` or `real`.
    pub(crate) mode: &'static str,
    /// The journal.
    pub(crate) journal: String,
    /// Run one's window.
    pub(crate) current_window: Window,
    /// The data checks: rows, sums, duplicate keys, stale rows, ledger.
    #[serde(flatten)]
    pub(crate) data: Verification,
    /// Run one's failure and resume.
    pub(crate) resumed_window: ResumedWindow,
    /// Journal records per run (`run1_current_window`, `run2_backfill`,
    /// `run3_opt_in_backfill`) and kind.
    pub(crate) effects: BTreeMap<&'static str, BTreeMap<String, Counts>>,
    /// Journal records per kind, every run.
    pub(crate) effects_total: BTreeMap<String, Counts>,
    /// What the in-process receiver got.
    pub(crate) receiver: ReceiverCounts,
    /// The in-process usage recorder's counters (local mode).
    pub(crate) in_process_metrics: Option<BTreeMap<String, u64>>,
    /// Files in the partner's inbox or upload directory named like the pipeline's drops.
    pub(crate) partner_files: Vec<String>,
    /// What the outbox table holds.
    pub(crate) outbox: OutboxFacts,
    /// Every check.
    pub(crate) checks: Vec<Check>,
    /// Whether every check held.
    pub(crate) ok: bool,
}

/// The journal, counted per run group and kind.
#[derive(Debug, Default)]
struct Tally {
    effects: BTreeMap<&'static str, BTreeMap<String, Counts>>,
    effects_total: BTreeMap<String, Counts>,
    /// (group, kind) → windows with a suppressed record.
    suppressed_windows: BTreeMap<(&'static str, String), BTreeSet<Window>>,
    /// Deliveries that are neither the current window's nor opted in.
    unexpected_deliveries: Vec<String>,
    /// Deliveries of the opted-in kind in run three without an opt-in on the record.
    opt_in_deliveries_without_opt_in: u64,
}

impl Tally {
    fn read(plan: &Plan, journal: &Path) -> anyhow::Result<Self> {
        let mut tally = Tally::default();
        for record in JournalReader::open(journal)? {
            tally.add(plan, record?)?;
        }
        Ok(tally)
    }

    fn add(&mut self, plan: &Plan, record: JournalRecord) -> anyhow::Result<()> {
        let group = group_of(plan, &record);
        let kind = record.effect.kind;
        self.effects
            .entry(group)
            .or_default()
            .entry(kind.clone())
            .or_default()
            .add(record.decision);
        self.effects_total
            .entry(kind.clone())
            .or_default()
            .add(record.decision);
        let window = Window::new(record.window.start, record.window.end)?;
        match record.decision {
            JournalDecision::Suppressed => {
                self.suppressed_windows
                    .entry((group, kind))
                    .or_default()
                    .insert(window);
            }
            JournalDecision::Delivered => {
                let current = group == CURRENT && window == plan.current_window;
                let opted_in = group == OPT_IN && kind == plan.opted_in_kind.as_str();
                if opted_in && record.opt_in.is_none() {
                    self.opt_in_deliveries_without_opt_in += 1;
                }
                if !current && !opted_in {
                    self.unexpected_deliveries
                        .push(format!("{kind} in {}", record.run_id));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn delivered(&self, group: &str, kind: &str) -> u64 {
        self.effects
            .get(group)
            .and_then(|kinds| kinds.get(kind))
            .map_or(0, |counts| counts.delivered)
    }

    fn suppressed_windows(&self, group: &'static str, kind: &str) -> usize {
        self.suppressed_windows
            .get(&(group, kind.to_owned()))
            .map_or(0, BTreeSet::len)
    }
}

/// The group of a journal record: which of the demo's three runs it belongs to.
fn group_of(plan: &Plan, record: &JournalRecord) -> &'static str {
    match record.backfill_id.as_deref() {
        Some(id) if id == plan.backfill_id => BACKFILL,
        Some(id) if id == plan.opt_in_backfill_id => OPT_IN,
        Some(_) => "other",
        None if record.run_id == plan.first_attempt || record.run_id == plan.retry => CURRENT,
        None => "other",
    }
}

/// The checks, in order.
#[derive(Debug, Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn check(&mut self, name: impl Into<String>, ok: bool, detail: impl Into<String>) {
        self.0.push(Check {
            name: name.into(),
            ok,
            detail: detail.into(),
        });
    }
}

/// Reads the journal, the database and the evidence, and checks them against `plan`.
pub(crate) fn summarize(
    plan: &Plan,
    journal: &Path,
    db: &OrdersDb,
    evidence: Evidence,
) -> anyhow::Result<Summary> {
    let tally = Tally::read(plan, journal)?;
    let data = db.verify()?;
    let resumed_window = ResumedWindow {
        failed_run_id: plan.first_attempt.clone(),
        retry_run_id: plan.retry.clone(),
        checkpoint_after_failure: plan.checkpoint_after_failure.clone(),
        resumed_after: plan.resumed_after.clone(),
        checkpoint: db.checkpoint(&plan.resumed_batch)?,
    };
    let receiver = ReceiverCounts::of(&evidence.received);
    let failed_runs: Vec<String> = db
        .failed_runs()?
        .into_iter()
        .map(|(run_id, _)| run_id)
        .collect();

    let mut checks = Checks::default();
    check_data(&mut checks, plan, &data, &resumed_window, &failed_runs);
    check_effects(&mut checks, plan, &tally)?;
    check_receivers(&mut checks, plan, &evidence, receiver)?;
    check_outbox(&mut checks, plan, &evidence);
    let partner_files = evidence
        .partner_files
        .into_iter()
        .filter(|name| name.contains("daily_orders_"))
        .collect();

    let ok = checks.0.iter().all(|check| check.ok);
    Ok(Summary {
        mode: match plan.mode {
            Mode::Local => "local",
            Mode::Real => "real",
        },
        journal: journal.display().to_string(),
        current_window: plan.current_window,
        data,
        resumed_window,
        effects: tally.effects,
        effects_total: tally.effects_total,
        receiver,
        in_process_metrics: evidence.in_process_metrics,
        partner_files,
        outbox: plan.outbox.clone(),
        checks: checks.0,
        ok,
    })
}

/// The data, as a backfill's acceptance checks verify it.
fn check_data(
    checks: &mut Checks,
    plan: &Plan,
    data: &Verification,
    resumed: &ResumedWindow,
    failed_runs: &[String],
) {
    checks.check(
        "curated table reconciles with the source",
        data.curated_rows == data.source_orders
            && data.curated_amount_cents == data.source_amount_cents,
        format!(
            "{} rows for {} source orders; {} cents for {} cents",
            data.curated_rows,
            data.source_orders,
            data.curated_amount_cents,
            data.source_amount_cents
        ),
    );
    checks.check(
        "no duplicate business keys",
        data.duplicate_business_keys == 0,
        data.duplicate_business_keys.to_string(),
    );
    checks.check(
        "no row older than its source",
        data.stale_rows == 0,
        data.stale_rows.to_string(),
    );
    checks.check(
        "every ledger run has a terminal status",
        data.ledger_runs_without_terminal_status == 0,
        format!(
            "{} runs, {} without",
            data.ledger_runs, data.ledger_runs_without_terminal_status
        ),
    );
    checks.check(
        "one failed run: the current window's first attempt",
        failed_runs == [plan.first_attempt.as_str()],
        failed_runs.join(", "),
    );
    let checkpoint = resumed.checkpoint.as_ref();
    checks.check(
        "the retry resumed from the committed checkpoint and completed",
        resumed.resumed_after.as_deref() == Some(plan.checkpoint_after_failure.as_str())
            && checkpoint.is_some_and(|c| c.status == "complete"),
        format!(
            "failed at {}, resumed after {}, now {}",
            plan.checkpoint_after_failure,
            resumed.resumed_after.as_deref().unwrap_or("(start)"),
            checkpoint.map_or("none".to_owned(), |c| format!(
                "{} {}",
                c.last_committed_key, c.status
            )),
        ),
    );
}

/// The effects, from the journal.
fn check_effects(checks: &mut Checks, plan: &Plan, tally: &Tally) -> anyhow::Result<()> {
    checks.check(
        "deliveries only for the current window and the opted-in kind",
        tally.unexpected_deliveries.is_empty() && tally.opt_in_deliveries_without_opt_in == 0,
        if tally.unexpected_deliveries.is_empty() {
            "none other".to_owned()
        } else {
            tally.unexpected_deliveries.join("; ")
        },
    );

    // One email per customer and one of everything else; in the local mode the metrics
    // bridge forwards to the recorder without journaling (checked on the recorder).
    let expected: Vec<(&str, u64)> = KINDS
        .iter()
        .filter(|kind| plan.mode == Mode::Real || **kind != "metric")
        .map(|kind| {
            (
                *kind,
                if *kind == "email" {
                    plan.current_totals.len() as u64
                } else {
                    1
                },
            )
        })
        .collect();
    let found: Vec<String> = expected
        .iter()
        .map(|(kind, _)| format!("{kind} {}", tally.delivered(CURRENT, kind)))
        .collect();
    checks.check(
        "the current window delivered every effect",
        expected
            .iter()
            .all(|(kind, count)| tally.delivered(CURRENT, kind) == *count),
        found.join(", "),
    );

    let day = TimeDelta::days(1);
    for (group, range, opted_in) in [
        (BACKFILL, plan.backfill_range, None),
        (OPT_IN, plan.opt_in_range, Some(plan.opted_in_kind.as_str())),
    ] {
        let windows = range.split(day)?.count();
        let gated: Vec<&str> = KINDS
            .iter()
            .copied()
            .filter(|kind| Some(*kind) != opted_in)
            .collect();
        let short: Vec<String> = gated
            .iter()
            .filter(|kind| tally.suppressed_windows(group, kind) != windows)
            .map(|kind| {
                format!(
                    "{kind}: {} of {windows} windows",
                    tally.suppressed_windows(group, kind)
                )
            })
            .collect();
        let delivered: u64 = gated.iter().map(|kind| tally.delivered(group, kind)).sum();
        let name = match opted_in {
            None => format!("{group}: every effect of every window suppressed and journaled"),
            Some(kind) => format!("{group}: every effect but {kind} suppressed and journaled"),
        };
        let detail = if short.is_empty() {
            format!("{windows} windows × {} kinds", gated.len())
        } else {
            short.join(", ")
        };
        checks.check(name, short.is_empty() && delivered == 0, detail);
        if let Some(kind) = opted_in {
            checks.check(
                format!("{group}: {kind} delivered once per window, each with its opt-in"),
                tally.delivered(group, kind) == windows as u64
                    && tally.opt_in_deliveries_without_opt_in == 0,
                format!("{} of {windows}", tally.delivered(group, kind)),
            );
        }
    }

    let failed: u64 = tally
        .effects_total
        .values()
        .map(|counts| counts.failed)
        .sum();
    checks.check(
        "no failed delivery attempt",
        failed == 0,
        failed.to_string(),
    );
    Ok(())
}

/// The outbox: the current window's webhook committed with its totals and delivered once
/// by a worker after the simulated crash; one suppressed row per backfilled window and
/// key, restaged and never added by the replay of run three, never claimed.
fn check_outbox(checks: &mut Checks, plan: &Plan, evidence: &Evidence) {
    let outbox = &plan.outbox;
    let webhook_keys: Vec<&str> = evidence
        .received
        .iter()
        .filter(|r| r.route == Route::Webhook)
        .filter_map(|r| r.idempotency_key.as_deref())
        .map(|key| key.trim_matches('"'))
        .collect();
    let current = outbox.current_row.as_ref();
    checks.check(
        "the current window's webhook, committed with its totals, was delivered from the outbox after the simulated crash, once, with its row's key",
        plan.outbox_delivered_after_crash == 1
            && current.is_some_and(|(key, status, attempts)| {
                status == "delivered" && *attempts == 1 && webhook_keys == [key.as_str()]
            }),
        format!(
            "delivered after the crash: {}; row: {current:?}; keys received: {webhook_keys:?}",
            plan.outbox_delivered_after_crash
        ),
    );
    let windows = plan
        .backfill_range
        .split(TimeDelta::days(1))
        .map(Iterator::count)
        .unwrap_or(0) as u64;
    checks.check(
        "the backfill staged one suppressed outbox row per window, and run three's replay of three of them restaged those rows without adding any",
        outbox.suppressed_windows == windows
            && outbox.distinct_suppressed_windows == windows
            && outbox.rows == windows + 1,
        format!(
            "{} suppressed rows over {} windows of {windows}; {} rows in all",
            outbox.suppressed_windows, outbox.distinct_suppressed_windows, outbox.rows
        ),
    );
    let open: u64 = outbox
        .by_status
        .iter()
        .filter(|(status, _)| !matches!(status.as_str(), "delivered" | "suppressed"))
        .map(|(_, rows)| rows)
        .sum();
    checks.check(
        "no worker claimed a suppressed row",
        plan.outbox_claimed_after_replays == 0 && open == 0,
        format!(
            "claimed after the replays: {}; rows by status: {:?}",
            plan.outbox_claimed_after_replays, outbox.by_status
        ),
    );
}

/// What the receivers got: the in-process receiver, the recorder, the partner's inbox,
/// the `.eml` folder, Alertmanager.
fn check_receivers(
    checks: &mut Checks,
    plan: &Plan,
    evidence: &Evidence,
    receiver: ReceiverCounts,
) -> anyhow::Result<()> {
    checks.check(
        "the partner got one webhook, signed with its secret",
        receiver.webhooks == 1 && receiver.webhooks_signed_validly == 1,
        format!(
            "{} received, {} valid",
            receiver.webhooks, receiver.webhooks_signed_validly
        ),
    );
    checks.check(
        "downstream triggered exactly once",
        receiver.dag_runs == 1,
        format!("DAG runs: {}", receiver.dag_runs),
    );
    if plan.mode == Mode::Local {
        checks.check(
            "one freshness alert, for the current window",
            receiver.alerts == 1,
            format!("alerts: {}", receiver.alerts),
        );
        let expected: BTreeMap<String, u64> = plan
            .current_totals
            .iter()
            .flat_map(|total| {
                let customer = format!("{{customer={:?}}}", total.customer);
                [
                    (format!("billed_orders_total{customer}"), total.orders),
                    (
                        format!("billed_amount_cents_total{customer}"),
                        total.amount_cents.max(0) as u64,
                    ),
                ]
            })
            .collect();
        let found = evidence.in_process_metrics.clone().unwrap_or_default();
        checks.check(
            "billed usage holds the current window only",
            found == expected,
            format!(
                "{} series, {} orders",
                found.len(),
                plan.current_totals.iter().map(|t| t.orders).sum::<u64>()
            ),
        );
    }
    if let Some(eml) = evidence.eml_files {
        checks.check(
            "one .eml file per customer",
            eml == plan.current_totals.len(),
            format!("files: {eml}"),
        );
    }

    let day = TimeDelta::days(1);
    let backfill_windows: Vec<Window> = plan.backfill_range.split(day)?.collect();
    if let Some(labels) = &evidence.alertmanager_windows {
        let label =
            |window: &Window| format!("{}/{}", rfc3339(window.start()), rfc3339(window.end()));
        let current = labels.contains(&label(&plan.current_window));
        let replayed = backfill_windows
            .iter()
            .filter(|window| labels.contains(&label(window)))
            .count();
        checks.check(
            "Alertmanager holds the current window's freshness alert, none of a backfilled window",
            current && replayed == 0,
            format!(
                "current window: {}, backfilled windows: {replayed}",
                if current { "yes" } else { "no" }
            ),
        );
    }

    // The partner's inbox: the current window's file and the opted-in ones, nothing else
    // of the backfill, and no temporary file left behind.
    let expected: BTreeSet<String> = std::iter::once(plan.current_window)
        .chain(plan.opt_in_range.split(day)?)
        .map(|w| drop_name(&w))
        .collect();
    let files = &evidence.partner_files;
    let missing = expected
        .iter()
        .filter(|name| !files.contains(*name))
        .count();
    let from_backfill = backfill_windows
        .iter()
        .map(drop_name)
        .filter(|name| !expected.contains(name) && files.contains(name))
        .count();
    let temporary = files
        .iter()
        .filter(|name| name.starts_with(".daily_orders_"))
        .count();
    checks.check(
        "the partner holds the current and the opted-in windows' files only, none half-written",
        missing == 0 && from_backfill == 0 && temporary == 0,
        format!(
            "{} of {} expected, {from_backfill} from the backfill, {temporary} temporary",
            expected.len() - missing,
            expected.len()
        ),
    );
    Ok(())
}
