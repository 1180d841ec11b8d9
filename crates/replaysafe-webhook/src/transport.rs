//! The HTTP side shared by webhooks and triggers: configuration, the reqwest client,
//! the SSRF check, idempotency and signature headers, and response classification.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use replaysafe_core::{IdempotencyKey, RedactionPolicy};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use url::Url;

use crate::error::Action;
use crate::signing::signature_header;
use crate::{Error, ResponseClass, SigningSecret, SsrfPolicy, classify_status};

/// The default request timeout, within the 15 to 30 s that Standard Webhooks recommends.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// How much of a response body is read (to keep the connection reusable) before it is dropped.
const DRAIN_LIMIT: usize = 64 * 1024;

/// Headers this crate sets on every request; configuration may not override them.
const RESERVED_HEADERS: [&str; 7] = [
    "idempotency-key",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "content-type",
    "content-length",
    "host",
];

/// Everything a builder collects before the client is built; checked in [`HttpOptions::build`].
#[derive(Default)]
pub(crate) struct HttpOptions {
    pub(crate) method: Option<Method>,
    headers: Vec<(String, HeaderText)>,
    timeout: Option<Duration>,
    signing_secrets: Vec<SecretString>,
    pub(crate) ssrf: SsrfPolicy,
    pub(crate) redaction: Option<RedactionPolicy>,
}

enum HeaderText {
    Plain(String),
    Secret(SecretString),
}

impl fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpOptions")
            .field("method", &self.method)
            .field("headers", &header_names(&self.headers))
            .field("timeout", &self.timeout)
            .field("signing_secrets", &self.signing_secrets.len())
            .field("ssrf", &self.ssrf)
            .field("redaction", &self.redaction)
            .finish()
    }
}

/// Header names for `Debug`, secret ones marked: `authorization (secret)`.
fn header_names(headers: &[(String, HeaderText)]) -> Vec<String> {
    headers
        .iter()
        .map(|(name, value)| match value {
            HeaderText::Plain(_) => name.to_ascii_lowercase(),
            HeaderText::Secret(_) => format!("{} (secret)", name.to_ascii_lowercase()),
        })
        .collect()
}

impl HttpOptions {
    pub(crate) fn header(&mut self, name: &str, value: &str) {
        self.headers
            .push((name.to_owned(), HeaderText::Plain(value.to_owned())));
    }

    pub(crate) fn secret_header(&mut self, name: &str, value: SecretString) {
        self.headers
            .push((name.to_owned(), HeaderText::Secret(value)));
    }

    pub(crate) fn bearer_token(&mut self, token: SecretString) {
        let value = format!("Bearer {}", token.expose_secret().trim());
        self.secret_header(AUTHORIZATION.as_str(), value.into());
    }

    pub(crate) fn basic_auth(&mut self, username: &str, password: SecretString) {
        let credentials = format!("{username}:{}", password.expose_secret());
        let value = format!("Basic {}", BASE64.encode(credentials));
        self.secret_header(AUTHORIZATION.as_str(), value.into());
    }

    pub(crate) fn timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }

    pub(crate) fn signing_secret(&mut self, secret: SecretString) {
        self.signing_secrets.push(secret);
    }

    /// Checks the configuration and builds the reqwest client.
    pub(crate) fn build(self) -> Result<Transport, Error> {
        let timeout = self.timeout.unwrap_or(DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            return Err(Error::config("timeout", "must be longer than zero"));
        }
        let signing_secrets = self
            .signing_secrets
            .into_iter()
            .map(SigningSecret::new)
            .collect::<Result<Vec<_>, _>>()?;

        let header_names = header_names(&self.headers);
        let mut headers = HeaderMap::new();
        for (name, value) in self.headers {
            let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                Error::config("header", format!("{name:?} is not a valid header name"))
            })?;
            if RESERVED_HEADERS.contains(&header.as_str()) {
                return Err(Error::config(
                    "header",
                    format!(
                        "{header} is set by the client on every request and cannot be configured"
                    ),
                ));
            }
            let value = match value {
                HeaderText::Plain(text) => HeaderValue::from_str(&text).map_err(|_| {
                    Error::config(
                        "header",
                        format!("the value of {header} holds characters a header cannot carry (CR, LF, NUL or non-ASCII controls)"),
                    )
                })?,
                HeaderText::Secret(secret) => {
                    let mut value = HeaderValue::from_str(secret.expose_secret()).map_err(|_| {
                        Error::config(
                            "header",
                            format!("the secret value of {header} holds characters a header cannot carry"),
                        )
                    })?;
                    value.set_sensitive(true);
                    value
                }
            };
            if headers.contains_key(&header) {
                return Err(Error::config(
                    "header",
                    format!("{header} is configured twice"),
                ));
            }
            headers.insert(header, value);
        }

        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .no_proxy()
            .dns_resolver(self.ssrf.resolver())
            .user_agent(concat!("replaysafe-webhook/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers)
            .build()
            .map_err(|error| {
                Error::config(
                    "client",
                    format!("building the HTTP client: {}", error.without_url()),
                )
            })?;

        Ok(Transport {
            client,
            ssrf: self.ssrf,
            signing_secrets,
            timeout,
            header_names,
            redaction: self.redaction.unwrap_or_default(),
        })
    }
}

/// A configured HTTP sender: reqwest with redirects off, a timeout, no proxy and the
/// SSRF resolver, plus the signing secrets.
pub(crate) struct Transport {
    client: reqwest::Client,
    ssrf: SsrfPolicy,
    signing_secrets: Vec<SigningSecret>,
    timeout: Duration,
    header_names: Vec<String>,
    redaction: RedactionPolicy,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("timeout", &self.timeout)
            .field("headers", &self.header_names)
            .field("signing_secrets", &self.signing_secrets.len())
            .field("ssrf", &self.ssrf)
            .field("redaction", &self.redaction)
            .finish_non_exhaustive()
    }
}

/// One request to make.
pub(crate) struct Outgoing<'a> {
    pub(crate) action: Action,
    pub(crate) method: Method,
    pub(crate) url: &'a Url,
    /// The journal form of `url` (scheme, host and path), before the redaction policy.
    pub(crate) target: &'a str,
    pub(crate) content_type: &'a str,
    pub(crate) body: Vec<u8>,
    pub(crate) key: &'a IdempotencyKey,
}

impl Transport {
    /// How targets appear in the journal and in this transport's errors.
    pub(crate) fn redaction(&self) -> RedactionPolicy {
        self.redaction
    }

    /// Makes one attempt. The SSRF policy is checked before anything is sent: here for
    /// IP-literal hosts, in the resolver for host names.
    pub(crate) async fn send(&self, outgoing: Outgoing<'_>) -> Result<StatusCode, Error> {
        let Outgoing {
            action,
            method,
            url,
            target,
            content_type,
            body,
            key,
        } = outgoing;
        // Errors show the target exactly as the journal does.
        let target = &*self.redaction.target().apply(target);
        self.ssrf
            .check_url(url)
            .map_err(|refusal| Error::refused(action, target, refusal))?;

        let key = key.as_str();
        // draft-ietf-httpapi-idempotency-key-header: a structured-field string, quoted.
        let mut request = self
            .client
            .request(method, url.clone())
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

        let mut response = request
            .body(body)
            .send()
            .await
            .map_err(|error| Error::transport(action, target, error))?;
        let status = response.status();
        let class = classify_status(status, response.headers());
        // Read a little of the body so the connection can be reused; its content does not matter.
        let mut drained = 0;
        while drained < DRAIN_LIMIT {
            match response.chunk().await {
                Ok(Some(chunk)) => drained += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        match class {
            ResponseClass::Success => Ok(status),
            class => Err(Error::from_status(action, target, status, class)),
        }
    }
}

fn unix_seconds(now: SystemTime) -> i64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
    })
}

/// A parsed endpoint and its journal form (`scheme://host[:port]/path`).
#[derive(Clone)]
pub(crate) struct Endpoint {
    url: Url,
    target: String,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The query string may carry a token: show the journal form only.
        f.write_str(&self.target)
    }
}

impl Endpoint {
    /// Parses an `http` or `https` URL with a host and no credentials; a fragment is dropped.
    /// Errors name `field` and never quote the URL, whose query may hold a secret.
    pub(crate) fn parse(field: &'static str, text: &str) -> Result<Self, Error> {
        let mut url = Url::parse(text.trim())
            .map_err(|error| Error::invalid(field, format!("not an absolute URL ({error})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::invalid(
                field,
                format!("scheme {} is not http or https", url.scheme()),
            ));
        }
        if url.host().is_none() {
            return Err(Error::invalid(field, "has no host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Error::invalid(
                field,
                "carries credentials; configure them with bearer_token, basic_auth or secret_header",
            ));
        }
        url.set_fragment(None);
        Ok(Endpoint::from_url(url))
    }

    /// An endpoint from a URL already checked by [`Endpoint::parse`] and extended.
    pub(crate) fn from_url(url: Url) -> Self {
        let target = url[..url::Position::AfterPath].to_owned();
        Endpoint { url, target }
    }

    pub(crate) fn url(&self) -> &Url {
        &self.url
    }

    /// Scheme, host, port when not the default, and path: what the journal shows.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_keep_scheme_host_and_path_only() {
        let endpoint = Endpoint::parse(
            "endpoint",
            "https://hooks.example:8443/a/b?token=s3cret#frag",
        )
        .unwrap();
        assert_eq!(endpoint.target(), "https://hooks.example:8443/a/b");
        assert_eq!(endpoint.url().query(), Some("token=s3cret"));
        assert_eq!(format!("{endpoint:?}"), "https://hooks.example:8443/a/b");
        let default_port = Endpoint::parse("endpoint", "HTTPS://Hooks.Example:443").unwrap();
        assert_eq!(default_port.target(), "https://hooks.example/");
    }

    #[test]
    fn bad_endpoints_are_named_and_not_quoted() {
        for bad in [
            "hooks.example/x?token=s3cret",
            "ftp://hooks.example/x?token=s3cret",
            "https://user:s3cret@hooks.example/x",
            "https://?token=s3cret",
        ] {
            let error = Endpoint::parse("endpoint", bad).unwrap_err();
            assert_eq!(error.field(), Some("endpoint"), "{bad}");
            assert!(!error.to_string().contains("s3cret"), "{error}");
        }
    }

    #[test]
    fn reserved_and_malformed_headers_are_refused() {
        for (name, value) in [
            ("Idempotency-Key", "x"),
            ("webhook-signature", "x"),
            ("Content-Type", "text/plain"),
            ("bad header", "x"),
            ("x-ok", "line\r\nbreak"),
        ] {
            let mut options = HttpOptions::default();
            options.header(name, value);
            let error = options.build().unwrap_err();
            assert_eq!(error.field(), Some("header"), "{name}");
        }
        let mut options = HttpOptions::default();
        options.secret_header("x-api-key", "canary\nvalue".into());
        let error = options.build().unwrap_err().to_string();
        assert!(!error.contains("canary"), "{error}");
        let mut options = HttpOptions::default();
        options.timeout(Duration::ZERO);
        assert_eq!(options.build().unwrap_err().field(), Some("timeout"));
    }

    #[test]
    fn debug_shows_header_names_not_values() {
        let mut options = HttpOptions::default();
        options.header("X-Team", "data-eng");
        options.bearer_token("canary-token".into());
        options.basic_auth("ana", "canary-password".into());
        let shown = format!("{options:?}");
        assert!(
            shown.contains("x-team") && shown.contains("authorization (secret)"),
            "{shown}"
        );
        assert!(
            !shown.contains("canary") && !shown.contains("data-eng"),
            "{shown}"
        );
        // Two authorization headers are a configuration error, not a silent override.
        assert_eq!(options.build().unwrap_err().field(), Some("header"));
    }
}
