//! How answers from a real receiver are classified, retried or not.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use replaysafe_core::{Classify, Guard, MemoryJournal, RetryPolicy, SendError};
use replaysafe_test::contexts;
use replaysafe_webhook::{Error, Webhook, WebhookClient, WebhookReceipt};
use serde_json::json;

use crate::support::{Receiver, Reply, loopback_only, quick_retries, settle, yield_until};

fn order_totals() -> Webhook {
    Webhook::json("orders.daily_total", json!({"orders": 1204}))
}

fn client(receiver: &Receiver, retry: RetryPolicy) -> (Guard<WebhookClient>, Arc<MemoryJournal>) {
    let journal = Arc::new(MemoryJournal::new());
    let client = WebhookClient::builder(receiver.url("/hooks"))
        .ssrf_policy(loopback_only())
        .build(journal.clone())
        .unwrap()
        .with_retry(retry);
    (client, journal)
}

fn failed(
    result: Result<replaysafe_core::Outcome<WebhookReceipt>, SendError<Error>>,
) -> (u32, Error) {
    match result {
        Err(SendError::Failed { attempts, source }) => (attempts, source),
        other => panic!("expected a failed delivery, got {other:?}"),
    }
}

#[tokio::test]
async fn service_unavailable_then_ok_is_retried_and_delivered_once() {
    let receiver = Receiver::start().await;
    receiver.reply([Reply::status(503)]);
    let (client, journal) = client(&receiver, quick_retries());

    let outcome = client
        .send(&contexts::live(), &order_totals())
        .await
        .unwrap();
    match &outcome {
        replaysafe_core::Outcome::Delivered(delivered) => assert_eq!(delivered.attempts, 2),
        other => panic!("expected delivery, got {other:?}"),
    }
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2, "one refused attempt, one accepted");
    assert_eq!(
        requests[0].header("idempotency-key"),
        requests[1].header("idempotency-key")
    );
    let records = journal.records();
    let decisions: Vec<_> = records
        .iter()
        .map(|r| (r.decision.as_str(), r.attempt))
        .collect();
    assert_eq!(
        decisions,
        [
            ("attempting", 1),
            ("failed", 1),
            ("attempting", 2),
            ("delivered", 2)
        ]
    );
    assert!(
        records[1]
            .error
            .as_deref()
            .unwrap()
            .ends_with("/hooks: 503 service unavailable"),
        "{:?}",
        records[1].error
    );
}

/// The guard sleeps with `tokio::time::sleep`. With the clock paused, the test keeps the
/// runtime busy (so time never advances on its own while sockets are in flight) and moves
/// the clock by hand: nothing may arrive before `Retry-After` has passed.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn too_many_requests_waits_for_retry_after() {
    let receiver = Receiver::start().await;
    receiver.reply([Reply::status(429).header("retry-after", "7")]);
    let (client, journal) = client(&receiver, RetryPolicy::default());

    let sending =
        tokio::spawn(async move { client.send(&contexts::live(), &order_totals()).await });
    // attempting, then failed
    yield_until("the 429 is journaled", || journal.len() == 2).await;
    let records = journal.records();
    assert!(
        records[1]
            .error
            .as_deref()
            .unwrap()
            .ends_with("429 too many requests (retry after 7s)")
    );

    tokio::time::advance(Duration::from_secs(7) - Duration::from_millis(1)).await;
    settle(2_000).await;
    assert_eq!(
        receiver.requests().len(),
        1,
        "retried before Retry-After elapsed"
    );

    tokio::time::advance(Duration::from_millis(1)).await;
    yield_until("the retry is delivered", || journal.len() == 4).await;
    let outcome = sending.await.unwrap().unwrap();
    assert!(outcome.is_delivered());
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].at - requests[0].at >= Duration::from_secs(7));
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_read() {
    let receiver = Receiver::start().await;
    let in_ninety_seconds = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(90));
    receiver.reply([Reply::status(503).header("retry-after", in_ninety_seconds)]);
    let (client, _journal) = client(&receiver, RetryPolicy::default());

    // 90 s is past the default retry budget (60 s): the guard gives up at once rather than sleep.
    let (attempts, error) = failed(client.send(&contexts::live(), &order_totals()).await);
    assert_eq!(attempts, 1);
    assert!(error.is_transient());
    let wait = error.retry_after().unwrap();
    assert!(
        wait > Duration::from_secs(85) && wait <= Duration::from_secs(90),
        "{wait:?}"
    );
    assert_eq!(receiver.requests().len(), 1);
}

#[tokio::test]
async fn bad_request_is_not_retried() {
    let receiver = Receiver::start().await;
    receiver.reply([Reply::status(400)]);
    let (client, journal) = client(&receiver, quick_retries());

    let (attempts, error) = failed(client.send(&contexts::live(), &order_totals()).await);
    assert_eq!(attempts, 1);
    assert!(error.is_permanent());
    assert_eq!(error.status(), Some(400));
    assert_eq!(error.error_type(), "400");
    assert_eq!(receiver.requests().len(), 1);
    let decisions: Vec<_> = journal
        .records()
        .iter()
        .map(|r| r.decision.as_str())
        .collect();
    assert_eq!(decisions, ["attempting", "failed"]);
}

#[tokio::test]
async fn gone_is_permanent_and_says_the_endpoint_is_gone() {
    let receiver = Receiver::start().await;
    receiver.reply([Reply::status(410)]);
    let (client, _journal) = client(&receiver, quick_retries());

    let (attempts, error) = failed(client.send(&contexts::live(), &order_totals()).await);
    assert_eq!(attempts, 1);
    assert!(error.is_permanent() && error.is_endpoint_gone());
    assert_eq!(
        error.to_string(),
        format!(
            "sending webhook to http://127.0.0.1:{}/hooks: 410 gone: the endpoint is gone; stop sending to it",
            receiver.port()
        )
    );
    assert_eq!(receiver.requests().len(), 1);
}

#[tokio::test]
async fn redirect_is_a_failure_and_is_not_followed() {
    let receiver = Receiver::start().await;
    receiver.reply([Reply::status(302).header("location", receiver.url("/elsewhere"))]);
    let (client, _journal) = client(&receiver, quick_retries());

    let (attempts, error) = failed(client.send(&contexts::live(), &order_totals()).await);
    assert_eq!(attempts, 1);
    assert!(error.is_redirect() && error.is_permanent());
    assert!(
        error
            .to_string()
            .ends_with("302 found: redirects are not followed")
    );
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1, "the Location was not requested");
    assert_eq!(requests[0].path, "/hooks");
}

#[tokio::test]
async fn refused_connections_are_transient_and_retried() {
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let journal = Arc::new(MemoryJournal::new());
    let client = WebhookClient::builder(format!("http://127.0.0.1:{closed_port}/hooks"))
        .ssrf_policy(loopback_only())
        .build(journal.clone())
        .unwrap()
        .with_retry(quick_retries());

    let (attempts, error) = failed(client.send(&contexts::live(), &order_totals()).await);
    assert_eq!(attempts, 3);
    assert!(error.is_connect() && error.is_transient(), "{error}");
    assert_eq!(error.error_type(), "connect");
    // The message says what failed; the cause is the source, printed once by the chain.
    assert_eq!(
        error.to_string(),
        format!("sending webhook to http://127.0.0.1:{closed_port}/hooks: connection failed")
    );
    let message = replaysafe_core::error_chain(&error);
    assert!(
        message.starts_with(&format!(
            "sending webhook to http://127.0.0.1:{closed_port}/hooks: connection failed: "
        )) && message.to_lowercase().contains("refused"),
        "the cause is named: {message}"
    );
    assert_eq!(
        journal.len(),
        6,
        "attempting and failed for each of 3 attempts"
    );
}

#[tokio::test]
async fn timeouts_are_transient() {
    let receiver = Receiver::start().await;
    receiver.reply([Reply::status(200).after(Duration::from_secs(30))]);
    let client = WebhookClient::builder(receiver.url("/slow"))
        .timeout(Duration::from_millis(200))
        .ssrf_policy(loopback_only())
        .build(MemoryJournal::new())
        .unwrap()
        .with_retry(RetryPolicy::none());

    let (attempts, error) = failed(client.send(&contexts::live(), &order_totals()).await);
    assert_eq!(attempts, 1);
    assert!(error.is_timeout() && error.is_transient(), "{error}");
    assert_eq!(error.error_type(), "timeout");
    assert!(error.to_string().ends_with("/slow: timed out"), "{error}");
}
