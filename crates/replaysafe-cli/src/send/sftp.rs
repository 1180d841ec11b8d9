//! `replaysafe send sftp`: a partner file drop over SFTP.

use std::path::PathBuf;

use anyhow::anyhow;
use replaysafe_sftp::{FileDrop, SftpConfig};

use super::{
    Common, Ended, EnvVar, Utf8Text, config_error, context_and_journal, flag_for, layer, send_one,
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
    ("key", "--key"),
    ("password_env", "--password-env"),
    ("passphrase_env", "--passphrase-env"),
    ("known_hosts", "--known-hosts"),
    ("dir", "--dir"),
    ("name", "--name"),
    ("message_type", "--message-type"),
    ("overwrite", "--overwrite"),
];

fn flag(error: &replaysafe_sftp::Error) -> String {
    if error.is_local_file() {
        return "--file".to_owned();
    }
    flag_for(error.field(), &FLAGS, "send sftp").to_owned()
}

/// `replaysafe send sftp`.
pub async fn send(args: SftpArgs) -> anyhow::Result<Ended> {
    let mut config = SftpConfig::new(&args.host, &args.user, &args.known_hosts, &args.dir);
    config.port = args.port;
    config.key = args.key.clone();
    config.passphrase_env = args.passphrase_env.clone();
    config.password_env = args.password_env.clone();
    config.overwrite = args.overwrite;
    let drop = FileDrop::from_file(&args.message_type, &args.name, &args.file)
        .map_err(|e| anyhow!("--file: {}", replaysafe_core::error_chain(&e)))?;
    let (cx, journal) = context_and_journal(&args.common)?;
    let guard = config
        .build(layer(&args.common, &journal))
        .map_err(|e| config_error(flag(&e), e.field(), &e))?;
    let what = format!("file drop {}", args.message_type);
    send_one(&guard, &cx, &drop, &what, flag, &journal).await
}
