//! The journal's payload digest of an email: its bodies and attachments, not its headers.

use replaysafe_core::PayloadDigest;
use sha2::{Digest, Sha256};

use crate::content::Content;

/// Domain separation prefix of the body digest.
const DIGEST_DOMAIN: &[u8] = b"replaysafe.email.body.v1";

/// The journal's payload digest: SHA-256 of `replaysafe.email.body.v1`, then
/// `t` + netstring(text), then `h` + netstring(html) if any, then for each attachment
/// `a` + netstring(filename) + netstring(content type) + netstring(content). The size is
/// the text, HTML and attachment bytes together. Headers (the Date, the MIME boundaries)
/// are left out, so the same email digests the same on every run.
pub(crate) fn body_digest(content: &Content) -> PayloadDigest {
    fn netstring(hasher: &mut Sha256, bytes: &[u8]) {
        hasher.update(bytes.len().to_string().as_bytes());
        hasher.update(b":");
        hasher.update(bytes);
        hasher.update(b",");
    }
    let mut hasher = Sha256::new();
    hasher.update(DIGEST_DOMAIN);
    hasher.update(b"t");
    netstring(&mut hasher, content.text.as_bytes());
    let mut bytes = content.text.len();
    if let Some(html) = &content.html {
        hasher.update(b"h");
        netstring(&mut hasher, html.as_bytes());
        bytes += html.len();
    }
    for attachment in &content.attachments {
        hasher.update(b"a");
        netstring(&mut hasher, attachment.filename.as_bytes());
        netstring(&mut hasher, attachment.content_type.as_bytes());
        netstring(&mut hasher, &attachment.content);
        bytes += attachment.content.len();
    }
    PayloadDigest::from_parts(hasher.finalize().into(), bytes as u64)
}
