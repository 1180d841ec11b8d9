//! Checking an email: every address, header and attachment, before anything is sent.

use lettre::Address;
use lettre::message::header::ContentType;
use replaysafe_core::{IdempotencyKey, PayloadDigest};

use crate::content::{Content, Mailbox, MailboxInput};
use crate::digest::body_digest;
use crate::error::Invalid;

/// An email whose every field was checked.
pub(crate) struct Validated {
    pub(crate) from: lettre::message::Mailbox,
    pub(crate) sender_domain: String,
    pub(crate) to: Vec<lettre::message::Mailbox>,
    pub(crate) cc: Vec<lettre::message::Mailbox>,
    pub(crate) bcc: Vec<lettre::message::Mailbox>,
    pub(crate) reply_to: Vec<lettre::message::Mailbox>,
    /// Distinct envelope recipients (domain lowercased), in order of first appearance.
    recipients: Vec<Address>,
    pub(crate) content_types: Vec<ContentType>,
    pub(crate) digest: PayloadDigest,
}

impl Validated {
    /// Distinct envelope recipients, in order of first appearance.
    pub(crate) fn recipients(&self) -> &[Address] {
        &self.recipients
    }

    /// The sender's and every recipient's address, as the SMTP envelope carries them.
    pub(crate) fn envelope_addresses(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.from.email.as_ref()).chain(self.recipients.iter().map(AsRef::as_ref))
    }

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

/// The longest run of ASCII without a space that a header can carry: lettre folds a
/// header only at spaces and writes such a run on one line, after `Subject: ` (9 octets),
/// and RFC 5322 (2.1.1) caps a line at 998 octets. A run holding any other character is
/// RFC 2047-encoded in pieces, so it folds whatever its length.
const LONGEST_UNFOLDABLE_RUN: usize = 998 - "Subject: ".len();

/// Refuses a header value that would go out as a line longer than RFC 5322 allows.
fn check_foldable(field: &str, value: &str) -> Result<(), Invalid> {
    let longest = value
        .split(' ')
        .filter(|run| run.is_ascii())
        .map(str::len)
        .max()
        .unwrap_or(0);
    if longest > LONGEST_UNFOLDABLE_RUN {
        return Err(Invalid::new(
            field,
            format!(
                "holds {longest} characters without a space, which cannot be folded into \
                 header lines of at most 998 octets (RFC 5322); at most \
                 {LONGEST_UNFOLDABLE_RUN} are allowed"
            ),
        ));
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

pub(crate) fn validate(content: &Content) -> Result<Validated, Invalid> {
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
    check_foldable("subject", &content.subject)?;

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
