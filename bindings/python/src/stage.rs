//! Staging in the outbox from Python (`replaysafe.outbox.stage`): the effects to stage, one
//! class for each kind of route; the route a row is staged for, from the worker's routes
//! file or from a client object (`client=`); and the staging statement's parameters,
//! computed by `replaysafe_outbox::stage_params`, so that the gate's verdict, the key and
//! the row are the core's and never the caller's.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use replaysafe::routes::RouteConfig;
use replaysafe_core::{EffectClient, GuardLayer, ReplayContext};
use replaysafe_outbox::{Route, StageOptions, StageParam};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{
    AlertEffect, AlertFields, ConfigError, Context, Error, MetricEffects, MetricFields, chain,
    config_error, given_or_env, json_value, open_journal,
};

/// A route of any kind, built as the worker builds it from its routes file.
#[derive(Clone)]
pub(crate) enum AnyRoute {
    Webhook(Route<replaysafe_webhook::WebhookClient>),
    Trigger(Route<replaysafe_webhook::TriggerClient>),
    Email(Route<replaysafe_email::EmailClient>),
    Sftp(Route<replaysafe_sftp::SftpClient>),
    Alertmanager(Route<replaysafe_alert::AlertmanagerClient>),
    PagerDuty(Route<replaysafe_alert::PagerDutyClient>),
    Slack(Route<replaysafe_alert::SlackClient>),
    Pushgateway(Route<replaysafe_metrics::PushgatewayClient>),
    Statsd(Route<replaysafe_metrics::StatsdClient>),
}

impl AnyRoute {
    /// The route `name` of the client `config` describes, journaling through `layer`.
    /// Errors start with `place` and name the field at fault.
    fn build(
        place: &str,
        name: &str,
        config: &RouteConfig,
        layer: &GuardLayer,
    ) -> PyResult<AnyRoute> {
        macro_rules! route {
            ($variant:ident, $config:expr) => {{
                let guard = $config
                    .build(layer.clone())
                    .map_err(|e| config_error(place, e.field(), &e))?;
                AnyRoute::$variant(
                    Route::new(name, guard).map_err(|e| {
                        ConfigError::new_err(format!("{place}: route: {}", chain(&e)))
                    })?,
                )
            }};
        }
        Ok(match config {
            RouteConfig::Webhook(config) => route!(Webhook, config),
            RouteConfig::Trigger(config) => route!(Trigger, config),
            RouteConfig::Email(config) => route!(Email, config),
            RouteConfig::Sftp(config) => route!(Sftp, config),
            RouteConfig::Alertmanager(config) => route!(Alertmanager, config),
            RouteConfig::Pagerduty(config) => route!(PagerDuty, config),
            RouteConfig::Slack(config) => route!(Slack, config),
            RouteConfig::Pushgateway(config) => route!(Pushgateway, config),
            RouteConfig::Statsd(config) => route!(Statsd, config),
            _ => {
                return Err(ConfigError::new_err(format!(
                    "{place}: route {name}: a kind of route this version of the Python API cannot stage for"
                )));
            }
        })
    }

    /// What the route is, and the effect class that stages on it.
    fn kind(&self) -> (&'static str, &'static str) {
        match self {
            AnyRoute::Webhook(_) => ("a webhook route", "Webhook"),
            AnyRoute::Trigger(_) => ("a trigger route", "Trigger"),
            AnyRoute::Email(_) => ("an email route", "Email"),
            AnyRoute::Sftp(_) => ("an SFTP route", "FileDrop"),
            AnyRoute::Alertmanager(_) => ("an Alertmanager route", "Alert"),
            AnyRoute::PagerDuty(_) => ("a PagerDuty route", "Alert"),
            AnyRoute::Slack(_) => ("a Slack route", "Alert"),
            AnyRoute::Pushgateway(_) => ("a Pushgateway route", "Metrics"),
            AnyRoute::Statsd(_) => ("a StatsD route", "Metrics"),
        }
    }
}

/// A client object's configuration and journal, so that `outbox.stage(client=…)` stages
/// for the route that client would be. Each route name is built once.
pub(crate) struct Routable {
    /// The client's class, for messages.
    client: &'static str,
    config: RouteConfig,
    layer: GuardLayer,
    routes: Mutex<HashMap<String, AnyRoute>>,
}

impl Routable {
    pub(crate) fn new(client: &'static str, config: RouteConfig, layer: GuardLayer) -> Self {
        Routable {
            client,
            config,
            layer,
            routes: Mutex::default(),
        }
    }

    /// This client as the outbox route `name`.
    fn route(&self, name: &str) -> PyResult<AnyRoute> {
        let mut routes = self
            .routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(route) = routes.get(name) {
            return Ok(route.clone());
        }
        let route = AnyRoute::build(self.client, name, &self.config, &self.layer)?;
        routes.insert(name.to_owned(), route.clone());
        Ok(route)
    }
}

/// The route a client object given as `client=` would be.
fn client_route(client: &Bound<'_, PyAny>, name: &str) -> PyResult<AnyRoute> {
    macro_rules! routable {
        ($($class:ty),*) => {
            $(if let Ok(client) = client.cast::<$class>() {
                return client.get().routable().route(name);
            })*
        };
    }
    routable!(
        crate::PyWebhookClient,
        crate::PyTriggerClient,
        crate::PyEmailClient,
        crate::PySftpClient,
        crate::PyAlertClient,
        crate::PyMetricClient
    );
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "client: a replaysafe client (WebhookClient, EmailClient, TriggerClient, SftpClient, AlertClient or MetricClient), not {}",
        client.get_type().name()?
    )))
}

/// Routes built from routes files, by file, route name and journal, with the file's text
/// they were built from.
type RoutesByFile = HashMap<(PathBuf, String, Option<PathBuf>), (String, AnyRoute)>;

/// The route `name` of the routes file `path` (or REPLAYSAFE_OUTBOX_ROUTES), journaling
/// to `journal`: the client the worker will deliver with, so staging derives its key. The
/// file is read at each staging and the route built again when its text has changed: a
/// long-lived process that kept an edited route's old client would stage rows under keys
/// the worker, reading the new file, does not derive, and dead-letters.
fn route_from_file(
    name: &str,
    path: Option<PathBuf>,
    journal: Option<PathBuf>,
) -> PyResult<AnyRoute> {
    static ROUTES: OnceLock<Mutex<RoutesByFile>> = OnceLock::new();
    let path = given_or_env(
        path,
        "REPLAYSAFE_OUTBOX_ROUTES",
        "outbox.stage: routes: none given; pass client=, or routes=PATH, or set REPLAYSAFE_OUTBOX_ROUTES (the worker's routes file)",
    )?;
    let mut routes = ROUTES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // The journal is part of the key: a suppression is journaled where the caller said.
    let at = (path.clone(), name.to_owned(), journal.clone());
    let text = std::fs::read_to_string(&path).map_err(|e| {
        ConfigError::new_err(format!(
            "outbox.stage: routes: reading {}: {e}",
            path.display()
        ))
    })?;
    if let Some((seen, route)) = routes.get(&at)
        && *seen == text
    {
        return Ok(route.clone());
    }
    // The text read above, parsed as `RoutesFile::read` parses a file's, its errors after
    // the file's name as there.
    let file = replaysafe::routes::RoutesFile::parse(&text).map_err(|e| {
        ConfigError::new_err(format!(
            "outbox.stage: routes: {}: {}",
            path.display(),
            chain(&e)
        ))
    })?;
    let Some(config) = file.routes.get(name) else {
        return Err(ConfigError::new_err(format!(
            "outbox.stage: route: {name} is not in {}",
            path.display()
        )));
    };
    let layer = GuardLayer::new(open_journal(journal)?);
    let route = AnyRoute::build(&format!("outbox.stage: route {name}"), name, config, &layer)?;
    routes.insert(at, (text, route.clone()));
    Ok(route)
}

/// A webhook to stage in the outbox: its event type and JSON body.
#[pyclass(frozen, module = "replaysafe", name = "Webhook")]
pub(crate) struct PyWebhook {
    #[pyo3(get)]
    event_type: String,
    body: serde_json::Value,
}

#[pymethods]
impl PyWebhook {
    #[new]
    #[pyo3(signature = (*, event_type, data))]
    fn new(py: Python<'_>, event_type: String, data: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyWebhook {
            event_type,
            body: json_value(py, "data", data)?,
        })
    }

    fn __repr__(&self) -> String {
        format!("Webhook(event_type={:?}, ..)", self.event_type)
    }
}

/// An email to stage, as `EmailClient.send` takes it: one row per recipient.
#[pyclass(frozen, module = "replaysafe", name = "Email")]
pub(crate) struct PyEmail {
    #[pyo3(get)]
    message_type: String,
    email: replaysafe_email::Email,
}

#[pymethods]
impl PyEmail {
    #[new]
    #[pyo3(signature = (*, message_type, sender, to, subject, text, html = None))]
    fn new(
        message_type: String,
        sender: &str,
        to: Vec<String>,
        subject: String,
        text: String,
        html: Option<String>,
    ) -> PyResult<Self> {
        let email = crate::email_of(
            "Email",
            message_type.clone(),
            sender,
            &to,
            subject,
            text,
            html,
        )?;
        // Checked now, as a send checks it before anything is sent.
        email
            .copies()
            .map_err(|e| config_error("Email", e.field(), &e))?;
        Ok(PyEmail {
            message_type,
            email,
        })
    }

    fn __repr__(&self) -> String {
        format!("Email(message_type={:?}, ..)", self.message_type)
    }
}

/// A downstream trigger to stage, as `TriggerClient.send` takes it.
#[pyclass(frozen, module = "replaysafe", name = "Trigger")]
pub(crate) struct PyTrigger {
    #[pyo3(get)]
    name: String,
    trigger: replaysafe_webhook::Trigger,
}

#[pymethods]
impl PyTrigger {
    #[new]
    #[pyo3(signature = (*, name, conf = None))]
    fn new(py: Python<'_>, name: String, conf: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let trigger = crate::trigger_of(py, &name, conf)?;
        Ok(PyTrigger { name, trigger })
    }

    fn __repr__(&self) -> String {
        format!("Trigger(name={:?}, ..)", self.name)
    }
}

/// An alert to stage, as `AlertClient.send` takes it: an Alertmanager or PagerDuty alert,
/// or a Slack message, as the route is.
#[pyclass(frozen, module = "replaysafe", name = "Alert")]
pub(crate) struct PyAlert {
    fields: AlertFields,
}

#[pymethods]
impl PyAlert {
    #[new]
    #[pyo3(signature = (*, alertname, summary = None, severity = "error", labels = None, details = None, resolve = false, text = None))]
    fn new(
        alertname: String,
        summary: Option<String>,
        severity: &str,
        labels: Option<BTreeMap<String, String>>,
        details: Option<BTreeMap<String, String>>,
        resolve: bool,
        text: Option<String>,
    ) -> PyResult<Self> {
        let fields = AlertFields::new(alertname, summary, severity, labels, details, resolve, text);
        // The severity is checked now; what a Slack route needs, when staged on one.
        fields.effect("Alert", false)?;
        Ok(PyAlert { fields })
    }

    #[getter]
    fn alertname(&self) -> &str {
        &self.fields.alertname
    }

    fn __repr__(&self) -> String {
        format!("Alert(alertname={:?}, ..)", self.fields.alertname)
    }
}

/// Metrics to stage, as `MetricClient.send` takes them: one Pushgateway group (one row),
/// or one StatsD line (and row) per metric, as the route is.
#[pyclass(frozen, module = "replaysafe", name = "Metrics")]
pub(crate) struct PyMetrics {
    fields: MetricFields,
}

#[pymethods]
impl PyMetrics {
    #[new]
    #[pyo3(signature = (*, metrics, r#type = "gauge", job = None, grouping_labels = None))]
    fn new(
        metrics: BTreeMap<String, f64>,
        r#type: &str,
        job: Option<String>,
        grouping_labels: Option<BTreeMap<String, String>>,
    ) -> PyResult<Self> {
        let fields = MetricFields::new(metrics, r#type, job, grouping_labels);
        if fields.metrics.is_empty() {
            return Err(ConfigError::new_err("Metrics: metrics: none given"));
        }
        // The type is checked now; a Pushgateway's job and a StatsD counter's whole
        // numbers when staged on such a route.
        fields.counter("Metrics")?;
        Ok(PyMetrics { fields })
    }

    fn __repr__(&self) -> String {
        format!("Metrics({} metric(s), ..)", self.fields.metrics.len())
    }
}

/// A file drop to stage, as `SftpClient.send` takes it: `data` travels in the row; `file`
/// is staged as its absolute path (`FileDrop::from_file` holds it so) and read when the
/// row is delivered (a file changed since staging fails the delivery, and nothing appears
/// under the final name).
#[pyclass(frozen, module = "replaysafe", name = "FileDrop")]
pub(crate) struct PyFileDrop {
    #[pyo3(get)]
    name: String,
    drop: replaysafe_sftp::FileDrop,
}

#[pymethods]
impl PyFileDrop {
    #[new]
    #[pyo3(signature = (*, name, data = None, file = None, message_type = "file_drop"))]
    fn new(
        name: String,
        data: Option<Vec<u8>>,
        file: Option<PathBuf>,
        message_type: &str,
    ) -> PyResult<Self> {
        let drop = crate::file_drop("FileDrop", &name, data, file, message_type)?;
        Ok(PyFileDrop { name, drop })
    }

    fn __repr__(&self) -> String {
        format!("FileDrop(name={:?}, ..)", self.name)
    }
}

/// The effect given to `outbox.stage`, by class.
enum Effect<'a> {
    Webhook(&'a PyWebhook),
    Email(&'a PyEmail),
    Trigger(&'a PyTrigger),
    Alert(&'a PyAlert),
    Metrics(&'a PyMetrics),
    FileDrop(&'a PyFileDrop),
}

impl<'a> Effect<'a> {
    fn of(effect: &'a Bound<'_, PyAny>) -> PyResult<Effect<'a>> {
        macro_rules! by_class {
            ($($variant:ident => $class:ty),*) => {
                $(if let Ok(effect) = effect.cast::<$class>() {
                    return Ok(Effect::$variant(effect.get()));
                })*
            };
        }
        by_class!(
            Webhook => PyWebhook,
            Email => PyEmail,
            Trigger => PyTrigger,
            Alert => PyAlert,
            Metrics => PyMetrics,
            FileDrop => PyFileDrop
        );
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "effect: a replaysafe.Webhook, Email, Trigger, Alert, Metrics or FileDrop, not {}",
            effect.get_type().name()?
        )))
    }

    /// The class, for messages.
    fn class(&self) -> &'static str {
        match self {
            Effect::Webhook(_) => "Webhook",
            Effect::Email(_) => "Email",
            Effect::Trigger(_) => "Trigger",
            Effect::Alert(_) => "Alert",
            Effect::Metrics(_) => "Metrics",
            Effect::FileDrop(_) => "FileDrop",
        }
    }
}

/// One row's staging statement parameters, its key, its status and its reasons.
type StagedParams<'py> = (Vec<Bound<'py, PyAny>>, String, &'static str, Vec<String>);

/// The rows of `effects` on `route`, each row's parameters computed in turn (a suppressed
/// row journaled then). Several effects are all described first, so that an invalid one
/// after the first stages and journals nothing; a lone effect is described once, by
/// `stage_params`, before anything is journaled.
fn rows<'py, C>(
    py: Python<'py>,
    cx: &ReplayContext,
    route: &Route<C>,
    effects: &[C::Effect],
    options: &StageOptions,
) -> PyResult<Vec<StagedParams<'py>>>
where
    C: EffectClient + 'static,
    C::Effect: Serialize + DeserializeOwned,
    C::Error: std::error::Error + 'static,
{
    if effects.len() > 1 {
        for effect in effects {
            route.guard().preview(cx, effect).map_err(|e| {
                let cause = match &e {
                    replaysafe_core::SendError::Invalid(inner) => chain(inner),
                    other => chain(other),
                };
                ConfigError::new_err(format!(
                    "effect: invalid effect for route {}: {cause}",
                    route.name()
                ))
            })?;
        }
    }
    effects
        .iter()
        .map(|effect| {
            let (params, staged) =
                replaysafe_outbox::stage_params(cx, route, effect, options.clone()).map_err(
                    |e| match e {
                        replaysafe_outbox::OutboxError::InvalidEffect { .. } => {
                            ConfigError::new_err(format!("effect: {}", chain(&e)))
                        }
                        replaysafe_outbox::OutboxError::Invalid { .. } => {
                            ConfigError::new_err(chain(&e))
                        }
                        other => Error::new_err(chain(&other)),
                    },
                )?;
            let values = params
                .into_iter()
                .map(|param| match param {
                    StageParam::Bool(b) => pyo3::types::PyBool::new(py, b).to_owned().into_any(),
                    StageParam::Integer(i) => pyo3::types::PyInt::new(py, i).into_any(),
                    StageParam::Text(t) => pyo3::types::PyString::new(py, &t).into_any(),
                    _ => py.None().into_bound(py),
                })
                .collect();
            Ok((values, staged.key, staged.status.as_str(), staged.reasons))
        })
        .collect()
}

/// The gate at staging, for `outbox.stage`: per row of `effect` (one, or one per recipient
/// of an email and per metric on a StatsD route), the staging statement's 31 parameters
/// (None, bool, int or str, in order) and what staging decided (key, status, reasons).
/// The route is `client` as `route`, or `route` of the routes file; the effect's class
/// must be the one for the route's kind.
#[pyfunction]
#[pyo3(signature = (cx, route, client, effect, source_version = 0, routes = None, journal = None, ordering_key = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn outbox_stage_params<'py>(
    py: Python<'py>,
    cx: &Context,
    route: &str,
    client: Option<&Bound<'py, PyAny>>,
    effect: &Bound<'py, PyAny>,
    source_version: i64,
    routes: Option<PathBuf>,
    journal: Option<PathBuf>,
    ordering_key: Option<String>,
) -> PyResult<Vec<StagedParams<'py>>> {
    let effect = Effect::of(effect)?;
    let name = route;
    let route = match client {
        Some(client) => client_route(client, name)?,
        None => route_from_file(name, routes, journal)?,
    };
    let mut options = StageOptions::new().version(replaysafe_outbox::SourceVersion(source_version));
    if let Some(key) = ordering_key {
        options = options.ordering_key(key);
    }
    let cx = &cx.inner;
    let place = "outbox.stage: effect";
    match (&route, &effect) {
        (AnyRoute::Webhook(route), Effect::Webhook(webhook)) => {
            let webhook =
                replaysafe_webhook::Webhook::json(&webhook.event_type, webhook.body.clone());
            rows(py, cx, route, &[webhook], &options)
        }
        (AnyRoute::Email(route), Effect::Email(email)) => {
            let copies = email
                .email
                .copies()
                .map_err(|e| config_error(place, e.field(), &e))?;
            rows(py, cx, route, &copies, &options)
        }
        (AnyRoute::Trigger(route), Effect::Trigger(trigger)) => rows(
            py,
            cx,
            route,
            std::slice::from_ref(&trigger.trigger),
            &options,
        ),
        (AnyRoute::Sftp(route), Effect::FileDrop(drop)) => {
            rows(py, cx, route, std::slice::from_ref(&drop.drop), &options)
        }
        (
            AnyRoute::Alertmanager(_) | AnyRoute::PagerDuty(_) | AnyRoute::Slack(_),
            Effect::Alert(alert),
        ) => {
            match (
                &route,
                alert
                    .fields
                    .effect(place, matches!(route, AnyRoute::Slack(_)))?,
            ) {
                (AnyRoute::Alertmanager(route), AlertEffect::Alert(alert)) => {
                    rows(py, cx, route, &[alert], &options)
                }
                (AnyRoute::PagerDuty(route), AlertEffect::Alert(alert)) => {
                    rows(py, cx, route, &[alert], &options)
                }
                (AnyRoute::Slack(route), AlertEffect::Slack(message)) => {
                    rows(py, cx, route, &[message], &options)
                }
                _ => unreachable!("the effect is made for the route"),
            }
        }
        (AnyRoute::Pushgateway(_) | AnyRoute::Statsd(_), Effect::Metrics(metrics)) => {
            let pushgateway = matches!(route, AnyRoute::Pushgateway(_));
            match (&route, metrics.fields.effects(place, pushgateway)?) {
                (AnyRoute::Pushgateway(route), MetricEffects::Push(push)) => {
                    rows(py, cx, route, &[push], &options)
                }
                (AnyRoute::Statsd(route), MetricEffects::Lines(lines)) => {
                    rows(py, cx, route, &lines, &options)
                }
                _ => unreachable!("the effects are made for the route"),
            }
        }
        (route, effect) => {
            let (kind, class) = route.kind();
            Err(ConfigError::new_err(format!(
                "{place}: route {name} is {kind}: stage a replaysafe.{class} on it, not a {}",
                effect.class()
            )))
        }
    }
}
