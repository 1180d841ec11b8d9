//! `replaysafe send webhook`.

use anyhow::{anyhow, bail};
use replaysafe_core::EnvVarName;
use replaysafe_webhook::{Webhook, WebhookConfig};

use super::{Common, Ended, Redact, config_error, context_and_journal, layer, send_one};

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

impl WebhookRequest {
    /// The flags as the client's configuration.
    fn config(&self) -> anyhow::Result<WebhookConfig> {
        let mut config = WebhookConfig::default();
        match &self.url {
            UrlSource::Flag(url) => config.url = Some(url.clone()),
            UrlSource::Env(variable) => config.url_env = Some(variable.clone()),
        }
        for text in &self.headers {
            let (name, value) = parse_header(text)?;
            if config.headers.insert(name.clone(), value).is_some() {
                bail!("--header: {name} is given twice");
            }
        }
        for (name, variable) in &self.secret_headers {
            if config
                .secret_headers_env
                .insert(name.clone(), variable.clone())
                .is_some()
            {
                bail!("--secret-header-env: {name} is given twice");
            }
        }
        config.secret_env = self.secret_env.clone();
        config.allow_hosts = self.allow_hosts.clone();
        Ok(config)
    }

    /// The flag behind a configuration field.
    fn flag(&self, field: Option<&str>) -> String {
        match field {
            Some("url") => self.url.flag(),
            Some("url_env") => "--url-env".to_owned(),
            Some("secret_env") => "--secret-env".to_owned(),
            Some("headers") => "--header".to_owned(),
            Some("secret_headers_env") => "--secret-header-env".to_owned(),
            Some("allow_hosts") => "--allow-host".to_owned(),
            Some("event_type") => "--event-type".to_owned(),
            _ => "send webhook".to_owned(),
        }
    }
}

/// `replaysafe send webhook`.
pub async fn webhook(request: WebhookRequest, common: &Common) -> anyhow::Result<Ended> {
    let config = request.config()?;
    let (cx, journal) = context_and_journal(common)?;
    let guard = config
        .build_with(layer(common, &journal), Some(request.redact.policy()))
        .map_err(|e| config_error(request.flag(e.field()), e.field(), &e))?;
    let webhook = Webhook::json(&request.event_type, request.data.clone());
    send_one(
        &guard,
        &cx,
        &webhook,
        &format!("webhook {}", request.event_type),
        |invalid| request.flag(invalid.field()),
        &journal,
    )
    .await
}
