//! The gate: whether an effect may leave the process, and every reason why.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{EffectKind, OptIn, ReplayContext, RunKind};

/// Why the gate decided as it did. Journaled as snake_case words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// The window is recent and the run is not a replay.
    CurrentWindow,
    /// The run kind is backfill, replay or rebuild.
    ReplayRun,
    /// The explicit replay flag is set.
    ReplayFlag,
    /// `now - window.end` exceeds the max age of the effect kind.
    StaleWindow,
    /// The run kind could not be established.
    UnknownContext,
    /// The context's sources disagreed (for instance Airflow's run type and run-id prefix,
    /// or `REPLAYSAFE_RUN_KIND` and Airflow's run), or the window starts after the run's
    /// logical date (a window from the run's future).
    ConflictingContext,
    /// The window ends in the future, beyond the clock-skew allowance.
    FutureWindow,
    /// The process runs in dry-run mode.
    DryRun,
    /// An opt-in enabled delivery despite the replay reasons also listed.
    OptIn,
    /// An opt-in covered the effect but has expired; it enabled nothing.
    OptInExpired,
}

impl Reason {
    /// The snake_case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::CurrentWindow => "current_window",
            Reason::ReplayRun => "replay_run",
            Reason::ReplayFlag => "replay_flag",
            Reason::StaleWindow => "stale_window",
            Reason::UnknownContext => "unknown_context",
            Reason::ConflictingContext => "conflicting_context",
            Reason::FutureWindow => "future_window",
            Reason::DryRun => "dry_run",
            Reason::OptIn => "opt_in",
            Reason::OptInExpired => "opt_in_expired",
        }
    }

    /// Whether an opt-in may lift this reason.
    pub fn is_liftable(self) -> bool {
        matches!(
            self,
            Reason::ReplayRun | Reason::ReplayFlag | Reason::StaleWindow
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The gate's verdict on one effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    deliver: bool,
    reasons: Vec<Reason>,
    opt_in: Option<OptIn>,
}

impl Decision {
    /// Whether the verdict lets the effect be delivered.
    pub fn delivers(&self) -> bool {
        self.deliver
    }

    /// Whether the verdict suppresses the effect.
    pub fn suppresses(&self) -> bool {
        !self.deliver
    }

    /// Every reason that applies, in a stable order.
    pub fn reasons(&self) -> &[Reason] {
        &self.reasons
    }

    /// The opt-in that enabled delivery, or that covered the effect but had expired.
    pub fn opt_in(&self) -> Option<&OptIn> {
        self.opt_in.as_ref()
    }
}

impl ReplayContext {
    /// Decides whether an effect of `kind` to `target` may be delivered now.
    ///
    /// **Architecture Invariant:** suppression is the default for anything that is not
    /// a current run. Returns every reason that applies, not just the first:
    /// `dry_run`, `unknown_context`, `conflicting_context`, `future_window` (never liftable);
    /// `replay_run`, `replay_flag`, `stale_window` (liftable by an unexpired opt-in that
    /// covers the kind and target, which adds `opt_in`; an expired one adds `opt_in_expired`).
    /// With none of these the decision is to deliver, with `current_window`.
    ///
    /// Recency is measured from [`ReplayContext::recency_end`]: the window's end, or the
    /// end of the orchestrator's exported interval when that is older.
    pub fn decide(&self, kind: &EffectKind, target: &str) -> Decision {
        let now = self.now();
        let mut reasons = Vec::new();
        if self.is_dry_run() {
            reasons.push(Reason::DryRun);
        }
        if self.run_kind() == RunKind::Unknown {
            reasons.push(Reason::UnknownContext);
        }
        if self.is_conflicting() {
            reasons.push(Reason::ConflictingContext);
        }
        if self.is_future(now) {
            reasons.push(Reason::FutureWindow);
        }
        if self.run_kind().is_replay() {
            reasons.push(Reason::ReplayRun);
        }
        if self.replay_flag() == Some(true) {
            reasons.push(Reason::ReplayFlag);
        }
        if self.recency().is_stale(kind, self.recency_end(), now) {
            reasons.push(Reason::StaleWindow);
        }

        if reasons.is_empty() {
            return Decision {
                deliver: true,
                reasons: vec![Reason::CurrentWindow],
                opt_in: None,
            };
        }
        if !reasons.iter().all(|reason| reason.is_liftable()) {
            return Decision {
                deliver: false,
                reasons,
                opt_in: None,
            };
        }

        let covering = self
            .opt_ins()
            .iter()
            .filter(|opt_in| opt_in.covers(kind, target));
        let mut expired = None;
        for opt_in in covering {
            if opt_in.is_expired(now) {
                expired.get_or_insert(opt_in);
            } else {
                reasons.push(Reason::OptIn);
                return Decision {
                    deliver: true,
                    reasons,
                    opt_in: Some(opt_in.clone()),
                };
            }
        }
        if let Some(expired) = expired {
            reasons.push(Reason::OptInExpired);
            return Decision {
                deliver: false,
                reasons,
                opt_in: Some(expired.clone()),
            };
        }
        Decision {
            deliver: false,
            reasons,
            opt_in: None,
        }
    }
}
