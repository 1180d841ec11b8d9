//! `replaysafe send`: the gate for shell scripts and Airflow BashOperator tasks.
//!
//! The context comes from the environment exactly as in the SDK, the journal from
//! `REPLAYSAFE_JOURNAL` or `--journal`; secrets only from environment variables or files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use replaysafe_core::{Classify, JsonlJournal, Outcome, ReplayContext, SendError};
use secrecy::SecretString;

/// How a send ended, for the exit code.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Every effect was delivered or suppressed.
    Done,
    /// A delivery was attempted and failed.
    Failed,
}

/// A webhook to send.
#[derive(Debug)]
pub struct WebhookRequest {
    /// Endpoint URL.
    pub url: String,
    /// Event type (the message type).
    pub event_type: String,
    /// JSON body.
    pub data: serde_json::Value,
    /// Plain headers.
    pub headers: Vec<(String, String)>,
    /// Headers whose values come from environment variables: (name, variable).
    pub secret_headers: Vec<(String, String)>,
    /// Variable holding a `whsec_` signing secret.
    pub secret_env: Option<String>,
    /// Hosts or networks the SSRF guard lets through.
    pub allow_hosts: Vec<String>,
}

/// An email to send.
#[derive(Debug)]
pub struct EmailRequest {
    /// `smtp://HOST:PORT`.
    pub smtp: String,
    /// Require STARTTLS.
    pub starttls: bool,
    /// Login user.
    pub user: Option<String>,
    /// Variable holding the password.
    pub password_env: Option<String>,
    /// Extra trusted root certificate (PEM file).
    pub ca_file: Option<PathBuf>,
    /// Sender.
    pub from: String,
    /// Recipients.
    pub to: Vec<String>,
    /// Subject.
    pub subject: String,
    /// Text body.
    pub body: String,
    /// Message type.
    pub message_type: String,
}

/// Reads `@FILE` as the file's contents, anything else as itself.
pub fn text_or_file(flag: &str, value: &str) -> anyhow::Result<String> {
    match value.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("{flag}: reading {path}"))
        }
        None => Ok(value.to_owned()),
    }
}

fn secret_from_env(flag: &str, variable: &str) -> anyhow::Result<SecretString> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Ok(SecretString::from(value)),
        _ => bail!("{flag}: environment variable {variable} is not set"),
    }
}

fn context_and_journal(
    journal: Option<&Path>,
) -> anyhow::Result<(ReplayContext, Arc<JsonlJournal>)> {
    let cx = ReplayContext::from_env().context("resolving the context from the environment")?;
    let path = journal
        .map(Path::to_path_buf)
        .or_else(|| cx.journal_path().map(Path::to_path_buf))
        .ok_or_else(|| {
            anyhow!(
                "no journal: set REPLAYSAFE_JOURNAL or pass --journal (every decision is journaled)"
            )
        })?;
    let journal = JsonlJournal::open(&path)?;
    Ok((cx, Arc::new(journal)))
}

/// One line on stderr saying what happened to one effect; returns whether it failed.
fn announce<R, E: std::error::Error + Classify + 'static>(
    what: &str,
    target: &str,
    result: &Result<Outcome<R>, SendError<E>>,
) -> anyhow::Result<bool> {
    match result {
        Ok(Outcome::Delivered(delivered)) => {
            eprintln!(
                "replaysafe: delivered {what} to {target} (attempts {}, key {})",
                delivered.attempts, delivered.key
            );
            Ok(false)
        }
        Ok(Outcome::Suppressed(suppressed)) => {
            let reasons: Vec<&str> = suppressed.reasons.iter().map(|r| r.as_str()).collect();
            eprintln!(
                "replaysafe: suppressed {what} to {target}: {} (key {})",
                reasons.join(", "),
                suppressed.key
            );
            Ok(false)
        }
        Err(SendError::Failed { attempts, source }) => {
            eprintln!(
                "replaysafe: failed {what} to {target} after {attempts} attempt(s): {}",
                replaysafe_core::error_chain(source)
            );
            Ok(true)
        }
        Err(error) => Err(anyhow::Error::msg(format!(
            "{what} to {target}: {}",
            replaysafe_core::error_chain(error)
        ))),
    }
}

/// `replaysafe send webhook`.
pub async fn webhook(request: WebhookRequest, journal: Option<&Path>) -> anyhow::Result<Ended> {
    use replaysafe_webhook::{SsrfPolicy, Webhook, WebhookClient};
    let (cx, journal) = context_and_journal(journal)?;
    let mut policy = SsrfPolicy::default();
    for host in &request.allow_hosts {
        policy = policy.allow_host(host);
    }
    let mut builder = WebhookClient::builder(&request.url).ssrf_policy(policy);
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    for (name, variable) in &request.secret_headers {
        builder = builder.secret_header(name, secret_from_env("--secret-header-env", variable)?);
    }
    if let Some(variable) = &request.secret_env {
        builder = builder.signing_secret(secret_from_env("--secret-env", variable)?);
    }
    let guard = builder
        .build_guarded(journal.clone())
        .map_err(|e| anyhow!("--url {}: {e}", request.url))?;
    let webhook = Webhook::json(&request.event_type, &request.data);
    let target = guard
        .preview(&cx, &webhook)
        .map(|(description, _, _)| {
            guard
                .redaction()
                .target()
                .apply(description.target())
                .into_owned()
        })
        .map_err(|e| anyhow!("{}", replaysafe_core::error_chain(&e)))?;
    let result = guard.send(&cx, &webhook).await;
    let failed = announce(&format!("webhook {}", request.event_type), &target, &result);
    replaysafe_core::Journal::flush(&*journal)?;
    Ok(if failed? { Ended::Failed } else { Ended::Done })
}

/// `replaysafe send email`.
pub async fn email(request: EmailRequest, journal: Option<&Path>) -> anyhow::Result<Ended> {
    use replaysafe_email::{Email, EmailClient, EmailGuardExt, TlsMode};
    let address = request
        .smtp
        .strip_prefix("smtp://")
        .ok_or_else(|| anyhow!("--smtp {:?}: expected smtp://HOST:PORT", request.smtp))?;
    let (host, port) = address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.trim_matches(['[', ']']), port.parse::<u16>().ok()?)))
        .ok_or_else(|| anyhow!("--smtp {:?}: expected smtp://HOST:PORT", request.smtp))?;
    let (cx, journal) = context_and_journal(journal)?;
    let mut builder = EmailClient::smtp(host, port).tls(if request.starttls {
        TlsMode::StartTls
    } else {
        TlsMode::Plaintext
    });
    match (&request.user, &request.password_env) {
        (Some(user), Some(variable)) => {
            builder = builder.credentials(user, secret_from_env("--password-env", variable)?);
        }
        (None, None) => {}
        _ => bail!("--user and --password-env go together"),
    }
    if let Some(path) = &request.ca_file {
        let pem = std::fs::read(path)
            .with_context(|| format!("--ca-file: reading {}", path.display()))?;
        builder = builder.root_certificate_pem(pem);
    }
    let guard = builder
        .build_guarded(journal.clone())
        .map_err(|e| anyhow!("--smtp {}: {e}", request.smtp))?;
    let mut email = Email::builder(&request.message_type)
        .from(request.from.as_str())
        .subject(&request.subject)
        .text(&request.body);
    for recipient in &request.to {
        email = email.to(recipient.as_str());
    }
    let outcomes = guard
        .send_email(&cx, &email.build())
        .await
        .map_err(|e| anyhow!("{}", replaysafe_core::error_chain(&e)))?;
    let mut failed = false;
    for (target, result) in outcomes.iter() {
        failed |= announce(&format!("email {}", request.message_type), target, result)?;
    }
    replaysafe_core::Journal::flush(&*journal)?;
    Ok(if failed { Ended::Failed } else { Ended::Done })
}
