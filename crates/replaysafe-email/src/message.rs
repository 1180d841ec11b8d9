//! An email copy as lettre sends it: headers, envelope, bodies and attachments.

use lettre::message::header::ContentTransferEncoding;
use lettre::message::{Attachment as LettreAttachment, Body, MultiPart, SinglePart};
use lettre::{Address, Message};
use replaysafe_core::IdempotencyKey;

use crate::email::{EmailCopy, Recipients};
use crate::error::{Error, Invalid};
use crate::validate::Validated;

impl EmailCopy {
    /// The envelope recipients of this copy.
    fn envelope_recipients<'v>(&self, validated: &'v Validated) -> &'v [Address] {
        match self.recipients() {
            Recipients::One(index) => std::slice::from_ref(&validated.recipients()[index]),
            Recipients::All => validated.recipients(),
        }
    }

    /// The effect's target: its recipient, or the sorted, comma-joined recipient set.
    pub(crate) fn target(&self, validated: &Validated) -> String {
        let mut addresses: Vec<&str> = self
            .envelope_recipients(validated)
            .iter()
            .map(AsRef::as_ref)
            .collect();
        addresses.sort_unstable();
        addresses.join(",")
    }

    /// The lettre message of this effect, with `Message-ID: <{key}@{sender domain}>`.
    pub(crate) fn message(
        &self,
        validated: &Validated,
        key: &IdempotencyKey,
    ) -> Result<Message, Error> {
        let content = self.email().content();
        let envelope_to = self.envelope_recipients(validated).to_vec();
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
