//! Canary secrets: they reach the receiver and nowhere else.

use std::sync::Arc;

use replaysafe_core::{Journal, TracingJournal};
use replaysafe_test::contexts;
use replaysafe_webhook::{Trigger, TriggerClient, Webhook, WebhookClient};
use secrecy::SecretString;
use serde_json::json;

use crate::support::{JournalFile, Receiver, Reply, loopback_only, quick_retries};

const BEARER: &str = "canary-bearer-4f1d9c";
const API_KEY: &str = "canary-api-key-77e0";
const PASSWORD: &str = "canary-password-b2a8";
const QUERY_TOKEN: &str = "canary-query-token-51c3";
/// `whsec_` + base64 of the 32 bytes `canary-signing-secret-0123456789`.
const SIGNING_SECRET: &str = "whsec_Y2FuYXJ5LXNpZ25pbmctc2VjcmV0LTAxMjM0NTY3ODk=";
const SIGNING_SECRET_BASE64: &str = "Y2FuYXJ5LXNpZ25pbmctc2VjcmV0LTAxMjM0NTY3ODk=";
const SIGNING_SECRET_BYTES: &str = "canary-signing-secret";

fn canaries() -> [&'static str; 7] {
    [
        BEARER,
        API_KEY,
        PASSWORD,
        QUERY_TOKEN,
        SIGNING_SECRET,
        SIGNING_SECRET_BASE64,
        SIGNING_SECRET_BYTES,
    ]
}

fn assert_clean(what: &str, text: &str) {
    for canary in canaries() {
        assert!(!text.contains(canary), "{what} leaks {canary}:\n{text}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn canary_secrets_appear_in_no_journal_line_and_no_log_line() {
    let (logs, _logging) = replaysafe_test::logs::CapturedLogs::capture_thread();

    let receiver = Receiver::start().await;
    // Delivered after a 500; refused for good with a 401; then a live SSRF refusal.
    receiver.reply([Reply::status(500), Reply::status(200), Reply::status(401)]);
    let journal = JournalFile::new();
    let file = journal.open();
    let both = (Arc::clone(&file), TracingJournal);

    let webhooks = WebhookClient::builder(receiver.url(&format!("/hooks?token={QUERY_TOKEN}")))
        .bearer_token(SecretString::from(BEARER))
        .secret_header("X-Api-Key", SecretString::from(API_KEY))
        .signing_secret(SecretString::from(SIGNING_SECRET))
        .ssrf_policy(loopback_only())
        .build(both)
        .unwrap()
        .with_retry(quick_retries());
    let airflow = TriggerClient::airflow(receiver.url("/airflow"))
        .basic_auth("pipeline", SecretString::from(PASSWORD))
        .ssrf_policy(loopback_only())
        .build((Arc::clone(&file), TracingJournal))
        .unwrap();

    let webhook = Webhook::json("orders.daily_total", json!({"orders": 1}));
    let delivered = webhooks.send(&contexts::live(), &webhook).await.unwrap();
    assert!(delivered.is_delivered());
    let rejected = webhooks
        .send(
            &contexts::live(),
            &Webhook::json("orders.refunds", json!({})),
        )
        .await
        .unwrap_err();
    let refused = webhooks
        .send(
            &contexts::live(),
            &webhook
                .clone()
                .to(format!("http://169.254.169.254/x?token={QUERY_TOKEN}")),
        )
        .await
        .unwrap_err();
    assert!(
        webhooks
            .send(&contexts::backfill(), &webhook)
            .await
            .unwrap()
            .is_suppressed()
    );
    assert!(
        airflow
            .send(&contexts::live(), &Trigger::new("daily_reports"))
            .await
            .unwrap()
            .is_delivered()
    );
    assert!(
        airflow
            .send(&contexts::backfill(), &Trigger::new("daily_reports"))
            .await
            .unwrap()
            .is_suppressed()
    );
    file.flush().unwrap();

    // The receiver did get the secrets: the test would prove nothing otherwise.
    let requests = receiver.requests();
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {BEARER}").as_str())
    );
    assert_eq!(requests[0].header("x-api-key"), Some(API_KEY));
    assert_eq!(
        requests[0].query.as_deref(),
        Some(format!("token={QUERY_TOKEN}").as_str())
    );
    assert!(
        requests
            .last()
            .unwrap()
            .header("authorization")
            .unwrap()
            .starts_with("Basic ")
    );

    let lines = journal.text();
    // 7 decisions, and an attempting line before each of the 5 delivery attempts.
    assert_eq!(lines.lines().count(), 12, "{lines}");
    assert_clean("the journal", &lines);
    let log = logs.text();
    assert!(
        log.contains("replaysafe::journal"),
        "the tracing journal logged: {log}"
    );
    assert!(
        log.contains("would have sent"),
        "suppressions are logged: {log}"
    );
    assert!(
        log.contains("401 unauthorized"),
        "failures are logged: {log}"
    );
    assert_clean("the log", &log);
    for (what, text) in [
        ("the rejection", format!("{rejected} {rejected:?}")),
        ("the refusal", format!("{refused} {refused:?}")),
        ("the webhook client", format!("{webhooks:?}")),
        ("the trigger client", format!("{airflow:?}")),
        (
            "a builder",
            format!(
                "{:?}",
                WebhookClient::builder(format!("https://x.example/?t={QUERY_TOKEN}"))
                    .bearer_token(SecretString::from(BEARER))
            ),
        ),
    ] {
        assert_clean(what, &text);
    }
}

/// A Slack-style secret in the path: with the origin or a hash chosen on the builder, it
/// reaches the receiver and neither the journal, the log, the outcome nor any error.
#[tokio::test(flavor = "current_thread")]
async fn a_secret_path_is_kept_out_of_journal_log_and_errors_when_redacted() {
    use replaysafe_core::{RedactionPolicy, TargetRedaction};
    const PATH_SECRET: &str = "canaryPathSecret9f2c";

    for redaction in [TargetRedaction::DomainOnly, TargetRedaction::Hashed] {
        let (logs, _logging) = replaysafe_test::logs::CapturedLogs::capture_thread();
        let receiver = Receiver::start().await;
        // Delivered, then a 500 on every attempt, then a refusal before connecting.
        receiver.reply([Reply::status(200), Reply::status(500), Reply::status(500)]);
        let journal = JournalFile::new();
        let file = journal.open();
        let path = format!("/services/T000/B000/{PATH_SECRET}");
        let client = WebhookClient::builder(receiver.url(&path))
            .ssrf_policy(loopback_only())
            .redaction(RedactionPolicy::new(redaction))
            .build((Arc::clone(&file), TracingJournal))
            .unwrap()
            .with_retry(quick_retries().with_max_attempts(2));
        assert_eq!(client.redaction().target(), redaction);

        let webhook = Webhook::json("alert", json!({"text": "hi"}));
        let delivered = client.send(&contexts::live(), &webhook).await.unwrap();
        assert!(delivered.is_delivered());
        let failed = client
            .send(&contexts::live(), &Webhook::json("alert.again", json!({})))
            .await
            .unwrap_err();
        let refused = client
            .send(
                &contexts::live(),
                &webhook.clone().to(format!("http://10.0.0.1{path}")),
            )
            .await
            .unwrap_err();
        let suppressed = client.send(&contexts::backfill(), &webhook).await.unwrap();
        assert!(suppressed.is_suppressed());
        file.flush().unwrap();

        // The receiver got the secret path: otherwise the test would prove nothing.
        assert!(receiver.requests().iter().all(|r| r.path == path));
        assert_eq!(receiver.requests().len(), 3);
        let error = replaysafe_core::error_chain(&failed);
        assert!(error.contains("500 internal server error"), "{error}");
        let shown = redaction.apply(&receiver.url(&path)).into_owned();
        assert!(error.contains(&shown), "the error shows {shown}: {error}");
        let lines = journal.text();
        // Delivered (2 records), two failed attempts (4), the refusal (2), the suppression (1).
        assert_eq!(lines.lines().count(), 9, "{lines}");
        for (what, text) in [
            ("the journal", lines),
            ("the log", logs.text()),
            ("the failure", format!("{error} {failed:?}")),
            (
                "the refusal",
                format!("{} {refused:?}", replaysafe_core::error_chain(&refused)),
            ),
            ("the client", format!("{client:?}")),
        ] {
            assert!(
                !text.contains(PATH_SECRET),
                "{redaction:?}: {what} leaks the path:\n{text}"
            );
        }
    }
}
