//! `replaysafe send webhook`.

use anyhow::{anyhow, bail};
use replaysafe_core::EnvVarName;

use super::{
    Common, Ended, Redact, context_and_journal, env_text, secret_from_env, send_one, ssrf_policy,
};

/// Where the webhook's URL comes from.
#[derive(Debug)]
pub enum UrlSource {
    /// `--url URL`.
    Flag(String),
    /// `--url-env VARIABLE`: the whole URL, query and path secrets included, from the environment.
    Env(EnvVarName),
}

impl UrlSource {
    /// The flag as errors name it: `--url`, or `--url-env VARIABLE`.
    fn flag(&self) -> String {
        match self {
            UrlSource::Flag(_) => "--url".to_owned(),
            UrlSource::Env(variable) => format!("--url-env {variable}"),
        }
    }

    fn read(&self) -> anyhow::Result<String> {
        match self {
            UrlSource::Flag(url) => Ok(url.clone()),
            UrlSource::Env(variable) => env_text("--url-env", variable),
        }
    }
}

/// A webhook to send.
#[derive(Debug)]
pub struct WebhookRequest {
    /// Endpoint URL.
    pub url: UrlSource,
    /// Event type (the message type).
    pub event_type: String,
    /// JSON body.
    pub data: serde_json::Value,
    /// Plain headers as given, `NAME:VALUE`.
    pub headers: Vec<String>,
    /// Headers whose values come from environment variables: header name and variable.
    pub secret_headers: Vec<(String, EnvVarName)>,
    /// Variable holding a `whsec_` signing secret.
    pub secret_env: Option<EnvVarName>,
    /// Hosts, addresses or CIDR networks the SSRF guard lets through.
    pub allow_hosts: Vec<String>,
    /// How the endpoint appears on stderr and in the journal.
    pub redact: Redact,
}

/// `NAME:VALUE`; the error does not repeat the text, whose value part may be a secret. A
/// header that carries credentials (`Authorization`, `Proxy-Authorization`, ...) is refused
/// here, naming only the header: its value belongs in `--secret-header-env`.
fn parse_header(text: &str) -> anyhow::Result<(String, String)> {
    let (name, value) = text.split_once(':').ok_or_else(|| {
        anyhow!(
            "--header: expected NAME:VALUE (secret values go in --secret-header-env NAME=VARIABLE)"
        )
    })?;
    if let Some(credential) = replaysafe_http::credential_header(name) {
        bail!(
            "--header: {credential} carries credentials and is never given inline: \
             put its value in an environment variable and pass --secret-header-env {credential}=VARIABLE"
        );
    }
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

/// The flag behind a webhook configuration field.
fn webhook_flag(request: &WebhookRequest, error: &replaysafe_webhook::Error) -> String {
    match error.field() {
        Some("endpoint") => request.url.flag(),
        Some("signing_secret") => "--secret-env".to_owned(),
        Some("event_type") => "--event-type".to_owned(),
        Some("header") => {
            let secret = request.headers.is_empty()
                || (!request.secret_headers.is_empty() && error.to_string().contains("secret"));
            if secret {
                "--secret-header-env".to_owned()
            } else {
                "--header".to_owned()
            }
        }
        _ => "send webhook".to_owned(),
    }
}

/// `replaysafe send webhook`.
pub async fn webhook(request: WebhookRequest, common: &Common) -> anyhow::Result<Ended> {
    use replaysafe_webhook::{Webhook, WebhookClient};
    let url = request.url.read()?;
    let mut builder = WebhookClient::builder(url)
        .ssrf_policy(ssrf_policy(&request.allow_hosts)?)
        .redaction(request.redact.policy());
    for text in &request.headers {
        let (name, value) = parse_header(text)?;
        builder = builder.header(&name, &value);
    }
    for (name, variable) in &request.secret_headers {
        builder = builder.secret_header(name, secret_from_env("--secret-header-env", variable)?);
    }
    if let Some(variable) = &request.secret_env {
        builder = builder.signing_secret(secret_from_env("--secret-env", variable)?);
    }
    let (cx, journal) = context_and_journal(common)?;
    let guard = builder.build(journal.clone()).map_err(|e| {
        anyhow!(
            "{}: {}",
            webhook_flag(&request, &e),
            replaysafe_core::error_chain(&e)
        )
    })?;
    let webhook = Webhook::json(&request.event_type, request.data.clone());
    send_one(
        &guard,
        &cx,
        &webhook,
        &format!("webhook {}", request.event_type),
        |invalid| webhook_flag(&request, invalid),
        &journal,
    )
    .await
}
