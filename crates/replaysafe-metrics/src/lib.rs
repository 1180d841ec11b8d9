//! Replay-safe metrics for replaysafe: a Prometheus Pushgateway client, a StatsD /
//! DogStatsD client, and a recorder for the `metrics` facade that goes quiet in replays.
//!
//! Anything a task increments (a business counter, a usage meter a customer is billed
//! on) is an additive external effect. A backfill that recomputes last month must not
//! push last month's totals over today's, nor add last month's orders to a live counter.
//! Every effect here has kind `metric` (max age 6 h by default).
//!
//! - [`PushgatewayClient`]: one [`Push`] (a group: job and grouping labels, and its
//!   samples in the text exposition format) per effect. [`Push::replace`] (`PUT`)
//!   replaces the group and is idempotent; [`Push::merge`] (`POST`) replaces only the
//!   metrics it names; [`Push::delete`] removes the group.
//! - [`StatsdClient`]: one [`StatsdMetric`] (counter, gauge, timing, histogram,
//!   distribution, with DogStatsD tags) per UDP datagram, to a host given explicitly.
//! - [`ReplaySafeRecorder`]: wraps any [`metrics::Recorder`]; forwards in a live run,
//!   journals aggregated `suppressed` records in a replay. It is process-wide; read its
//!   docs before installing it.
//!
//! The clients' public constructors return a [`Guard`](replaysafe_core::Guard): an
//! effect reaches the network only through the gate.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use replaysafe_core::{JsonlJournal, ReplayContext};
//! use replaysafe_metrics::{PushgatewayClient, Push, Sample, StatsdClient, StatsdMetric};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cx = ReplayContext::from_env()?;
//! let journal = Arc::new(JsonlJournal::open("journal.jsonl")?);
//!
//! // The Pushgateway runs on an internal address, which the SSRF guard refuses unless allowed.
//! let gateway = PushgatewayClient::builder("http://pushgateway:9091")
//!     .ssrf_policy(replaysafe_metrics::SsrfPolicy::default().allow_host("pushgateway"))
//!     .build(journal.clone())?;
//! let push = Push::replace("nightly_export")
//!     .with_grouping_label("instance", "batch-01")
//!     .with_sample(Sample::gauge("orders_exported", 1204.0));
//! let outcome = gateway.send(&cx, &push).await?;
//! println!("pushed: {}", outcome.is_delivered());
//!
//! let statsd = StatsdClient::builder("statsd.internal", 8125).build(journal)?;
//! statsd.send(&cx, &StatsdMetric::counter("orders", 1204).with_tag("region", "eu")).await?;
//! # Ok(()) }
//! ```
//!
//! # What is journaled
//!
//! The target is a metric or group name and label *names*: `orders{region}` for StatsD,
//! `nightly_export{instance}` (job and grouping label names) for a push,
//! `orders_total{customer,region}` for the recorder. Label values never reach the target
//! or the summary; they are part of the payload digest only. The summary is the value
//! (`counter +1204`, `PUT orders_exported=1204`).
//!
//! # Errors
//!
//! One [`Error`] type. Invalid input (a metric or label name, a counter below zero, a
//! value with `|` in StatsD) is refused by `describe`, naming the field, and nothing is
//! sent. HTTP 408, 425, 429 and 5xx, timeouts and network errors are transient
//! (`Retry-After` is honoured by the guard); other statuses, redirects included, are
//! permanent.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod bridge;
mod config;
mod error;
mod exposition;

mod pushgateway;
mod statsd;

pub use bridge::{FlushHandle, ReplaySafeRecorder};
pub use config::{PushgatewayConfig, StatsdConfig};
pub use error::Error;
pub use exposition::{Sample, SampleKind};
pub use pushgateway::{Push, PushMethod, PushgatewayClient, PushgatewayClientBuilder};
pub use replaysafe_http::{IpNetwork, SsrfPolicy};
pub use statsd::{StatsdClient, StatsdClientBuilder, StatsdMetric, StatsdValue};
