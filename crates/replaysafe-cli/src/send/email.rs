//! `replaysafe send email`.

use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use replaysafe_core::{SendError, TargetRedaction};

use super::{Common, Ended, Redact, announce, context_and_journal, finish, secret_from_env};

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
    pub password_env: Option<replaysafe_core::EnvVarName>,
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
pub async fn email(request: EmailRequest, common: &Common) -> anyhow::Result<Ended> {
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
    let (cx, journal) = context_and_journal(common)?;
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
    finish(&journal, Ok(failed))
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
}
