//! `EmailClient`: lettre's async SMTP transport or its `.eml` folder, behind a `Guard`.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::transport::smtp::{AsyncSmtpTransportBuilder, PoolConfig};
use lettre::{AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use replaysafe_core::adapter::PerProcess;
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, RedactionPolicy,
    ReplayContext, TargetRedaction,
};
use secrecy::{ExposeSecret, SecretString};

use crate::EmailCopy;
use crate::error::{Error, Invalid};

/// How the SMTP connection is protected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsMode {
    /// No TLS at all. Allowed only for a loopback host (`127.0.0.0/8`, `::1`,
    /// `localhost`): a local relay or a test server. Any other host is refused when the
    /// client is built.
    Plaintext,
    /// Plain connection upgraded with `STARTTLS`, which is required: a server that does
    /// not offer it fails the delivery (usually port 587). The default.
    #[default]
    StartTls,
    /// TLS from the first byte ("implicit TLS", SMTPS, usually port 465).
    Implicit,
}

/// Recipients as `*@domain`, subjects shown.
const DEFAULT_REDACTION: RedactionPolicy = RedactionPolicy::new(TargetRedaction::DomainOnly);

/// Default time allowed to open the TCP connection.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time allowed for one whole delivery attempt.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// An email client whose only way out is a [`Guard`].
///
/// Two backends, one type, so that a pipeline switches between them by configuration:
///
/// - **SMTP** ([`EmailClient::smtp`]): lettre's async SMTP transport on tokio, TLS by
///   rustls (aws-lc-rs), with a connection pool.
/// - **Folder** ([`EmailClient::folder`]): lettre's file transport, one `<uuid>.eml` per
///   delivered message in a local folder, for development and demos. It goes through the
///   same gate and journal, and writes the same `Message-ID`.
///
/// Build it with [`SmtpClientBuilder::build`] or [`FolderClientBuilder::build`]; the
/// client has no public method that sends.
///
/// The SMTP transport, and its pool, are created on the first delivery, on the tokio
/// runtime that runs it: building a client and sending suppressed effects opens no
/// connection and resolves no name.
pub struct EmailClient {
    backend: Backend,
    redaction: RedactionPolicy,
}

enum Backend {
    Smtp(Box<SmtpBackend>),
    Folder(FolderBackend),
}

struct SmtpBackend {
    /// `smtp://host:port`, as errors show it.
    server: String,
    tls: TlsMode,
    timeout: Duration,
    builder: AsyncSmtpTransportBuilder,
    username: Option<String>,
    password: Option<SecretString>,
    /// This process's transport and its pool; a child of `fork` makes its own.
    transport: PerProcess<AsyncSmtpTransport<Tokio1Executor>>,
}

struct FolderBackend {
    folder: PathBuf,
    shown: String,
    transport: AsyncFileTransport<Tokio1Executor>,
}

impl fmt::Debug for EmailClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.backend {
            Backend::Smtp(smtp) => f
                .debug_struct("EmailClient")
                .field("server", &smtp.server)
                .field("tls", &smtp.tls)
                .field("username", &smtp.username)
                .field("password", &smtp.password.as_ref().map(|_| "[redacted]"))
                .field("connected", &smtp.transport.get().is_some())
                .finish(),
            Backend::Folder(folder) => f
                .debug_struct("EmailClient")
                .field("folder", &folder.folder)
                .finish(),
        }
    }
}

impl EmailClient {
    /// Starts an SMTP client for `host` and `port`; STARTTLS is required unless
    /// [`SmtpClientBuilder::tls`] says otherwise.
    pub fn smtp(host: impl Into<String>, port: u16) -> SmtpClientBuilder {
        SmtpClientBuilder {
            host: host.into(),
            port,
            tls: TlsMode::default(),
            tls_server_name: None,
            credentials: None,
            root_certificates: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            pool_max_size: None,
            pool_idle_timeout: None,
            redaction: None,
        }
    }

    /// Starts a client that writes each delivered message as an `.eml` file into `folder`.
    pub fn folder(folder: impl Into<PathBuf>) -> FolderClientBuilder {
        FolderClientBuilder {
            folder: folder.into(),
        }
    }

    /// The folder of a folder client.
    pub fn folder_path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Folder(folder) => Some(&folder.folder),
            Backend::Smtp(_) => None,
        }
    }

    /// Closes the pooled SMTP connections (`QUIT`); later deliveries open new ones.
    pub async fn shutdown(&self) {
        if let Backend::Smtp(smtp) = &self.backend
            && let Some(transport) = smtp.transport.get()
        {
            transport.shutdown().await;
        }
    }
}

/// What a delivered email returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmailReceipt {
    message_id: String,
    detail: ReceiptDetail,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum ReceiptDetail {
    Smtp { code: u16, reply: String },
    File { path: PathBuf },
}

impl EmailReceipt {
    /// The `Message-ID` the message carried: `<{idempotency key}@{sender domain}>`.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// The server's final reply code (`250`), for SMTP deliveries.
    pub fn smtp_code(&self) -> Option<u16> {
        match &self.detail {
            ReceiptDetail::Smtp { code, .. } => Some(*code),
            ReceiptDetail::File { .. } => None,
        }
    }

    /// The server's final reply text (often a queue id), for SMTP deliveries.
    pub fn smtp_reply(&self) -> Option<&str> {
        match &self.detail {
            ReceiptDetail::Smtp { reply, .. } => Some(reply),
            ReceiptDetail::File { .. } => None,
        }
    }

    /// The `.eml` file written, for folder deliveries.
    pub fn file(&self) -> Option<&Path> {
        match &self.detail {
            ReceiptDetail::File { path } => Some(path),
            ReceiptDetail::Smtp { .. } => None,
        }
    }
}

/// Configures an SMTP [`EmailClient`]; see [`EmailClient::smtp`].
pub struct SmtpClientBuilder {
    host: String,
    port: u16,
    tls: TlsMode,
    tls_server_name: Option<String>,
    credentials: Option<(String, SecretString)>,
    root_certificates: Vec<Vec<u8>>,
    connect_timeout: Duration,
    timeout: Duration,
    pool_max_size: Option<u32>,
    pool_idle_timeout: Option<Duration>,
    redaction: Option<RedactionPolicy>,
}

impl fmt::Debug for SmtpClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpClientBuilder")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("tls_server_name", &self.tls_server_name)
            .field("username", &self.credentials.as_ref().map(|(user, _)| user))
            .field("root_certificates", &self.root_certificates.len())
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("pool_max_size", &self.pool_max_size)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .finish()
    }
}

impl SmtpClientBuilder {
    /// How the connection is protected (default [`TlsMode::StartTls`]).
    pub fn tls(mut self, mode: TlsMode) -> Self {
        self.tls = mode;
        self
    }

    /// The name the server's certificate must carry, when it is not the host itself
    /// (connecting to `127.0.0.1` for a certificate issued to `localhost`, say).
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls_server_name = Some(name.into());
        self
    }

    /// Logs in with `AUTH` (PLAIN or LOGIN). The password stays wrapped: it appears in
    /// no `Debug`, error, journal record or log line.
    pub fn credentials(mut self, username: impl Into<String>, password: SecretString) -> Self {
        self.credentials = Some((username.into(), password));
        self
    }

    /// Trusts one more root certificate (PEM), beside the system's: a company CA, or a
    /// test CA.
    pub fn root_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificates.push(pem.into());
        self
    }

    /// Time allowed to open the TCP connection (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Time allowed for one whole attempt: connecting, TLS, login and the message
    /// (default 60 s). A server that stops answering fails the attempt with a transient
    /// error; the guard may retry, and the retry carries the same `Message-ID`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Most pooled connections kept open at once (lettre's default: 10).
    pub fn pool_max_size(mut self, connections: u32) -> Self {
        self.pool_max_size = Some(connections.max(1));
        self
    }

    /// How long an idle pooled connection is kept (lettre's default: 60 s).
    pub fn pool_idle_timeout(mut self, idle: Duration) -> Self {
        self.pool_idle_timeout = Some(idle);
        self
    }

    /// How recipients appear in the journal, in log lines and in this client's errors
    /// (default [`TargetRedaction::DomainOnly`], `*@domain`). An address that a server's
    /// reply quotes is shown the same way, except that with [`TargetRedaction::Full`] it
    /// is still `*@domain` there: an error message never carries an address. Set it here
    /// rather than only with [`Guard::with_redaction`], which does not reach errors.
    pub fn redaction(mut self, policy: RedactionPolicy) -> Self {
        self.redaction = Some(policy);
        self
    }

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<EmailClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }

    fn build_unguarded(self) -> Result<EmailClient, Error> {
        let host = checked_host(&self.host)?;
        if self.port == 0 {
            return Err(Error::config("port", "must not be 0"));
        }
        if self.timeout.is_zero() {
            return Err(Error::config("timeout", "must be positive"));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::config("connect_timeout", "must be positive"));
        }
        if self.tls == TlsMode::Plaintext && !is_loopback(&host) {
            return Err(Error::config(
                "tls",
                "plaintext SMTP is allowed only to a loopback host (127.0.0.1, ::1, localhost); \
                 use TlsMode::StartTls or TlsMode::Implicit",
            ));
        }
        if let Some((username, _)) = &self.credentials
            && (username.is_empty() || username.contains(['\r', '\n', '\0']))
        {
            return Err(Error::config(
                "username",
                "must be non-empty and free of CR, LF and NUL",
            ));
        }

        let tls = match self.tls {
            TlsMode::Plaintext => Tls::None,
            TlsMode::StartTls => Tls::Required(self.tls_parameters(&host)?),
            TlsMode::Implicit => Tls::Wrapper(self.tls_parameters(&host)?),
        };
        let mut pool = PoolConfig::new();
        if let Some(size) = self.pool_max_size {
            pool = pool.max_size(size);
        }
        if let Some(idle) = self.pool_idle_timeout {
            pool = pool.idle_timeout(idle);
        }
        let builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.clone())
            .port(self.port)
            .tls(tls)
            .timeout(Some(self.connect_timeout.min(self.timeout)))
            .pool_config(pool);

        let shown_host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let scheme = if self.tls == TlsMode::Implicit {
            "smtps"
        } else {
            "smtp"
        };
        let (username, password) = match self.credentials {
            Some((username, password)) => (Some(username), Some(password)),
            None => (None, None),
        };
        Ok(EmailClient {
            backend: Backend::Smtp(Box::new(SmtpBackend {
                server: format!("{scheme}://{shown_host}:{}", self.port),
                tls: self.tls,
                timeout: self.timeout,
                builder,
                username,
                password,
                transport: PerProcess::new(),
            })),
            redaction: self.redaction.unwrap_or(DEFAULT_REDACTION),
        })
    }

    fn tls_parameters(&self, host: &str) -> Result<TlsParameters, Error> {
        let name = match &self.tls_server_name {
            Some(name) => checked_host(name).map_err(|_| {
                Error::config("tls_server_name", "must be a DNS name or an IP address")
            })?,
            None => host.to_owned(),
        };
        let mut parameters = TlsParameters::builder(name);
        for (index, pem) in self.root_certificates.iter().enumerate() {
            let text = String::from_utf8_lossy(pem);
            if !text.contains("-----BEGIN CERTIFICATE-----") {
                return Err(Error::config(
                    "root_certificate",
                    format!("certificate {index} holds no PEM CERTIFICATE block"),
                ));
            }
            let certificate = Certificate::from_pem(pem).map_err(|_| {
                Error::config(
                    "root_certificate",
                    format!("certificate {index} is not valid PEM"),
                )
            })?;
            parameters = parameters.add_root_certificate(certificate);
        }
        parameters
            .build_rustls()
            .map_err(|e| Error::config("tls", format!("building the TLS configuration: {e}")))
    }
}

/// A host name or IP address, without brackets, refused when it could smuggle anything else.
fn checked_host(host: &str) -> Result<String, Error> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if bare.parse::<IpAddr>().is_ok() {
        return Ok(bare.to_owned());
    }
    let well_formed = !bare.is_empty()
        && bare.len() <= 253
        && bare.split('.').enumerate().all(|(index, label)| {
            (!label.is_empty() || index > 0)
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
        });
    if !well_formed {
        return Err(Error::config(
            "host",
            "must be a DNS name or an IP address, without scheme, port or credentials",
        ));
    }
    Ok(bare.to_owned())
}

fn is_loopback(host: &str) -> bool {
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
    }
}

/// Configures a folder [`EmailClient`]; see [`EmailClient::folder`].
#[derive(Debug)]
pub struct FolderClientBuilder {
    folder: PathBuf,
}

impl FolderClientBuilder {
    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<EmailClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }

    fn build_unguarded(self) -> Result<EmailClient, Error> {
        std::fs::create_dir_all(&self.folder).map_err(|e| {
            Error::config("folder", format!("creating {}: {e}", self.folder.display()))
        })?;
        Ok(EmailClient {
            backend: Backend::Folder(FolderBackend {
                shown: self.folder.display().to_string(),
                transport: AsyncFileTransport::new(&self.folder),
                folder: self.folder,
            }),
            redaction: DEFAULT_REDACTION,
        })
    }
}

impl Drop for SmtpBackend {
    fn drop(&mut self) {
        // lettre's pool spawns its cleanup when dropped, which panics outside a tokio
        // runtime; there, leave the idle connections for the process to close.
        if tokio::runtime::Handle::try_current().is_err()
            && let Some(transport) = self.transport.take()
        {
            std::mem::forget(transport);
        }
    }
}

impl SmtpBackend {
    /// This process's transport, created on first use so that building a client touches
    /// nothing, and again in a child of `fork`: the parent's pooled connections are the
    /// parent's sessions.
    fn transport(&self) -> AsyncSmtpTransport<Tokio1Executor> {
        let made = self.transport.get_or_try_make(|| {
            let mut builder = self.builder.clone();
            if let (Some(username), Some(password)) = (&self.username, &self.password) {
                builder = builder.credentials(Credentials::new(
                    username.clone(),
                    password.expose_secret().to_owned(),
                ));
            }
            Ok::<_, std::convert::Infallible>(builder.build())
        });
        match made {
            Ok(transport) => transport,
            Err(never) => match never {},
        }
    }
}

#[async_trait]
impl EffectClient for EmailClient {
    type Effect = EmailCopy;
    type Receipt = EmailReceipt;
    type Error = Error;

    /// Checks every field of the email (see [`crate::Email`]) and describes one effect: kind
    /// `email`, the email's message type, the recipient (or the sorted recipient set)
    /// as target, the subject as summary, the body digest as payload.
    fn describe(&self, _cx: &ReplayContext, copy: &EmailCopy) -> Result<EffectDescription, Error> {
        let email = copy.email();
        let validated = email.validated()?;
        let target = copy.target(&validated)?;
        let description = EffectDescription::new(EffectKind::Email, email.message_type(), target)
            .map_err(|e| Invalid::new("message_type", e.to_string()))?;
        Ok(description
            .with_summary(email.subject())
            .with_payload_digest(validated.digest))
    }

    /// Sends one copy, with `Message-ID: <{key}@{sender domain}>`; makes one attempt.
    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        copy: &EmailCopy,
    ) -> Result<EmailReceipt, Error> {
        let validated = copy.email().validated()?;
        let message = copy.message(&validated, delivery.key())?;
        let message_id = validated.message_id(delivery.key());
        match &self.backend {
            Backend::Smtp(smtp) => {
                // lettre bounds the connect only; the whole attempt is bounded here.
                let response = tokio::time::timeout(smtp.timeout, smtp.transport().send(message))
                    .await
                    .map_err(|_| Error::timed_out(&smtp.server, smtp.timeout))?
                    .map_err(|e| {
                        Error::smtp(
                            &smtp.server,
                            e,
                            validated.envelope_addresses(),
                            self.redaction.target(),
                        )
                    })?;
                Ok(EmailReceipt {
                    message_id,
                    detail: ReceiptDetail::Smtp {
                        code: response.code().into(),
                        reply: response.message().collect::<Vec<_>>().join(" "),
                    },
                })
            }
            Backend::Folder(folder) => {
                let id = folder
                    .transport
                    .send(message)
                    .await
                    .map_err(|e| Error::folder(&folder.shown, e))?;
                Ok(EmailReceipt {
                    message_id,
                    detail: ReceiptDetail::File {
                        path: folder.folder.join(format!("{id}.eml")),
                    },
                })
            }
        }
    }

    /// Recipients appear as `*@domain`; subjects are shown.
    fn redaction(&self) -> RedactionPolicy {
        self.redaction
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(builder: SmtpClientBuilder) -> String {
        builder.build_unguarded().expect_err("refused").to_string()
    }

    #[test]
    fn plaintext_is_for_loopback_only() {
        for host in [
            "127.0.0.1",
            "127.0.0.53",
            "::1",
            "[::1]",
            "localhost",
            "LocalHost.",
        ] {
            let client = EmailClient::smtp(host, 2525)
                .tls(TlsMode::Plaintext)
                .build_unguarded();
            assert!(client.is_ok(), "{host}: {client:?}");
        }
        for host in [
            "smtp.example.com",
            "10.0.0.1",
            "192.168.1.10",
            "localhost.example.com",
        ] {
            let error = EmailClient::smtp(host, 2525)
                .tls(TlsMode::Plaintext)
                .build_unguarded()
                .expect_err("refused");
            assert!(error.is_config(), "{error}");
            assert_eq!(error.field(), Some("tls"));
        }
    }

    #[test]
    fn hosts_ports_certificates_and_timeouts_are_checked() {
        let message = config_error(EmailClient::smtp("smtp://user:pw@mail.example", 25));
        assert!(
            message.starts_with("invalid email client configuration host"),
            "{message}"
        );
        assert!(!message.contains("pw"), "{message}");
        let message = config_error(EmailClient::smtp("mail.example", 0));
        assert!(message.contains("port"), "{message}");
        let message = config_error(EmailClient::smtp("mail.example", 587).timeout(Duration::ZERO));
        assert!(message.contains("timeout"), "{message}");
        let message = config_error(
            EmailClient::smtp("mail.example", 587)
                .root_certificate_pem(b"not a certificate".to_vec()),
        );
        assert!(message.contains("root_certificate"), "{message}");
    }

    #[test]
    fn debug_hides_the_password() {
        let builder = EmailClient::smtp("mail.example", 587)
            .credentials("reports", SecretString::from("hunter2-canary"));
        let shown = format!("{builder:?}");
        assert!(!shown.contains("hunter2-canary"), "{shown}");
        let client = builder.build_unguarded().unwrap();
        let shown = format!("{client:?}");
        assert!(
            !shown.contains("hunter2-canary") && shown.contains("[redacted]"),
            "{shown}"
        );
        assert!(shown.contains("smtp://mail.example:587"), "{shown}");
    }

    #[test]
    fn the_default_redaction_keeps_only_domains() {
        let client = EmailClient::smtp("127.0.0.1", 2525)
            .tls(TlsMode::Plaintext)
            .build_unguarded()
            .unwrap();
        assert_eq!(
            client.redaction().target().apply("ana@shop.example"),
            "*@shop.example"
        );
        assert!(client.redaction().shows_summaries());
    }
}
