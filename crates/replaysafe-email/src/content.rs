//! The content of an email as an author writes it, before anything is checked: mailboxes,
//! attachments, fanout. It depends on nothing else in the crate; checking it is
//! `validate.rs`, digesting it `digest.rs`, and the public [`crate::Email`] holds it.

use std::fmt;

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

/// What an [`crate::Email`] says, shared by its clones and copies.
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
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Content")
            .field("message_type", &self.message_type)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}
