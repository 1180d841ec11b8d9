//! Client configuration as data: what a routes file, a command line or a Python keyword
//! argument says about a metrics receiver, checked once and built into a guarded client.
//!
//! A password is never in a configuration: it names the environment variable that holds
//! it ([`EnvVarName`]). Errors name the configuration field at fault ([`Error::field`])
//! and never quote a secret. `docs/reference/clients.md` documents the fields.

use replaysafe_core::{EnvVarName, Guard, GuardLayer};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::{Error, PushgatewayClient, SsrfPolicy, StatsdClient};

/// A Prometheus Pushgateway (`kind: "pushgateway"` in a routes file; `replaysafe send
/// metric --pushgateway`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PushgatewayConfig {
    /// The Pushgateway's base URL (`http://pushgateway:9091`).
    pub url: String,
    /// The user for basic auth, with `password_env`.
    pub user: Option<String>,
    /// The variable holding the basic-auth password.
    pub password_env: Option<EnvVarName>,
    /// Hosts, addresses or CIDR networks the SSRF guard lets through although internal.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

impl PushgatewayConfig {
    /// A configuration for the Pushgateway at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        PushgatewayConfig {
            url: url.into(),
            ..PushgatewayConfig::default()
        }
    }

    /// Checks the configuration, reads the password, and builds the guarded client.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<PushgatewayClient>, Error> {
        let policy = SsrfPolicy::allowing(&self.allow_hosts).map_err(Error::from)?;
        let mut builder = PushgatewayClient::builder(&self.url).ssrf_policy(policy);
        let login = replaysafe_core::login(self.user.as_deref(), self.password_env.as_ref())
            .map_err(|error| {
                let field = match &error {
                    replaysafe_core::Error::Missing { field, .. } => field,
                    _ => "password_env",
                };
                Error::from(replaysafe_http::Error::config(field, error.to_string()))
            })?;
        if let Some((user, password)) = login {
            builder = builder.basic_auth(user, SecretString::from(password));
        }
        builder.build(guard).map_err(|error| match error.field() {
            Some("base_url") => error.at_field("url"),
            _ => error,
        })
    }
}

/// A StatsD server over UDP (`kind: "statsd"` in a routes file; `replaysafe send metric
/// --statsd`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct StatsdConfig {
    /// The server's host name or address.
    pub host: String,
    /// Its UDP port.
    pub port: u16,
    /// A prefix for every metric name (`shop.`).
    pub prefix: Option<String>,
}

impl StatsdConfig {
    /// A configuration for the server at `host`:`port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        StatsdConfig {
            host: host.into(),
            port,
            prefix: None,
        }
    }

    /// Checks the configuration and builds the guarded client.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<StatsdClient>, Error> {
        let mut builder = StatsdClient::builder(&self.host, self.port);
        if let Some(prefix) = &self.prefix {
            builder = builder.prefix(prefix);
        }
        builder.build(guard)
    }
}
