//! `replaysafe._native`: the Python API of replaysafe over the Rust crates, so that a
//! Python task resolves its context, asks the gate, derives keys and journals exactly as
//! the Rust library and the `replaysafe` command do. Nothing here decides on its own: every
//! verdict, key and journal record is the core's.
//!
//! The Python package `replaysafe` (bindings/python/python/replaysafe) re-exports these
//! names; its `.pyi` stubs are the documented signatures.

#![forbid(unsafe_code)]

mod gate;
mod stage;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use chrono::{DateTime, Utc};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use replaysafe::routes::RouteConfig;
use replaysafe_core::{
    EffectKind, Guard, GuardLayer, Journal, Outcome as CoreOutcome, ReplayContext, SendError,
};
use replaysafe_webhook::{Webhook, WebhookClient, WebhookConfig};
use stage::Routable;

create_exception!(
    replaysafe,
    Error,
    PyException,
    "Every error replaysafe raises. Messages name the field or variable at fault, never a secret."
);
create_exception!(
    replaysafe,
    ContextError,
    Error,
    "The run's context cannot be resolved: a malformed REPLAYSAFE_* or AIRFLOW_CTX_* value."
);
create_exception!(
    replaysafe,
    ConfigError,
    Error,
    "A client's configuration or an effect is invalid; nothing was sent."
);
create_exception!(
    replaysafe,
    DeliveryError,
    Error,
    "A delivery failed (only with raise_on_failure=True), or its outcome could not be journaled."
);

/// The Tokio runtime every client of this process shares, created on first use (never at
/// import) and created again in a child process after `fork`: a runtime's threads do not
/// survive a fork, and Airflow's scheduler, executor and task supervisor each fork after
/// importing `airflow_local_settings`. The parent's runtime is left to the parent.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(PoisonError::into_inner);
    match *slot {
        Some((owner, runtime)) if owner == pid => runtime,
        _ => {
            let runtime: &'static _ = Box::leak(Box::new(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("replaysafe")
                    .enable_all()
                    .build()
                    .expect("the replaysafe runtime starts"),
            ));
            *slot = Some((pid, runtime));
            runtime
        }
    }
}

/// An awaitable of `future` on [`runtime`]. The awaitables' runtime is registered once
/// per process image, on the first `send_async`; a process forked after that gets an
/// error naming the way out instead of a runtime whose threads are gone.
fn later<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: std::future::Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    static REGISTERED_BY: OnceLock<u32> = OnceLock::new();
    let pid = std::process::id();
    let registered_by = *REGISTERED_BY.get_or_init(|| {
        let _ = pyo3_async_runtimes::tokio::init_with_runtime(runtime());
        pid
    });
    if registered_by != pid {
        return Err(Error::new_err(
            "send_async: this process was forked from one that had already used send_async, \
             and the runtime behind its awaitables did not survive the fork; use send here, or \
             make the first send_async after the fork",
        ));
    }
    pyo3_async_runtimes::tokio::future_into_py(py, future)
}

/// An error and every cause, once each: `a: b: c`.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    replaysafe_core::error_chain(error)
}

/// A run's context: who is running, for which data window, and whether it is a replay.
#[pyclass(frozen, module = "replaysafe", name = "Context")]
struct Context {
    inner: ReplayContext,
}

#[pymethods]
impl Context {
    /// The pipeline (Airflow's DAG id).
    #[getter]
    fn pipeline(&self) -> &str {
        self.inner.pipeline()
    }

    /// The run id.
    #[getter]
    fn run_id(&self) -> String {
        self.inner.run_id().to_string()
    }

    /// The run kind: scheduled, manual, retry, backfill, replay, rebuild or unknown.
    #[getter]
    fn run_kind(&self) -> &'static str {
        self.inner.run_kind().as_str()
    }

    /// Whether the run is a replay of any kind (what the gate suppresses by default).
    #[getter]
    fn is_replay(&self) -> bool {
        self.inner.is_replay()
    }

    /// Whether a run that caused this one (an asset event's producer, a triggering run)
    /// was a replay: every effect of this run is suppressed as `upstream_replay`.
    #[getter]
    fn is_upstream_replay(&self) -> bool {
        self.inner.is_upstream_replay()
    }

    /// The backfill id, when the run belongs to one.
    #[getter]
    fn backfill_id(&self) -> Option<&str> {
        self.inner.backfill_id()
    }

    /// The half-open data window as two aware datetimes, or None when no source gave one
    /// (every effect is then suppressed with `unknown_window`).
    #[getter]
    fn window(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        self.inner
            .has_window()
            .then(|| (self.inner.window().start(), self.inner.window().end()))
    }

    /// The gate's verdict for an effect of `kind` (email, webhook, file_drop, metric,
    /// alert, trigger, or a custom kind) to `target`.
    #[pyo3(signature = (kind, target = ""))]
    fn decide(&self, kind: &str, target: &str) -> PyResult<Decision> {
        let kind: EffectKind = kind
            .parse()
            .map_err(|e: replaysafe_core::Error| ConfigError::new_err(format!("kind: {e}")))?;
        let decision = self.inner.decide(&kind, target);
        Ok(Decision {
            delivers: decision.delivers(),
            reasons: decision
                .reasons()
                .iter()
                .map(|r| r.as_str().to_owned())
                .collect(),
        })
    }

    fn __repr__(&self) -> String {
        let window = match self.window() {
            Some((start, end)) => format!(
                "{} → {}",
                replaysafe_core::rfc3339(start),
                replaysafe_core::rfc3339(end)
            ),
            None => "unknown".to_owned(),
        };
        format!(
            "Context(pipeline={:?}, run_id={:?}, run_kind={:?}, window={window})",
            self.inner.pipeline(),
            self.run_id(),
            self.run_kind()
        )
    }
}

/// The gate's verdict: whether it delivers, and every reason.
#[pyclass(frozen, module = "replaysafe", name = "Decision")]
struct Decision {
    /// Whether the effect would be delivered.
    #[pyo3(get)]
    delivers: bool,
    /// Every reason, in a stable order (current_window, backfill_run, stale_window, …).
    #[pyo3(get)]
    reasons: Vec<String>,
}

#[pymethods]
impl Decision {
    fn __repr__(&self) -> String {
        format!(
            "Decision(delivers={}, reasons={:?})",
            if self.delivers { "True" } else { "False" },
            self.reasons
        )
    }
}

/// What became of one effect: `delivered`, `suppressed` or `failed`, the reasons, the key.
#[pyclass(frozen, module = "replaysafe", name = "Outcome")]
struct Outcome {
    /// `delivered`, `suppressed` or `failed`.
    #[pyo3(get)]
    decision: &'static str,
    /// The gate's reasons.
    #[pyo3(get)]
    reasons: Vec<String>,
    /// The idempotency key (64 hex digits); the receiver got it when delivered. Empty for a
    /// failed delivery: the journal's `failed` record names its key.
    #[pyo3(get)]
    idempotency_key: String,
    /// Attempts made (0 when suppressed).
    #[pyo3(get)]
    attempts: u32,
    /// Why it failed, for a failed delivery; never a secret.
    #[pyo3(get)]
    error: Option<String>,
    /// The effect's target, for a client that makes several effects of one call (an
    /// email's recipient); None otherwise.
    #[pyo3(get)]
    target: Option<String>,
}

#[pymethods]
impl Outcome {
    /// Whether the effect was delivered.
    #[getter]
    fn delivered(&self) -> bool {
        self.decision == "delivered"
    }

    fn __repr__(&self) -> String {
        format!(
            "Outcome(decision={:?}, reasons={:?}, idempotency_key={:?})",
            self.decision, self.reasons, self.idempotency_key
        )
    }
}

fn outcome<R, E: std::error::Error + 'static>(
    result: &Result<CoreOutcome<R>, SendError<E>>,
    target: Option<&str>,
    raise_on_failure: bool,
) -> PyResult<Outcome> {
    let reasons = |reasons: &[replaysafe_core::Reason]| {
        reasons.iter().map(|r| r.as_str().to_owned()).collect()
    };
    let target = target.map(str::to_owned);
    match result {
        Ok(CoreOutcome::Delivered(delivered)) => Ok(Outcome {
            decision: "delivered",
            reasons: reasons(&delivered.reasons),
            idempotency_key: delivered.key.to_string(),
            attempts: delivered.attempts,
            error: None,
            target,
        }),
        Ok(CoreOutcome::Suppressed(suppressed)) => Ok(Outcome {
            decision: "suppressed",
            reasons: reasons(&suppressed.reasons),
            idempotency_key: suppressed.key.to_string(),
            attempts: 0,
            error: None,
            target,
        }),
        Err(SendError::Invalid(e)) => Err(ConfigError::new_err(format!(
            "invalid effect: {}",
            chain(e)
        ))),
        Err(SendError::Failed { attempts, source }) => {
            let error = chain(source);
            if raise_on_failure {
                return Err(DeliveryError::new_err(format!(
                    "delivery failed after {attempts} attempt(s): {error}"
                )));
            }
            Ok(Outcome {
                decision: "failed",
                reasons: Vec::new(),
                idempotency_key: String::new(),
                attempts: *attempts,
                error: Some(error),
                target,
            })
        }
        Err(other) => Err(DeliveryError::new_err(chain(other))),
    }
}

/// A client's configuration from its keyword arguments (None meaning not given) and the
/// guard layer its journal and ledger make.
fn client_parts<T: serde::de::DeserializeOwned>(
    py: Python<'_>,
    client: &str,
    given: &[(&str, Option<Bound<'_, PyAny>>)],
    fields: Option<&Bound<'_, PyDict>>,
    journal: Option<PathBuf>,
    ledger: bool,
) -> PyResult<(T, GuardLayer)> {
    let all = PyDict::new(py);
    for (name, value) in given {
        if let Some(value) = value {
            all.set_item(name, value)?;
        }
    }
    if let Some(fields) = fields {
        for (name, value) in fields.iter() {
            if !value.is_none() {
                all.set_item(name, value)?;
            }
        }
    }
    let config: T = config_from(py, client, &all)?;
    let layer = GuardLayer::new(open_journal(journal)?).with_ledger(ledger);
    Ok((config, layer))
}

/// A configuration error as Python sees it: the client and the field at fault.
fn config_error(
    client: &str,
    field: Option<&str>,
    error: &(dyn std::error::Error + 'static),
) -> PyErr {
    let field = field.map(|f| format!("{f}: ")).unwrap_or_default();
    ConfigError::new_err(format!("{client}: {field}{}", chain(error)))
}

/// The journal a client writes to: `journal=` or REPLAYSAFE_JOURNAL, a JSON Lines file,
/// `sqlite:PATH` or `postgres://…` (password from PGPASSWORD, never shown).
fn open_journal(journal: Option<PathBuf>) -> PyResult<Arc<dyn Journal>> {
    let path = given_or_env(
        journal,
        "REPLAYSAFE_JOURNAL",
        "journal: none given; pass journal=PATH or set REPLAYSAFE_JOURNAL (every decision is journaled)",
    )?;
    replaysafe_outbox::named::open_journal(&path)
        .map_err(|e| ConfigError::new_err(format!("journal: {}", chain(&e))))
}

/// `given`, or else the path the environment variable `variable` holds; neither (or an
/// empty variable) is a `ConfigError` saying `missing`.
fn given_or_env(given: Option<PathBuf>, variable: &str, missing: &str) -> PyResult<PathBuf> {
    match given {
        Some(path) => Ok(path),
        None => match std::env::var_os(variable) {
            Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
            _ => Err(ConfigError::new_err(missing.to_owned())),
        },
    }
}

/// A JSON value from a Python object, through Python's own `json` module.
fn json_value(py: Python<'_>, what: &str, value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let text: String = py
        .import("json")?
        .call_method1("dumps", (value,))
        .map_err(|e| ConfigError::new_err(format!("{what}: not JSON-serializable: {e}")))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| ConfigError::new_err(format!("{what}: {e}")))
}

/// A client configuration from keyword arguments, read as a route of the routes file is
/// read (`replaysafe::routes::config_from_json`): an unknown argument is named, a secret
/// where a variable name belongs is refused naming the argument, and no message quotes a
/// value.
fn config_from<T: serde::de::DeserializeOwned>(
    py: Python<'_>,
    client: &str,
    fields: &Bound<'_, PyDict>,
) -> PyResult<T> {
    let value = json_value(py, client, fields.as_any())?;
    replaysafe::routes::config_from_json(client, value).map_err(|e| {
        ConfigError::new_err(
            e.to_string()
                .replace("unknown field", "unknown keyword argument"),
        )
    })
}

/// Webhooks through the gate: Standard Webhooks signing (`secret_env`), an idempotency
/// key per effect, the SSRF guard (`allow_hosts`), the journal's memory of keys.
#[pyclass(frozen, module = "replaysafe", name = "WebhookClient")]
struct PyWebhookClient {
    guard: Arc<Guard<WebhookClient>>,
    /// What built `guard`, to stage through the same client (`outbox.stage(client=…)`).
    routable: Routable,
}

#[pymethods]
impl PyWebhookClient {
    #[new]
    #[pyo3(signature = (url = None, *, journal = None, ledger = true, **fields))]
    fn new(
        py: Python<'_>,
        url: Option<Bound<'_, PyAny>>,
        journal: Option<PathBuf>,
        ledger: bool,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (config, layer): (WebhookConfig, _) = client_parts(
            py,
            "WebhookClient",
            &[("url", url)],
            fields,
            journal,
            ledger,
        )?;
        let guard = Arc::new(build_webhook(&config, &layer)?);
        Ok(PyWebhookClient {
            guard,
            routable: Routable::new("WebhookClient", RouteConfig::Webhook(config), layer),
        })
    }

    /// Sends one JSON webhook through the gate; returns its Outcome.
    #[pyo3(signature = (cx, *, event_type, data, raise_on_failure = false))]
    fn send(
        &self,
        py: Python<'_>,
        cx: &Context,
        event_type: String,
        data: &Bound<'_, PyAny>,
        raise_on_failure: bool,
    ) -> PyResult<Outcome> {
        let data = json_value(py, "data", data)?;
        let webhook = Webhook::json(&event_type, data);
        send_one(py, &self.guard, cx, &webhook, raise_on_failure)
    }

    /// [`send`](Self::send) as an awaitable, for asyncio code.
    #[pyo3(signature = (cx, *, event_type, data, raise_on_failure = false))]
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        cx: &Context,
        event_type: String,
        data: &Bound<'py, PyAny>,
        raise_on_failure: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let webhook = Webhook::json(&event_type, json_value(py, "data", data)?);
        send_later(py, &self.guard, cx, webhook, raise_on_failure)
    }

    fn __repr__(&self) -> String {
        "WebhookClient(..)".to_owned()
    }
}

fn build_webhook(config: &WebhookConfig, layer: &GuardLayer) -> PyResult<Guard<WebhookClient>> {
    config
        .build(layer.clone())
        .map_err(|e| config_error("WebhookClient", e.field(), &e))
}

/// The email `EmailClient.send` (or `Email`, at `place`) describes.
fn email_of(
    place: &str,
    message_type: String,
    sender: &str,
    to: &[String],
    subject: String,
    text: String,
    html: Option<String>,
) -> PyResult<replaysafe_email::Email> {
    if to.is_empty() {
        return Err(ConfigError::new_err(format!("{place}: to: no recipient")));
    }
    let mut email = replaysafe_email::Email::builder(message_type)
        .from(sender)
        .subject(subject)
        .text(text);
    if let Some(html) = html {
        email = email.html(html);
    }
    for recipient in to {
        email = email.to(recipient.as_str());
    }
    Ok(email.build())
}

/// One Outcome per recipient, or the error of an email that was not sent at all.
fn email_outcomes(
    sent: Result<replaysafe_email::EmailOutcomes, SendError<replaysafe_email::Error>>,
    raise_on_failure: bool,
) -> PyResult<Vec<Outcome>> {
    let outcomes = sent.map_err(|e| match &e {
        SendError::Invalid(invalid) => ConfigError::new_err(format!(
            "EmailClient.send: {}{}",
            invalid
                .field()
                .map(|f| format!("{f}: "))
                .unwrap_or_default(),
            chain(invalid)
        )),
        other => DeliveryError::new_err(chain(other)),
    })?;
    outcomes
        .iter()
        .map(|(target, result)| outcome(result, Some(target), raise_on_failure))
        .collect()
}

/// Email over SMTP through the gate: one effect (and one Outcome) per recipient, a
/// deterministic Message-ID, the journal's memory of keys (an email cannot be recalled).
#[pyclass(frozen, module = "replaysafe", name = "EmailClient")]
struct PyEmailClient {
    guard: Arc<Guard<replaysafe_email::EmailClient>>,
    routable: Routable,
}

#[pymethods]
impl PyEmailClient {
    #[new]
    #[pyo3(signature = (smtp = None, *, journal = None, ledger = true, **fields))]
    fn new(
        py: Python<'_>,
        smtp: Option<Bound<'_, PyAny>>,
        journal: Option<PathBuf>,
        ledger: bool,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (config, layer): (replaysafe_email::EmailConfig, _) = client_parts(
            py,
            "EmailClient",
            &[("smtp", smtp)],
            fields,
            journal,
            ledger,
        )?;
        let guard = config
            .build(layer.clone())
            .map_err(|e| config_error("EmailClient", e.field(), &e))?;
        Ok(PyEmailClient {
            guard: Arc::new(guard),
            routable: Routable::new("EmailClient", RouteConfig::Email(config), layer),
        })
    }

    /// Sends an email through the gate, one effect per recipient; returns one Outcome per
    /// recipient (its `target`), in the order of `to`.
    #[pyo3(signature = (cx, *, message_type, sender, to, subject, text, html = None, raise_on_failure = false))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        cx: &Context,
        message_type: String,
        sender: String,
        to: Vec<String>,
        subject: String,
        text: String,
        html: Option<String>,
        raise_on_failure: bool,
    ) -> PyResult<Vec<Outcome>> {
        use replaysafe_email::EmailGuardExt;
        let email = email_of(
            "EmailClient.send",
            message_type,
            &sender,
            &to,
            subject,
            text,
            html,
        )?;
        let sent = py.detach(|| runtime().block_on(self.guard.send_email(&cx.inner, &email)));
        email_outcomes(sent, raise_on_failure)
    }

    /// [`send`](Self::send) as an awaitable, for asyncio code.
    #[pyo3(signature = (cx, *, message_type, sender, to, subject, text, html = None, raise_on_failure = false))]
    #[allow(clippy::too_many_arguments)]
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        cx: &Context,
        message_type: String,
        sender: String,
        to: Vec<String>,
        subject: String,
        text: String,
        html: Option<String>,
        raise_on_failure: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        use replaysafe_email::EmailGuardExt;
        let email = email_of(
            "EmailClient.send",
            message_type,
            &sender,
            &to,
            subject,
            text,
            html,
        )?;
        let guard = self.guard.clone();
        let cx = cx.inner.clone();
        later(py, async move {
            email_outcomes(guard.send_email(&cx, &email).await, raise_on_failure)
        })
    }

    fn __repr__(&self) -> String {
        "EmailClient(..)".to_owned()
    }
}

/// The client objects `outbox.stage(client=…)` stages through.
macro_rules! routable {
    ($($class:ty),*) => {
        $(impl $class {
            /// What built this client, to stage through it.
            fn routable(&self) -> &Routable {
                &self.routable
            }
        })*
    };
}
routable!(
    PyWebhookClient,
    PyEmailClient,
    PyTriggerClient,
    PySftpClient,
    PyAlertClient,
    PyMetricClient
);

/// One Outcome, or a failed call's error, from a send of one effect.
fn send_one<C: replaysafe_core::EffectClient>(
    py: Python<'_>,
    guard: &Guard<C>,
    cx: &Context,
    effect: &C::Effect,
    raise_on_failure: bool,
) -> PyResult<Outcome>
where
    C::Effect: Sync,
    C::Error: std::error::Error + 'static,
{
    let result = py.detach(|| runtime().block_on(guard.send(&cx.inner, effect)));
    outcome(&result, None, raise_on_failure)
}

/// An awaitable of one effect's Outcome, on the shared runtime (asyncio's loop is not
/// blocked while it delivers).
fn send_later<'py, C>(
    py: Python<'py>,
    guard: &Arc<Guard<C>>,
    cx: &Context,
    effect: C::Effect,
    raise_on_failure: bool,
) -> PyResult<Bound<'py, PyAny>>
where
    C: replaysafe_core::EffectClient + 'static,
    C::Effect: Send + Sync + 'static,
    C::Error: std::error::Error + 'static,
{
    let guard = guard.clone();
    let cx = cx.inner.clone();
    later(py, async move {
        let result = guard.send(&cx, &effect).await;
        outcome(&result, None, raise_on_failure)
    })
}

/// The trigger `TriggerClient.send` (or `Trigger`) describes.
fn trigger_of(
    py: Python<'_>,
    name: &str,
    conf: Option<&Bound<'_, PyAny>>,
) -> PyResult<replaysafe_webhook::Trigger> {
    let trigger = replaysafe_webhook::Trigger::new(name);
    Ok(match conf {
        Some(conf) => trigger.with_conf(json_value(py, "conf", conf)?),
        None => trigger,
    })
}

/// Downstream triggers through the gate: an Airflow 3 DAG run (`airflow=`, with
/// `token_env` or `user` and `password_env`) or a call to a trigger URL (`url=`); a
/// delivered trigger's conf carries the run's lineage.
#[pyclass(frozen, module = "replaysafe", name = "TriggerClient")]
struct PyTriggerClient {
    guard: Arc<Guard<replaysafe_webhook::TriggerClient>>,
    routable: Routable,
}

#[pymethods]
impl PyTriggerClient {
    #[new]
    #[pyo3(signature = (*, journal = None, ledger = true, **fields))]
    fn new(
        py: Python<'_>,
        journal: Option<PathBuf>,
        ledger: bool,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (config, layer): (replaysafe_webhook::TriggerConfig, _) =
            client_parts(py, "TriggerClient", &[], fields, journal, ledger)?;
        let guard = config
            .build(layer.clone())
            .map_err(|e| config_error("TriggerClient", e.field(), &e))?;
        Ok(PyTriggerClient {
            guard: Arc::new(guard),
            routable: Routable::new("TriggerClient", RouteConfig::Trigger(config), layer),
        })
    }

    /// Triggers `name` (the DAG id with `airflow=`, the trigger's name with `url=`) with
    /// `conf` (JSON); returns its Outcome.
    #[pyo3(signature = (cx, *, name, conf = None, raise_on_failure = false))]
    fn send(
        &self,
        py: Python<'_>,
        cx: &Context,
        name: String,
        conf: Option<&Bound<'_, PyAny>>,
        raise_on_failure: bool,
    ) -> PyResult<Outcome> {
        let trigger = trigger_of(py, &name, conf)?;
        send_one(py, &self.guard, cx, &trigger, raise_on_failure)
    }

    /// [`send`](Self::send) as an awaitable, for asyncio code.
    #[pyo3(signature = (cx, *, name, conf = None, raise_on_failure = false))]
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        cx: &Context,
        name: String,
        conf: Option<&Bound<'py, PyAny>>,
        raise_on_failure: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let trigger = trigger_of(py, &name, conf)?;
        send_later(py, &self.guard, cx, trigger, raise_on_failure)
    }

    fn __repr__(&self) -> String {
        "TriggerClient(..)".to_owned()
    }
}

/// The file drop `SftpClient.send` (or `FileDrop`, at `place`) describes.
fn file_drop(
    place: &str,
    name: &str,
    data: Option<Vec<u8>>,
    file: Option<PathBuf>,
    message_type: &str,
) -> PyResult<replaysafe_sftp::FileDrop> {
    match (data, file) {
        (Some(data), None) => Ok(replaysafe_sftp::FileDrop::from_bytes(
            message_type,
            name,
            data,
        )),
        (None, Some(file)) => replaysafe_sftp::FileDrop::from_file(message_type, name, &file)
            .map_err(|e| ConfigError::new_err(format!("{place}: file: {}", chain(&e)))),
        _ => Err(ConfigError::new_err(format!(
            "{place}: give data (bytes) or file (a path), one of them"
        ))),
    }
}

/// Partner file drops over SFTP through the gate: the host key checked first, an upload
/// under a temporary name, then a rename; a file already present with the same content is
/// success, with other content a refusal. The configuration's fields as keywords
/// (`host`, `user`, `known_hosts`, `dir`, `key` with `passphrase_env`, or `password_env`).
#[pyclass(frozen, module = "replaysafe", name = "SftpClient")]
struct PySftpClient {
    guard: Arc<Guard<replaysafe_sftp::SftpClient>>,
    routable: Routable,
}

#[pymethods]
impl PySftpClient {
    #[new]
    #[pyo3(signature = (*, journal = None, ledger = true, **fields))]
    fn new(
        py: Python<'_>,
        journal: Option<PathBuf>,
        ledger: bool,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (config, layer): (replaysafe_sftp::SftpConfig, _) =
            client_parts(py, "SftpClient", &[], fields, journal, ledger)?;
        let guard = config
            .build(layer.clone())
            .map_err(|e| config_error("SftpClient", e.field(), &e))?;
        Ok(PySftpClient {
            guard: Arc::new(guard),
            routable: Routable::new("SftpClient", RouteConfig::Sftp(config), layer),
        })
    }

    /// Drops the file `name` (a template such as `orders_{window_start:%Y%m%d}.csv`) with
    /// `data` (bytes) or the content of the local `file`; returns its Outcome.
    #[pyo3(signature = (cx, *, name, data = None, file = None, message_type = "file_drop", raise_on_failure = false))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        cx: &Context,
        name: &str,
        data: Option<Vec<u8>>,
        file: Option<PathBuf>,
        message_type: &str,
        raise_on_failure: bool,
    ) -> PyResult<Outcome> {
        let drop = file_drop("SftpClient.send", name, data, file, message_type)?;
        send_one(py, &self.guard, cx, &drop, raise_on_failure)
    }

    /// [`send`](Self::send) as an awaitable, for asyncio code.
    #[pyo3(signature = (cx, *, name, data = None, file = None, message_type = "file_drop", raise_on_failure = false))]
    #[allow(clippy::too_many_arguments)]
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        cx: &Context,
        name: &str,
        data: Option<Vec<u8>>,
        file: Option<PathBuf>,
        message_type: &str,
        raise_on_failure: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let drop = file_drop("SftpClient.send", name, data, file, message_type)?;
        send_later(py, &self.guard, cx, drop, raise_on_failure)
    }

    fn __repr__(&self) -> String {
        "SftpClient(..)".to_owned()
    }
}

/// The receiver of an AlertClient.
enum AlertGuard {
    Alertmanager(Arc<Guard<replaysafe_alert::AlertmanagerClient>>),
    PagerDuty(Arc<Guard<replaysafe_alert::PagerDutyClient>>),
    Slack(Arc<Guard<replaysafe_alert::SlackClient>>),
}

/// What an AlertClient sends.
enum AlertEffect {
    Alert(replaysafe_alert::Alert),
    Slack(replaysafe_alert::SlackMessage),
}

/// What `AlertClient.send` (or `Alert`) takes, before the receiver is known.
#[derive(Clone)]
struct AlertFields {
    alertname: String,
    summary: Option<String>,
    severity: String,
    labels: std::collections::BTreeMap<String, String>,
    details: std::collections::BTreeMap<String, String>,
    resolve: bool,
    text: Option<String>,
}

impl AlertFields {
    /// The fields as `send` (or `Alert`) takes them.
    #[allow(clippy::too_many_arguments)]
    fn new(
        alertname: String,
        summary: Option<String>,
        severity: &str,
        labels: Option<std::collections::BTreeMap<String, String>>,
        details: Option<std::collections::BTreeMap<String, String>>,
        resolve: bool,
        text: Option<String>,
    ) -> Self {
        AlertFields {
            alertname,
            summary,
            severity: severity.to_owned(),
            labels: labels.unwrap_or_default(),
            details: details.unwrap_or_default(),
            resolve,
            text,
        }
    }

    /// The effect for a Slack webhook (`slack`) or for Alertmanager and PagerDuty; errors
    /// start with `place`.
    fn effect(&self, place: &str, slack: bool) -> PyResult<AlertEffect> {
        use replaysafe_alert::{Alert, Severity, SlackMessage};
        let AlertFields {
            alertname,
            summary,
            severity,
            labels,
            details,
            resolve,
            text,
        } = self.clone();
        let severity = match severity.as_str() {
            "critical" => Severity::Critical,
            "error" => Severity::Error,
            "warning" => Severity::Warning,
            "info" => Severity::Info,
            _ => {
                return Err(ConfigError::new_err(format!(
                    "{place}: severity: expected critical, error, warning or info"
                )));
            }
        };
        if slack {
            let text = text.or(summary).ok_or_else(|| {
                ConfigError::new_err(format!("{place}: text: required for Slack"))
            })?;
            return Ok(AlertEffect::Slack(SlackMessage::new(alertname, text)));
        }
        let summary = summary.unwrap_or_else(|| alertname.clone());
        let mut alert = Alert::trigger(alertname, summary).with_severity(severity);
        for (name, value) in labels {
            alert = alert.with_label(name, value);
        }
        for (name, value) in details {
            alert = alert.with_detail(name, value);
        }
        Ok(AlertEffect::Alert(if resolve {
            alert.resolved()
        } else {
            alert
        }))
    }
}

impl PyAlertClient {
    /// The effect `send` describes, for this client's receiver.
    fn effect(&self, fields: AlertFields) -> PyResult<AlertEffect> {
        fields.effect(
            "AlertClient.send",
            matches!(self.guard, AlertGuard::Slack(_)),
        )
    }
}

/// Alerts through the gate: `kind="alertmanager"` (`url`), `"pagerduty"`
/// (`routing_key_env`) or `"slack"` (`url_env`), with that configuration's fields.
#[pyclass(frozen, module = "replaysafe", name = "AlertClient")]
struct PyAlertClient {
    guard: AlertGuard,
    routable: Routable,
}

#[pymethods]
impl PyAlertClient {
    #[new]
    #[pyo3(signature = (kind, *, journal = None, ledger = true, **fields))]
    fn new(
        py: Python<'_>,
        kind: &str,
        journal: Option<PathBuf>,
        ledger: bool,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let failed = |e: replaysafe_alert::Error| config_error("AlertClient", e.field(), &e);
        let (guard, route, layer) = match kind {
            "alertmanager" => {
                let (config, layer): (replaysafe_alert::AlertmanagerConfig, _) =
                    client_parts(py, "AlertClient", &[], fields, journal, ledger)?;
                let guard = AlertGuard::Alertmanager(Arc::new(
                    config.build(layer.clone()).map_err(failed)?,
                ));
                (guard, RouteConfig::Alertmanager(config), layer)
            }
            "pagerduty" => {
                let (config, layer): (replaysafe_alert::PagerDutyConfig, _) =
                    client_parts(py, "AlertClient", &[], fields, journal, ledger)?;
                let guard =
                    AlertGuard::PagerDuty(Arc::new(config.build(layer.clone()).map_err(failed)?));
                (guard, RouteConfig::Pagerduty(config), layer)
            }
            "slack" => {
                let (config, layer): (replaysafe_alert::SlackConfig, _) =
                    client_parts(py, "AlertClient", &[], fields, journal, ledger)?;
                let guard =
                    AlertGuard::Slack(Arc::new(config.build(layer.clone()).map_err(failed)?));
                (guard, RouteConfig::Slack(config), layer)
            }
            _ => {
                return Err(ConfigError::new_err(
                    "AlertClient: kind: expected alertmanager, pagerduty or slack",
                ));
            }
        };
        Ok(PyAlertClient {
            guard,
            routable: Routable::new("AlertClient", route, layer),
        })
    }

    /// Raises (or with `resolve=True` resolves) the alert `alertname`; for Slack, posts
    /// `text` (default: the summary). Returns its Outcome.
    #[pyo3(signature = (cx, *, alertname, summary = None, severity = "error", labels = None, details = None, resolve = false, text = None, raise_on_failure = false))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        cx: &Context,
        alertname: String,
        summary: Option<String>,
        severity: &str,
        labels: Option<std::collections::BTreeMap<String, String>>,
        details: Option<std::collections::BTreeMap<String, String>>,
        resolve: bool,
        text: Option<String>,
        raise_on_failure: bool,
    ) -> PyResult<Outcome> {
        let effect = self.effect(AlertFields::new(
            alertname, summary, severity, labels, details, resolve, text,
        ))?;
        match (&self.guard, effect) {
            (AlertGuard::Slack(guard), AlertEffect::Slack(message)) => {
                send_one(py, guard, cx, &message, raise_on_failure)
            }
            (AlertGuard::Alertmanager(guard), AlertEffect::Alert(alert)) => {
                send_one(py, guard, cx, &alert, raise_on_failure)
            }
            (AlertGuard::PagerDuty(guard), AlertEffect::Alert(alert)) => {
                send_one(py, guard, cx, &alert, raise_on_failure)
            }
            _ => unreachable!("the effect is made for the guard"),
        }
    }

    /// [`send`](Self::send) as an awaitable, for asyncio code.
    #[pyo3(signature = (cx, *, alertname, summary = None, severity = "error", labels = None, details = None, resolve = false, text = None, raise_on_failure = false))]
    #[allow(clippy::too_many_arguments)]
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        cx: &Context,
        alertname: String,
        summary: Option<String>,
        severity: &str,
        labels: Option<std::collections::BTreeMap<String, String>>,
        details: Option<std::collections::BTreeMap<String, String>>,
        resolve: bool,
        text: Option<String>,
        raise_on_failure: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let effect = self.effect(AlertFields::new(
            alertname, summary, severity, labels, details, resolve, text,
        ))?;
        match (&self.guard, effect) {
            (AlertGuard::Slack(guard), AlertEffect::Slack(message)) => {
                send_later(py, guard, cx, message, raise_on_failure)
            }
            (AlertGuard::Alertmanager(guard), AlertEffect::Alert(alert)) => {
                send_later(py, guard, cx, alert, raise_on_failure)
            }
            (AlertGuard::PagerDuty(guard), AlertEffect::Alert(alert)) => {
                send_later(py, guard, cx, alert, raise_on_failure)
            }
            _ => unreachable!("the effect is made for the guard"),
        }
    }

    fn __repr__(&self) -> String {
        "AlertClient(..)".to_owned()
    }
}

/// The receiver of a MetricClient.
enum MetricGuard {
    Pushgateway(Arc<Guard<replaysafe_metrics::PushgatewayClient>>),
    Statsd(Arc<Guard<replaysafe_metrics::StatsdClient>>),
}

/// What a MetricClient sends: one Pushgateway group, or StatsD lines.
enum MetricEffects {
    Push(replaysafe_metrics::Push),
    Lines(Vec<replaysafe_metrics::StatsdMetric>),
}

/// What `MetricClient.send` (or `Metrics`) takes, before the receiver is known.
#[derive(Clone)]
struct MetricFields {
    metrics: std::collections::BTreeMap<String, f64>,
    /// `gauge` or `counter`.
    kind: String,
    job: Option<String>,
    grouping_labels: std::collections::BTreeMap<String, String>,
}

impl MetricFields {
    /// The fields as `send` (or `Metrics`) takes them.
    fn new(
        metrics: std::collections::BTreeMap<String, f64>,
        kind: &str,
        job: Option<String>,
        grouping_labels: Option<std::collections::BTreeMap<String, String>>,
    ) -> Self {
        MetricFields {
            metrics,
            kind: kind.to_owned(),
            job,
            grouping_labels: grouping_labels.unwrap_or_default(),
        }
    }

    /// Whether the metrics are counters rather than gauges; errors start with `place`.
    fn counter(&self, place: &str) -> PyResult<bool> {
        match self.kind.as_str() {
            "gauge" => Ok(false),
            "counter" => Ok(true),
            _ => Err(ConfigError::new_err(format!(
                "{place}: type: expected gauge or counter"
            ))),
        }
    }

    /// The effects for a Pushgateway (`pushgateway`) or for StatsD, every one checked
    /// before any is sent; errors start with `place`.
    fn effects(&self, place: &str, pushgateway: bool) -> PyResult<MetricEffects> {
        use replaysafe_metrics::{Push, Sample, StatsdMetric};
        let counter = self.counter(place)?;
        let metrics = self.metrics.clone();
        if pushgateway {
            let job = self.job.clone().ok_or_else(|| {
                ConfigError::new_err(format!("{place}: job: required for a Pushgateway"))
            })?;
            let mut push = Push::replace(job);
            for (name, value) in &self.grouping_labels {
                push = push.with_grouping_label(name, value);
            }
            for (name, value) in metrics {
                push = push.with_sample(if counter {
                    Sample::counter(name, value)
                } else {
                    Sample::gauge(name, value)
                });
            }
            return Ok(MetricEffects::Push(push));
        }
        metrics
            .into_iter()
            .map(|(name, value)| {
                if !counter {
                    return Ok(StatsdMetric::gauge(name, value));
                }
                if value.fract() != 0.0 || !value.is_finite() {
                    return Err(ConfigError::new_err(format!(
                        "{place}: metrics: a counter's value is a whole number ({name})"
                    )));
                }
                #[allow(clippy::cast_possible_truncation)]
                Ok(StatsdMetric::counter(name, value as i64))
            })
            .collect::<PyResult<Vec<_>>>()
            .map(MetricEffects::Lines)
    }
}

impl PyMetricClient {
    /// The effects `send` describes, for this client's receiver.
    fn effects(&self, fields: &MetricFields) -> PyResult<MetricEffects> {
        let pushgateway = matches!(self.guard, MetricGuard::Pushgateway(_));
        fields.effects("MetricClient.send", pushgateway)
    }
}

/// Metrics through the gate: `kind="pushgateway"` (`url`; one group replaced per send)
/// or `"statsd"` (`host`, `port`; one line per metric), with that configuration's fields.
#[pyclass(frozen, module = "replaysafe", name = "MetricClient")]
struct PyMetricClient {
    guard: MetricGuard,
    routable: Routable,
}

#[pymethods]
impl PyMetricClient {
    #[new]
    #[pyo3(signature = (kind, *, journal = None, ledger = true, **fields))]
    fn new(
        py: Python<'_>,
        kind: &str,
        journal: Option<PathBuf>,
        ledger: bool,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let failed = |e: replaysafe_metrics::Error| config_error("MetricClient", e.field(), &e);
        let (guard, route, layer) = match kind {
            "pushgateway" => {
                let (config, layer): (replaysafe_metrics::PushgatewayConfig, _) =
                    client_parts(py, "MetricClient", &[], fields, journal, ledger)?;
                let guard = MetricGuard::Pushgateway(Arc::new(
                    config.build(layer.clone()).map_err(failed)?,
                ));
                (guard, RouteConfig::Pushgateway(config), layer)
            }
            "statsd" => {
                let (config, layer): (replaysafe_metrics::StatsdConfig, _) =
                    client_parts(py, "MetricClient", &[], fields, journal, ledger)?;
                let guard =
                    MetricGuard::Statsd(Arc::new(config.build(layer.clone()).map_err(failed)?));
                (guard, RouteConfig::Statsd(config), layer)
            }
            _ => {
                return Err(ConfigError::new_err(
                    "MetricClient: kind: expected pushgateway or statsd",
                ));
            }
        };
        Ok(PyMetricClient {
            guard,
            routable: Routable::new("MetricClient", route, layer),
        })
    }

    /// Sends `metrics` (name → value): to a Pushgateway as the group `job` (with
    /// `grouping_labels`), one Outcome; over StatsD one line and one Outcome per metric.
    /// `type` is `gauge` or `counter`. Every metric is checked before the first is sent.
    #[pyo3(signature = (cx, *, metrics, r#type = "gauge", job = None, grouping_labels = None, raise_on_failure = false))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        cx: &Context,
        metrics: std::collections::BTreeMap<String, f64>,
        r#type: &str,
        job: Option<String>,
        grouping_labels: Option<std::collections::BTreeMap<String, String>>,
        raise_on_failure: bool,
    ) -> PyResult<Vec<Outcome>> {
        let fields = MetricFields::new(metrics, r#type, job, grouping_labels);
        match (&self.guard, self.effects(&fields)?) {
            (MetricGuard::Pushgateway(guard), MetricEffects::Push(push)) => {
                Ok(vec![send_one(py, guard, cx, &push, raise_on_failure)?])
            }
            (MetricGuard::Statsd(guard), MetricEffects::Lines(lines)) => lines
                .iter()
                .map(|line| send_one(py, guard, cx, line, raise_on_failure))
                .collect(),
            _ => unreachable!("the effects are made for the guard"),
        }
    }

    /// [`send`](Self::send) as an awaitable, for asyncio code.
    #[pyo3(signature = (cx, *, metrics, r#type = "gauge", job = None, grouping_labels = None, raise_on_failure = false))]
    #[allow(clippy::too_many_arguments)]
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        cx: &Context,
        metrics: std::collections::BTreeMap<String, f64>,
        r#type: &str,
        job: Option<String>,
        grouping_labels: Option<std::collections::BTreeMap<String, String>>,
        raise_on_failure: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let effects = self.effects(&MetricFields::new(metrics, r#type, job, grouping_labels))?;
        let context = cx.inner.clone();
        match (&self.guard, effects) {
            (MetricGuard::Pushgateway(guard), MetricEffects::Push(push)) => {
                let guard = guard.clone();
                later(py, async move {
                    let result = guard.send(&context, &push).await;
                    Ok(vec![outcome(&result, None, raise_on_failure)?])
                })
            }
            (MetricGuard::Statsd(guard), MetricEffects::Lines(lines)) => {
                let guard = guard.clone();
                later(py, async move {
                    let mut outcomes = Vec::with_capacity(lines.len());
                    for line in &lines {
                        let result = guard.send(&context, line).await;
                        outcomes.push(outcome(&result, None, raise_on_failure)?);
                    }
                    Ok(outcomes)
                })
            }
            _ => unreachable!("the effects are made for the guard"),
        }
    }

    fn __repr__(&self) -> String {
        "MetricClient(..)".to_owned()
    }
}

/// The run's context from the environment (REPLAYSAFE_*, AIRFLOW_CTX_*,
/// REPLAYSAFE_UPSTREAM), the same resolver as the command; or from `env` alone.
#[pyfunction]
#[pyo3(signature = (env = None))]
fn context(env: Option<HashMap<String, String>>) -> PyResult<Context> {
    let resolved = match env {
        Some(env) => ReplayContext::from_vars(env),
        None => ReplayContext::from_env(),
    };
    resolved
        .map(|inner| Context { inner })
        .map_err(|e| ContextError::new_err(chain(&e)))
}

/// The report of journals as `replaysafe report --format json` prints it, as a JSON string.
#[pyfunction]
#[pyo3(signature = (*journals, skip_invalid = false))]
fn report_json(py: Python<'_>, journals: Vec<PathBuf>, skip_invalid: bool) -> PyResult<String> {
    if journals.is_empty() {
        return Err(ConfigError::new_err("report: no journal given"));
    }
    py.detach(|| {
        use replaysafe_review::report::Breakdown;
        let report = replaysafe_review::Reader::default()
            .with_skip_invalid(skip_invalid)
            .report(&journals, &[Breakdown::Kind, Breakdown::Reason])
            .map_err(|e| Error::new_err(format!("report: {}", chain(&e))))?;
        let mut out = Vec::new();
        report
            .write(replaysafe_review::Format::Json, &mut out)
            .map_err(|e| Error::new_err(format!("report: {e}")))?;
        String::from_utf8(out).map_err(|e| Error::new_err(format!("report: {e}")))
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ContextError", py.get_type::<ContextError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("DeliveryError", py.get_type::<DeliveryError>())?;
    m.add_class::<Context>()?;
    m.add_class::<Decision>()?;
    m.add_class::<Outcome>()?;
    m.add_class::<PyWebhookClient>()?;
    m.add_class::<stage::PyWebhook>()?;
    m.add_class::<stage::PyEmail>()?;
    m.add_class::<stage::PyTrigger>()?;
    m.add_class::<stage::PyAlert>()?;
    m.add_class::<stage::PyMetrics>()?;
    m.add_class::<stage::PyFileDrop>()?;
    m.add_class::<PyEmailClient>()?;
    m.add_class::<PyTriggerClient>()?;
    m.add_class::<PyAlertClient>()?;
    m.add_class::<PyMetricClient>()?;
    m.add_class::<PySftpClient>()?;
    m.add_class::<gate::PyGate>()?;
    m.add_function(wrap_pyfunction!(stage::outbox_stage_params, m)?)?;
    m.add("SQLITE_STAGE_SQL", replaysafe_outbox::sqlite::STAGE_SQL)?;
    m.add("POSTGRES_STAGE_SQL", replaysafe_outbox::postgres::STAGE_SQL)?;
    m.add_function(wrap_pyfunction!(context, m)?)?;
    m.add_function(wrap_pyfunction!(report_json, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
