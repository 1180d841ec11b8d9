//! The one way an HTTP adapter gets a client: SSRF guard, no redirects, no proxy, timeouts.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use replaysafe_core::adapter::PerProcess;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use secrecy::{ExposeSecret, SecretString};

use crate::{Endpoint, Error, ResponseClass, SsrfPolicy, classify_status};

/// The default timeout of one attempt, connection included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// How much of an answer's body is read before it is dropped (so the connection can be
/// reused), and the most of an error answer's body that is read for its message.
const DRAIN_LIMIT: usize = 64 * 1024;
const DETAIL_CHARS: usize = 200;

/// Headers no configuration may set: the transport owns them.
const ALWAYS_RESERVED: [&str; 3] = ["content-length", "host", "transfer-encoding"];

/// Headers whose values are credentials, in lower case: configuration gives them only as
/// secret headers ([`HttpClientBuilder::secret_header`], [`HttpClientBuilder::bearer_token`],
/// [`HttpClientBuilder::basic_auth`]), never as plain ones, so that their values are kept
/// out of `Debug`, logs and errors, and out of command lines and configuration files.
pub const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-auth-token",
];

/// The lower-case name from [`CREDENTIAL_HEADERS`] that `name` is (in any case, blanks
/// around it ignored), when it is one: a front end refuses such a header given inline and
/// points to its secret form, naming the header as this returns it.
///
/// ```
/// assert_eq!(replaysafe_http::credential_header(" Proxy-Authorization"), Some("proxy-authorization"));
/// assert_eq!(replaysafe_http::credential_header("X-Team"), None);
/// ```
pub fn credential_header(name: &str) -> Option<&'static str> {
    let name = name.trim();
    CREDENTIAL_HEADERS
        .into_iter()
        .find(|credential| credential.eq_ignore_ascii_case(name))
}

/// Configures an [`HttpClient`]. Defaults: a 15 s timeout, the default [`SsrfPolicy`]
/// (internal addresses refused), no extra headers.
///
/// ```
/// use replaysafe_http::{HttpClient, SsrfPolicy};
/// use secrecy::SecretString;
///
/// let client = HttpClient::builder("replaysafe-alert")
///     .timeout(std::time::Duration::from_secs(10))
///     .ssrf_policy(SsrfPolicy::default().allow("127.0.0.0/8")?)
///     .bearer_token(SecretString::from("canary-token"))
///     .build()?;
/// assert!(!format!("{client:?}").contains("canary"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct HttpClientBuilder {
    user_agent: String,
    timeout: Duration,
    ssrf: SsrfPolicy,
    headers: Vec<(String, HeaderText)>,
    reserved: Vec<&'static str>,
}

enum HeaderText {
    Plain(String),
    Secret(SecretString),
}

impl fmt::Debug for HttpClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClientBuilder")
            .field("user_agent", &self.user_agent)
            .field("timeout", &self.timeout)
            .field("ssrf", &self.ssrf)
            .field("headers", &header_names(&self.headers))
            .finish_non_exhaustive()
    }
}

/// Header names for `Debug`, secret ones marked: `authorization (secret)`.
fn header_names(headers: &[(String, HeaderText)]) -> Vec<String> {
    headers
        .iter()
        .map(|(name, value)| match value {
            HeaderText::Plain(_) => name.trim().to_ascii_lowercase(),
            HeaderText::Secret(_) => format!("{} (secret)", name.trim().to_ascii_lowercase()),
        })
        .collect()
}

impl HttpClientBuilder {
    /// The timeout of one attempt, connection included (default 15 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Replaces the SSRF policy (default: internal addresses refused).
    pub fn ssrf_policy(mut self, policy: SsrfPolicy) -> Self {
        self.ssrf = policy;
        self
    }

    /// A header sent on every request; its value is not a secret. A header whose value is
    /// a credential ([`CREDENTIAL_HEADERS`]: `Authorization`, `Proxy-Authorization`, ...)
    /// is refused by [`build`](Self::build): give it with
    /// [`secret_header`](Self::secret_header).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_owned(), HeaderText::Plain(value.to_owned())));
        self
    }

    /// A header whose value is a secret: marked sensitive, never printed or put in an error.
    pub fn secret_header(mut self, name: &str, value: SecretString) -> Self {
        self.headers
            .push((name.to_owned(), HeaderText::Secret(value)));
        self
    }

    /// `Authorization: Bearer <token>`, kept secret.
    pub fn bearer_token(self, token: SecretString) -> Self {
        let value = format!("Bearer {}", token.expose_secret().trim());
        self.secret_header(AUTHORIZATION.as_str(), value.into())
    }

    /// `Authorization: Basic …`, the password kept secret.
    pub fn basic_auth(self, username: &str, password: SecretString) -> Self {
        let credentials = format!("{username}:{}", password.expose_secret());
        let value = format!("Basic {}", BASE64.encode(credentials));
        self.secret_header(AUTHORIZATION.as_str(), value.into())
    }

    /// Header names the adapter sets on every request itself (`idempotency-key`, say),
    /// which configuration may not set; names are lower case.
    pub fn reserve_headers(mut self, names: &[&'static str]) -> Self {
        self.reserved.extend_from_slice(names);
        self
    }

    /// Checks the configuration and builds the client; errors name the field
    /// (`timeout`, `header`) and never quote a secret.
    pub fn build(self) -> Result<HttpClient, Error> {
        if self.timeout.is_zero() {
            return Err(Error::config("timeout", "must be longer than zero"));
        }
        let names = header_names(&self.headers);
        let mut headers = HeaderMap::new();
        for (name, value) in self.headers {
            let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                Error::config("header", format!("{name:?} is not a valid header name"))
            })?;
            let reserved = ALWAYS_RESERVED.iter().chain(&self.reserved);
            if reserved.clone().any(|r| *r == header.as_str()) {
                return Err(Error::config(
                    "header",
                    format!(
                        "{header} is set by the client on every request and cannot be configured"
                    ),
                ));
            }
            if let (HeaderText::Plain(_), Some(credential)) =
                (&value, credential_header(header.as_str()))
            {
                return Err(Error::config(
                    "header",
                    format!(
                        "{credential} carries credentials and is never a plain header: give it as a secret header"
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
        let settings = Arc::new(Settings {
            user_agent: self.user_agent,
            headers,
            timeout: self.timeout,
            ssrf: self.ssrf,
        });
        let client = settings.build()?;
        Ok(HttpClient {
            template: client.clone(),
            client: Arc::new(PerProcess::with(client)),
            settings,
            header_names: names,
        })
    }
}

/// What a reqwest client of an [`HttpClient`] is built from, in each process.
struct Settings {
    user_agent: String,
    headers: HeaderMap,
    timeout: Duration,
    ssrf: SsrfPolicy,
}

impl Settings {
    fn build(&self) -> Result<reqwest::Client, Error> {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.timeout)
            .connect_timeout(self.timeout)
            .no_proxy()
            .dns_resolver(self.ssrf.resolver())
            .user_agent(&self.user_agent)
            .default_headers(self.headers.clone())
            .build()
            .map_err(|error| {
                Error::config(
                    "client",
                    format!("building the HTTP client: {}", error.without_url()),
                )
            })
    }
}

/// A reqwest client that every HTTP adapter shares the shape of: redirects never followed,
/// no proxy, a timeout, and the [`SsrfPolicy`] checked on the address actually connected
/// to (in the resolver for host names, before the request for IP literals).
///
/// [`HttpClient::send`] makes one attempt and classifies the answer with
/// [`classify_status`]; retries are the guard's job.
#[derive(Clone)]
pub struct HttpClient {
    /// This process's client and its pool of connections; a child of `fork` builds its own.
    client: Arc<PerProcess<reqwest::Client>>,
    /// Builds requests only ([`HttpClient::request`]); they go out through `client`.
    template: reqwest::Client,
    settings: Arc<Settings>,
    header_names: Vec<String>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("timeout", &self.settings.timeout)
            .field("headers", &self.header_names)
            .field("ssrf", &self.settings.ssrf)
            .finish_non_exhaustive()
    }
}

/// One attempt to make with [`HttpClient::send`].
#[derive(Debug)]
pub struct Call<'a> {
    /// What is being done, for messages: `sending webhook to`.
    pub action: &'a str,
    /// Where the request goes: [`HttpClient::send`] refuses a request built for another
    /// scheme, host, port or path (a query may be added).
    pub endpoint: &'a Endpoint,
    /// The target as the journal shows it (after the redaction policy), for messages.
    pub target_as_journaled: &'a str,
    /// Whether an error answer's body (200 characters at most, control characters
    /// blanked) goes into the message; never for receivers that might echo a secret.
    pub quote_error_body: bool,
}

impl HttpClient {
    /// Starts configuring a client; `product` names the adapter in the `User-Agent`.
    pub fn builder(product: &str) -> HttpClientBuilder {
        HttpClientBuilder {
            user_agent: format!("{product}/{}", env!("CARGO_PKG_VERSION")),
            timeout: DEFAULT_TIMEOUT,
            ssrf: SsrfPolicy::default(),
            headers: Vec::new(),
            reserved: Vec::new(),
        }
    }

    /// A request to `endpoint`'s whole URL, for [`HttpClient::send`].
    pub fn request(&self, method: reqwest::Method, endpoint: &Endpoint) -> reqwest::RequestBuilder {
        self.template.request(method, endpoint.url().clone())
    }

    /// The SSRF policy in force.
    pub fn ssrf_policy(&self) -> &SsrfPolicy {
        &self.settings.ssrf
    }

    /// Makes one attempt: builds `request`, checks that it goes to `call`'s endpoint
    /// (scheme, host, port and path; a query may be added) and that the SSRF policy lets
    /// its URL through (for a host written as an IP literal; the resolver checks names),
    /// sends exactly that request, and returns a 2xx answer; any other answer, or none, is
    /// a classified [`Error`] saying what `call` was doing. The URL checked is the URL
    /// sent: one value crosses the boundary.
    pub async fn send(
        &self,
        call: Call<'_>,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Error> {
        let shown = call.target_as_journaled;
        let request = request
            .build()
            .map_err(|error| Error::transport(call.action, shown, error))?;
        if !same_resource(request.url(), call.endpoint.url()) {
            return Err(Error::config(
                "request",
                format!(
                    "{} {shown}: the request was built for another URL than its endpoint",
                    call.action
                ),
            ));
        }
        self.settings
            .ssrf
            .check_url(request.url())
            .map_err(|refusal| Error::refused(call.action, shown, refusal))?;
        #[cfg(feature = "otel")]
        let mut span = crate::otel::ClientSpan::start(&request, shown);
        // This process's connections: a pool carried across `fork` is the parent's.
        let client = self.client.get_or_try_make(|| self.settings.build())?;
        let response = match client.execute(request).await {
            Ok(response) => response,
            Err(error) => {
                let error = Error::transport(call.action, shown, error);
                #[cfg(feature = "otel")]
                span.unanswered(&replaysafe_core::Classify::error_type(&error));
                return Err(error);
            }
        };
        let status = response.status();
        #[cfg(feature = "otel")]
        span.answered(status.as_u16());
        let class = classify_status(status, response.headers());
        if class == ResponseClass::Success {
            return Ok(response);
        }
        let detail = if call.quote_error_body {
            let body = read_limited(response).await;
            let text: String = String::from_utf8_lossy(&body)
                .trim()
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(DETAIL_CHARS)
                .collect();
            (!text.is_empty()).then_some(text)
        } else {
            drain(response).await;
            None
        };
        Err(Error::from_status(
            call.action,
            shown,
            status.as_u16(),
            class,
            detail,
        ))
    }
}

/// Whether `sent` is `endpoint` with, at most, a query added.
fn same_resource(sent: &url::Url, endpoint: &url::Url) -> bool {
    sent.scheme() == endpoint.scheme()
        && sent.host() == endpoint.host()
        && sent.port_or_known_default() == endpoint.port_or_known_default()
        && sent.path() == endpoint.path()
        && sent.username() == endpoint.username()
        && sent.password() == endpoint.password()
}

/// Reads and drops up to 64 KiB of an answer's body, so its connection can be reused.
pub async fn drain(response: reqwest::Response) {
    read_limited(response).await;
}

async fn read_limited(mut response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < DRAIN_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_built_for_another_url_than_its_endpoint_is_refused_unsent() {
        // Nothing listens on port 9: a request that went out would fail to connect.
        let endpoint = Endpoint::parse("url", "http://127.0.0.1:9/hooks").unwrap();
        let client = HttpClient::builder("t")
            .ssrf_policy(SsrfPolicy::default().allow("127.0.0.1").unwrap())
            .build()
            .unwrap();
        let call = || Call {
            action: "sending to",
            endpoint: &endpoint,
            target_as_journaled: "http://127.0.0.1:9/hooks",
            quote_error_body: false,
        };
        for other in [
            "http://127.0.0.1:9/other",
            "http://169.254.169.254:9/hooks",
            "https://127.0.0.1:9/hooks",
            "http://127.0.0.1:10/hooks",
        ] {
            let request = client.template.post(other);
            let error = client.send(call(), request).await.unwrap_err();
            assert_eq!(error.field(), Some("request"), "{other}: {error}");
        }
        // The endpoint itself, with a query added, is what it is for.
        let request = client
            .request(reqwest::Method::GET, &endpoint)
            .query(&[("a", "1")]);
        let error = client.send(call(), request).await.unwrap_err();
        assert_ne!(error.field(), Some("request"), "{error}");
    }

    #[test]
    fn reserved_and_malformed_headers_are_refused() {
        for (name, value) in [
            ("Idempotency-Key", "x"),
            ("Content-Length", "3"),
            ("bad header", "x"),
            ("x-ok", "line\r\nbreak"),
            ("Authorization", "Bearer canary"),
            ("PROXY-AUTHORIZATION", "Basic canary"),
            ("Cookie", "session=canary"),
        ] {
            let error = HttpClient::builder("t")
                .reserve_headers(&["idempotency-key"])
                .header(name, value)
                .build()
                .unwrap_err();
            assert_eq!(error.field(), Some("header"), "{name}");
            assert!(!error.to_string().contains("canary"), "{error}");
        }
        // The same headers given as secrets are accepted.
        for name in CREDENTIAL_HEADERS {
            HttpClient::builder("t")
                .secret_header(name, "canary".into())
                .build()
                .unwrap();
        }
        let error = HttpClient::builder("t")
            .secret_header("x-api-key", "canary\nvalue".into())
            .build()
            .unwrap_err()
            .to_string();
        assert!(!error.contains("canary"), "{error}");
        let error = HttpClient::builder("t")
            .timeout(Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(error.field(), Some("timeout"));
    }

    #[test]
    fn debug_shows_header_names_not_values() {
        let builder = HttpClient::builder("t")
            .header("X-Team", "data-eng")
            .bearer_token("canary-token".into());
        let shown = format!("{builder:?}");
        assert!(
            shown.contains("x-team") && shown.contains("authorization (secret)"),
            "{shown}"
        );
        assert!(
            !shown.contains("canary") && !shown.contains("data-eng"),
            "{shown}"
        );
        let client = builder.build().unwrap();
        let shown = format!("{client:?}");
        assert!(
            !shown.contains("canary") && !shown.contains("data-eng"),
            "{shown}"
        );
        // Two authorization headers are a configuration error, not a silent override.
        let error = HttpClient::builder("t")
            .bearer_token("a".into())
            .basic_auth("ana", "b".into())
            .build()
            .unwrap_err();
        assert_eq!(error.field(), Some("header"));
    }
}
