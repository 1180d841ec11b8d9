//! Idempotency keys: names of logical effects, stable across retries, replays and machines.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{EffectKind, Error, Window};

/// Domain separation prefix hashed before the fields.
const KEY_DOMAIN: &[u8] = b"replaysafe.idempotency.v1";

/// The name of one logical effect: 64 lowercase hex characters.
///
/// **Architecture Invariant:** an idempotency key is not a run id. It is derived from
/// (pipeline, effect kind, message type, target, window start, window end) only, so a
/// retry, a replay or another machine computes the same key for the same effect.
///
/// # Derivation, byte by byte
///
/// `key = lowercase_hex(SHA-256(M))`, where `M` is the ASCII bytes
/// `replaysafe.idempotency.v1` followed by six netstrings, one per field, in order:
/// pipeline, effect kind name (`email`, `file_drop`, ...), message type, target,
/// window start, window end. A netstring is the field's UTF-8 byte length in decimal,
/// `:`, the bytes, and `,`. Times are RFC 3339 in UTC with a `Z` suffix and no
/// fractional part unless the instant has one (`2026-08-05T00:00:00Z`).
///
/// The same key in Python:
///
/// ```python
/// import hashlib
/// def key(*fields):
///     m = b"replaysafe.idempotency.v1"
///     for f in fields:
///         b = f.encode()
///         m += str(len(b)).encode() + b":" + b + b","
///     return hashlib.sha256(m).hexdigest()
/// key("daily_orders", "email", "daily_summary", "ana@shop.example",
///     "2026-08-05T00:00:00Z", "2026-08-06T00:00:00Z")
/// # '31fdfa224fdfb54dbdef67ff96669357106469229fb813924e4a52da7c74a51c' (docs/reference/idempotency-key.md has more vectors)
/// ```
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use replaysafe_core::{EffectKind, IdempotencyKey, Window};
///
/// let window = Window::new(
///     Utc.with_ymd_and_hms(2026, 8, 5, 0, 0, 0).unwrap(),
///     Utc.with_ymd_and_hms(2026, 8, 6, 0, 0, 0).unwrap(),
/// )?;
/// let key = IdempotencyKey::derive("daily_orders", &EffectKind::Email, "daily_summary", "ana@shop.example", &window);
/// assert_eq!(key.as_str().len(), 64);
/// # Ok::<(), replaysafe_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Derives the key of a logical effect (see the type's docs for the exact bytes).
    pub fn derive(
        pipeline: &str,
        kind: &EffectKind,
        message_type: &str,
        target: &str,
        window: &Window,
    ) -> Self {
        Self::derive_from_text(
            pipeline,
            kind,
            message_type,
            target,
            &rfc3339(window.start()),
            &rfc3339(window.end()),
        )
    }

    /// [`IdempotencyKey::derive`] with the window's canonical texts already formatted.
    pub(crate) fn derive_from_text(
        pipeline: &str,
        kind: &EffectKind,
        message_type: &str,
        target: &str,
        window_start: &str,
        window_end: &str,
    ) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(KEY_DOMAIN);
        for field in [
            pipeline,
            kind.as_str(),
            message_type,
            target,
            window_start,
            window_end,
        ] {
            // Netstring: decimal byte length, ':', bytes, ','.
            let mut digits = [0u8; 21];
            let mut start = digits.len() - 1;
            digits[start] = b':';
            let mut length = field.len();
            loop {
                start -= 1;
                digits[start] = b'0' + (length % 10) as u8;
                length /= 10;
                if length == 0 {
                    break;
                }
            }
            hasher.update(&digits[start..]);
            hasher.update(field.as_bytes());
            hasher.update(b",");
        }
        IdempotencyKey(hex(&hasher.finalize()))
    }

    /// Parses a key read back from a journal or an outbox: 1 to 64 lowercase hex characters.
    pub fn parse(value: &str) -> Result<Self, Error> {
        let well_formed = !value.is_empty()
            && value.len() <= 64
            && value
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !well_formed {
            return Err(Error::invalid(
                "idempotency_key",
                value,
                "expected 1 to 64 lowercase hex characters",
            ));
        }
        Ok(IdempotencyKey(value.to_owned()))
    }

    /// The key as hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = Error;
    fn try_from(value: String) -> Result<Self, Error> {
        IdempotencyKey::parse(&value)
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> String {
        key.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", self.0)
    }
}

/// RFC 3339, UTC, `Z`, fractional seconds only when present: the canonical time text of replaysafe.
pub fn rfc3339(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// Parses an RFC 3339 time into UTC; an error names `field`.
///
/// A leap second (`23:59:60Z`) is refused: chrono reads it as the second before with a
/// leap fraction, so it would name, and key, the same instant as a time in that second.
///
/// ```
/// use replaysafe_core::parse_rfc3339;
/// assert!(parse_rfc3339("REPLAYSAFE_WINDOW_END", "2016-12-31T23:59:59Z").is_ok());
/// let error = parse_rfc3339("REPLAYSAFE_WINDOW_END", "2016-12-31T23:59:60Z").unwrap_err();
/// assert!(error.to_string().contains("REPLAYSAFE_WINDOW_END") && error.to_string().contains("leap second"));
/// ```
pub fn parse_rfc3339(field: &'static str, text: &str) -> Result<DateTime<Utc>, crate::Error> {
    let time = DateTime::parse_from_rfc3339(text).map_err(|e| {
        crate::Error::invalid(field, text, format!("not an RFC 3339 timestamp ({e})"))
    })?;
    if chrono::Timelike::nanosecond(&time) >= 1_000_000_000 {
        return Err(crate::Error::invalid(
            field,
            text,
            "is a leap second (:60), which would name the same instant as the second before it: \
             use :59 or the next minute's :00",
        ));
    }
    Ok(time.with_timezone(&Utc))
}

pub(crate) fn hex_array(bytes: &[u8; 32]) -> [u8; 64] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 64];
    for (index, byte) in bytes.iter().enumerate() {
        out[2 * index] = DIGITS[usize::from(byte >> 4)];
        out[2 * index + 1] = DIGITS[usize::from(byte & 0x0f)];
    }
    out
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0x0f)] as char);
    }
    out
}
