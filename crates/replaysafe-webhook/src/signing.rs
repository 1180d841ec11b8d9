//! Standard Webhooks signatures (symmetric, `v1`).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use sha2::Sha256;

use crate::Error;

/// A Standard Webhooks signing secret: `whsec_` followed by the base64 of 24 to 64
/// random bytes.
///
/// A signature is `v1,` and the base64 of HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}`,
/// keyed with the decoded bytes. Several secrets give several space-separated signatures
/// in one `webhook-signature` header, so a receiver can rotate keys without a gap.
///
/// The secret never appears in `Debug`, in errors or in logs.
///
/// ```
/// use replaysafe_webhook::SigningSecret;
///
/// // The published test vector of the Standard Webhooks reference libraries.
/// let secret = SigningSecret::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".into())?;
/// let signature = secret.sign(
///     "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
///     1649367553,
///     br#"{"email":"test@example.com","username":"test_user"}"#,
/// );
/// assert_eq!(signature, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
/// assert_eq!(format!("{secret:?}"), "SigningSecret([redacted])");
/// # Ok::<(), replaysafe_webhook::Error>(())
/// ```
#[derive(Clone)]
pub struct SigningSecret {
    key: SecretSlice<u8>,
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret([redacted])")
    }
}

/// The prefix of a symmetric Standard Webhooks secret.
const PREFIX: &str = "whsec_";
/// Bounds on the decoded secret, from the spec: at least 192 bits, at most 512.
const KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

impl SigningSecret {
    /// Decodes a secret (`whsec_` + base64; the prefix may be left out). A secret that is
    /// not base64 or not 24 to 64 bytes long is an error naming `signing_secret`, never
    /// quoting it.
    pub fn new(secret: SecretString) -> Result<Self, Error> {
        let text = secret.expose_secret().trim();
        let encoded = text.strip_prefix(PREFIX).unwrap_or(text);
        let key = BASE64.decode(encoded).map_err(|_| {
            Error::config(
                "signing_secret",
                "expected whsec_ followed by standard base64",
            )
        })?;
        if !KEY_BYTES.contains(&key.len()) {
            return Err(Error::config(
                "signing_secret",
                format!(
                    "decodes to {} bytes; a secret is 24 to 64 random bytes",
                    key.len()
                ),
            ));
        }
        Ok(SigningSecret { key: key.into() })
    }

    /// The `v1,<base64>` signature of `body` sent as message `id` at `timestamp` (Unix seconds).
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        // HMAC accepts keys of any length; the length was checked in `new`.
        let mut mac = Hmac::<Sha256>::new_from_slice(self.key.expose_secret())
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }
}

/// The `webhook-signature` header value: one signature per secret, space-separated.
pub(crate) fn signature_header(
    secrets: &[SigningSecret],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|secret| secret.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const VECTOR_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const VECTOR_TIMESTAMP: i64 = 1649367553;
    const VECTOR_BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const VECTOR_SIGNATURE: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    #[test]
    fn published_test_vector_with_and_without_prefix() {
        for secret in [VECTOR_SECRET, &VECTOR_SECRET[PREFIX.len()..]] {
            let secret = SigningSecret::new(secret.into()).unwrap();
            assert_eq!(
                secret.sign(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY),
                VECTOR_SIGNATURE
            );
        }
    }

    #[test]
    fn rotation_signs_with_every_secret() {
        let old = SigningSecret::new(VECTOR_SECRET.into()).unwrap();
        let new = SigningSecret::new(format!("whsec_{}", BASE64.encode([7u8; 32])).into()).unwrap();
        let header = signature_header(
            &[old, new.clone()],
            VECTOR_ID,
            VECTOR_TIMESTAMP,
            VECTOR_BODY,
        );
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], VECTOR_SIGNATURE);
        assert_eq!(parts[1], new.sign(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY));
    }

    #[test]
    fn bad_secrets_are_named_not_quoted() {
        let short = format!("whsec_{}", BASE64.encode([1u8; 16]));
        let long = format!("whsec_{}", BASE64.encode([1u8; 65]));
        for bad in ["whsec_not base64!", short.as_str(), long.as_str()] {
            let error = SigningSecret::new(bad.into()).unwrap_err().to_string();
            assert!(error.contains("signing_secret"), "{error}");
            assert!(!error.contains(bad), "{error}");
        }
    }
}
