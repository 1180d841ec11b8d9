//! Replay-safe alerting for replaysafe: Alertmanager API v2, PagerDuty Events API v2 and
//! Slack incoming webhooks, plus a backfill silence.
//!
//! A replayed window can fire the same freshness, volume and data-quality checks as the
//! live one, and page a human at 3 am about a window from last March. Every client here
//! returns a [`Guard`](replaysafe_core::Guard): alerts are effects of kind `alert`, whose
//! default max age is 1 hour, so an alert raised while a backfill, a replay, or a window
//! older than an hour is processed is suppressed and journaled, never sent.
//!
//! - [`AlertmanagerClient`]: posts an [`Alert`] (labels including `pipeline` and
//!   `window`, annotations, `startsAt`, `endsAt`, `generatorURL`); a resolve sends
//!   `endsAt` = now. [`AlertmanagerApi`] reads alerts and silences back.
//! - [`PagerDutyClient`]: trigger and resolve with `dedup_key` = the idempotency key, the
//!   routing key a wrapped secret.
//! - [`SlackClient`]: a [`SlackMessage`] (text, optional blocks) to an incoming webhook
//!   whose URL is a wrapped secret.
//! - [`AlertmanagerApi::begin_backfill_silence`]: silences a pipeline's alerts for the
//!   length of a backfill, for the alerts that rules *outside* the pipeline raise while
//!   the backfill rewrites its tables. End it with [`BackfillSilence::end`].
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use replaysafe_alert::{Alert, AlertCategory, AlertmanagerApi, AlertmanagerClient, PagerDutyClient, Severity, SsrfPolicy};
//! use replaysafe_core::{JsonlJournal, ReplayContext};
//! use secrecy::SecretString;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cx = ReplayContext::from_env()?;
//! let journal = Arc::new(JsonlJournal::open("journal.jsonl")?);
//! // Alertmanager runs on an internal address, which the SSRF guard refuses unless allowed.
//! let internal = SsrfPolicy::default().allow_host("alertmanager");
//! let alertmanager = AlertmanagerClient::builder("http://alertmanager:9093")
//!     .ssrf_policy(internal.clone())
//!     .build(journal.clone())?;
//! let pagerduty = PagerDutyClient::builder(SecretString::from(std::env::var("PD_ROUTING_KEY")?))
//!     .service_label("data-oncall")
//!     .build(journal)?;
//!
//! let late = Alert::trigger("orders_freshness", "orders for the window are 3 h late")
//!     .with_severity(Severity::Critical)
//!     .with_category(AlertCategory::Freshness);
//! alertmanager.send(&cx, &late).await?; // suppressed in a backfill, journaled either way
//! pagerduty.send(&cx, &late).await?;
//! // later, once the data has arrived:
//! pagerduty.send(&cx, &late.resolved()).await?; // same dedup_key as the trigger
//!
//! // Around a backfill: mute the pipeline's alerts raised by outside rules.
//! let api = AlertmanagerApi::new("http://alertmanager:9093", internal)?;
//! let silence = api.begin_backfill_silence(&cx, "recompute July", "jane@ops", Duration::from_secs(6 * 3600)).await?;
//! // ... run the backfill ...
//! silence.end().await?;
//! # Ok(()) }
//! ```
//!
//! # What is journaled
//!
//! Kind `alert`; the message type is the alert (or Slack message) name, so a trigger and
//! its resolve share an idempotency key; the target is the Alertmanager base URL,
//! `pagerduty:<service label>` or `slack:<channel label>`, never a routing key or a
//! webhook URL; the summary is `trigger <severity>: <summary>` or `resolve` (the text,
//! for Slack).
//!
//! # Errors
//!
//! One [`Error`] type. Invalid input (an alert name, a reserved label, an empty summary)
//! is refused by `describe`, naming the field, and nothing is sent. HTTP 408, 425, 429
//! and 5xx, timeouts and connection errors are transient (`Retry-After` is honoured by the
//! guard); other 4xx and any redirect are permanent. The classification, the SSRF guard
//! (internal addresses refused unless allowed with `ssrf_policy`) and the error shape are
//! those of every HTTP adapter ([`replaysafe_http`]).

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod alert;
mod alertmanager;
mod config;
mod pagerduty;
mod slack;

pub use alert::{Alert, AlertAction, AlertCategory, Severity};
pub use alertmanager::{
    ActiveAlert, AlertStatus, AlertmanagerApi, AlertmanagerClient, AlertmanagerClientBuilder,
    BackfillSilence, Matcher, Silence, SilenceMatcher, SilenceStatus,
};
pub use config::{AlertmanagerConfig, PagerDutyConfig, SlackConfig};
pub use pagerduty::{DEFAULT_BASE_URL, PagerDutyClient, PagerDutyClientBuilder, PagerDutyReceipt};
/// The error of every HTTP adapter ([`replaysafe_http::Error`]).
pub use replaysafe_http::Error;
pub use replaysafe_http::{IpNetwork, SsrfPolicy};
pub use slack::{SlackClient, SlackClientBuilder, SlackMessage};
