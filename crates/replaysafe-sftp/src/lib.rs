//! Replay-safe partner file drops over SFTP: atomic, idempotent at the boundary, with
//! the server's host key verified before anything is sent.
//!
//! A pipeline that drops `orders_20260805.csv` on a partner's server must not drop last
//! month's files again during a backfill, must never leave a half-written file where the
//! partner looks, and must not silently replace a file the partner may already have
//! picked up. [`SftpClient`] is reached only through a [`Guard`](replaysafe_core::Guard):
//!
//! - **The gate first.** In a backfill, a replay, a stale or an unknown run the drop is
//!   suppressed and journaled; no DNS lookup, connection or login happens.
//! - **Host keys verified before authentication.** The server's key must be in the
//!   configured known_hosts file (`[host]:port` form for ports other than 22). Unknown,
//!   changed or unreadable entries are permanent errors; there is no "accept new".
//! - **Atomic.** The content goes to `.NAME.replaysafe-KEY-RANDOM.tmp` in the same
//!   directory, which is then renamed to `NAME`. A partner sees no file or the whole file.
//!   A failed upload removes its temporary file; when the connection broke, the next
//!   drop of the same name removes it.
//! - **Idempotent.** If `NAME` already exists with the same size and SHA-256 (read back
//!   from the server), the drop succeeds without uploading and its [`FileDropReceipt`] says
//!   [`DropStatus::AlreadyPresent`]. A different file under the name is a permanent
//!   `conflicting file` error, unless [`overwrite`](SftpClientBuilder::overwrite) is set.
//! - **Safe names.** The name is a template rendered from the run (`{pipeline}`,
//!   `{window_start:%Y%m%d}`, `{window_end:FORMAT}`); names with `/`, `\`, NUL, control
//!   characters, `.` or `..` are refused when the drop is described, before the gate.
//!
//! ssh2 (libssh2) blocks, so every drop runs on tokio's blocking pool. Authenticated
//! sessions are kept for later drops (see [`SftpClientBuilder::max_idle_sessions`]); an
//! idle session that has gone is replaced, and concurrent drops each use their own.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use replaysafe_core::{JsonlJournal, ReplayContext};
//! use replaysafe_sftp::{FileDrop, SftpClient};
//! use secrecy::SecretString;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let journal = JsonlJournal::open("/var/lib/pipeline/journal.jsonl")?;
//! let partner = SftpClient::builder("files.partner.example", "orders")
//!     .private_key("/etc/pipeline/id_ed25519")
//!     .passphrase(SecretString::from(std::env::var("PARTNER_KEY_PASSPHRASE")?))
//!     .known_hosts("/etc/pipeline/known_hosts")
//!     .remote_dir("/inbound")
//!     .build(journal)?;
//!
//! let cx = ReplayContext::from_env()?;
//! let csv = "id,total\n1,9.50\n";
//! let drop = FileDrop::from_bytes("orders_export", "orders_{window_start:%Y%m%d}.csv", csv);
//! let outcome = partner.send(&cx, &drop).await?;
//! if let Some(receipt) = outcome.receipt() {
//!     println!("{} ({:?})", receipt.remote_path, receipt.status);
//! }
//! # Ok(()) }
//! ```
//!
//! # Journal
//!
//! Kind `file_drop`, the message type of the [`FileDrop`], the target
//! `sftp://host[:port]/dir/name` (no user, no credentials; the port only when it is not
//! 22; a directory relative to the login directory is written `/~/dir`), the summary
//! `name (N bytes)`, and the SHA-256 and size of the content.
//!
//! # Errors
//!
//! [`Error`] is opaque; [`Classify`](replaysafe_core::Classify) tells the guard's retry
//! policy and the outbox what to do. Connection refused, reset or cut, and timeouts are
//! transient; host key problems, authentication failures, permission denied, missing
//! directories and conflicting files are permanent. Invalid names and settings are
//! [`Error::is_invalid`] and name the field ([`Error::field`]). No message, `Debug` output,
//! log line or journal record contains the key passphrase.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod client;
mod config;
mod effect;
mod error;
mod name;
mod pool;
mod session;
mod settings;
mod upload;

pub use client::{SftpClient, SftpClientBuilder};
pub use effect::{DropStatus, FileDrop, FileDropReceipt};
pub use error::Error;
pub use settings::SftpConfig;
