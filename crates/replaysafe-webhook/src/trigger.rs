//! Downstream triggers: an Airflow DAG run, or a call to a generic trigger URL.

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, IdempotencyKey,
    ReplayContext, rfc3339,
};
use reqwest::{Method, StatusCode};

use crate::Error;
use crate::transport::{HttpOptions, LOOKING_UP_RUN, Outgoing, SENDING_TRIGGER, Transport};
use crate::webhook::{check_name, http_options};
use replaysafe_http::{Endpoint, ResponseClass};
use secrecy::SecretString;

/// Starts downstream work: a DAG run through Airflow's REST API, or a call to a generic
/// trigger URL. Reached only through a [`Guard`]; the effect kind is `trigger`, so a
/// backfill upstream starts nothing downstream and journals what it would have started.
///
/// # Airflow
///
/// [`TriggerClient::airflow`] posts to `{base}/api/v2/dags/{dag_id}/dagRuns` (Airflow 3's
/// stable API) the body Airflow's `TriggerDAGRunPostBody` takes:
///
/// ```json
/// {"dag_run_id": "manual__2026-08-05T00:00:00Z__replaysafe-<key>",
///  "logical_date": "2026-08-05T00:00:00Z",
///  "data_interval_start": "2026-08-05T00:00:00Z", "data_interval_end": "2026-08-06T00:00:00Z",
///  "conf": {}}
/// ```
///
/// The logical date is the window's start unless [`Trigger::with_logical_date`] says
/// otherwise; the data interval is the window. The run id carries the idempotency key,
/// so Airflow itself refuses a second run of the same logical trigger with 409 Conflict.
/// Airflow also answers 409 when *another* run (a scheduled one, a manual one, another
/// pipeline's trigger) already holds the same logical date, and the answer does not say
/// which, so on 409 the client looks the run up
/// (`GET {base}/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}`): when it exists the trigger
/// is delivered with [`TriggerReceipt::already_triggered`]; when it does not, delivery
/// fails for good with an error saying that a different run holds that logical date.
/// The run id's `manual__` prefix is the one Airflow gives API-triggered runs, which a
/// downstream replaysafe context reads as a manual run.
///
/// Authenticate with [`airflow_login`](TriggerClientBuilder::airflow_login) (a username
/// and password exchanged for a JWT at `POST {base}/auth/token` before each delivery: what
/// Airflow 3's default auth manager takes; it answers basic auth with 401), with
/// [`bearer_token`](TriggerClientBuilder::bearer_token) (a token obtained elsewhere), or
/// with [`basic_auth`](TriggerClientBuilder::basic_auth) (auth managers that accept it).
/// A suppressed trigger logs in nowhere.
///
/// # Generic trigger URL
///
/// [`TriggerClient::url`] sends (POST unless configured otherwise)
/// `{"trigger", "pipeline", "logical_date", "data_interval_start", "data_interval_end", "conf"}`
/// as JSON, with the same idempotency and signature headers as a webhook.
pub struct TriggerClient {
    preset: Preset,
    method: Method,
    transport: Transport,
    login: Option<Login>,
}

/// Airflow 3's username and password, exchanged for a JWT before each delivery.
struct Login {
    username: String,
    password: SecretString,
}

enum Preset {
    Airflow { base: Endpoint },
    Url { endpoint: Endpoint },
}

impl fmt::Debug for TriggerClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (preset, endpoint) = match &self.preset {
            Preset::Airflow { base } => ("airflow", base),
            Preset::Url { endpoint } => ("url", endpoint),
        };
        let endpoint = self.transport.redaction().target().apply(endpoint.target());
        f.debug_struct("TriggerClient")
            .field("preset", &preset)
            .field("endpoint", &endpoint)
            .field("method", &self.method)
            .field("transport", &self.transport)
            .field(
                "airflow_login",
                &self.login.as_ref().map(|login| &login.username),
            )
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PresetKind {
    Airflow,
    Url,
}

impl TriggerClient {
    /// Triggers DAG runs on the Airflow 3 API server at `base_url` (such as
    /// `https://airflow.internal:8080`, or with a path prefix when Airflow is served under one).
    pub fn airflow(base_url: impl Into<String>) -> TriggerClientBuilder {
        TriggerClientBuilder {
            preset: PresetKind::Airflow,
            url: base_url.into(),
            options: HttpOptions::default(),
            login: None,
        }
    }

    /// Triggers by calling `url` (CI systems, schedulers, serverless functions).
    pub fn url(url: impl Into<String>) -> TriggerClientBuilder {
        TriggerClientBuilder {
            preset: PresetKind::Url,
            url: url.into(),
            options: HttpOptions::default(),
            login: None,
        }
    }
}

/// Configures a [`TriggerClient`]; the same options as a webhook client.
pub struct TriggerClientBuilder {
    preset: PresetKind,
    url: String,
    options: HttpOptions,
    login: Option<Login>,
}

impl fmt::Debug for TriggerClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TriggerClientBuilder")
            .field("preset", &self.preset)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl TriggerClientBuilder {
    http_options!();

    /// Logs in to Airflow 3 with a username and password: before each delivery attempt the
    /// client posts them to `{base}/auth/token` and sends the trigger with the
    /// `access_token` it answers as a bearer token (Airflow's tokens expire, so none is
    /// kept). This is what Airflow 3's default auth manager (SimpleAuthManager) takes; it
    /// answers basic auth with 401. Airflow preset only; do not combine it with
    /// [`bearer_token`](Self::bearer_token) or [`basic_auth`](Self::basic_auth).
    pub fn airflow_login(mut self, username: impl Into<String>, password: SecretString) -> Self {
        self.login = Some(Login {
            username: username.into(),
            password,
        });
        self
    }

    fn build_unguarded(self) -> Result<TriggerClient, Error> {
        let preset = match self.preset {
            PresetKind::Airflow => {
                let base = Endpoint::base("airflow base URL", &self.url)?;
                if self
                    .options
                    .method
                    .as_ref()
                    .is_some_and(|m| *m != Method::POST)
                {
                    return Err(Error::config(
                        "method",
                        "Airflow's API triggers a DAG run with POST only",
                    ));
                }
                Preset::Airflow { base }
            }
            PresetKind::Url => {
                if self.login.is_some() {
                    return Err(Error::config(
                        "airflow_login",
                        "only the Airflow preset logs in; use bearer_token or basic_auth",
                    ));
                }
                Preset::Url {
                    endpoint: Endpoint::parse("trigger URL", &self.url)?,
                }
            }
        };
        if let Some(login) = &self.login
            && login.username.trim().is_empty()
        {
            return Err(Error::config("airflow_login", "the username is empty"));
        }
        let method = self.options.method.clone().unwrap_or(Method::POST);
        let transport = self.options.build()?;
        Ok(TriggerClient {
            preset,
            method,
            transport,
            login: self.login,
        })
    }

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<TriggerClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }
}

/// A downstream run to start: the DAG id (Airflow) or trigger name (the message type),
/// a `conf` object and a logical date.
///
/// It serializes (`{"name", "conf", "logical_date"}`) so that an outbox row can hold it;
/// `describe` validates it, whether built here or read back.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Trigger {
    name: String,
    conf: serde_json::Value,
    #[serde(default, with = "optional_rfc3339")]
    logical_date: Option<DateTime<Utc>>,
}

/// A logical date as canonical RFC 3339 text, or null.
mod optional_rfc3339 {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        time: &Option<DateTime<Utc>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match time {
            Some(time) => serializer.serialize_str(&replaysafe_core::rfc3339(*time)),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<DateTime<Utc>>::deserialize(deserializer)
    }
}

impl Trigger {
    /// A trigger of `name`: the DAG id for Airflow, any name for a trigger URL. The conf
    /// is empty and the logical date is the window's start.
    pub fn new(name: impl Into<String>) -> Self {
        Trigger {
            name: name.into(),
            conf: serde_json::Value::Object(serde_json::Map::new()),
            logical_date: None,
        }
    }

    /// The run's configuration; must be a JSON object. It is journaled as a digest only.
    pub fn with_conf(mut self, conf: serde_json::Value) -> Self {
        self.conf = conf;
        self
    }

    /// A logical date other than the window's start.
    pub fn with_logical_date(mut self, logical_date: DateTime<Utc>) -> Self {
        self.logical_date = Some(logical_date);
        self
    }

    /// The DAG id or trigger name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What a delivered trigger returns.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TriggerReceipt {
    /// The receiver's status (2xx, or 409 when Airflow already had the run).
    pub status: u16,
    /// The Airflow DAG run id asked for; `None` for a trigger URL.
    pub run_id: Option<String>,
    /// Whether Airflow answered 409 and the lookup found this very run: an earlier
    /// attempt or run of the same logical trigger got through.
    pub already_triggered: bool,
}

/// The trigger's conf with this run added as the downstream run's cause:
/// `conf.replaysafe.upstream` is `[this run]` (pipeline, run id, run kind, window), the
/// shape of `REPLAYSAFE_UPSTREAM`, so the downstream run can know what caused it and a
/// downstream of a replay is a replay. Other keys of `conf.replaysafe` are kept; a
/// `conf.replaysafe` that is not an object is invalid.
fn with_lineage(cx: &ReplayContext, conf: &serde_json::Value) -> Result<serde_json::Value, Error> {
    let mut conf = conf.clone();
    let this_run = replaysafe_core::UpstreamRun::new(
        cx.pipeline(),
        cx.run_id().as_str(),
        Some(cx.run_kind()),
        cx.has_window().then(|| *cx.window()),
    )
    .map_err(|e| Error::invalid("conf", e))?;
    let section = conf
        .as_object_mut()
        .ok_or_else(|| Error::invalid("conf", "must be a JSON object"))?
        .entry("replaysafe")
        .or_insert_with(|| serde_json::json!({}));
    let section = section.as_object_mut().ok_or_else(|| {
        Error::invalid(
            "conf",
            "conf.replaysafe is where replaysafe puts the run's lineage: it must be an object",
        )
    })?;
    section.insert(
        "upstream".to_owned(),
        serde_json::Value::Array(vec![this_run.to_json()]),
    );
    Ok(conf)
}

/// What one trigger becomes on the wire.
struct Prepared {
    endpoint: Endpoint,
    body: Vec<u8>,
    run_id: Option<String>,
    logical_date: String,
}

impl TriggerClient {
    fn endpoint(&self, trigger: &Trigger) -> Result<Endpoint, Error> {
        match &self.preset {
            Preset::Url { endpoint } => {
                check_name("trigger name", &trigger.name)?;
                Ok(endpoint.clone())
            }
            Preset::Airflow { base } => {
                check_dag_id(&trigger.name)?;
                Ok(base.join(&["api", "v2", "dags", &trigger.name, "dagRuns"]))
            }
        }
    }

    fn prepare(
        &self,
        cx: &ReplayContext,
        trigger: &Trigger,
        key: Option<&IdempotencyKey>,
    ) -> Result<Prepared, Error> {
        if !trigger.conf.is_object() {
            return Err(Error::invalid("conf", "must be a JSON object"));
        }
        let endpoint = self.endpoint(trigger)?;
        let window = cx.window();
        let logical_date = rfc3339(trigger.logical_date.unwrap_or(window.start()));
        let conf = with_lineage(cx, &trigger.conf)?;
        let (body, run_id) = match &self.preset {
            Preset::Airflow { .. } => {
                // `describe` runs before the guard derives the key; derive the same one.
                let derived;
                let key = match key {
                    Some(key) => key,
                    None => {
                        derived = IdempotencyKey::derive(
                            cx.pipeline(),
                            &EffectKind::Trigger,
                            &trigger.name,
                            endpoint.target(),
                            window,
                        );
                        &derived
                    }
                };
                let run_id = format!("manual__{logical_date}__replaysafe-{key}");
                let body = serde_json::json!({
                    "dag_run_id": run_id,
                    "logical_date": logical_date,
                    "data_interval_start": rfc3339(window.start()),
                    "data_interval_end": rfc3339(window.end()),
                    "conf": conf,
                });
                (body, Some(run_id))
            }
            Preset::Url { .. } => {
                let body = serde_json::json!({
                    "trigger": trigger.name,
                    "pipeline": cx.pipeline(),
                    "logical_date": logical_date,
                    "data_interval_start": rfc3339(window.start()),
                    "data_interval_end": rfc3339(window.end()),
                    "conf": conf,
                });
                (body, None)
            }
        };
        Ok(Prepared {
            endpoint,
            body: body.to_string().into_bytes(),
            run_id,
            logical_date,
        })
    }

    /// Exchanges the login for a JWT at `{base}/auth/token` ([`crate::airflow_token`]).
    async fn log_in(&self, base: &Endpoint, login: &Login) -> Result<SecretString, Error> {
        crate::airflow::log_in(
            self.transport.client(),
            base,
            self.transport.redaction(),
            &login.username,
            &login.password,
        )
        .await
    }

    /// Airflow answered 409: either this run exists (an earlier attempt got through) or a
    /// different run holds the logical date. Only a lookup of the run tells which.
    async fn resolve_conflict(
        &self,
        base: &Endpoint,
        trigger: &Trigger,
        prepared: Prepared,
        token: Option<&SecretString>,
    ) -> Result<TriggerReceipt, Error> {
        let run_id = prepared.run_id.clone().unwrap_or_default();
        let run = base.join(&["api", "v2", "dags", &trigger.name, "dagRuns", &run_id]);
        match self
            .transport
            .call(LOOKING_UP_RUN, Method::GET, &run, None, token)
            .await
        {
            Ok(_) => Ok(TriggerReceipt {
                status: StatusCode::CONFLICT.as_u16(),
                run_id: prepared.run_id,
                already_triggered: true,
            }),
            Err(error) if error.status() == Some(StatusCode::NOT_FOUND.as_u16()) => {
                let shown = prepared.endpoint.shown(self.transport.redaction());
                Err(Error::from_status(
                    SENDING_TRIGGER,
                    &shown,
                    StatusCode::CONFLICT.as_u16(),
                    ResponseClass::Rejected,
                    Some(format!(
                        "a different run of {} already holds logical date {}, and run {run_id} \
                         does not exist: this trigger was not delivered",
                        trigger.name, prepared.logical_date
                    )),
                ))
            }
            Err(error) => Err(error),
        }
    }
}

/// Airflow's DAG id rule (`KEY_REGEX`), in ASCII: letters, digits, `_`, `.` and `-`, at most 250.
fn check_dag_id(dag_id: &str) -> Result<(), Error> {
    let well_formed = !dag_id.is_empty()
        && dag_id.len() <= 250
        && dag_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if well_formed {
        Ok(())
    } else {
        Err(Error::invalid(
            "dag_id",
            "must be 1 to 250 characters of letters, digits, _, . and -",
        ))
    }
}

#[async_trait]
impl EffectClient for TriggerClient {
    type Effect = Trigger;
    type Receipt = TriggerReceipt;
    type Error = Error;

    /// The receiver drops repeats: Airflow drops a second run with the same run id (the key is in it); a trigger URL gets `Idempotency-Key`.
    fn dedupes_by_key(&self) -> bool {
        true
    }

    fn describe(&self, cx: &ReplayContext, trigger: &Trigger) -> Result<EffectDescription, Error> {
        let prepared = self.prepare(cx, trigger, None)?;
        let summary = match self.preset {
            Preset::Airflow { .. } => format!("dag run of {}", trigger.name),
            Preset::Url { .. } => format!("trigger {}", trigger.name),
        };
        Ok(EffectDescription::new(
            EffectKind::Trigger,
            &trigger.name,
            prepared.endpoint.target(),
        )?
        .with_payload(&prepared.body)
        .with_summary(summary))
    }

    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        trigger: &Trigger,
    ) -> Result<TriggerReceipt, Error> {
        let prepared = self.prepare(delivery.context(), trigger, Some(delivery.key()))?;
        let token = match (&self.preset, &self.login) {
            (Preset::Airflow { base }, Some(login)) => Some(self.log_in(base, login).await?),
            _ => None,
        };
        let result = self
            .transport
            .send(Outgoing {
                action: SENDING_TRIGGER,
                method: self.method.clone(),
                endpoint: &prepared.endpoint,
                content_type: "application/json",
                body: prepared.body.clone(),
                key: delivery.key(),
                bearer: token.as_ref(),
            })
            .await;
        match (result, &self.preset) {
            (Ok(status), _) => Ok(TriggerReceipt {
                status: status.as_u16(),
                run_id: prepared.run_id,
                already_triggered: false,
            }),
            (Err(error), Preset::Airflow { base })
                if error.status() == Some(StatusCode::CONFLICT.as_u16()) =>
            {
                self.resolve_conflict(base, trigger, prepared, token.as_ref())
                    .await
            }
            (Err(error), _) => Err(error),
        }
    }

    /// The policy set with [`TriggerClientBuilder::redaction`]; by default the full endpoint.
    fn redaction(&self) -> replaysafe_core::RedactionPolicy {
        self.transport.redaction()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_round_trips_through_json() {
        use chrono::TimeZone;
        let trigger = Trigger::new("daily_orders")
            .with_conf(serde_json::json!({"day": "2026-08-05"}))
            .with_logical_date(Utc.with_ymd_and_hms(2026, 8, 5, 0, 0, 0).unwrap());
        let json = serde_json::to_string(&trigger).unwrap();
        assert_eq!(
            json,
            r#"{"name":"daily_orders","conf":{"day":"2026-08-05"},"logical_date":"2026-08-05T00:00:00Z"}"#
        );
        assert_eq!(serde_json::from_str::<Trigger>(&json).unwrap(), trigger);
        let bare: Trigger = serde_json::from_str(r#"{"name":"x","conf":{}}"#).unwrap();
        assert_eq!(bare, Trigger::new("x"));
    }

    #[test]
    fn dag_ids_follow_airflow_rules() {
        for good in ["daily_orders", "team.reports-v2", "A1"] {
            assert!(check_dag_id(good).is_ok(), "{good}");
        }
        for bad in ["", "../etc", "a b", "dag/run", "ünicode", &"x".repeat(251)] {
            assert_eq!(
                check_dag_id(bad).unwrap_err().field(),
                Some("dag_id"),
                "{bad}"
            );
        }
    }
}
