//! Client configuration as data: what a routes file, a command line or a Python keyword
//! argument says, checked once and built into a guarded client.
//!
//! Secrets are never in a configuration: it names the environment variable that holds
//! each ([`EnvVarName`]), and [`build`](WebhookConfig::build) reads it. Every error names
//! the configuration field at fault ([`Error::field`]) and never quotes a secret.
//! `docs/reference/clients.md` documents the fields; a test holds it to these types.

use std::collections::BTreeMap;

use replaysafe_core::{EnvVarName, Guard, GuardLayer, RedactionPolicy};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::{Error, SsrfPolicy, TriggerClient, TriggerClientBuilder, WebhookClient};

/// Reads a secret named by configuration field `field`; the error names the field and,
/// when it is shown, the variable, never the value.
pub(crate) fn secret(field: &'static str, variable: &EnvVarName) -> Result<SecretString, Error> {
    variable
        .read()
        .map(SecretString::from)
        .map_err(|error| Error::config(field, error.to_string()))
}

/// The header fields of a configuration: plain headers, and headers whose values come from
/// variables. A credential header (`Authorization`, `Cookie`, `X-Api-Key`, ...) among the
/// plain ones is refused: its value belongs in a variable.
fn check_plain_headers(headers: &BTreeMap<String, String>) -> Result<(), Error> {
    for name in headers.keys() {
        if let Some(credential) = replaysafe_http::credential_header(name) {
            return Err(Error::config(
                "headers",
                format!(
                    "{credential} carries credentials and is never given inline: name the variable that holds it in secret_headers_env"
                ),
            ));
        }
    }
    Ok(())
}

/// The configuration field behind a builder error about headers.
fn header_field(error: Error) -> Error {
    let field = if error.to_string().contains("secret") {
        "secret_headers_env"
    } else {
        "headers"
    };
    error.at_field(field)
}

/// A webhook endpoint (`kind: "webhook"` in a routes file; `replaysafe send webhook`).
///
/// ```
/// use replaysafe_core::MemoryJournal;
/// use replaysafe_webhook::WebhookConfig;
///
/// let config: WebhookConfig = serde_json::from_str(
///     r#"{"url": "https://partner.example/hooks", "allow_hosts": ["partner.example"]}"#,
/// )?;
/// let guard = config.build(MemoryJournal::new())?;
/// assert_eq!(guard.unguarded_ref().endpoint(), "https://partner.example/hooks");
///
/// // A secret pasted where its variable's name belongs is refused, and not repeated.
/// let pasted = serde_json::from_str::<WebhookConfig>(
///     r#"{"url": "https://partner.example/hooks", "secret_env": "whsec_c2VjcmV0+Zm9v="}"#,
/// );
/// assert!(!pasted.unwrap_err().to_string().contains("c2VjcmV0"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct WebhookConfig {
    /// The endpoint, `http` or `https`; its query is sent but never shown. One of `url`
    /// and `url_env`.
    pub url: Option<String>,
    /// The variable holding the whole endpoint URL, when the URL itself is a secret
    /// (errors about the URL it holds name `url`; those about the variable, `url_env`).
    pub url_env: Option<EnvVarName>,
    /// The variable holding a Standard Webhooks signing secret (`whsec_…`).
    pub secret_env: Option<EnvVarName>,
    /// Plain headers, name → value; credential headers are refused here.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are secrets: header name → the variable holding the value.
    #[serde(default)]
    pub secret_headers_env: BTreeMap<String, EnvVarName>,
    /// Hosts, addresses or CIDR networks the SSRF guard lets through although internal.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

impl WebhookConfig {
    /// A configuration for `url`, with every other field at its default.
    pub fn new(url: impl Into<String>) -> Self {
        WebhookConfig {
            url: Some(url.into()),
            ..WebhookConfig::default()
        }
    }

    /// Checks the configuration, reads its secrets from the environment, and returns the
    /// client's builder, for settings a configuration does not hold (a method, a timeout).
    pub fn builder(&self) -> Result<crate::WebhookClientBuilder, Error> {
        let url = match (&self.url, &self.url_env) {
            (Some(url), None) => url.clone(),
            (None, Some(variable)) => variable
                .read()
                .map_err(|error| Error::config("url_env", error.to_string()))?,
            (Some(_), Some(_)) => {
                return Err(Error::config("url", "give url or url_env, not both"));
            }
            (None, None) => return Err(Error::config("url", "the endpoint is missing")),
        };
        check_plain_headers(&self.headers)?;
        let mut builder =
            WebhookClient::builder(url).ssrf_policy(SsrfPolicy::allowing(&self.allow_hosts)?);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        for (name, variable) in &self.secret_headers_env {
            builder = builder.secret_header(name, secret("secret_headers_env", variable)?);
        }
        if let Some(variable) = &self.secret_env {
            builder = builder.signing_secret(secret("secret_env", variable)?);
        }
        Ok(builder)
    }

    /// Checks the configuration and builds the guarded client (see
    /// [`WebhookClientBuilder::build`](crate::WebhookClientBuilder::build)), its endpoint
    /// shown as `redaction` says when given.
    pub fn build_with(
        &self,
        guard: impl Into<GuardLayer>,
        redaction: Option<RedactionPolicy>,
    ) -> Result<Guard<WebhookClient>, Error> {
        let mut builder = self.builder()?;
        if let Some(redaction) = redaction {
            builder = builder.redaction(redaction);
        }
        builder.build(guard).map_err(|error| match error.field() {
            // The endpoint is `url`, wherever it was read from; `url_env` errors are
            // about reading the variable.
            Some("endpoint") => error.at_field("url"),
            Some("signing_secret") => error.at_field("secret_env"),
            Some("header") => header_field(error),
            _ => error,
        })
    }

    /// [`WebhookConfig::build_with`] the client's default redaction.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<WebhookClient>, Error> {
        self.build_with(guard, None)
    }
}

/// A downstream trigger (`kind: "trigger"` in a routes file; `replaysafe send trigger`):
/// an Airflow 3 API server (`airflow`, a DAG run per trigger) or a trigger URL (`url`).
///
/// Credentials: a bearer token (`token_env`), or a user and password (`user`,
/// `password_env`), which log in to Airflow for a JWT (`POST /auth/token`, what Airflow
/// 3's default auth manager takes) and are sent as basic auth to a trigger URL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TriggerConfig {
    /// Airflow's base URL. One of `airflow` and `url`.
    pub airflow: Option<String>,
    /// A trigger URL.
    pub url: Option<String>,
    /// The variable holding a bearer token.
    pub token_env: Option<EnvVarName>,
    /// The user to log in as, with `password_env`.
    pub user: Option<String>,
    /// The variable holding the user's password.
    pub password_env: Option<EnvVarName>,
    /// Hosts, addresses or CIDR networks the SSRF guard lets through although internal.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

impl TriggerConfig {
    /// A configuration for Airflow's API server at `base_url`.
    pub fn airflow(base_url: impl Into<String>) -> Self {
        TriggerConfig {
            airflow: Some(base_url.into()),
            ..TriggerConfig::default()
        }
    }

    /// A configuration for a trigger URL.
    pub fn url(url: impl Into<String>) -> Self {
        TriggerConfig {
            url: Some(url.into()),
            ..TriggerConfig::default()
        }
    }

    /// Checks the configuration, reads its secrets from the environment, and returns the
    /// client's builder.
    pub fn builder(&self) -> Result<TriggerClientBuilder, Error> {
        let mut builder = match (&self.airflow, &self.url) {
            (Some(base), None) => TriggerClient::airflow(base),
            (None, Some(url)) => TriggerClient::url(url),
            (Some(_), Some(_)) => {
                return Err(Error::config("airflow", "give airflow or url, not both"));
            }
            (None, None) => {
                return Err(Error::config(
                    "airflow",
                    "name the downstream: airflow (Airflow's base URL) or url",
                ));
            }
        }
        .ssrf_policy(SsrfPolicy::allowing(&self.allow_hosts)?);
        let login = replaysafe_core::login(self.user.as_deref(), self.password_env.as_ref())
            .map_err(|error| match &error {
                replaysafe_core::Error::Missing { field, .. } => {
                    Error::config(field, error.to_string())
                }
                _ => Error::config("password_env", error.to_string()),
            })?;
        match (&self.token_env, login) {
            (Some(_), Some(_)) => {
                return Err(Error::config(
                    "token_env",
                    "give token_env, or user and password_env, not both",
                ));
            }
            (Some(variable), None) => {
                builder = builder.bearer_token(secret("token_env", variable)?)
            }
            (None, Some((user, password))) if self.airflow.is_some() => {
                builder = builder.airflow_login(user, password.into());
            }
            (None, Some((user, password))) => builder = builder.basic_auth(&user, password.into()),
            (None, None) => {}
        }
        Ok(builder)
    }

    /// Checks the configuration and builds the guarded client, its endpoint shown as
    /// `redaction` says when given.
    pub fn build_with(
        &self,
        guard: impl Into<GuardLayer>,
        redaction: Option<RedactionPolicy>,
    ) -> Result<Guard<TriggerClient>, Error> {
        let mut builder = self.builder()?;
        if let Some(redaction) = redaction {
            builder = builder.redaction(redaction);
        }
        builder.build(guard).map_err(|error| match error.field() {
            Some("airflow base URL") => error.at_field("airflow"),
            Some("trigger URL") => error.at_field("url"),
            Some("airflow_login") => error.at_field("user"),
            Some("bearer token") => error.at_field("token_env"),
            Some("header") => error.at_field(if self.token_env.is_some() {
                "token_env"
            } else {
                "password_env"
            }),
            _ => error,
        })
    }

    /// [`TriggerConfig::build_with`] the client's default redaction.
    pub fn build(&self, guard: impl Into<GuardLayer>) -> Result<Guard<TriggerClient>, Error> {
        self.build_with(guard, None)
    }
}
