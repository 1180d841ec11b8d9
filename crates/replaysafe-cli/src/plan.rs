//! The plan of a backfill, as `plan` and `approve` ask for it: their flags, mapped onto
//! [`replaysafe_review::plan::Request`].

use chrono::{DateTime, TimeDelta, Utc};
use replaysafe_core::{EffectKind, RunKind, Window};

pub use replaysafe_review::plan::Plan;

use crate::render::Format;

/// What to plan.
#[derive(Clone, Debug)]
pub struct Request {
    /// Pipeline name.
    pub pipeline: String,
    /// The whole range.
    pub range: Window,
    /// Window length.
    pub every: TimeDelta,
    /// Each run is the instant at the start of its step, as under Airflow 3's cron timetable.
    pub instants: bool,
    /// Run kind of the runs.
    pub kind: RunKind,
    /// When the runs happen.
    pub now: DateTime<Utc>,
    /// Max-age overrides.
    pub max_age: Vec<(EffectKind, TimeDelta)>,
    /// Effect kinds to show.
    pub effects: Vec<EffectKind>,
}

/// Builds the plan; too many windows or a bad max age is an error.
pub fn build(request: &Request) -> anyhow::Result<Plan> {
    let mut planned =
        replaysafe_review::plan::Request::new(&request.pipeline, request.range, request.every)
            .with_instants(request.instants)
            .with_run_kind(request.kind)
            .with_now(request.now)
            .with_effects(request.effects.iter().cloned());
    for (kind, age) in &request.max_age {
        planned = planned.with_max_age(kind.clone(), *age);
    }
    Ok(planned.build()?)
}

/// Renders the plan.
pub fn render(plan: &Plan, format: Format) -> String {
    plan.render(format.into())
}
