//! Suppressed webhooks touch no network: no DNS lookup, no connection, no request.

use replaysafe_core::{Journal, Mode, ReplayContext};
use replaysafe_test::contexts;
use replaysafe_webhook::{Webhook, WebhookClient};
use secrecy::SecretString;
use serde_json::json;

use crate::support::{JournalFile, Receiver, loopback_only};

fn order_totals() -> Webhook {
    Webhook::json("orders.daily_total", json!({"orders": 1204}))
}

/// Sends under `cx` to a live receiver and checks that nothing reached it and that the
/// journal holds exactly one suppressed record with `reasons`.
async fn assert_suppressed(cx: ReplayContext, reasons: &[&str]) {
    let receiver = Receiver::start().await;
    let journal = JournalFile::new();
    let client = WebhookClient::builder(receiver.url("/hooks"))
        .signing_secret(SecretString::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
        .ssrf_policy(loopback_only())
        .build(journal.open())
        .unwrap();

    let outcome = client.send(&cx, &order_totals()).await.unwrap();
    assert!(outcome.is_suppressed());
    client.journal().flush().unwrap();

    assert!(
        receiver.requests().is_empty(),
        "no request reached the receiver"
    );
    assert_eq!(receiver.connections(), 0, "no connection was even opened");
    let records = journal.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["decision"], "suppressed");
    assert_eq!(record["reasons"], json!(reasons));
    assert_eq!(record["attempt"], 0);
    assert_eq!(record["run_id"], cx.run_id().as_str());
    assert_eq!(record["effect"]["kind"], "webhook");
    assert_eq!(record["effect"]["message_type"], "orders.daily_total");
    assert_eq!(record["effect"]["idempotency_key"], outcome.key().as_str());
    assert_eq!(
        record["effect"]["target"],
        format!("http://127.0.0.1:{}/hooks", receiver.port())
    );
}

#[tokio::test]
async fn backfill_sends_nothing_and_journals_one_suppressed_record() {
    assert_suppressed(contexts::backfill(), &["replay_run", "stale_window"]).await;
}

#[tokio::test]
async fn replay_flag_sends_nothing_and_journals_one_suppressed_record() {
    assert_suppressed(contexts::replay(), &["replay_flag"]).await;
}

#[tokio::test]
async fn stale_window_sends_nothing_and_journals_one_suppressed_record() {
    assert_suppressed(contexts::stale(), &["stale_window"]).await;
}

#[tokio::test]
async fn unknown_context_sends_nothing_and_journals_one_suppressed_record() {
    assert_suppressed(contexts::unknown(), &["unknown_context"]).await;
}

#[tokio::test]
async fn dry_run_sends_nothing_and_journals_one_suppressed_record() {
    assert_suppressed(contexts::live().with_mode(Mode::DryRun), &["dry_run"]).await;
}

#[tokio::test]
async fn backfill_with_an_unresolvable_endpoint_still_journals_cleanly() {
    // `.invalid` never resolves (RFC 6761); a lookup would fail, so a clean journal proves
    // that none was made. The default SSRF policy is in force and is never consulted either.
    let journal = JournalFile::new();
    let client = WebhookClient::builder("https://partner.invalid/hooks/orders?token=abc")
        .build(journal.open())
        .unwrap();
    for window in contexts::last_month_window()
        .split(chrono::TimeDelta::hours(6))
        .unwrap()
    {
        let cx = contexts::backfill().with_window(window);
        assert!(
            client
                .send(&cx, &order_totals())
                .await
                .unwrap()
                .is_suppressed()
        );
    }
    client.journal().flush().unwrap();
    let records = journal.records();
    assert_eq!(records.len(), 4);
    for record in &records {
        assert_eq!(record["decision"], "suppressed");
        assert_eq!(record["error"], serde_json::Value::Null);
        assert_eq!(
            record["effect"]["target"],
            "https://partner.invalid/hooks/orders"
        );
    }
    assert!(
        !journal.text().contains("token"),
        "no query string in the journal"
    );
}
