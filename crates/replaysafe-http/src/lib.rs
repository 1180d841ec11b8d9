//! What every HTTP adapter of replaysafe shares.
//!
//! The webhook, trigger, alert (Alertmanager, PagerDuty, Slack) and metrics (Pushgateway)
//! adapters each send effects over HTTP. They do it the same way, through this crate:
//!
//! - [`Endpoint`]: a URL parsed once; `Debug`, `Display`, the journal and every error show
//!   it as scheme, host, port and path at most, never a query string or a credential
//!   ([`Endpoint::secret`] shows a URL that is itself a secret as its origin only);
//! - [`HttpClient`]: reqwest with redirects never followed, no proxy, a timeout, secret
//!   headers marked sensitive (and [`CREDENTIAL_HEADERS`] accepted only as secret ones),
//!   and the [`SsrfPolicy`] (loopback, private, link-local, CGNAT and other internal
//!   addresses refused unless allow-listed, checked on the address actually connected to;
//!   an allow-list never opens a catch-all network);
//! - [`classify_status`]: 2xx success; 408, 425, 429 and 5xx transient, with the
//!   receiver's `Retry-After`; 410 gone; 3xx and other 4xx permanent;
//! - [`Error`]: one opaque error shape with [`Classify`](replaysafe_core::Classify)
//!   predicates, so the guard and the outbox retry every HTTP adapter alike.
//!
//! ```
//! use replaysafe_http::{Endpoint, HttpClient, SsrfPolicy};
//!
//! let endpoint = Endpoint::base("base_url", "http://127.0.0.1:9093")?;
//! let client = HttpClient::builder("my-adapter")
//!     .ssrf_policy(SsrfPolicy::default().allow("127.0.0.1")?)
//!     .build()?;
//! let alerts = endpoint.join(&["api", "v2", "alerts"]);
//! let _request = client.request(reqwest::Method::POST, &alerts);
//! // client.send(Call { action: "posting alert to", endpoint: &alerts, .. }, request).await?
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This crate does no I/O of its own until an adapter sends; `replaysafe-core` stays free
//! of network code.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod classify;
mod client;
mod endpoint;
mod error;
#[cfg(feature = "otel")]
mod otel;
mod ssrf;

pub use classify::{ResponseClass, classify_status, classify_status_at, parse_retry_after};
pub use client::{
    CREDENTIAL_HEADERS, Call, DEFAULT_TIMEOUT, HttpClient, HttpClientBuilder, credential_header,
    drain,
};
pub use endpoint::Endpoint;
pub use error::Error;
pub use reqwest::Method;
pub use ssrf::{
    AddressClass, InvalidAllowEntry, InvalidNetwork, IpNetwork, SsrfPolicy, SsrfRefusal,
    SsrfResolver,
};
