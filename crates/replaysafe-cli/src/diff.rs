//! `replaysafe diff BASE NEW`: which effects differ between two journals, by idempotency key.
//!
//! Two journals differ when an effect is in only one of them, when its payload digest
//! changed, or when its decision flipped: what happened to it in the base (delivered,
//! suppressed, failed, in doubt) is not what happened to it in the new journal.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use replaysafe_core::journal::JournalDecision;

use crate::input::{self, Progress};
use crate::render::{Format, Table, time_text};

/// What one journal says about one logical effect (its last line gives the description).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Effect {
    /// Idempotency key.
    pub key: String,
    /// Kind.
    pub kind: String,
    /// Message type.
    pub message_type: String,
    /// Target, redacted.
    pub target: String,
    /// Window start.
    pub window_start: chrono::DateTime<chrono::Utc>,
    /// Payload digest.
    pub payload_sha256: String,
    /// What happened to it: `delivered` when any line says so; else `in_doubt` when an
    /// attempt began with no outcome after it; else `failed` when an attempt failed;
    /// else `suppressed`.
    pub decision: String,
}

/// The decision of one effect, from all of its lines in one journal.
#[derive(Debug, Default)]
struct Lines {
    effect: Option<Effect>,
    delivered: bool,
    failed: bool,
    /// (run id, attempt) of `attempting` lines without their `failed` line yet.
    open: Vec<(String, u32)>,
}

impl Lines {
    fn decision(&self) -> &'static str {
        if self.delivered {
            "delivered"
        } else if !self.open.is_empty() {
            "in_doubt"
        } else if self.failed {
            "failed"
        } else {
            "suppressed"
        }
    }
}

/// An effect whose payload or decision changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Changed {
    /// In the base journal.
    pub base: Effect,
    /// In the new journal.
    pub new: Effect,
}

/// The differences.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// Effects only the new journal has.
    pub only_in_new: Vec<Effect>,
    /// Effects only the base journal has.
    pub only_in_base: Vec<Effect>,
    /// Effects in both whose payload digest differs.
    pub changed: Vec<Changed>,
    /// Effects in both whose decision differs (suppressed in one, delivered in the other).
    pub changed_decision: Vec<Changed>,
    /// Effects in both with the same payload and the same decision.
    pub unchanged: u64,
}

impl Diff {
    /// Whether the two journals describe the same effects with the same payloads and decisions.
    pub fn is_empty(&self) -> bool {
        self.only_in_new.is_empty()
            && self.only_in_base.is_empty()
            && self.changed.is_empty()
            && self.changed_decision.is_empty()
    }
}

fn load(
    paths: &[&Path],
    skip_invalid: bool,
    progress: &Progress,
) -> anyhow::Result<BTreeMap<String, Effect>> {
    let mut effects: BTreeMap<String, Lines> = BTreeMap::new();
    for path in paths {
        load_into(&mut effects, path, skip_invalid, progress)?;
    }
    Ok(effects
        .into_iter()
        .filter_map(|(key, lines)| {
            let decision = lines.decision();
            let mut effect = lines.effect?;
            effect.decision = decision.to_owned();
            Some((key, effect))
        })
        .collect())
}

fn load_into(
    effects: &mut BTreeMap<String, Lines>,
    path: &Path,
    skip_invalid: bool,
    progress: &Progress,
) -> anyhow::Result<()> {
    input::for_each_record(path, skip_invalid, progress, |record| {
        let lines = effects
            .entry(record.effect.idempotency_key.clone())
            .or_default();
        match record.decision {
            JournalDecision::Delivered => lines.delivered = true,
            JournalDecision::Failed => {
                lines.failed = true;
                let settled = lines.open.iter().rposition(|(run_id, attempt)| {
                    *run_id == record.run_id && *attempt == record.attempt
                });
                if let Some(index) = settled {
                    lines.open.remove(index);
                }
            }
            JournalDecision::Attempting => lines.open.push((record.run_id.clone(), record.attempt)),
            _ => {}
        }
        lines.effect = Some(Effect {
            key: record.effect.idempotency_key,
            kind: record.effect.kind,
            message_type: record.effect.message_type,
            target: record.effect.target,
            window_start: record.window.start,
            payload_sha256: record.effect.payload_sha256,
            decision: String::new(),
        });
    })?;
    Ok(())
}

/// Compares two journals.
pub fn compare(
    base: &Path,
    new: &Path,
    skip_invalid: bool,
    progress: &Progress,
) -> anyhow::Result<Diff> {
    compare_journals(&[base], &[new], skip_invalid, progress)
}

/// Compares the effects of the `base` journals, read as one, with those of the `new` ones.
pub fn compare_journals(
    base: &[&Path],
    new: &[&Path],
    skip_invalid: bool,
    progress: &Progress,
) -> anyhow::Result<Diff> {
    let base = load(base, skip_invalid, progress)?;
    let mut new = load(new, skip_invalid, progress)?;
    progress.finish();
    let mut diff = Diff::default();
    for (key, before) in base {
        let Some(after) = new.remove(&key) else {
            diff.only_in_base.push(before);
            continue;
        };
        let payload = after.payload_sha256 != before.payload_sha256;
        let decision = after.decision != before.decision;
        if !payload && !decision {
            diff.unchanged += 1;
            continue;
        }
        let change = Changed {
            base: before,
            new: after,
        };
        if payload && decision {
            diff.changed.push(change.clone());
        } else if payload {
            diff.changed.push(change);
            continue;
        }
        diff.changed_decision.push(change);
    }
    diff.only_in_new = new.into_values().collect();
    let order = |e: &Effect| {
        (
            e.kind.clone(),
            e.window_start,
            e.target.clone(),
            e.key.clone(),
        )
    };
    diff.only_in_new.sort_by_key(order);
    diff.only_in_base.sort_by_key(order);
    diff.changed.sort_by_key(|c| order(&c.new));
    diff.changed_decision.sort_by_key(|c| order(&c.new));
    Ok(diff)
}

/// Renders the differences.
pub fn render(diff: &Diff, format: Format) -> String {
    if format == Format::Json {
        return serde_json::to_string_pretty(diff).unwrap_or_default() + "\n";
    }
    let mut out = String::new();
    if format == Format::Markdown {
        out.push_str("## replaysafe diff\n\n");
    }
    out.push_str(&format!(
        "{} only in new, {} only in base, {} changed payloads, {} changed decisions, {} unchanged\n",
        diff.only_in_new.len(),
        diff.only_in_base.len(),
        diff.changed.len(),
        diff.changed_decision.len(),
        diff.unchanged
    ));
    let effects_table = |title: &str, effects: &[Effect]| {
        let mut table = Table::new(
            title,
            [
                "kind",
                "message type",
                "target",
                "window start",
                "decision",
                "key",
            ],
        );
        for effect in effects {
            table.row([
                effect.kind.clone(),
                effect.message_type.clone(),
                effect.target.clone(),
                time_text(effect.window_start),
                decision_text(&effect.decision).to_owned(),
                prefix(&effect.key, 16).to_owned(),
            ]);
        }
        table.render(format)
    };
    if !diff.only_in_new.is_empty() {
        out.push('\n');
        out.push_str(&effects_table("only in new", &diff.only_in_new));
    }
    if !diff.only_in_base.is_empty() {
        out.push('\n');
        out.push_str(&effects_table("only in base", &diff.only_in_base));
    }
    if !diff.changed.is_empty() {
        let mut table = Table::new(
            "changed payloads",
            [
                "kind",
                "message type",
                "target",
                "window start",
                "base sha256",
                "new sha256",
            ],
        );
        for change in &diff.changed {
            table.row([
                change.new.kind.clone(),
                change.new.message_type.clone(),
                change.new.target.clone(),
                time_text(change.new.window_start),
                prefix(&change.base.payload_sha256, 12).to_owned(),
                prefix(&change.new.payload_sha256, 12).to_owned(),
            ]);
        }
        out.push('\n');
        out.push_str(&table.render(format));
    }
    if !diff.changed_decision.is_empty() {
        let mut table = Table::new(
            "changed decisions",
            [
                "kind",
                "message type",
                "target",
                "window start",
                "base",
                "new",
                "key",
            ],
        );
        for change in &diff.changed_decision {
            table.row([
                change.new.kind.clone(),
                change.new.message_type.clone(),
                change.new.target.clone(),
                time_text(change.new.window_start),
                decision_text(&change.base.decision).to_owned(),
                decision_text(&change.new.decision).to_owned(),
                prefix(&change.new.key, 16).to_owned(),
            ]);
        }
        out.push('\n');
        out.push_str(&table.render(format));
    }
    out
}

/// A decision in words: `in_doubt` reads "in doubt".
pub fn decision_text(decision: &str) -> &str {
    if decision == "in_doubt" {
        "in doubt"
    } else {
        decision
    }
}

/// The first `chars` characters of `text` (a key or digest from a journal, which need not be ASCII).
pub fn prefix(text: &str, chars: usize) -> &str {
    text.char_indices()
        .nth(chars)
        .map_or(text, |(index, _)| &text[..index])
}
