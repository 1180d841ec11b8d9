//! The recency policy, run modes and audited opt-ins.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::approval::SignatureCheck;
use crate::{EffectKind, Error};

/// Whether effects may be delivered at all in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Deliver what the gate allows.
    #[default]
    Live,
    /// Suppress everything and journal everything: the reviewer's preview.
    DryRun,
}

impl Mode {
    /// `live` or `dry-run`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Live => "live",
            Mode::DryRun => "dry-run",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(value: &str) -> Result<Self, Error> {
        match value {
            "live" => Ok(Mode::Live),
            "dry-run" => Ok(Mode::DryRun),
            other => Err(Error::invalid("mode", other, "expected live or dry-run")),
        }
    }
}

/// How old a window may be, per effect kind, before its effects are stale, and how far
/// in the future it may end.
///
/// An effect is stale when `now - window.end > max_age(kind)`. Defaults: 6 h for every
/// kind except alerts, which get 1 h. The gate applies this to every run kind.
/// A window that ends more than the clock-skew allowance (5 min by default) after now is
/// from the future, and suppressed whatever else holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecencyPolicy {
    default_max_age: TimeDelta,
    max_age: BTreeMap<EffectKind, TimeDelta>,
    clock_skew: TimeDelta,
}

/// Parses a whole, non-negative number followed by one unit, `s`, `m`, `h`, `d` or `w`
/// (`90s`, `30m`, `6h`, `1d`, `1w`): the durations of `REPLAYSAFE_MAX_AGE` and the command line.
pub fn parse_duration(text: &str) -> Option<TimeDelta> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().ok()?;
    match unit {
        "s" => TimeDelta::try_seconds(number),
        "m" => TimeDelta::try_minutes(number),
        "h" => TimeDelta::try_hours(number),
        "d" => TimeDelta::try_days(number),
        "w" => TimeDelta::try_weeks(number),
        _ => None,
    }
}

/// The default clock-skew allowance: 5 minutes.
pub const DEFAULT_CLOCK_SKEW: TimeDelta = TimeDelta::minutes(5);

impl Default for RecencyPolicy {
    fn default() -> Self {
        let mut max_age = BTreeMap::new();
        for kind in EffectKind::BUILT_IN {
            let age = if kind == EffectKind::Alert {
                TimeDelta::hours(1)
            } else {
                TimeDelta::hours(6)
            };
            max_age.insert(kind, age);
        }
        RecencyPolicy {
            default_max_age: TimeDelta::hours(6),
            max_age,
            clock_skew: DEFAULT_CLOCK_SKEW,
        }
    }
}

impl RecencyPolicy {
    /// Sets the max age of one kind; a negative age is [`Error::Invalid`].
    pub fn with_max_age(mut self, kind: EffectKind, max_age: TimeDelta) -> Result<Self, Error> {
        if max_age < TimeDelta::zero() {
            return Err(Error::invalid(
                "max_age",
                format!("{kind}={max_age}"),
                "must not be negative",
            ));
        }
        self.max_age.insert(kind, max_age);
        Ok(self)
    }

    /// Applies `KIND=DURATION` pairs separated by commas (`email=2h,alert=30m`), the form of
    /// `REPLAYSAFE_MAX_AGE`. A pair that is not of that form, an unknown unit or an empty
    /// kind is [`Error::Invalid`] naming `field`.
    pub fn with_max_ages(mut self, field: &'static str, text: &str) -> Result<Self, Error> {
        const EXPECTED: &str = "expected KIND=DURATION pairs separated by commas, such as email=2h,alert=30m \
             (units s, m, h, d, w)";
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (kind, age) = pair
                .split_once('=')
                .ok_or_else(|| Error::invalid(field, text, EXPECTED))?;
            let kind: EffectKind = kind
                .trim()
                .parse()
                .map_err(|_| Error::invalid(field, text, EXPECTED))?;
            let age = parse_duration(age).ok_or_else(|| Error::invalid(field, text, EXPECTED))?;
            self.max_age.insert(kind, age);
        }
        Ok(self)
    }

    /// Sets the clock-skew allowance (default 5 min); a negative one is [`Error::Invalid`].
    ///
    /// It bounds how far in the future a window may end, and how far after the run's
    /// logical date a window may start, before the gate calls it `future_window` or
    /// `conflicting_context`.
    pub fn with_clock_skew(mut self, skew: TimeDelta) -> Result<Self, Error> {
        if skew < TimeDelta::zero() {
            return Err(Error::invalid(
                "clock_skew",
                skew.to_string(),
                "must not be negative",
            ));
        }
        self.clock_skew = skew;
        Ok(self)
    }

    /// The clock-skew allowance.
    pub fn clock_skew(&self) -> TimeDelta {
        self.clock_skew
    }

    /// Whether a window that ends at `window_end` lies in the future at `now`, beyond the
    /// clock-skew allowance.
    pub fn is_future(&self, window_end: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        window_end - now > self.clock_skew
    }

    /// The max age of `kind` (custom kinds without a setting get 6 h).
    pub fn max_age(&self, kind: &EffectKind) -> TimeDelta {
        self.max_age
            .get(kind)
            .copied()
            .unwrap_or(self.default_max_age)
    }

    /// The longest max age of any kind, custom kinds' default included: how long a
    /// delivered key must be remembered before a current run could stage it again.
    pub fn longest_max_age(&self) -> TimeDelta {
        self.max_age
            .values()
            .copied()
            .fold(self.default_max_age, TimeDelta::max)
    }

    /// Whether a window that ended at `window_end` is stale for `kind` at `now`.
    pub fn is_stale(
        &self,
        kind: &EffectKind,
        window_end: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> bool {
        now - window_end > self.max_age(kind)
    }
}

/// An explicit, audited permission to deliver some effects from a replay.
///
/// It names the effect kinds (and optionally the exact targets) it covers, why, who
/// approved it, and when it expires. It lifts `replay_run`, `replay_flag` and
/// `stale_window`; it never lifts `dry_run`, `unknown_context`, `conflicting_context` or
/// `future_window`.
/// It may be restricted to one pipeline and one backfill (or runs whose id matches a
/// pattern); in any other run it lifts nothing (`opt_in_out_of_scope`). Read from a file
/// ([`OptIn::read_file`], `REPLAYSAFE_OPT_IN`) it may carry an ed25519 signature; one that
/// does not verify lifts nothing, and with trusted approvers configured only one signed by
/// them lifts anything (see [`crate::approval`]).
/// Every delivery it enables is journaled with it, scope and signer included.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use replaysafe_core::{EffectKind, OptIn};
///
/// let opt_in = OptIn::new("re-send corrected invoices", "jane@ops", Utc.with_ymd_and_hms(2026, 9, 1, 0, 0, 0).unwrap())?
///     .for_kind(EffectKind::Email);
/// assert!(opt_in.covers(&EffectKind::Email, "ana@shop.example"));
/// assert!(!opt_in.covers(&EffectKind::Webhook, "https://partner.example"));
/// # Ok::<(), replaysafe_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptIn {
    reason: String,
    approved_by: String,
    #[serde(with = "crate::journal::rfc3339")]
    expires_at: DateTime<Utc>,
    #[serde(skip)]
    kinds: BTreeSet<EffectKind>,
    #[serde(skip)]
    targets: Option<BTreeSet<String>>,
    #[serde(skip)]
    pipeline: Option<String>,
    #[serde(skip)]
    backfill_id: Option<String>,
    #[serde(skip)]
    run_id_pattern: Option<String>,
    #[serde(skip)]
    pub(crate) signature: SignatureCheck,
    /// The trusted approver whose key signed it, once the gate has checked.
    #[serde(skip)]
    signer: Option<String>,
}

impl OptIn {
    /// An opt-in covering nothing yet; `reason` and `approved_by` must be non-empty.
    pub fn new(
        reason: impl Into<String>,
        approved_by: impl Into<String>,
        expires_at: DateTime<Utc>,
    ) -> Result<Self, Error> {
        let reason = reason.into();
        let approved_by = approved_by.into();
        if reason.trim().is_empty() {
            return Err(Error::Missing {
                field: "opt_in.reason",
                hint: "an opt-in needs a non-empty reason",
            });
        }
        if approved_by.trim().is_empty() {
            return Err(Error::Missing {
                field: "opt_in.approved_by",
                hint: "an opt-in needs an approver",
            });
        }
        Ok(OptIn {
            reason,
            approved_by,
            expires_at,
            kinds: BTreeSet::new(),
            targets: None,
            pipeline: None,
            backfill_id: None,
            run_id_pattern: None,
            signature: SignatureCheck::Unsigned,
            signer: None,
        })
    }

    /// Adds an effect kind.
    pub fn for_kind(mut self, kind: EffectKind) -> Self {
        self.kinds.insert(kind);
        self
    }

    /// Restricts the opt-in to exact targets (as the adapter describes them); may be called repeatedly.
    pub fn for_target(mut self, target: impl Into<String>) -> Self {
        self.targets
            .get_or_insert_with(BTreeSet::new)
            .insert(target.into());
        self
    }

    /// Restricts the opt-in to one pipeline: in any other it lifts nothing
    /// (`opt_in_out_of_scope`). An opt-in file always names one.
    pub fn for_pipeline(mut self, pipeline: impl Into<String>) -> Self {
        self.pipeline = Some(pipeline.into());
        self
    }

    /// Restricts the opt-in to the runs of one backfill (the context's backfill id, from
    /// `REPLAYSAFE_BACKFILL_ID`): in any other run it lifts nothing (`opt_in_out_of_scope`).
    pub fn for_backfill(mut self, backfill_id: impl Into<String>) -> Self {
        self.backfill_id = Some(backfill_id.into());
        self
    }

    /// Restricts the opt-in to runs whose id matches `pattern`, where `*` stands for any
    /// run of characters (`backfill__2026-07-*`): in any other run it lifts nothing.
    pub fn for_run_ids(mut self, pattern: impl Into<String>) -> Self {
        self.run_id_pattern = Some(pattern.into());
        self
    }

    /// Why delivery from a replay is wanted.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Who approved it.
    pub fn approved_by(&self) -> &str {
        &self.approved_by
    }

    /// When it stops enabling anything.
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.expires_at
    }

    /// The effect kinds it covers.
    pub fn kinds(&self) -> &BTreeSet<EffectKind> {
        &self.kinds
    }

    /// The exact targets it is restricted to, or `None` for every target.
    pub fn targets(&self) -> Option<&BTreeSet<String>> {
        self.targets.as_ref()
    }

    /// The pipeline it is restricted to, if any.
    pub fn pipeline(&self) -> Option<&str> {
        self.pipeline.as_deref()
    }

    /// The backfill it is restricted to, if any.
    pub fn backfill_id(&self) -> Option<&str> {
        self.backfill_id.as_deref()
    }

    /// The run-id pattern it is restricted to, if any.
    pub fn run_id_pattern(&self) -> Option<&str> {
        self.run_id_pattern.as_deref()
    }

    /// Whether it carries a signature (valid or not).
    pub fn is_signed(&self) -> bool {
        matches!(self.signature, SignatureCheck::Signed { .. })
    }

    /// Whether it carries a signature that does not match what it says (a changed byte).
    pub fn has_bad_signature(&self) -> bool {
        matches!(self.signature, SignatureCheck::Signed { valid: false, .. })
    }

    /// The fingerprint of the key that signed it (see [`crate::approval::fingerprint`]).
    pub fn signer_fingerprint(&self) -> Option<String> {
        self.signature.fingerprint()
    }

    /// The name of the trusted approver whose key signed it, as the gate found it in the
    /// trusted approvers; set on the opt-in a [`crate::Decision`] carries.
    pub fn signer(&self) -> Option<&str> {
        self.signer.as_deref()
    }

    pub(crate) fn with_signer(mut self, signer: Option<&str>) -> Self {
        self.signer = signer.map(str::to_owned);
        self
    }

    /// Whether its pipeline, backfill and run-id restrictions admit `cx`'s run.
    pub fn is_in_scope(&self, cx: &crate::ReplayContext) -> bool {
        self.pipeline.as_deref().is_none_or(|p| p == cx.pipeline())
            && self
                .backfill_id
                .as_deref()
                .is_none_or(|id| cx.backfill_id() == Some(id))
            && self.run_id_pattern.as_deref().is_none_or(|pattern| {
                crate::approval::run_id_matches(pattern, cx.run_id().as_str())
            })
    }

    /// Whether it covers this kind and target, ignoring expiry.
    pub fn covers(&self, kind: &EffectKind, target: &str) -> bool {
        self.kinds.contains(kind)
            && self
                .targets
                .as_ref()
                .is_none_or(|targets| targets.contains(target))
    }

    /// Whether it has expired at `now` (expiry is exclusive: at `expires_at` it is over).
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        now >= self.expires_at
    }
}

impl fmt::Debug for OptIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OptIn")
            .field("reason", &self.reason)
            .field("approved_by", &self.approved_by)
            .field("expires_at", &self.expires_at)
            .field("kinds", &self.kinds)
            .field("targets", &self.targets.as_ref().map(BTreeSet::len))
            .field("pipeline", &self.pipeline)
            .field("backfill_id", &self.backfill_id)
            .field("run_id_pattern", &self.run_id_pattern)
            .field("signature", &self.signature)
            .field("signer", &self.signer)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn defaults_match_design() {
        let policy = RecencyPolicy::default();
        assert_eq!(policy.max_age(&EffectKind::Email), TimeDelta::hours(6));
        assert_eq!(policy.max_age(&EffectKind::Alert), TimeDelta::hours(1));
        assert_eq!(
            policy.max_age(&EffectKind::Custom("x".into())),
            TimeDelta::hours(6)
        );
        assert_eq!(policy.clock_skew(), TimeDelta::minutes(5));
        assert!(
            policy
                .clone()
                .with_clock_skew(TimeDelta::seconds(-1))
                .is_err()
        );
    }

    #[test]
    fn future_is_beyond_the_skew() {
        let policy = RecencyPolicy::default();
        let now = Utc.with_ymd_and_hms(2026, 9, 1, 0, 0, 0).unwrap();
        assert!(!policy.is_future(now + TimeDelta::minutes(5), now));
        assert!(policy.is_future(now + TimeDelta::minutes(5) + TimeDelta::seconds(1), now));
        assert!(!policy.is_future(now - TimeDelta::days(1), now));
    }

    #[test]
    fn opt_in_requires_reason_and_approver() {
        let expires = Utc.with_ymd_and_hms(2026, 9, 1, 0, 0, 0).unwrap();
        assert!(
            OptIn::new(" ", "jane", expires)
                .unwrap_err()
                .to_string()
                .contains("opt_in.reason")
        );
        assert!(
            OptIn::new("why", "", expires)
                .unwrap_err()
                .to_string()
                .contains("opt_in.approved_by")
        );
    }
}
