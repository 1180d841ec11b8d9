//! Guarded live delivery of small JSON webhooks against the same requests sent with raw
//! reqwest (same client settings), both to one axum receiver on 127.0.0.1, interleaved.
//!
//! The guarded path adds describing, key derivation, the gate, the SSRF check and a
//! JSON Lines journal record per webhook. Requests are unsigned on both sides so that
//! they carry the same headers and bytes.

use std::net::SocketAddr;
use std::time::Duration;

use replaysafe_bench::{Report, interleaved_chunks, per_second};
use replaysafe_core::{Guard, IdempotencyKey, Journal};
use replaysafe_test::contexts;
use replaysafe_webhook::{IpNetwork, SsrfPolicy, Webhook, WebhookClient};
use serde_json::json;

/// Webhooks per subject in one measurement.
const WEBHOOKS: usize = 10_000;
/// The subjects alternate every `CHUNK` webhooks, so both see the same load on a shared machine.
const CHUNK: usize = 500;
/// Measurements of each chunk per subject; the fastest counts.
const REPEATS: usize = 5;

/// Starts a receiver answering 200 to everything on its own thread and runtime.
fn start_receiver() -> SocketAddr {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("receiver runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1");
            sender
                .send(listener.local_addr().expect("local address"))
                .expect("report the address");
            let app = axum::Router::new().fallback(|| async { axum::http::StatusCode::OK });
            axum::serve(listener, app).await.expect("serve");
        });
    });
    receiver.recv().expect("receiver address")
}

fn body(index: usize) -> serde_json::Value {
    json!({"type": "orders.daily_total", "orders": index, "revenue_eur": 88412.5})
}

async fn guarded_chunk(client: &Guard<WebhookClient>, first: usize) {
    let cx = contexts::live();
    for index in first..first + CHUNK {
        let outcome = client
            .send(&cx, &Webhook::json("orders.daily_total", body(index)))
            .await
            .expect("guarded delivery");
        assert!(outcome.is_delivered());
    }
}

async fn raw_chunk(client: &reqwest::Client, url: &str, key: &IdempotencyKey, first: usize) {
    for index in first..first + CHUNK {
        let mut response = client
            .post(url)
            .header("content-type", "application/json")
            .header("idempotency-key", format!("\"{key}\""))
            .body(body(index).to_string().into_bytes())
            .send()
            .await
            .expect("raw delivery");
        assert!(response.status().is_success());
        // Read the (empty) body as the webhook client does, so the connection is reused.
        while let Ok(Some(_)) = response.chunk().await {}
    }
}

fn main() {
    let address = start_receiver();
    let url = format!("http://{address}/hooks/orders");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");

    let journal_dir = tempfile::tempdir().expect("temporary folder");
    let journal = std::sync::Arc::new(
        replaysafe_core::JsonlJournal::open(journal_dir.path().join("journal.jsonl"))
            .expect("journal"),
    );
    let guarded = WebhookClient::builder(url.as_str())
        .ssrf_policy(
            SsrfPolicy::default()
                .allow_network("127.0.0.1/32".parse::<IpNetwork>().expect("network")),
        )
        .build(journal.clone())
        .expect("guarded client");
    // The same settings the webhook client gives reqwest.
    let raw = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(15))
        .connect_timeout(Duration::from_secs(15))
        .no_proxy()
        .user_agent(concat!("replaysafe-webhook/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("raw client");
    let key = IdempotencyKey::parse(&"ab".repeat(32)).expect("key");
    // The same guarded client with a journal that keeps nothing: what the gate, the key and
    // the HTTP layer cost without the two journal writes a durable delivery makes.
    let unjournaled = WebhookClient::builder(url.as_str())
        .ssrf_policy(
            SsrfPolicy::default()
                .allow_network("127.0.0.1/32".parse::<IpNetwork>().expect("network")),
        )
        .build(replaysafe_core::journal::NoopJournal)
        .expect("guarded client");

    // Warm both connection pools and allocators once.
    runtime.block_on(guarded_chunk(&guarded, 0));
    runtime.block_on(raw_chunk(&raw, &url, &key, 0));

    // Each chunk of 500 is timed REPEATS times per subject, interleaved; the fastest time
    // of each chunk counts, which filters out moments when other work had the machine.
    let (guarded_best, raw_best) = interleaved_chunks(
        WEBHOOKS / CHUNK,
        REPEATS,
        |chunk| runtime.block_on(guarded_chunk(&guarded, chunk * CHUNK)),
        |chunk| runtime.block_on(raw_chunk(&raw, &url, &key, chunk * CHUNK)),
    );
    journal.flush().expect("flush the journal");
    runtime.block_on(guarded_chunk(&unjournaled, 0));
    let (unjournaled_best, raw_again_best) = interleaved_chunks(
        WEBHOOKS / CHUNK,
        REPEATS,
        |chunk| runtime.block_on(guarded_chunk(&unjournaled, chunk * CHUNK)),
        |chunk| runtime.block_on(raw_chunk(&raw, &url, &key, chunk * CHUNK)),
    );

    let guarded_rate = per_second(WEBHOOKS, guarded_best);
    let raw_rate = per_second(WEBHOOKS, raw_best);
    let mut report = Report::new("webhook");
    report
        .figure(
            "webhook.guarded.deliveries_per_second",
            guarded_rate,
            "webhooks/s",
        )
        .figure(
            "webhook.raw_reqwest.deliveries_per_second",
            raw_rate,
            "webhooks/s",
        )
        .ratio(
            "webhook.guarded_vs_raw_throughput",
            guarded_rate / raw_rate,
            "raw reqwest, same requests and client settings",
        )
        .ratio(
            "webhook.guarded_no_journal_vs_raw_throughput",
            per_second(WEBHOOKS, unjournaled_best) / per_second(WEBHOOKS, raw_again_best),
            "raw reqwest, interleaved with the guard on a journal that keeps nothing",
        )
        .figure(
            "webhook.durable_journal_cost_per_delivery",
            (guarded_best.as_secs_f64() - unjournaled_best.as_secs_f64()) * 1e6 / WEBHOOKS as f64,
            "µs/delivery",
        );
    let path = report.write().expect("write the report");
    println!("report: {}", path.display());
}
