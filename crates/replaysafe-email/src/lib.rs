//! Email through lettre that a backfill cannot trigger.
//!
//! [`EmailClient`] sends over SMTP with lettre's async transport (tokio, rustls with
//! aws-lc-rs), or writes `.eml` files into a folder for development. Either way it is
//! built inside a [`replaysafe_core::Guard`]: an email leaves the process only when the
//! [`replaysafe_core::ReplayContext`] says the run is current (or an audited opt-in
//! allows it), and every decision is journaled.
//!
//! - **One effect per recipient** by default: the idempotency key covers (recipient,
//!   window, message type), so a replay opted in for one person reaches only that person.
//!   [`Fanout::OneMessage`] sends one message to the whole set, keyed by the sorted,
//!   comma-joined recipient list.
//! - **A deterministic `Message-ID`**: `<{idempotency key}@{sender's domain}>`. A retry,
//!   or a replay that does get delivered, carries the same id, so mail systems and people
//!   can recognise the repeat.
//! - **Checked before anything is sent**: every address must parse; CR, LF or NUL in any
//!   header value, display name or address is an error naming the field, never silently
//!   stripped; an email without recipients is an error. An invalid email sends nothing,
//!   not even to its valid recipients.
//! - **Journaled without personal data**: recipients as `*@domain`, the subject as the
//!   summary (unless the policy hides summaries), the body as a SHA-256 digest and a size.
//!
//! # Example
//!
//! The folder backend runs anywhere; swap [`EmailClient::folder`] for
//! [`EmailClient::smtp`] to send for real.
//!
//! ```
//! use std::sync::Arc;
//! use replaysafe_core::{MemoryJournal, RunKind};
//! use replaysafe_email::{Attachment, Email, EmailClient, EmailGuardExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let folder = tempfile::tempdir()?;
//! let journal = Arc::new(MemoryJournal::new());
//! let mailer = EmailClient::folder(folder.path()).build(journal.clone())?;
//!
//! let email = Email::builder("daily_summary")
//!     .from("Reports <reports@shop.example>")
//!     .to("Ana Lima <ana@shop.example>")
//!     .cc("finance@partner.example")
//!     .subject("Orders for 2026-08-05")
//!     .text("42 orders, 3 refunds.")
//!     .html("<p>42 orders, 3 refunds.</p>")
//!     .attachment(Attachment::csv("orders.csv", "order,amount\n1,9.90\n"))
//!     .build();
//!
//! // Today's scheduled run: one copy per recipient.
//! let cx = replaysafe_test::contexts::live();
//! let sent = mailer.send_email(&cx, &email).await?;
//! assert_eq!(sent.delivered(), 2);
//!
//! // A backfill of last month: nothing is sent, two suppressed records are journaled.
//! let backfill = replaysafe_test::contexts::backfill();
//! let replayed = mailer.send_email(&backfill, &email).await?;
//! assert_eq!(replayed.suppressed(), 2);
//! // Each delivery is journaled as attempting then delivered: 4 lines, then the 2 suppressed.
//! assert_eq!(journal.records()[4].effect.target, "*@shop.example");
//! # assert_eq!(std::fs::read_dir(folder.path())?.count(), 2);
//! # Ok(()) }
//! ```
//!
//! An SMTP client with STARTTLS, a login and a company CA:
//!
//! ```no_run
//! use std::time::Duration;
//! use replaysafe_core::{JsonlJournal, RetryPolicy};
//! use replaysafe_email::{EmailClient, TlsMode};
//! use secrecy::SecretString;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let password = SecretString::from(std::env::var("SMTP_PASSWORD")?);
//! let mailer = EmailClient::smtp("smtp.shop.example", 587)
//!     .tls(TlsMode::StartTls)
//!     .credentials("reports", password)
//!     .root_certificate_pem(std::fs::read("/etc/shop/ca.pem")?)
//!     .timeout(Duration::from_secs(20))
//!     .pool_max_size(4)
//!     .build(JsonlJournal::open("journal.jsonl")?)?
//!     .with_retry(RetryPolicy::default().with_max_attempts(5));
//! # let _ = mailer; Ok(()) }
//! ```
//!
//! # Sending
//!
//! - [`EmailGuardExt::send_email`] sends every effect of an email, after checking all of
//!   them, and reports each recipient's outcome.
//! - `Guard::send` sends one effect, an [`EmailCopy`]: one of [`Email::copies`] (one per
//!   recipient, or one for a [`Fanout::OneMessage`] email). A whole email cannot be handed
//!   to it, so an email to several recipients is never sent as one effect by mistake.
//!
//! # Configuration
//!
//! Host and port; [`TlsMode`] (`Plaintext` only to loopback hosts, `StartTls` required
//! by default, `Implicit`); credentials with a [`secrecy::SecretString`] password; extra
//! trusted root certificates (PEM); connection pool size and idle time; a connect timeout
//! (10 s) and a timeout for each whole attempt (60 s). The transport is created on the
//! first delivery, so building a client and suppressing effects opens no connection.
//!
//! lettre 0.11.23 leaves Nagle's algorithm on, so each message on a connection waits for
//! the server's delayed ACK (about 40 ms on Linux): about 22 messages a second per
//! connection. Send from several tasks sharing one guarded client to use the pool.
//!
//! # Journal
//!
//! Kind `email`, the message type, the target redacted `*@domain` (choose another policy
//! with [`SmtpClientBuilder::redaction`], which errors follow too), the subject as summary, and as payload the
//! SHA-256 and size of the content: the text body, the HTML alternative and the
//! attachments, framed unambiguously (see `docs/adapters/email.md`). Headers are left
//! out of the digest: the `Date` and the MIME boundaries change on every rendering.
//!
//! # Errors
//!
//! One [`Error`] type. Invalid emails and configurations name the field; SMTP 4xx
//! replies and connection failures are transient and retried by the guard; 5xx replies,
//! 535 authentication failures included, and TLS failures are permanent. See
//! [`Error`] for the full table.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod client;
mod config;
mod content;
mod data;
mod digest;
mod email;
mod error;
mod ext;
mod message;
mod validate;

pub use client::{EmailClient, EmailReceipt, FolderClientBuilder, SmtpClientBuilder, TlsMode};
pub use config::EmailConfig;
pub use content::{Attachment, Fanout, Mailbox};
pub use email::{Email, EmailBuilder, EmailCopy};
pub use error::Error;
pub use ext::{EmailGuardExt, EmailOutcomes};
