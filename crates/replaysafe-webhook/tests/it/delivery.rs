//! Live deliveries: what reaches the receiver, and what the journal says.

use std::sync::Arc;

use replaysafe_core::{MemoryJournal, RunId, RunKind};
use replaysafe_test::contexts;
use replaysafe_webhook::{Method, SigningSecret, Webhook, WebhookClient};
use secrecy::SecretString;
use serde_json::json;

use crate::support::{JournalFile, Receiver, loopback_only, unix_now, verify_standard_webhook};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ROTATED_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn order_totals() -> Webhook {
    Webhook::json(
        "orders.daily_total",
        json!({"orders": 1204, "revenue_eur": 88412.5}),
    )
}

#[tokio::test]
async fn live_delivery_arrives_once_with_idempotency_headers_and_a_verifiable_signature() {
    let receiver = Receiver::start().await;
    let journal = JournalFile::new();
    let client = WebhookClient::builder(receiver.url("/hooks/orders?tenant=7"))
        .signing_secret(SecretString::from(SECRET))
        .ssrf_policy(loopback_only())
        .build(journal.open())
        .unwrap();

    let outcome = client
        .send(&contexts::live(), &order_totals())
        .await
        .unwrap();
    assert!(outcome.is_delivered());
    assert_eq!(outcome.receipt().unwrap().status, 200);
    let key = outcome.key().as_str();

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1, "delivered exactly once");
    let request = &requests[0];
    assert_eq!(request.method, Method::POST);
    assert_eq!(request.path, "/hooks/orders");
    assert_eq!(
        request.query.as_deref(),
        Some("tenant=7"),
        "the query is sent"
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.body, order_totals().body());
    assert_eq!(
        request.header("idempotency-key"),
        Some(format!("\"{key}\"").as_str())
    );
    assert_eq!(request.header("webhook-id"), Some(key));
    verify_standard_webhook(SECRET, &request.headers, &request.body, unix_now(), 300)
        .expect("the signature verifies with a verifier written from the spec");
    // The same verifier refuses a body that was changed in transit.
    assert!(
        verify_standard_webhook(SECRET, &request.headers, b"{\"orders\":0}", unix_now(), 300)
            .is_err()
    );

    client.journal().flush().unwrap();
    let records = journal.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["decision"], "attempting");
    let record = &records[1];
    assert_eq!(record["decision"], "delivered");
    assert_eq!(record["reasons"], json!(["current_window"]));
    assert_eq!(record["attempt"], 1);
    assert_eq!(record["effect"]["kind"], "webhook");
    assert_eq!(record["effect"]["message_type"], "orders.daily_total");
    assert_eq!(record["effect"]["summary"], "orders.daily_total");
    assert_eq!(record["effect"]["idempotency_key"], key);
    assert_eq!(
        record["effect"]["target"],
        format!("http://127.0.0.1:{}/hooks/orders", receiver.port()),
        "scheme, host and path only"
    );
    assert_eq!(
        record["effect"]["payload_bytes"],
        order_totals().body().len()
    );
}

#[test]
fn the_independent_verifier_accepts_the_published_test_vector() {
    // The test vector of the Standard Webhooks reference libraries.
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(
        "webhook-id",
        "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk".parse().unwrap(),
    );
    headers.insert("webhook-timestamp", "1649367553".parse().unwrap());
    headers.insert(
        "webhook-signature",
        "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
            .parse()
            .unwrap(),
    );
    let body = br#"{"email":"test@example.com","username":"test_user"}"#;
    verify_standard_webhook(ROTATED_SECRET, &headers, body, 1649367553, 300).unwrap();
    assert!(verify_standard_webhook(ROTATED_SECRET, &headers, b"{}", 1649367553, 300).is_err());
    assert!(verify_standard_webhook(SECRET, &headers, body, 1649367553, 300).is_err());
    assert!(
        verify_standard_webhook(ROTATED_SECRET, &headers, body, 1649367553 + 301, 300).is_err(),
        "stale timestamps are refused"
    );
    // And the crate's signer produces the published signature.
    let signer = SigningSecret::new(ROTATED_SECRET.into()).unwrap();
    assert_eq!(
        signer.sign("msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553, body),
        "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
    );
}

#[tokio::test]
async fn rotated_secrets_each_sign_the_delivery() {
    let receiver = Receiver::start().await;
    let client = WebhookClient::builder(receiver.url("/hooks"))
        .signing_secret(SecretString::from(SECRET))
        .signing_secret(SecretString::from(ROTATED_SECRET))
        .ssrf_policy(loopback_only())
        .build(MemoryJournal::new())
        .unwrap();
    client
        .send(&contexts::live(), &order_totals())
        .await
        .unwrap();

    let request = &receiver.requests()[0];
    assert_eq!(
        request
            .header("webhook-signature")
            .unwrap()
            .split(' ')
            .count(),
        2
    );
    for secret in [SECRET, ROTATED_SECRET] {
        verify_standard_webhook(secret, &request.headers, &request.body, unix_now(), 300).unwrap();
    }
}

#[tokio::test]
async fn same_logical_effect_from_two_runs_carries_the_same_ids() {
    let receiver = Receiver::start().await;
    // Two workers, each with its own journal: no ledger between them, the receiver
    // de-duplicates by the ids.
    let client = || {
        WebhookClient::builder(receiver.url("/hooks"))
            .signing_secret(SecretString::from(SECRET))
            .ssrf_policy(loopback_only())
            .build(MemoryJournal::new())
            .unwrap()
    };

    let first_run = contexts::live();
    let second_run = contexts::live()
        .with_run_id(RunId::new("scheduled__2026-08-05T00:00:00Z__attempt_2").unwrap())
        .with_run_kind(RunKind::Retry);
    assert_ne!(first_run.run_id(), second_run.run_id());
    let first = client().send(&first_run, &order_totals()).await.unwrap();
    let second = client().send(&second_run, &order_totals()).await.unwrap();
    assert!(first.is_delivered() && second.is_delivered());
    assert_eq!(first.key(), second.key());

    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    for header in ["idempotency-key", "webhook-id"] {
        assert_eq!(
            requests[0].header(header),
            requests[1].header(header),
            "{header}"
        );
    }
    assert_eq!(requests[0].header("webhook-id"), Some(first.key().as_str()));

    // Another logical effect (another event type) gets another id.
    let other = client()
        .send(
            &first_run,
            &Webhook::json("orders.refunds", json!({"refunds": 3})),
        )
        .await
        .unwrap();
    assert_ne!(other.key(), first.key());
    assert_eq!(
        receiver.requests()[2].header("webhook-id"),
        Some(other.key().as_str())
    );
}

#[tokio::test]
async fn method_headers_raw_bodies_and_per_effect_endpoints_are_sent_as_configured() {
    let receiver = Receiver::start().await;
    let journal = Arc::new(MemoryJournal::new());
    let client = WebhookClient::builder(receiver.url("/default"))
        .method(Method::PUT)
        .header("X-Team", "data-eng")
        .secret_header("X-Api-Key", SecretString::from("key-123"))
        .ssrf_policy(loopback_only())
        .build(journal.clone())
        .unwrap();

    let csv = Webhook::raw("orders.export", "text/csv", "id,total\n1,9.5\n")
        .to(receiver.url("/exports?sig=abc"));
    let outcome = client.send(&contexts::live(), &csv).await.unwrap();
    assert!(outcome.is_delivered());

    let request = &receiver.requests()[0];
    assert_eq!(request.method, Method::PUT);
    assert_eq!(request.path, "/exports");
    assert_eq!(request.header("content-type"), Some("text/csv"));
    assert_eq!(request.header("x-team"), Some("data-eng"));
    assert_eq!(request.header("x-api-key"), Some("key-123"));
    assert_eq!(request.body, b"id,total\n1,9.5\n");
    assert!(
        request.header("webhook-signature").is_none(),
        "no secret, no signature"
    );
    assert!(request.header("idempotency-key").is_some());
    let records = journal.records();
    assert_eq!(
        records[0].effect.target,
        format!("http://127.0.0.1:{}/exports", receiver.port())
    );
}

#[tokio::test]
async fn invalid_effects_are_refused_before_anything_is_sent() {
    let receiver = Receiver::start().await;
    let journal = Arc::new(MemoryJournal::new());
    let client = WebhookClient::builder(receiver.url("/hooks"))
        .ssrf_policy(loopback_only())
        .build(journal.clone())
        .unwrap();

    for (webhook, field) in [
        (Webhook::json("", json!({})), "event_type"),
        (Webhook::json("orders\r\nx", json!({})), "event_type"),
        (Webhook::raw("orders", "text/plain\n", "x"), "content_type"),
        (
            Webhook::json("orders", json!({})).to("ftp://files.example/x"),
            "webhook endpoint",
        ),
        (
            Webhook::json("orders", json!({})).to("https://ana:pw@hooks.example/x"),
            "webhook endpoint",
        ),
    ] {
        for cx in [contexts::live(), contexts::backfill()] {
            let error = client.send(&cx, &webhook).await.unwrap_err();
            match error {
                replaysafe_core::SendError::Invalid(error) => {
                    assert_eq!(error.field(), Some(field), "{error}");
                    assert!(!error.to_string().contains("pw@"), "{error}");
                }
                other => panic!("expected an invalid effect, got {other}"),
            }
        }
    }
    assert!(receiver.requests().is_empty());
    assert!(journal.is_empty(), "invalid effects are not journaled");
}

#[tokio::test]
async fn invalid_configuration_names_the_field() {
    let cases = [
        (WebhookClient::builder("not a url"), "endpoint"),
        (
            WebhookClient::builder("https://hooks.example/x").timeout(std::time::Duration::ZERO),
            "timeout",
        ),
        (
            WebhookClient::builder("https://hooks.example/x")
                .signing_secret(SecretString::from("whsec_c2hvcnQ=")),
            "signing_secret",
        ),
        (
            WebhookClient::builder("https://hooks.example/x").header("webhook-id", "mine"),
            "header",
        ),
    ];
    for (builder, field) in cases {
        let error = builder.build(MemoryJournal::new()).unwrap_err();
        assert!(error.is_invalid(), "{error}");
        assert_eq!(error.field(), Some(field), "{error}");
    }
}

/// The Standard Webhooks reference verifier (the `standardwebhooks` package from PyPI,
/// provided by `cargo xtask`) accepts what replaysafe signs, and refuses a changed body.
#[tokio::test]
async fn the_reference_python_verifier_accepts_the_signature() {
    let python_path =
        replaysafe_test::services::require("REPLAYSAFE_TEST_STANDARDWEBHOOKS_PYTHONPATH");
    let receiver = Receiver::start().await;
    let client = WebhookClient::builder(receiver.url("/hooks/orders"))
        .signing_secret(SecretString::from(SECRET))
        .ssrf_policy(loopback_only())
        .build(MemoryJournal::new())
        .unwrap();
    assert!(
        client
            .send(&contexts::live(), &order_totals())
            .await
            .unwrap()
            .is_delivered()
    );
    let request = receiver.requests().remove(0);
    let headers: serde_json::Map<String, serde_json::Value> =
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .into_iter()
            .map(|name| {
                (
                    name.to_owned(),
                    json!(request.header(name).expect("signed header")),
                )
            })
            .collect();

    const VERIFY: &str = "import json, os, sys\n\
        from standardwebhooks import Webhook\n\
        request = json.load(sys.stdin)\n\
        body = request['body'].encode()\n\
        Webhook(os.environ['SECRET']).verify(body, request['headers'])\n\
        try:\n    Webhook(os.environ['SECRET']).verify(body + b' ', request['headers'])\n\
        except Exception:\n    print('verified; tampered body refused')\n";
    let input =
        json!({"headers": headers, "body": String::from_utf8(request.body.clone()).unwrap()});
    let mut child = std::process::Command::new("python3")
        .args(["-c", VERIFY])
        .env("PYTHONPATH", &python_path)
        .env("SECRET", SECRET)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the reference verifier refused: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "verified; tampered body refused"
    );
}
