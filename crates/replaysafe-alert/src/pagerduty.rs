//! PagerDuty Events API v2: trigger and resolve, keyed by the idempotency key.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, ReplayContext,
    rfc3339,
};
use replaysafe_http::{Call, Endpoint, HttpClient, Method, SsrfPolicy};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use crate::Error;
use crate::alert::{Alert, AlertAction};
use crate::alertmanager::http_client;

/// PagerDuty's public Events API.
pub const DEFAULT_BASE_URL: &str = "https://events.pagerduty.com";

/// Sends alerts as PagerDuty events (`POST {base}/v2/enqueue`); [`PagerDutyClient::builder`]
/// makes a guarded one.
///
/// The `dedup_key` is the effect's idempotency key, derived from the pipeline, the alert
/// name, the service label and the window: a retry, a repeat and the resolve of the same
/// alert all carry the same key, so PagerDuty keeps one incident. 202 is success; 429 and
/// 5xx are transient, 400 (an invalid event) and other 4xx permanent.
///
/// The routing key is a wrapped secret: it is sent in the body and appears in no journal,
/// log line, `Debug` output or error. The journal target is `pagerduty:<service label>`;
/// the payload digest covers the event without `routing_key` and `dedup_key`.
#[derive(Debug)]
pub struct PagerDutyClient {
    enqueue: Endpoint,
    routing_key: SecretString,
    service: String,
    http: HttpClient,
}

/// Configures a [`PagerDutyClient`].
#[derive(Debug)]
pub struct PagerDutyClientBuilder {
    routing_key: SecretString,
    base_url: String,
    service: String,
    timeout: Duration,
    ssrf: SsrfPolicy,
}

/// What PagerDuty answered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PagerDutyReceipt {
    /// The dedup key of the incident (the idempotency key we sent).
    pub dedup_key: String,
}

impl PagerDutyClient {
    /// A builder for events routed with `routing_key` (an integration key of a service).
    pub fn builder(routing_key: SecretString) -> PagerDutyClientBuilder {
        PagerDutyClientBuilder {
            routing_key,
            base_url: DEFAULT_BASE_URL.to_owned(),
            service: "events-v2".to_owned(),
            timeout: Duration::from_secs(10),
            ssrf: SsrfPolicy::default(),
        }
    }

    fn target(&self) -> String {
        format!("pagerduty:{}", self.service)
    }

    /// The event without `routing_key` and `dedup_key`.
    fn event(&self, cx: &ReplayContext, alert: &Alert) -> Value {
        match alert.action {
            AlertAction::Resolve => json!({ "event_action": "resolve" }),
            AlertAction::Trigger => {
                let window = cx.window();
                let mut details: BTreeMap<&str, &str> = alert
                    .labels
                    .iter()
                    .chain(&alert.details)
                    .map(|(name, value)| (name.as_str(), value.as_str()))
                    .collect();
                let window_text = format!("{}/{}", rfc3339(window.start()), rfc3339(window.end()));
                details.insert("pipeline", cx.pipeline());
                details.insert("window", &window_text);
                let mut payload = json!({
                    "summary": alert.summary,
                    "source": alert.source.as_deref().unwrap_or(cx.pipeline()),
                    "severity": alert.severity.as_str(),
                    "timestamp": rfc3339(alert.starts_at.unwrap_or_else(|| cx.now())),
                    "component": alert.name,
                    "group": cx.pipeline(),
                    "custom_details": details,
                });
                if let Some(category) = alert.category {
                    payload["class"] = json!(category.as_str());
                }
                let mut event = json!({
                    "event_action": "trigger",
                    "payload": payload,
                    "client": "replaysafe",
                });
                if let Some(url) = &alert.generator_url {
                    event["links"] = json!([{ "href": url, "text": "generator" }]);
                }
                event
            }
        }
    }
}

impl PagerDutyClientBuilder {
    /// The Events API base URL (default [`DEFAULT_BASE_URL`]); tests point it at a local receiver.
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// The name the journal shows for this routing key (default `events-v2`), such as `data-oncall`.
    pub fn service_label(mut self, label: impl Into<String>) -> Self {
        self.service = label.into();
        self
    }

    crate::alertmanager::http_options!();

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<PagerDutyClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }

    fn build_unguarded(self) -> Result<PagerDutyClient, Error> {
        if self.routing_key.expose_secret().trim().is_empty() {
            return Err(Error::invalid("routing_key", "must not be empty"));
        }
        check_label("service_label", &self.service)?;
        let base = Endpoint::base("base_url", &self.base_url)?;
        let client = PagerDutyClient {
            enqueue: base.join(&["v2", "enqueue"]),
            routing_key: self.routing_key,
            service: self.service,
            http: http_client(self.timeout, self.ssrf)?,
        };
        Ok(client)
    }
}

/// A label shown in journal targets: 1 to 80 visible characters, no whitespace.
pub(crate) fn check_label(field: &'static str, label: &str) -> Result<(), Error> {
    if label.is_empty()
        || label.chars().count() > 80
        || label.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(Error::invalid(
            field,
            "must be 1 to 80 characters without spaces",
        ));
    }
    Ok(())
}

#[async_trait]
impl EffectClient for PagerDutyClient {
    type Effect = Alert;
    type Receipt = PagerDutyReceipt;
    type Error = Error;

    /// The receiver drops repeats: PagerDuty de-duplicates events by `dedup_key`, which is the idempotency key.
    fn dedupes_by_key(&self) -> bool {
        true
    }

    fn describe(&self, cx: &ReplayContext, alert: &Alert) -> Result<EffectDescription, Error> {
        alert.check()?;
        let event =
            serde_json::to_vec(&self.event(cx, alert)).map_err(|e| Error::invalid("alert", e))?;
        EffectDescription::new(EffectKind::Alert, &alert.name, self.target())
            .map_err(|e| Error::invalid("alert name", e))?
            .with_summary(alert.journal_summary())
            .with_payload(&event)
            .with_action(alert.action.as_str())
            .map_err(|e| Error::invalid("alert action", e))
    }

    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        alert: &Alert,
    ) -> Result<PagerDutyReceipt, Error> {
        let mut event = self.event(delivery.context(), alert);
        event["routing_key"] = json!(self.routing_key.expose_secret());
        event["dedup_key"] = json!(delivery.key().as_str());
        let action = format!(
            "sending pagerduty {} of {} to",
            alert.action.as_str(),
            alert.name,
        );
        let call = Call {
            action: &action,
            endpoint: &self.enqueue,
            target_as_journaled: self.enqueue.target(),
            quote_error_body: false,
        };
        let request = self.http.request(Method::POST, &self.enqueue).json(&event);
        let response = self.http.send(call, request).await?;
        let answered = response.json::<Value>().await.ok().and_then(|body| {
            body.get("dedup_key")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        Ok(PagerDutyReceipt {
            dedup_key: answered.unwrap_or_else(|| delivery.key().as_str().to_owned()),
        })
    }
}
