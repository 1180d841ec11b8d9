//! The client, its builder, and the `EffectClient` implementation.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, RedactionPolicy,
    ReplayContext,
};
use secrecy::SecretString;

use crate::config::{Config, Login};
use crate::effect::{FileDrop, FileDropReceipt};
use crate::error::Kind;
use crate::pool::Shared;
use crate::{Error, name};

/// An SFTP client that drops files atomically into one remote directory.
///
/// Built only as a [`Guard<SftpClient>`](Guard) by [`SftpClientBuilder::build`]:
/// every drop goes through the replay gate and the journal. See the crate docs for what
/// a drop does on the server.
#[derive(Clone)]
pub struct SftpClient {
    shared: Arc<Shared>,
}

impl fmt::Debug for SftpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = &self.shared.config;
        f.debug_struct("SftpClient")
            .field("host", &config.host)
            .field("port", &config.port)
            .field("user", &config.user)
            .field(
                "login",
                &match &config.login {
                    Login::Key { path, passphrase } => format!(
                        "key {}{}",
                        path.display(),
                        if passphrase.is_some() {
                            " with a passphrase"
                        } else {
                            ""
                        }
                    ),
                    Login::Password(_) => "password [redacted]".to_owned(),
                },
            )
            .field("known_hosts", &config.known_hosts)
            .field("remote_dir", &config.remote_dir)
            .field("connect_timeout", &config.connect_timeout)
            .field("timeout", &config.timeout)
            .field("overwrite", &config.overwrite)
            .field("max_idle_sessions", &config.max_idle_sessions)
            .finish_non_exhaustive()
    }
}

impl SftpClient {
    /// Starts configuring a client for `user` on `host` (a name or an IP address, as it
    /// appears in known_hosts).
    pub fn builder(host: impl Into<String>, user: impl Into<String>) -> SftpClientBuilder {
        SftpClientBuilder {
            host: host.into(),
            user: user.into(),
            port: 22,
            private_key: None,
            passphrase: None,
            password: None,
            known_hosts: None,
            remote_dir: None,
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            overwrite: false,
            host_key_algorithms: None,
            max_idle_sessions: 4,
        }
    }

    /// The server's host name or address.
    pub fn host(&self) -> &str {
        &self.shared.config.host
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.shared.config.port
    }

    /// The remote directory files are dropped into.
    pub fn remote_dir(&self) -> &str {
        &self.shared.config.remote_dir
    }

    /// Whether a different file under the final name is replaced instead of refused.
    pub fn overwrites(&self) -> bool {
        self.shared.config.overwrite
    }

    /// The journal target of a file called `name`: `sftp://host[:port]/dir/name`.
    pub fn target_of(&self, name: &str) -> String {
        self.shared.config.target(name)
    }

    /// Closes the idle sessions kept for reuse; later drops open new ones.
    pub fn close_idle_sessions(&self) {
        let idle = std::mem::take(&mut *self.shared.idle());
        drop(idle);
    }

    /// How many authenticated sessions wait for reuse.
    pub fn idle_sessions(&self) -> usize {
        self.shared.idle().len()
    }
}

#[async_trait]
impl EffectClient for SftpClient {
    type Effect = FileDrop;
    type Receipt = FileDropReceipt;
    type Error = Error;

    /// The receiver drops repeats: a drop finds the same file already under its name and does not write it again.
    fn dedupes_by_key(&self) -> bool {
        true
    }

    /// Renders and validates the file name; no I/O.
    fn describe(&self, cx: &ReplayContext, effect: &FileDrop) -> Result<EffectDescription, Error> {
        if effect.message_type().trim().is_empty()
            || effect.message_type().chars().any(char::is_control)
        {
            return Err(Error::invalid(
                "message_type",
                "must be non-empty and free of control characters",
            ));
        }
        let name = name::render(effect.name_template(), cx)?;
        let target = self.shared.config.target(&name);
        let description =
            EffectDescription::new(EffectKind::FileDrop, effect.message_type(), target)
                .map_err(|error| Error::invalid("target", error.to_string()))?
                .with_payload_digest(effect.digest())
                .with_summary(format!("{name} ({} bytes)", effect.len()));
        Ok(description)
    }

    /// Uploads on tokio's blocking pool: an async worker never waits on the network.
    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        effect: &FileDrop,
    ) -> Result<FileDropReceipt, Error> {
        let name = name::render(effect.name_template(), delivery.context())?;
        let config = &self.shared.config;
        let job = crate::upload::Job {
            remote_path: config.remote_path(&name),
            target: config.target(&name),
            name,
            key_prefix: delivery.key().as_str().chars().take(16).collect(),
            content: effect.content().clone(),
            digest: effect.digest(),
        };
        let shared = Arc::clone(&self.shared);
        let target = job.target.clone();
        tokio::task::spawn_blocking(move || shared.drop_file(&job))
            .await
            .map_err(|join| {
                Error::new(
                    Kind::Task,
                    format!("dropping {target}"),
                    if join.is_panic() {
                        "the upload task panicked"
                    } else {
                        "the upload task was cancelled"
                    },
                )
            })?
    }

    /// Full targets: they hold no user or credentials.
    fn redaction(&self) -> RedactionPolicy {
        RedactionPolicy::default()
    }
}

/// Configures an [`SftpClient`]; [`build`](SftpClientBuilder::build) checks
/// the configuration and returns it wrapped in a [`Guard`].
///
/// Required: [`private_key`](Self::private_key), [`known_hosts`](Self::known_hosts) and
/// [`remote_dir`](Self::remote_dir).
pub struct SftpClientBuilder {
    host: String,
    user: String,
    port: u16,
    private_key: Option<PathBuf>,
    passphrase: Option<SecretString>,
    password: Option<SecretString>,
    known_hosts: Option<PathBuf>,
    remote_dir: Option<String>,
    connect_timeout: Duration,
    timeout: Duration,
    overwrite: bool,
    host_key_algorithms: Option<String>,
    max_idle_sessions: usize,
}

impl fmt::Debug for SftpClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SftpClientBuilder")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("private_key", &self.private_key)
            .field(
                "passphrase",
                &self.passphrase.as_ref().map(|_| "[redacted]"),
            )
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("known_hosts", &self.known_hosts)
            .field("remote_dir", &self.remote_dir)
            .finish_non_exhaustive()
    }
}

impl SftpClientBuilder {
    /// The server's port (default 22).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The private key file (OpenSSH or PEM format) to authenticate with.
    pub fn private_key(mut self, path: impl Into<PathBuf>) -> Self {
        self.private_key = Some(path.into());
        self
    }

    /// The passphrase of the private key. It never appears in `Debug`, errors, logs or the journal.
    pub fn passphrase(mut self, passphrase: SecretString) -> Self {
        self.passphrase = Some(passphrase);
        self
    }

    /// Logs in with a password instead of a key (a partner that issues passwords only).
    /// It never appears in `Debug`, errors, logs or the journal. The host key is still
    /// verified before the password is sent.
    pub fn password(mut self, password: SecretString) -> Self {
        self.password = Some(password);
        self
    }

    /// The OpenSSH known_hosts file holding the server's host key (for a port other than
    /// 22, a line of the form `[host]:port key-type key`). Unknown or different keys are
    /// refused before authentication; no key is ever accepted unseen.
    pub fn known_hosts(mut self, path: impl Into<PathBuf>) -> Self {
        self.known_hosts = Some(path.into());
        self
    }

    /// The remote directory files are dropped into: absolute, or relative to the login directory.
    pub fn remote_dir(mut self, dir: impl Into<String>) -> Self {
        self.remote_dir = Some(dir.into());
        self
    }

    /// How long to wait for the TCP connection (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long any one blocking SSH or SFTP operation may take (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether a different file under the final name is replaced (default `false`: it is
    /// refused as a conflicting file).
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }

    /// Host key algorithms to negotiate, in order of preference (e.g. `ssh-ed25519`):
    /// pin the type of the key recorded in known_hosts when the server has several.
    pub fn host_key_algorithms(mut self, algorithms: impl Into<String>) -> Self {
        self.host_key_algorithms = Some(algorithms.into());
        self
    }

    /// How many authenticated sessions to keep for later drops (default 4; 0 opens a
    /// session per drop). Concurrent drops each use their own session.
    pub fn max_idle_sessions(mut self, sessions: usize) -> Self {
        self.max_idle_sessions = sessions;
        self
    }

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<SftpClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }

    fn build_unguarded(self) -> Result<SftpClient, Error> {
        let host = self.host.trim().to_owned();
        if host.is_empty()
            || host
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '/' | '@' | '[' | ']'))
        {
            return Err(Error::invalid(
                "host",
                format!("{host:?} is not a host name or IP address"),
            ));
        }
        if self.user.is_empty() || self.user.chars().any(|c| c.is_control() || c == '@') {
            return Err(Error::invalid(
                "user",
                "must be non-empty, without '@' or control characters",
            ));
        }
        if self.port == 0 {
            return Err(Error::invalid("port", "must not be 0"));
        }
        let login = match (self.private_key, self.password) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "password",
                    "give a private key or a password, not both",
                ));
            }
            (None, None) => {
                return Err(Error::invalid("private_key", "is required (or a password)"));
            }
            (None, Some(password)) => {
                if self.passphrase.is_some() {
                    return Err(Error::invalid(
                        "passphrase",
                        "belongs to a private key; a password login has none",
                    ));
                }
                Login::Password(password)
            }
            (Some(path), None) => {
                if !path.is_file() {
                    return Err(Error::invalid(
                        "private_key",
                        format!("{} is not a readable file", path.display()),
                    ));
                }
                Login::Key {
                    path,
                    passphrase: self.passphrase,
                }
            }
        };
        let known_hosts = self.known_hosts.ok_or_else(|| {
            Error::invalid("known_hosts", "is required: host keys are always verified")
        })?;
        if !known_hosts.is_file() {
            return Err(Error::invalid(
                "known_hosts",
                format!("{} is not a readable file", known_hosts.display()),
            ));
        }
        let remote_dir = normalize_dir(
            &self
                .remote_dir
                .ok_or_else(|| Error::invalid("remote_dir", "is required"))?,
        )?;
        for (field, timeout) in [
            ("connect_timeout", self.connect_timeout),
            ("timeout", self.timeout),
        ] {
            if timeout.is_zero() || timeout.as_millis() > u128::from(u32::MAX) {
                return Err(Error::invalid(
                    field,
                    "must be more than 0 and less than 49 days",
                ));
            }
        }
        Ok(SftpClient {
            shared: Arc::new(Shared {
                config: Config {
                    host,
                    port: self.port,
                    user: self.user,
                    login,
                    known_hosts,
                    remote_dir,
                    connect_timeout: self.connect_timeout,
                    timeout: self.timeout,
                    overwrite: self.overwrite,
                    host_key_algorithms: self.host_key_algorithms,
                    max_idle_sessions: self.max_idle_sessions,
                },
                idle: Default::default(),
                leftovers: Mutex::new(HashMap::new()),
            }),
        })
    }
}

fn normalize_dir(dir: &str) -> Result<String, Error> {
    if dir.is_empty() {
        return Err(Error::invalid("remote_dir", "must not be empty"));
    }
    if dir.contains('\0') || dir.contains('\\') || dir.chars().any(char::is_control) {
        return Err(Error::invalid(
            "remote_dir",
            format!("{dir:?} contains a NUL, a backslash or a control character"),
        ));
    }
    let trimmed = dir.trim_end_matches('/');
    Ok(if trimmed.is_empty() {
        "/".to_owned()
    } else {
        trimmed.to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(host: &str, port: u16, dir: &str) -> Config {
        Config {
            host: host.into(),
            port,
            user: "u".into(),
            login: Login::Key {
                path: PathBuf::new(),
                passphrase: None,
            },
            known_hosts: PathBuf::new(),
            remote_dir: normalize_dir(dir).unwrap(),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            overwrite: false,
            host_key_algorithms: None,
            max_idle_sessions: 0,
        }
    }

    #[test]
    fn targets_carry_no_user_and_the_port_only_when_not_22() {
        assert_eq!(
            config("files.example", 22, "/inbound/").target("a.csv"),
            "sftp://files.example/inbound/a.csv"
        );
        assert_eq!(
            config("127.0.0.1", 2222, "out").target("a.csv"),
            "sftp://127.0.0.1:2222/~/out/a.csv"
        );
        assert_eq!(config("::1", 22, "/").target("a.csv"), "sftp://[::1]/a.csv");
        assert_eq!(config("h", 22, ".").target("a.csv"), "sftp://h/~/a.csv");
    }

    #[test]
    fn remote_paths_join_the_directory_and_the_name() {
        assert_eq!(config("h", 22, "/in//").remote_path("a"), "/in/a");
        assert_eq!(config("h", 22, "/").remote_path("a"), "/a");
        assert_eq!(config("h", 22, ".").remote_path("a"), "a");
        assert_eq!(config("h", 22, "out").remote_path("a"), "out/a");
        assert_eq!(
            normalize_dir("a\\b").unwrap_err().field(),
            Some("remote_dir")
        );
    }
}
