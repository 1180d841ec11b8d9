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
    /// An opt-in covered the effect's kind and target but names another pipeline, another
    /// backfill or a run-id pattern this run does not match; it enabled nothing.
    OptInOutOfScope,
    /// Trusted approvers are configured and an opt-in that covered the effect carries no
    /// signature; it enabled nothing.
    OptInUnsigned,
    /// An opt-in that covered the effect carries a signature that does not match what it
    /// says (it was changed after signing); it enabled nothing.
    OptInBadSignature,
    /// An opt-in that covered the effect is signed by a key that is not among the trusted
    /// approvers; it enabled nothing.
    OptInUntrusted,
    /// A run that caused this one (`REPLAYSAFE_UPSTREAM`) is a replay: a backfill's
    /// downstream runs deliver nothing. Only an opt-in that names this pipeline lifts it.
    UpstreamReplay,
    /// No source gave the run a data window (no explicit window, no orchestrator interval
    /// or logical date, no upstream window): the effect cannot be keyed or judged recent.
    /// The journal's note says what to set. Never liftable.
    UnknownWindow,
    /// The journal's ledger records a delivery of this key already (a retry, a cleared
    /// task, a re-run of the window, another worker); the note names the run and the time.
    /// An audited opt-in that covers the effect lifts it.
    AlreadyDelivered,
    /// An attempt of this key began and no outcome is recorded, and the client's receiver
    /// does not de-duplicate by key (email, Slack, counters): not sent again until an
    /// audited opt-in that covers the effect lifts it.
    InDoubt,
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
            Reason::OptInOutOfScope => "opt_in_out_of_scope",
            Reason::OptInUnsigned => "opt_in_unsigned",
            Reason::OptInBadSignature => "opt_in_bad_signature",
            Reason::OptInUntrusted => "opt_in_untrusted",
            Reason::UpstreamReplay => "upstream_replay",
            Reason::UnknownWindow => "unknown_window",
            Reason::AlreadyDelivered => "already_delivered",
            Reason::InDoubt => "in_doubt",
        }
    }

    /// Whether an opt-in may lift this reason.
    pub fn is_liftable(self) -> bool {
        matches!(
            self,
            Reason::ReplayRun
                | Reason::ReplayFlag
                | Reason::StaleWindow
                | Reason::UpstreamReplay
                | Reason::AlreadyDelivered
                | Reason::InDoubt
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

    /// The opt-in that enabled delivery, or the first that covered the effect's kind and
    /// target but enabled nothing (expired, out of scope, unsigned, badly signed or
    /// untrusted; the reasons say which). Its [`OptIn::signer`] is set when a trusted
    /// approver signed it.
    pub fn opt_in(&self) -> Option<&OptIn> {
        self.opt_in.as_ref()
    }
}

impl ReplayContext {
    /// Whether an opt-in that covers an effect's kind and target may lift: the trusted
    /// approver who signed it, and the reason it may not, checked in this order:
    /// its signature (a bad one never counts; with trusted approvers configured, only a
    /// valid signature by one of their keys does), its scope (pipeline, backfill, run-id
    /// pattern), its expiry.
    fn weigh(
        &self,
        opt_in: &OptIn,
        now: chrono::DateTime<chrono::Utc>,
        upstream_replay: bool,
    ) -> (Option<&str>, Option<Reason>) {
        let signer = self
            .trusted_approvers()
            .and_then(|trusted| trusted.name_of(opt_in));
        let refusal = if opt_in.has_bad_signature() {
            Some(Reason::OptInBadSignature)
        } else if self.trusted_approvers().is_some() && !opt_in.is_signed() {
            Some(Reason::OptInUnsigned)
        } else if self.trusted_approvers().is_some() && signer.is_none() {
            Some(Reason::OptInUntrusted)
        } else if !opt_in.is_in_scope(self)
            || (upstream_replay && opt_in.pipeline() != Some(self.pipeline()))
        {
            // An upstream replay is lifted only by an opt-in that names this pipeline.
            Some(Reason::OptInOutOfScope)
        } else if opt_in.is_expired(now) {
            Some(Reason::OptInExpired)
        } else {
            None
        };
        (signer, refusal)
    }

    /// Decides whether an effect of `kind` to `target` may be delivered now.
    ///
    /// **Architecture Invariant:** suppression is the default for anything that is not
    /// a current run. Returns every reason that applies, not just the first:
    /// `dry_run`, `unknown_context`, `unknown_window`, `conflicting_context`, `future_window`
    /// (never liftable); `replay_run`, `replay_flag`, `upstream_replay` (only by an opt-in
    /// that names this pipeline), `stale_window` (liftable by an opt-in that covers the
    /// kind and target, is in scope for this run, unexpired and, when trusted approvers
    /// are configured, signed by one of them, which adds `opt_in`; otherwise the first
    /// covering opt-in adds why it did not lift: `opt_in_bad_signature`, `opt_in_unsigned`,
    /// `opt_in_untrusted`, `opt_in_out_of_scope` or `opt_in_expired`).
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
        if !self.has_window() {
            reasons.push(Reason::UnknownWindow);
        }
        if self.is_conflicting() {
            reasons.push(Reason::ConflictingContext);
        }
        if self.has_window() && self.is_future(now) {
            reasons.push(Reason::FutureWindow);
        }
        if self.run_kind().is_replay() {
            reasons.push(Reason::ReplayRun);
        }
        if self.replay_flag() == Some(true) {
            reasons.push(Reason::ReplayFlag);
        }
        if self.is_upstream_replay() {
            reasons.push(Reason::UpstreamReplay);
        }
        if self.has_window() && self.recency().is_stale(kind, self.recency_end(), now) {
            reasons.push(Reason::StaleWindow);
        }

        if reasons.is_empty() {
            return Decision {
                deliver: true,
                reasons: vec![Reason::CurrentWindow],
                opt_in: None,
            };
        }
        self.lift(kind, target, reasons, now)
    }

    /// The decision on an effect the gate let through but the journal's ledger stops
    /// (`already_delivered`, `in_doubt`): suppressed, unless an opt-in covering the effect
    /// lifts it, weighed as for a replay.
    pub(crate) fn decide_remembered(
        &self,
        kind: &EffectKind,
        target: &str,
        reason: Reason,
    ) -> Decision {
        self.lift(kind, target, vec![reason], self.now())
    }

    /// Suppresses for `reasons`, unless each can be lifted and an opt-in covering the
    /// effect lifts them (it adds `opt_in`); the first covering opt-in that may not adds
    /// why.
    fn lift(
        &self,
        kind: &EffectKind,
        target: &str,
        mut reasons: Vec<Reason>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Decision {
        if !reasons.iter().all(|reason| reason.is_liftable()) {
            return Decision {
                deliver: false,
                reasons,
                opt_in: None,
            };
        }

        let mut refused: Option<(Reason, OptIn)> = None;
        for opt_in in self
            .opt_ins()
            .iter()
            .filter(|opt_in| opt_in.covers(kind, target))
        {
            let (signer, refusal) = self.weigh(opt_in, now, self.is_upstream_replay());
            let opt_in = opt_in.clone().with_signer(signer);
            match refusal {
                None => {
                    reasons.push(Reason::OptIn);
                    return Decision {
                        deliver: true,
                        reasons,
                        opt_in: Some(opt_in),
                    };
                }
                Some(reason) => {
                    refused.get_or_insert((reason, opt_in));
                }
            }
        }
        if let Some((reason, opt_in)) = refused {
            reasons.push(reason);
            return Decision {
                deliver: false,
                reasons,
                opt_in: Some(opt_in),
            };
        }
        Decision {
            deliver: false,
            reasons,
            opt_in: None,
        }
    }
}
