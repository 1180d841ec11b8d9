//! Live sends arrive once, with the right headers, body, attachment and Message-ID.

use std::sync::Arc;

use replaysafe_core::MemoryJournal;
use replaysafe_core::journal::JournalDecision;
use replaysafe_email::{Attachment, Email, EmailGuardExt, Mailbox};
use replaysafe_test::contexts;

use crate::support::{self, expected_key, mails_containing};

const CSV: &[u8] = b"order,amount\r\n1001,9.90\r\n1002,120.00\r\n";

#[tokio::test]
async fn live_send_arrives_once_per_recipient_with_headers_body_attachment_and_message_id() {
    let (port, maildir) = support::plain_server();
    let domain = support::unique_domain("live");
    let (ana, bo, cy) = (
        format!("ana@{domain}"),
        format!("bo@{domain}"),
        format!("cy@{domain}"),
    );
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::plain_client(port, journal.clone());
    let subject = format!("Orders for 2026-08-05 ({domain})");
    let email = Email::builder("daily_summary")
        .from(format!("Reports <reports@{domain}>"))
        .to(Mailbox::named("Ana Lima", &ana))
        .cc(bo.as_str())
        .bcc(cy.as_str())
        .reply_to(format!("help@{domain}"))
        .subject(&subject)
        .text("42 orders, 3 refunds.\n")
        .html("<p>42 orders, <b>3 refunds</b>.</p>")
        .attachment(Attachment::csv("orders.csv", CSV))
        .build();

    let outcomes = mailer
        .send_email(&contexts::live(), &email)
        .await
        .expect("valid email");
    assert_eq!((outcomes.len(), outcomes.delivered()), (3, 3));

    let mails = mails_containing(&maildir, &domain);
    assert_eq!(mails.len(), 3, "one copy per recipient: {mails:#?}");
    let delivered: Vec<_> = outcomes.into_result().expect("all delivered");
    for (recipient, outcome) in [&ana, &bo, &cy].into_iter().zip(&delivered) {
        let copies: Vec<_> = mails
            .iter()
            .filter(|mail| mail.header("X-RcptTo") == Some(recipient.as_str()))
            .collect();
        assert_eq!(copies.len(), 1, "{recipient} gets exactly one copy");
        let mail = copies[0];

        let key = expected_key("daily_summary", recipient);
        assert_eq!(outcome.key(), &key);
        let message_id = format!("<{}@{domain}>", key.as_str());
        assert_eq!(mail.header("Message-ID"), Some(message_id.as_str()));
        let receipt = outcome.receipt().expect("delivered");
        assert_eq!(receipt.message_id(), message_id);
        assert_eq!(receipt.smtp_code(), Some(250));

        assert_eq!(
            mail.header("X-MailFrom"),
            Some(format!("reports@{domain}").as_str())
        );
        assert_eq!(
            mail.header("From"),
            Some(format!("Reports <reports@{domain}>").as_str())
        );
        assert_eq!(
            mail.header("To"),
            Some(format!("\"Ana Lima\" <{ana}>").as_str())
        );
        assert_eq!(mail.header("Cc"), Some(bo.as_str()));
        assert_eq!(
            mail.header("Reply-To"),
            Some(format!("help@{domain}").as_str())
        );
        assert_eq!(mail.header("Subject"), Some(subject.as_str()));
        assert!(!mail.has_header("Bcc"), "bcc never reaches the headers");
        assert!(
            mail.header("Content-Type")
                .is_some_and(|t| t.starts_with("multipart/mixed"))
        );

        assert!(mail.raw.contains("42 orders, 3 refunds."), "text body");
        assert!(
            mail.raw.contains("Content-Type: text/html"),
            "html alternative"
        );
        assert!(mail.raw.contains("<b>3 refunds</b>"), "html body");
        assert!(
            mail.raw
                .contains("Content-Disposition: attachment; filename=\"orders.csv\"")
        );
        assert_eq!(
            mail.attachment("orders.csv").as_deref(),
            Some(CSV),
            "attachment bytes"
        );
    }

    let records = support::records(&journal);
    assert_eq!(records.len(), 6, "attempting and delivered per recipient");
    for (index, record) in records.iter().enumerate() {
        let expected = if index % 2 == 0 {
            JournalDecision::Attempting
        } else {
            JournalDecision::Delivered
        };
        assert_eq!(record.decision, expected);
        assert_eq!(record.attempt, 1);
        assert_eq!(record.effect.kind, "email");
        assert_eq!(record.effect.target, format!("*@{domain}"));
        assert_eq!(record.effect.summary.as_deref(), Some(subject.as_str()));
        let body_bytes = "42 orders, 3 refunds.\n".len()
            + "<p>42 orders, <b>3 refunds</b>.</p>".len()
            + CSV.len();
        assert_eq!(record.effect.payload_bytes, body_bytes as u64);
    }
    let keys: std::collections::HashSet<_> = records
        .iter()
        .map(|r| r.effect.idempotency_key.clone())
        .collect();
    assert_eq!(keys.len(), 3, "one key per recipient");
}

#[tokio::test]
async fn one_message_mode_sends_one_copy_keyed_by_the_recipient_set() {
    let (port, maildir) = support::plain_server();
    let domain = support::unique_domain("together");
    let (zed, ana) = (format!("zed@{domain}"), format!("ana@{domain}"));
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::plain_client(port, journal.clone());
    let email = support::simple_email(&domain, &[zed.as_str()])
        .bcc(ana.as_str())
        .one_message()
        .build();

    let outcomes = mailer
        .send_email(&contexts::live(), &email)
        .await
        .expect("valid email");
    assert_eq!((outcomes.len(), outcomes.delivered()), (1, 1));

    let mails = mails_containing(&maildir, &domain);
    assert_eq!(mails.len(), 1, "{mails:#?}");
    let mail = &mails[0];
    assert_eq!(
        mail.header("X-RcptTo"),
        Some(format!("{zed}, {ana}").as_str())
    );
    let key = expected_key("daily_summary", &format!("{ana},{zed}"));
    assert_eq!(
        mail.header("Message-ID"),
        Some(format!("<{}@{domain}>", key.as_str()).as_str())
    );
    assert!(!mail.has_header("Bcc"));

    let records = support::records(&journal);
    assert_eq!(records.len(), 2, "attempting and delivered");
    for record in &records {
        assert_eq!(record.effect.target, format!("*@{domain},*@{domain}"));
        assert_eq!(record.effect.idempotency_key, key.as_str());
    }
}

#[tokio::test]
async fn a_single_recipient_email_goes_through_guard_send() {
    let (port, maildir) = support::plain_server();
    let domain = support::unique_domain("single");
    let ana = format!("ana@{domain}");
    let mailer = support::plain_client(port, MemoryJournal::new());

    let email = support::simple_email(&domain, &[ana.as_str()]).build();
    let outcome = mailer
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect("sent");
    assert!(outcome.is_delivered());
    assert_eq!(mails_containing(&maildir, &domain).len(), 1);

    // Several recipients in per-recipient mode are several copies, each its own effect
    // (`Guard::send` takes one copy, so a whole email cannot be handed to it).
    let pair = support::simple_email(&domain, &[ana.as_str(), "bo@other.example"]).build();
    let copies = pair.copies().unwrap();
    assert_eq!(copies.len(), 2);
    let keys: Vec<_> = [&copies[0], &copies[1]]
        .into_iter()
        .map(|copy| mailer.preview(&contexts::live(), copy).unwrap().key)
        .collect();
    assert_ne!(keys[0], keys[1], "one key per recipient");
}

#[tokio::test]
async fn starttls_and_auth_deliver_over_tls() {
    let server = support::tls_server();
    let domain = support::unique_domain("tls");
    let ana = format!("ana@{domain}");
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::tls_client(&server, &server.password, journal.clone());
    let email = support::simple_email(&domain, &[ana.as_str()])
        .attachment(Attachment::csv("orders.csv", CSV))
        .build();

    let outcome = mailer
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect("delivered over STARTTLS with AUTH");
    let key = expected_key("daily_summary", &ana);
    let message_id = format!("<{}@{domain}>", key.as_str());
    assert_eq!(
        outcome.receipt().map(|r| r.message_id()),
        Some(message_id.as_str())
    );

    let mails = mails_containing(&server.maildir, &domain);
    assert_eq!(mails.len(), 1, "{mails:#?}");
    assert_eq!(mails[0].header("Message-ID"), Some(message_id.as_str()));
    assert_eq!(mails[0].header("X-RcptTo"), Some(ana.as_str()));
    assert_eq!(mails[0].attachment("orders.csv").as_deref(), Some(CSV));
    assert_eq!(support::records(&journal)[0].attempt, 1);
}

#[test]
fn a_client_that_has_sent_can_be_dropped_after_its_runtime() {
    let (port, maildir) = support::plain_server();
    let domain = support::unique_domain("dropped");
    let email = support::simple_email(&domain, &[format!("ana@{domain}").as_str()]).build();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mailer = support::plain_client(port, MemoryJournal::new());
    runtime
        .block_on(mailer.send(&contexts::live(), &crate::support::only_copy(&email)))
        .expect("sent");
    drop(runtime);
    // lettre's pool spawns a task when dropped; outside a runtime that must not panic.
    drop(mailer);
    assert_eq!(mails_containing(&maildir, &domain).len(), 1);
}

/// RFC 5322 caps a line at 998 octets. A 5,000-byte subject arrives folded into short
/// lines, in ASCII words or RFC 2047 encoded words; a 5,000-byte run without a space,
/// which lettre cannot fold, is refused naming the field, and nothing is sent.
#[tokio::test]
async fn long_subjects_are_folded_or_refused_never_sent_as_one_long_line() {
    let (port, maildir) = support::plain_server();
    let domain = support::unique_domain("longsubject");
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::plain_client(port, journal.clone());
    let words = format!("{domain} {}", "word ".repeat(1000).trim_end());
    let accented = format!("{domain} {}", "é".repeat(2500));
    for (index, subject) in [&words, &accented].into_iter().enumerate() {
        assert!(subject.len() >= 5000);
        let recipient = format!("r{index}@{domain}");
        let email = support::simple_email(&domain, &[recipient.as_str()])
            .subject(subject.as_str())
            .build();
        mailer
            .send(&contexts::live(), &crate::support::only_copy(&email))
            .await
            .expect("delivered");
        let mails: Vec<_> = mails_containing(&maildir, &domain)
            .into_iter()
            .filter(|mail| mail.header("X-RcptTo") == Some(recipient.as_str()))
            .collect();
        assert_eq!(mails.len(), 1, "{recipient}");
        let head = mails[0].raw.split("\n\n").next().unwrap_or_default();
        let subject_lines: Vec<&str> = head
            .lines()
            .skip_while(|line| !line.starts_with("Subject:"))
            .take_while(|line| line.starts_with("Subject:") || line.starts_with([' ', '\t']))
            .collect();
        assert!(subject_lines.len() > 50, "folded: {subject_lines:?}");
        assert!(
            subject_lines.iter().all(|line| line.len() <= 78),
            "every line of the subject within 78 octets: {subject_lines:?}"
        );
        if index == 0 {
            let unfolded: Vec<&str> = mails[0]
                .header("Subject")
                .unwrap_or_default()
                .split_whitespace()
                .collect();
            assert_eq!(unfolded, subject.split_whitespace().collect::<Vec<_>>());
        } else {
            assert!(subject_lines[0].contains("=?utf-8?b?"), "{subject_lines:?}");
        }
    }

    let unbroken = format!("{domain}-{}", "x".repeat(5000));
    let email = support::simple_email(&domain, &[format!("r2@{domain}").as_str()])
        .subject(unbroken.as_str())
        .build();
    let error = mailer
        .send_email(&contexts::live(), &email)
        .await
        .expect_err("refused");
    let replaysafe_core::SendError::Invalid(invalid) = &error else {
        panic!("expected an invalid email, got {error:?}");
    };
    assert_eq!(invalid.field(), Some("subject"));
    assert!(invalid.to_string().contains("998 octets"), "{invalid}");
    // A run of 989 characters still fits on the `Subject: ` line: the limit is exact.
    let longest = format!("{}{}", domain, "y".repeat(989 - domain.len()));
    let email = support::simple_email(&domain, &[format!("r3@{domain}").as_str()])
        .subject(longest.as_str())
        .build();
    mailer
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect("a 998-octet line is allowed");
    let mails = mails_containing(&maildir, &domain);
    assert_eq!(mails.len(), 3, "the refused email was not sent");
    let line = mails
        .iter()
        .flat_map(|mail| mail.raw.lines())
        .find(|line| line.contains(&longest))
        .expect("the longest subject arrived");
    assert_eq!(line.len(), 998);
    assert_eq!(
        journal.records().len(),
        6,
        "an attempting and a delivered record for each sent email, nothing for the refused one"
    );
}
