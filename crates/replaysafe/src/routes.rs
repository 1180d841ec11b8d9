//! The routes file of an outbox worker: route names mapped to client configurations, the
//! same `…Config` types every front end builds clients from (`docs/reference/clients.md`).
//!
//! Secrets are named by environment variable (`…_env` fields), never written in the file:
//! a field that would hold one is refused, naming the route and the field and never
//! quoting the value.
//!
//! ```
//! use replaysafe::routes::RoutesFile;
//!
//! let routes = RoutesFile::parse(r#"{"routes": {
//!     "partner": {"kind": "webhook", "url": "https://partner.example/hooks", "secret_env": "PARTNER_SECRET"}
//! }}"#)?;
//! assert_eq!(routes.routes.len(), 1);
//! # Ok::<(), replaysafe::routes::RoutesError>(())
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use replaysafe_core::{EnvVarName, GuardLayer, Journal};
use replaysafe_outbox::WorkerBuilder;
use serde::Deserialize;

/// The routes file: route name → route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RoutesFile {
    /// Route name → route.
    pub routes: BTreeMap<String, RouteConfig>,
    /// Route name → its flow control, from the route's `flow` object (a rate, a
    /// concurrency cap, a circuit breaker: [`replaysafe_outbox::FlowControl`]).
    #[serde(skip)]
    pub flows: BTreeMap<String, replaysafe_outbox::FlowControl>,
}

/// One route: a client configuration, tagged by `kind`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RouteConfig {
    /// A webhook.
    Webhook(replaysafe_webhook::WebhookConfig),
    /// A downstream trigger: Airflow's REST API or a URL.
    Trigger(replaysafe_webhook::TriggerConfig),
    /// Email over SMTP.
    Email(replaysafe_email::EmailConfig),
    /// A partner file drop over SFTP.
    Sftp(replaysafe_sftp::SftpConfig),
    /// Alertmanager v2.
    Alertmanager(replaysafe_alert::AlertmanagerConfig),
    /// PagerDuty Events v2.
    Pagerduty(replaysafe_alert::PagerDutyConfig),
    /// A Slack incoming webhook.
    Slack(replaysafe_alert::SlackConfig),
    /// Prometheus Pushgateway.
    Pushgateway(replaysafe_metrics::PushgatewayConfig),
    /// StatsD over UDP.
    Statsd(replaysafe_metrics::StatsdConfig),
}

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What is wrong with a routes file. No message quotes a value from the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RoutesError {
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a routes file: not JSON, an unknown field or kind, a value of the
    /// wrong type, a secret where a variable name belongs.
    #[error("{at}{problem}")]
    Invalid {
        /// `FILE: line L, column C: `, or empty when parsed from text.
        at: String,
        /// What is wrong, naming fields, never values.
        problem: String,
    },
    /// A route's configuration was refused when its client was built.
    #[error("route {route}{}: {source}", field.as_ref().map(|field| format!(": {field}")).unwrap_or_default())]
    Config {
        /// The route.
        route: String,
        /// The configuration field at fault, when the adapter names one.
        field: Option<String>,
        /// The adapter's error.
        #[source]
        source: BoxError,
    },
}

impl RoutesFile {
    /// Reads and checks the routes file at `path`.
    ///
    /// # Errors
    /// [`RoutesError::Read`], or [`RoutesError::Invalid`] naming the line and column.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, RoutesError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RoutesError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse_at(&text, Some(path))
    }

    /// Parses and checks a routes file's text.
    ///
    /// # Errors
    /// [`RoutesError::Invalid`], naming what is wrong and never quoting a value.
    pub fn parse(text: &str) -> Result<Self, RoutesError> {
        Self::parse_at(text, None)
    }

    fn parse_at(text: &str, path: Option<&Path>) -> Result<Self, RoutesError> {
        let where_ = |line: usize, column: usize| match path {
            Some(path) => format!("{}: line {line}, column {column}: ", path.display()),
            None => format!("line {line}, column {column}: "),
        };
        let located = |e: serde_json::Error| RoutesError::Invalid {
            at: where_(e.line(), e.column()),
            problem: classify(&e),
        };
        let mut value: serde_json::Value = serde_json::from_str(text).map_err(located)?;
        check_secret_fields(&value)?;
        // A route's `flow` is the worker's, not the client's: taken out before the client's
        // configuration (closed to unknown fields) is read.
        let flows = take_flows(&mut value, path)?;
        let mut file: RoutesFile = if flows.is_empty() {
            serde_json::from_str(text).map_err(located)?
        } else {
            serde_json::from_value(value).map_err(|e| RoutesError::Invalid {
                at: path
                    .map(|p| format!("{}: ", p.display()))
                    .unwrap_or_default(),
                problem: classify(&e),
            })?
        };
        file.flows = flows;
        if file.routes.is_empty() {
            return Err(RoutesError::Invalid {
                at: path
                    .map(|p| format!("{}: ", p.display()))
                    .unwrap_or_default(),
                problem: "no routes".to_owned(),
            });
        }
        Ok(file)
    }

    /// Adds a guarded client per route to `builder`, each journaling to `journal`.
    ///
    /// # Errors
    /// [`RoutesError::Config`] naming the route and the configuration field.
    pub fn add_to(
        &self,
        mut builder: WorkerBuilder,
        journal: &Arc<dyn Journal>,
    ) -> Result<WorkerBuilder, RoutesError> {
        for (name, route) in &self.routes {
            let layer = GuardLayer::new(journal.clone());
            macro_rules! build {
                ($config:expr) => {
                    builder.route(
                        name,
                        $config.build(&layer).map_err(|e| RoutesError::Config {
                            route: name.clone(),
                            field: e.field().map(str::to_owned),
                            source: Box::new(e),
                        })?,
                    )
                };
            }
            builder = match route {
                RouteConfig::Webhook(config) => build!(config),
                RouteConfig::Trigger(config) => build!(config),
                RouteConfig::Email(config) => build!(config),
                RouteConfig::Sftp(config) => build!(config),
                RouteConfig::Alertmanager(config) => build!(config),
                RouteConfig::Pagerduty(config) => build!(config),
                RouteConfig::Slack(config) => build!(config),
                RouteConfig::Pushgateway(config) => build!(config),
                RouteConfig::Statsd(config) => build!(config),
            };
            if let Some(flow) = self.flows.get(name) {
                builder = builder.flow(name, flow.clone());
            }
        }
        Ok(builder)
    }
}

/// Takes each route's `flow` object out of the file's JSON and reads it, naming the route
/// when it is not a flow control.
fn take_flows(
    file: &mut serde_json::Value,
    path: Option<&Path>,
) -> Result<BTreeMap<String, replaysafe_outbox::FlowControl>, RoutesError> {
    let mut flows = BTreeMap::new();
    let routes = file
        .get_mut("routes")
        .and_then(serde_json::Value::as_object_mut);
    for (route, config) in routes.into_iter().flatten() {
        let Some(flow) = config.as_object_mut().and_then(|c| c.remove("flow")) else {
            continue;
        };
        let flow = serde_json::from_value(flow).map_err(|e| RoutesError::Invalid {
            at: path
                .map(|p| format!("{}: ", p.display()))
                .unwrap_or_default(),
            // The flow's own messages (a rate, a duration) quote nothing; serde's others
            // might quote a value, so they are classified as every other field's.
            problem: format!("route {route}: flow: {}", flow_problem(&e)),
        })?;
        flows.insert(route.clone(), flow);
    }
    Ok(flows)
}

/// What is wrong with a route's `flow`: the flow's own message when it is one, otherwise
/// what [`classify`] says, which never quotes a value.
fn flow_problem(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let own = text.split(" at line").next().unwrap_or_default();
    if own.starts_with("rate:") || own.starts_with("probe_every:") {
        own.to_owned()
    } else {
        classify(error)
    }
}

/// Refuses, naming the route and the field and never quoting the value, every `…_env`
/// field (or map entry of one) that is not a variable name. Runs on the file's JSON before
/// it is read into routes, so the message can name the field, which the routes' own
/// deserialization (an internally tagged enum) cannot.
fn check_secret_fields(file: &serde_json::Value) -> Result<(), RoutesError> {
    let routes = file.get("routes").and_then(serde_json::Value::as_object);
    for (route, config) in routes.into_iter().flatten() {
        check_env_fields(&format!("route {route}"), config)?;
    }
    Ok(())
}

/// Refuses every `…_env` field of `config` (or map entry of one) that is not a variable
/// name, naming `place` and the field and never quoting the value.
fn check_env_fields(place: &str, config: &serde_json::Value) -> Result<(), RoutesError> {
    for (field, value) in config.as_object().into_iter().flatten() {
        if !field.ends_with("_env") {
            continue;
        }
        let names: Vec<(String, &serde_json::Value)> = match value {
            serde_json::Value::Object(map) => map
                .iter()
                .map(|(key, value)| (format!("{field}.{key}"), value))
                .collect(),
            other => vec![(field.clone(), other)],
        };
        for (at, name) in names {
            if let Some(name) = name.as_str() {
                EnvVarName::parse(format!("{place}: {at}"), name).map_err(|e| {
                    RoutesError::Invalid {
                        at: String::new(),
                        problem: e.to_string(),
                    }
                })?;
            }
        }
    }
    Ok(())
}

/// Reads one client configuration (`WebhookConfig`, `EmailConfig`, …) from JSON exactly as
/// a route of the routes file is read, for other front ends (the Python API's keyword
/// arguments): a `…_env` field that is not a variable name is refused naming `place` and
/// the field, and no message quotes a value (a secret typed into the wrong field included).
///
/// # Errors
/// [`RoutesError::Invalid`], naming the field at fault.
pub fn config_from_json<T: serde::de::DeserializeOwned>(
    place: &str,
    config: serde_json::Value,
) -> Result<T, RoutesError> {
    check_env_fields(place, &config)?;
    serde_json::from_value(config).map_err(|e| RoutesError::Invalid {
        at: format!("{place}: "),
        problem: classify(&e),
    })
}

/// What is wrong with a routes file, without quoting its values.
fn classify(error: &serde_json::Error) -> String {
    let text = error.to_string();
    // serde's messages for unknown fields and variants name the field, not a value.
    if text.starts_with("unknown field")
        || text.starts_with("unknown variant")
        || text.starts_with("missing field")
    {
        return text
            .split(" at line")
            .next()
            .unwrap_or("invalid")
            .to_owned();
    }
    // EnvVarName's refusal never quotes the value (the fields are checked by name first).
    if text.starts_with(EnvVarName::NOT_A_NAME) {
        return EnvVarName::NOT_A_NAME.to_owned();
    }
    match error.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            "not valid JSON".to_owned()
        }
        _ => "a value has the wrong type".to_owned(),
    }
}

#[cfg(test)]
mod flow_tests {
    use super::*;

    #[test]
    fn a_routes_flow_is_read_apart_from_its_client() {
        let file = RoutesFile::parse(
            r#"{"routes": {"partner": {"kind": "webhook", "url": "https://partner.example/hooks",
                "flow": {"rate": "50/s", "concurrency": 4, "breaker": {"failures": 5, "probe_every": "30s"}}},
              "reports": {"kind": "webhook", "url": "https://reports.example/hooks"}}}"#,
        )
        .unwrap();
        assert_eq!(file.routes.len(), 2);
        assert_eq!(
            file.flows.get("partner"),
            Some(
                &replaysafe_outbox::FlowControl::new()
                    .with_rate(50.0)
                    .with_concurrency(4)
                    .with_breaker(5, std::time::Duration::from_secs(30))
            )
        );
        assert!(!file.flows.contains_key("reports"));
        let bad = RoutesFile::parse(
            r#"{"routes": {"partner": {"kind": "webhook", "url": "https://p.example/h", "flow": {"rate": "fast"}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(bad.contains("route partner: flow: rate"), "{bad}");
        // A value of the wrong type is not quoted.
        let pasted = RoutesFile::parse(
            r#"{"routes": {"partner": {"kind": "webhook", "url": "https://p.example/h", "flow": {"concurrency": "whsec_s3cr3t"}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(pasted.contains("route partner: flow"), "{pasted}");
        assert!(!pasted.contains("whsec_s3cr3t"), "{pasted}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_in_the_routes_file_is_refused_by_name_and_not_repeated() {
        let text = r#"{"routes": {"p": {"kind": "webhook", "url": "http://127.0.0.1/h", "secret": "hunter2"}}}"#;
        let shown = RoutesFile::parse(text).unwrap_err().to_string();
        assert!(shown.contains("unknown field `secret`"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn a_secret_pasted_as_a_variable_name_is_refused_naming_the_route_and_field() {
        let text = r#"{"routes": {"p": {"kind": "webhook", "url": "http://127.0.0.1/h", "secret_env": "whsec_hunter2=="}}}"#;
        let shown = RoutesFile::parse(text).unwrap_err().to_string();
        assert!(shown.contains("route p: secret_env"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn every_route_kind_parses() {
        let text = r#"{"routes": {
            "w": {"kind": "webhook", "url": "http://127.0.0.1/h", "secret_env": "S", "allow_hosts": ["127.0.0.1"]},
            "t": {"kind": "trigger", "airflow": "http://127.0.0.1:8080", "token_env": "T"},
            "e": {"kind": "email", "smtp": "smtp://127.0.0.1:25"},
            "f": {"kind": "sftp", "host": "127.0.0.1", "user": "u", "key": "k", "known_hosts": "kh", "dir": "/in"},
            "a": {"kind": "alertmanager", "url": "http://127.0.0.1:9093"},
            "p": {"kind": "pagerduty", "routing_key_env": "R"},
            "s": {"kind": "slack", "url_env": "U"},
            "g": {"kind": "pushgateway", "url": "http://127.0.0.1:9091"},
            "d": {"kind": "statsd", "host": "127.0.0.1", "port": 8125}
        }}"#;
        assert_eq!(RoutesFile::parse(text).unwrap().routes.len(), 9);
    }

    #[test]
    fn a_configuration_read_alone_names_the_field_and_quotes_no_value() {
        let pasted =
            serde_json::json!({"url": "http://127.0.0.1/h", "secret_env": "whsec_hunter2=="});
        let shown = config_from_json::<replaysafe_webhook::WebhookConfig>("WebhookClient", pasted)
            .unwrap_err()
            .to_string();
        assert!(shown.contains("WebhookClient: secret_env"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let misplaced =
            serde_json::json!({"url": "http://127.0.0.1/h", "allow_hosts": "whsec_hunter2=="});
        let shown =
            config_from_json::<replaysafe_webhook::WebhookConfig>("WebhookClient", misplaced)
                .unwrap_err()
                .to_string();
        assert_eq!(shown, "WebhookClient: a value has the wrong type");
    }

    #[test]
    fn no_routes_is_an_error() {
        let shown = RoutesFile::parse(r#"{"routes": {}}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(shown, "no routes");
    }
}
