//! What a client is configured with: where to connect, how to authenticate, where to drop.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;

/// How the client authenticates: a key (with its passphrase, if any), or a password.
pub(crate) enum Login {
    Key {
        path: PathBuf,
        passphrase: Option<SecretString>,
    },
    Password(SecretString),
}

/// A client's settings, fixed when it is built.
pub(crate) struct Config {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) login: Login,
    pub(crate) known_hosts: PathBuf,
    /// Without trailing slashes (except `/` itself).
    pub(crate) remote_dir: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) timeout: Duration,
    pub(crate) overwrite: bool,
    pub(crate) host_key_algorithms: Option<String>,
    pub(crate) max_idle_sessions: usize,
}

impl Config {
    /// The remote path of `name` in the remote directory.
    pub(crate) fn remote_path(&self, name: &str) -> String {
        match self.remote_dir.as_str() {
            "." => name.to_owned(),
            "/" => format!("/{name}"),
            dir => format!("{dir}/{name}"),
        }
    }

    /// `sftp://host[:port]/dir/name`, without user or credentials; a directory relative
    /// to the login directory is written under `~`.
    pub(crate) fn target(&self, name: &str) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let port = if self.port == 22 {
            String::new()
        } else {
            format!(":{}", self.port)
        };
        let dir = match self.remote_dir.as_str() {
            "/" => String::new(),
            "." => "/~".to_owned(),
            dir if dir.starts_with('/') => dir.to_owned(),
            dir => format!("/~/{dir}"),
        };
        format!("sftp://{host}{port}{dir}/{name}")
    }
}
