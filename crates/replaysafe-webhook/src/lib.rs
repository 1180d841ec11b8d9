//! Replay-safe webhooks and downstream triggers for replaysafe, on reqwest.
//!
//! A backfill recomputes last month's tables; it must not call last month's webhooks
//! again, nor start ninety downstream DAG runs. [`WebhookClient`] and [`TriggerClient`]
//! are reached only through a [`Guard`](replaysafe_core::Guard): the gate runs before any
//! DNS lookup or connection, so a suppressed effect touches no network at all, and every
//! decision is journaled.
//!
//! What a delivery carries:
//!
//! - `Idempotency-Key: "<key>"`, a structured-field string (IETF
//!   draft-ietf-httpapi-idempotency-key-header). The key names the logical effect
//!   (pipeline, kind, event type, endpoint, window), so it is the same on every retry and
//!   every run of that effect, and a receiver can drop a repeat.
//! - With [signing secrets](WebhookClientBuilder::signing_secret), the Standard Webhooks headers
//!   `webhook-id: <key>`, `webhook-timestamp` (Unix seconds, system clock) and
//!   `webhook-signature: v1,<base64> …`, one signature per secret (see [`SigningSecret`]).
//!
//! How it is sent: `POST` unless configured otherwise, a 15 s timeout, redirects never
//! followed, no proxy, and an [`SsrfPolicy`] that refuses loopback, private, link-local,
//! CGNAT, unique-local and other internal addresses before connecting, checked on the
//! address actually connected to. Open specific hosts or networks with an explicit
//! allow-list.
//!
//! The journal shows the endpoint as scheme, host and path: never a query string, a
//! credential or a header value. When the path itself is a secret, choose another
//! [`TargetRedaction`](replaysafe_core::TargetRedaction) with
//! [`WebhookClientBuilder::redaction`]: the journal, log lines, `Debug` and error messages all
//! follow it.
//!
//! # Example
//!
//! ```no_run
//! use replaysafe_core::{JsonlJournal, ReplayContext};
//! use replaysafe_webhook::{Trigger, TriggerClient, Webhook, WebhookClient};
//! use secrecy::SecretString;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let journal = std::sync::Arc::new(JsonlJournal::open("journal.jsonl")?);
//! let cx = ReplayContext::from_env()?;
//!
//! let partner = WebhookClient::builder("https://partner.example/hooks/orders")
//!     .signing_secret(SecretString::from(std::env::var("PARTNER_WEBHOOK_SECRET")?))
//!     .build(journal.clone())?;
//! let totals = json!({"orders": 1204, "revenue_eur": 88412.5});
//! let outcome = partner
//!     .send(&cx, &Webhook::event("orders.daily_total", cx.window().end(), totals))
//!     .await?;
//! println!("delivered: {}, key {}", outcome.is_delivered(), outcome.key());
//!
//! let airflow = TriggerClient::airflow("https://airflow.internal:8080")
//!     .bearer_token(SecretString::from(std::env::var("AIRFLOW_TOKEN")?))
//!     .ssrf_policy(replaysafe_webhook::SsrfPolicy::default().allow_host("airflow.internal"))
//!     .build(journal.clone())?;
//! airflow
//!     .send(&cx, &Trigger::new("daily_reports").with_conf(json!({"source": "daily_orders"})))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Under a backfill context both calls return `Ok(Outcome::Suppressed(..))`, nothing
//! leaves the process, and the journal says what would have been sent.
//!
//! # Errors
//!
//! [`Error`] is opaque; it says whether trying again can help
//! ([`Classify`](replaysafe_core::Classify)) and the guard retries transient failures:
//! connection errors, timeouts, 408, 425, 429 and 5xx, honouring `Retry-After` in
//! delta-seconds and HTTP-date forms. 410 Gone ([`Error::is_endpoint_gone`]), every
//! other 4xx, any 3xx ([`Error::is_redirect`]), an SSRF refusal
//! ([`Error::is_ssrf_refused`]) and invalid input ([`Error::is_invalid`]) are permanent.
//! Every HTTP adapter shares this classification and this error shape, through
//! [`replaysafe_http`].

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod airflow;
mod config;
mod signing;
mod transport;
mod trigger;
mod webhook;

pub use airflow::airflow_token;
pub use config::{TriggerConfig, WebhookConfig};
/// The error of every HTTP adapter ([`replaysafe_http::Error`]).
pub use replaysafe_http::Error;
pub use replaysafe_http::{
    AddressClass, InvalidAllowEntry, InvalidNetwork, IpNetwork, Method, SsrfPolicy, SsrfRefusal,
};
pub use signing::SigningSecret;
pub use trigger::{Trigger, TriggerClient, TriggerClientBuilder, TriggerReceipt};
pub use webhook::{Webhook, WebhookClient, WebhookClientBuilder, WebhookReceipt};
