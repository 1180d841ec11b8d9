//! [`Description`]: what replaysafe thinks a run is, and what the gate would do with
//! each effect kind in it.

use serde::Serialize;

use replaysafe_core::{EffectKind, ReplayContext};

/// A resolved context and the gate's answer per effect kind, as [`describe`] makes it.
///
/// Its `Display` form is aligned text, one field a line, then the decision per effect
/// kind; its JSON form is its `Serialize` form. Times are RFC 3339.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Description {
    /// Pipeline.
    pub pipeline: String,
    /// Run id.
    pub run_id: String,
    /// Run kind.
    pub run_kind: String,
    /// Replay flag, if set.
    pub replay_flag: Option<bool>,
    /// Window start; `null` when no source gave a window (every effect is then suppressed,
    /// `unknown_window`).
    pub window_start: Option<String>,
    /// Window end (equal to the start for an instant); `null` when there is no window.
    pub window_end: Option<String>,
    /// What to set, when there is no window.
    pub window_note: Option<String>,
    /// The runs that caused this one (`REPLAYSAFE_UPSTREAM`): `pipeline run_id (kind)`.
    pub upstream: Vec<String>,
    /// The run's logical date, when the orchestrator gave one.
    pub logical_date: Option<String>,
    /// The data interval the orchestrator exported, `[start, end)` or `[t, t]`.
    pub run_interval: Option<String>,
    /// Backfill id.
    pub backfill_id: Option<String>,
    /// Mode.
    pub mode: String,
    /// Journal path.
    pub journal: Option<String>,
    /// Disagreement between sources, if any.
    pub conflict: Option<String>,
    /// Now.
    pub now: String,
    /// Per effect kind: deliver or suppress, and why.
    pub decisions: Vec<KindDecision>,
    /// The opt-ins in force (`REPLAYSAFE_OPT_IN`, `--opt-in`), as `replaysafe approve` describes them.
    pub opt_ins: Vec<String>,
    /// How many approvers' keys are trusted (`REPLAYSAFE_TRUSTED_APPROVERS`), when set.
    pub trusted_approvers: Option<usize>,
}

/// The gate's answer for one kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KindDecision {
    /// Effect kind.
    pub kind: String,
    /// `deliver` or `suppress`.
    pub decision: String,
    /// Every reason.
    pub reasons: Vec<String>,
    /// Max age of the kind.
    pub max_age: String,
}

/// Describes `cx`: its fields, and the gate's answer for each built-in effect kind to
/// any target, now (the context's clock).
pub fn describe(cx: &ReplayContext) -> Description {
    Description {
        pipeline: cx.pipeline().to_owned(),
        run_id: cx.run_id().to_string(),
        run_kind: cx.run_kind().to_string(),
        replay_flag: cx.replay_flag(),
        window_start: cx
            .has_window()
            .then(|| replaysafe_core::rfc3339(cx.window().start())),
        window_end: cx
            .has_window()
            .then(|| replaysafe_core::rfc3339(cx.window().end())),
        window_note: cx.window_note().map(str::to_owned),
        upstream: cx
            .upstream()
            .iter()
            .map(|run| format!("{} {} ({})", run.pipeline(), run.run_id(), run.kind()))
            .collect(),
        logical_date: cx.logical_date().map(replaysafe_core::rfc3339),
        run_interval: cx.run_interval().map(ToString::to_string),
        backfill_id: cx.backfill_id().map(str::to_owned),
        mode: cx.mode().as_str().to_owned(),
        journal: cx.journal_shown(),
        conflict: cx.conflict().map(|c| c.into_owned()),
        now: replaysafe_core::rfc3339(cx.now()),
        decisions: EffectKind::BUILT_IN
            .iter()
            .map(|kind| {
                let decision = cx.decide(kind, "*");
                KindDecision {
                    kind: kind.to_string(),
                    decision: if decision.delivers() {
                        "deliver"
                    } else {
                        "suppress"
                    }
                    .to_owned(),
                    reasons: decision
                        .reasons()
                        .iter()
                        .map(|r| r.as_str().to_owned())
                        .collect(),
                    max_age: crate::render::duration_text(cx.recency().max_age(kind)),
                }
            })
            .collect(),
        opt_ins: cx.opt_ins().iter().map(opt_in_text).collect(),
        trusted_approvers: cx.trusted_approvers().map(|t| t.len()),
    }
}

/// One opt-in on one line: scope, approver, expiry and signature.
fn opt_in_text(opt_in: &replaysafe_core::OptIn) -> String {
    let kinds: Vec<&str> = opt_in.kinds().iter().map(EffectKind::as_str).collect();
    let mut text = kinds.join(", ");
    match opt_in.targets() {
        Some(targets) => text.push_str(&format!(" to {} target(s)", targets.len())),
        None => text.push_str(" to every target"),
    }
    for (label, value) in [
        ("pipeline", opt_in.pipeline()),
        ("backfill", opt_in.backfill_id()),
        ("runs", opt_in.run_id_pattern()),
    ] {
        if let Some(value) = value {
            text.push_str(&format!("; {label} {value}"));
        }
    }
    text.push_str(&format!(
        "; approved by {} until {}; ",
        opt_in.approved_by(),
        replaysafe_core::rfc3339(opt_in.expires_at())
    ));
    text.push_str(&match opt_in.signer_fingerprint() {
        None => "unsigned".to_owned(),
        Some(_) if opt_in.has_bad_signature() => "signature does not match".to_owned(),
        Some(fingerprint) => format!("signed by key {fingerprint}"),
    });
    text
}

impl std::fmt::Display for Description {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&text(self))
    }
}

/// The aligned text form.
fn text(resolved: &Description) -> String {
    let or_unset = |value: Option<String>| value.unwrap_or_else(|| "(not set)".to_owned());
    let mut out = String::new();
    for (label, value) in [
        ("pipeline", resolved.pipeline.clone()),
        ("run id", resolved.run_id.clone()),
        ("run kind", resolved.run_kind.clone()),
        (
            "replay flag",
            or_unset(resolved.replay_flag.map(|f| f.to_string())),
        ),
        (
            "window",
            match (&resolved.window_start, &resolved.window_end) {
                (Some(start), Some(end)) if start == end => {
                    format!("[{start}, {end}] (an instant)")
                }
                (Some(start), Some(end)) => format!("[{start}, {end})"),
                _ => format!(
                    "unknown: {}",
                    resolved.window_note.clone().unwrap_or_default()
                ),
            },
        ),
        ("logical date", or_unset(resolved.logical_date.clone())),
        ("run interval", or_unset(resolved.run_interval.clone())),
        ("backfill id", or_unset(resolved.backfill_id.clone())),
        ("mode", resolved.mode.clone()),
        ("journal", or_unset(resolved.journal.clone())),
        (
            "conflict",
            resolved
                .conflict
                .clone()
                .unwrap_or_else(|| "none".to_owned()),
        ),
        ("now", resolved.now.clone()),
        (
            "trusted",
            resolved.trusted_approvers.map_or_else(
                || "(not set: any valid opt-in counts)".to_owned(),
                |keys| format!("{keys} approver key(s); only opt-ins they signed count"),
            ),
        ),
    ] {
        out.push_str(&format!("{label:<12} {value}\n"));
    }
    for run in &resolved.upstream {
        out.push_str(&format!("{:<12} {run}\n", "upstream"));
    }
    for opt_in in &resolved.opt_ins {
        out.push_str(&format!("{:<12} {opt_in}\n", "opt-in"));
    }
    out.push_str("\ndecision per effect kind:\n");
    for decision in &resolved.decisions {
        out.push_str(&format!(
            "  {:<10} {:<9} max age {:<4} {}\n",
            decision.kind,
            decision.decision,
            decision.max_age,
            decision.reasons.join(", ")
        ));
    }
    out
}
