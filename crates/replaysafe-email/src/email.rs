//! The effect: an email, its validation, its journal digest and its lettre message.

use std::fmt;
use std::sync::{Arc, OnceLock};

use lettre::message::header::{ContentTransferEncoding, ContentType};
use lettre::message::{Attachment as LettreAttachment, Body, MultiPart, SinglePart};
use lettre::{Address, Message};
use replaysafe_core::{IdempotencyKey, PayloadDigest};
use sha2::{Digest, Sha256};

use crate::error::{Error, Invalid};

/// Domain separation prefix of the body digest.
const DIGEST_DOMAIN: &[u8] = b"replaysafe.email.body.v1";

/// How many effects one email makes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fanout {
    /// One effect per recipient (the default): each address in to, cc and bcc gets its
    /// own copy, with its own envelope, idempotency key and `Message-ID`; the headers
    /// still show every to and cc address. The key covers (recipient, window, message
    /// type), so a replay that was opted in for one recipient reaches only that one.
    #[default]
    PerRecipient,
    /// One message to every recipient at once; the key covers the recipient set (the
    /// target is the sorted, comma-joined list of addresses).
    OneMessage,
}

/// A sender or recipient: `"ana@shop.example"`, `"Ana Lima <ana@shop.example>"`, or
/// [`Mailbox::named`]. Nothing is checked until the email is described.
#[derive(Clone, PartialEq, Eq)]
pub struct Mailbox(MailboxInput);

#[derive(Clone, PartialEq, Eq)]
enum MailboxInput {
    Text(String),
    Named { name: String, address: String },
}

impl Mailbox {
    /// A mailbox with a display name.
    pub fn named(name: impl Into<String>, address: impl Into<String>) -> Self {
        Mailbox(MailboxInput::Named {
            name: name.into(),
            address: address.into(),
        })
    }
}

impl From<&str> for Mailbox {
    fn from(text: &str) -> Self {
        Mailbox(MailboxInput::Text(text.to_owned()))
    }
}

impl From<String> for Mailbox {
    fn from(text: String) -> Self {
        Mailbox(MailboxInput::Text(text))
    }
}

impl From<&String> for Mailbox {
    fn from(text: &String) -> Self {
        Mailbox(MailboxInput::Text(text.clone()))
    }
}

impl fmt::Debug for Mailbox {
    /// Addresses are personal data: Debug shows only the domain.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match &self.0 {
            MailboxInput::Text(text) => text,
            MailboxInput::Named { address, .. } => address,
        };
        let domain = text
            .rsplit_once('@')
            .map_or("?", |(_, domain)| domain.trim_end_matches('>'));
        write!(f, "Mailbox(*@{})", domain.escape_debug())
    }
}

/// A file attached to an email; a CSV summary is the common case.
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    filename: String,
    content_type: String,
    content: Vec<u8>,
}

impl Attachment {
    /// An attachment with a MIME content type such as `application/pdf`.
    pub fn new(
        filename: impl Into<String>,
        content_type: impl Into<String>,
        content: impl Into<Vec<u8>>,
    ) -> Self {
        Attachment {
            filename: filename.into(),
            content_type: content_type.into(),
            content: content.into(),
        }
    }

    /// A CSV attachment (`text/csv; charset=utf-8`).
    pub fn csv(filename: impl Into<String>, content: impl Into<Vec<u8>>) -> Self {
        Attachment::new(filename, "text/csv; charset=utf-8", content)
    }

    /// The file name.
    pub fn filename(&self) -> &str {
        &self.filename
    }

    /// The content type as given.
    pub fn content_type(&self) -> &str {
        &self.content_type
    }

    /// The content.
    pub fn content(&self) -> &[u8] {
        &self.content
    }
}

impl fmt::Debug for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attachment")
            .field("filename", &self.filename)
            .field("content_type", &self.content_type)
            .field("bytes", &self.content.len())
            .finish()
    }
}

/// An email to send through a guarded [`crate::EmailClient`].
///
/// It serializes so that an outbox row can hold it (addresses, subject, bodies,
/// attachments as base64, fanout, and which recipient a per-recipient effect is for);
/// `describe` validates it, whether built here or read back.
///
/// Built with [`Email::builder`]; the builder checks nothing, so that every check
/// happens in one place, the client's `describe`, before anything is sent. Cloning is
/// cheap (the content is shared), and the validation is done once per email, however
/// many recipients it has.
///
/// With the default [`Fanout::PerRecipient`], an email to several recipients is several
/// effects: send it with [`crate::EmailGuardExt::send_email`], or send each of
/// [`Email::effects`] through the guard. Sending it whole through `Guard::send` is refused
/// (field `recipients`) unless it has exactly one recipient.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(into = "EmailData", from = "EmailData")]
pub struct Email {
    content: Arc<Content>,
    /// The recipient (index into the validated, deduplicated list) this effect is for.
    only: Option<usize>,
}

struct Content {
    message_type: String,
    from: Option<Mailbox>,
    to: Vec<Mailbox>,
    cc: Vec<Mailbox>,
    bcc: Vec<Mailbox>,
    reply_to: Vec<Mailbox>,
    subject: String,
    text: String,
    html: Option<String>,
    attachments: Vec<Attachment>,
    fanout: Fanout,
    validated: OnceLock<Result<Arc<Validated>, Invalid>>,
}

impl fmt::Debug for Email {
    /// No addresses and no body: only what the journal may show.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let content = &self.content;
        f.debug_struct("Email")
            .field("message_type", &content.message_type)
            .field("fanout", &content.fanout)
            .field(
                "recipients",
                &(content.to.len() + content.cc.len() + content.bcc.len()),
            )
            .field("only", &self.only)
            .field("subject", &content.subject)
            .field("text_bytes", &content.text.len())
            .field("html_bytes", &content.html.as_ref().map(String::len))
            .field("attachments", &content.attachments)
            .finish()
    }
}

/// Builds an [`Email`]; see [`Email::builder`].
#[derive(Debug)]
pub struct EmailBuilder {
    content: Content,
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Content")
            .field("message_type", &self.message_type)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

impl Email {
    /// Starts an email of `message_type` (such as `daily_summary`): part of the
    /// idempotency key, with the recipient and the window.
    pub fn builder(message_type: impl Into<String>) -> EmailBuilder {
        EmailBuilder {
            content: Content {
                message_type: message_type.into(),
                from: None,
                to: Vec::new(),
                cc: Vec::new(),
                bcc: Vec::new(),
                reply_to: Vec::new(),
                subject: String::new(),
                text: String::new(),
                html: None,
                attachments: Vec::new(),
                fanout: Fanout::default(),
                validated: OnceLock::new(),
            },
        }
    }

    /// The message type.
    pub fn message_type(&self) -> &str {
        &self.content.message_type
    }

    /// The subject.
    pub fn subject(&self) -> &str {
        &self.content.subject
    }

    /// The fanout mode.
    pub fn fanout(&self) -> Fanout {
        self.content.fanout
    }

    /// Checks the whole email and splits it into its effects: one per distinct
    /// recipient with [`Fanout::PerRecipient`], one with [`Fanout::OneMessage`].
    ///
    /// # Errors
    ///
    /// The first invalid field, as `describe` would report it; no effect is returned, so
    /// nothing of an invalid email is sent.
    pub fn effects(&self) -> Result<Vec<Email>, Error> {
        let validated = self.validated()?;
        Ok(match self.content.fanout {
            Fanout::OneMessage => vec![Email {
                content: Arc::clone(&self.content),
                only: None,
            }],
            Fanout::PerRecipient => (0..validated.recipients.len())
                .map(|index| Email {
                    content: Arc::clone(&self.content),
                    only: Some(index),
                })
                .collect(),
        })
    }

    /// The checked content, computed once and shared by every effect of this email.
    pub(crate) fn validated(&self) -> Result<Arc<Validated>, Error> {
        self.content
            .validated
            .get_or_init(|| validate(&self.content).map(Arc::new))
            .clone()
            .map_err(Error::from)
    }

    /// The envelope recipients of this effect, as indexes into the validated list.
    fn recipient_indexes(&self, validated: &Validated) -> Result<Vec<usize>, Error> {
        let count = validated.recipients.len();
        match (self.only, self.content.fanout) {
            (Some(index), _) if index < count => Ok(vec![index]),
            (Some(index), _) => Err(Invalid::new(
                "only",
                format!("recipient {index} of {count}: no such recipient"),
            )
            .into()),
            (None, Fanout::OneMessage) => Ok((0..count).collect()),
            (None, Fanout::PerRecipient) if count == 1 => Ok(vec![0]),
            (None, Fanout::PerRecipient) => Err(Invalid::new(
                "recipients",
                format!(
                    "{count} recipients make {count} effects in per-recipient mode: \
                     send them with EmailGuardExt::send_email or Email::effects, \
                     or build the email with one_message()"
                ),
            )
            .into()),
        }
    }

    /// The effect's target: its recipient, or the sorted, comma-joined recipient set.
    pub(crate) fn target(&self, validated: &Validated) -> Result<String, Error> {
        let indexes = self.recipient_indexes(validated)?;
        let mut addresses: Vec<&str> = indexes
            .iter()
            .map(|&index| validated.recipients[index].as_ref())
            .collect();
        addresses.sort_unstable();
        Ok(addresses.join(","))
    }

    /// The lettre message of this effect, with `Message-ID: <{key}@{sender domain}>`.
    pub(crate) fn message(
        &self,
        validated: &Validated,
        key: &IdempotencyKey,
    ) -> Result<Message, Error> {
        let content = &self.content;
        let envelope_to = self
            .recipient_indexes(validated)?
            .into_iter()
            .map(|index| validated.recipients[index].clone())
            .collect();
        let envelope =
            lettre::address::Envelope::new(Some(validated.from.email.clone()), envelope_to)
                .map_err(|e| Invalid::new("recipients", e.to_string()))?;

        let mut builder = Message::builder()
            .from(validated.from.clone())
            .subject(content.subject.clone())
            .message_id(Some(validated.message_id(key)))
            .envelope(envelope);
        for mailbox in &validated.to {
            builder = builder.to(mailbox.clone());
        }
        for mailbox in &validated.cc {
            builder = builder.cc(mailbox.clone());
        }
        for mailbox in &validated.bcc {
            builder = builder.bcc(mailbox.clone());
        }
        for mailbox in &validated.reply_to {
            builder = builder.reply_to(mailbox.clone());
        }

        let text = SinglePart::plain(content.text.clone());
        let built = match (&content.html, content.attachments.is_empty()) {
            (None, true) => builder.singlepart(text),
            (Some(html), true) => builder.multipart(MultiPart::alternative_plain_html(
                content.text.clone(),
                html.clone(),
            )),
            (html, false) => {
                let mut mixed = match html {
                    Some(html) => MultiPart::mixed().multipart(MultiPart::alternative_plain_html(
                        content.text.clone(),
                        html.clone(),
                    )),
                    None => MultiPart::mixed().singlepart(text),
                };
                for (attachment, content_type) in
                    content.attachments.iter().zip(&validated.content_types)
                {
                    // Base64 always: the receiver gets the exact bytes, line endings included.
                    let body = Body::new_with_encoding(
                        attachment.content.clone(),
                        ContentTransferEncoding::Base64,
                    )
                    .map_err(|_| Invalid::new("attachment", "cannot be encoded as base64"))?;
                    mixed = mixed.singlepart(
                        LettreAttachment::new(attachment.filename.clone())
                            .body(body, content_type.clone()),
                    );
                }
                builder.multipart(mixed)
            }
        };
        built.map_err(|e| Invalid::new("message", e.to_string()).into())
    }
}

impl EmailBuilder {
    /// The sender; its domain names the `Message-ID`.
    pub fn from(mut self, mailbox: impl Into<Mailbox>) -> Self {
        self.content.from = Some(mailbox.into());
        self
    }

    /// Adds a `To` recipient.
    pub fn to(mut self, mailbox: impl Into<Mailbox>) -> Self {
        self.content.to.push(mailbox.into());
        self
    }

    /// Adds a `Cc` recipient.
    pub fn cc(mut self, mailbox: impl Into<Mailbox>) -> Self {
        self.content.cc.push(mailbox.into());
        self
    }

    /// Adds a blind recipient: in the envelope, never in the headers.
    pub fn bcc(mut self, mailbox: impl Into<Mailbox>) -> Self {
        self.content.bcc.push(mailbox.into());
        self
    }

    /// Adds a `Reply-To` address.
    pub fn reply_to(mut self, mailbox: impl Into<Mailbox>) -> Self {
        self.content.reply_to.push(mailbox.into());
        self
    }

    /// The subject; the journal's summary unless the redaction policy hides summaries.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.content.subject = subject.into();
        self
    }

    /// The plain-text body.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.content.text = text.into();
        self
    }

    /// An HTML alternative to the text body.
    pub fn html(mut self, html: impl Into<String>) -> Self {
        self.content.html = Some(html.into());
        self
    }

    /// Adds an attachment.
    pub fn attachment(mut self, attachment: Attachment) -> Self {
        self.content.attachments.push(attachment);
        self
    }

    /// One message to every recipient, keyed by the recipient set ([`Fanout::OneMessage`]).
    pub fn one_message(mut self) -> Self {
        self.content.fanout = Fanout::OneMessage;
        self
    }

    /// Sets the fanout mode.
    pub fn fanout(mut self, fanout: Fanout) -> Self {
        self.content.fanout = fanout;
        self
    }

    /// The email. Nothing is checked here: the client's `describe` checks everything.
    pub fn build(self) -> Email {
        Email {
            content: Arc::new(self.content),
            only: None,
        }
    }
}

/// An email whose every field was checked.
pub(crate) struct Validated {
    from: lettre::message::Mailbox,
    sender_domain: String,
    to: Vec<lettre::message::Mailbox>,
    cc: Vec<lettre::message::Mailbox>,
    bcc: Vec<lettre::message::Mailbox>,
    reply_to: Vec<lettre::message::Mailbox>,
    /// Distinct envelope recipients (domain lowercased), in order of first appearance.
    recipients: Vec<Address>,
    content_types: Vec<ContentType>,
    pub(crate) digest: PayloadDigest,
}

impl Validated {
    /// `<{key}@{sender domain}>`.
    pub(crate) fn message_id(&self, key: &IdempotencyKey) -> String {
        format!("<{}@{}>", key.as_str(), self.sender_domain)
    }
}

/// Refuses CR, LF, NUL and other control characters (tab aside) in a header value.
fn check_header_text(field: &str, value: &str) -> Result<(), Invalid> {
    if value.contains(['\r', '\n']) {
        return Err(Invalid::new(field, "contains CR or LF"));
    }
    if value.contains('\0') {
        return Err(Invalid::new(field, "contains NUL"));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(Invalid::new(field, "contains a control character"));
    }
    Ok(())
}

fn parse_mailbox(field: &str, mailbox: &Mailbox) -> Result<lettre::message::Mailbox, Invalid> {
    match &mailbox.0 {
        MailboxInput::Text(text) => {
            // Say whether the forbidden character sits in the display name or the address.
            if let Some((name, address)) = text.rsplit_once('<') {
                check_header_text(&format!("{field} display name"), name)?;
                check_header_text(field, address)?;
            } else {
                check_header_text(field, text)?;
            }
            let parsed: lettre::message::Mailbox = text.trim().parse().map_err(|_| {
                Invalid::new(
                    field,
                    "not an email address or a mailbox such as \"Name <user@domain>\"",
                )
            })?;
            Ok(normalized(parsed))
        }
        MailboxInput::Named { name, address } => {
            check_header_text(&format!("{field} display name"), name)?;
            check_header_text(field, address)?;
            let address: Address = address
                .trim()
                .parse()
                .map_err(|_| Invalid::new(field, "not an email address"))?;
            let name = Some(name.trim().to_owned()).filter(|name| !name.is_empty());
            Ok(normalized(lettre::message::Mailbox::new(name, address)))
        }
    }
}

/// Lowercases the domain, which is case-insensitive, so keys do not depend on its case.
fn normalized(mailbox: lettre::message::Mailbox) -> lettre::message::Mailbox {
    let domain = mailbox.email.domain().to_ascii_lowercase();
    if domain == mailbox.email.domain() {
        return mailbox;
    }
    match Address::new(mailbox.email.user(), &domain) {
        Ok(email) => lettre::message::Mailbox::new(mailbox.name, email),
        Err(_) => mailbox,
    }
}

fn parse_list(
    field: &str,
    mailboxes: &[Mailbox],
) -> Result<Vec<lettre::message::Mailbox>, Invalid> {
    mailboxes
        .iter()
        .enumerate()
        .map(|(index, mailbox)| parse_mailbox(&format!("{field}[{index}]"), mailbox))
        .collect()
}

fn validate(content: &Content) -> Result<Validated, Invalid> {
    let message_type = content.message_type.as_str();
    check_header_text("message_type", message_type)?;
    if message_type.trim().is_empty() {
        return Err(Invalid::new("message_type", "must not be empty"));
    }

    let from = match &content.from {
        Some(mailbox) => parse_mailbox("from", mailbox)?,
        None => return Err(Invalid::new("from", "missing: every email needs a sender")),
    };
    let to = parse_list("to", &content.to)?;
    let cc = parse_list("cc", &content.cc)?;
    let bcc = parse_list("bcc", &content.bcc)?;
    let reply_to = parse_list("reply_to", &content.reply_to)?;
    check_header_text("subject", &content.subject)?;

    let mut content_types = Vec::with_capacity(content.attachments.len());
    for (index, attachment) in content.attachments.iter().enumerate() {
        let field = format!("attachment[{index}] filename");
        check_header_text(&field, &attachment.filename)?;
        if attachment.filename.trim().is_empty() {
            return Err(Invalid::new(field, "must not be empty"));
        }
        let field = format!("attachment[{index}] content type");
        check_header_text(&field, &attachment.content_type)?;
        content_types.push(
            ContentType::parse(&attachment.content_type)
                .map_err(|_| Invalid::new(field, "not a MIME type such as text/csv"))?,
        );
    }

    let mut recipients: Vec<Address> = Vec::new();
    for mailbox in to.iter().chain(&cc).chain(&bcc) {
        if !recipients.contains(&mailbox.email) {
            recipients.push(mailbox.email.clone());
        }
    }
    if recipients.is_empty() {
        return Err(Invalid::new("recipients", "no recipient in to, cc or bcc"));
    }

    Ok(Validated {
        sender_domain: from.email.domain().to_owned(),
        from,
        to,
        cc,
        bcc,
        reply_to,
        recipients,
        content_types,
        digest: body_digest(content),
    })
}

/// The journal's payload digest: SHA-256 of `replaysafe.email.body.v1`, then
/// `t` + netstring(text), then `h` + netstring(html) if any, then for each attachment
/// `a` + netstring(filename) + netstring(content type) + netstring(content). The size is
/// the text, HTML and attachment bytes together. Headers (the Date, the MIME boundaries)
/// are left out, so the same email digests the same on every run.
fn body_digest(content: &Content) -> PayloadDigest {
    fn netstring(hasher: &mut Sha256, bytes: &[u8]) {
        hasher.update(bytes.len().to_string().as_bytes());
        hasher.update(b":");
        hasher.update(bytes);
        hasher.update(b",");
    }
    let mut hasher = Sha256::new();
    hasher.update(DIGEST_DOMAIN);
    hasher.update(b"t");
    netstring(&mut hasher, content.text.as_bytes());
    let mut bytes = content.text.len();
    if let Some(html) = &content.html {
        hasher.update(b"h");
        netstring(&mut hasher, html.as_bytes());
        bytes += html.len();
    }
    for attachment in &content.attachments {
        hasher.update(b"a");
        netstring(&mut hasher, attachment.filename.as_bytes());
        netstring(&mut hasher, attachment.content_type.as_bytes());
        netstring(&mut hasher, &attachment.content);
        bytes += attachment.content.len();
    }
    PayloadDigest::from_parts(hasher.finalize().into(), bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_round_trips_through_json_effect_by_effect() {
        let email = Email::builder("daily_summary")
            .from(Mailbox::named("Shop", "shop@shop.example"))
            .to("ana@shop.example")
            .to("Bo <bo@shop.example>")
            .subject("Your orders")
            .text("3 orders")
            .attachment(Attachment::csv("orders.csv", "id\n1\n"))
            .build();
        for effect in email.effects().unwrap() {
            let json = serde_json::to_string(&effect).unwrap();
            let back: Email = serde_json::from_str(&json).unwrap();
            let validated = back.validated().unwrap();
            assert_eq!(
                back.target(&validated).unwrap(),
                effect.target(&effect.validated().unwrap()).unwrap()
            );
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
        let json = serde_json::to_string(&email.effects().unwrap()[1]).unwrap();
        assert!(json.contains(r#""content_base64":"aWQKMQo=""#), "{json}");
        assert!(
            json.contains(r#"{"name":"Shop","address":"shop@shop.example"}"#),
            "{json}"
        );
        assert!(json.contains(r#""only":1"#), "{json}");
    }

    #[test]
    fn a_read_back_email_naming_a_missing_recipient_is_invalid_not_a_panic() {
        let json = r#"{"message_type":"m","from":"a@x.example","to":["b@x.example"],"subject":"s","text":"t","only":5}"#;
        let email: Email = serde_json::from_str(json).unwrap();
        let error = email.target(&email.validated().unwrap()).unwrap_err();
        assert!(error.to_string().contains("only"), "{error}");
    }

    fn base() -> EmailBuilder {
        Email::builder("daily_summary")
            .from("Reports <reports@Shop.Example>")
            .to("ana@shop.example")
            .subject("Daily orders")
            .text("42 orders")
    }

    fn problem(email: &Email) -> String {
        email.validated().err().expect("invalid").to_string()
    }

    #[test]
    fn every_header_refuses_cr_lf_and_nul_naming_the_field() {
        let cases = [
            (
                base().subject("Hi\r\nBcc: x@evil.example").build(),
                "subject: contains CR or LF",
            ),
            (
                base().subject("Hi\nthere").build(),
                "subject: contains CR or LF",
            ),
            (base().subject("Hi\0").build(), "subject: contains NUL"),
            (
                base().subject("Hi\x1b[1m").build(),
                "subject: contains a control character",
            ),
            (
                base()
                    .to("Ana\r\nBcc: x@evil.example <ana@shop.example>")
                    .build(),
                "to[1] display name: contains CR or LF",
            ),
            (
                base()
                    .to(Mailbox::named("Ana\n", "ana@shop.example"))
                    .build(),
                "to[1] display name: contains CR or LF",
            ),
            (
                base().cc("bo@shop.example\r\nBcc: x@evil.example").build(),
                "cc[0]: contains CR or LF",
            ),
            (
                base().bcc("cy@shop\0.example").build(),
                "bcc[0]: contains NUL",
            ),
            (
                base().reply_to("Help <help@shop.example>\n").build(),
                "reply_to[0]: contains CR or LF",
            ),
            (
                base().from("reports@shop.example\r\n").build(),
                "from: contains CR or LF",
            ),
            (
                base().attachment(Attachment::csv("a\r\n.csv", "x")).build(),
                "attachment[0] filename: contains CR or LF",
            ),
            (
                base()
                    .attachment(Attachment::new("a.csv", "text/csv\r\nX: y", "x"))
                    .build(),
                "attachment[0] content type: contains CR or LF",
            ),
            (
                Email::builder("daily\nsummary")
                    .from("a@b.example")
                    .to("c@d.example")
                    .build(),
                "message_type: contains CR or LF",
            ),
        ];
        for (email, expected) in cases {
            let message = problem(&email);
            assert_eq!(message, format!("invalid email field {expected}"));
        }
    }

    #[test]
    fn addresses_must_parse_and_recipients_must_exist() {
        let message = problem(&base().to("not-an-address").build());
        assert!(
            message.starts_with("invalid email field to[1]: not an email address"),
            "{message}"
        );
        let message = problem(&base().cc(Mailbox::named("Bo", "bo@")).build());
        assert!(
            message.starts_with("invalid email field cc[0]: not an email address"),
            "{message}"
        );
        let message = problem(&Email::builder("x").from("a@b.example").build());
        assert_eq!(
            message,
            "invalid email field recipients: no recipient in to, cc or bcc"
        );
        let message = problem(&Email::builder("x").to("a@b.example").build());
        assert!(
            message.starts_with("invalid email field from: missing"),
            "{message}"
        );
        let message = problem(
            &Email::builder(" ")
                .from("a@b.example")
                .to("c@d.example")
                .build(),
        );
        assert_eq!(
            message,
            "invalid email field message_type: must not be empty"
        );
        let message = problem(
            &base()
                .attachment(Attachment::new("a.bin", "not a type", "x"))
                .build(),
        );
        assert!(
            message.starts_with("invalid email field attachment[0] content type"),
            "{message}"
        );
    }

    #[test]
    fn recipients_are_distinct_with_lowercased_domains() {
        let email = base()
            .to("Ana <ana@SHOP.example>")
            .cc("bo@partner.example")
            .bcc("ana@shop.example")
            .build();
        let validated = email.validated().unwrap();
        let recipients: Vec<String> = validated
            .recipients
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(recipients, ["ana@shop.example", "bo@partner.example"]);
        assert_eq!(validated.sender_domain, "shop.example");

        let effects = email.effects().unwrap();
        assert_eq!(effects.len(), 2);
        assert_eq!(effects[1].target(&validated).unwrap(), "bo@partner.example");
        let error = email.target(&validated).unwrap_err();
        assert_eq!(error.field(), Some("recipients"));

        let together = base()
            .cc("bo@partner.example")
            .to("zed@a.example")
            .one_message()
            .build();
        let validated = together.validated().unwrap();
        assert_eq!(together.effects().unwrap().len(), 1);
        assert_eq!(
            together.target(&validated).unwrap(),
            "ana@shop.example,bo@partner.example,zed@a.example"
        );
    }

    #[test]
    fn digest_covers_bodies_and_attachments_not_headers() {
        let one = base()
            .attachment(Attachment::csv("a.csv", "x,y\n1,2\n"))
            .build();
        let same = base()
            .subject("Other subject")
            .attachment(Attachment::csv("a.csv", "x,y\n1,2\n"))
            .build();
        let other = base()
            .attachment(Attachment::csv("a.csv", "x,y\n1,3\n"))
            .build();
        let with_html = base()
            .html("<p>42 orders</p>")
            .attachment(Attachment::csv("a.csv", "x,y\n1,2\n"))
            .build();
        let digest = |email: &Email| email.validated().unwrap().digest;
        assert_eq!(digest(&one), digest(&same));
        assert_ne!(digest(&one), digest(&other));
        assert_ne!(digest(&one), digest(&with_html));
        assert_eq!(
            digest(&one).bytes(),
            ("42 orders".len() + "x,y\n1,2\n".len()) as u64
        );
    }

    #[test]
    fn debug_shows_no_address_and_no_body() {
        let email = base()
            .text("canary-body-7f3a")
            .to(Mailbox::named("Bo", "bo@partner.example"))
            .build();
        let shown = format!("{email:?} {:?}", Mailbox::from("ana@shop.example"));
        assert!(
            !shown.contains("canary-body-7f3a")
                && !shown.contains("ana@")
                && !shown.contains("bo@"),
            "{shown}"
        );
        assert!(shown.contains("*@shop.example"), "{shown}");
    }

    #[test]
    fn message_carries_the_deterministic_message_id_and_hides_bcc() {
        let email = base().bcc("cy@shop.example").one_message().build();
        let validated = email.validated().unwrap();
        let key = IdempotencyKey::derive(
            "p",
            &replaysafe_core::EffectKind::Email,
            "daily_summary",
            "ana@shop.example,cy@shop.example",
            &replaysafe_test::contexts::current_window(),
        );
        let message = email.message(&validated, &key).unwrap();
        let formatted = String::from_utf8(message.formatted()).unwrap();
        assert!(
            formatted.contains(&format!("Message-ID: <{}@shop.example>", key.as_str())),
            "{formatted}"
        );
        assert!(!formatted.contains("Bcc:"), "{formatted}");
        let envelope: Vec<String> = message
            .envelope()
            .to()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(envelope, ["ana@shop.example", "cy@shop.example"]);
    }
}

/// The serialized form of a [`Mailbox`]: its text, or a display name and an address.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum MailboxData {
    Text(String),
    Named { name: String, address: String },
}

impl From<&Mailbox> for MailboxData {
    fn from(mailbox: &Mailbox) -> Self {
        match &mailbox.0 {
            MailboxInput::Text(text) => MailboxData::Text(text.clone()),
            MailboxInput::Named { name, address } => MailboxData::Named {
                name: name.clone(),
                address: address.clone(),
            },
        }
    }
}

impl From<MailboxData> for Mailbox {
    fn from(data: MailboxData) -> Self {
        match data {
            MailboxData::Text(text) => Mailbox(MailboxInput::Text(text)),
            MailboxData::Named { name, address } => Mailbox::named(name, address),
        }
    }
}

/// The serialized form of an [`Attachment`].
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct AttachmentData {
    filename: String,
    content_type: String,
    #[serde(with = "base64_bytes")]
    content_base64: Vec<u8>,
}

mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|_| serde::de::Error::custom("content_base64: not valid base64"))
    }
}

/// The serialized form of an [`Email`].
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct EmailData {
    message_type: String,
    #[serde(default)]
    from: Option<MailboxData>,
    #[serde(default)]
    to: Vec<MailboxData>,
    #[serde(default)]
    cc: Vec<MailboxData>,
    #[serde(default)]
    bcc: Vec<MailboxData>,
    #[serde(default)]
    reply_to: Vec<MailboxData>,
    #[serde(default)]
    subject: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    html: Option<String>,
    #[serde(default)]
    attachments: Vec<AttachmentData>,
    #[serde(default)]
    one_message: bool,
    /// Which recipient a per-recipient effect is for (see [`Email::effects`]).
    #[serde(default)]
    only: Option<usize>,
}

impl From<Email> for EmailData {
    fn from(email: Email) -> Self {
        let content = &email.content;
        let list = |mailboxes: &[Mailbox]| mailboxes.iter().map(MailboxData::from).collect();
        EmailData {
            message_type: content.message_type.clone(),
            from: content.from.as_ref().map(MailboxData::from),
            to: list(&content.to),
            cc: list(&content.cc),
            bcc: list(&content.bcc),
            reply_to: list(&content.reply_to),
            subject: content.subject.clone(),
            text: content.text.clone(),
            html: content.html.clone(),
            attachments: content
                .attachments
                .iter()
                .map(|a| AttachmentData {
                    filename: a.filename.clone(),
                    content_type: a.content_type.clone(),
                    content_base64: a.content.clone(),
                })
                .collect(),
            one_message: content.fanout == Fanout::OneMessage,
            only: email.only,
        }
    }
}

impl From<EmailData> for Email {
    fn from(data: EmailData) -> Self {
        let list = |mailboxes: Vec<MailboxData>| mailboxes.into_iter().map(Mailbox::from).collect();
        Email {
            content: Arc::new(Content {
                message_type: data.message_type,
                from: data.from.map(Mailbox::from),
                to: list(data.to),
                cc: list(data.cc),
                bcc: list(data.bcc),
                reply_to: list(data.reply_to),
                subject: data.subject,
                text: data.text,
                html: data.html,
                attachments: data
                    .attachments
                    .into_iter()
                    .map(|a| Attachment::new(a.filename, a.content_type, a.content_base64))
                    .collect(),
                fanout: if data.one_message {
                    Fanout::OneMessage
                } else {
                    Fanout::PerRecipient
                },
                validated: OnceLock::new(),
            }),
            only: data.only,
        }
    }
}
