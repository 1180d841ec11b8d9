//! The StatsD client against a UDP socket bound in the test.

use std::time::Duration;

use replaysafe_core::journal::JournalDecision;
use replaysafe_metrics::{StatsdClient, StatsdMetric};
use replaysafe_test::contexts;
use tokio::net::UdpSocket;

use crate::support::{FileJournal, suppressing_contexts};

async fn listener() -> (UdpSocket, u16) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

/// The next datagram; the bound only keeps a broken test from hanging.
async fn next_datagram(socket: &UdpSocket) -> String {
    let mut buffer = [0u8; 2048];
    let length = tokio::time::timeout(Duration::from_secs(10), socket.recv(&mut buffer))
        .await
        .expect("a datagram within 10 s")
        .unwrap();
    String::from_utf8(buffer[..length].to_vec()).unwrap()
}

#[tokio::test]
async fn a_live_counter_reaches_the_udp_listener() {
    let (socket, port) = listener().await;
    let journal = FileJournal::new();
    let statsd = StatsdClient::builder("127.0.0.1", port)
        .prefix("shop.")
        .build(journal.journal.clone())
        .unwrap();

    let outcome = statsd
        .send(
            &contexts::live(),
            &StatsdMetric::counter("orders", 3)
                .with_tag("region", "eu")
                .with_tag("customer", "c-42"),
        )
        .await
        .unwrap();

    assert!(outcome.is_delivered());
    assert_eq!(
        next_datagram(&socket).await,
        "shop.orders:3|c|#region:eu,customer:c-42"
    );
    let records = journal.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].decision, JournalDecision::Attempting);
    assert_eq!(records[1].decision, JournalDecision::Delivered);
    assert_eq!(records[1].effect.target, "shop.orders{customer,region}");
    assert_eq!(records[1].effect.summary.as_deref(), Some("counter +3"));
    assert!(journal.lines().iter().all(|line| !line.contains("c-42")));
}

#[tokio::test]
async fn gauges_timings_and_histograms_arrive_as_sent() {
    let (socket, port) = listener().await;
    let statsd = StatsdClient::builder("127.0.0.1", port)
        .build(FileJournal::new().journal)
        .unwrap();
    let cx = contexts::live();
    for (metric, line) in [
        (StatsdMetric::gauge("queue_depth", 7.0), "queue_depth:7|g"),
        (
            StatsdMetric::gauge("balance", -2.5),
            "balance:0|g\nbalance:-2.5|g",
        ),
        (
            StatsdMetric::timing("export", Duration::from_millis(250)),
            "export:250|ms",
        ),
        (
            StatsdMetric::histogram("batch_size", 64.0),
            "batch_size:64|h",
        ),
    ] {
        statsd.send(&cx, &metric).await.unwrap();
        assert_eq!(next_datagram(&socket).await, line);
    }
}

#[tokio::test]
async fn in_a_backfill_nothing_arrives() {
    let (socket, port) = listener().await;
    let journal = FileJournal::new();
    let statsd = StatsdClient::builder("127.0.0.1", port)
        .build(journal.journal.clone())
        .unwrap();

    for (name, cx) in suppressing_contexts() {
        let outcome = statsd
            .send(&cx, &StatsdMetric::counter("orders", 1000))
            .await
            .unwrap();
        assert!(outcome.is_suppressed(), "{name}");
    }
    // A live marker sent afterwards is the first datagram to arrive: none came before it.
    statsd
        .send(&contexts::live(), &StatsdMetric::counter("marker", 1))
        .await
        .unwrap();
    assert_eq!(next_datagram(&socket).await, "marker:1|c");

    let records = journal.records();
    assert_eq!(
        records.len(),
        7,
        "5 suppressed, then the marker's attempting and delivered"
    );
    for record in &records[..5] {
        assert_eq!(record.decision, JournalDecision::Suppressed);
        assert_eq!(record.effect.target, "orders");
        assert_eq!(record.effect.summary.as_deref(), Some("counter +1000"));
    }
}
