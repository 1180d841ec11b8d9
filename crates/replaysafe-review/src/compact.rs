//! Compact stand-ins for the texts a journal repeats on every line, so that what reports
//! and diffs keep per effect is a few dozen bytes rather than a dozen `String`s.
//!
//! - [`Compact`]: 33 bytes for a text that is almost always 64 lowercase hex characters
//!   (an idempotency key, a payload digest).
//! - [`Interner`]: a number for each distinct text of a kind that repeats (run ids, effect
//!   kinds, message types, targets), and the text back from the number.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// A text in 33 bytes: the 32 bytes 64 lowercase hex characters spell, or else the
/// SHA-256 of the text, with a flag telling the two apart.
///
/// Two hex texts are equal exactly when their forms are; a text that is not 64 lowercase
/// hex characters (a key from a hand-written journal, `"ab"`, an uppercase digest) is
/// told apart from every other by its SHA-256, and never equals a hex one. Hex forms
/// order as their texts do; callers that order other forms as texts compare the texts
/// (`Ord` orders them, but not as texts).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Compact {
    bytes: [u8; 32],
    hashed: bool,
}

impl std::fmt::Debug for Compact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.hex() {
            Some(hex) => write!(f, "Compact({hex})"),
            None => write!(f, "Compact(hashed)"),
        }
    }
}

impl Compact {
    /// The compact form of `text`.
    pub(crate) fn new(text: &str) -> Self {
        match decode_lower_hex(text) {
            Some(bytes) => Compact {
                bytes,
                hashed: false,
            },
            None => Compact {
                bytes: Sha256::digest(text.as_bytes()).into(),
                hashed: true,
            },
        }
    }

    /// The text, when it was 64 lowercase hex characters; `None` when only its hash is kept.
    pub(crate) fn hex(&self) -> Option<String> {
        if self.hashed {
            return None;
        }
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = String::with_capacity(64);
        for byte in self.bytes {
            text.push(char::from(DIGITS[usize::from(byte >> 4)]));
            text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
        }
        Some(text)
    }

    /// Whether the text was 64 lowercase hex characters.
    pub(crate) fn is_hex(&self) -> bool {
        !self.hashed
    }

    /// The first 8 bytes: enough to check that a line read again is the one read before.
    pub(crate) fn fingerprint(&self) -> u64 {
        let mut first = [0; 8];
        first.copy_from_slice(&self.bytes[..8]);
        u64::from_le_bytes(first)
    }

    /// The order of two hex forms, as their texts order; `None` when either is hashed.
    pub(crate) fn cmp_hex(&self, other: &Compact) -> Option<Ordering> {
        (!self.hashed && !other.hashed).then(|| self.bytes.cmp(&other.bytes))
    }
}

fn decode_lower_hex(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let value = |digit: u8| match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    };
    let mut bytes = [0; 32];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (value(pair[0])? << 4) | value(pair[1])?;
    }
    Some(bytes)
}

/// Texts that are not 64 lowercase hex characters, by their [`Compact`] form, so they can
/// be shown again; hex texts are rebuilt from their form and kept nowhere.
#[derive(Debug, Default)]
pub(crate) struct OddTexts {
    texts: HashMap<Compact, Arc<str>>,
}

impl OddTexts {
    /// The compact form of `text`, keeping the text when it cannot be rebuilt from it.
    pub(crate) fn compact(&mut self, text: &str) -> Compact {
        let compact = Compact::new(text);
        if !compact.is_hex() && !self.texts.contains_key(&compact) {
            self.texts.insert(compact, Arc::from(text));
        }
        compact
    }

    /// The text of a form made by [`OddTexts::compact`].
    pub(crate) fn text(&self, compact: &Compact) -> String {
        match compact.hex() {
            Some(hex) => hex,
            None => self
                .texts
                .get(compact)
                .map(|text| text.to_string())
                .unwrap_or_default(),
        }
    }

    /// Orders two forms as their texts order.
    pub(crate) fn cmp(&self, a: &Compact, b: &Compact) -> Ordering {
        a.cmp_hex(b)
            .unwrap_or_else(|| self.text(a).cmp(&self.text(b)))
    }
}

/// A number for each distinct text, and the text back from its number.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    numbers: HashMap<Arc<str>, u32>,
    texts: Vec<Arc<str>>,
}

impl Interner {
    /// The number of `text`, given it if new.
    pub(crate) fn number(&mut self, text: &str) -> u32 {
        if let Some(number) = self.numbers.get(text) {
            return *number;
        }
        let number = u32::try_from(self.texts.len()).unwrap_or(u32::MAX);
        let text: Arc<str> = Arc::from(text);
        self.texts.push(text.clone());
        self.numbers.insert(text, number);
        number
    }

    /// The number of `text`, if it has one.
    pub(crate) fn get(&self, text: &str) -> Option<u32> {
        self.numbers.get(text).copied()
    }

    /// The text of `number`.
    pub(crate) fn text(&self, number: u32) -> &str {
        self.texts
            .get(number as usize)
            .map_or("", |text| text.as_ref())
    }
}

/// A list that keeps one element inline, and more behind one pointer: most effects have
/// at most one attempt without an outcome and at most one group with a failure pending.
#[derive(Clone, Debug, Default)]
pub(crate) enum SmallList<T> {
    /// No element.
    #[default]
    Empty,
    /// One element.
    One(T),
    /// Two or more.
    Many(Box<[T]>),
}

impl<T: Copy> SmallList<T> {
    /// Appends `item`.
    pub(crate) fn push(&mut self, item: T) {
        *self = match std::mem::take(self) {
            SmallList::Empty => SmallList::One(item),
            SmallList::One(first) => SmallList::Many(Box::new([first, item])),
            SmallList::Many(items) => {
                let mut items = items.into_vec();
                items.push(item);
                SmallList::Many(items.into_boxed_slice())
            }
        };
    }

    /// The elements, first to last.
    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            SmallList::Empty => &[],
            SmallList::One(item) => std::slice::from_ref(item),
            SmallList::Many(items) => items,
        }
    }

    /// Removes the element at `index`.
    pub(crate) fn remove(&mut self, index: usize) {
        let mut items = self.as_slice().to_vec();
        if index < items.len() {
            items.remove(index);
        }
        *self = match items.len() {
            0 => SmallList::Empty,
            1 => SmallList::One(items[0]),
            _ => SmallList::Many(items.into_boxed_slice()),
        };
    }

    /// Whether there is no element.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, SmallList::Empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_texts_round_trip_and_order_as_text() {
        let a = "0".repeat(63) + "f";
        let b = "1".to_owned() + &"0".repeat(63);
        let (ca, cb) = (Compact::new(&a), Compact::new(&b));
        assert_eq!(ca.hex().as_deref(), Some(a.as_str()));
        assert_eq!(ca.cmp_hex(&cb), Some(a.cmp(&b)));
        assert_eq!(Compact::new(&a), ca);
    }

    #[test]
    fn other_texts_are_hashed_and_never_meet_hex_ones() {
        let upper = "AB".repeat(32);
        let lower = "ab".repeat(32);
        assert_ne!(Compact::new(&upper), Compact::new(&lower));
        assert!(!Compact::new(&upper).is_hex());
        assert!(!Compact::new("b-cut-retry").is_hex());
        assert_ne!(Compact::new("x"), Compact::new("y"));
        let mut odd = OddTexts::default();
        let short = odd.compact("b-cut-retry");
        let hex = odd.compact(&lower);
        assert_eq!(odd.text(&short), "b-cut-retry");
        assert_eq!(odd.text(&hex), lower);
        assert_eq!(odd.cmp(&short, &hex), "b-cut-retry".cmp(&lower));
    }

    #[test]
    fn small_lists_keep_order() {
        let mut list = SmallList::default();
        assert!(list.is_empty());
        list.push(1);
        list.push(2);
        list.push(3);
        assert_eq!(list.as_slice(), [1, 2, 3]);
        list.remove(1);
        assert_eq!(list.as_slice(), [1, 3]);
        list.remove(0);
        list.remove(0);
        assert!(list.is_empty());
    }
}
