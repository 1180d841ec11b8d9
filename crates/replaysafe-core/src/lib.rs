//! The core of replaysafe: the replay context, the delivery gate, idempotency keys,
//! journal sinks and the [`EffectClient`] trait that every adapter implements.
//!
//! A backfill recomputes tables; it must never re-send last month's emails. Every
//! external client is wrapped once in a [`Guard`]; from then on an effect leaves the
//! process only when the [`ReplayContext`] says the run is current, or when an audited
//! [`OptIn`] allows it. Every decision, delivered or suppressed, is journaled.
//!
//! This crate does no network I/O and depends on no adapter backend.
//!
//! # Example
//!
//! ```
//! use async_trait::async_trait;
//! use chrono::{TimeDelta, Utc};
//! use replaysafe_core::*;
//!
//! /// A client that "sends" by printing; a real adapter wraps lettre, reqwest or ssh2.
//! #[derive(Debug)]
//! struct Printer;
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("printer jammed")]
//! struct Jammed;
//! impl Classify for Jammed {
//!     fn is_transient(&self) -> bool { true }
//! }
//!
//! #[async_trait]
//! impl EffectClient for Printer {
//!     type Effect = String;
//!     type Receipt = ();
//!     type Error = Jammed;
//!
//!     fn describe(&self, _cx: &ReplayContext, text: &String) -> Result<EffectDescription, Jammed> {
//!         Ok(EffectDescription::new(EffectKind::Custom("print".into()), "note", "stdout")
//!             .map_err(|_| Jammed)?
//!             .with_payload(text.as_bytes()))
//!     }
//!
//!     async fn deliver(&self, delivery: &Delivery<'_>, text: &String) -> Result<(), Jammed> {
//!         println!("{text} (key {})", delivery.key());
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let journal = std::sync::Arc::new(MemoryJournal::new());
//! let printer = Guard::with_shared_journal(Printer, journal.clone());
//!
//! let now = Utc::now();
//! let today = Window::new(now - TimeDelta::days(1), now)?;
//! let live = ReplayContext::builder()
//!     .pipeline("daily_orders").run_id("scheduled__today").run_kind(RunKind::Scheduled).window(today)
//!     .build()?;
//! assert!(printer.send(&live, &"hello".to_string()).await?.is_delivered());
//!
//! let last_month = Window::new(now - TimeDelta::days(31), now - TimeDelta::days(30))?;
//! let backfill = live.with_run_kind(RunKind::Backfill).with_window(last_month);
//! assert!(printer.send(&backfill, &"hello".to_string()).await?.is_suppressed());
//! // attempting + delivered for the first, suppressed for the second.
//! assert_eq!(journal.len(), 3);
//! # Ok(()) }
//! ```
//!
//! # Environment
//!
//! [`ReplayContext::from_env`] reads `REPLAYSAFE_PIPELINE`, `REPLAYSAFE_RUN_ID`,
//! `REPLAYSAFE_RUN_KIND`, `REPLAYSAFE_REPLAY`, `REPLAYSAFE_WINDOW_START`/`_END`,
//! `REPLAYSAFE_BACKFILL_ID`, `REPLAYSAFE_MODE`, `REPLAYSAFE_JOURNAL`, `REPLAYSAFE_OPT_IN` (an
//! opt-in file, see [`approval`]) and `REPLAYSAFE_TRUSTED_APPROVERS`, falling back to
//! Airflow's `AIRFLOW_CTX_DAG_ID`, `AIRFLOW_CTX_DAG_RUN_ID` (its prefix gives the run
//! kind; an unknown prefix is [`RunKind::Unknown`]), `AIRFLOW_CTX_TRY_NUMBER`,
//! `AIRFLOW_CTX_RUN_TYPE`, `AIRFLOW_CTX_DATA_INTERVAL_START`/`_END` and
//! `AIRFLOW_CTX_LOGICAL_DATE` (without an exported interval, the run is the instant of its
//! logical date, as under Airflow 3's default cron timetable), or to a Dagster Pipes
//! context (`DAGSTER_PIPES_CONTEXT`, see [`dagster`]). Sources that disagree suppress; an
//! explicit value never makes a replay look current. See [`env::vars`].
//!
//! # Errors
//!
//! Building windows, contexts, opt-ins and descriptions returns [`Error`], which names the
//! field or variable at fault. [`Guard::send`] returns [`SendError`]; suppression is
//! `Ok(Outcome::Suppressed(..))`, never an error.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod adapter {
    //! For adapter authors, beyond [`EffectClient`](crate::EffectClient): recording a
    //! decision made outside a [`Guard`](crate::Guard), as the `metrics` bridge does when
    //! it aggregates suppressed increments, with the same journal line and log line the
    //! guard writes ([`EffectRecord`], [`Step`]); keeping a client's connections to the
    //! process that opened them ([`PerProcess`]). Pipeline code never needs it.
    pub use crate::process::{Held, PerProcess};
    pub use crate::record::{EffectRecord, Step};
}
pub mod approval;
mod client;
mod clock;
mod context;
pub mod dagster;
mod effect;
pub mod env;
mod error;
mod gate;
mod guard;
pub mod journal;
mod key;
mod lineage;
mod policy;
mod process;
mod record;
mod retry;
mod run;
mod stored;
mod var_name;
mod window;

pub use approval::{ApproverKey, TrustedApprovers};
pub use client::{Classify, Delivery, ERROR_TYPE_OTHER, EffectClient};
pub use clock::{Clock, FixedClock, SystemClock};
pub use context::{NO_WINDOW_NOTE, ReplayContext, ReplayContextBuilder};
pub use effect::{EffectDescription, EffectKind, PayloadDigest, RedactionPolicy, TargetRedaction};
pub use error::{Error, error_chain};
pub use gate::{Decision, Reason};
pub use guard::{Delivered, Guard, GuardLayer, Outcome, Preview, SendError, Suppressed};
pub use journal::{Journal, JournalRecord, JsonlJournal, MemoryJournal, TracingJournal};
pub use key::{IdempotencyKey, parse_rfc3339, rfc3339};
pub use lineage::UpstreamRun;
pub use policy::{DEFAULT_CLOCK_SKEW, Mode, OptIn, RecencyPolicy, parse_duration};
pub use retry::RetryPolicy;
pub use run::{RunId, RunKind};
pub use stored::StoredContext;
pub use var_name::{EnvVarName, login};
pub use window::{Window, Windows};

/// What a pipeline author needs in scope: the traits whose methods an author calls
/// (`journal.flush()`, `error.is_transient()`) and the names every task uses.
///
/// ```
/// use replaysafe_core::prelude::*;
/// # fn f(cx: ReplayContext) {}
/// ```
pub mod prelude {
    pub use crate::{Classify, EffectClient, Journal, Outcome, ReplayContext};
}
