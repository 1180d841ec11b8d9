//! The SMTP password and the body reach no journal line and no log line.

use std::sync::Arc;

use replaysafe_core::{Journal, JsonlJournal};
use replaysafe_email::EmailGuardExt;
use replaysafe_test::contexts;

use replaysafe_test::logs::CapturedLogs;

use crate::support::{self, mails_containing};

#[tokio::test]
async fn password_and_body_canary_reach_no_journal_or_log_line() {
    let (logs, _capture) = CapturedLogs::capture_thread();
    let server = support::tls_server();
    let domain = support::unique_domain("secrets");
    let ana = format!("ana@{domain}");
    let body_canary = "body-canary-9b1c4e77";
    let wrong_password = "wrong-password-canary-61fd";
    let folder = tempfile::tempdir().expect("temp dir");
    let journal_path = folder.path().join("journal.jsonl");
    let journal = Arc::new(JsonlJournal::open(&journal_path).expect("journal"));

    let email = support::simple_email(&domain, &[ana.as_str()])
        .text(format!("Totals attached. {body_canary}\n"))
        .html(format!("<p>{body_canary}</p>"))
        .build();

    // Delivered with the right password.
    let good = support::tls_client(&server, &server.password, journal.clone());
    let sent = good
        .send_email(&contexts::live(), &email)
        .await
        .expect("valid");
    assert_eq!(sent.delivered(), 1);
    // Refused with a wrong one.
    let bad = support::tls_client(&server, wrong_password, journal.clone());
    let refused = bad
        .send_email(&contexts::live_hour(), &email)
        .await
        .expect("valid");
    assert_eq!(refused.failed(), 1);
    // Suppressed in a backfill.
    let suppressed = good
        .send_email(&contexts::backfill(), &email)
        .await
        .expect("valid");
    assert_eq!(suppressed.suppressed(), 1);
    // And the Debug forms of both clients, of the email and of the error.
    tracing::info!(client = ?good.unguarded_ref(), other = ?bad.unguarded_ref(), ?email, "clients");
    let error = refused.into_result().expect_err("refused");
    tracing::info!(%error, ?error, "error");

    journal.flush().expect("flush");
    let journaled = std::fs::read_to_string(&journal_path).expect("journal file");
    let logged = logs.text();
    // delivered, failed, suppressed, and an attempting line before each of the 2 attempts.
    assert_eq!(journaled.lines().count(), 5, "{journaled}");
    assert!(
        logged.contains("would have sent email daily_summary to *@"),
        "{logged}"
    );
    assert!(logged.contains("535"), "the failure is logged: {logged}");

    for secret in [
        server.password.as_str(),
        wrong_password,
        body_canary,
        ana.as_str(),
    ] {
        assert!(
            !journaled.contains(secret),
            "{secret} in the journal:\n{journaled}"
        );
        assert!(!logged.contains(secret), "{secret} in the logs:\n{logged}");
    }

    // Control: the canary did travel in the message itself.
    let mails = mails_containing(&server.maildir, &domain);
    assert_eq!(mails.len(), 1);
    assert!(mails[0].raw.contains(body_canary));
}
