//! The webhook client and its effect.

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, ReplayContext,
};
use reqwest::Method;

use crate::Error;
use crate::transport::{HttpOptions, Outgoing, SENDING_WEBHOOK, Transport};
use replaysafe_http::Endpoint;

/// Sends webhooks; reached only through a [`Guard`] built by [`WebhookClient::builder`].
///
/// Each delivery carries `Idempotency-Key: "<key>"` and, with signing secrets,
/// `webhook-id: <key>`, `webhook-timestamp` and `webhook-signature` (Standard Webhooks).
/// The key names the logical effect, so it is the same on every retry and every run.
pub struct WebhookClient {
    endpoint: Endpoint,
    method: Method,
    transport: Transport,
}

impl fmt::Debug for WebhookClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoint = self
            .transport
            .redaction()
            .target()
            .apply(self.endpoint.target());
        f.debug_struct("WebhookClient")
            .field("endpoint", &endpoint)
            .field("method", &self.method)
            .field("transport", &self.transport)
            .finish()
    }
}

impl WebhookClient {
    /// Starts configuring a client for `endpoint`, an `http` or `https` URL. Its query
    /// string is sent but never journaled or printed; credentials in it are refused.
    pub fn builder(endpoint: impl Into<String>) -> WebhookClientBuilder {
        WebhookClientBuilder {
            endpoint: endpoint.into(),
            options: HttpOptions::default(),
        }
    }

    /// The endpoint without query string or credentials: scheme, host, port and path.
    /// The journal shows it through the [redaction policy](WebhookClientBuilder::redaction).
    pub fn endpoint(&self) -> &str {
        self.endpoint.target()
    }
}

/// Configures a [`WebhookClient`]; [`build`](WebhookClientBuilder::build) checks
/// everything and returns the guarded client.
///
/// Defaults: `POST`, a 15 s timeout, no redirects followed, no proxy, no signing, and the
/// default [`SsrfPolicy`](crate::SsrfPolicy) (internal addresses refused).
pub struct WebhookClientBuilder {
    endpoint: String,
    options: HttpOptions,
}

impl fmt::Debug for WebhookClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The endpoint is not parsed yet and may hold a secret query: it is not shown.
        f.debug_struct("WebhookClientBuilder")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Builder methods shared by [`WebhookClientBuilder`] and [`crate::TriggerClientBuilder`].
macro_rules! http_options {
    () => {
        /// The HTTP method (default `POST`).
        pub fn method(mut self, method: reqwest::Method) -> Self {
            self.options.method = Some(method);
            self
        }

        /// A header sent on every request. Its value is not treated as a secret: use
        /// [`secret_header`](Self::secret_header) for API keys and the like.
        pub fn header(mut self, name: &str, value: &str) -> Self {
            self.options.http(|http| http.header(name, value));
            self
        }

        /// A header whose value is a secret (an API key, say): marked sensitive, and never
        /// printed, journaled or put in an error.
        pub fn secret_header(mut self, name: &str, value: secrecy::SecretString) -> Self {
            self.options.http(|http| http.secret_header(name, value));
            self
        }

        /// `Authorization: Bearer <token>`, kept secret.
        pub fn bearer_token(mut self, token: secrecy::SecretString) -> Self {
            self.options.http(|http| http.bearer_token(token));
            self
        }

        /// `Authorization: Basic …`, the password kept secret.
        pub fn basic_auth(mut self, username: &str, password: secrecy::SecretString) -> Self {
            self.options
                .http(|http| http.basic_auth(username, password));
            self
        }

        /// The timeout of one attempt, connection included (default 15 s).
        pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
            self.options.http(|http| http.timeout(timeout));
            self
        }

        /// A Standard Webhooks signing secret (`whsec_…`). Call it again to add another:
        /// every secret signs each request, so the receiver can rotate keys.
        pub fn signing_secret(mut self, secret: secrecy::SecretString) -> Self {
            self.options.signing_secret(secret);
            self
        }

        /// Replaces the SSRF policy (default: internal addresses refused).
        pub fn ssrf_policy(mut self, policy: $crate::SsrfPolicy) -> Self {
            self.options.ssrf(policy);
            self
        }

        /// How the endpoint appears in the journal, in log lines and in this client's
        /// errors (default [`TargetRedaction::Full`](replaysafe_core::TargetRedaction::Full):
        /// scheme, host, port and path, never a query or a credential). Choose
        /// [`DomainOnly`](replaysafe_core::TargetRedaction::DomainOnly) (the origin:
        /// scheme, host and port) or [`Hashed`](replaysafe_core::TargetRedaction::Hashed)
        /// when the path itself is a secret, as in a Slack incoming-webhook URL. Set it
        /// here rather than only with [`Guard::with_redaction`](replaysafe_core::Guard::with_redaction),
        /// which does not reach the client's error messages.
        pub fn redaction(mut self, policy: replaysafe_core::RedactionPolicy) -> Self {
            self.options.redaction = Some(policy);
            self
        }
    };
}
pub(crate) use http_options;

impl WebhookClientBuilder {
    http_options!();

    fn build_unguarded(self) -> Result<WebhookClient, Error> {
        let endpoint = Endpoint::parse("endpoint", &self.endpoint)?;
        let method = self.options.method.clone().unwrap_or(Method::POST);
        let transport = self.options.build()?;
        Ok(WebhookClient {
            endpoint,
            method,
            transport,
        })
    }

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<WebhookClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }
}

/// A webhook to send: an event type (the message type), a body, and optionally an
/// endpoint of its own.
///
/// The idempotency key is derived from the pipeline, the event type, the endpoint
/// (scheme, host and path) and the window, not from the body: one event type to one
/// endpoint per window is one logical effect. Give distinct effects in the same window
/// distinct event types.
///
/// It serializes so that an outbox row can hold it: `{"event_type", "content_type",
/// "body", "endpoint"}`, with the body as text when it is UTF-8 and as `"body_base64"`
/// otherwise. `describe` validates it, whether built here or read back.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "WebhookData", try_from = "WebhookData")]
pub struct Webhook {
    event_type: String,
    content_type: String,
    body: Vec<u8>,
    endpoint: Option<String>,
}

/// The serialized form of a [`Webhook`].
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct WebhookData {
    event_type: String,
    content_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
}

impl From<Webhook> for WebhookData {
    fn from(webhook: Webhook) -> Self {
        let (body, body_base64) = match String::from_utf8(webhook.body) {
            Ok(text) => (Some(text), None),
            Err(bytes) => {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(bytes.as_bytes());
                (None, Some(encoded))
            }
        };
        WebhookData {
            event_type: webhook.event_type,
            content_type: webhook.content_type,
            body,
            body_base64,
            endpoint: webhook.endpoint,
        }
    }
}

impl TryFrom<WebhookData> for Webhook {
    type Error = String;

    fn try_from(data: WebhookData) -> Result<Self, String> {
        let body = match (data.body, data.body_base64) {
            (Some(text), None) => text.into_bytes(),
            (None, Some(encoded)) => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|_| "body_base64: not valid base64".to_owned())?
            }
            _ => return Err("a webhook has exactly one of body and body_base64".to_owned()),
        };
        Ok(Webhook {
            event_type: data.event_type,
            content_type: data.content_type,
            body,
            endpoint: data.endpoint,
        })
    }
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("event_type", &self.event_type)
            .field("content_type", &self.content_type)
            .field("body_bytes", &self.body.len())
            .field("endpoint", &self.endpoint.as_ref().map(|_| "[set]"))
            .finish()
    }
}

impl Webhook {
    /// A JSON webhook; the body is `body` serialized compactly.
    pub fn json(event_type: impl Into<String>, body: serde_json::Value) -> Self {
        Webhook {
            event_type: event_type.into(),
            content_type: "application/json".into(),
            body: body.to_string().into_bytes(),
            endpoint: None,
        }
    }

    /// A webhook in the payload shape Standard Webhooks recommends:
    /// `{"type": event_type, "timestamp": occurred_at, "data": data}`.
    ///
    /// `occurred_at` is when the event happened (often the window's end), not when it is
    /// sent, so every attempt sends the same bytes.
    pub fn event(
        event_type: impl Into<String>,
        occurred_at: DateTime<Utc>,
        data: serde_json::Value,
    ) -> Self {
        let event_type = event_type.into();
        let body = serde_json::json!({
            "type": event_type,
            "timestamp": replaysafe_core::rfc3339(occurred_at),
            "data": data,
        });
        Webhook::json(event_type, body)
    }

    /// A webhook with a body of any content type.
    pub fn raw(
        event_type: impl Into<String>,
        content_type: impl Into<String>,
        body: impl Into<Vec<u8>>,
    ) -> Self {
        Webhook {
            event_type: event_type.into(),
            content_type: content_type.into(),
            body: body.into(),
            endpoint: None,
        }
    }

    /// Sends this webhook to `endpoint` instead of the client's; checked in `describe`.
    pub fn to(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The event type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The body bytes, exactly as sent and signed.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The content type.
    pub fn content_type(&self) -> &str {
        &self.content_type
    }
}

/// What a delivered webhook returns.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookReceipt {
    /// The receiver's 2xx status.
    pub status: u16,
}

/// The event type rules: what a journal line and a signed id can carry safely.
pub(crate) fn check_name(field: &'static str, value: &str) -> Result<(), Error> {
    if value.trim().is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.len() > 200 {
        return Err(Error::invalid(field, "must be at most 200 bytes"));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(())
}

impl WebhookClient {
    fn endpoint_for(&self, webhook: &Webhook) -> Result<Option<Endpoint>, Error> {
        webhook
            .endpoint
            .as_deref()
            .map(|text| Endpoint::parse("webhook endpoint", text))
            .transpose()
    }
}

#[async_trait]
impl EffectClient for WebhookClient {
    type Effect = Webhook;
    type Receipt = WebhookReceipt;
    type Error = Error;

    /// The receiver drops repeats: the receiver gets `Idempotency-Key` and `webhook-id` to drop a repeat by.
    fn dedupes_by_key(&self) -> bool {
        true
    }

    fn describe(&self, _cx: &ReplayContext, webhook: &Webhook) -> Result<EffectDescription, Error> {
        check_name("event_type", &webhook.event_type)?;
        if reqwest::header::HeaderValue::from_str(&webhook.content_type).is_err()
            || webhook.content_type.trim().is_empty()
        {
            return Err(Error::invalid(
                "content_type",
                "must be a non-empty header value without control characters",
            ));
        }
        let own = self.endpoint_for(webhook)?;
        let endpoint = own.as_ref().unwrap_or(&self.endpoint);
        Ok(
            EffectDescription::new(EffectKind::Webhook, &webhook.event_type, endpoint.target())?
                .with_payload(&webhook.body)
                .with_summary(&webhook.event_type),
        )
    }

    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        webhook: &Webhook,
    ) -> Result<WebhookReceipt, Error> {
        let own = self.endpoint_for(webhook)?;
        let endpoint = own.as_ref().unwrap_or(&self.endpoint);
        let status = self
            .transport
            .send(Outgoing {
                action: SENDING_WEBHOOK,
                method: self.method.clone(),
                endpoint,
                content_type: &webhook.content_type,
                body: webhook.body.clone(),
                key: delivery.key(),
                bearer: None,
            })
            .await?;
        Ok(WebhookReceipt {
            status: status.as_u16(),
        })
    }

    /// The policy set with [`WebhookClientBuilder::redaction`]; by default the full endpoint.
    fn redaction(&self) -> replaysafe_core::RedactionPolicy {
        self.transport.redaction()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_round_trips_through_json_with_a_text_or_binary_body() {
        let text = Webhook::json("order.created", serde_json::json!({"id": 7}))
            .to("https://partner.example/hooks");
        let json = serde_json::to_string(&text).unwrap();
        assert_eq!(
            json,
            r#"{"event_type":"order.created","content_type":"application/json","body":"{\"id\":7}","endpoint":"https://partner.example/hooks"}"#
        );
        assert_eq!(serde_json::from_str::<Webhook>(&json).unwrap(), text);

        let binary = Webhook::raw("blob", "application/octet-stream", vec![0xff, 0x00, 0x10]);
        let json = serde_json::to_string(&binary).unwrap();
        assert!(json.contains(r#""body_base64":"/wAQ""#), "{json}");
        assert_eq!(serde_json::from_str::<Webhook>(&json).unwrap(), binary);
    }

    #[test]
    fn a_webhook_needs_exactly_one_body() {
        let both =
            r#"{"event_type":"e","content_type":"text/plain","body":"a","body_base64":"YQ=="}"#;
        let error = serde_json::from_str::<Webhook>(both).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("exactly one of body and body_base64"),
            "{error}"
        );
        let neither = r#"{"event_type":"e","content_type":"text/plain"}"#;
        assert!(serde_json::from_str::<Webhook>(neither).is_err());
    }
}
