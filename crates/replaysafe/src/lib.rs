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
//! | `testing` | [`testing`]: mock and recording clients, ready-made contexts |
//! | `full` | every adapter |
//!
//! See [`replaysafe_core`] for the complete guide and example.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

#[doc(inline)]
pub use replaysafe_core::*;

/// Test support (feature `testing`).
#[cfg(feature = "testing")]
#[doc(inline)]
pub use replaysafe_test as testing;
