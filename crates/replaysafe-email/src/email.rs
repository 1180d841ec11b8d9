//! The model: an email as an author builds it, and the copies it is sent as.
//!
//! Its content is `content.rs`; checking lives in `validate.rs`, the journal digest in
//! `digest.rs`, the lettre message in `message.rs`. Modules depend one way:
//! `content` ← `digest` ← `validate` ← `email` ← `message`.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::content::{Attachment, Content, Fanout, Mailbox};
use crate::error::{Error, Invalid};
use crate::validate::{Validated, validate};

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
///
/// An email serializes (for an outbox row) with its fields as written, attachments in
/// base64; see `docs/reference/outbox.md`.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(into = "crate::data::EmailData", from = "crate::data::EmailData")]
pub struct Email {
    pub(crate) content: Arc<Content>,
    /// The checked content, computed once and shared by every clone and copy.
    validated: Arc<OnceLock<Result<Arc<Validated>, Invalid>>>,
}

/// One copy of an [`Email`], the effect a guarded [`crate::EmailClient`] sends: for one
/// recipient, or for the whole recipient set of a [`Fanout::OneMessage`] email. Made by
/// [`Email::copies`]. It serializes as its email plus `only`, the index of its recipient.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(
    into = "crate::data::EmailCopyData",
    from = "crate::data::EmailCopyData"
)]
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

    /// An email of `content`, not checked yet.
    pub(crate) fn from_content(content: Content) -> Self {
        Email {
            content: Arc::new(content),
            validated: Arc::new(OnceLock::new()),
        }
    }

    pub(crate) fn content(&self) -> &Content {
        &self.content
    }

    /// The checked content, computed once and shared by every effect of this email.
    pub(crate) fn validated(&self) -> Result<Arc<Validated>, Error> {
        self.validated
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
        Email::from_content(self.content)
    }
}

impl EmailCopy {
    pub(crate) fn new(email: Email, recipients: Recipients) -> Self {
        EmailCopy { email, recipients }
    }

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

    #[test]
    fn an_email_round_trips_through_json_copy_by_copy() {
        let email = Email::builder("daily_summary")
            .from(Mailbox::named("Shop", "shop@shop.example"))
            .to("ana@shop.example")
            .to("Bo <bo@shop.example>")
            .subject("Your orders")
            .text("3 orders")
            .attachment(Attachment::csv("orders.csv", "id\n1\n"))
            .build();
        let validated = email.validated().unwrap();
        for copy in email.copies().unwrap() {
            let json = serde_json::to_string(&copy).unwrap();
            let back: EmailCopy = serde_json::from_str(&json).unwrap();
            let back_validated = back.email().validated().unwrap();
            assert_eq!(
                back.target(&back_validated).unwrap(),
                copy.target(&validated).unwrap()
            );
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
        let json = serde_json::to_string(&email.copies().unwrap()[1]).unwrap();
        assert!(json.contains(r#""content_base64":"aWQKMQo=""#), "{json}");
        assert!(
            json.contains(r#"{"name":"Shop","address":"shop@shop.example"}"#),
            "{json}"
        );
        assert!(json.contains(r#""only":1"#), "{json}");
    }

    #[test]
    fn a_read_back_copy_naming_a_missing_recipient_is_invalid_not_a_panic() {
        let json = r#"{"message_type":"m","from":"a@x.example","to":["b@x.example"],"subject":"s","text":"t","only":5}"#;
        let copy: EmailCopy = serde_json::from_str(json).unwrap();
        let error = copy.target(&copy.email().validated().unwrap()).unwrap_err();
        assert!(error.to_string().contains("only"), "{error}");
        // A per-recipient email to two recipients cannot be read back as one copy.
        let json = r#"{"message_type":"m","from":"a@x.example","to":["b@x.example","c@x.example"],"subject":"s","text":"t"}"#;
        let copy: EmailCopy = serde_json::from_str(json).unwrap();
        let error = copy.target(&copy.email().validated().unwrap()).unwrap_err();
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
            .recipients()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(recipients, ["ana@shop.example", "bo@partner.example"]);
        assert_eq!(validated.sender_domain, "shop.example");

        let copies = email.copies().unwrap();
        assert_eq!(copies.len(), 2);
        assert_eq!(copies[0].target(&validated).unwrap(), "ana@shop.example");
        assert_eq!(copies[1].target(&validated).unwrap(), "bo@partner.example");

        let together = base()
            .cc("bo@partner.example")
            .to("zed@a.example")
            .one_message()
            .build();
        let validated = together.validated().unwrap();
        let copies = together.copies().unwrap();
        assert_eq!(copies.len(), 1);
        assert_eq!(
            copies[0].target(&validated).unwrap(),
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
