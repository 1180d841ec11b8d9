//! `replaysafe send sftp`: a partner file drop over SFTP.

use std::path::PathBuf;

use anyhow::anyhow;
use replaysafe_sftp::{FileDrop, SftpClient};

use super::{
    Common, Ended, EnvVar, Utf8Text, context_and_journal, flag_for, secret_from_env, send_one,
};

/// The flags of `send sftp`.
#[derive(Debug, clap::Args)]
pub struct SftpArgs {
    /// Server host name or IP address.
    #[arg(long, value_parser = Utf8Text)]
    pub host: String,
    /// Server port.
    #[arg(long, default_value_t = 22)]
    pub port: u16,
    /// Login user.
    #[arg(long, value_parser = Utf8Text)]
    pub user: String,
    /// Private key file (OpenSSH or PEM).
    #[arg(
        long,
        required_unless_present = "password_env",
        conflicts_with = "password_env"
    )]
    pub key: Option<PathBuf>,
    /// Environment variable holding the key's passphrase: its name, never the passphrase.
    #[arg(long, value_name = "VARIABLE", value_parser = EnvVar, requires = "key")]
    pub passphrase_env: Option<replaysafe_core::EnvVarName>,
    /// Environment variable holding the login password, instead of a key: its name, never the password.
    #[arg(long, value_name = "VARIABLE", value_parser = EnvVar)]
    pub password_env: Option<replaysafe_core::EnvVarName>,
    /// OpenSSH known_hosts file holding the server's host key ([host]:port for a port other than 22); unknown keys are refused.
    #[arg(long)]
    pub known_hosts: PathBuf,
    /// Remote directory: absolute, or relative to the login directory.
    #[arg(long, value_parser = Utf8Text)]
    pub dir: String,
    /// Remote file name, a template: {pipeline}, {window_start:%Y%m%d}, {window_end:FORMAT}.
    #[arg(long, value_parser = Utf8Text)]
    pub name: String,
    /// The local file to upload.
    #[arg(long)]
    pub file: PathBuf,
    /// Message type (part of the idempotency key).
    #[arg(long, default_value = "file_drop", value_parser = Utf8Text)]
    pub message_type: String,
    /// Replace a different file already under the name (default: refuse it as a conflict).
    #[arg(long)]
    pub overwrite: bool,
    #[command(flatten)]
    #[allow(missing_docs, reason = "flattened: its fields carry the help")]
    pub common: Common,
}

const FLAGS: [(&str, &str); 11] = [
    ("host", "--host"),
    ("port", "--port"),
    ("user", "--user"),
    ("private_key", "--key"),
    ("password", "--password-env"),
    ("passphrase", "--passphrase-env"),
    ("known_hosts", "--known-hosts"),
    ("remote_dir", "--dir"),
    ("name", "--name"),
    ("message_type", "--message-type"),
    ("host_key_algorithms", "--known-hosts"),
];

fn flag(error: &replaysafe_sftp::Error) -> String {
    if error.is_local_file() {
        return "--file".to_owned();
    }
    flag_for(error.field(), &FLAGS, "send sftp").to_owned()
}

/// `replaysafe send sftp`.
pub async fn send(args: SftpArgs) -> anyhow::Result<Ended> {
    let mut builder = SftpClient::builder(&args.host, &args.user)
        .port(args.port)
        .known_hosts(&args.known_hosts)
        .remote_dir(&args.dir)
        .overwrite(args.overwrite)
        .max_idle_sessions(0);
    if let Some(key) = &args.key {
        builder = builder.private_key(key);
    }
    if let Some(variable) = &args.passphrase_env {
        builder = builder.passphrase(secret_from_env("--passphrase-env", variable)?);
    }
    if let Some(variable) = &args.password_env {
        builder = builder.password(secret_from_env("--password-env", variable)?);
    }
    let drop = FileDrop::from_file(&args.message_type, &args.name, &args.file)
        .map_err(|e| anyhow!("--file: {}", replaysafe_core::error_chain(&e)))?;
    let (cx, journal) = context_and_journal(&args.common)?;
    let guard = builder
        .build(journal.clone())
        .map_err(|e| anyhow!("{}: {}", flag(&e), replaysafe_core::error_chain(&e)))?;
    let what = format!("file drop {}", args.message_type);
    send_one(&guard, &cx, &drop, &what, flag, &journal).await
}
