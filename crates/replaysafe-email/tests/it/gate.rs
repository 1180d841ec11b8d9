//! Backfill, replay, stale and unknown contexts: nothing arrives, nothing connects, and
//! the journal has one suppressed record per recipient.

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Classify, MemoryJournal, ReplayContext, SendError};
use replaysafe_email::{EmailClient, EmailGuardExt, TlsMode};
use replaysafe_test::contexts;

use crate::support::{self, mails_containing};

/// Sends a three-recipient email under `cx` and checks that nothing arrived and that each
/// recipient has its suppressed record with `reasons`; then proves the Maildir check
/// itself by sending the same email live.
async fn suppressed_under(cx: ReplayContext, tag: &str, reasons: &[&str]) {
    let (port, maildir) = support::plain_server();
    let domain = support::unique_domain(tag);
    let recipients = [
        format!("ana@{domain}"),
        format!("bo@{domain}"),
        format!("cy@{domain}"),
    ];
    let journal = Arc::new(MemoryJournal::new());
    let mailer = support::plain_client(port, journal.clone());
    let email = support::simple_email(&domain, &[recipients[0].as_str()])
        .cc(recipients[1].as_str())
        .bcc(recipients[2].as_str())
        .build();

    let outcomes = mailer.send_email(&cx, &email).await.expect("valid email");
    assert_eq!((outcomes.len(), outcomes.suppressed()), (3, 3));
    assert!(
        mails_containing(&maildir, &domain).is_empty(),
        "nothing arrives"
    );

    let records = support::records(&journal);
    assert_eq!(records.len(), 3, "one suppressed record per recipient");
    for (record, recipient) in records.iter().zip(&recipients) {
        assert_eq!(record.decision, JournalDecision::Suppressed);
        assert_eq!(record.attempt, 0);
        assert_eq!(record.reasons, reasons, "{tag}");
        assert_eq!(record.effect.kind, "email");
        assert_eq!(record.effect.message_type, "daily_summary");
        assert_eq!(record.effect.target, format!("*@{domain}"));
        assert_eq!(
            record.effect.summary.as_deref(),
            Some(format!("Daily orders for {domain}").as_str())
        );
        assert_eq!(
            record.effect.payload_bytes,
            "42 orders, 3 refunds.\n".len() as u64
        );
        let key = replaysafe_core::IdempotencyKey::derive(
            cx.pipeline(),
            &replaysafe_core::EffectKind::Email,
            "daily_summary",
            recipient,
            cx.window(),
        );
        assert_eq!(record.effect.idempotency_key, key.as_str());
    }

    // Control: the same email, live, does arrive, so the emptiness above means something.
    let live = mailer
        .send_email(&contexts::live(), &email)
        .await
        .expect("valid email");
    assert_eq!(live.delivered(), 3);
    assert_eq!(mails_containing(&maildir, &domain).len(), 3);
}

#[tokio::test]
async fn backfill_sends_nothing_and_journals_each_recipient() {
    suppressed_under(
        contexts::backfill(),
        "backfill",
        &["replay_run", "stale_window"],
    )
    .await;
}

#[tokio::test]
async fn replay_sends_nothing_and_journals_each_recipient() {
    suppressed_under(contexts::replay(), "replay", &["replay_flag"]).await;
}

#[tokio::test]
async fn stale_window_sends_nothing_and_journals_each_recipient() {
    suppressed_under(contexts::stale(), "stale", &["stale_window"]).await;
}

#[tokio::test]
async fn unknown_context_sends_nothing_and_journals_each_recipient() {
    suppressed_under(contexts::unknown(), "unknown", &["unknown_context"]).await;
}

#[tokio::test]
async fn a_suppressed_email_opens_no_connection() {
    // A listener that records connection attempts and never speaks SMTP.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    let mailer = EmailClient::smtp("127.0.0.1", port)
        .tls(TlsMode::Plaintext)
        .timeout(Duration::from_millis(300))
        .build(MemoryJournal::new())
        .expect("valid configuration")
        .with_retry(replaysafe_core::RetryPolicy::none());
    let email = support::simple_email("quiet.example", &["ana@quiet.example"]).build();

    for cx in [
        contexts::backfill(),
        contexts::replay(),
        contexts::stale(),
        contexts::unknown(),
    ] {
        let outcome = mailer
            .send(&cx, &crate::support::only_copy(&email))
            .await
            .expect("suppressed");
        assert!(outcome.is_suppressed());
    }
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "no connection may be attempted: {accepted:?}"
    );

    // Control: a live send does connect (and times out waiting for a banner: transient).
    let error = mailer
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect_err("no SMTP banner");
    let SendError::Failed {
        attempts: 1,
        source,
    } = &error
    else {
        panic!("expected one failed attempt, got {error:?}");
    };
    assert!(source.is_timeout() && error.is_transient(), "{error}");
    assert!(listener.accept().is_ok(), "the live send connected");
}
