//! A run's context as data, for an effect kept to be sent later (an outbox row): everything
//! the gate needs to decide again, so that the deciding process's own environment cannot
//! make a replay's effect look current.

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::{
    Clock, EffectKind, Error, Mode, OptIn, RecencyPolicy, ReplayContext, RunKind, TrustedApprovers,
    UpstreamRun, Window, rfc3339,
};

/// The context of one effect as text and numbers: what an outbox row keeps, column by
/// column, to run the gate again at delivery.
///
/// [`ReplayContext::store`] makes one; [`StoredContext::restore`] rebuilds the context,
/// taking only the clock and the trusted approvers from the caller: run kind, flags,
/// window, lineage, recency and approval all come from the data. The approval is the
/// whole document (`opt_in`, a `replaysafe-opt-in/1` file with its signature), checked
/// again by the gate where it lifts anything; free text never is one.
///
/// Its fields are the outbox table's context columns, one to one, so a store can build it
/// from a row: a new field is a new column, and a breaking change by design.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredContext {
    /// Pipeline.
    pub pipeline: String,
    /// Run id.
    pub run_id: String,
    /// Run kind (`scheduled`, …, `unknown`).
    pub run_kind: String,
    /// The explicit replay flag, when one was given.
    pub replay_flag: Option<bool>,
    /// Backfill id.
    pub backfill_id: Option<String>,
    /// Window start, RFC 3339 (the placeholder's when `window_known` is false).
    pub window_start: String,
    /// Window end, RFC 3339.
    pub window_end: String,
    /// Whether a source gave the window; without one every effect is suppressed.
    pub window_known: bool,
    /// The run's logical date, RFC 3339.
    pub logical_date: Option<String>,
    /// The orchestrator's exported interval, start and end, both or neither.
    pub run_interval_start: Option<String>,
    /// See `run_interval_start`.
    pub run_interval_end: Option<String>,
    /// The upstream runs, as the JSON array `REPLAYSAFE_UPSTREAM` takes.
    pub upstream: Option<String>,
    /// `live` or `dry-run`.
    pub mode: String,
    /// What disagreed, when the sources did (the context then never delivers).
    pub conflict: Option<String>,
    /// The effect kind's max age, in milliseconds.
    pub max_age_ms: i64,
    /// The clock-skew allowance, in milliseconds.
    pub clock_skew_ms: i64,
    /// The whole approval document that may lift the gate, if any.
    pub opt_in: Option<String>,
}

impl ReplayContext {
    /// This context as data, for an effect of `kind`, with `opt_in` (the opt-in that lifted
    /// the gate, if any) kept as its whole document.
    ///
    /// An opt-in without a file form (no pipeline, or no backfill id or run-id pattern)
    /// cannot be kept, since only a document can be checked again: [`Error::Missing`].
    pub fn store(&self, kind: &EffectKind, opt_in: Option<&OptIn>) -> Result<StoredContext, Error> {
        let upstream = (!self.upstream().is_empty()).then(|| {
            serde_json::Value::Array(self.upstream().iter().map(UpstreamRun::to_json).collect())
                .to_string()
        });
        Ok(StoredContext {
            pipeline: self.pipeline().to_owned(),
            run_id: self.run_id().as_str().to_owned(),
            run_kind: self.run_kind().as_str().to_owned(),
            replay_flag: self.replay_flag(),
            backfill_id: self.backfill_id().map(str::to_owned),
            window_start: rfc3339(self.window().start()),
            window_end: rfc3339(self.window().end()),
            window_known: self.has_window(),
            logical_date: self.logical_date().map(rfc3339),
            run_interval_start: self.run_interval().map(|w| rfc3339(w.start())),
            run_interval_end: self.run_interval().map(|w| rfc3339(w.end())),
            upstream,
            mode: self.mode().as_str().to_owned(),
            conflict: self.conflict().map(|note| note.into_owned()),
            max_age_ms: self.recency().max_age(kind).num_milliseconds(),
            clock_skew_ms: self.recency().clock_skew().num_milliseconds(),
            opt_in: opt_in.map(OptIn::to_file_json).transpose()?,
        })
    }
}

impl StoredContext {
    /// Rebuilds the context of an effect of `kind`, reading time from `clock` and trusting
    /// only approvals signed by `trusted`, when given. Anything unreadable is an error
    /// naming the field.
    pub fn restore(
        &self,
        kind: &EffectKind,
        clock: Arc<dyn Clock>,
        trusted: Option<&TrustedApprovers>,
    ) -> Result<ReplayContext, Error> {
        let time = |field: &'static str, text: &str| -> Result<DateTime<Utc>, Error> {
            crate::parse_rfc3339(field, text)
        };
        let inverted = |field: &'static str| {
            move |_| Error::invalid(field, "", "the window ends before it starts")
        };
        let window = Window::from_bounds(
            time("window_start", &self.window_start)?,
            time("window_end", &self.window_end)?,
        )
        .map_err(inverted("window_end"))?;
        let recency = RecencyPolicy::default()
            .with_max_age(kind.clone(), TimeDelta::milliseconds(self.max_age_ms))?
            .with_clock_skew(TimeDelta::milliseconds(self.clock_skew_ms))?;
        let mut builder = ReplayContext::builder()
            .pipeline(&self.pipeline)
            .run_id(&self.run_id)
            .run_kind(RunKind::from_str(&self.run_kind)?)
            .mode(Mode::from_str(&self.mode)?)
            .recency(recency)
            .clock(clock);
        if self.window_known {
            builder = builder.window(window);
        }
        if let Some(flag) = self.replay_flag {
            builder = builder.replay_flag(flag);
        }
        if let Some(id) = &self.backfill_id {
            builder = builder.backfill_id(id);
        }
        if let Some(logical) = &self.logical_date {
            builder = builder.logical_date(time("logical_date", logical)?);
        }
        match (&self.run_interval_start, &self.run_interval_end) {
            (Some(start), Some(end)) => {
                let interval = Window::from_bounds(
                    time("run_interval_start", start)?,
                    time("run_interval_end", end)?,
                )
                .map_err(inverted("run_interval_end"))?;
                builder = builder.run_interval(interval);
            }
            (None, None) => {}
            _ => {
                return Err(Error::malformed(
                    "run_interval_end",
                    "run_interval_start and run_interval_end are set together or not at all",
                ));
            }
        }
        if let Some(upstream) = &self.upstream {
            builder = builder.upstream(UpstreamRun::parse_list("upstream", upstream)?);
        }
        if let Some(note) = &self.conflict {
            builder = builder.conflict(note);
        }
        if let Some(document) = &self.opt_in {
            builder = builder.opt_in(OptIn::from_file_json(document)?);
        }
        if let Some(trusted) = trusted {
            builder = builder.trusted_approvers(trusted.clone());
        }
        builder.build()
    }
}
