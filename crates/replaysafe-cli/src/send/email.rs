//! `replaysafe send email`.

use std::path::PathBuf;

use anyhow::anyhow;
use replaysafe_core::{SendError, TargetRedaction};

use super::{Common, Ended, Redact, announce, config_error, context_and_journal, finish, layer};

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

/// The flag behind an email field or configuration field.
fn email_flag(field: Option<&str>) -> &'static str {
    match field {
        Some("smtp") => "--smtp",
        Some("starttls") => "--starttls",
        Some("user") => "--user",
        Some("password_env") => "--password-env",
        Some("ca_file") => "--ca-file",
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
    use replaysafe_email::{Email, EmailConfig, EmailGuardExt};
    let mut config = EmailConfig::new(&request.smtp);
    config.starttls = request.starttls;
    config.user = request.user.clone();
    config.password_env = request.password_env.clone();
    config.ca_file = request.ca_file.clone();
    let (cx, journal) = context_and_journal(common)?;
    let guard = config
        .build_with(layer(common, &journal), Some(request.redact.policy()))
        .map_err(|e| match e.field() {
            // What the server said no to is shown with the server.
            field @ (Some("starttls" | "ca_file") | None) => config_error(
                format_args!("{} ({})", email_flag(field), config.shown()),
                field,
                &e,
            ),
            field => config_error(email_flag(field), field, &e),
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
    fn smtp_urls_are_checked_and_never_quoted() {
        use replaysafe_email::EmailConfig;
        assert_eq!(
            EmailConfig::new("smtp://[::1]:25").shown(),
            "smtp://[::1]:25"
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
            let error = EmailConfig::new(bad)
                .build(replaysafe_core::MemoryJournal::new())
                .unwrap_err();
            assert_eq!(error.field(), Some("smtp"), "{bad}");
            let shown = config_error("--smtp", error.field(), &error).to_string();
            assert!(
                shown.starts_with("--smtp: expected smtp://HOST:PORT"),
                "{bad}: {shown}"
            );
            assert!(!shown.contains("canary"), "{bad}: {shown}");
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
