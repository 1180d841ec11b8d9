//! Transient failures are retried and delivered once; permanent ones are not retried.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Classify, MemoryJournal, SendError};
use replaysafe_email::{EmailClient, TlsMode};
use replaysafe_test::contexts;
use secrecy::SecretString;

use crate::support::{self, ExtraServer, expected_key, mails_containing};

#[tokio::test]
async fn server_not_yet_listening_is_retried_and_delivered_once() {
    let port = support::free_port();
    let domain = support::unique_domain("late");
    let ana = format!("ana@{domain}");
    let journal = Arc::new(MemoryJournal::new());
    let mailer =
        support::plain_client(port, journal.clone()).with_retry(support::fast_retries(400));
    let email = support::simple_email(&domain, &[ana.as_str()]).build();

    // Start the server once the first attempt has failed (connection refused).
    let watcher = journal.clone();
    let starter = async move {
        while watcher.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        ExtraServer::mailbox(port).await
    };
    let live = contexts::live();
    let copy = crate::support::only_copy(&email);
    let (sent, server) = tokio::join!(mailer.send(&live, &copy), starter);

    let outcome = sent.expect("delivered once the server is up");
    let records = support::records(&journal);
    let failed: Vec<_> = records
        .iter()
        .filter(|r| r.decision == JournalDecision::Failed)
        .collect();
    assert!(!failed.is_empty(), "the first attempt failed");
    for record in &failed {
        let error = record.error.as_deref().unwrap_or_default();
        assert!(
            error.starts_with(&format!(
                "sending email through smtp://127.0.0.1:{port}: connection error"
            )),
            "{error}"
        );
    }
    let last = records.last().expect("records");
    assert_eq!(last.decision, JournalDecision::Delivered);
    assert_eq!(last.attempt as usize, failed.len() + 1);
    assert!(matches!(&outcome, replaysafe_core::Outcome::Delivered(d) if d.attempts >= 2));

    let mails = mails_containing(&server.maildir, &domain);
    assert_eq!(mails.len(), 1, "delivered exactly once");
    let key = expected_key("daily_summary", &ana);
    assert_eq!(
        mails[0].header("Message-ID"),
        Some(format!("<{}@{domain}>", key.as_str()).as_str())
    );
    server.stop().await;
}

#[tokio::test]
async fn wrong_password_fails_permanently_without_retries() {
    let server = support::tls_server();
    let domain = support::unique_domain("badpw");
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::tls_client(&server, "not-the-password-5d2e", journal.clone())
        .with_retry(support::fast_retries(5));
    let email = support::simple_email(&domain, &[format!("ana@{domain}").as_str()]).build();

    let error = mailer
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect_err("authentication refused");
    let SendError::Failed { attempts, source } = &error else {
        panic!("expected a delivery failure, got {error:?}");
    };
    assert_eq!(*attempts, 1, "a permanent failure is not retried");
    assert!(source.is_permanent() && !source.is_transient());
    assert_eq!(source.smtp_code(), Some(535));
    assert_eq!(source.error_type(), "535");
    assert!(
        source.source().is_some(),
        "the server's reply stays reachable"
    );

    let records = support::records(&journal);
    assert_eq!(records.len(), 2, "one failed attempt: {records:#?}");
    assert_eq!(records[0].decision, JournalDecision::Attempting);
    assert_eq!(records[1].decision, JournalDecision::Failed);
    assert_eq!(records[1].attempt, 1);
    let journaled = records[1].error.as_deref().unwrap_or_default();
    assert!(
        journaled.starts_with(&format!(
            "sending email through smtp://127.0.0.1:{}: permanent error (535)",
            server.port
        )),
        "{journaled}"
    );
    assert!(mails_containing(&server.maildir, &domain).is_empty());
}

#[tokio::test]
async fn greylisted_recipient_gets_4xx_then_is_delivered_once() {
    let (server, port) = ExtraServer::policy().await;
    let domain = support::unique_domain("grey");
    let recipient = format!("greylisted-ana@{domain}");
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::plain_client(port, journal.clone()).with_retry(support::fast_retries(5));
    let email = support::simple_email(&domain, &[recipient.as_str()]).build();

    let outcome = mailer
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect("delivered on the second attempt");
    assert!(matches!(&outcome, replaysafe_core::Outcome::Delivered(d) if d.attempts == 2));

    let records = support::records(&journal);
    let decisions: Vec<_> = records.iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [
            JournalDecision::Attempting,
            JournalDecision::Failed,
            JournalDecision::Attempting,
            JournalDecision::Delivered
        ],
        "{records:#?}"
    );
    assert!(
        records[1]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("transient error (451)")),
        "{:?}",
        records[1].error
    );

    let mails = mails_containing(&server.maildir, &domain);
    assert_eq!(mails.len(), 1, "delivered exactly once");
    assert_eq!(mails[0].header("X-RcptTo"), Some(recipient.as_str()));
    server.stop().await;
}

#[tokio::test]
async fn unknown_recipient_gets_5xx_and_is_not_retried() {
    let (server, port) = ExtraServer::policy().await;
    let domain = support::unique_domain("nouser");
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::plain_client(port, journal.clone()).with_retry(support::fast_retries(5));
    let email = support::simple_email(&domain, &[format!("unknown-bo@{domain}").as_str()]).build();

    let error = mailer
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect_err("no such user");
    let SendError::Failed {
        attempts: 1,
        source,
    } = &error
    else {
        panic!("{error:?}");
    };
    assert!(error.is_permanent());
    // The reply's code is the failure's class, through the guard's error too.
    let code = source.smtp_code().expect("the server replied");
    assert!((500..600).contains(&code), "{code}");
    assert_eq!(error.error_type(), code.to_string());
    let records = support::records(&journal);
    assert_eq!(records.len(), 2, "attempting and failed");
    assert!(mails_containing(&server.maildir, &domain).is_empty());
    // The server's reply quoted the address; the journal, the error, its chain and its
    // Debug show the domain only.
    let journaled = records[1].error.clone().unwrap_or_default();
    let shown = format!("{} {error:?}", replaysafe_core::error_chain(&error));
    for text in [&journaled, &shown] {
        assert!(
            text.contains(&format!("<*@{domain}>: Recipient address rejected")),
            "{text}"
        );
        assert!(!text.contains("unknown-bo@"), "the address leaks: {text}");
    }
    server.stop().await;
}

#[tokio::test]
async fn an_untrusted_certificate_fails_permanently_before_login() {
    let server = support::tls_server();
    let domain = support::unique_domain("untrusted");
    let journal = Arc::new(MemoryJournal::new());
    // No extra root: the test CA is not in the system store.
    let mailer = EmailClient::smtp("127.0.0.1", server.port)
        .tls(TlsMode::StartTls)
        .credentials(
            server.user.clone(),
            SecretString::from(server.password.clone()),
        )
        .timeout(Duration::from_secs(10))
        .build(journal.clone())
        .expect("valid configuration")
        .with_retry(support::fast_retries(5));
    let email = support::simple_email(&domain, &[format!("ana@{domain}").as_str()]).build();

    let error = mailer
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect_err("certificate refused");
    let SendError::Failed { attempts, source } = &error else {
        panic!("expected a delivery failure, got {error:?}");
    };
    assert_eq!(*attempts, 1, "{source}");
    assert!(source.is_permanent() && source.is_connection(), "{source}");
    assert_eq!(source.error_type(), "tls", "{source}");
    assert!(
        replaysafe_core::error_chain(source).contains("certificate"),
        "{source}"
    );
    assert_eq!(support::records(&journal).len(), 2, "attempting and failed");
    assert!(mails_containing(&server.maildir, &domain).is_empty());
}

#[tokio::test]
async fn plaintext_to_a_remote_host_is_refused_when_building() {
    let error = EmailClient::smtp("smtp.shop.example", 25)
        .tls(TlsMode::Plaintext)
        .build(MemoryJournal::new())
        .expect_err("plaintext to a remote host");
    assert!(error.is_config() && error.field() == Some("tls"), "{error}");
}
