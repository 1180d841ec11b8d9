//! Approvals outside Rust: the opt-in file, ed25519 signatures over it, approver keys and
//! the list of trusted approvers.
//!
//! An opt-in file is JSON (`docs/reference/opt-in-file.md` has the schema). It names the
//! pipeline and the backfill (or a pattern of run ids) it covers, the effect kinds and,
//! optionally, exact targets, a reason, an approver and an expiry, and may carry an
//! ed25519 signature over all of that. When trusted approvers are configured
//! (`REPLAYSAFE_TRUSTED_APPROVERS`), only an opt-in signed by one of their keys lifts
//! anything, and the approver journaled is the key's name.
//!
//! ```
//! use chrono::{TimeDelta, Utc};
//! use replaysafe_core::{ApproverKey, EffectKind, OptIn, TrustedApprovers};
//!
//! let key = ApproverKey::from_seed("jane", [7; 32])?;
//! let opt_in = OptIn::new("re-send corrected invoices", "jane@ops", Utc::now() + TimeDelta::days(1))?
//!     .for_kind(EffectKind::Email)
//!     .for_pipeline("daily_orders")
//!     .for_backfill("bf-2026-07")
//!     .signed_with(&key)?;
//! let file = opt_in.to_file_json()?;
//!
//! let read = OptIn::from_file_json(&file)?;
//! let trusted = TrustedApprovers::parse(&key.public_line())?;
//! assert_eq!(trusted.name_of(&read), Some("jane"));
//! # Ok::<(), replaysafe_core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{EffectKind, Error, OptIn};

/// The `format` of an opt-in file this version writes and reads.
pub const OPT_IN_FORMAT: &str = "replaysafe-opt-in/1";

/// The first word of an approver's secret key file.
const SECRET_KEY_TAG: &str = "replaysafe-approver-secret-key-ed25519";

/// How an opt-in's signature stood when it was read: checked once, against the public key
/// the file names; whether that key is trusted is the gate's question.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) enum SignatureCheck {
    /// No signature.
    #[default]
    Unsigned,
    /// A signature, valid or not, by `key`.
    Signed {
        key: [u8; 32],
        signature: [u8; 64],
        valid: bool,
    },
}

impl SignatureCheck {
    /// The fingerprint of the signing key, when there is one.
    pub(crate) fn fingerprint(&self) -> Option<String> {
        match self {
            SignatureCheck::Unsigned => None,
            SignatureCheck::Signed { key, .. } => Some(fingerprint(key)),
        }
    }
}

impl fmt::Debug for SignatureCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureCheck::Unsigned => f.write_str("Unsigned"),
            SignatureCheck::Signed { key, valid, .. } => f
                .debug_struct("Signed")
                .field("key", &fingerprint(key))
                .field("valid", valid)
                .finish_non_exhaustive(),
        }
    }
}

/// The fingerprint of an ed25519 public key: `SHA256:` and the unpadded base64 of the
/// SHA-256 of its 32 bytes.
pub fn fingerprint(public_key: &[u8; 32]) -> String {
    format!(
        "SHA256:{}",
        STANDARD_NO_PAD.encode(Sha256::digest(public_key))
    )
}

/// The file as written and read; the field order is the file's.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OptInFile {
    format: String,
    pipeline: String,
    #[serde(default)]
    backfill_id: Option<String>,
    #[serde(default)]
    run_id_pattern: Option<String>,
    kinds: Vec<String>,
    #[serde(default)]
    targets: Option<Vec<String>>,
    reason: String,
    approved_by: String,
    expires_at: String,
    #[serde(default)]
    signature: Option<FileSignature>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSignature {
    /// The public key, base64.
    key: String,
    /// The signature over the signed text, base64.
    value: String,
}

/// What a signature covers: every field but the signature, in canonical form (kinds and
/// targets sorted and without repeats, the expiry as canonical RFC 3339), as compact JSON.
#[derive(Serialize)]
struct SignedScope<'a> {
    format: &'a str,
    pipeline: &'a str,
    backfill_id: Option<&'a str>,
    run_id_pattern: Option<&'a str>,
    kinds: Vec<&'a str>,
    targets: Option<Vec<&'a str>>,
    reason: &'a str,
    approved_by: &'a str,
    expires_at: String,
}

impl OptIn {
    /// The kinds' names in byte order, as the file and the signed text list them.
    fn kind_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.kinds().iter().map(EffectKind::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The bytes a signature covers, or `Missing` when the opt-in lacks a pipeline or a
    /// backfill id or run-id pattern (only a scoped opt-in can be written or signed).
    fn signed_text(&self) -> Result<Vec<u8>, Error> {
        let pipeline = self.pipeline().ok_or(Error::Missing {
            field: "opt_in.pipeline",
            hint: "an opt-in file names the pipeline it covers",
        })?;
        if self.backfill_id().is_none() && self.run_id_pattern().is_none() {
            return Err(Error::Missing {
                field: "opt_in.backfill_id",
                hint: "an opt-in file names the backfill id (or a run_id_pattern) it covers",
            });
        }
        if self.kinds().is_empty() {
            return Err(Error::Missing {
                field: "opt_in.kinds",
                hint: "an opt-in file names at least one effect kind",
            });
        }
        let scope = SignedScope {
            format: OPT_IN_FORMAT,
            pipeline,
            backfill_id: self.backfill_id(),
            run_id_pattern: self.run_id_pattern(),
            kinds: self.kind_names(),
            targets: self
                .targets()
                .map(|targets| targets.iter().map(String::as_str).collect()),
            reason: self.reason(),
            approved_by: self.approved_by(),
            expires_at: crate::rfc3339(self.expires_at()),
        };
        Ok(serde_json::to_vec(&scope).expect("a struct of strings serialises"))
    }

    /// A copy signed by `key` (replacing any signature it had).
    ///
    /// Only a scoped opt-in can be signed: without a pipeline, or without a backfill id or
    /// run-id pattern, or without a kind, this is [`Error::Missing`] naming the field.
    pub fn signed_with(mut self, key: &ApproverKey) -> Result<Self, Error> {
        let text = self.signed_text()?;
        let signature = key.key.sign(&text).to_bytes();
        self.signature = SignatureCheck::Signed {
            key: key.key.verifying_key().to_bytes(),
            signature,
            valid: true,
        };
        Ok(self)
    }

    /// The opt-in file: pretty JSON with a final newline.
    ///
    /// Only a scoped opt-in has a file form (see [`OptIn::signed_with`]).
    pub fn to_file_json(&self) -> Result<String, Error> {
        self.signed_text()?;
        let file = OptInFile {
            format: OPT_IN_FORMAT.to_owned(),
            pipeline: self.pipeline().unwrap_or_default().to_owned(),
            backfill_id: self.backfill_id().map(str::to_owned),
            run_id_pattern: self.run_id_pattern().map(str::to_owned),
            kinds: self.kind_names().into_iter().map(str::to_owned).collect(),
            targets: self.targets().map(|t| t.iter().cloned().collect()),
            reason: self.reason().to_owned(),
            approved_by: self.approved_by().to_owned(),
            expires_at: crate::rfc3339(self.expires_at()),
            signature: match &self.signature {
                SignatureCheck::Unsigned => None,
                SignatureCheck::Signed { key, signature, .. } => Some(FileSignature {
                    key: STANDARD.encode(key),
                    value: STANDARD.encode(signature),
                }),
            },
        };
        let mut text = serde_json::to_string_pretty(&file).expect("a struct of strings serialises");
        text.push('\n');
        Ok(text)
    }

    /// Reads an opt-in file's text, checking its signature, if it has one, against the
    /// key it names.
    ///
    /// A signature that does not match (a changed byte anywhere in what it covers) is not
    /// an error: the opt-in is read and lifts nothing, and the gate journals
    /// `opt_in_bad_signature`. Anything malformed is an error naming the field: text that is
    /// not JSON, an unknown or missing field, another format, an empty reason or approver,
    /// an unknown effect kind, both or neither of `backfill_id` and `run_id_pattern`, a key
    /// or signature that is not base64 of the right length.
    pub fn from_file_json(text: &str) -> Result<OptIn, Error> {
        let file: OptInFile = serde_json::from_str(text)
            .map_err(|e| Error::malformed("opt_in", format!("not a valid opt-in file ({e})")))?;
        if file.format != OPT_IN_FORMAT {
            return Err(Error::invalid(
                "opt_in.format",
                file.format,
                format!("expected {OPT_IN_FORMAT}"),
            ));
        }
        let expires_at = crate::parse_rfc3339("opt_in.expires_at", &file.expires_at)?;
        let mut opt_in = OptIn::new(file.reason, file.approved_by, expires_at)?;
        opt_in = opt_in.for_pipeline(non_blank("opt_in.pipeline", file.pipeline)?);
        match (file.backfill_id, file.run_id_pattern) {
            (Some(id), None) => opt_in = opt_in.for_backfill(non_blank("opt_in.backfill_id", id)?),
            (None, Some(pattern)) => {
                opt_in = opt_in.for_run_ids(non_blank("opt_in.run_id_pattern", pattern)?)
            }
            (Some(_), Some(_)) => {
                return Err(Error::malformed(
                    "opt_in.run_id_pattern",
                    "give backfill_id or run_id_pattern, not both",
                ));
            }
            (None, None) => {
                return Err(Error::Missing {
                    field: "opt_in.backfill_id",
                    hint: "an opt-in file names the backfill id (or a run_id_pattern) it covers",
                });
            }
        }
        if file.kinds.is_empty() {
            return Err(Error::Missing {
                field: "opt_in.kinds",
                hint: "an opt-in file names at least one effect kind",
            });
        }
        for kind in &file.kinds {
            let kind: EffectKind = kind
                .parse()
                .map_err(|_| Error::invalid("opt_in.kinds", kind.as_str(), "not an effect kind"))?;
            opt_in = opt_in.for_kind(kind);
        }
        if let Some(targets) = file.targets {
            if targets.is_empty() {
                return Err(Error::invalid(
                    "opt_in.targets",
                    "[]",
                    "an empty list covers nothing: leave targets out (or null) to cover every target",
                ));
            }
            for target in targets {
                opt_in = opt_in.for_target(non_blank("opt_in.targets", target)?);
            }
        }
        if let Some(signature) = file.signature {
            let key: [u8; 32] = decode_exact(&signature.key, "opt_in.signature.key")?;
            let value: [u8; 64] = decode_exact(&signature.value, "opt_in.signature.value")?;
            let valid = verify(&key, &opt_in.signed_text()?, &value);
            opt_in.signature = SignatureCheck::Signed {
                key,
                signature: value,
                valid,
            };
        }
        Ok(opt_in)
    }

    /// Reads an opt-in file (see [`OptIn::from_file_json`]); a file that cannot be read or
    /// is malformed is [`Error::File`] naming it.
    pub fn read_file(path: impl AsRef<Path>) -> Result<OptIn, Error> {
        let path = path.as_ref();
        read_text("opt-in file", path).and_then(|text| {
            OptIn::from_file_json(&text).map_err(|e| file_error("opt-in file", path, e))
        })
    }
}

fn non_blank(field: &'static str, value: String) -> Result<String, Error> {
    if value.trim().is_empty() {
        return Err(Error::Missing {
            field,
            hint: "must not be empty",
        });
    }
    if value.chars().any(crate::run::is_hidden_char) {
        return Err(Error::invalid(
            field,
            value.escape_debug().to_string(),
            crate::run::HIDDEN_CHARS,
        ));
    }
    Ok(value)
}

fn decode_exact<const N: usize>(text: &str, field: &'static str) -> Result<[u8; N], Error> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|_| Error::malformed(field, "not base64"))?;
    bytes.try_into().map_err(|bytes: Vec<u8>| {
        Error::malformed(field, format!("{} bytes, expected {N}", bytes.len()))
    })
}

/// Whether `signature` is `key`'s signature of `text` (strict verification: a key of low
/// order or a non-canonical signature never verifies).
fn verify(key: &[u8; 32], text: &[u8], signature: &[u8; 64]) -> bool {
    VerifyingKey::from_bytes(key).is_ok_and(|key| {
        key.verify_strict(text, &ed25519_dalek::Signature::from_bytes(signature))
            .is_ok()
    })
}

fn read_text(what: &'static str, path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|e| file_error(what, path, e))?;
    String::from_utf8(bytes)
        .map_err(|_| file_error(what, path, Error::malformed("file", "not valid UTF-8")))
}

/// Refuses a secret file that group or others may read or write (Unix).
#[cfg(unix)]
fn check_private(what: &'static str, path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| file_error(what, path, e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(Error::NotPrivate {
            what,
            path: path.display().to_string(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_what: &'static str, _path: &Path) -> Result<(), Error> {
    Ok(())
}

fn file_error(
    what: &'static str,
    path: &Path,
    source: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::File {
        what,
        path: path.display().to_string(),
        source: Box::new(source),
    }
}

/// An approver's ed25519 signing key, with the approver's name.
///
/// Its `Debug` shows the name and the public key's fingerprint, never the secret.
pub struct ApproverKey {
    name: String,
    key: SigningKey,
}

impl fmt::Debug for ApproverKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApproverKey")
            .field("name", &self.name)
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl ApproverKey {
    /// The key whose secret is `seed` (32 random bytes: the caller draws them from the
    /// operating system). The name must be one word of printable characters.
    pub fn from_seed(name: impl Into<String>, seed: [u8; 32]) -> Result<Self, Error> {
        Ok(ApproverKey {
            name: approver_name(name.into())?,
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// The approver's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The public key, base64.
    pub fn public_key(&self) -> String {
        STANDARD.encode(self.key.verifying_key().to_bytes())
    }

    /// The fingerprint of the public key (see [`fingerprint`]).
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.key.verifying_key().to_bytes())
    }

    /// The public line, `NAME KEY` and a newline: the `.pub` file, and one line of a
    /// trusted-approvers file.
    pub fn public_line(&self) -> String {
        format!("{} {}\n", self.name, self.public_key())
    }

    /// The secret key file's text: one line, `replaysafe-approver-secret-key-ed25519 NAME SEED`.
    /// Keep it readable by its owner only.
    pub fn to_secret_file(&self) -> String {
        format!(
            "{SECRET_KEY_TAG} {} {}\n",
            self.name,
            STANDARD.encode(self.key.to_bytes())
        )
    }

    /// Reads a secret key file's text. The error never repeats the text.
    pub fn from_secret_file(text: &str) -> Result<Self, Error> {
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            [tag, name, seed] if *tag == SECRET_KEY_TAG => {
                let seed: [u8; 32] = decode_exact(seed, "approver_key.secret")?;
                ApproverKey::from_seed(*name, seed)
            }
            _ => Err(Error::malformed(
                "approver_key",
                format!("expected one line: {SECRET_KEY_TAG} NAME KEY"),
            )),
        }
    }

    /// Reads a secret key file; a file that cannot be read or is malformed is
    /// [`Error::File`] naming it. On Unix, a file that group or others may read or write
    /// (mode `& 0o077` not zero) is [`Error::NotPrivate`], before it is read: the secret
    /// may already be someone else's, and the message says to `chmod 600` it.
    pub fn read_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        check_private("approver key file", path)?;
        read_text("approver key file", path).and_then(|text| {
            ApproverKey::from_secret_file(&text)
                .map_err(|e| file_error("approver key file", path, e))
        })
    }
}

fn approver_name(name: String) -> Result<String, Error> {
    if name.is_empty() {
        return Err(Error::Missing {
            field: "approver.name",
            hint: "name the approver",
        });
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || crate::run::is_hidden_char(c) || c == '#')
    {
        return Err(Error::invalid(
            "approver.name",
            name.escape_debug().to_string(),
            "must be one word, without spaces, control characters, bidirectional overrides or #",
        ));
    }
    Ok(name)
}

/// The public keys whose signatures make an opt-in count, each with its approver's name:
/// `REPLAYSAFE_TRUSTED_APPROVERS`.
///
/// The text is one `NAME KEY` a line (the `.pub` files of `replaysafe approve keygen`,
/// concatenated); blank lines and lines starting with `#` are skipped. A name may have
/// several keys (a rotation); a key may have only one name.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TrustedApprovers {
    by_key: BTreeMap<[u8; 32], String>,
}

impl fmt::Debug for TrustedApprovers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.by_key
                    .iter()
                    .map(|(key, name)| (name, fingerprint(key))),
            )
            .finish()
    }
}

impl TrustedApprovers {
    /// Parses `NAME KEY` lines. A line that is not two words, a key that is not base64 of
    /// 32 bytes (or not a valid ed25519 point, or a small-order point, or not the canonical
    /// encoding of its point), and a key listed under two names are errors naming the line,
    /// never repeating it; so is a list with no key at all.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut by_key = BTreeMap::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let problem = |problem: &str| {
                Error::malformed(
                    "trusted_approvers",
                    format!("line {}: {problem}", index + 1),
                )
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            let [name, key] = words.as_slice() else {
                return Err(problem("expected NAME KEY (a .pub file's line)"));
            };
            let name = approver_name((*name).to_owned())
                .map_err(|_| problem("the name must be one word without #"))?;
            let key: [u8; 32] = decode_exact(key, "trusted_approvers")
                .map_err(|_| problem("the key is not base64 of 32 bytes"))?;
            let Ok(point) = VerifyingKey::from_bytes(&key) else {
                return Err(problem("the key is not an ed25519 public key"));
            };
            // A small-order point: signatures under it can be made without a secret.
            if point.is_weak() {
                return Err(problem(
                    "the key is a small-order ed25519 point, which anyone can sign for",
                ));
            }
            // Another spelling of a point than its canonical one: one key, two encodings.
            if point.to_edwards().compress().to_bytes() != key {
                return Err(problem(
                    "the key is not in canonical ed25519 encoding (it is another spelling of a point)",
                ));
            }
            match by_key.get(&key) {
                Some(existing) if *existing != name => {
                    return Err(problem("this key is already listed under another name"));
                }
                _ => {
                    by_key.insert(key, name);
                }
            }
        }
        if by_key.is_empty() {
            return Err(Error::malformed(
                "trusted_approvers",
                "lists no key: with it set, nothing could lift a suppression",
            ));
        }
        Ok(TrustedApprovers { by_key })
    }

    /// Reads a trusted-approvers file; a file that cannot be read or is malformed is
    /// [`Error::File`] naming it.
    pub fn read_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        read_text("trusted-approvers file", path).and_then(|text| {
            TrustedApprovers::parse(&text)
                .map_err(|e| file_error("trusted-approvers file", path, e))
        })
    }

    /// How many keys are trusted.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key is trusted (never true of a parsed list).
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The name of the trusted approver whose key validly signed `opt_in`, if any.
    pub fn name_of(&self, opt_in: &OptIn) -> Option<&str> {
        match &opt_in.signature {
            SignatureCheck::Signed {
                key, valid: true, ..
            } => self.by_key.get(key).map(String::as_str),
            _ => None,
        }
    }
}

/// Whether `run_id` matches `pattern`, where `*` stands for any run of characters (none
/// included) and every other character for itself.
pub fn run_id_matches(pattern: &str, run_id: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = run_id.chars().collect();
    // Greedy matching with backtracking to the last star: linear in practice.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// Whether `pattern` matches every run id, as a pattern made only of `*` does: an approval
/// with it covers every run of its pipeline, scheduled ones included.
pub fn matches_every_run_id(pattern: &str) -> bool {
    !pattern.is_empty() && pattern.chars().all(|c| c == '*')
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;

    fn opt_in() -> OptIn {
        OptIn::new(
            "re-send corrected invoices",
            "jane@ops",
            Utc.with_ymd_and_hms(2026, 9, 1, 0, 0, 0).unwrap(),
        )
        .unwrap()
        .for_kind(EffectKind::Email)
        .for_kind(EffectKind::Webhook)
        .for_pipeline("daily_orders")
        .for_backfill("bf-2026-07")
    }

    #[test]
    fn a_file_round_trips_and_its_signature_verifies() {
        let key = ApproverKey::from_seed("jane", [1; 32]).unwrap();
        let signed = opt_in().signed_with(&key).unwrap();
        let text = signed.to_file_json().unwrap();
        let read = OptIn::from_file_json(&text).unwrap();
        assert_eq!(read, signed);
        assert!(matches!(
            read.signature,
            SignatureCheck::Signed { valid: true, .. }
        ));
        let unsigned = OptIn::from_file_json(&opt_in().to_file_json().unwrap()).unwrap();
        assert_eq!(unsigned.signature, SignatureCheck::Unsigned);
    }

    #[test]
    fn the_signed_text_is_canonical_compact_json() {
        let opt_in = opt_in()
            .for_kind(EffectKind::Alert)
            .for_target("b@x.example")
            .for_target("a@x.example");
        assert_eq!(
            String::from_utf8(opt_in.signed_text().unwrap()).unwrap(),
            "{\"format\":\"replaysafe-opt-in/1\",\"pipeline\":\"daily_orders\",\"backfill_id\":\"bf-2026-07\",\
             \"run_id_pattern\":null,\"kinds\":[\"alert\",\"email\",\"webhook\"],\"targets\":[\"a@x.example\",\"b@x.example\"],\
             \"reason\":\"re-send corrected invoices\",\"approved_by\":\"jane@ops\",\"expires_at\":\"2026-09-01T00:00:00Z\"}"
        );
    }

    #[test]
    fn any_changed_character_of_the_scope_breaks_the_signature() {
        let key = ApproverKey::from_seed("jane", [1; 32]).unwrap();
        let text = opt_in().signed_with(&key).unwrap().to_file_json().unwrap();
        for (from, to) in [
            ("corrected", "corrupted"),
            ("daily_orders", "daily_orderz"),
            ("bf-2026-07", "bf-2026-08"),
            ("2026-09-01", "2026-09-02"),
            ("\"email\"", "\"alert\""),
            ("jane@ops", "jake@ops"),
        ] {
            let tampered = text.replacen(from, to, 1);
            assert_ne!(tampered, text, "{from}");
            let read = OptIn::from_file_json(&tampered).unwrap();
            assert!(
                matches!(read.signature, SignatureCheck::Signed { valid: false, .. }),
                "{from} -> {to}"
            );
        }
    }

    #[test]
    fn malformed_files_are_errors_naming_the_field() {
        let text = opt_in().to_file_json().unwrap();
        for (from, to, field) in [
            ("\"format\"", "\"formats\"", "opt_in"),
            (
                "replaysafe-opt-in/1",
                "replaysafe-opt-in/2",
                "opt_in.format",
            ),
            ("\"email\"", "\"e mail\"", "opt_in.kinds"),
            ("2026-09-01T00:00:00Z", "tomorrow", "opt_in.expires_at"),
            ("\"bf-2026-07\"", "null", "opt_in.backfill_id"),
            ("\"re-send corrected invoices\"", "\" \"", "opt_in.reason"),
        ] {
            let error = OptIn::from_file_json(&text.replacen(from, to, 1)).unwrap_err();
            assert!(error.to_string().contains(field), "{from}: {error}");
        }
        let both = text.replacen(
            "\"run_id_pattern\": null",
            "\"run_id_pattern\": \"backfill__*\"",
            1,
        );
        assert!(
            OptIn::from_file_json(&both)
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
    }

    #[test]
    fn secret_keys_round_trip_and_never_show() {
        let key = ApproverKey::from_seed("jane", [9; 32]).unwrap();
        let secret = key.to_secret_file();
        let read = ApproverKey::from_secret_file(&secret).unwrap();
        assert_eq!(read.public_key(), key.public_key());
        let seed = STANDARD.encode([9u8; 32]);
        assert!(!format!("{key:?}").contains(&seed));
        let broken = secret.replace(SECRET_KEY_TAG, "other");
        assert!(
            !ApproverKey::from_secret_file(&broken)
                .unwrap_err()
                .to_string()
                .contains(&seed)
        );
        // A secret key pasted into a trusted list is refused, without being repeated.
        let error = TrustedApprovers::parse(&secret).unwrap_err().to_string();
        assert!(
            error.contains("line 1") && !error.contains(&seed),
            "{error}"
        );
    }

    #[test]
    fn trusted_lists_are_parsed_strictly() {
        let jane = ApproverKey::from_seed("jane", [1; 32]).unwrap();
        let joe = ApproverKey::from_seed("joe", [2; 32]).unwrap();
        let text = format!("# reviewers\n{}\n{}", jane.public_line(), joe.public_line());
        let trusted = TrustedApprovers::parse(&text).unwrap();
        assert_eq!(trusted.len(), 2);
        let signed = opt_in().signed_with(&joe).unwrap();
        assert_eq!(trusted.name_of(&signed), Some("joe"));
        assert_eq!(trusted.name_of(&opt_in()), None);
        for bad in [
            "",
            "jane\n",
            "jane AAAA\n",
            &format!("jane {} extra\n", jane.public_key()),
            &format!("{}joe {}\n", jane.public_line(), jane.public_key()),
        ] {
            assert!(TrustedApprovers::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// `y` as a 32-byte ed25519 encoding with the sign bit clear (little-endian).
    fn encoding(y: &[u8]) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        bytes[..y.len()].copy_from_slice(y);
        bytes
    }

    /// `p + small`, where p = 2^255 - 19: a non-canonical spelling of the y coordinate `small`.
    fn non_canonical(small: u8) -> [u8; 32] {
        let mut bytes = [0xff; 32];
        bytes[31] = 0x7f;
        // p = 0x7fff…ffed; adding `small` < 19 never carries out of the first byte.
        bytes[0] = 0xed + small;
        bytes
    }

    #[test]
    fn small_order_and_non_canonical_trusted_keys_are_refused_naming_the_line() {
        let jane = ApproverKey::from_seed("jane", [1; 32]).unwrap();
        let line = |name: &str, key: &[u8; 32]| format!("{name} {}\n", STANDARD.encode(key));
        // The identity (y = 1) and the point of order 2 (y = -1) are small-order.
        let minus_one = {
            let mut bytes = non_canonical(0);
            bytes[0] -= 1;
            bytes
        };
        for weak in [encoding(&[1]), minus_one] {
            assert!(VerifyingKey::from_bytes(&weak).unwrap().is_weak());
            let text = format!("{}{}", jane.public_line(), line("mallory", &weak));
            let error = TrustedApprovers::parse(&text).unwrap_err().to_string();
            assert!(
                error.contains("line 2") && error.contains("small-order"),
                "{error}"
            );
        }
        // Some y below 19 is on the curve and not small-order: p + y spells it again.
        let spelled_twice = (0u8..19)
            .map(non_canonical)
            .find(|bytes| VerifyingKey::from_bytes(bytes).is_ok_and(|key| !key.is_weak()))
            .expect("a non-canonical encoding of a point of large order");
        let text = format!("# keys\n{}", line("mallory", &spelled_twice));
        let error = TrustedApprovers::parse(&text).unwrap_err().to_string();
        assert!(
            error.contains("line 2") && error.contains("canonical"),
            "{error}"
        );
        assert!(!error.contains(&STANDARD.encode(spelled_twice)), "{error}");
        // A real key passes.
        assert_eq!(
            TrustedApprovers::parse(&jane.public_line()).unwrap().len(),
            1
        );
    }

    #[test]
    fn run_id_patterns_match_with_stars() {
        assert!(run_id_matches(
            "backfill__2026-07-*",
            "backfill__2026-07-05T00:00:00Z"
        ));
        assert!(run_id_matches("*", ""));
        assert!(run_id_matches("a*b*c", "aXbYbZc"));
        assert!(run_id_matches("exact", "exact"));
        assert!(!run_id_matches("exact", "exactly"));
        assert!(!run_id_matches(
            "backfill__2026-07-*",
            "backfill__2026-08-01"
        ));
        assert!(!run_id_matches("a*b", "a"));
        for every in ["*", "**", "***"] {
            assert!(matches_every_run_id(every) && run_id_matches(every, ""));
        }
        for some in ["", "*_*", "backfill__*", "* "] {
            assert!(!matches_every_run_id(some), "{some:?}");
        }
    }
}
