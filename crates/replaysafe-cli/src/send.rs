//! `replaysafe send`: the gate for shell scripts and Airflow BashOperator tasks.
//!
//! The context comes from the environment exactly as in the SDK, the journal from
//! `REPLAYSAFE_JOURNAL` or `--journal`; secrets only from environment variables or files.
//!
//! Nothing secret or personal reaches stdout or stderr: an error names the flag and what
//! was wrong without repeating the value, a URL is shown as the journal shows it (scheme,
//! host, port and path at most, through the redaction policy chosen with `--redact`), and
//! an email address as `*@domain` unless `--redact full` is asked for.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use replaysafe_core::{
    Classify, JsonlJournal, Outcome, RedactionPolicy, ReplayContext, SendError, TargetRedaction,
};
use secrecy::SecretString;

/// How a send ended, for the exit code.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Every effect was delivered or suppressed.
    Done,
    /// A delivery was attempted and failed.
    Failed,
}

/// How a target appears on stderr and in the journal (`--redact`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Redact {
    /// A URL as scheme, host, port and path; an email address in full.
    Full,
    /// A URL as scheme, host and port; an email address as `*@domain`.
    Origin,
    /// `sha256:` and 16 hex characters of the target: joinable across journals, not readable.
    Hashed,
}

impl Redact {
    /// The journal's redaction policy for this choice.
    pub fn policy(self) -> RedactionPolicy {
        RedactionPolicy::new(match self {
            Redact::Full => TargetRedaction::Full,
            Redact::Origin => TargetRedaction::DomainOnly,
            Redact::Hashed => TargetRedaction::Hashed,
        })
    }
}

/// A clap value parser for text flags: the value must be UTF-8. The error names the flag
/// and does not repeat the value, which may be a secret.
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8Text;

impl clap::builder::TypedValueParser for Utf8Text {
    type Value = String;

    fn parse_ref(
        &self,
        command: &clap::Command,
        argument: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        value.to_str().map(str::to_owned).ok_or_else(|| {
            let flag = argument
                .and_then(clap::Arg::get_long)
                .map_or_else(|| "a flag".to_owned(), |long| format!("--{long}"));
            clap::Error::raw(
                clap::error::ErrorKind::InvalidUtf8,
                format!("{flag}: the value is not valid UTF-8\n"),
            )
            .with_cmd(command)
        })
    }
}

/// Where the webhook's URL comes from.
#[derive(Debug)]
pub enum UrlSource {
    /// `--url URL`.
    Flag(String),
    /// `--url-env VARIABLE`: the whole URL, query and path secrets included, from the environment.
    Env(String),
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
    /// Headers whose values come from environment variables, `NAME=VARIABLE`.
    pub secret_headers: Vec<String>,
    /// Variable holding a `whsec_` signing secret.
    pub secret_env: Option<String>,
    /// Hosts, addresses or CIDR networks the SSRF guard lets through.
    pub allow_hosts: Vec<String>,
    /// How the endpoint appears on stderr and in the journal.
    pub redact: Redact,
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
    /// How recipients appear on stderr and in the journal.
    pub redact: Redact,
}

/// Reads `@FILE` as the file's contents, anything else as itself.
pub fn text_or_file(flag: &str, value: &str) -> anyhow::Result<String> {
    match value.strip_prefix('@') {
        Some(path) => {
            let bytes = std::fs::read(path).with_context(|| format!("{flag}: reading {path}"))?;
            String::from_utf8(bytes).map_err(|_| anyhow!("{flag}: {path} is not valid UTF-8"))
        }
        None => Ok(value.to_owned()),
    }
}

/// The value of `variable`, which must be set, non-empty and UTF-8. Errors name the flag
/// and the variable, never the value.
fn env_text(flag: &str, variable: &str) -> anyhow::Result<String> {
    match std::env::var_os(variable) {
        None => bail!("{flag}: environment variable {variable} is not set"),
        Some(value) if value.is_empty() => {
            bail!("{flag}: environment variable {variable} is empty")
        }
        Some(value) => value
            .into_string()
            .map_err(|_| anyhow!("{flag}: environment variable {variable} is not valid UTF-8")),
    }
}

fn secret_from_env(flag: &str, variable: &str) -> anyhow::Result<SecretString> {
    env_text(flag, variable).map(SecretString::from)
}

/// `NAME:VALUE`; the error does not repeat the text, whose value part may be a secret.
fn parse_header(text: &str) -> anyhow::Result<(String, String)> {
    let (name, value) = text.split_once(':').ok_or_else(|| {
        anyhow!(
            "--header: expected NAME:VALUE (secret values go in --secret-header-env NAME=VARIABLE)"
        )
    })?;
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

fn parse_secret_header(text: &str) -> anyhow::Result<(String, String)> {
    let (name, variable) = text
        .split_once('=')
        .ok_or_else(|| anyhow!("--secret-header-env: expected NAME=VARIABLE"))?;
    Ok((name.trim().to_owned(), variable.trim().to_owned()))
}

fn context_and_journal(
    journal: Option<&Path>,
) -> anyhow::Result<(ReplayContext, Arc<JsonlJournal>)> {
    let cx = crate::approve::send_context()?;
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

/// The error chain with every personal address replaced by its redacted form: an SMTP
/// server's reply often quotes the recipient (`550 5.1.1 <ana@shop.example>: ...`).
fn scrubbed(text: String, addresses: &[&str], redaction: TargetRedaction) -> String {
    let mut text = text;
    for address in addresses {
        // `Name <user@domain>`: the address is what a server quotes.
        let address = match address.rsplit_once('<') {
            Some((_, rest)) => rest.trim_end().trim_end_matches('>'),
            None => address,
        }
        .trim();
        if address.is_empty() || redaction == TargetRedaction::Full {
            continue;
        }
        let shown = redaction.apply(address).into_owned();
        // ASCII lowercasing keeps byte offsets, so matches map back onto `text`.
        let needle = address.to_ascii_lowercase();
        let mut lowered = text.to_ascii_lowercase();
        let mut from = 0;
        while let Some(found) = lowered[from..].find(&needle) {
            let start = from + found;
            text.replace_range(start..start + needle.len(), &shown);
            lowered = text.to_ascii_lowercase();
            from = start + shown.len();
        }
    }
    text
}

/// One line on stderr saying what happened to one effect; returns whether it failed.
fn announce<R, E: std::error::Error + Classify + 'static>(
    what: &str,
    target: &str,
    result: &Result<Outcome<R>, SendError<E>>,
    scrub: impl Fn(String) -> String,
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
                scrub(replaysafe_core::error_chain(source))
            );
            Ok(true)
        }
        Err(error) => Err(anyhow::Error::msg(format!(
            "{what} to {target}: {}",
            scrub(replaysafe_core::error_chain(error))
        ))),
    }
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
pub async fn webhook(request: WebhookRequest, journal: Option<&Path>) -> anyhow::Result<Ended> {
    use replaysafe_webhook::{SsrfPolicy, Webhook, WebhookClient};
    let url = request.url.read()?;
    let mut policy = SsrfPolicy::default();
    for entry in &request.allow_hosts {
        policy = policy
            .allow(entry)
            .map_err(|e| anyhow!("--allow-host: {e}"))?;
    }
    let mut builder = WebhookClient::builder(url)
        .ssrf_policy(policy)
        .redaction(request.redact.policy());
    for text in &request.headers {
        let (name, value) = parse_header(text)?;
        builder = builder.header(&name, &value);
    }
    for text in &request.secret_headers {
        let (name, variable) = parse_secret_header(text)?;
        builder = builder.secret_header(&name, secret_from_env("--secret-header-env", &variable)?);
    }
    if let Some(variable) = &request.secret_env {
        builder = builder.signing_secret(secret_from_env("--secret-env", variable)?);
    }
    let (cx, journal) = context_and_journal(journal)?;
    let guard = builder.build(journal.clone()).map_err(|e| {
        anyhow!(
            "{}: {}",
            webhook_flag(&request, &e),
            replaysafe_core::error_chain(&e)
        )
    })?;
    let webhook = Webhook::json(&request.event_type, request.data.clone());
    let preview = guard.preview(&cx, &webhook).map_err(|e| match &e {
        SendError::Invalid(invalid) => anyhow!(
            "{}: {}",
            webhook_flag(&request, invalid),
            replaysafe_core::error_chain(invalid)
        ),
        other => anyhow!("{}", replaysafe_core::error_chain(other)),
    })?;
    let target = guard
        .redaction()
        .target()
        .apply(preview.description.target())
        .into_owned();
    let result = guard.send(&cx, &webhook).await;
    let failed = announce(
        &format!("webhook {}", request.event_type),
        &target,
        &result,
        |text| text,
    );
    replaysafe_core::Journal::flush(&*journal)?;
    Ok(if failed? { Ended::Failed } else { Ended::Done })
}

/// An SMTP server given as `smtp://HOST:PORT`.
struct SmtpServer {
    host: String,
    port: u16,
    /// `smtp://host:port`: all that is ever shown of it.
    shown: String,
}

/// Parses `--smtp`. Errors never repeat the text: it may carry a password.
fn parse_smtp(text: &str) -> anyhow::Result<SmtpServer> {
    const EXPECTED: &str = "expected smtp://HOST:PORT";
    let url = url::Url::parse(text.trim()).map_err(|_| anyhow!("--smtp: {EXPECTED}"))?;
    if url.scheme() != "smtp" {
        bail!("--smtp: {EXPECTED} (the scheme is not smtp)");
    }
    if !url.username().is_empty() || url.password().is_some() {
        bail!("--smtp: {EXPECTED}: it carries credentials; pass --user and --password-env");
    }
    if url.query().is_some() || url.fragment().is_some() || !matches!(url.path(), "" | "/") {
        bail!("--smtp: {EXPECTED}, without a path, query or fragment");
    }
    let host = url
        .host_str()
        .filter(|host| !host.is_empty())
        .ok_or_else(|| anyhow!("--smtp: {EXPECTED} (no host)"))?;
    let port = url
        .port()
        .ok_or_else(|| anyhow!("--smtp: {EXPECTED} (no port)"))?;
    let host = host.trim_matches(['[', ']']).to_owned();
    let shown = if host.contains(':') {
        format!("smtp://[{host}]:{port}")
    } else {
        format!("smtp://{host}:{port}")
    };
    Ok(SmtpServer { host, port, shown })
}

/// The flag behind an email field or configuration field.
fn email_flag(field: Option<&str>) -> &'static str {
    match field {
        Some("host" | "port") => "--smtp",
        Some("tls") => "--starttls",
        Some("username") => "--user",
        Some("root_certificate") => "--ca-file",
        Some("from" | "from display name") => "--from",
        Some("subject") => "--subject",
        Some("message_type") => "--message-type",
        Some("recipients") => "--to",
        Some(field) if field.starts_with("to[") => "--to",
        _ => "send email",
    }
}

/// `replaysafe send email`.
pub async fn email(request: EmailRequest, journal: Option<&Path>) -> anyhow::Result<Ended> {
    use replaysafe_email::{Email, EmailClient, EmailGuardExt, TlsMode};
    let server = parse_smtp(&request.smtp)?;
    let mut builder = EmailClient::smtp(&server.host, server.port)
        .tls(if request.starttls {
            TlsMode::StartTls
        } else {
            TlsMode::Plaintext
        })
        .redaction(request.redact.policy());
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
    let (cx, journal) = context_and_journal(journal)?;
    let guard = builder.build(journal.clone()).map_err(|e| {
        anyhow!(
            "{} ({}): {}",
            email_flag(e.field()),
            server.shown,
            replaysafe_core::error_chain(&e)
        )
    })?;
    let redaction = guard.redaction().target();
    let mut addresses: Vec<&str> = request.to.iter().map(String::as_str).collect();
    addresses.push(&request.from);
    let scrub = |text: String| scrubbed(text, &addresses, redaction);

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
        .map_err(|e| match &e {
            SendError::Invalid(invalid) => anyhow!(
                "{}: {}",
                email_flag(invalid.field()),
                scrub(replaysafe_core::error_chain(invalid))
            ),
            other => anyhow!("{}", scrub(replaysafe_core::error_chain(other))),
        })?;
    let mut failed = false;
    for (target, result) in outcomes.iter() {
        failed |= announce(
            &format!("email {}", request.message_type),
            &redaction.apply(target),
            result,
            scrub,
        )?;
    }
    replaysafe_core::Journal::flush(&*journal)?;
    Ok(if failed { Ended::Failed } else { Ended::Done })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_urls_are_parsed_and_never_quoted() {
        let server = parse_smtp("smtp://127.0.0.1:2525").unwrap();
        assert_eq!((server.host.as_str(), server.port), ("127.0.0.1", 2525));
        assert_eq!(server.shown, "smtp://127.0.0.1:2525");
        let server = parse_smtp("smtp://[::1]:25").unwrap();
        assert_eq!(
            (server.host.as_str(), server.shown.as_str()),
            ("::1", "smtp://[::1]:25")
        );
        for bad in [
            "smtp://user:canary-pw@127.0.0.1:25",
            "smtp://canary-user@127.0.0.1:25",
            "smtps://127.0.0.1:25?canary",
            "smtp://127.0.0.1:25/canary",
            "smtp://127.0.0.1:25?canary",
            "smtp://127.0.0.1",
            "canary:25",
            "",
        ] {
            let error = parse_smtp(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                error.starts_with("--smtp: expected smtp://HOST:PORT"),
                "{bad}: {error}"
            );
            assert!(!error.contains("canary"), "{bad}: {error}");
        }
    }

    #[test]
    fn addresses_are_scrubbed_whatever_their_case() {
        let text = "550 5.1.1 <Ana@Shop.Example>: unknown; ana@shop.example again".to_owned();
        assert_eq!(
            scrubbed(text, &["ana@shop.example"], TargetRedaction::DomainOnly),
            "550 5.1.1 <*@shop.example>: unknown; *@shop.example again"
        );
        let hashed = scrubbed(
            "to ana@shop.example".to_owned(),
            &["ana@shop.example"],
            TargetRedaction::Hashed,
        );
        assert!(
            hashed.starts_with("to sha256:") && !hashed.contains("ana"),
            "{hashed}"
        );
    }

    #[test]
    fn header_errors_do_not_repeat_the_value() {
        let error = parse_header("Authorization=Bearer canary")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("--header:") && !error.contains("canary"),
            "{error}"
        );
        assert_eq!(
            parse_header(" X-Team : data eng ").unwrap(),
            ("X-Team".to_owned(), "data eng".to_owned())
        );
    }
}
