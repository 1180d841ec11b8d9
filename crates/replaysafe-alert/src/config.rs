//! Client configuration as data: what a routes file, a command line or a Python keyword
//! argument says about an alert receiver, checked once and built into a guarded client.
//!
//! Secrets (a PagerDuty routing key, a Slack webhook URL) are never in a configuration: it
//! names the environment variable that holds each ([`EnvVarName`]). Errors name the
//! configuration field at fault ([`Error::field`]) and never quote a secret.
//! `docs/reference/clients.md` documents the fields.

use replaysafe_core::{EnvVarName, Guard, GuardLayer};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::{AlertmanagerClient, Error, PagerDutyClient, SlackClient, SsrfPolicy};

fn secret(field: &'static str, variable: &EnvVarName) -> Result<SecretString, Error> {
    variable
        .read()
        .map(SecretString::from)
        .map_err(|error| Error::config(field, error.to_string()))
}

/// Reports a builder's errors about its URL against the configuration field `field`.
fn url_field(field: &'static str) -> impl Fn(Error) -> Error {
    move |error| match error.field() {
        Some("base_url" | "webhook_url" | "routing_key") => error.at_field(field),
        _ => error,
    }
}

/// An Alertmanager (`kind: "alertmanager"` in a routes file; `replaysafe send alert
/// --alertmanager`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AlertmanagerConfig {
    /// Alertmanager's base URL (`http://alertmanager:9093`).
    pub url: String,
    /// Hosts, addresses or CIDR networks the SSRF guard lets through although internal.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

impl AlertmanagerConfig {
    /// A configuration for the Alertmanager at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        AlertmanagerConfig {
            url: url.into(),
            allow_hosts: Vec::new(),
        }
    }

    /// Checks the configuration and builds the guarded client.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<AlertmanagerClient>, Error> {
        AlertmanagerClient::builder(&self.url)
            .ssrf_policy(SsrfPolicy::allowing(&self.allow_hosts)?)
            .build(guard)
            .map_err(url_field("url"))
    }
}

/// PagerDuty's Events API v2 (`kind: "pagerduty"` in a routes file; `replaysafe send alert
/// --pagerduty-routing-key-env`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PagerDutyConfig {
    /// The variable holding the integration's routing key.
    pub routing_key_env: EnvVarName,
    /// The Events API's base URL (default PagerDuty's).
    pub url: Option<String>,
    /// The name the journal shows for this routing key (default `events-v2`), such as
    /// `data-oncall`: the effect's target, so part of its idempotency key.
    pub service: Option<String>,
    /// Hosts, addresses or CIDR networks the SSRF guard lets through although internal.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

impl PagerDutyConfig {
    /// A configuration whose routing key is in `routing_key_env`.
    pub fn new(routing_key_env: EnvVarName) -> Self {
        PagerDutyConfig {
            routing_key_env,
            url: None,
            service: None,
            allow_hosts: Vec::new(),
        }
    }

    /// Checks the configuration, reads the routing key, and builds the guarded client.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<PagerDutyClient>, Error> {
        let mut builder =
            PagerDutyClient::builder(secret("routing_key_env", &self.routing_key_env)?)
                .ssrf_policy(SsrfPolicy::allowing(&self.allow_hosts)?);
        if let Some(url) = &self.url {
            builder = builder.base_url(url);
        }
        if let Some(service) = &self.service {
            builder = builder.service_label(service);
        }
        builder.build(guard).map_err(|error| match error.field() {
            Some("routing_key") => error.at_field("routing_key_env"),
            Some("base_url") => error.at_field("url"),
            Some("service_label") => error.at_field("service"),
            _ => error,
        })
    }
}

/// A Slack incoming webhook (`kind: "slack"` in a routes file; `replaysafe send alert
/// --slack-url-env`). Its URL is a secret, so only the variable holding it is configured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SlackConfig {
    /// The variable holding the webhook URL.
    pub url_env: EnvVarName,
    /// The name the journal shows for this webhook, such as `#data-alerts`: the effect's
    /// target, so part of its idempotency key.
    pub channel: Option<String>,
    /// Hosts, addresses or CIDR networks the SSRF guard lets through although internal.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

impl SlackConfig {
    /// A configuration whose webhook URL is in `url_env`.
    pub fn new(url_env: EnvVarName) -> Self {
        SlackConfig {
            url_env,
            channel: None,
            allow_hosts: Vec::new(),
        }
    }

    /// Checks the configuration, reads the webhook URL, and builds the guarded client.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<SlackClient>, Error> {
        let mut builder = SlackClient::builder(secret("url_env", &self.url_env)?)
            .ssrf_policy(SsrfPolicy::allowing(&self.allow_hosts)?);
        if let Some(channel) = &self.channel {
            builder = builder.channel_label(channel);
        }
        builder.build(guard).map_err(|error| match error.field() {
            Some("channel_label") => error.at_field("channel"),
            _ => url_field("url_env")(error),
        })
    }
}
