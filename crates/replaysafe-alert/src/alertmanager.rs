//! Alertmanager API v2: posting and resolving alerts (gated effects), reading alerts
//! and silences back, and silencing a pipeline for the length of a backfill.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, ReplayContext,
    rfc3339,
};
use replaysafe_http::{Call, Endpoint, HttpClient, Method, SsrfPolicy, drain};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Error;
use crate::alert::{Alert, AlertAction};

/// Posts alerts to Alertmanager (`POST /api/v2/alerts`); [`AlertmanagerClient::builder`]
/// makes a guarded one.
///
/// Each effect is one [`Alert`]. Its labels are the alert's own plus `alertname`,
/// `severity`, `pipeline`, `window` (`start/end`, RFC 3339) and `category` when set, so
/// the same alert for the same window is the same alert to Alertmanager, however often it
/// is sent. The summary and details become annotations. A trigger sends `startsAt` (the
/// alert's, or now by the context's clock) and `endsAt` when one was set; a resolve sends
/// `endsAt` = now, which ends the alert.
///
/// The journal target is the Alertmanager base URL; the message type is the alert name.
/// Alertmanager usually runs on an internal address: allow it with
/// [`ssrf_policy`](AlertmanagerClientBuilder::ssrf_policy).
#[derive(Debug)]
pub struct AlertmanagerClient {
    base: Endpoint,
    http: HttpClient,
}

/// Configures an [`AlertmanagerClient`].
#[derive(Debug)]
pub struct AlertmanagerClientBuilder {
    base_url: String,
    timeout: Duration,
    ssrf: SsrfPolicy,
}

impl AlertmanagerClient {
    /// A builder for a client of the Alertmanager at `base_url` (`http://alertmanager:9093`).
    pub fn builder(base_url: impl Into<String>) -> AlertmanagerClientBuilder {
        AlertmanagerClientBuilder {
            base_url: base_url.into(),
            timeout: Duration::from_secs(10),
            ssrf: SsrfPolicy::default(),
        }
    }

    fn target(&self) -> String {
        self.base.target().trim_end_matches('/').to_owned()
    }

    fn body(&self, cx: &ReplayContext, alert: &Alert) -> Value {
        let window = cx.window();
        let mut labels: BTreeMap<&str, String> = alert
            .labels
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone()))
            .collect();
        labels.insert("alertname", alert.name.clone());
        labels.insert("severity", alert.severity.as_str().to_owned());
        labels.insert("pipeline", cx.pipeline().to_owned());
        labels.insert(
            "window",
            format!("{}/{}", rfc3339(window.start()), rfc3339(window.end())),
        );
        if let Some(category) = alert.category {
            labels.insert("category", category.as_str().to_owned());
        }
        let mut annotations: BTreeMap<&str, &str> = alert
            .details
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        if !alert.summary.is_empty() {
            annotations.insert("summary", &alert.summary);
        }
        let mut body = json!({ "labels": labels, "annotations": annotations });
        let now = cx.now();
        match alert.action {
            AlertAction::Trigger => {
                body["startsAt"] = json!(rfc3339(alert.starts_at.unwrap_or(now)));
                if let Some(end) = alert.ends_at {
                    body["endsAt"] = json!(rfc3339(end));
                }
            }
            AlertAction::Resolve => {
                if let Some(start) = alert.starts_at {
                    body["startsAt"] = json!(rfc3339(start.min(now)));
                }
                body["endsAt"] = json!(rfc3339(now));
            }
        }
        if let Some(url) = &alert.generator_url {
            body["generatorURL"] = json!(url);
        }
        json!([body])
    }
}

/// The HTTP options every alert client's builder has: `timeout` and `ssrf_policy`, on
/// the builder's `timeout` and `ssrf` fields.
macro_rules! http_options {
    () => {
        /// The timeout of one request (default 10 s).
        pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
            self.timeout = timeout;
            self
        }

        /// Replaces the SSRF policy (default: internal addresses refused); allow the
        /// receiver's host or network here when it is internal.
        pub fn ssrf_policy(mut self, policy: replaysafe_http::SsrfPolicy) -> Self {
            self.ssrf = policy;
            self
        }
    };
}
pub(crate) use http_options;

impl AlertmanagerClientBuilder {
    http_options!();

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<AlertmanagerClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }

    fn build_unguarded(self) -> Result<AlertmanagerClient, Error> {
        let client = AlertmanagerClient {
            base: Endpoint::base("base_url", &self.base_url)?,
            http: http_client(self.timeout, self.ssrf)?,
        };
        Ok(client)
    }
}

/// The client every Alertmanager, PagerDuty and Slack request goes through.
pub(crate) fn http_client(timeout: Duration, ssrf: SsrfPolicy) -> Result<HttpClient, Error> {
    HttpClient::builder("replaysafe-alert")
        .timeout(timeout)
        .ssrf_policy(ssrf)
        .build()
}

#[async_trait]
impl EffectClient for AlertmanagerClient {
    type Effect = Alert;
    type Receipt = ();
    type Error = Error;

    /// The receiver drops repeats: Alertmanager keeps one alert per label set: posting it again updates it, and its labels carry the key.
    fn dedupes_by_key(&self) -> bool {
        true
    }

    fn describe(&self, cx: &ReplayContext, alert: &Alert) -> Result<EffectDescription, Error> {
        alert.check()?;
        let body =
            serde_json::to_vec(&self.body(cx, alert)).map_err(|e| Error::invalid("alert", e))?;
        EffectDescription::new(EffectKind::Alert, &alert.name, self.target())
            .map_err(|e| Error::invalid("alert name", e))?
            .with_summary(alert.journal_summary())
            .with_payload(&body)
            .with_action(alert.action.as_str())
            .map_err(|e| Error::invalid("alert action", e))
    }

    async fn deliver(&self, delivery: &Delivery<'_>, alert: &Alert) -> Result<(), Error> {
        let alerts = self.base.join(&["api", "v2", "alerts"]);
        let action = format!(
            "posting alert {} ({}) to",
            alert.name,
            alert.action.as_str()
        );
        let request = self
            .http
            .request(Method::POST, &alerts)
            .json(&self.body(delivery.context(), alert));
        let call = Call {
            action: &action,
            endpoint: &alerts,
            target_as_journaled: alerts.target(),
            quote_error_body: true,
        };
        drain(self.http.send(call, request).await?).await;
        Ok(())
    }
}

/// An equality matcher for reading alerts and silences back: `name="value"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matcher {
    name: String,
    value: String,
}

impl Matcher {
    /// Matches label `name` equal to `value`.
    pub fn equal(name: impl Into<String>, value: impl Into<String>) -> Self {
        Matcher {
            name: name.into(),
            value: value.into(),
        }
    }

    /// The filter text Alertmanager reads: `name="value"`, the value quoted and escaped.
    pub fn to_filter(&self) -> String {
        let value = self
            .value
            .replace('\\', r"\\")
            .replace('"', "\\\"")
            .replace('\n', r"\n");
        format!("{}=\"{value}\"", self.name)
    }
}

/// An alert as Alertmanager holds it (`GET /api/v2/alerts`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ActiveAlert {
    /// Alertmanager's fingerprint of the label set.
    pub fingerprint: String,
    /// Every label.
    pub labels: BTreeMap<String, String>,
    /// Every annotation.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// When it started.
    pub starts_at: DateTime<Utc>,
    /// When it ends (or ended).
    pub ends_at: Option<DateTime<Utc>>,
    /// The generator URL.
    #[serde(rename = "generatorURL", default)]
    pub generator_url: Option<String>,
    /// Whether it is active, silenced or inhibited.
    pub status: AlertStatus,
}

/// The state of an [`ActiveAlert`].
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AlertStatus {
    /// `active`, `suppressed` or `unprocessed`.
    pub state: String,
    /// Ids of the silences muting it.
    #[serde(default)]
    pub silenced_by: Vec<String>,
    /// Fingerprints of the alerts inhibiting it.
    #[serde(default)]
    pub inhibited_by: Vec<String>,
}

/// A silence (`GET /api/v2/silences`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Silence {
    /// Its id.
    pub id: String,
    /// What it matches.
    pub matchers: Vec<SilenceMatcher>,
    /// When it starts.
    pub starts_at: DateTime<Utc>,
    /// When it ends (or ended).
    pub ends_at: DateTime<Utc>,
    /// Who created it.
    pub created_by: String,
    /// Why.
    pub comment: String,
    /// `active`, `pending` or `expired`.
    pub status: SilenceStatus,
}

/// The state of a [`Silence`].
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct SilenceStatus {
    /// `active`, `pending` or `expired`.
    pub state: String,
}

/// One matcher of a [`Silence`].
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SilenceMatcher {
    /// Label name.
    pub name: String,
    /// Label value or regular expression.
    pub value: String,
    /// Whether `value` is a regular expression.
    pub is_regex: bool,
    /// Whether it matches equality (`=`) rather than inequality (`!=`).
    #[serde(default = "yes")]
    pub is_equal: bool,
}

fn yes() -> bool {
    true
}

/// The parts of Alertmanager's API that notify nobody: reading alerts and silences, and
/// silencing a pipeline for a backfill. Not gated, since none of it can page anyone.
#[derive(Clone, Debug)]
pub struct AlertmanagerApi {
    base: Endpoint,
    http: HttpClient,
}

impl AlertmanagerApi {
    /// A client of the Alertmanager at `base_url`, with a 10 s timeout per request and
    /// `ssrf` deciding which addresses it may reach (allow the Alertmanager's host).
    pub fn new(base_url: &str, ssrf: SsrfPolicy) -> Result<Self, Error> {
        Ok(AlertmanagerApi {
            base: Endpoint::base("base_url", base_url)?,
            http: http_client(Duration::from_secs(10), ssrf)?,
        })
    }

    fn shown(&self) -> &str {
        self.base.target().trim_end_matches('/')
    }

    /// Alerts matching every matcher (`GET /api/v2/alerts?filter=...`). Alertmanager
    /// lists active, silenced and inhibited alerts; a resolved alert is not listed.
    pub async fn alerts(&self, matchers: &[Matcher]) -> Result<Vec<ActiveAlert>, Error> {
        self.get(&["api", "v2", "alerts"], matchers, "reading alerts")
            .await
    }

    /// Silences matching every matcher (`GET /api/v2/silences?filter=...`), expired ones included.
    pub async fn silences(&self, matchers: &[Matcher]) -> Result<Vec<Silence>, Error> {
        self.get(&["api", "v2", "silences"], matchers, "reading silences")
            .await
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &[&str],
        matchers: &[Matcher],
        doing: &str,
    ) -> Result<T, Error> {
        let endpoint = self.base.join(path);
        let filters: Vec<(&str, String)> = matchers
            .iter()
            .map(|matcher| ("filter", matcher.to_filter()))
            .collect();
        let action = format!("{doing} from");
        let request = self.http.request(Method::GET, &endpoint).query(&filters);
        let call = Call {
            action: &action,
            endpoint: &endpoint,
            target_as_journaled: self.shown(),
            quote_error_body: true,
        };
        let response = self.http.send(call, request).await?;
        response
            .json()
            .await
            .map_err(|e| Error::unreadable(&action, self.shown(), e.without_url()))
    }

    /// Silences every alert of the context's pipeline (matcher `pipeline="<pipeline>"`)
    /// from now, by the context's clock, for at most `max_duration`; the comment carries
    /// the backfill id (the run id when there is none) and `reason`.
    ///
    /// This is the alerting counterpart of suppression: the guard keeps the pipeline
    /// from raising alerts for replayed windows, and the silence mutes the alerts that
    /// rules *outside* the pipeline (freshness, volume) raise while the backfill
    /// rewrites its tables. Call [`BackfillSilence::end`] when the backfill is done;
    /// `max_duration` is the safety net if it never is.
    ///
    /// ```no_run
    /// # async fn run(cx: replaysafe_core::ReplayContext) -> Result<(), replaysafe_alert::Error> {
    /// use std::time::Duration;
    /// use replaysafe_alert::AlertmanagerApi;
    ///
    /// use replaysafe_alert::SsrfPolicy;
    /// let api = AlertmanagerApi::new("http://alertmanager:9093", SsrfPolicy::default().allow_host("alertmanager"))?;
    /// let silence = api
    ///     .begin_backfill_silence(&cx, "recompute July after the currency fix", "jane@ops", Duration::from_secs(6 * 3600))
    ///     .await?;
    /// // ... run the backfill ...
    /// silence.end().await?;
    /// # Ok(()) }
    /// ```
    pub async fn begin_backfill_silence(
        &self,
        cx: &ReplayContext,
        reason: &str,
        created_by: &str,
        max_duration: Duration,
    ) -> Result<BackfillSilence, Error> {
        if reason.trim().is_empty() {
            return Err(Error::invalid(
                "reason",
                "a backfill silence needs a reason",
            ));
        }
        if created_by.trim().is_empty() {
            return Err(Error::invalid(
                "created_by",
                "a backfill silence needs its author",
            ));
        }
        let length = TimeDelta::from_std(max_duration)
            .ok()
            .filter(|length| *length > TimeDelta::zero())
            .ok_or_else(|| Error::invalid("max_duration", "must be more than zero and finite"))?;
        let backfill = cx.backfill_id().unwrap_or(cx.run_id().as_str());
        let starts_at = cx.now();
        let ends_at = starts_at + length;
        let body = json!({
            "matchers": [{
                "name": "pipeline",
                "value": cx.pipeline(),
                "isRegex": false,
                "isEqual": true,
            }],
            "startsAt": rfc3339(starts_at),
            "endsAt": rfc3339(ends_at),
            "createdBy": created_by,
            "comment": format!("replaysafe backfill {backfill}: {reason}"),
        });
        let action = format!(
            "creating a backfill silence for pipeline {} at",
            cx.pipeline()
        );
        let silences = self.base.join(&["api", "v2", "silences"]);
        let call = Call {
            action: &action,
            endpoint: &silences,
            target_as_journaled: self.shown(),
            quote_error_body: true,
        };
        let request = self.http.request(Method::POST, &silences).json(&body);
        let response = self.http.send(call, request).await?;
        #[derive(Deserialize)]
        struct Created {
            #[serde(rename = "silenceID")]
            silence_id: String,
        }
        let created: Created = response
            .json()
            .await
            .map_err(|e| Error::unreadable(&action, self.shown(), e.without_url()))?;
        tracing::info!(
            target: "replaysafe::alert",
            silence_id = %created.silence_id,
            pipeline = cx.pipeline(),
            backfill_id = backfill,
            ends_at = %rfc3339(ends_at),
            "silenced the pipeline's alerts for a backfill"
        );
        Ok(BackfillSilence {
            api: self.clone(),
            id: created.silence_id,
            pipeline: cx.pipeline().to_owned(),
            ends_at,
            ended: false,
        })
    }
}

/// A silence that lasts as long as a backfill; end it with [`BackfillSilence::end`].
///
/// Dropping it cannot expire it (expiring takes a request, and `drop` cannot await): a
/// silence that is dropped without `end` logs a warning and lasts until its
/// `max_duration` runs out.
#[derive(Debug)]
#[must_use = "a backfill silence lasts until `end` is awaited or its max duration runs out"]
pub struct BackfillSilence {
    api: AlertmanagerApi,
    id: String,
    pipeline: String,
    ends_at: DateTime<Utc>,
    ended: bool,
}

impl BackfillSilence {
    /// The silence id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// When Alertmanager ends it if [`end`](Self::end) is never called.
    pub fn ends_at(&self) -> DateTime<Utc> {
        self.ends_at
    }

    /// Expires the silence (`DELETE /api/v2/silence/{id}`).
    pub async fn end(mut self) -> Result<(), Error> {
        let silence = self.api.base.join(&["api", "v2", "silence", &self.id]);
        let action = format!("expiring backfill silence {} at", self.id);
        let call = Call {
            action: &action,
            endpoint: &silence,
            target_as_journaled: self.api.shown(),
            quote_error_body: true,
        };
        let request = self.api.http.request(Method::DELETE, &silence);
        drain(self.api.http.send(call, request).await?).await;
        self.ended = true;
        tracing::info!(
            target: "replaysafe::alert",
            silence_id = %self.id,
            pipeline = %self.pipeline,
            "ended the backfill silence"
        );
        Ok(())
    }
}

impl Drop for BackfillSilence {
    fn drop(&mut self) {
        if !self.ended {
            tracing::warn!(
                target: "replaysafe::alert",
                silence_id = %self.id,
                pipeline = %self.pipeline,
                "backfill silence dropped without end(); it lasts until {}",
                rfc3339(self.ends_at)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_quoted() {
        assert_eq!(
            Matcher::equal("pipeline", "orders").to_filter(),
            "pipeline=\"orders\""
        );
        assert_eq!(
            Matcher::equal("a", "say \"hi\"\\").to_filter(),
            "a=\"say \\\"hi\\\"\\\\\""
        );
    }
}
