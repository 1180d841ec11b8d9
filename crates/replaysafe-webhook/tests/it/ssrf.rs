//! The SSRF guard on a live context: internal targets are refused before any connection.
//! The corpus of internal addresses runs against every HTTP adapter in the facade's tests
//! (`crates/replaysafe/tests/it/ssrf.rs`); these are the webhook's own cases.
//!
//! No test here ever connects anywhere but 127.0.0.1. Every corpus URL is checked against
//! the policy before it is handed to the client, and the loopback spellings, which point
//! at a live receiver, come first: had the client skipped its check, they would have
//! reached the receiver and failed the test before any other address was tried.

use replaysafe_core::{Classify, MemoryJournal, SendError};
use replaysafe_test::contexts;
use replaysafe_webhook::{SsrfPolicy, Webhook, WebhookClient};
use serde_json::json;

use crate::support::{Receiver, loopback_only};

fn ping() -> Webhook {
    Webhook::json("ping", json!({}))
}

#[tokio::test]
async fn host_names_resolving_to_internal_addresses_are_refused_by_the_resolver() {
    let receiver = Receiver::start().await;
    let client = WebhookClient::builder(format!("http://localhost:{}/hooks", receiver.port()))
        .build(MemoryJournal::new())
        .unwrap();

    let error = match client.send(&contexts::live(), &ping()).await {
        Err(SendError::Failed {
            attempts: 1,
            source,
        }) => source,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(error.is_ssrf_refused(), "{error}");
    assert_eq!(error.error_type(), "ssrf_refused");
    let refusal = error.ssrf_refusal().unwrap();
    assert_eq!(refusal.host(), "localhost");
    assert!(refusal.address().is_loopback());
    assert!(
        replaysafe_core::error_chain(&error).contains("localhost resolves to"),
        "{error}"
    );
    assert_eq!(receiver.connections(), 0);
}

#[tokio::test]
async fn allow_lists_open_loopback_by_host_or_by_network() {
    let receiver = Receiver::start().await;
    let by_host = WebhookClient::builder(format!("http://localhost:{}/by-host", receiver.port()))
        .ssrf_policy(SsrfPolicy::default().allow_host("localhost"))
        .build(MemoryJournal::new())
        .unwrap();
    assert!(
        by_host
            .send(&contexts::live(), &ping())
            .await
            .unwrap()
            .is_delivered()
    );

    let by_network = WebhookClient::builder(receiver.url("/by-network"))
        .ssrf_policy(loopback_only())
        .build(MemoryJournal::new())
        .unwrap();
    assert!(
        by_network
            .send(&contexts::live(), &ping())
            .await
            .unwrap()
            .is_delivered()
    );

    // The allowed network is 127.0.0.1 only: [::1] stays refused.
    let error = match by_network
        .send(
            &contexts::live(),
            &ping().to(format!("http://[::1]:{}/", receiver.port())),
        )
        .await
    {
        Err(SendError::Failed { source, .. }) => source,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(error.is_ssrf_refused());

    let paths: Vec<String> = receiver.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/by-host", "/by-network"]);
}

#[tokio::test]
async fn allow_list_text_takes_cidr_networks_and_refuses_bad_ones() {
    let receiver = Receiver::start().await;
    for entry in ["127.0.0.0/8", " 127.0.0.1/32 "] {
        let policy = SsrfPolicy::default().allow(entry).unwrap();
        let client = WebhookClient::builder(receiver.url("/cidr"))
            .ssrf_policy(policy)
            .build(MemoryJournal::new())
            .unwrap();
        let outcome = client.send(&contexts::live(), &ping()).await;
        assert!(
            outcome.as_ref().is_ok_and(|o| o.is_delivered()),
            "{entry}: {outcome:?}"
        );
    }
    // A network that does not hold the receiver's address leaves it refused.
    let client = WebhookClient::builder(receiver.url("/elsewhere"))
        .ssrf_policy(SsrfPolicy::default().allow("::1/128").unwrap())
        .build(MemoryJournal::new())
        .unwrap();
    match client.send(&contexts::live(), &ping()).await {
        Err(SendError::Failed { source, .. }) => assert!(source.is_ssrf_refused(), "{source}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(receiver.requests().len(), 2);
    for bad in [
        "127.0.0.0/33",
        "127.0.0/8",
        "::1/",
        "*.internal",
        "http://x/",
        "",
    ] {
        let error = SsrfPolicy::default().allow(bad).unwrap_err();
        assert!(
            error.to_string().starts_with("invalid allow-list entry"),
            "{bad}: {error}"
        );
    }
}
