//! The SSRF corpus against every HTTP adapter: a webhook, an Airflow and a URL trigger,
//! Alertmanager, PagerDuty, Slack and the Pushgateway are all refused before connecting.
//!
//! No test here ever connects anywhere but 127.0.0.1. The loopback spellings, which point
//! at a live listener, come first: had an adapter skipped its check, one of them would
//! have reached the listener and failed the test before any other address was tried.
#![cfg(all(feature = "webhook", feature = "alert", feature = "metrics"))]

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use replaysafe::alert::{Alert, AlertmanagerClient, PagerDutyClient, SlackClient, SlackMessage};
use replaysafe::http::{AddressClass, SsrfPolicy};
use replaysafe::metrics::{Push, PushgatewayClient, Sample};
use replaysafe::webhook::{Trigger, TriggerClient, Webhook, WebhookClient};
use replaysafe::{Classify, EffectKind, MemoryJournal, ReplayContext, RunKind, SendError, Window};
use secrecy::SecretString;

/// A listener on 127.0.0.1 that counts the connections it accepts.
struct Listener {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Listener {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Listener { port, accepted }
    }

    fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Internal addresses in the spellings attackers use; the first ones reach the listener.
fn corpus(port: u16) -> Vec<(String, AddressClass)> {
    let reaching_the_listener = [
        (format!("http://127.0.0.1:{port}"), AddressClass::Loopback),
        (format!("http://2130706433:{port}"), AddressClass::Loopback),
        (format!("http://0177.0.0.1:{port}"), AddressClass::Loopback),
        (format!("http://0x7f000001:{port}"), AddressClass::Loopback),
        (format!("http://0x7f.0.0.1:{port}"), AddressClass::Loopback),
        (format!("http://127.1:{port}"), AddressClass::Loopback),
        (format!("http://0.0.0.0:{port}"), AddressClass::Unspecified),
        (format!("http://[::1]:{port}"), AddressClass::Loopback),
        (
            format!("http://[::ffff:127.0.0.1]:{port}"),
            AddressClass::Ipv4Mapped,
        ),
    ];
    let elsewhere = [
        ("http://10.0.0.1", AddressClass::Private),
        ("http://172.16.0.1", AddressClass::Private),
        ("http://192.168.1.1", AddressClass::Private),
        ("http://169.254.169.254", AddressClass::LinkLocal),
        ("http://100.64.0.1", AddressClass::SharedCgnat),
        ("http://[fc00::1]", AddressClass::UniqueLocal),
        ("http://[fe80::1]", AddressClass::LinkLocal),
    ];
    reaching_the_listener
        .into_iter()
        .chain(elsewhere.map(|(url, class)| (url.to_owned(), class)))
        .collect()
}

fn live() -> ReplayContext {
    let now = chrono::Utc::now();
    ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id("scheduled__now")
        .run_kind(RunKind::Scheduled)
        .window(Window::new(now - chrono::TimeDelta::hours(1), now).unwrap())
        .build()
        .unwrap()
}

macro_rules! check {
    ($adapter:expr, $url:expr, $class:expr, $listener:expr, $result:expr, |$source:ident| $refusal:expr) => {{
        let source = match $result {
            Err(SendError::Failed {
                attempts: 1,
                source,
            }) => source,
            other => panic!("{}: {}: expected a refusal, got {other:?}", $adapter, $url),
        };
        let $source = &source;
        let (refused, class): (bool, Option<AddressClass>) = $refusal;
        assert!(refused, "{}: {}: {source}", $adapter, $url);
        assert!(
            !source.is_transient(),
            "{}: refusals are not retried",
            $adapter
        );
        if let Some(class) = class {
            assert_eq!(class, $class, "{}: {}", $adapter, $url);
        }
        assert!(
            source.to_string().contains("refused before connecting"),
            "{}: {source}",
            $adapter
        );
        assert_eq!(
            $listener.connections(),
            0,
            "{}: {} was reached",
            $adapter,
            $url
        );
    }};
}

#[tokio::test]
async fn every_http_adapter_refuses_the_corpus_before_connecting() {
    let listener = Listener::start();
    let cx = live();
    let journal = Arc::new(MemoryJournal::new());
    let mut checked = 0;
    for (url, class) in corpus(listener.port) {
        assert_eq!(
            SsrfPolicy::default()
                .check_url(&url.parse().unwrap())
                .expect_err("the default policy refuses every corpus URL")
                .class(),
            class,
            "{url}"
        );

        let webhook = WebhookClient::builder(format!("{url}/hooks"))
            .build(journal.clone())
            .unwrap();
        let result = webhook
            .send(&cx, &Webhook::json("ping", serde_json::json!({})))
            .await;
        check!("webhook", url, class, listener, result, |e| (
            e.is_ssrf_refused(),
            e.ssrf_refusal().map(|r| r.class())
        ));

        let airflow = TriggerClient::airflow(&url).build(journal.clone()).unwrap();
        let result = airflow.send(&cx, &Trigger::new("daily_reports")).await;
        check!("airflow trigger", url, class, listener, result, |e| (
            e.is_ssrf_refused(),
            e.ssrf_refusal().map(|r| r.class())
        ));

        let trigger = TriggerClient::url(format!("{url}/run"))
            .build(journal.clone())
            .unwrap();
        let result = trigger.send(&cx, &Trigger::new("daily_reports")).await;
        check!("url trigger", url, class, listener, result, |e| (
            e.is_ssrf_refused(),
            e.ssrf_refusal().map(|r| r.class())
        ));

        let alertmanager = AlertmanagerClient::builder(&url)
            .build(journal.clone())
            .unwrap();
        let late = Alert::trigger("orders_freshness", "orders are 3 h late");
        let result = alertmanager.send(&cx, &late).await;
        check!("alertmanager", url, class, listener, result, |e| (
            e.is_ssrf_refused(),
            e.ssrf_refusal().map(|r| r.class())
        ));

        let pagerduty =
            PagerDutyClient::builder(SecretString::from("routing-key-0123456789abcdef"))
                .base_url(&url)
                .build(journal.clone())
                .unwrap();
        let result = pagerduty.send(&cx, &late).await;
        check!("pagerduty", url, class, listener, result, |e| (
            e.is_ssrf_refused(),
            e.ssrf_refusal().map(|r| r.class())
        ));

        let slack =
            SlackClient::builder(SecretString::from(format!("{url}/services/T0/B0/secret")))
                .build(journal.clone())
                .unwrap();
        let result = slack
            .send(
                &cx,
                &SlackMessage::new("orders_freshness", "orders are late"),
            )
            .await;
        check!("slack", url, class, listener, result, |e| (
            e.is_ssrf_refused(),
            e.ssrf_refusal().map(|r| r.class())
        ));

        let pushgateway = PushgatewayClient::builder(&url)
            .build(journal.clone())
            .unwrap();
        let push = Push::replace("nightly_export").with_sample(Sample::gauge("rows", 1.0));
        let result = pushgateway.send(&cx, &push).await;
        check!("pushgateway", url, class, listener, result, |e| (
            e.is_ssrf_refused(),
            None
        ));
        checked += 7;
    }
    assert_eq!(checked, 16 * 7);
    assert_eq!(listener.connections(), 0);
    // Every refusal is on record as a failed attempt, and the Slack URL's secret path is
    // in no record.
    let records = journal.records();
    assert!(records.iter().all(|r| !r.effect.target.contains("secret")));
    let kinds: std::collections::BTreeSet<_> =
        records.iter().map(|r| r.effect.kind.clone()).collect();
    for kind in [
        EffectKind::Webhook,
        EffectKind::Trigger,
        EffectKind::Alert,
        EffectKind::Metric,
    ] {
        assert!(kinds.contains(kind.as_str()), "{kind} journaled");
    }
}
