//! What webhooks and triggers add to the shared HTTP client: the idempotency key, the
//! Standard Webhooks signature, and the redaction policy their messages follow.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use replaysafe_core::{IdempotencyKey, RedactionPolicy};
use replaysafe_http::{Call, Endpoint, HttpClient, HttpClientBuilder, SsrfPolicy, drain};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};

use crate::signing::signature_header;
use crate::{Error, SigningSecret};

/// Headers this crate sets on every request; configuration may not override them.
const RESERVED_HEADERS: [&str; 5] = [
    "idempotency-key",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "content-type",
];

/// What was being done, for messages.
pub(crate) const SENDING_WEBHOOK: &str = "sending webhook to";
pub(crate) const SENDING_TRIGGER: &str = "sending trigger to";
pub(crate) const LOGGING_IN: &str = "logging in to";
pub(crate) const LOOKING_UP_RUN: &str = "looking up the dag run at";

/// Everything a builder collects before the client is built; checked in [`HttpOptions::build`].
pub(crate) struct HttpOptions {
    pub(crate) method: Option<Method>,
    pub(crate) http: HttpClientBuilder,
    signing_secrets: Vec<SecretString>,
    pub(crate) redaction: Option<RedactionPolicy>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            method: None,
            http: HttpClient::builder("replaysafe-webhook").reserve_headers(&RESERVED_HEADERS),
            signing_secrets: Vec::new(),
            redaction: None,
        }
    }
}

impl fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpOptions")
            .field("method", &self.method)
            .field("http", &self.http)
            .field("signing_secrets", &self.signing_secrets.len())
            .field("redaction", &self.redaction)
            .finish()
    }
}

impl HttpOptions {
    /// Applies `change` to the shared client's builder.
    pub(crate) fn http(&mut self, change: impl FnOnce(HttpClientBuilder) -> HttpClientBuilder) {
        let http = std::mem::replace(&mut self.http, HttpClient::builder("replaysafe-webhook"));
        self.http = change(http);
    }

    pub(crate) fn ssrf(&mut self, policy: SsrfPolicy) {
        self.http(|http| http.ssrf_policy(policy));
    }

    pub(crate) fn signing_secret(&mut self, secret: SecretString) {
        self.signing_secrets.push(secret);
    }

    /// Checks the configuration and builds the client.
    pub(crate) fn build(self) -> Result<Transport, Error> {
        let signing_secrets = self
            .signing_secrets
            .into_iter()
            .map(SigningSecret::new)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Transport {
            client: self.http.build()?,
            signing_secrets,
            redaction: self.redaction.unwrap_or_default(),
        })
    }
}

/// The shared HTTP client plus the signing secrets and the redaction policy.
pub(crate) struct Transport {
    client: HttpClient,
    signing_secrets: Vec<SigningSecret>,
    redaction: RedactionPolicy,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("client", &self.client)
            .field("signing_secrets", &self.signing_secrets.len())
            .field("redaction", &self.redaction)
            .finish()
    }
}

/// One request to make.
pub(crate) struct Outgoing<'a> {
    pub(crate) action: &'static str,
    pub(crate) method: Method,
    pub(crate) endpoint: &'a Endpoint,
    pub(crate) content_type: &'a str,
    pub(crate) body: Vec<u8>,
    pub(crate) key: &'a IdempotencyKey,
    /// A bearer token obtained for this attempt (Airflow's login), sent as `Authorization`.
    pub(crate) bearer: Option<&'a SecretString>,
}

impl Transport {
    /// How targets appear in the journal and in this transport's errors.
    pub(crate) fn redaction(&self) -> RedactionPolicy {
        self.redaction
    }

    /// The shared HTTP client, for requests made outside [`Transport::call`] (Airflow's login).
    pub(crate) fn client(&self) -> &HttpClient {
        &self.client
    }

    /// Makes one attempt with the idempotency key and, with signing secrets, the
    /// Standard Webhooks headers.
    pub(crate) async fn send(&self, outgoing: Outgoing<'_>) -> Result<StatusCode, Error> {
        let Outgoing {
            action,
            method,
            endpoint,
            content_type,
            body,
            key,
            bearer,
        } = outgoing;
        let key = key.as_str();
        // draft-ietf-httpapi-idempotency-key-header: a structured-field string, quoted.
        let mut request = self
            .client
            .request(method, endpoint)
            .header(CONTENT_TYPE, content_type)
            .header("idempotency-key", format!("\"{key}\""));
        if !self.signing_secrets.is_empty() {
            let timestamp = unix_seconds(SystemTime::now());
            let signature = signature_header(&self.signing_secrets, key, timestamp, &body);
            request = request
                .header("webhook-id", key)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signature);
        }
        let response = self
            .exchange(action, endpoint, request.body(body), bearer)
            .await?;
        let status = response.status();
        drain(response).await;
        Ok(status)
    }

    /// Makes one request that is not the effect itself (a login, a lookup): JSON in and
    /// out, no idempotency key, no signature. Returns the answer's body on a 2xx; any other
    /// answer is an [`Error`] whose [`status`](Error::status) tells which.
    pub(crate) async fn call(
        &self,
        action: &'static str,
        method: Method,
        endpoint: &Endpoint,
        body: Option<Vec<u8>>,
        bearer: Option<&SecretString>,
    ) -> Result<Vec<u8>, Error> {
        let mut request = self
            .client
            .request(method, endpoint)
            .header(ACCEPT, "application/json");
        if let Some(body) = body {
            request = request.header(CONTENT_TYPE, "application/json").body(body);
        }
        let response = self.exchange(action, endpoint, request, bearer).await?;
        let shown = endpoint.shown(self.redaction);
        let body = response
            .bytes()
            .await
            .map_err(|error| Error::unreadable(action, &shown, error.without_url()))?;
        Ok(body.to_vec())
    }
}

impl Transport {
    /// Adds the bearer token, if any, and makes the request; errors show the target
    /// exactly as the journal does.
    async fn exchange(
        &self,
        action: &'static str,
        endpoint: &Endpoint,
        mut request: reqwest::RequestBuilder,
        bearer: Option<&SecretString>,
    ) -> Result<reqwest::Response, Error> {
        if let Some(token) = bearer {
            request = request.header(AUTHORIZATION, bearer_value(token)?);
        }
        let shown = endpoint.shown(self.redaction);
        let call = Call {
            action,
            endpoint,
            target_as_journaled: &shown,
            quote_error_body: false,
        };
        self.client.send(call, request).await
    }
}

/// `Bearer <token>`, marked sensitive so that no debug output shows it.
fn bearer_value(token: &SecretString) -> Result<HeaderValue, Error> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose_secret().trim()))
        .map_err(|_| Error::invalid("bearer token", "is not a valid header value"))?;
    value.set_sensitive(true);
    Ok(value)
}

fn unix_seconds(now: SystemTime) -> i64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_the_client_sets_cannot_be_configured() {
        for name in ["Idempotency-Key", "webhook-signature", "Content-Type"] {
            let mut options = HttpOptions::default();
            options.http(|http| http.header(name, "x"));
            let error = options.build().unwrap_err();
            assert_eq!(error.field(), Some("header"), "{name}");
        }
    }
}
