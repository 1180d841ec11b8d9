//! Airflow 3's login: a username and password exchanged for a JWT, shared by
//! [`TriggerClient`](crate::TriggerClient) and by programs that read Airflow's API
//! (`replaysafe plan --airflow`).

use std::fmt;

use replaysafe_core::RedactionPolicy;
use replaysafe_http::{Call, Endpoint, HttpClient, Method};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use secrecy::{ExposeSecret, SecretString};

use crate::Error;
use crate::transport::LOGGING_IN;

/// Exchanges an Airflow 3 user's password for a JWT at `POST {base}/auth/token`, what
/// Airflow 3's default auth manager (SimpleAuthManager) takes; it answers basic auth with
/// 401. The token is the answer's `access_token`; send it as a bearer token.
///
/// This is the login [`TriggerClientBuilder::airflow_login`](crate::TriggerClientBuilder::airflow_login)
/// makes before each trigger, for a program that reads Airflow's API with a client of its
/// own. Errors show the endpoint as scheme, host, port and path, never the password, the
/// token or the answer's body.
///
/// ```no_run
/// use replaysafe_http::{Endpoint, HttpClient, SsrfPolicy};
/// use secrecy::SecretString;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let base = Endpoint::base("airflow", "http://127.0.0.1:8080")?;
/// let client = HttpClient::builder("my-reader")
///     .ssrf_policy(SsrfPolicy::default().allow("127.0.0.1")?)
///     .build()?;
/// let password = SecretString::from(std::env::var("AIRFLOW_PASSWORD")?);
/// let token = replaysafe_webhook::airflow_token(&client, &base, "reader", &password).await?;
/// # let _ = token;
/// # Ok(()) }
/// ```
pub async fn airflow_token(
    client: &HttpClient,
    base: &Endpoint,
    username: &str,
    password: &SecretString,
) -> Result<SecretString, Error> {
    log_in(client, base, RedactionPolicy::default(), username, password).await
}

/// [`airflow_token`] with errors showing the endpoint as `redaction` says.
pub(crate) async fn log_in(
    client: &HttpClient,
    base: &Endpoint,
    redaction: RedactionPolicy,
    username: &str,
    password: &SecretString,
) -> Result<SecretString, Error> {
    let endpoint = base.join(&["auth", "token"]);
    let shown = endpoint.shown(redaction);
    let body = serde_json::json!({
        "username": username,
        "password": password.expose_secret(),
    });
    let request = client
        .request(Method::POST, &endpoint)
        .header(ACCEPT, "application/json")
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes());
    let call = Call {
        action: LOGGING_IN,
        endpoint: &endpoint,
        target_as_journaled: &shown,
        quote_error_body: false,
    };
    let response = client.send(call, request).await?;
    let answer = response
        .bytes()
        .await
        .map_err(|error| Error::unreadable(LOGGING_IN, &shown, error.without_url()))?;
    serde_json::from_slice::<serde_json::Value>(&answer)
        .ok()
        .and_then(|answer| answer.get("access_token")?.as_str().map(str::to_owned))
        .filter(|token| !token.trim().is_empty())
        .map(SecretString::from)
        .ok_or_else(|| Error::unreadable(LOGGING_IN, &shown, NoAccessToken))
}

/// Airflow's login answered 2xx without an `access_token`.
#[derive(Debug)]
struct NoAccessToken;

impl fmt::Display for NoAccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the answer has no access_token")
    }
}

impl std::error::Error for NoAccessToken {}
