//! `send --otel`: each decision an OpenTelemetry log record in the send's trace, each HTTP
//! delivery a client span, exported over OTLP/HTTP (JSON) to a receiver started here.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::http::Uri;
use serde_json::Value;

use crate::send::{clean_command, environments, serve};

/// Every POST the receiver got: path and body.
type Posts = Arc<Mutex<Vec<(String, String)>>>;

/// One receiver for the webhook (`/hooks/orders`) and for OTLP (`/v1/logs`, `/v1/traces`).
fn receiver() -> (std::net::SocketAddr, Posts) {
    receiver_answering(StatusCode::OK)
}

/// [`receiver`] answering the webhook with `hook_status` (OTLP still gets 200).
fn receiver_answering(hook_status: StatusCode) -> (std::net::SocketAddr, Posts) {
    let posts: Posts = Arc::default();
    let app = axum::Router::new()
        .fallback(axum::routing::post(
            move |State(seen): State<Posts>, uri: Uri, body: String| async move {
                let otlp = uri.path().starts_with("/v1/");
                seen.lock().unwrap().push((uri.path().to_owned(), body));
                (if otlp { StatusCode::OK } else { hook_status }, "{}")
            },
        ))
        .with_state(posts.clone());
    (serve(app), posts)
}

/// The OTLP/JSON objects posted to `path`.
fn exported(posts: &Posts, path: &str) -> Vec<Value> {
    posts
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, body)| serde_json::from_str(body).unwrap())
        .collect()
}

fn attribute<'a>(item: &'a Value, key: &str) -> Option<&'a Value> {
    item["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn log_records(posts: &Posts) -> Vec<Value> {
    exported(posts, "/v1/logs")
        .iter()
        .flat_map(|body| body["resourceLogs"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| r["scopeLogs"].as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["logRecords"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn exported_spans(posts: &Posts) -> Vec<Value> {
    exported(posts, "/v1/traces")
        .iter()
        .flat_map(|body| {
            body["resourceSpans"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|r| r["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

const CANARY: &str = "whsec_b3RlbC1jYW5hcnktNzc0MS1vdGVsLWNhbmFyeS03NzQx";

fn send(
    run: &str,
    address: std::net::SocketAddr,
    journal: &std::path::Path,
) -> std::process::Output {
    send_exporting_to(run, address, journal, &format!("http://{address}"))
}

/// [`send`], its telemetry exported to `collector`.
fn send_exporting_to(
    run: &str,
    address: std::net::SocketAddr,
    journal: &std::path::Path,
    collector: &str,
) -> std::process::Output {
    let (_, env) = environments()
        .into_iter()
        .find(|(name, _)| *name == run)
        .unwrap();
    clean_command()
        .envs(env)
        .env("REPLAYSAFE_JOURNAL", journal)
        .env("PARTNER_SECRET", CANARY)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .args(["send", "webhook", "--otel", "--url"])
        .arg(format!("http://{address}/hooks/orders?token=q-canary-1"))
        .args([
            "--allow-host",
            "127.0.0.1",
            "--event-type",
            "orders.published",
        ])
        .args([
            "--data",
            r#"{"orders": 3}"#,
            "--secret-env",
            "PARTNER_SECRET",
        ])
        .output()
        .unwrap()
}

#[test]
fn a_scheduled_and_a_backfill_send_export_their_decisions_in_their_traces() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");

    // A scheduled send: delivered; its record, the client span and the send's span share
    // one trace.
    let (address, posts) = receiver();
    let output = send("scheduled", address, &journal);
    assert!(output.status.success(), "{output:?}");
    let records = log_records(&posts);
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(
        attribute(record, "replaysafe.decision").unwrap()["stringValue"],
        "delivered"
    );
    assert_eq!(
        attribute(record, "replaysafe.effect.kind").unwrap()["stringValue"],
        "webhook"
    );
    assert_eq!(
        attribute(record, "replaysafe.run.kind").unwrap()["stringValue"],
        "scheduled"
    );
    for key in [
        "replaysafe.idempotency_key",
        "replaysafe.window.start",
        "replaysafe.window.end",
        "replaysafe.reasons",
    ] {
        assert!(
            attribute(record, key).is_some(),
            "{key} missing in {record}"
        );
    }
    let url = attribute(record, "url.full").unwrap()["stringValue"]
        .as_str()
        .unwrap();
    assert_eq!(url, format!("http://{address}/hooks/orders"));
    let spans = exported_spans(&posts);
    let root = spans
        .iter()
        .find(|s| s["name"] == "replaysafe send webhook")
        .expect("the send's span");
    let client = spans
        .iter()
        .find(|s| s["name"] == "POST")
        .expect("the client span");
    assert_eq!(record["traceId"], root["traceId"]);
    assert_eq!(client["traceId"], root["traceId"]);
    assert_eq!(client["parentSpanId"], root["spanId"]);
    assert_eq!(client["kind"], 3, "SPAN_KIND_CLIENT");
    assert_eq!(
        attribute(client, "http.request.method").unwrap()["stringValue"],
        "POST"
    );
    assert_eq!(
        attribute(client, "http.response.status_code").unwrap()["intValue"],
        "200"
    );
    assert_eq!(
        attribute(client, "server.address").unwrap()["stringValue"],
        "127.0.0.1"
    );

    // A backfill send: suppressed, exported in its own trace, no client span.
    let (address, posts) = receiver();
    let output = send("backfill", address, &journal);
    assert!(output.status.success(), "{output:?}");
    let records = log_records(&posts);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        attribute(&records[0], "replaysafe.decision").unwrap()["stringValue"],
        "suppressed"
    );
    let reasons = attribute(&records[0], "replaysafe.reasons")
        .unwrap()
        .to_string();
    assert!(reasons.contains("replay_run"), "{reasons}");
    let spans = exported_spans(&posts);
    assert!(spans.iter().all(|s| s["name"] != "POST"), "{spans:?}");
    let root = spans
        .iter()
        .find(|s| s["name"] == "replaysafe send webhook")
        .unwrap();
    assert_eq!(records[0]["traceId"], root["traceId"]);

    // No secret and no query string in anything exported, on either send.
    for (path, body) in posts
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p.starts_with("/v1/"))
    {
        assert!(
            !body.contains(CANARY) && !body.contains("q-canary-1"),
            "{path}: {body}"
        );
    }
}

#[test]
fn a_failed_delivery_exports_the_class_of_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let (address, posts) = receiver_answering(StatusCode::NOT_FOUND);
    let output = send("scheduled", address, &dir.path().join("journal.jsonl"));
    assert!(!output.status.success(), "{output:?}");
    let records = log_records(&posts);
    assert_eq!(
        records.len(),
        1,
        "one failed attempt, no attempting: {records:?}"
    );
    let record = &records[0];
    assert_eq!(
        attribute(record, "replaysafe.decision").unwrap()["stringValue"],
        "failed"
    );
    assert_eq!(record["severityText"], "ERROR");
    // The class the webhook client's error gives (its status), not a reading of its text.
    assert_eq!(
        attribute(record, "error.type").unwrap()["stringValue"],
        "404"
    );
    let spans = exported_spans(&posts);
    let client = spans
        .iter()
        .find(|s| s["name"] == "POST")
        .expect("the client span");
    assert_eq!(
        attribute(client, "error.type").unwrap()["stringValue"],
        "404"
    );
    assert_eq!(record["traceId"], client["traceId"]);
}

#[test]
fn a_bad_replaysafe_otel_value_is_refused_naming_it_and_nothing_is_sent() {
    let (address, posts) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let (_, env) = environments().into_iter().next().unwrap();
    let output = clean_command()
        .envs(env)
        .env("REPLAYSAFE_JOURNAL", dir.path().join("journal.jsonl"))
        .env("REPLAYSAFE_OTEL", "yes please")
        .args(["send", "webhook", "--url"])
        .arg(format!("http://{address}/hooks/orders"))
        .args([
            "--allow-host",
            "127.0.0.1",
            "--event-type",
            "e",
            "--data",
            "{}",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("REPLAYSAFE_OTEL"));
    assert!(posts.lock().unwrap().is_empty());
}

#[test]
fn an_otlp_endpoint_that_cannot_be_used_is_refused_without_quoting_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, env) = environments().into_iter().next().unwrap();
    let output = clean_command()
        .envs(env)
        .env("REPLAYSAFE_JOURNAL", dir.path().join("journal.jsonl"))
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "not a url?api_key=s3cr3t-otlp",
        )
        .args([
            "send",
            "webhook",
            "--otel",
            "--url",
            "https://partner.example/hooks",
        ])
        .args(["--event-type", "e", "--data", "{}"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(text.contains("--otel: the OTLP"), "{text}");
    assert!(!text.contains("s3cr3t-otlp"), "{text}");
    assert!(!text.contains(CANARY), "{text}");
}

/// A collector that cannot be reached loses the telemetry, not the send: the webhook is
/// delivered, the exit code is the send's, and stderr says how many log records and spans
/// were not exported, without quoting the endpoint.
#[test]
fn a_collector_that_cannot_be_reached_is_reported_and_the_send_stands() {
    let dir = tempfile::tempdir().unwrap();
    let (address, posts) = receiver();
    // A loopback port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let output = send_exporting_to(
        "scheduled",
        address,
        &dir.path().join("journal.jsonl"),
        &format!("http://{closed}/?api_key=s3cr3t-otlp"),
    );
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    let hooks = posts
        .lock()
        .unwrap()
        .iter()
        .filter(|(path, _)| path.starts_with("/hooks/orders"))
        .count();
    assert_eq!(hooks, 1, "the webhook was delivered");
    assert!(
        text.contains("--otel: 1 log record(s) and ")
            && text.contains(" span(s) were not exported: the collector the OTEL_EXPORTER_OTLP_* variables name could not be reached"),
        "{text}"
    );
    assert!(!text.contains("s3cr3t-otlp"), "{text}");
    assert!(!text.contains(CANARY), "{text}");
}
