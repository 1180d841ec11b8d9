//! The serialized form of emails and their copies, so that an outbox row can hold one.
//!
//! An [`EmailCopy`] is its email's fields plus `only`: the index of its recipient among
//! the email's distinct recipients, or none for a one-message copy. A copy read back is
//! checked like any other when it is described: an `only` past the last recipient, or a
//! per-recipient email without one that has several recipients, is invalid, never a panic.

use crate::content::{Attachment, Content, Fanout, Mailbox, MailboxInput};
use crate::email::{Email, EmailCopy, Recipients};

/// The serialized form of a [`Mailbox`]: its text, or a display name and an address.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum MailboxData {
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
pub(crate) struct AttachmentData {
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
pub(crate) struct EmailData {
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
        }
    }
}

impl From<EmailData> for Email {
    fn from(data: EmailData) -> Self {
        let list = |mailboxes: Vec<MailboxData>| mailboxes.into_iter().map(Mailbox::from).collect();
        Email::from_content(Content {
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
        })
    }
}

/// The serialized form of an [`EmailCopy`].
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct EmailCopyData {
    #[serde(flatten)]
    email: EmailData,
    /// Which recipient the copy is for; none for one message to every recipient.
    #[serde(default)]
    only: Option<usize>,
}

impl From<EmailCopy> for EmailCopyData {
    fn from(copy: EmailCopy) -> Self {
        EmailCopyData {
            only: match copy.recipients() {
                Recipients::One(index) => Some(index),
                Recipients::All => None,
            },
            email: EmailData::from(copy.email().clone()),
        }
    }
}

impl From<EmailCopyData> for EmailCopy {
    fn from(data: EmailCopyData) -> Self {
        let recipients = match data.only {
            Some(index) => Recipients::One(index),
            None => Recipients::All,
        };
        EmailCopy::new(Email::from(data.email), recipients)
    }
}
