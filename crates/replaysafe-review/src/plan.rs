//! [`Plan`]: the windows of a backfill and what the gate would do with each effect kind,
//! before it runs.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use replaysafe_core::{EffectKind, FixedClock, RecencyPolicy, ReplayContext, RunKind, Window};

use crate::Error;
use crate::error::Repr;
use crate::render::{Format, Table, time_text};

/// Most windows a plan lists.
pub const MAX_WINDOWS: usize = 100_000;

/// What to plan: a pipeline's range split into runs, the runs' kind, and when they run.
///
/// Unless told otherwise, the runs are backfill runs of whole windows, evaluated now with
/// the default max ages, for every built-in effect kind.
#[derive(Clone, Debug)]
pub struct Request {
    pipeline: String,
    range: Window,
    every: TimeDelta,
    instants: bool,
    kind: RunKind,
    now: DateTime<Utc>,
    max_age: Vec<(EffectKind, TimeDelta)>,
    effects: Vec<EffectKind>,
}

impl Request {
    /// The runs of `pipeline` over `range`, one window of length `every` each (the last
    /// one short when `every` does not divide the range).
    pub fn new(pipeline: impl Into<String>, range: Window, every: TimeDelta) -> Self {
        Request {
            pipeline: pipeline.into(),
            range,
            every,
            instants: false,
            kind: RunKind::Backfill,
            now: Utc::now(),
            max_age: Vec::new(),
            effects: EffectKind::BUILT_IN.to_vec(),
        }
    }

    /// Each run is the instant at the start of its step, as under Airflow 3's cron
    /// timetable, when `instants`; a window otherwise.
    pub fn with_instants(self, instants: bool) -> Self {
        Request { instants, ..self }
    }

    /// The run kind of the runs (default: backfill).
    pub fn with_run_kind(self, kind: RunKind) -> Self {
        Request { kind, ..self }
    }

    /// When the runs happen, which recency is measured from (default: when the request was made).
    pub fn with_now(self, now: DateTime<Utc>) -> Self {
        Request { now, ..self }
    }

    /// The max age of `kind` instead of its default (repeatable; the last one of a kind counts).
    pub fn with_max_age(mut self, kind: EffectKind, max_age: TimeDelta) -> Self {
        self.max_age.push((kind, max_age));
        self
    }

    /// The effect kinds to show, in this order (default: every built-in kind).
    pub fn with_effects(self, effects: impl IntoIterator<Item = EffectKind>) -> Self {
        Request {
            effects: effects.into_iter().collect(),
            ..self
        }
    }

    /// Asks the gate about every window and effect kind.
    ///
    /// An error when a max age is negative, when `every` is not positive, or when the
    /// range splits into more than [`MAX_WINDOWS`] windows.
    pub fn build(&self) -> Result<Plan, Error> {
        build(self).map_err(Error)
    }
}

/// The gate's answer for one kind in one window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Cell {
    /// Effect kind.
    pub kind: String,
    /// Whether it would be delivered.
    pub deliver: bool,
    /// Every reason.
    pub reasons: Vec<String>,
}

/// One window of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PlannedWindow {
    /// Start.
    pub start: DateTime<Utc>,
    /// End (exclusive).
    pub end: DateTime<Utc>,
    /// Per effect kind.
    pub effects: Vec<Cell>,
}

/// The plan, as [`Request::build`] makes it. Its JSON form ([`Format::Json`]) is its
/// `Serialize` form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Plan {
    /// Pipeline.
    pub pipeline: String,
    /// Run kind.
    pub run_kind: String,
    /// Window length, as given.
    pub every: String,
    /// Evaluation time.
    pub now: DateTime<Utc>,
    /// Whether the range is a whole number of steps (otherwise the last window is short).
    pub aligned: bool,
    /// Whether each run is an instant rather than a window.
    pub instants: bool,
    /// The windows.
    pub windows: Vec<PlannedWindow>,
    /// Windows that would deliver, per kind.
    pub deliver_counts: Vec<(String, u64)>,
}

/// Builds the plan; too many windows or a bad max age is an error.
fn build(request: &Request) -> Result<Plan, Repr> {
    let mut recency = RecencyPolicy::default();
    for (kind, age) in &request.max_age {
        recency = recency.with_max_age(kind.clone(), *age)?;
    }
    let windows: Vec<Window> = request
        .range
        .split(request.every)?
        .map(|window| {
            if request.instants {
                Window::instant(window.start())
            } else {
                window
            }
        })
        .take(MAX_WINDOWS + 1)
        .collect();
    if windows.len() > MAX_WINDOWS {
        return Err(Repr::TooManyWindows {
            every: crate::render::duration_text(request.every),
            max: MAX_WINDOWS,
        });
    }
    let base = ReplayContext::builder()
        .pipeline(&request.pipeline)
        .run_id(format!("plan__{}", request.kind))
        .run_kind(request.kind)
        .window(request.range)
        .recency(recency)
        .clock(Arc::new(FixedClock::new(request.now)))
        .build()?;
    let mut deliver_counts: Vec<(String, u64)> =
        request.effects.iter().map(|k| (k.to_string(), 0)).collect();
    let planned = windows
        .into_iter()
        .map(|window| {
            let cx = base.with_window(window);
            let effects = request
                .effects
                .iter()
                .zip(deliver_counts.iter_mut())
                .map(|(kind, (_, count))| {
                    let decision = cx.decide(kind, "*");
                    if decision.delivers() {
                        *count += 1;
                    }
                    Cell {
                        kind: kind.to_string(),
                        deliver: decision.delivers(),
                        reasons: decision
                            .reasons()
                            .iter()
                            .map(|r| r.as_str().to_owned())
                            .collect(),
                    }
                })
                .collect();
            PlannedWindow {
                start: window.start(),
                end: window.end(),
                effects,
            }
        })
        .collect();
    Ok(Plan {
        pipeline: request.pipeline.clone(),
        run_kind: request.kind.to_string(),
        every: crate::render::duration_text(request.every),
        now: request.now,
        aligned: request.range.is_aligned_to(request.every),
        instants: request.instants,
        windows: planned,
        deliver_counts,
    })
}

impl Plan {
    /// The plan as text tables, Markdown or JSON: a summary line (how many windows deliver
    /// each kind), then a table of every window and what the gate does with each kind.
    pub fn render(&self, format: Format) -> String {
        render(self, format)
    }
}

fn render(plan: &Plan, format: Format) -> String {
    if format == Format::Json {
        return serde_json::to_string_pretty(plan).unwrap_or_default() + "\n";
    }
    let mut out = String::new();
    if format == Format::Markdown {
        out.push_str("## replaysafe plan\n\n");
    }
    let kinds: Vec<&str> = plan
        .deliver_counts
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    let total = plan.windows.len() as u64;
    let summary: Vec<String> = plan
        .deliver_counts
        .iter()
        .map(|(kind, delivered)| {
            format!(
                "{kind} {delivered} delivered / {} suppressed",
                total - delivered
            )
        })
        .collect();
    let runs = if plan.instants {
        format!("{total} instants every {}", plan.every)
    } else {
        format!("{total} windows of {}", plan.every)
    };
    out.push_str(&format!(
        "{} run of {} over {runs}, evaluated at {}: {}\n\n",
        plan.run_kind,
        plan.pipeline,
        replaysafe_core::rfc3339(plan.now),
        summary.join("; ")
    ));
    let mut header = vec!["window"];
    header.extend(kinds.iter().copied());
    let mut table = Table::new("windows", header);
    for window in &plan.windows {
        let mut row = vec![if window.start == window.end {
            time_text(window.start)
        } else {
            format!("{} → {}", time_text(window.start), time_text(window.end))
        }];
        row.extend(window.effects.iter().map(|cell| {
            if cell.deliver {
                "deliver".to_owned()
            } else {
                format!("suppress ({})", cell.reasons.join(", "))
            }
        }));
        table.row(row);
    }
    out.push_str(&table.render(format));
    out
}
