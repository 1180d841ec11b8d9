//! Client configuration as data: what a routes file, a command line or a Python keyword
//! argument says about an SMTP server, checked once and built into a guarded client.
//!
//! The password is never in a configuration: it names the environment variable that holds
//! it ([`EnvVarName`]). Errors name the configuration field at fault ([`Error::field`]) and
//! never quote a secret. `docs/reference/clients.md` documents the fields.

use std::path::PathBuf;

use replaysafe_core::{EnvVarName, Guard, GuardLayer, RedactionPolicy};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::{EmailClient, Error, SmtpClientBuilder, TlsMode};

/// An SMTP server (`kind: "email"` in a routes file; `replaysafe send email`).
///
/// `smtp` is `smtp://HOST:PORT` (plaintext, or STARTTLS with `starttls`) or
/// `smtps://HOST:PORT` (TLS from the first byte); it carries no user, password, path or
/// query. Plaintext is allowed to a loopback host only.
///
/// ```
/// use replaysafe_core::MemoryJournal;
/// use replaysafe_email::EmailConfig;
///
/// let config: EmailConfig = serde_json::from_str(r#"{"smtp": "smtp://127.0.0.1:2525"}"#)?;
/// config.build(MemoryJournal::new())?;
/// let error = serde_json::from_str::<EmailConfig>(r#"{"smtp": "smtp://127.0.0.1:2525/x"}"#)?
///     .build(MemoryJournal::new())
///     .unwrap_err();
/// assert_eq!(error.field(), Some("smtp"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct EmailConfig {
    /// `smtp://HOST:PORT` or `smtps://HOST:PORT`.
    pub smtp: String,
    /// Require STARTTLS on an `smtp://` server.
    #[serde(default)]
    pub starttls: bool,
    /// The user to log in as, with `password_env`.
    pub user: Option<String>,
    /// The variable holding the user's password.
    pub password_env: Option<EnvVarName>,
    /// A PEM file of a certificate authority to trust besides the system's.
    pub ca_file: Option<PathBuf>,
}

/// A server as the configuration names it.
struct Server {
    host: String,
    port: u16,
    tls: TlsMode,
}

impl EmailConfig {
    /// A configuration for the server at `smtp` (`smtp://HOST:PORT` or `smtps://HOST:PORT`).
    pub fn new(smtp: impl Into<String>) -> Self {
        EmailConfig {
            smtp: smtp.into(),
            ..EmailConfig::default()
        }
    }

    /// `smtp`, parsed; the error never repeats the text, which may carry a password.
    fn server(&self) -> Result<Server, Error> {
        const EXPECTED: &str = "expected smtp://HOST:PORT or smtps://HOST:PORT";
        let problem = |detail: &str| Error::config("smtp", format!("{EXPECTED}{detail}"));
        let url = url::Url::parse(self.smtp.trim()).map_err(|_| problem(""))?;
        let implicit = match url.scheme() {
            "smtp" => false,
            "smtps" => true,
            _ => return Err(problem(" (the scheme is not smtp or smtps)")),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(problem(
                ": it carries credentials; give user and password_env instead",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() || !matches!(url.path(), "" | "/") {
            return Err(problem(", without a path, query or fragment"));
        }
        let host = url
            .host_str()
            .filter(|host| !host.is_empty())
            .ok_or_else(|| problem(" (no host)"))?
            .trim_matches(['[', ']'])
            .to_owned();
        let port = url.port().ok_or_else(|| problem(" (no port)"))?;
        let tls = match (implicit, self.starttls) {
            (true, true) => {
                return Err(Error::config(
                    "starttls",
                    "an smtps:// server speaks TLS from the start; starttls is for smtp://",
                ));
            }
            (true, false) => TlsMode::Implicit,
            (false, true) => TlsMode::StartTls,
            (false, false) => TlsMode::Plaintext,
        };
        Ok(Server { host, port, tls })
    }

    /// How the server is shown: `smtp://host:port` (or `smtps://`), nothing else.
    pub fn shown(&self) -> String {
        match self.server() {
            Ok(server) => {
                let scheme = if server.tls == TlsMode::Implicit {
                    "smtps"
                } else {
                    "smtp"
                };
                if server.host.contains(':') {
                    format!("{scheme}://[{}]:{}", server.host, server.port)
                } else {
                    format!("{scheme}://{}:{}", server.host, server.port)
                }
            }
            Err(_) => "smtp://…".to_owned(),
        }
    }

    /// Checks the configuration, reads the password from the environment and the CA file
    /// from disk, and returns the client's builder, for settings a configuration does not
    /// hold (timeouts, a TLS server name).
    pub fn builder(&self) -> Result<SmtpClientBuilder, Error> {
        let server = self.server()?;
        let mut builder = EmailClient::smtp(&server.host, server.port).tls(server.tls);
        let login = replaysafe_core::login(self.user.as_deref(), self.password_env.as_ref())
            .map_err(|error| match &error {
                replaysafe_core::Error::Missing { field, .. } => {
                    Error::config(field, error.to_string())
                }
                _ => Error::config("password_env", error.to_string()),
            })?;
        if let Some((user, password)) = login {
            builder = builder.credentials(user, SecretString::from(password));
        }
        if let Some(path) = &self.ca_file {
            let pem = std::fs::read(path).map_err(|error| {
                Error::config("ca_file", format!("reading {}: {error}", path.display()))
            })?;
            builder = builder.root_certificate_pem(pem);
        }
        Ok(builder)
    }

    /// Checks the configuration and builds the guarded client, recipients shown as
    /// `redaction` says when given.
    pub fn build_with(
        &self,
        guard: impl Into<GuardLayer>,
        redaction: Option<RedactionPolicy>,
    ) -> Result<Guard<EmailClient>, Error> {
        let mut builder = self.builder()?;
        if let Some(redaction) = redaction {
            builder = builder.redaction(redaction);
        }
        builder.build(guard).map_err(|error| {
            let field = match error.field() {
                Some("host" | "port") => "smtp",
                Some("tls" | "tls_server_name") => "starttls",
                Some("username") => "user",
                Some("root_certificate") => "ca_file",
                _ => return error,
            };
            error.at_field(field)
        })
    }

    /// [`EmailConfig::build_with`] the client's default redaction.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<EmailClient>, Error> {
        self.build_with(guard, None)
    }
}
