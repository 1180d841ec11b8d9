//! The crate's one error type: opaque, classified, free of secrets and addresses.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::time::Duration;

use replaysafe_core::{Classify, TargetRedaction};

/// Why an email could not be described, configured or delivered.
///
/// The kind is private; ask with the predicates. The backend's cause is reachable through
/// [`std::error::Error::source`] only, so a lettre upgrade is not a breaking change: for
/// an SMTP failure, the server's reply with its addresses reduced to `*@domain`, and
/// below it lettre's own cause of a connection or TLS failure.
///
/// Messages never carry a password, a message body or a recipient address: they are
/// journaled and logged. A server's reply that quotes an address of the envelope
/// (`550 5.1.1 <ana@shop.example>: ...`) shows it as `*@shop.example`. Invalid input names the field (`invalid email field subject:
/// contains CR or LF`) and points at a list entry by index (`to[1]`), not by value.
///
/// # Classification
///
/// | failure | class |
/// |---|---|
/// | SMTP 4xx reply (greylisting, mailbox busy, 421 closing) | transient |
/// | connection refused, reset, timed out, network error | transient |
/// | no answer within the client's `timeout` | transient |
/// | SMTP 5xx reply, 535 authentication failure included | permanent |
/// | TLS handshake or certificate failure, garbled reply, missing STARTTLS or AUTH | permanent |
/// | invalid email or configuration | permanent (and never sent) |
/// | writing the `.eml` file of the folder backend | permanent |
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error {
    kind: Kind,
}

#[derive(Debug, thiserror::Error)]
enum Kind {
    /// The email is malformed; found by `describe`, before anything is sent.
    #[error("invalid email field {}: {}", .0.field, .0.problem)]
    Invalid(Invalid),
    /// The client's configuration is wrong; found when building it.
    #[error("invalid email client configuration {field}: {problem}")]
    Config {
        field: &'static str,
        problem: String,
    },
    /// An SMTP exchange failed.
    #[error("sending email through {server}")]
    Smtp { server: String, source: ServerError },
    /// The server did not finish the attempt in time.
    #[error("sending email through {server}: no answer within {after:?}")]
    TimedOut { server: String, after: Duration },
    /// Writing the `.eml` file failed.
    #[error("writing email to folder {folder}")]
    Folder {
        folder: String,
        source: lettre::transport::file::Error,
    },
}

/// A field of an email that failed validation. Cloned out of the email's cached validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub(crate) field: String,
    pub(crate) problem: String,
}

impl Invalid {
    pub(crate) fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Invalid {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

impl From<Invalid> for Error {
    fn from(invalid: Invalid) -> Self {
        Error {
            kind: Kind::Invalid(invalid),
        }
    }
}

impl Error {
    pub(crate) fn config(field: &'static str, problem: impl Into<String>) -> Self {
        Error {
            kind: Kind::Config {
                field,
                problem: problem.into(),
            },
        }
    }

    /// An SMTP failure; every address in `addresses` (the envelope's) is shown through
    /// `redaction` wherever the server's reply quotes it (`*@domain` for `Full`).
    pub(crate) fn smtp<'a>(
        server: &str,
        source: lettre::transport::smtp::Error,
        addresses: impl IntoIterator<Item = &'a str>,
        redaction: TargetRedaction,
    ) -> Self {
        let text = scrub_addresses(lowercase_first(&source.to_string()), addresses, redaction);
        Error {
            kind: Kind::Smtp {
                server: server.to_owned(),
                source: ServerError {
                    text,
                    inner: source,
                },
            },
        }
    }

    pub(crate) fn timed_out(server: &str, after: Duration) -> Self {
        Error {
            kind: Kind::TimedOut {
                server: server.to_owned(),
                after,
            },
        }
    }

    pub(crate) fn folder(folder: &str, source: lettre::transport::file::Error) -> Self {
        Error {
            kind: Kind::Folder {
                folder: folder.to_owned(),
                source,
            },
        }
    }

    /// Whether the email itself is invalid (a bad address, CR or LF in a header, no
    /// recipient). Such an email is refused by `describe`: nothing is sent or journaled.
    pub fn is_invalid(&self) -> bool {
        matches!(self.kind, Kind::Invalid(_))
    }

    /// The same configuration error, reported against the field `field` (a client
    /// configuration's own name: `smtp` for the builder's `host`); other errors are
    /// returned as they are.
    pub fn at_field(self, field: &'static str) -> Self {
        match self.kind {
            Kind::Config { problem, .. } => Error::config(field, problem),
            kind => Error { kind },
        }
    }

    /// Whether the client's configuration was refused when building it.
    pub fn is_config(&self) -> bool {
        matches!(self.kind, Kind::Config { .. })
    }

    /// The field at fault, for invalid emails (`subject`, `to[0] display name`,
    /// `attachment[1] filename`, `recipients`) and refused configurations (`host`, `tls`).
    pub fn field(&self) -> Option<&str> {
        match &self.kind {
            Kind::Invalid(invalid) => Some(&invalid.field),
            Kind::Config { field, .. } => Some(field),
            _ => None,
        }
    }

    /// The SMTP reply code of a refusal (`451`, `535`, `550`), if the server sent one.
    pub fn smtp_code(&self) -> Option<u16> {
        match &self.kind {
            Kind::Smtp { source, .. } => source.inner.status().map(u16::from),
            _ => None,
        }
    }

    /// Whether the attempt ran out of time (the client's `timeout`).
    pub fn is_timeout(&self) -> bool {
        match &self.kind {
            Kind::TimedOut { .. } => true,
            Kind::Smtp { source, .. } => source.inner.is_timeout(),
            _ => false,
        }
    }

    /// Whether the failure happened before the server gave any SMTP reply: the
    /// connection was refused, reset or timed out, or the TLS handshake failed.
    pub fn is_connection(&self) -> bool {
        match &self.kind {
            Kind::Smtp { source, .. } => {
                let source = &source.inner;
                source.status().is_none()
                    && !source.is_client()
                    && !source.is_response()
                    && !source.is_transport_shutdown()
            }
            _ => false,
        }
    }
}

/// Whether an I/O error in the chain is a TLS failure: tokio-rustls reports handshake
/// and certificate errors as `InvalidData`, while refusals, resets and timeouts have
/// their own kinds.
fn io_kind(error: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io_error) = error.downcast_ref::<io::Error>() {
            return Some(io_error.kind());
        }
        current = error.source();
    }
    None
}

/// Whether a failure with no SMTP reply is TLS's: lettre's own TLS error, or a handshake
/// or certificate failure, which tokio-rustls reports as an I/O error of kind `InvalidData`.
fn is_tls_failure(error: &lettre::transport::smtp::Error) -> bool {
    error.is_tls()
        || matches!(
            io_kind(error),
            Some(io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput)
        )
}

fn smtp_is_transient(error: &lettre::transport::smtp::Error) -> bool {
    if error.is_transient() || error.is_timeout() {
        return true;
    }
    if error.is_permanent()
        || error.is_client()
        || error.is_response()
        || error.is_tls()
        || error.is_transport_shutdown()
    {
        return false;
    }
    // A connection or network error: refused, reset, timed out, unreachable; not a TLS
    // handshake that failed, which no retry repairs.
    !is_tls_failure(error)
}

impl Classify for Error {
    fn is_transient(&self) -> bool {
        match &self.kind {
            Kind::Smtp { source, .. } => smtp_is_transient(&source.inner),
            Kind::TimedOut { .. } => true,
            Kind::Invalid(_) | Kind::Config { .. } | Kind::Folder { .. } => false,
        }
    }

    /// The server's SMTP reply code when it refused (`550`), `timeout` and `connect` when
    /// it gave no reply for that reason, `tls` for a failed handshake or an untrusted
    /// certificate, `folder` for the folder backend, `invalid` for refused input, else
    /// `_OTHER`.
    fn error_type(&self) -> std::borrow::Cow<'static, str> {
        if let Some(code) = self.smtp_code() {
            return code.to_string().into();
        }
        match &self.kind {
            _ if self.is_timeout() => "timeout".into(),
            Kind::Smtp { source, .. } if is_tls_failure(&source.inner) => "tls".into(),
            _ if self.is_connection() => "connect".into(),
            Kind::Folder { .. } => "folder".into(),
            Kind::Invalid(_) | Kind::Config { .. } => "invalid".into(),
            Kind::Smtp { .. } | Kind::TimedOut { .. } => replaysafe_core::ERROR_TYPE_OTHER.into(),
        }
    }
}

/// lettre's SMTP error as this crate shows it: lowercase, and with the envelope's
/// addresses reduced to `*@domain`, since a server's reply often quotes the recipient
/// (`550 5.1.1 <ana@shop.example>: Recipient address rejected`) and messages are
/// journaled and logged. Its source is lettre's own cause for a connection or TLS
/// failure (an I/O error), never the reply, so an error chain prints no unscrubbed text.
pub(crate) struct ServerError {
    text: String,
    inner: lettre::transport::smtp::Error,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // lettre's Debug holds the reply as the server sent it.
        f.debug_struct("ServerError")
            .field("text", &self.text)
            .field("code", &self.inner.status().map(u16::from))
            .finish_non_exhaustive()
    }
}

impl StdError for ServerError {
    /// lettre's cause for a connection or TLS failure. A server reply has none here:
    /// lettre's cause would be the reply text as sent, already shown (scrubbed) above.
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        if self.inner.status().is_some() || self.inner.is_response() {
            return None;
        }
        self.inner.source()
    }
}

/// Replaces every occurrence of each address, in any ASCII case, by its redacted form:
/// `*@domain`, or the hash with [`TargetRedaction::Hashed`].
fn scrub_addresses<'a>(
    mut text: String,
    addresses: impl IntoIterator<Item = &'a str>,
    redaction: TargetRedaction,
) -> String {
    let redaction = match redaction {
        TargetRedaction::Hashed => TargetRedaction::Hashed,
        _ => TargetRedaction::DomainOnly,
    };
    for address in addresses {
        if !address.contains('@') {
            continue;
        }
        let shown = redaction.apply(address).into_owned();
        // ASCII lowercasing keeps byte offsets, so a match maps back onto `text`.
        let needle = address.to_ascii_lowercase();
        let mut from = 0;
        while let Some(found) = text.to_ascii_lowercase()[from..].find(&needle) {
            let start = from + found;
            text.replace_range(start..start + needle.len(), &shown);
            from = start + shown.len();
        }
    }
    text
}

/// lettre says "Connection error: ..."; our messages are lowercase.
fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_fields_are_named_and_permanent() {
        let error = Error::from(Invalid::new("subject", "contains CR or LF"));
        assert_eq!(
            error.to_string(),
            "invalid email field subject: contains CR or LF"
        );
        assert!(error.is_invalid() && error.is_permanent() && !error.is_transient());
        assert_eq!(error.field(), Some("subject"));
        assert_eq!(error.smtp_code(), None);
        assert!(!error.is_connection());
    }

    #[test]
    fn quoted_addresses_are_reduced_to_their_domain() {
        let text =
            "permanent error (550): 5.1.1 <Ana.Lima@Shop.Example>: rejected; ana.lima@shop.example";
        let addresses = ["ana.lima@shop.example", "reports@x.example"];
        for redaction in [TargetRedaction::DomainOnly, TargetRedaction::Full] {
            assert_eq!(
                scrub_addresses(text.to_owned(), addresses, redaction),
                "permanent error (550): 5.1.1 <*@shop.example>: rejected; *@shop.example"
            );
        }
        let hashed = scrub_addresses(text.to_owned(), addresses, TargetRedaction::Hashed);
        let shown = TargetRedaction::Hashed.apply("ana.lima@shop.example");
        assert_eq!(
            hashed,
            format!("permanent error (550): 5.1.1 <{shown}>: rejected; {shown}")
        );
    }

    #[test]
    fn configuration_errors_are_permanent() {
        let error = Error::config("tls", "plaintext is for loopback hosts only");
        assert!(error.is_config() && error.is_permanent());
        assert_eq!(
            error.to_string(),
            "invalid email client configuration tls: plaintext is for loopback hosts only"
        );
    }
}
