//! Memory: what a journal knows of each idempotency key, consulted before a delivery so
//! that a key once delivered is not delivered again (a retry, a cleared task, a re-run
//! of the same window, two workers racing on one key).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{JournalDecision, JournalEntry, JournalError, JournalFuture};

/// What a ledger knows of one idempotency key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Memory {
    /// Nothing stops an attempt: the key was never attempted, or its last attempt failed.
    Clear,
    /// A delivery of the key is recorded.
    Delivered {
        /// The run that delivered it.
        run_id: String,
        /// When.
        at: DateTime<Utc>,
    },
    /// An attempt began and no outcome is recorded after it: the receiver may or may not
    /// have the effect.
    InDoubt {
        /// The run whose attempt is open.
        run_id: String,
        /// When the attempt began.
        since: DateTime<Utc>,
    },
}

impl Memory {
    /// Whether an attempt may go ahead: the key is clear, or in doubt and the receiver
    /// drops repeats (`retry_in_doubt`). A delivered key never.
    pub fn may_attempt(&self, retry_in_doubt: bool) -> bool {
        match self {
            Memory::Clear => true,
            Memory::InDoubt { .. } => retry_in_doubt,
            Memory::Delivered { .. } => false,
        }
    }

    /// A note for the journal saying what the ledger found, when it stops an attempt.
    pub fn note(&self) -> Option<String> {
        match self {
            Memory::Clear => None,
            Memory::Delivered { run_id, at } => Some(format!(
                "already delivered by run {run_id} at {}",
                crate::rfc3339(*at)
            )),
            Memory::InDoubt { run_id, since } => Some(format!(
                "in doubt since run {run_id} began an attempt at {} with no outcome recorded",
                crate::rfc3339(*since)
            )),
        }
    }
}

/// What [`Ledger::begin`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claim {
    /// What the ledger knew of the key before.
    pub memory: Memory,
    /// Whether the `attempting` record was appended: the attempt may go ahead.
    pub claimed: bool,
}

impl Claim {
    /// What a ledger found (`memory`) and whether it appended the claim.
    pub fn new(memory: Memory, claimed: bool) -> Self {
        Claim { memory, claimed }
    }
}

/// A memory of keys, kept by a journal: the JSON Lines file itself, or a database.
///
/// [`Guard`](crate::Guard) consults it before the first attempt of a delivery. A key
/// already delivered is not delivered again (`already_delivered`); a key in doubt is
/// attempted again only when the client's receiver de-duplicates by key
/// ([`EffectClient::dedupes_by_key`](crate::EffectClient::dedupes_by_key)), and is
/// otherwise suppressed (`in_doubt`) until an audited opt-in lifts it. A ledger only ever
/// stops a delivery; it never makes one.
pub trait Ledger: Send + Sync + fmt::Debug {
    /// Looks the key of `attempting` (an `attempting` record) up and, in the same atomic
    /// step, appends `attempting` unless the key was delivered, or is in doubt and
    /// `retry_in_doubt` is false. The appended record is the claim: a second process
    /// racing on the key finds it and sees the key in doubt.
    fn begin(
        &self,
        attempting: &JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> Result<Claim, JournalError>;

    /// [`Ledger::begin`] for an asynchronous sender: the ledger may hold the claim for a
    /// moment to look up and write it together with the records of other deliveries in
    /// flight (group commit, as [`JsonlJournal`](super::JsonlJournal) does). When the
    /// future completes, a granted claim's record is where [`Ledger::begin`] would have
    /// put it, so the attempt may start. The default claims at once.
    fn begin_grouped<'a>(
        &'a self,
        attempting: &'a JournalEntry<'_>,
        retry_in_doubt: bool,
    ) -> JournalFuture<'a, Claim> {
        Box::pin(std::future::ready(self.begin(attempting, retry_in_doubt)))
    }
}

/// One key's last known state: delivered, or open since an attempt began (with the run
/// and the time), or closed by a failure. 20 bytes: the run is a number in the index's
/// table of runs, so a run's keys hold one copy of its id between them.
#[derive(Clone, Copy, Debug)]
struct Slot {
    state: SlotState,
    run: u32,
    at: DateTime<Utc>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Delivered,
    Open,
    Closed,
}

/// The run number of keys whose run the full table of runs could not take.
const UNNAMED: u32 = u32::MAX;

/// What a journal's lines say of each key, built by reading them once and kept up to
/// date with the lines written since. Only records about deliveries matter (`attempting`,
/// `delivered`, `failed`); a delivered key stays delivered.
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    keys: HashMap<[u8; 32], Slot>,
    /// The run ids the slots name, by number.
    runs: Vec<Arc<str>>,
    /// The number of each run id in `runs`.
    run_numbers: HashMap<Arc<str>, u32>,
    /// Bytes of the file read so far (up to the end of its last whole line).
    pub(crate) offset: u64,
}

/// The fields of a line the index needs.
#[derive(Deserialize)]
struct Brief<'a> {
    #[serde(with = "super::rfc3339")]
    ts: DateTime<Utc>,
    decision: JournalDecision,
    #[serde(borrow)]
    run_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    effect: BriefEffect<'a>,
}

#[derive(Deserialize)]
struct BriefEffect<'a> {
    #[serde(borrow)]
    idempotency_key: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    action: Option<std::borrow::Cow<'a, str>>,
}

/// What the index remembers one entry under: the key, or the key and the action when the
/// key names several (a trigger and its resolve are remembered apart).
pub(crate) fn slot_key(key: &str, action: Option<&str>) -> [u8; 32] {
    match action {
        None => key_bytes(key),
        Some(action) => {
            let mut hash = Sha256::new();
            hash.update(key.as_bytes());
            hash.update([0]);
            hash.update(action.as_bytes());
            hash.finalize().into()
        }
    }
}

/// A key as 32 bytes: the hex of a derived key, or the SHA-256 of any other text.
fn key_bytes(key: &str) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    let hex = key.as_bytes();
    if hex.len() == 64 {
        let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let mut ok = true;
        for (index, pair) in hex.chunks(2).enumerate() {
            match (digit(pair[0]), digit(pair[1])) {
                (Some(high), Some(low)) => bytes[index] = high << 4 | low,
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            return bytes;
        }
    }
    Sha256::digest(key.as_bytes()).into()
}

impl KeyIndex {
    /// Takes one record into account.
    pub(crate) fn apply(
        &mut self,
        decision: JournalDecision,
        (key, action): (&str, Option<&str>),
        run_id: &str,
        ts: DateTime<Utc>,
    ) {
        self.apply_at(slot_key(key, action), decision, run_id, ts);
    }

    /// [`KeyIndex::apply`] with the key's slot already worked out ([`slot_key`]).
    pub(crate) fn apply_at(
        &mut self,
        key: [u8; 32],
        decision: JournalDecision,
        run_id: &str,
        ts: DateTime<Utc>,
    ) {
        let state = match decision {
            JournalDecision::Delivered => SlotState::Delivered,
            JournalDecision::Attempting => SlotState::Open,
            JournalDecision::Failed => SlotState::Closed,
            _ => return,
        };
        if let Some(slot) = self.keys.get(&key)
            && slot.state == SlotState::Delivered
        {
            return;
        }
        let run = if state == SlotState::Closed {
            0
        } else {
            self.run_number(run_id)
        };
        self.keys.insert(key, Slot { state, run, at: ts });
    }

    /// The number of `run_id` in the table of runs, added when new. The last run added
    /// is looked at first: a run's records mostly follow one another. Once the table
    /// holds `u32::MAX` runs, later ones are [`UNNAMED`]: their keys' notes name no run
    /// (no decision depends on the run).
    fn run_number(&mut self, run_id: &str) -> u32 {
        if let Some(last) = self.runs.last()
            && **last == *run_id
        {
            return u32::try_from(self.runs.len() - 1).unwrap_or(UNNAMED);
        }
        if let Some(number) = self.run_numbers.get(run_id) {
            return *number;
        }
        let number = u32::try_from(self.runs.len()).unwrap_or(UNNAMED);
        if number == UNNAMED {
            return UNNAMED;
        }
        let run: Arc<str> = Arc::from(run_id);
        self.runs.push(run.clone());
        self.run_numbers.insert(run, number);
        number
    }

    /// Reads whole lines of `bytes` (what follows `offset` in the file) into the index
    /// and moves `offset` past the last whole line; a line that does not parse is skipped.
    pub(crate) fn read(&mut self, bytes: &[u8]) {
        let Some(last_newline) = bytes.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        for line in bytes[..last_newline].split(|b| *b == b'\n') {
            // Cheap test before parsing: only lines about deliveries matter.
            if line.is_empty() || memchr_suppressed(line) {
                continue;
            }
            if let Ok(brief) = serde_json::from_slice::<Brief<'_>>(line) {
                self.apply(
                    brief.decision,
                    (
                        &brief.effect.idempotency_key,
                        brief.effect.action.as_deref(),
                    ),
                    &brief.run_id,
                    brief.ts,
                );
            }
        }
        self.offset += last_newline as u64 + 1;
    }

    /// What is known of `key` (and its `action`, when the key names several).
    pub(crate) fn memory(&self, key: &str, action: Option<&str>) -> Memory {
        self.memory_at(&slot_key(key, action))
    }

    /// [`KeyIndex::memory`] with the key's slot already worked out ([`slot_key`]).
    pub(crate) fn memory_at(&self, key: &[u8; 32]) -> Memory {
        let Some(slot) = self.keys.get(key) else {
            return Memory::Clear;
        };
        let run_id = || {
            self.runs
                .get(slot.run as usize)
                .map_or_else(String::new, |run| run.to_string())
        };
        match slot.state {
            SlotState::Closed => Memory::Clear,
            SlotState::Delivered => Memory::Delivered {
                run_id: run_id(),
                at: slot.at,
            },
            SlotState::Open => Memory::InDoubt {
                run_id: run_id(),
                since: slot.at,
            },
        }
    }
}

/// Whether a line is a `suppressed` record as the journal's writers write it (the
/// decision is the third field), so it can be skipped without parsing.
fn memchr_suppressed(line: &[u8]) -> bool {
    line.windows(26)
        .take(64)
        .any(|window| window == b"\"decision\":\"suppressed\",\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_780_000_000 + seconds, 0).unwrap()
    }

    #[test]
    fn a_key_is_clear_in_doubt_or_delivered_and_stays_delivered() {
        let mut index = KeyIndex::default();
        let key = "ab".repeat(32);
        assert_eq!(index.memory(&key, None), Memory::Clear);
        index.apply(JournalDecision::Attempting, (&key, None), "r1", at(0));
        assert!(matches!(index.memory(&key, None), Memory::InDoubt { .. }));
        index.apply(JournalDecision::Failed, (&key, None), "r1", at(1));
        assert_eq!(index.memory(&key, None), Memory::Clear);
        index.apply(JournalDecision::Attempting, (&key, None), "r2", at(2));
        index.apply(JournalDecision::Delivered, (&key, None), "r2", at(3));
        index.apply(JournalDecision::Attempting, (&key, None), "r3", at(4));
        index.apply(JournalDecision::Failed, (&key, None), "r3", at(5));
        assert_eq!(
            index.memory(&key, None),
            Memory::Delivered {
                run_id: "r2".into(),
                at: at(3)
            }
        );
        // A key that is not hex is hashed, not confused with another.
        index.apply(
            JournalDecision::Delivered,
            ("custom key", None),
            "r4",
            at(6),
        );
        assert!(matches!(
            index.memory("custom key", None),
            Memory::Delivered { .. }
        ));
        assert_eq!(index.memory("custom key!", None), Memory::Clear);
    }

    #[test]
    fn each_key_remembers_its_own_run_among_many() {
        let mut index = KeyIndex::default();
        let keys: Vec<String> = (0..6).map(|n| format!("{n:02}").repeat(32)).collect();
        for (n, key) in keys.iter().enumerate() {
            let run = ["r1", "r2", "r1", "r3"][n % 4];
            index.apply(JournalDecision::Attempting, (key, None), run, at(n as i64));
            if n % 2 == 0 {
                index.apply(JournalDecision::Delivered, (key, None), run, at(10));
            }
        }
        for (n, key) in keys.iter().enumerate() {
            let run = ["r1", "r2", "r1", "r3"][n % 4].to_owned();
            let expected = if n % 2 == 0 {
                Memory::Delivered {
                    run_id: run,
                    at: at(10),
                }
            } else {
                Memory::InDoubt {
                    run_id: run,
                    since: at(n as i64),
                }
            };
            assert_eq!(index.memory(key, None), expected, "key {n}");
        }
        assert_eq!(index.runs.len(), 3, "one copy of each run id");
    }

    #[test]
    fn lines_are_read_up_to_the_last_whole_one() {
        let mut index = KeyIndex::default();
        let key = "cd".repeat(32);
        let line = format!(
            r#"{{"v":1,"ts":"2026-08-06T01:00:00Z","decision":"attempting","reasons":[],"pipeline":"p","run_id":"r","run_kind":"scheduled","backfill_id":null,"window":{{"start":"2026-08-05T00:00:00Z","end":"2026-08-06T00:00:00Z"}},"effect":{{"kind":"email","message_type":"m","target":"t","idempotency_key":"{key}","summary":null,"payload_sha256":"00","payload_bytes":1}},"opt_in":null,"attempt":1,"error":null}}"#
        );
        let text = format!("not json\n{line}\n{{\"v\":1,\"ts\"");
        index.read(text.as_bytes());
        assert!(matches!(index.memory(&key, None), Memory::InDoubt { .. }));
        assert_eq!(index.offset as usize, text.rfind('\n').unwrap() + 1);
    }
}
