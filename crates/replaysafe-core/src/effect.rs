//! What an effect is, as the gate and the journal see it.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::Error;

/// The kind of an external effect; the unit the recency policy and opt-ins speak of.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EffectKind {
    /// An email (max age 6 h by default).
    Email,
    /// A webhook call (6 h).
    Webhook,
    /// A file dropped on a partner's server (6 h).
    FileDrop,
    /// A metric increment or push (6 h).
    Metric,
    /// A page or alert (1 h).
    Alert,
    /// A trigger of downstream work (6 h).
    Trigger,
    /// A kind of the user's own: lowercase ASCII letters, digits and `_`.
    Custom(String),
}

impl EffectKind {
    /// The built-in kinds.
    pub const BUILT_IN: [EffectKind; 6] = [
        EffectKind::Email,
        EffectKind::Webhook,
        EffectKind::FileDrop,
        EffectKind::Metric,
        EffectKind::Alert,
        EffectKind::Trigger,
    ];

    /// A custom kind; the name must be lowercase `[a-z0-9_]`, start with a letter, and not be a built-in name.
    pub fn custom(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        let well_formed = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !well_formed {
            return Err(Error::invalid(
                "effect kind",
                name,
                "a custom kind is 1 to 64 characters of a-z, 0-9 and _, starting with a letter",
            ));
        }
        if EffectKind::BUILT_IN
            .iter()
            .any(|kind| kind.as_str() == name)
        {
            return Err(Error::invalid(
                "effect kind",
                name,
                "is a built-in kind; use its variant",
            ));
        }
        Ok(EffectKind::Custom(name))
    }

    /// The snake_case name used in the journal and in configuration.
    pub fn as_str(&self) -> &str {
        match self {
            EffectKind::Email => "email",
            EffectKind::Webhook => "webhook",
            EffectKind::FileDrop => "file_drop",
            EffectKind::Metric => "metric",
            EffectKind::Alert => "alert",
            EffectKind::Trigger => "trigger",
            EffectKind::Custom(name) => name,
        }
    }
}

impl FromStr for EffectKind {
    type Err = Error;

    /// Built-in names map to their variants; any other well-formed name is `Custom`.
    fn from_str(value: &str) -> Result<Self, Error> {
        Ok(match value {
            "email" => EffectKind::Email,
            "webhook" => EffectKind::Webhook,
            "file_drop" => EffectKind::FileDrop,
            "metric" => EffectKind::Metric,
            "alert" => EffectKind::Alert,
            "trigger" => EffectKind::Trigger,
            other => EffectKind::custom(other)?,
        })
    }
}

impl fmt::Display for EffectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EffectKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EffectKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// SHA-256 digest and size of a payload: what the journal keeps instead of the payload.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PayloadDigest {
    sha256: [u8; 32],
    bytes: u64,
}

impl PayloadDigest {
    /// The digest of an empty payload.
    pub const EMPTY: PayloadDigest = PayloadDigest {
        sha256: [
            0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f,
            0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b,
            0x78, 0x52, 0xb8, 0x55,
        ],
        bytes: 0,
    };

    /// Digest of `payload`.
    pub fn of(payload: &[u8]) -> Self {
        PayloadDigest {
            sha256: Sha256::digest(payload).into(),
            bytes: payload.len() as u64,
        }
    }

    /// A digest computed elsewhere (for instance while streaming a file).
    pub fn from_parts(sha256: [u8; 32], bytes: u64) -> Self {
        PayloadDigest { sha256, bytes }
    }

    /// The raw SHA-256.
    pub fn sha256(&self) -> [u8; 32] {
        self.sha256
    }

    /// The SHA-256 as 64 lowercase hex characters.
    pub fn sha256_hex(&self) -> String {
        crate::key::hex(&self.sha256)
    }

    /// The hex digest without allocating.
    pub(crate) fn sha256_hex_bytes(&self) -> [u8; 64] {
        crate::key::hex_array(&self.sha256)
    }

    /// Size of the payload in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl fmt::Debug for PayloadDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PayloadDigest(sha256:{}, {} bytes)",
            self.sha256_hex(),
            self.bytes
        )
    }
}

/// How an effect appears to the gate and the journal. Adapters build one per effect;
/// it never holds the payload itself or any secret.
///
/// The `target` is the recipient, endpoint or path with credentials and query strings
/// already removed by the adapter. It is key material and what opt-ins match against;
/// the journal shows it through a [`RedactionPolicy`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectDescription {
    kind: EffectKind,
    message_type: String,
    target: String,
    summary: Option<String>,
    action: Option<String>,
    payload: PayloadDigest,
}

impl EffectDescription {
    /// Describes an effect with an empty payload; message type and target must be non-empty
    /// and free of control characters.
    pub fn new(
        kind: EffectKind,
        message_type: impl Into<String>,
        target: impl Into<String>,
    ) -> Result<Self, Error> {
        let message_type = checked_text("message_type", message_type.into())?;
        let target = checked_text("target", target.into())?;
        Ok(EffectDescription {
            kind,
            message_type,
            target,
            summary: None,
            action: None,
            payload: PayloadDigest::of(b""),
        })
    }

    /// Sets the payload digest from the bytes that will be sent.
    pub fn with_payload(mut self, payload: &[u8]) -> Self {
        self.payload = PayloadDigest::of(payload);
        self
    }

    /// Sets a payload digest computed elsewhere.
    pub fn with_payload_digest(mut self, digest: PayloadDigest) -> Self {
        self.payload = digest;
        self
    }

    /// A short, non-secret summary: an email subject, a webhook event type, a file name and size.
    /// Control characters are replaced and the text is cut at 200 characters.
    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        let summary = summary.into();
        let clean = summary.len() <= 200 && !summary.chars().any(char::is_control);
        self.summary = Some(if clean {
            summary
        } else {
            summary
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(200)
                .collect()
        });
        self
    }

    /// The step of a stateful effect, when one key names several: an alert's `trigger`
    /// and its `resolve` share the key the receiver de-duplicates by, and the ledger
    /// remembers each action of a key apart (a resolve is delivered after its trigger; a
    /// second trigger is not). Must be non-empty and free of control characters.
    pub fn with_action(mut self, action: impl Into<String>) -> Result<Self, Error> {
        self.action = Some(checked_text("action", action.into())?);
        Ok(self)
    }

    /// The effect kind.
    pub fn kind(&self) -> &EffectKind {
        &self.kind
    }

    /// The message type, such as `daily_summary`.
    pub fn message_type(&self) -> &str {
        &self.message_type
    }

    /// The unredacted target.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The summary, if any.
    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }

    /// The action, when the key names several; see [`EffectDescription::with_action`].
    pub fn action(&self) -> Option<&str> {
        self.action.as_deref()
    }

    /// Digest and size of the payload.
    pub fn payload(&self) -> PayloadDigest {
        self.payload
    }
}

fn checked_text(field: &'static str, value: String) -> Result<String, Error> {
    if value.trim().is_empty() {
        return Err(Error::invalid(field, value, "must not be empty"));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(
            field,
            value.escape_debug().to_string(),
            "must not contain control characters",
        ));
    }
    Ok(value)
}

/// How a target appears in the journal and in logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetRedaction {
    /// As the adapter described it (already without credentials or query strings).
    #[default]
    Full,
    /// Only the domain: `*@example.com` for addresses, the origin for URLs (scheme, host
    /// and port, as in `https://host:8443`: no credential, path or query), hashed otherwise.
    /// What `replaysafe send --redact origin` chooses.
    DomainOnly,
    /// `sha256:` and the first 16 hex characters of the target's SHA-256: joinable, not readable.
    Hashed,
}

impl TargetRedaction {
    /// Applies the redaction to a target.
    ///
    /// ```
    /// use replaysafe_core::TargetRedaction;
    /// assert_eq!(TargetRedaction::DomainOnly.apply("ana@shop.example"), "*@shop.example");
    /// assert_eq!(TargetRedaction::DomainOnly.apply("https://partner.example/hooks/7"), "https://partner.example");
    /// assert_eq!(
    ///     TargetRedaction::DomainOnly.apply("http://[::1]:8080/services/T0/B0/s3cret"),
    ///     "http://[::1]:8080"
    /// );
    /// assert!(TargetRedaction::Hashed.apply("ana@shop.example").starts_with("sha256:"));
    /// ```
    pub fn apply(self, target: &str) -> Cow<'_, str> {
        Cow::Owned(match self {
            TargetRedaction::Full => return Cow::Borrowed(target),
            TargetRedaction::Hashed => hashed(target),
            TargetRedaction::DomainOnly => {
                if let Some((scheme, rest)) = target.split_once("://") {
                    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
                    let host = authority.rsplit('@').next().unwrap_or("");
                    format!("{scheme}://{host}")
                } else if target.contains('@') {
                    target
                        .split(',')
                        .map(|address| match address.trim().rsplit_once('@') {
                            Some((_, domain)) => format!("*@{domain}"),
                            None => hashed(address.trim()),
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                } else {
                    hashed(target)
                }
            }
        })
    }
}

fn hashed(target: &str) -> String {
    let digest = Sha256::digest(target.as_bytes());
    format!("sha256:{}", &crate::key::hex(&digest)[..16])
}

/// What the journal may show of an effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedactionPolicy {
    target: TargetRedaction,
    summary: bool,
}

impl Default for RedactionPolicy {
    /// Full targets, summaries shown.
    fn default() -> Self {
        RedactionPolicy {
            target: TargetRedaction::Full,
            summary: true,
        }
    }
}

impl RedactionPolicy {
    /// A policy with the given target redaction that shows summaries.
    pub const fn new(target: TargetRedaction) -> Self {
        RedactionPolicy {
            target,
            summary: true,
        }
    }

    /// Whether summaries (subjects, event types) reach the journal.
    pub fn with_summaries(mut self, shown: bool) -> Self {
        self.summary = shown;
        self
    }

    /// The target redaction.
    pub fn target(&self) -> TargetRedaction {
        self.target
    }

    /// Whether summaries are shown.
    pub fn shows_summaries(&self) -> bool {
        self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_custom_names_are_checked() {
        for kind in EffectKind::BUILT_IN {
            assert_eq!(kind.as_str().parse::<EffectKind>().unwrap(), kind);
        }
        assert_eq!(
            "ledger_post".parse::<EffectKind>().unwrap(),
            EffectKind::Custom("ledger_post".into())
        );
        assert!(EffectKind::custom("email").is_err());
        let err = EffectKind::custom("Bad Kind").unwrap_err().to_string();
        assert!(
            err.contains("effect kind") && err.contains("Bad Kind"),
            "{err}"
        );
    }

    #[test]
    fn description_rejects_empty_and_control_fields() {
        let err = EffectDescription::new(EffectKind::Email, "", "a@b.example")
            .unwrap_err()
            .to_string();
        assert!(err.contains("message_type"), "{err}");
        let err = EffectDescription::new(EffectKind::Email, "x", "a@b\r\n.example")
            .unwrap_err()
            .to_string();
        assert!(err.contains("target"), "{err}");
    }

    #[test]
    fn empty_digest_constant_is_right() {
        assert_eq!(PayloadDigest::EMPTY, PayloadDigest::of(b""));
    }

    #[test]
    fn summaries_lose_control_characters_and_length() {
        let description = EffectDescription::new(EffectKind::Email, "m", "t").unwrap();
        assert_eq!(
            description.clone().with_summary("a\r\nb").summary(),
            Some("a  b")
        );
        assert_eq!(
            description
                .with_summary("x".repeat(300))
                .summary()
                .unwrap()
                .len(),
            200
        );
    }

    #[test]
    fn payload_digest_is_sha256() {
        let digest = PayloadDigest::of(b"abc");
        assert_eq!(
            digest.sha256_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(digest.bytes(), 3);
    }

    #[test]
    fn redaction_forms() {
        assert_eq!(
            TargetRedaction::DomainOnly.apply("a@x.example, b@y.example"),
            "*@x.example,*@y.example"
        );
        assert_eq!(
            TargetRedaction::DomainOnly.apply("sftp://user@host.example/out/a.csv"),
            "sftp://host.example"
        );
        assert_eq!(TargetRedaction::Full.apply("a@x.example"), "a@x.example");
        let hashed = TargetRedaction::Hashed.apply("a@x.example");
        assert_eq!(hashed.len(), "sha256:".len() + 16);
        assert!(!hashed.contains("x.example"));
        assert!(
            TargetRedaction::DomainOnly
                .apply("orders_total")
                .starts_with("sha256:")
        );
    }
}
