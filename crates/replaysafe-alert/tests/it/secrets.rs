//! The PagerDuty routing key and the Slack webhook URL reach no journal line, no log
//! line, no `Debug` output and no error, whatever happens to the effect.

use replaysafe_alert::{Alert, PagerDutyClient, SlackClient, SlackMessage};
use replaysafe_core::RetryPolicy;
use replaysafe_test::contexts;
use secrecy::SecretString;

use crate::pagerduty::{self, ROUTING_KEY};
use crate::slack;
use crate::support::{
    FileJournal, Receiver, Reply, SLACK_PATH, pagerduty_contract, slack_contract,
    suppressing_contexts,
};
use replaysafe_test::logs::CapturedLogs;

const SLACK_SECRET: &str = "slack-canary-7f3a91c2";

#[tokio::test]
async fn the_routing_key_and_the_slack_url_appear_in_no_journal_or_log_line() {
    let (logs, _capture) = CapturedLogs::capture_thread();
    let journal = FileJournal::new();
    let pd_receiver = Receiver::start(pagerduty_contract).await;
    let slack_receiver = Receiver::start(slack_contract).await;
    let pagerduty = pagerduty::client(&pd_receiver, &journal);
    let slack = slack::client(&slack_receiver, &journal);
    let alert = Alert::trigger("orders_freshness", "orders are late");
    let cx = contexts::live();

    // Delivered, retried, failed and suppressed, on both receivers.
    pagerduty.send(&cx, &alert).await.unwrap();
    slack
        .send(&cx, &SlackMessage::from_alert(&alert))
        .await
        .unwrap();
    pd_receiver.script([
        Reply::new(429, "throttled").retry_after("0"),
        Reply::new(400, "invalid event"),
    ]);
    slack_receiver.script([
        Reply::new(503, "down").retry_after("0"),
        Reply::new(404, "no_service"),
    ]);
    let again = contexts::live_hour();
    let pd_error = pagerduty.send(&again, &alert).await.unwrap_err();
    let slack_error = slack
        .send(&again, &SlackMessage::from_alert(&alert))
        .await
        .unwrap_err();
    for (_, cx) in suppressing_contexts("daily_orders") {
        pagerduty.send(&cx, &alert).await.unwrap();
        slack
            .send(&cx, &SlackMessage::from_alert(&alert))
            .await
            .unwrap();
    }

    // A Slack URL that refuses connections: the transport error must not name it either.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}{SLACK_PATH}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = SlackClient::builder(SecretString::from(closed_url))
        .ssrf_policy(crate::support::loopback())
        .build(journal.journal.clone())
        .unwrap()
        .with_retry(RetryPolicy::none());
    let transport_error = unreachable
        .send(&cx, &SlackMessage::from_alert(&alert))
        .await
        .unwrap_err();
    // An unparsable URL is refused without repeating it.
    let invalid = SlackClient::builder(SecretString::from(format!("not a url {SLACK_SECRET}")))
        .ssrf_policy(crate::support::loopback())
        .build(journal.journal.clone())
        .unwrap_err();
    let empty_key = PagerDutyClient::builder(SecretString::from(" "))
        .ssrf_policy(crate::support::loopback())
        .build(journal.journal.clone())
        .unwrap_err();

    let journal_text = journal.text();
    // 17 decisions, and an `attempting` line before each of the 7 delivery attempts.
    assert_eq!(journal_text.lines().count(), 24, "{journal_text}");
    let logs_text = logs.text();
    assert!(
        logs_text.contains("would have sent"),
        "logs were not captured:\n{logs_text}"
    );
    let shown = [
        ("journal", journal_text),
        ("logs", logs_text),
        ("pagerduty Debug", format!("{pagerduty:?}")),
        ("slack Debug", format!("{slack:?} {unreachable:?}")),
        (
            "errors",
            format!(
                "{} {pd_error:?} {} {slack_error:?}",
                replaysafe_core::error_chain(&pd_error),
                replaysafe_core::error_chain(&slack_error)
            ),
        ),
        (
            "transport error",
            format!(
                "{} {transport_error:?}",
                replaysafe_core::error_chain(&transport_error)
            ),
        ),
        ("build errors", format!("{invalid} {invalid:?} {empty_key}")),
    ];
    for (place, text) in shown {
        assert!(
            !text.contains(ROUTING_KEY),
            "the routing key is in the {place}:\n{text}"
        );
        assert!(
            !text.contains(SLACK_SECRET),
            "the Slack URL is in the {place}:\n{text}"
        );
        assert!(
            !text.contains("T0TEST/B0TEST"),
            "the Slack URL is in the {place}:\n{text}"
        );
    }
    assert!(
        replaysafe_core::error_chain(&transport_error).contains("connection failed"),
        "{transport_error}"
    );
}
