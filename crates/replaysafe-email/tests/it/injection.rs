//! Header injection is refused before anything is sent, naming the field.

use std::sync::Arc;

use replaysafe_core::{MemoryJournal, SendError};
use replaysafe_email::{Attachment, Email, EmailGuardExt, Mailbox};
use replaysafe_test::contexts;

use crate::support::{self, mails_containing};

#[tokio::test]
async fn injection_corpus_is_refused_naming_the_field_and_nothing_arrives() {
    let (port, maildir) = support::plain_server();
    let domain = support::unique_domain("inject");
    let ana = format!("ana@{domain}");
    let evil = format!("Bcc: mallory@{domain}");
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::plain_client(port, journal.clone());
    let base = || support::simple_email(&domain, &[ana.as_str()]);

    let corpus: Vec<(&str, Email, &str)> = vec![
        (
            "CRLF in the subject",
            base().subject(format!("Orders\r\n{evil}")).build(),
            "invalid email field subject: contains CR or LF",
        ),
        (
            "bare LF in the subject",
            base().subject(format!("Orders\n{evil}")).build(),
            "invalid email field subject: contains CR or LF",
        ),
        (
            "NUL in the subject",
            base().subject("Orders\0").build(),
            "invalid email field subject: contains NUL",
        ),
        (
            "CRLF in a display name",
            base().cc(format!("Bo\r\n{evil} <bo@{domain}>")).build(),
            "invalid email field cc[0] display name: contains CR or LF",
        ),
        (
            "LF in a separate display name",
            base()
                .to(Mailbox::named(
                    format!("Bo\n{evil}"),
                    format!("bo@{domain}"),
                ))
                .build(),
            "invalid email field to[1] display name: contains CR or LF",
        ),
        (
            "CRLF in an address",
            base().to(format!("bo@{domain}\r\n{evil}")).build(),
            "invalid email field to[1]: contains CR or LF",
        ),
        (
            "NUL in an address",
            base().bcc(format!("cy@{domain}\0")).build(),
            "invalid email field bcc[0]: contains NUL",
        ),
        (
            "CRLF in the sender",
            base().from(format!("reports@{domain}\r\n{evil}")).build(),
            "invalid email field from: contains CR or LF",
        ),
        (
            "LF in a reply-to",
            base().reply_to(format!("help@{domain}\n{evil}")).build(),
            "invalid email field reply_to[0]: contains CR or LF",
        ),
        (
            "CRLF in an attachment name",
            base()
                .attachment(Attachment::csv(format!("a.csv\r\n{evil}"), "x\n"))
                .build(),
            "invalid email field attachment[0] filename: contains CR or LF",
        ),
        (
            "an address that does not parse, after valid ones",
            base()
                .cc(format!("bo@{domain}"))
                .bcc("cy at nowhere")
                .build(),
            "invalid email field bcc[0]: not an email address",
        ),
        (
            "no recipient at all",
            Email::builder("daily_summary")
                .from(format!("reports@{domain}"))
                .subject("x")
                .build(),
            "invalid email field recipients: no recipient in to, cc or bcc",
        ),
    ];

    for (case, email, expected) in &corpus {
        let error = mailer
            .send_email(&contexts::live(), email)
            .await
            .expect_err(case);
        let SendError::Invalid(source) = &error else {
            panic!("{case}: expected an invalid effect, got {error:?}");
        };
        assert!(source.is_invalid(), "{case}");
        assert!(source.to_string().starts_with(expected), "{case}: {source}");

        // No copy of an invalid email can even be made.
        assert!(email.copies().is_err(), "{case}");
    }

    assert!(journal.is_empty(), "invalid emails are not journaled");
    assert!(
        mails_containing(&maildir, &domain).is_empty(),
        "nothing arrives"
    );

    // Control: the valid base email does arrive, so the emptiness above means something.
    mailer
        .send_email(&contexts::live(), &base().build())
        .await
        .expect("valid email")
        .into_result()
        .expect("delivered");
    let mails = mails_containing(&maildir, &domain);
    assert_eq!(mails.len(), 1);
    assert!(!mails[0].raw.contains("mallory"), "{}", mails[0].raw);
}
