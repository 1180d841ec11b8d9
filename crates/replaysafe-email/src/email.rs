//! The model: an email as an author builds it, and the copies it is sent as.
//!
//! Checking lives in `validate.rs`, the journal digest in `digest.rs`, the lettre
//! message in `message.rs`.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Invalid};
use crate::validate::{Validated, validate};

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
pub struct Mailbox(pub(crate) MailboxInput);

#[derive(Clone, PartialEq, Eq)]
pub(crate) enum MailboxInput {
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
    pub(crate) filename: String,
    pub(crate) content_type: String,
    pub(crate) content: Vec<u8>,
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
/// Built with [`Email::builder`]; the builder checks nothing, so that every check
/// happens in one place, the client's `describe`, before anything is sent. Cloning is
/// cheap (the content is shared), and the validation is done once per email, however
/// many recipients it has.
///
/// An email is sent as copies: with the default [`Fanout::PerRecipient`], one
/// [`EmailCopy`] per distinct recipient, each its own effect with its own key; with
/// [`Fanout::OneMessage`], one copy for the whole recipient set. Send the whole email
/// with [`crate::EmailGuardExt::send_email`], or each of [`Email::copies`] through
/// `Guard::send`, whose effect is an [`EmailCopy`]: an email with several recipients
/// cannot be handed to `Guard::send` by mistake.
#[derive(Clone)]
pub struct Email {
    content: Arc<Content>,
}

/// One copy of an [`Email`], the effect a guarded [`crate::EmailClient`] sends: for one
/// recipient, or for the whole recipient set of a [`Fanout::OneMessage`] email. Made by
/// [`Email::copies`].
#[derive(Clone)]
pub struct EmailCopy {
    email: Email,
    recipients: Recipients,
}

/// Whom a copy is addressed to in the SMTP envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recipients {
    /// One recipient: an index into the validated, deduplicated list.
    One(usize),
    /// Every recipient, in one message.
    All,
}

pub(crate) struct Content {
    pub(crate) message_type: String,
    pub(crate) from: Option<Mailbox>,
    pub(crate) to: Vec<Mailbox>,
    pub(crate) cc: Vec<Mailbox>,
    pub(crate) bcc: Vec<Mailbox>,
    pub(crate) reply_to: Vec<Mailbox>,
    pub(crate) subject: String,
    pub(crate) text: String,
    pub(crate) html: Option<String>,
    pub(crate) attachments: Vec<Attachment>,
    pub(crate) fanout: Fanout,
    pub(crate) validated: OnceLock<Result<Arc<Validated>, Invalid>>,
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

    /// Checks the whole email and splits it into the copies it is sent as: one per
    /// distinct recipient with [`Fanout::PerRecipient`], one with [`Fanout::OneMessage`].
    ///
    /// # Errors
    ///
    /// The first invalid field, as `describe` would report it; no copy is returned, so
    /// nothing of an invalid email is sent.
    pub fn copies(&self) -> Result<Vec<EmailCopy>, Error> {
        let validated = self.validated()?;
        let copy = |recipients| EmailCopy {
            email: self.clone(),
            recipients,
        };
        Ok(match self.content.fanout {
            Fanout::OneMessage => vec![copy(Recipients::All)],
            Fanout::PerRecipient => (0..validated.recipients().len())
                .map(|index| copy(Recipients::One(index)))
                .collect(),
        })
    }

    pub(crate) fn content(&self) -> &Content {
        &self.content
    }

    /// The checked content, computed once and shared by every effect of this email.
    pub(crate) fn validated(&self) -> Result<Arc<Validated>, Error> {
        self.content
            .validated
            .get_or_init(|| validate(&self.content).map(Arc::new))
            .clone()
            .map_err(Error::from)
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
        }
    }
}

impl EmailCopy {
    /// The email this is a copy of.
    pub fn email(&self) -> &Email {
        &self.email
    }

    /// Whom the envelope of this copy addresses.
    pub(crate) fn recipients(&self) -> Recipients {
        self.recipients
    }
}

impl fmt::Debug for EmailCopy {
    /// No addresses and no body, as for [`Email`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmailCopy")
            .field("email", &self.email)
            .field("recipients", &self.recipients)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replaysafe_core::IdempotencyKey;

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
            .recipients()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(recipients, ["ana@shop.example", "bo@partner.example"]);
        assert_eq!(validated.sender_domain, "shop.example");

        let copies = email.copies().unwrap();
        assert_eq!(copies.len(), 2);
        assert_eq!(copies[0].target(&validated), "ana@shop.example");
        assert_eq!(copies[1].target(&validated), "bo@partner.example");

        let together = base()
            .cc("bo@partner.example")
            .to("zed@a.example")
            .one_message()
            .build();
        let validated = together.validated().unwrap();
        let copies = together.copies().unwrap();
        assert_eq!(copies.len(), 1);
        assert_eq!(
            copies[0].target(&validated),
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
        let message = email.copies().unwrap()[0]
            .message(&validated, &key)
            .unwrap();
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
