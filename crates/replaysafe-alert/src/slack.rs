//! Slack incoming webhooks: text and blocks, to a URL that is itself a secret.

use std::time::Duration;

use async_trait::async_trait;
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, ReplayContext,
};
use replaysafe_http::{Call, Endpoint, HttpClient, Method, SsrfPolicy, drain};
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::Error;
use crate::alert::{Alert, AlertAction};
use crate::alertmanager::http_client;
use crate::pagerduty::check_label;

/// One message to a Slack incoming webhook: a fallback text and optional Block Kit blocks.
///
/// ```
/// use replaysafe_alert::{Alert, SlackMessage};
/// let message = SlackMessage::new("orders_freshness", "Orders for 2026-08-05 are 3 h late")
///     .with_blocks(vec![serde_json::json!({
///         "type": "section",
///         "text": { "type": "mrkdwn", "text": "*Orders* are 3 h late" }
///     })]);
/// let from_alert = SlackMessage::from_alert(&Alert::trigger("orders_freshness", "3 h late"));
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SlackMessage {
    name: String,
    text: String,
    blocks: Option<Vec<Value>>,
}

impl SlackMessage {
    /// A message named `name` (the journal's message type, as for an [`Alert`]) with `text`.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        SlackMessage {
            name: name.into(),
            text: text.into(),
            blocks: None,
        }
    }

    /// The text of an alert: `[FIRING] name: summary` or `[RESOLVED] name`.
    pub fn from_alert(alert: &Alert) -> Self {
        let text = match alert.action {
            AlertAction::Trigger => format!("[FIRING] {}: {}", alert.name, alert.summary),
            AlertAction::Resolve => format!("[RESOLVED] {}", alert.name),
        };
        SlackMessage::new(&alert.name, text)
    }

    /// Block Kit blocks; `text` stays as the notification fallback.
    pub fn with_blocks(mut self, blocks: Vec<Value>) -> Self {
        self.blocks = Some(blocks);
        self
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn check(&self) -> Result<(), Error> {
        Alert::trigger(&self.name, "-").check().map_err(|_| {
            Error::invalid(
                "message name",
                format!(
                    "{:?} must be 1 to 128 characters of a-z, A-Z, 0-9, _, . and -",
                    self.name
                ),
            )
        })?;
        if self.text.trim().is_empty() {
            return Err(Error::invalid("text", "must not be empty"));
        }
        if self.text.chars().count() > 40_000 {
            return Err(Error::invalid("text", "must be at most 40000 characters"));
        }
        if let Some(blocks) = &self.blocks {
            if blocks.len() > 50 {
                return Err(Error::invalid("blocks", "at most 50 blocks"));
            }
            if blocks
                .iter()
                .any(|block| block.get("type").and_then(Value::as_str).is_none())
            {
                return Err(Error::invalid(
                    "blocks",
                    "every block is an object with a \"type\"",
                ));
            }
        }
        Ok(())
    }

    fn body(&self) -> Value {
        let mut body = json!({ "text": self.text });
        if let Some(blocks) = &self.blocks {
            body["blocks"] = json!(blocks);
        }
        body
    }
}

/// Posts [`SlackMessage`]s to an incoming webhook; [`SlackClient::builder`] makes a guarded one.
///
/// The webhook URL is the credential: it is wrapped, and never appears in the journal,
/// a log line, `Debug` output or an error. The journal target is `slack:<channel label>`
/// (default `slack:incoming-webhook`). 200 is success; 429 (with `Retry-After`) and 5xx
/// are transient; 400 (`invalid_payload`), 403, 404, 410 and other statuses are
/// permanent. Slack takes no idempotency key: a retry after an answer was lost can post
/// twice, which is why only transient answers are retried.
#[derive(Debug)]
pub struct SlackClient {
    url: Endpoint,
    channel: String,
    http: HttpClient,
}

/// Configures a [`SlackClient`].
#[derive(Debug)]
pub struct SlackClientBuilder {
    url: SecretString,
    channel: String,
    timeout: Duration,
    ssrf: SsrfPolicy,
}

impl SlackClient {
    /// A builder for the incoming webhook at `webhook_url` (a secret).
    pub fn builder(webhook_url: SecretString) -> SlackClientBuilder {
        SlackClientBuilder {
            url: webhook_url,
            channel: "incoming-webhook".to_owned(),
            timeout: Duration::from_secs(10),
            ssrf: SsrfPolicy::default(),
        }
    }

    fn target(&self) -> String {
        format!("slack:{}", self.channel)
    }
}

impl SlackClientBuilder {
    /// The name the journal shows for this webhook, such as `#data-alerts`.
    pub fn channel_label(mut self, label: impl Into<String>) -> Self {
        self.channel = label.into();
        self
    }

    crate::alertmanager::http_options!();

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<SlackClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }

    fn build_unguarded(self) -> Result<SlackClient, Error> {
        // The whole URL is the credential: it is shown as its origin at most, and its
        // parse errors never repeat it.
        let url = Endpoint::secret("webhook_url", &self.url)?;
        check_label("channel_label", &self.channel)?;
        Ok(SlackClient {
            url,
            channel: self.channel,
            http: http_client(self.timeout, self.ssrf)?,
        })
    }
}

#[async_trait]
impl EffectClient for SlackClient {
    type Effect = SlackMessage;
    type Receipt = ();
    type Error = Error;

    fn describe(
        &self,
        _cx: &ReplayContext,
        message: &SlackMessage,
    ) -> Result<EffectDescription, Error> {
        message.check()?;
        let body = serde_json::to_vec(&message.body()).map_err(|e| Error::invalid("blocks", e))?;
        Ok(
            EffectDescription::new(EffectKind::Alert, &message.name, self.target())
                .map_err(|e| Error::invalid("message name", e))?
                .with_summary(&message.text)
                .with_payload(&body),
        )
    }

    async fn deliver(&self, _delivery: &Delivery<'_>, message: &SlackMessage) -> Result<(), Error> {
        let action = format!("posting {} to", message.name);
        let target = self.target();
        let call = Call {
            action: &action,
            endpoint: &self.url,
            target_as_journaled: &target,
            quote_error_body: false,
        };
        let request = self
            .http
            .request(Method::POST, &self.url)
            .json(&message.body());
        drain(self.http.send(call, request).await?).await;
        Ok(())
    }
}
