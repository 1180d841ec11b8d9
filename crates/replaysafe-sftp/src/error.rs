//! The crate's error type: opaque, classified, free of secrets.

use std::fmt;
use std::io;

use replaysafe_core::Classify;

/// Why a file drop could not be configured, described or delivered.
///
/// Opaque: ask it questions ([`is_transient`](Classify::is_transient),
/// [`is_conflict`](Error::is_conflict), [`field`](Error::field), ...) rather than matching on it.
/// The backend's error, when there is one, is reachable through
/// [`source`](std::error::Error::source).
///
/// | what happened | class |
/// |---|---|
/// | connection refused, reset or cut; timeouts; name resolution | transient |
/// | host key unknown or changed | permanent, before authentication |
/// | authentication refused, unreadable key, wrong passphrase | permanent |
/// | permission denied, missing directory, other refusals of the server | permanent |
/// | a different file already under the final name | permanent (`conflicting file`) |
/// | invalid configuration or file name | permanent, nothing sent |
///
/// Messages say what was being done and never contain a passphrase.
pub struct Error {
    kind: Kind,
    context: String,
    detail: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Invalid configuration or effect; the field it names.
    Invalid(&'static str),
    /// A local file to upload could not be read, or changed after it was hashed.
    LocalFile,
    /// Connecting, resolving, or the connection broke.
    Connection,
    /// The server's host key is not the one in known_hosts.
    HostKey,
    /// The server refused the key, or the key could not be used.
    Authentication,
    /// The server refused an operation; `transient` when waiting may help (a full disk).
    Remote { transient: bool },
    /// A different file already lies under the final name.
    Conflict,
    /// The blocking task did not finish (it panicked or the runtime is shutting down).
    Task,
}

impl Error {
    pub(crate) fn new(kind: Kind, context: impl Into<String>, detail: impl Into<String>) -> Self {
        Error {
            kind,
            context: context.into(),
            detail: detail.into(),
            source: None,
        }
    }

    pub(crate) fn invalid(field: &'static str, detail: impl Into<String>) -> Self {
        Error::new(Kind::Invalid(field), format!("invalid {field}"), detail)
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    pub(crate) fn reclassified(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// Prefixes the context, e.g. with the target the failure happened on.
    pub(crate) fn while_doing(mut self, context: impl fmt::Display) -> Self {
        self.context = format!("{context}: {}", self.context);
        self
    }

    /// Classifies an I/O error of the TCP connection.
    pub(crate) fn from_io(context: impl Into<String>, error: io::Error) -> Self {
        let transient = matches!(
            error.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::NotConnected
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::TimedOut
                | io::ErrorKind::WouldBlock
                | io::ErrorKind::Interrupted
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::AddrNotAvailable
                | io::ErrorKind::HostUnreachable
                | io::ErrorKind::NetworkUnreachable
                | io::ErrorKind::NetworkDown
        );
        let kind = if transient {
            Kind::Connection
        } else {
            Kind::Remote { transient: false }
        };
        Error::new(kind, context, "").with_source(error)
    }

    /// Classifies an error of libssh2 (session or SFTP level).
    pub(crate) fn from_ssh(context: impl Into<String>, error: ssh2::Error) -> Self {
        let kind = classify_ssh(error.code());
        let cause = SshFailure {
            message: describe_ssh(&error),
            error,
        };
        Error::new(kind, context, "").with_source(cause)
    }

    /// Whether trying again later may succeed: see the table on the type.
    fn transient(&self) -> bool {
        matches!(
            self.kind,
            Kind::Connection | Kind::Remote { transient: true }
        )
    }

    /// Whether the effect or the configuration was invalid (nothing was sent).
    pub fn is_invalid(&self) -> bool {
        matches!(self.kind, Kind::Invalid(_))
    }

    /// The same invalid-input error, reported against the field `field` (a client
    /// configuration's own name: `key` for the builder's `private_key`); other errors are
    /// returned as they are.
    pub fn at_field(mut self, field: &'static str) -> Self {
        if let Kind::Invalid(_) = self.kind {
            self.kind = Kind::Invalid(field);
            self.context = format!("invalid {field}");
        }
        self
    }

    /// The configuration or effect field at fault, for invalid input: `name`,
    /// `remote_dir`, `host`, `known_hosts`, ...
    pub fn field(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Invalid(field) => Some(field),
            _ => None,
        }
    }

    /// Whether a different file already lies under the final name (and overwriting is off).
    pub fn is_conflict(&self) -> bool {
        self.kind == Kind::Conflict
    }

    /// Whether the server's host key was unknown or did not match known_hosts; nothing
    /// was authenticated or uploaded.
    pub fn is_host_key(&self) -> bool {
        self.kind == Kind::HostKey
    }

    /// Whether the server refused the client key, or the key could not be loaded.
    pub fn is_authentication(&self) -> bool {
        self.kind == Kind::Authentication
    }

    /// Whether connecting failed or the connection broke (refused, reset, timed out).
    pub fn is_connection(&self) -> bool {
        self.kind == Kind::Connection
    }

    /// Whether a local file to upload could not be read or changed while uploading.
    pub fn is_local_file(&self) -> bool {
        self.kind == Kind::LocalFile
    }
}

impl Classify for Error {
    fn is_transient(&self) -> bool {
        self.transient()
    }

    /// `connect`, `host_key`, `authentication`, `remote` (the server refused an
    /// operation), `conflict`, `local_file`, `invalid`, else `_OTHER`.
    fn error_type(&self) -> std::borrow::Cow<'static, str> {
        match self.kind {
            Kind::Connection => "connect",
            Kind::HostKey => "host_key",
            Kind::Authentication => "authentication",
            Kind::Remote { .. } => "remote",
            Kind::Conflict => "conflict",
            Kind::LocalFile => "local_file",
            Kind::Invalid(_) => "invalid",
            Kind::Task => replaysafe_core::ERROR_TYPE_OTHER,
        }
        .into()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            f.write_str(&self.context)
        } else {
            write!(f, "{}: {}", self.context, self.detail)
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("context", &self.context)
            .field("detail", &self.detail)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

// libssh2's session error codes (libssh2.h), as far as classification needs them.
const BANNER_RECV: i32 = -2;
const BANNER_SEND: i32 = -3;
const INVALID_MAC: i32 = -4;
const SOCKET_SEND: i32 = -7;
const KEY_EXCHANGE_FAILURE: i32 = -8;
const TIMEOUT: i32 = -9;
const DECRYPT: i32 = -12;
const SOCKET_DISCONNECT: i32 = -13;
const PROTO: i32 = -14;
const FILE: i32 = -16;
const AUTHENTICATION_FAILED: i32 = -18;
const PUBLICKEY_UNVERIFIED: i32 = -19;
const CHANNEL_FAILURE: i32 = -21;
const CHANNEL_CLOSED: i32 = -26;
const CHANNEL_EOF_SENT: i32 = -27;
const SOCKET_TIMEOUT: i32 = -30;
const EAGAIN: i32 = -37;
const SOCKET_RECV: i32 = -43;
const BAD_SOCKET: i32 = -45;
const KEYFILE_AUTH_FAILED: i32 = -48;

// SFTP status codes (draft-ietf-secsh-filexfer), as libssh2 reports them.
pub(crate) const FX_NO_SUCH_FILE: i32 = 2;
const FX_NO_CONNECTION: i32 = 6;
const FX_CONNECTION_LOST: i32 = 7;
pub(crate) const FX_NO_SUCH_PATH: i32 = 10;
const FX_NO_SPACE_ON_FILESYSTEM: i32 = 14;
const FX_LOCK_CONFLICT: i32 = 17;

fn classify_ssh(code: ssh2::ErrorCode) -> Kind {
    match code {
        ssh2::ErrorCode::Session(
            BANNER_RECV | BANNER_SEND | INVALID_MAC | SOCKET_SEND | KEY_EXCHANGE_FAILURE | TIMEOUT
            | DECRYPT | SOCKET_DISCONNECT | PROTO | CHANNEL_CLOSED | CHANNEL_EOF_SENT
            | CHANNEL_FAILURE | SOCKET_TIMEOUT | EAGAIN | SOCKET_RECV | BAD_SOCKET,
        ) => Kind::Connection,
        ssh2::ErrorCode::Session(
            FILE | AUTHENTICATION_FAILED | PUBLICKEY_UNVERIFIED | KEYFILE_AUTH_FAILED,
        ) => Kind::Authentication,
        ssh2::ErrorCode::Session(_) => Kind::Remote { transient: false },
        ssh2::ErrorCode::SFTP(FX_NO_CONNECTION | FX_CONNECTION_LOST) => Kind::Connection,
        ssh2::ErrorCode::SFTP(FX_NO_SPACE_ON_FILESYSTEM | FX_LOCK_CONFLICT) => {
            Kind::Remote { transient: true }
        }
        ssh2::ErrorCode::SFTP(_) => Kind::Remote { transient: false },
    }
}

/// libssh2's message, lowercase as our messages are, with the code in the form the
/// protocol documents use.
/// A libssh2 failure, described in this crate's words (`username/publickey combination
/// invalid (libssh2 error -18)`); the libssh2 error itself is kept for `Debug`.
#[derive(Debug)]
struct SshFailure {
    message: String,
    #[allow(dead_code)] // Read through `Debug` only.
    error: ssh2::Error,
}

impl fmt::Display for SshFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SshFailure {}

fn describe_ssh(error: &ssh2::Error) -> String {
    let message = error.message().trim_end_matches('.');
    let mut chars = message.chars();
    let message = match chars.next() {
        Some(first) if !chars.as_str().starts_with(char::is_uppercase) => {
            first.to_lowercase().collect::<String>() + chars.as_str()
        }
        _ => message.to_owned(),
    };
    match error.code() {
        ssh2::ErrorCode::Session(code) => format!("{message} (libssh2 error {code})"),
        ssh2::ErrorCode::SFTP(code) => format!("{message} (sftp status {code})"),
    }
}

/// Whether `error` is the SFTP status "no such file" (or "no such path").
pub(crate) fn is_not_found(error: &ssh2::Error) -> bool {
    matches!(
        error.code(),
        ssh2::ErrorCode::SFTP(FX_NO_SUCH_FILE | FX_NO_SUCH_PATH)
    )
}

/// Whether `error` says the connection is gone, so the session cannot be reused.
pub(crate) fn breaks_session(kind: Kind) -> bool {
    matches!(kind, Kind::Connection | Kind::Task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_failures_are_transient_refusals_permanent() {
        let cut = Error::from_ssh(
            "uploading",
            ssh2::Error::new(ssh2::ErrorCode::Session(SOCKET_SEND), "Unable to send"),
        );
        assert!(cut.is_transient() && cut.is_connection());
        // The message says what was being done; the cause, once, is the source.
        assert_eq!(cut.to_string(), "uploading");
        assert_eq!(
            replaysafe_core::error_chain(&cut),
            "uploading: unable to send (libssh2 error -7)"
        );

        let denied = Error::from_ssh(
            "opening",
            ssh2::Error::new(ssh2::ErrorCode::SFTP(3), "permission denied"),
        );
        assert!(denied.is_permanent());
        let auth = Error::from_ssh(
            "authenticating",
            ssh2::Error::new(ssh2::ErrorCode::Session(AUTHENTICATION_FAILED), "x"),
        );
        assert!(auth.is_permanent() && auth.is_authentication());
        let full = Error::from_ssh(
            "writing",
            ssh2::Error::new(ssh2::ErrorCode::SFTP(FX_NO_SPACE_ON_FILESYSTEM), "full"),
        );
        assert!(full.is_transient());

        let refused = Error::from_io(
            "connecting",
            io::Error::from(io::ErrorKind::ConnectionRefused),
        );
        assert!(refused.is_transient());
        let conflict = Error::new(Kind::Conflict, "dropping x", "conflicting file");
        assert!(conflict.is_permanent() && conflict.is_conflict());
        let invalid = Error::invalid("name", "must not be empty");
        assert_eq!(invalid.field(), Some("name"));
        assert_eq!(invalid.to_string(), "invalid name: must not be empty");
    }
}
