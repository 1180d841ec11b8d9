//! Client configuration as data: what a routes file, a command line or a Python keyword
//! argument says about an SFTP server, checked once and built into a guarded client.
//!
//! Secrets (a key's passphrase, a password) are never in a configuration: it names the
//! environment variable that holds each ([`EnvVarName`]). Errors name the configuration
//! field at fault ([`Error::field`]) and never quote a secret. `docs/reference/clients.md`
//! documents the fields.

use std::path::PathBuf;

use replaysafe_core::{EnvVarName, Guard, GuardLayer};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::{Error, SftpClient, SftpClientBuilder};

fn default_port() -> u16 {
    22
}

/// A partner's SFTP server (`kind: "sftp"` in a routes file; `replaysafe send sftp`).
///
/// Logs in with a private key (`key`, optionally with `passphrase_env`) or a password
/// (`password_env`), one of them; the server's host key must be in `known_hosts`.
///
/// ```
/// use replaysafe_core::MemoryJournal;
/// use replaysafe_sftp::SftpConfig;
///
/// let config: SftpConfig = serde_json::from_str(r#"{"host": "sftp.partner.example",
///     "user": "shop", "key": "id_ed25519", "known_hosts": "known_hosts", "dir": "/incoming"}"#)?;
/// assert_eq!(config.port, 22);
/// let mut both = config.clone();
/// both.password_env = Some(replaysafe_core::EnvVarName::parse("password_env", "SFTP_PASSWORD")?);
/// assert_eq!(both.build(MemoryJournal::new()).unwrap_err().field(), Some("password_env"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SftpConfig {
    /// The server's host name or address.
    pub host: String,
    /// Its port (default 22).
    #[serde(default = "default_port")]
    pub port: u16,
    /// The user to log in as.
    pub user: String,
    /// A private key file (OpenSSH or PEM). One of `key` and `password_env`.
    pub key: Option<PathBuf>,
    /// The variable holding the key's passphrase.
    pub passphrase_env: Option<EnvVarName>,
    /// The variable holding the login password, instead of a key.
    pub password_env: Option<EnvVarName>,
    /// An OpenSSH `known_hosts` file holding the server's host key (`[host]:port` for a
    /// port other than 22); an unknown key is refused.
    pub known_hosts: PathBuf,
    /// The remote folder: absolute, or relative to the login folder.
    pub dir: String,
    /// Replace a different file already under the name (default: refuse it as a conflict).
    #[serde(default)]
    pub overwrite: bool,
}

fn secret(field: &'static str, variable: &EnvVarName) -> Result<SecretString, Error> {
    variable
        .read()
        .map(SecretString::from)
        .map_err(|error| Error::invalid(field, error.to_string()))
}

impl SftpConfig {
    /// A configuration for `user` at `host`, verified against `known_hosts`, dropping into
    /// `dir`; give `key` or `password_env` before building.
    pub fn new(
        host: impl Into<String>,
        user: impl Into<String>,
        known_hosts: impl Into<PathBuf>,
        dir: impl Into<String>,
    ) -> Self {
        SftpConfig {
            host: host.into(),
            port: default_port(),
            user: user.into(),
            key: None,
            passphrase_env: None,
            password_env: None,
            known_hosts: known_hosts.into(),
            dir: dir.into(),
            overwrite: false,
        }
    }

    /// Checks the configuration, reads its secrets from the environment, and returns the
    /// client's builder, for settings a configuration does not hold (timeouts, host-key
    /// algorithms, the idle session pool).
    pub fn builder(&self) -> Result<SftpClientBuilder, Error> {
        let mut builder = SftpClient::builder(&self.host, &self.user)
            .port(self.port)
            .known_hosts(&self.known_hosts)
            .remote_dir(&self.dir)
            .overwrite(self.overwrite);
        match (&self.key, &self.password_env) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "password_env",
                    "log in with a key or a password, not both",
                ));
            }
            (None, None) => {
                return Err(Error::invalid(
                    "key",
                    "is required, or a password (password_env)",
                ));
            }
            (Some(key), None) => {
                builder = builder.private_key(key);
                if let Some(variable) = &self.passphrase_env {
                    builder = builder.passphrase(secret("passphrase_env", variable)?);
                }
            }
            (None, Some(variable)) => {
                if self.passphrase_env.is_some() {
                    return Err(Error::invalid(
                        "passphrase_env",
                        "a passphrase unlocks a key: give key too, or leave it out",
                    ));
                }
                builder = builder.password(secret("password_env", variable)?);
            }
        }
        Ok(builder)
    }

    /// Checks the configuration and builds the guarded client.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<SftpClient>, Error> {
        self.builder()?.build(guard).map_err(|error| {
            let field = match error.field() {
                Some("private_key") => "key",
                Some("password") => "password_env",
                Some("passphrase") => "passphrase_env",
                Some("remote_dir") => "dir",
                Some("host_key_algorithms") => "known_hosts",
                _ => return error,
            };
            error.at_field(field)
        })
    }
}
