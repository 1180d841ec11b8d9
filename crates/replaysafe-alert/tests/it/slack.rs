//! Slack incoming webhooks against a local receiver speaking their contract.

use replaysafe_alert::{Alert, SlackClient, SlackMessage};
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Classify, Guard, RetryPolicy, SendError};
use replaysafe_test::contexts;
use secrecy::SecretString;
use serde_json::json;

use crate::support::{
    FileJournal, Receiver, Reply, SLACK_PATH, slack_contract, suppressing_contexts,
};

pub(crate) fn client(receiver: &Receiver, journal: &FileJournal) -> Guard<SlackClient> {
    SlackClient::builder(SecretString::from(receiver.url(SLACK_PATH)))
        .ssrf_policy(crate::support::loopback())
        .channel_label("#data-alerts")
        .build(journal.journal.clone())
        .unwrap()
        .with_retry(RetryPolicy::default().with_max_attempts(3))
}

fn message() -> SlackMessage {
    SlackMessage::new("orders_freshness", "Orders for 2026-08-05 are 3 h late").with_blocks(vec![
        json!({
            "type": "section",
            "text": { "type": "mrkdwn", "text": "*Orders* for 2026-08-05 are 3 h late" }
        }),
    ])
}

#[tokio::test]
async fn a_live_message_reaches_the_webhook_with_text_and_blocks() {
    let receiver = Receiver::start(slack_contract).await;
    let journal = FileJournal::new();
    let slack = client(&receiver, &journal);

    let outcome = slack.send(&contexts::live(), &message()).await.unwrap();
    slack
        .send(
            &contexts::live(),
            &SlackMessage::from_alert(&Alert::trigger("orders_volume", "half the usual rows")),
        )
        .await
        .unwrap();

    assert!(outcome.is_delivered());
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, SLACK_PATH);
    assert_eq!(
        requests[0].body["text"],
        "Orders for 2026-08-05 are 3 h late"
    );
    assert_eq!(requests[0].body["blocks"][0]["type"], "section");
    assert_eq!(
        requests[1].body["text"],
        "[FIRING] orders_volume: half the usual rows"
    );
    assert!(requests[1].body.get("blocks").is_none());
    let records = journal.records();
    assert_eq!(records[0].decision, JournalDecision::Attempting);
    assert_eq!(records[1].decision, JournalDecision::Delivered);
    assert_eq!(records[1].effect.kind, "alert");
    assert_eq!(records[1].effect.target, "slack:#data-alerts");
    assert_eq!(records[1].effect.message_type, "orders_freshness");
}

#[tokio::test]
async fn in_a_backfill_no_message_is_posted() {
    let receiver = Receiver::start(slack_contract).await;
    let journal = FileJournal::new();
    let slack = client(&receiver, &journal);

    for (name, cx) in suppressing_contexts("daily_orders") {
        assert!(
            slack.send(&cx, &message()).await.unwrap().is_suppressed(),
            "{name}"
        );
    }

    assert!(receiver.requests().is_empty());
    let records = journal.records();
    assert_eq!(records.len(), 5);
    assert!(
        records
            .iter()
            .all(|r| r.decision == JournalDecision::Suppressed)
    );
    assert_eq!(
        records[0].effect.summary.as_deref(),
        Some("Orders for 2026-08-05 are 3 h late")
    );
}

#[tokio::test]
async fn a_429_is_retried_and_a_400_is_not() {
    let receiver = Receiver::start(slack_contract).await;
    let journal = FileJournal::new();
    let slack = client(&receiver, &journal);
    let cx = contexts::live();

    receiver.script([Reply::new(429, "rate_limited").retry_after("0")]);
    assert!(slack.send(&cx, &message()).await.unwrap().is_delivered());
    assert_eq!(receiver.requests().len(), 2);

    receiver.script([Reply::new(400, "invalid_payload")]);
    let error = slack
        .send(&contexts::live_hour(), &message())
        .await
        .unwrap_err();
    let SendError::Failed { attempts, source } = &error else {
        panic!("expected a failed delivery, got {error}");
    };
    assert_eq!(*attempts, 1);
    assert!(source.is_permanent());
    assert_eq!(
        source.to_string(),
        "posting orders_freshness to slack:#data-alerts: 400 bad request"
    );
    assert_eq!(receiver.requests().len(), 3);
}

#[tokio::test]
async fn a_message_without_text_is_refused_before_sending() {
    let receiver = Receiver::start(slack_contract).await;
    let journal = FileJournal::new();
    let slack = client(&receiver, &journal);

    let error = slack
        .send(
            &contexts::live(),
            &SlackMessage::new("orders_freshness", "  "),
        )
        .await
        .unwrap_err();

    let SendError::Invalid(inner) = &error else {
        panic!("expected an invalid effect, got {error}");
    };
    assert_eq!(inner.field(), Some("text"));
    assert!(receiver.requests().is_empty());
    assert!(journal.records().is_empty());
}
