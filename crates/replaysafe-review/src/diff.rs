//! [`Diff`]: which effects differ between two journals, by idempotency key.
//!
//! Two journals differ when an effect is in only one of them, when its payload digest
//! changed, or when its decision flipped: what happened to it in the base (delivered,
//! suppressed, failed, in doubt) is not what happened to it in the new journal.
//!
//! Each side keeps about a hundred bytes per distinct idempotency key (the key and the
//! payload digest in compact form, where its last line is, and what happened to it);
//! the effects listed are read again from their last lines, sorted in temporary files
//! ([`Rows`]) and written out row by row, so memory does not grow with the differences.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use replaysafe_core::journal::{JournalDecision, JournalRecord};

use crate::Progress;
use crate::compact::{Compact, Interner, OddTexts, SmallList};
use crate::error::Repr;
use crate::input::{self, LineAt, Source};
use crate::render::{Format, time_text, write_table};
use crate::spill::{Rows, Spill};

/// What one side of a diff says about one logical effect (its last line gives the
/// description).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
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

/// What one side of a diff keeps per effect while reading: where its last line is (read
/// again only if the effect is listed), its payload digest, and what happened to it.
#[derive(Clone, Copy, Debug)]
struct Summary {
    last: LineAt,
    payload: Compact,
    delivered: bool,
    failed: bool,
}

/// The effects of the journals of one side, by idempotency key.
#[derive(Debug, Default)]
struct Side {
    effects: HashMap<Compact, Summary>,
    /// Attempts without an outcome, (run number, attempt), for the effects that have some.
    open: HashMap<Compact, SmallList<(u32, u32)>>,
    runs: Interner,
    sources: Vec<Source>,
}

impl Side {
    fn decision(&self, key: &Compact, summary: &Summary) -> &'static str {
        if summary.delivered {
            "delivered"
        } else if self.open.contains_key(key) {
            "in_doubt"
        } else if summary.failed {
            "failed"
        } else {
            "suppressed"
        }
    }

    /// The effect as its last line describes it.
    fn effect(&self, key: &Compact, summary: &Summary) -> Result<Effect, Repr> {
        let record: JournalRecord = input::record_at(&self.sources, summary.last, |record| {
            Compact::new(&record.effect.idempotency_key) == *key
        })?;
        Ok(Effect {
            key: record.effect.idempotency_key,
            kind: record.effect.kind,
            message_type: record.effect.message_type,
            target: record.effect.target,
            window_start: record.window.start,
            payload_sha256: record.effect.payload_sha256,
            decision: self.decision(key, summary).to_owned(),
        })
    }
}

/// An effect whose payload or decision changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Changed {
    /// In the base journal.
    pub base: Effect,
    /// In the new journal.
    pub new: Effect,
}

/// The differences between two sides, as [`Reader::diff`](crate::Reader::diff) finds them.
///
/// The lists are [`Rows`] kept in temporary files, in the order they are shown (kind,
/// window start, target, key): a diff's memory does not grow with its length. Its JSON
/// form ([`Format::Json`]) is its `Serialize` form.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct Diff {
    /// Effects only the new journal has.
    pub only_in_new: Rows<Effect>,
    /// Effects only the base journal has.
    pub only_in_base: Rows<Effect>,
    /// Effects in both whose payload digest differs.
    pub changed: Rows<Changed>,
    /// Effects in both whose decision differs (suppressed in one, delivered in the other).
    pub changed_decision: Rows<Changed>,
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

/// Reads the journals of one side.
///
/// Memory grows by about a hundred bytes per distinct idempotency key (its key and payload
/// digest in 33 bytes each, and where its last line is), never with the lines' text.
fn load(
    paths: &[&Path],
    skip_invalid: bool,
    progress: Option<&dyn Progress>,
) -> Result<Side, Repr> {
    if paths.len() > LineAt::MAX_JOURNALS {
        return Err(Repr::TooManyJournals {
            command: "diff",
            max: LineAt::MAX_JOURNALS,
            per: " a side",
        });
    }
    let mut side = Side::default();
    for (journal, path) in paths.iter().enumerate() {
        let Side {
            effects,
            open,
            runs,
            sources,
        } = &mut side;
        let mut too_far = false;
        let (_, source) =
            input::for_each_record(path, skip_invalid, progress, |record, offset| {
                let Some(last) = LineAt::new(journal, offset) else {
                    too_far = true;
                    return;
                };
                let key = Compact::new(&record.effect.idempotency_key);
                let payload = Compact::new(&record.effect.payload_sha256);
                let summary = effects.entry(key).or_insert(Summary {
                    last,
                    payload,
                    delivered: false,
                    failed: false,
                });
                summary.last = last;
                summary.payload = payload;
                match record.decision {
                    JournalDecision::Delivered => {
                        // Delivered wins whatever follows: its open attempts no longer matter.
                        summary.delivered = true;
                        open.remove(&key);
                    }
                    JournalDecision::Failed => {
                        summary.failed = true;
                        let run = runs.get(&record.run_id);
                        if let Some(attempts) = open.get_mut(&key) {
                            let settled = attempts
                                .as_slice()
                                .iter()
                                .rposition(|(r, a)| Some(*r) == run && *a == record.attempt);
                            if let Some(index) = settled {
                                attempts.remove(index);
                            }
                            if attempts.is_empty() {
                                open.remove(&key);
                            }
                        }
                    }
                    JournalDecision::Attempting if !summary.delivered => {
                        let attempt = (runs.number(&record.run_id), record.attempt);
                        open.entry(key).or_default().push(attempt);
                    }
                    _ => {}
                }
            })?;
        if too_far {
            return Err(Repr::TooLong {
                command: "diff",
                path: path.display().to_string(),
            });
        }
        sources.push(source);
    }
    Ok(side)
}

/// One listed difference while the lists are made: how it sorts, and where its effects
/// are in the spill.
#[derive(Debug)]
struct Listed {
    kind: u32,
    window_start: chrono::DateTime<chrono::Utc>,
    target: u32,
    key: Compact,
    at: u64,
}

/// Makes one list: materialises each difference (reading its lines again) into a spill,
/// sorts by kind, window start, target and key, and writes the list in that order.
struct Lister {
    kinds: Interner,
    targets: Interner,
    keys: OddTexts,
}

impl Lister {
    fn list<T: Serialize + serde::de::DeserializeOwned>(
        &mut self,
        items: impl Iterator<Item = Result<(T, Effect), Repr>>,
    ) -> Result<Rows<T>, Repr> {
        let spill_error = |source| Repr::Spill {
            what: "the differences",
            source,
        };
        let mut spill = Spill::new();
        let mut listed = Vec::new();
        for item in items {
            let (item, shown) = item?;
            listed.push(Listed {
                kind: self.kinds.number(&shown.kind),
                window_start: shown.window_start,
                target: self.targets.number(&shown.target),
                key: self.keys.compact(&shown.key),
                at: spill.push(&item).map_err(spill_error)?,
            });
        }
        listed.sort_by(|a, b| {
            self.kinds
                .text(a.kind)
                .cmp(self.kinds.text(b.kind))
                .then(a.window_start.cmp(&b.window_start))
                .then_with(|| self.targets.text(a.target).cmp(self.targets.text(b.target)))
                .then_with(|| self.keys.cmp(&a.key, &b.key))
        });
        let mut sorted = Spill::new();
        for entry in listed {
            let item = spill.get(entry.at).map_err(spill_error)?;
            sorted.push(&item).map_err(spill_error)?;
        }
        sorted.into_rows().map_err(spill_error)
    }
}

/// Compares the effects of the `base` journals, read as one, with those of the `new` ones.
pub(crate) fn compare(
    base: &[&Path],
    new: &[&Path],
    skip_invalid: bool,
    progress: Option<&dyn Progress>,
) -> Result<Diff, Repr> {
    let mut base = load(base, skip_invalid, progress)?;
    // The base's effects as a list of exactly their size while the new side is read.
    let before_list: Vec<(Compact, Summary)> =
        std::mem::take(&mut base.effects).into_iter().collect();
    let mut new = load(new, skip_invalid, progress)?;
    if let Some(progress) = progress {
        progress.finish();
    }
    let mut unchanged = 0;
    let mut only_in_base = Vec::new();
    let mut changed = Vec::new();
    let mut changed_decision = Vec::new();
    for (key, before) in before_list {
        let Some(after) = new.effects.remove(&key) else {
            only_in_base.push((key, before));
            continue;
        };
        let payload = after.payload != before.payload;
        let decision = new.decision(&key, &after) != base.decision(&key, &before);
        if !payload && !decision {
            unchanged += 1;
            continue;
        }
        if payload {
            changed.push((key, before, after));
        }
        if decision {
            changed_decision.push((key, before, after));
        }
    }
    let only_in_new: Vec<(Compact, Summary)> =
        std::mem::take(&mut new.effects).into_iter().collect();
    let mut lister = Lister {
        kinds: Interner::default(),
        targets: Interner::default(),
        keys: OddTexts::default(),
    };
    let one = |side: &Side, (key, summary): (Compact, Summary)| {
        side.effect(&key, &summary)
            .map(|effect| (effect.clone(), effect))
    };
    let both = |(key, before, after): (Compact, Summary, Summary)| {
        let change = Changed {
            base: base.effect(&key, &before)?,
            new: new.effect(&key, &after)?,
        };
        let shown = change.new.clone();
        Ok((change, shown))
    };
    Ok(Diff {
        only_in_new: lister.list(only_in_new.into_iter().map(|item| one(&new, item)))?,
        only_in_base: lister.list(only_in_base.into_iter().map(|item| one(&base, item)))?,
        changed: lister.list(changed.into_iter().map(both))?,
        changed_decision: lister.list(changed_decision.into_iter().map(both))?,
        unchanged,
    })
}

impl Diff {
    /// Writes the differences to `out` as text tables, Markdown or JSON, reading the lists
    /// back from disk as it goes: a count of each kind of difference, then a table of each
    /// that is not empty.
    ///
    /// Every text from a journal is [`escape`](crate::escape)d for the format. An error is
    /// one of writing to `out` or of reading back the diff's temporary files.
    pub fn write(&self, format: Format, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        write(self, format, out)
    }
}

/// Writes the differences to `out`, reading the lists back from disk as it goes.
fn write(diff: &Diff, format: Format, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, diff).map_err(std::io::Error::other)?;
        return out.write_all(b"\n");
    }
    if format == Format::Markdown {
        out.write_all(b"## replaysafe diff\n\n")?;
    }
    writeln!(
        out,
        "{} only in new, {} only in base, {} changed payloads, {} changed decisions, {} unchanged",
        diff.only_in_new.len(),
        diff.only_in_base.len(),
        diff.changed.len(),
        diff.changed_decision.len(),
        diff.unchanged
    )?;
    let effects_table = |out: &mut dyn std::io::Write, title: &str, effects: &Rows<Effect>| {
        let rows = || {
            effects.iter().map(|effect| {
                effect.map(|effect| {
                    vec![
                        effect.kind,
                        effect.message_type,
                        effect.target,
                        time_text(effect.window_start),
                        decision_text(&effect.decision).to_owned(),
                        prefix(&effect.key, 16).to_owned(),
                    ]
                })
            })
        };
        write_table(
            out,
            title,
            &[
                "kind",
                "message type",
                "target",
                "window start",
                "decision",
                "key",
            ],
            rows,
            format,
        )
    };
    if !diff.only_in_new.is_empty() {
        out.write_all(b"\n")?;
        effects_table(out, "only in new", &diff.only_in_new)?;
    }
    if !diff.only_in_base.is_empty() {
        out.write_all(b"\n")?;
        effects_table(out, "only in base", &diff.only_in_base)?;
    }
    if !diff.changed.is_empty() {
        let rows = || {
            diff.changed.iter().map(|change| {
                change.map(|change| {
                    vec![
                        change.new.kind,
                        change.new.message_type,
                        change.new.target,
                        time_text(change.new.window_start),
                        prefix(&change.base.payload_sha256, 12).to_owned(),
                        prefix(&change.new.payload_sha256, 12).to_owned(),
                    ]
                })
            })
        };
        out.write_all(b"\n")?;
        write_table(
            out,
            "changed payloads",
            &[
                "kind",
                "message type",
                "target",
                "window start",
                "base sha256",
                "new sha256",
            ],
            rows,
            format,
        )?;
    }
    if !diff.changed_decision.is_empty() {
        let rows = || {
            diff.changed_decision.iter().map(|change| {
                change.map(|change| {
                    vec![
                        change.new.kind,
                        change.new.message_type,
                        change.new.target,
                        time_text(change.new.window_start),
                        decision_text(&change.base.decision).to_owned(),
                        decision_text(&change.new.decision).to_owned(),
                        prefix(&change.new.key, 16).to_owned(),
                    ]
                })
            })
        };
        out.write_all(b"\n")?;
        write_table(
            out,
            "changed decisions",
            &[
                "kind",
                "message type",
                "target",
                "window start",
                "base",
                "new",
                "key",
            ],
            rows,
            format,
        )?;
    }
    Ok(())
}

/// A decision in words: `in_doubt` reads "in doubt".
pub(crate) fn decision_text(decision: &str) -> &str {
    if decision == "in_doubt" {
        "in doubt"
    } else {
        decision
    }
}

/// The first `chars` characters of `text` (a key or digest from a journal, which need not be ASCII).
pub(crate) fn prefix(text: &str, chars: usize) -> &str {
    text.char_indices()
        .nth(chars)
        .map_or(text, |(index, _)| &text[..index])
}
