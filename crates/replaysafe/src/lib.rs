//! replaysafe makes the external side effects of data pipelines replay-safe.
//!
//! A pipeline recomputes its tables idempotently; its emails, webhooks, partner file
//! drops, metric increments, alerts and downstream triggers cannot be undone. Wrap every
//! external client once in a [`Guard`]: during a backfill it becomes an inert, journaling
//! no-op, and delivery from a replay needs an explicit, audited [`OptIn`].
//!
//! This crate only re-exports. The core is always here; adapters come behind features:
//!
//! | feature | what it adds |
//! |---|---|
//! | `testing` | `testing`: mock and recording clients, ready-made contexts |
//! | `sftp` | `sftp`: atomic, host-verified, idempotent partner file drops over SFTP |
//! | `metrics` | `metrics`: Pushgateway and StatsD clients, a `metrics` recorder that goes quiet in replays |
//! | `alert` | `alert`: Alertmanager, PagerDuty and Slack alerts that a replay cannot fire |
//! | `webhook` | `webhook`: signed, keyed webhooks and Airflow or URL triggers, with an SSRF guard |
//! | `email` | `email`: SMTP (lettre) or `.eml` folder email, one keyed effect per recipient |
//! | `outbox-sqlite` | `outbox`: effects staged in the data's own SQLite transaction, delivered once per key by workers |
//! | `outbox-postgres` | `outbox::postgres`: the outbox on PostgreSQL, for workers on many machines |
//! | `full` | every adapter, and the outbox |
//!
//! See [`replaysafe_core`] for the complete guide and example.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

#[doc(inline)]
pub use replaysafe_core::*;

/// Secrets (passwords, tokens, signing secrets, routing keys) are wrapped in this type
/// wherever an adapter takes one, so `Debug` and `Display` never print them.
pub use secrecy::SecretString;

/// Everything a pipeline author needs in scope: `use replaysafe::prelude::*;`.
///
/// The core's prelude ([`replaysafe_core::prelude`]: `ReplayContext`, `Outcome`, the
/// `Journal`, `Classify` and `EffectClient` traits), [`SecretString`], and with the
/// `email` feature the `EmailGuardExt` trait (`send_email` for every recipient).
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::SecretString;
    #[doc(no_inline)]
    pub use replaysafe_core::prelude::*;
    #[cfg(feature = "email")]
    #[doc(no_inline)]
    pub use replaysafe_email::EmailGuardExt;
}

/// Test support (feature `testing`).
#[cfg(feature = "testing")]
#[doc(inline)]
pub use replaysafe_test as testing;

/// SFTP file drops (feature `sftp`).
#[cfg(feature = "sftp")]
#[doc(inline)]
pub use replaysafe_sftp as sftp;

/// Pushgateway, StatsD and the `metrics` facade bridge (feature `metrics`).
#[cfg(feature = "metrics")]
#[doc(inline)]
pub use replaysafe_metrics as metrics;

/// Alertmanager, PagerDuty and Slack alerts (feature `alert`).
#[cfg(feature = "alert")]
#[doc(inline)]
pub use replaysafe_alert as alert;

/// Webhooks and downstream triggers (feature `webhook`).
#[cfg(feature = "webhook")]
#[doc(inline)]
pub use replaysafe_webhook as webhook;

/// What every HTTP adapter shares: endpoints, the SSRF policy, classification, the error
/// (features `webhook`, `alert`, `metrics`).
#[cfg(any(feature = "webhook", feature = "alert", feature = "metrics"))]
#[doc(inline)]
pub use replaysafe_http as http;

/// Email over SMTP or into a folder (feature `email`).
#[cfg(feature = "email")]
#[doc(inline)]
pub use replaysafe_email as email;

/// An adapter's raw client cannot be had from its builder: the one terminal method,
/// `build`, returns a [`Guard`]. This does not compile:
///
/// ```compile_fail
/// let raw: replaysafe::webhook::WebhookClient =
///     replaysafe::webhook::WebhookClient::builder("https://partner.example/hooks")
///         .build_unguarded()
///         .unwrap();
/// ```
///
/// and neither does taking the client out of a builder's result without the escape hatch:
///
/// ```compile_fail
/// let raw: replaysafe::webhook::WebhookClient =
///     replaysafe::webhook::WebhookClient::builder("https://partner.example/hooks")
///         .build(replaysafe::MemoryJournal::new())
///         .unwrap();
/// ```
#[cfg(all(doctest, feature = "webhook"))]
pub struct RawClientsAreNotPublic;

/// The transactional outbox (feature `outbox-sqlite`; `outbox-postgres` adds `outbox::postgres`).
#[cfg(any(feature = "outbox-sqlite", feature = "outbox-postgres"))]
#[doc(inline)]
pub use replaysafe_outbox as outbox;

/// The README's example, compiled and run as a doctest.
#[cfg(all(doctest, feature = "testing", feature = "webhook", feature = "email"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExample;

/// The pipeline authors' guide's examples, compiled and run as doctests.
#[cfg(all(doctest, feature = "testing", feature = "webhook", feature = "email"))]
#[doc = include_str!("../../../docs/guides/authors.md")]
pub struct AuthorsGuideExamples;

/// The routes file of an outbox worker: route names mapped to client configurations
/// (feature `routes`).
#[cfg(feature = "routes")]
pub mod routes;
