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
        /// `FILE: ` (empty when parsed from text), then `line L, column C: ` when the file
        /// is not valid JSON.
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
    /// [`RoutesError::Read`], or [`RoutesError::Invalid`]: the line and column of a JSON
    /// syntax error; otherwise the route and the path of the field at fault
    /// (`route partner: flow.breaker.failures: …`), never quoting a value.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, RoutesError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RoutesError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse_at(&text, Some(path))
    }

    /// Parses and checks a routes file's text: each route's configuration, and its `flow`
    /// with the values [`replaysafe_outbox::FlowControl::check`] refuses.
    ///
    /// # Errors
    /// [`RoutesError::Invalid`], naming the route and the field and never quoting a value.
    pub fn parse(text: &str) -> Result<Self, RoutesError> {
        Self::parse_at(text, None)
    }

    fn parse_at(text: &str, path: Option<&Path>) -> Result<Self, RoutesError> {
        let file = path
            .map(|path| format!("{}: ", path.display()))
            .unwrap_or_default();
        let invalid = |problem: String| RoutesError::Invalid {
            at: file.clone(),
            problem,
        };
        // Only JSON's syntax has a line and column to give; what is wrong with a route is
        // told by the route's name and the field's path in it.
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| RoutesError::Invalid {
                at: match path {
                    Some(path) => format!(
                        "{}: line {}, column {}: ",
                        path.display(),
                        e.line(),
                        e.column()
                    ),
                    None => format!("line {}, column {}: ", e.line(), e.column()),
                },
                problem: classify(&e),
            })?;
        let serde_json::Value::Object(mut top) = value else {
            return Err(invalid(
                "expected an object with `routes`, such as {\"routes\": {\"partner\": {…}}}"
                    .to_owned(),
            ));
        };
        if let Some(other) = top.keys().find(|field| *field != "routes") {
            return Err(invalid(format!(
                "unknown field `{other}`, expected `routes`"
            )));
        }
        let routes = match top.remove("routes") {
            Some(serde_json::Value::Object(routes)) => routes,
            Some(_) => {
                return Err(invalid(
                    "routes: expected an object mapping each route's name to its configuration"
                        .to_owned(),
                ));
            }
            None => return Err(invalid("missing field `routes`".to_owned())),
        };
        if routes.is_empty() {
            return Err(invalid("no routes".to_owned()));
        }
        let mut read = RoutesFile {
            routes: BTreeMap::new(),
            flows: BTreeMap::new(),
        };
        for (name, mut config) in routes {
            if let Err(error) = replaysafe_outbox::check_route_name(&name) {
                let reason = match error {
                    replaysafe_outbox::OutboxError::Invalid { reason, .. } => reason,
                    other => other.to_string(),
                };
                // A name is the file's key, not a value: shown escaped, and cut.
                let shown: String = format!("{name:?}").chars().take(60).collect();
                return Err(invalid(format!("route name {shown}: {reason}")));
            }
            let place = format!("route {name}");
            check_env_fields(&place, &config).map_err(|e| match e {
                RoutesError::Invalid { problem, .. } => invalid(problem),
                other => other,
            })?;
            // A route's `flow` is the worker's, not the client's: taken out before the
            // client's configuration (closed to unknown fields) is read.
            let flow = config.as_object_mut().and_then(|c| c.remove("flow"));
            let route =
                read_route(config).map_err(|problem| invalid(format!("{place}: {problem}")))?;
            if let Some(flow) = flow {
                let flow =
                    read_flow(flow).map_err(|problem| invalid(format!("{place}: {problem}")))?;
                read.flows.insert(name.clone(), flow);
            }
            read.routes.insert(name, route);
        }
        Ok(read)
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

/// Reads one route's client configuration, the type chosen by its `kind` first, so that
/// an error names the field at fault. A missing or unknown `kind` is told by the routes'
/// own reading, which lists the kinds.
fn read_route(mut config: serde_json::Value) -> Result<RouteConfig, String> {
    if !config.is_object() {
        return Err("expected an object with the route's `kind` and its client's fields".into());
    }
    if config.get("kind").is_some_and(|kind| !kind.is_string()) {
        return Err("kind: expected a string naming the client, such as \"webhook\"".into());
    }
    macro_rules! by_kind {
        ($($kind:literal => $variant:ident),* $(,)?) => {
            match config.get("kind").and_then(serde_json::Value::as_str) {
                $(Some($kind) => {
                    if let Some(fields) = config.as_object_mut() {
                        fields.remove("kind");
                    }
                    read_config("", config).map(RouteConfig::$variant)
                })*
                _ => serde_json::from_value(config).map_err(|e| classify(&e)),
            }
        };
    }
    by_kind!(
        "webhook" => Webhook,
        "trigger" => Trigger,
        "email" => Email,
        "sftp" => Sftp,
        "alertmanager" => Alertmanager,
        "pagerduty" => Pagerduty,
        "slack" => Slack,
        "pushgateway" => Pushgateway,
        "statsd" => Statsd,
    )
}

/// Reads a route's `flow` and checks its values, naming the field (`flow.…`) at fault.
fn read_flow(flow: serde_json::Value) -> Result<replaysafe_outbox::FlowControl, String> {
    if !flow.is_object() {
        return Err(
            "flow: expected an object such as {\"rate\": \"50/s\", \"concurrency\": 4}".into(),
        );
    }
    let flow: replaysafe_outbox::FlowControl = read_config("flow", flow)?;
    flow.check().map_err(|error| match error {
        replaysafe_outbox::OutboxError::Invalid { field, reason } => format!("{field}: {reason}"),
        other => other.to_string(),
    })?;
    Ok(flow)
}

/// Reads `T` from `value`, telling what is wrong as the path of the field at fault below
/// `prefix` (such as `allow_hosts` or `flow.breaker.failures`), then what [`classify`]
/// says of it.
fn read_config<T: serde::de::DeserializeOwned>(
    prefix: &str,
    value: serde_json::Value,
) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let mut problem = classify(error.inner());
        let mut path: Vec<String> = std::iter::once(prefix.to_owned())
            .chain(error.path().iter().map(|segment| segment.to_string()))
            .filter(|segment| !segment.is_empty())
            .collect();
        // A field's own message names it (`rate: expected N/s …`), which the path says
        // already; an unknown field's message names the field, so the path ends with the
        // object that does not know it.
        if let Some(own) = path
            .last()
            .and_then(|last| problem.strip_prefix(&format!("{last}: ")))
        {
            problem = own.to_owned();
        } else if problem.starts_with("unknown field") {
            path.pop();
        }
        if path.is_empty() {
            return problem;
        }
        let mut shown = String::new();
        for segment in &path {
            // `allow_hosts[1]`, `flow.breaker`.
            if !shown.is_empty() && !segment.starts_with('[') {
                shown.push('.');
            }
            shown.push_str(segment);
        }
        format!("{shown}: {problem}")
    })
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
    read_config("", config).map_err(|problem| RoutesError::Invalid {
        at: format!("{place}: "),
        problem,
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
    // The flow's own messages (a rate, a duration) name their field and quote nothing.
    let own = text.split(" at line").next().unwrap_or_default();
    if own.starts_with("rate:") || own.starts_with("probe_every:") {
        return own.to_owned();
    }
    match error.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            "not valid JSON".to_owned()
        }
        // serde's `invalid type: string "…", expected …`: what was expected is the type's
        // own wording, and comes after the quoted value, so the value is left out.
        _ => match own.rsplit_once(", expected ") {
            Some((found, expected)) if found.starts_with("invalid type") => {
                format!("a value of the wrong type, expected {expected}")
            }
            Some((found, expected)) if found.starts_with("invalid value") => {
                format!("a value out of range, expected {expected}")
            }
            _ => "a value has the wrong type".to_owned(),
        },
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
        assert_eq!(
            bad,
            "route partner: flow.rate: expected N/s, N/m or N/h, such as 50/s"
        );
        let zero = RoutesFile::parse(
            r#"{"routes": {"partner": {"kind": "webhook", "url": "https://p.example/h", "flow": {"concurrency": 0}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(zero, "route partner: flow.concurrency: must be at least 1");
        let failures = RoutesFile::parse(
            r#"{"routes": {"partner": {"kind": "webhook", "url": "https://p.example/h",
                "flow": {"breaker": {"failures": -1, "probe_every": "30s"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            failures,
            "route partner: flow.breaker.failures: a value out of range, expected u32"
        );
        // A value of the wrong type is not quoted.
        let pasted = RoutesFile::parse(
            r#"{"routes": {"partner": {"kind": "webhook", "url": "https://p.example/h", "flow": {"concurrency": "whsec_s3cr3t"}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            pasted,
            "route partner: flow.concurrency: a value of the wrong type, expected usize"
        );
        // A flow on one route does not cost another route's error its route and field.
        let elsewhere = RoutesFile::parse(
            r#"{"routes": {"a": {"kind": "webhook", "url": "https://p.example/h", "flow": {"concurrency": 2}},
                "b": {"kind": "webhook", "url": 5}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            elsewhere,
            "route b: url: a value of the wrong type, expected a string"
        );
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
        assert_eq!(
            shown,
            "WebhookClient: allow_hosts: a value of the wrong type, expected a sequence"
        );
    }

    /// Every kind's configuration is read as its own type, so a value of the wrong type
    /// is told by route and field, and no value is quoted.
    #[test]
    fn a_value_of_the_wrong_type_is_named_by_route_and_field_in_every_kind() {
        let kinds = [
            ("webhook", "url"),
            ("trigger", "airflow"),
            ("email", "smtp"),
            ("sftp", "host"),
            ("alertmanager", "url"),
            ("pagerduty", "routing_key_env"),
            ("slack", "url_env"),
            ("pushgateway", "url"),
            ("statsd", "port"),
        ];
        for (kind, field) in kinds {
            let text = format!(
                r#"{{"routes": {{"r": {{"kind": "{kind}", "{field}": ["whsec_hunter2"]}}}}}}"#
            );
            let shown = RoutesFile::parse(&text).unwrap_err().to_string();
            assert!(
                shown.starts_with(&format!("route r: {field}: a value of the wrong type")),
                "{kind}: {shown}"
            );
            assert!(!shown.contains("hunter2"), "{kind}: {shown}");
        }
        let shown = RoutesFile::parse(
            r#"{"routes": {"r": {"kind": "webhook", "url": "http://127.0.0.1/h", "allow_hosts": ["127.0.0.1", 5]}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            shown,
            "route r: allow_hosts[1]: a value of the wrong type, expected a string"
        );
        let shown = RoutesFile::parse(
            r#"{"routes": {"ok": {"kind": "statsd", "host": "127.0.0.1"}, "bad\nname": {"kind": "statsd", "host": "127.0.0.1"}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            shown.starts_with(r#"route name "bad\nname": a route name is 1 to 100 characters"#),
            "{shown}"
        );
        let shown = RoutesFile::parse(r#"{"routes": {"r": {"kind": 5}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            shown.starts_with("route r: kind: expected a string"),
            "{shown}"
        );
        // An unknown kind is told with the kinds there are.
        let shown = RoutesFile::parse(r#"{"routes": {"r": {"kind": "pigeon"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            shown.starts_with("route r: unknown variant `pigeon`, expected one of `webhook`"),
            "{shown}"
        );
        let shown = RoutesFile::parse(r#"{"routes": []}"#)
            .unwrap_err()
            .to_string();
        assert!(shown.starts_with("routes: expected an object"), "{shown}");
    }

    #[test]
    fn no_routes_is_an_error() {
        let shown = RoutesFile::parse(r#"{"routes": {}}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(shown, "no routes");
    }
}
