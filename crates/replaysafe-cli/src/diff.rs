//! `replaysafe diff BASE NEW`: which effects differ between two journals, by idempotency key.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::input::{self, Progress};
use crate::render::{Format, Table, time_text};

/// What one journal says about one logical effect (its last line wins).
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
    /// Last decision.
    pub decision: String,
}

/// An effect whose payload changed.
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
    /// Effects in both with the same payload.
    pub unchanged: u64,
}

impl Diff {
    /// Whether the two journals describe the same effects with the same payloads.
    pub fn is_empty(&self) -> bool {
        self.only_in_new.is_empty() && self.only_in_base.is_empty() && self.changed.is_empty()
    }
}

fn load(
    path: &Path,
    skip_invalid: bool,
    progress: &Progress,
) -> anyhow::Result<BTreeMap<String, Effect>> {
    let mut effects = BTreeMap::new();
    input::for_each_record(path, skip_invalid, progress, |record| {
        let effect = Effect {
            key: record.effect.idempotency_key,
            kind: record.effect.kind,
            message_type: record.effect.message_type,
            target: record.effect.target,
            window_start: record.window.start,
            payload_sha256: record.effect.payload_sha256,
            decision: record.decision.as_str().to_owned(),
        };
        effects.insert(effect.key.clone(), effect);
    })?;
    Ok(effects)
}

/// Compares two journals.
pub fn compare(
    base: &Path,
    new: &Path,
    skip_invalid: bool,
    progress: &Progress,
) -> anyhow::Result<Diff> {
    let base = load(base, skip_invalid, progress)?;
    let mut new = load(new, skip_invalid, progress)?;
    progress.finish();
    let mut diff = Diff::default();
    for (key, before) in base {
        match new.remove(&key) {
            None => diff.only_in_base.push(before),
            Some(after) if after.payload_sha256 != before.payload_sha256 => {
                diff.changed.push(Changed {
                    base: before,
                    new: after,
                })
            }
            Some(_) => diff.unchanged += 1,
        }
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
        "{} only in new, {} only in base, {} changed payloads, {} unchanged\n",
        diff.only_in_new.len(),
        diff.only_in_base.len(),
        diff.changed.len(),
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
                effect.decision.clone(),
                effect.key[..effect.key.len().min(16)].to_owned(),
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
                change.base.payload_sha256[..change.base.payload_sha256.len().min(12)].to_owned(),
                change.new.payload_sha256[..change.new.payload_sha256.len().min(12)].to_owned(),
            ]);
        }
        out.push('\n');
        out.push_str(&table.render(format));
    }
    out
}
