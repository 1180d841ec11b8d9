//! The SSRF guard on a live context: internal targets are refused before any connection.
//!
//! No test here ever connects anywhere but 127.0.0.1. Every corpus URL is checked against
//! the policy before it is handed to the client, and the loopback spellings, which point
//! at a live receiver, come first: had the client skipped its check, they would have
//! reached the receiver and failed the test before any other address was tried.

use std::sync::Arc;

use replaysafe_core::{MemoryJournal, SendError};
use replaysafe_test::contexts;
use replaysafe_webhook::{AddressClass, SsrfPolicy, Webhook, WebhookClient};
use serde_json::json;
use url::Url;

use crate::support::{Receiver, loopback_only};

fn ping() -> Webhook {
    Webhook::json("ping", &json!({}))
}

#[tokio::test]
async fn ssrf_corpus_is_refused_before_connecting() {
    let receiver = Receiver::start().await;
    let port = receiver.port();
    // Spellings that land on this machine: unchecked, they would reach the receiver.
    let reaching_the_receiver = [
        (format!("http://127.0.0.1:{port}/"), AddressClass::Loopback),
        (format!("http://2130706433:{port}/"), AddressClass::Loopback),
        (format!("http://0177.0.0.1:{port}/"), AddressClass::Loopback),
        (format!("http://0x7f000001:{port}/"), AddressClass::Loopback),
        (format!("http://0x7f.0.0.1:{port}/"), AddressClass::Loopback),
        (format!("http://127.1:{port}/"), AddressClass::Loopback),
        (format!("http://0.0.0.0:{port}/"), AddressClass::Unspecified),
        (format!("http://[::1]:{port}/"), AddressClass::Loopback),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            AddressClass::Ipv4Mapped,
        ),
    ];
    let elsewhere = [
        ("http://10.0.0.1/", AddressClass::Private),
        ("http://172.16.0.1/", AddressClass::Private),
        ("http://192.168.1.1/", AddressClass::Private),
        (
            "http://169.254.169.254/latest/meta-data/",
            AddressClass::LinkLocal,
        ),
        ("http://100.64.0.1/", AddressClass::SharedCgnat),
        ("http://[fc00::1]/", AddressClass::UniqueLocal),
        ("http://[fe80::1]/", AddressClass::LinkLocal),
    ];
    let corpus = reaching_the_receiver
        .into_iter()
        .chain(elsewhere.map(|(url, class)| (url.to_owned(), class)));

    let journal = Arc::new(MemoryJournal::new());
    let client = WebhookClient::builder("https://hooks.example/unused")
        .build_guarded(journal.clone())
        .unwrap();
    let mut refused = 0;
    for (url, class) in corpus {
        let parsed = Url::parse(&url).unwrap();
        let refusal = SsrfPolicy::default()
            .check_url(&parsed)
            .expect_err("the default policy refuses every corpus URL");
        assert_eq!(refusal.class(), class, "{url}");

        let result = client
            .send(&contexts::live(), &ping().to(url.as_str()))
            .await;
        let error = match result {
            Err(SendError::Failed {
                attempts: 1,
                source,
            }) => source,
            other => panic!("{url}: expected a refusal, got {other:?}"),
        };
        assert!(error.is_ssrf_refused(), "{url}: {error}");
        assert!(
            !replaysafe_core::Classify::is_transient(&error),
            "refusals are not retried"
        );
        assert_eq!(error.ssrf_refusal().unwrap().class(), class, "{url}");
        assert!(
            error.to_string().contains("refused before connecting"),
            "{error}"
        );
        assert_eq!(receiver.connections(), 0, "{url} reached the receiver");
        refused += 1;
    }
    assert_eq!(refused, 16);
    assert!(receiver.requests().is_empty());
    let records = journal.records();
    assert_eq!(
        records.len(),
        16,
        "each refusal is journaled as a failed attempt"
    );
    assert!(
        records
            .iter()
            .all(|record| record.decision.as_str() == "failed")
    );
}

#[tokio::test]
async fn host_names_resolving_to_internal_addresses_are_refused_by_the_resolver() {
    let receiver = Receiver::start().await;
    let client = WebhookClient::builder(format!("http://localhost:{}/hooks", receiver.port()))
        .build_guarded(MemoryJournal::new())
        .unwrap();

    let error = match client.send(&contexts::live(), &ping()).await {
        Err(SendError::Failed {
            attempts: 1,
            source,
        }) => source,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(error.is_ssrf_refused(), "{error}");
    let refusal = error.ssrf_refusal().unwrap();
    assert_eq!(refusal.host(), "localhost");
    assert!(refusal.address().is_loopback());
    assert!(
        error.to_string().contains("localhost resolves to"),
        "{error}"
    );
    assert_eq!(receiver.connections(), 0);
}

#[tokio::test]
async fn allow_lists_open_loopback_by_host_or_by_network() {
    let receiver = Receiver::start().await;
    let by_host = WebhookClient::builder(format!("http://localhost:{}/by-host", receiver.port()))
        .ssrf_policy(SsrfPolicy::default().allow_host("localhost"))
        .build_guarded(MemoryJournal::new())
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
        .build_guarded(MemoryJournal::new())
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
            .build_guarded(MemoryJournal::new())
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
        .build_guarded(MemoryJournal::new())
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
