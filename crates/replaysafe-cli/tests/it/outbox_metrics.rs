//! The outbox's queue metrics: `outbox status --format prometheus` and `outbox work
//! --metrics-addr`, read by a real Prometheus-format parser (the Pushgateway's, which
//! refuses a push it cannot parse).

use std::process::Stdio;
use std::time::{Duration, Instant};

use replaysafe_outbox::sqlite;

use crate::outbox::{outbox, receiver, routes_file, stage_on_sqlite};

/// Pushes `text` to the real Pushgateway as the group `job`, and returns the samples it
/// then serves for that group: the Pushgateway parses what it is given with Prometheus'
/// own text parser and refuses (400) anything malformed.
fn parsed_by_prometheus(text: &str, job: &str) -> Vec<String> {
    let base = replaysafe_test::services::require("REPLAYSAFE_TEST_PUSHGATEWAY_URL");
    let client = reqwest::blocking::Client::new();
    let group = format!("{base}/metrics/job/{job}");
    let pushed = client
        .put(&group)
        .header("Content-Type", "text/plain; version=0.0.4")
        .body(text.to_owned())
        .send()
        .unwrap();
    assert!(
        pushed.status().is_success(),
        "refused: {:?}\n{text}",
        pushed.text()
    );
    let served = client
        .get(format!("{base}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    client.delete(&group).send().unwrap();
    let marker = format!("job=\"{job}\"");
    served
        .lines()
        .filter(|line| line.starts_with("replaysafe_outbox_") && line.contains(&marker))
        .map(str::to_owned)
        .collect()
}

/// A worker process, stopped (SIGTERM, then waited for) when dropped: also when an
/// assertion fails before the end of the test.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// The value of the sample named `name` whose labels include every one of `labels`.
fn sample(samples: &[String], name: &str, labels: &[&str]) -> Option<f64> {
    samples
        .iter()
        .find(|line| {
            line.split(['{', ' ']).next() == Some(name) && labels.iter().all(|l| line.contains(l))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// The `replaysafe_outbox_rows` sample of one status and route.
fn row_count(samples: &[String], status: &str, route: &str) -> Option<f64> {
    sample(
        samples,
        "replaysafe_outbox_rows",
        &[
            &format!("status=\"{status}\""),
            &format!("route=\"{route}\""),
        ],
    )
}

#[test]
fn status_and_the_worker_serve_queue_metrics_prometheus_parses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    sqlite::SqliteOutbox::open(&path).unwrap();
    let (address, _seen) = receiver();
    let staged = stage_on_sqlite(&path, address);
    assert_eq!(staged.len(), 3);
    let database = format!("sqlite:{}", path.display());

    // Before any worker: two pending (one per route), the backfill's row suppressed.
    let text = String::from_utf8(
        outbox(&database, &["status", "--format", "prometheus"])
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    let samples = parsed_by_prometheus(&text, "replaysafe_outbox_status_test");
    let rows = |status: &str, route: &str| row_count(&samples, status, route);
    assert_eq!(rows("pending", "partner"), Some(1.0), "{samples:?}");
    assert_eq!(rows("pending", "broken"), Some(1.0));
    assert_eq!(rows("suppressed", "partner"), Some(1.0));
    assert_eq!(rows("delivered", "partner"), Some(0.0));
    assert_eq!(
        sample(&samples, "replaysafe_outbox_pending_rows", &[]),
        Some(2.0)
    );
    assert!(
        sample(
            &samples,
            "replaysafe_outbox_oldest_pending_age_seconds",
            &[]
        )
        .is_some()
    );
    assert_eq!(
        sample(&samples, "replaysafe_outbox_dead_letters", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(&samples, "replaysafe_outbox_waiting_in_key_order_rows", &[]),
        Some(0.0)
    );

    // A worker serving its metrics: scraped while it runs, after it delivered.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let journal = dir.path().join("worker.jsonl");
    // The broken route (a 400: the row's problem, not the route's) under a circuit breaker.
    let routes = dir.path().join("routes-flow.json");
    let mut file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(routes_file(dir.path(), address)).unwrap())
            .unwrap();
    file["routes"]["broken"]["flow"] =
        serde_json::json!({"breaker": {"failures": 2, "probe_every": "1m"}, "concurrency": 1});
    std::fs::write(&routes, file.to_string()).unwrap();
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("replaysafe"));
    for (key, _) in std::env::vars() {
        if key.starts_with("REPLAYSAFE_") {
            command.env_remove(key);
        }
    }
    let worker = command
        .args(["outbox", "work", "--database", &database, "--routes"])
        .arg(&routes)
        .arg("--journal")
        .arg(&journal)
        .args([
            "--poll-ms",
            "50",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Stopped)
        .unwrap();
    let started = Instant::now();
    let scraped = loop {
        let answer = reqwest::blocking::get(format!("http://127.0.0.1:{port}/metrics"))
            .ok()
            .filter(|answer| answer.status().is_success())
            .and_then(|answer| answer.text().ok());
        if let Some(text) = answer.filter(|text| {
            text.contains("status=\"delivered\",route=\"partner\"} 1")
                && text.contains("status=\"dead\",route=\"broken\"} 1")
        }) {
            break text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no delivery scraped"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let missing = reqwest::blocking::get(format!("http://127.0.0.1:{port}/other")).unwrap();
    assert_eq!(missing.status(), 404);
    // A scrape config's query parameters, HEAD, another method, and a request whose head
    // arrives in pieces.
    let with_params =
        reqwest::blocking::get(format!("http://127.0.0.1:{port}/metrics?module=outbox")).unwrap();
    assert_eq!(with_params.status(), 200);
    let post = reqwest::blocking::Client::new()
        .post(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(post.headers()["allow"], "GET, HEAD");
    // Over a bare connection, the pieces sent a tenth of a second apart.
    let ask = |pieces: &[&str]| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        for piece in pieces {
            stream.write_all(piece.as_bytes()).unwrap();
            stream.flush().unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    let head = ask(&["HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"]);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "no body after HEAD: {head}");
    let answer = ask(&["GET /met", "rics HTTP/1.1\r\nHost: x\r\n", "\r\n"]);
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(
        answer.contains("replaysafe_outbox_dead_letters 1"),
        "{answer}"
    );
    drop(worker);
    let samples = parsed_by_prometheus(&scraped, "replaysafe_outbox_worker_test");
    let rows = |status: &str, route: &str| row_count(&samples, status, route);
    assert_eq!(rows("delivered", "partner"), Some(1.0), "{samples:?}");
    assert_eq!(rows("pending", "partner"), Some(0.0));
    assert_eq!(rows("dead", "broken"), Some(1.0));
    assert_eq!(
        sample(&samples, "replaysafe_outbox_dead_letters", &[]),
        Some(1.0)
    );
    // The breaker's state: closed, as a 400 says nothing against the route.
    assert_eq!(
        sample(
            &samples,
            "replaysafe_outbox_circuit_open",
            &["route=\"broken\""]
        ),
        Some(0.0),
        "{samples:?}"
    );
}

/// A circuit a worker recorded in the outbox is what `outbox status` shows, in every
/// format, to an operator on another machine.
#[test]
fn status_shows_the_circuits_the_workers_recorded() {
    use replaysafe_outbox::{CircuitRecord, OutboxStore};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let store = sqlite::SqliteOutbox::open(&path).unwrap();
    let opened = chrono::DateTime::parse_from_rfc3339("2026-12-02T01:00:00Z")
        .unwrap()
        .to_utc();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        store
            .record_circuit(&CircuitRecord::opened(
                "partner",
                5,
                opened,
                opened + chrono::TimeDelta::seconds(30),
            ))
            .await
            .unwrap();
        store
            .record_circuit(&CircuitRecord::closed("reports", opened))
            .await
            .unwrap();
        // A closed circuit whose route has failed twice in a row so far.
        for _ in 0..2 {
            store.count_route_failure("orders", opened).await.unwrap();
        }
    });
    let database = format!("sqlite:{}", path.display());
    let stdout = |args: &[&str]| {
        String::from_utf8(
            outbox(&database, args)
                .success()
                .get_output()
                .stdout
                .clone(),
        )
        .unwrap()
    };

    let text = stdout(&["status"]);
    assert!(
        text.contains(
            "circuit partner: open since 2026-12-02T01:00:00Z after 5 consecutive failures; its rows wait; next probe 2026-12-02T01:00:30Z"
        ),
        "{text}"
    );
    assert!(
        text.contains("circuit reports: closed since 2026-12-02T01:00:00Z"),
        "{text}"
    );
    assert!(
        text.contains("circuit orders: closed; 2 consecutive transient failures so far"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["status", "--format", "json"])).unwrap();
    assert_eq!(json["circuits"][0]["route"], "orders");
    assert_eq!(json["circuits"][0]["state"], "closed");
    assert_eq!(json["circuits"][0]["failures"], 2);
    assert_eq!(json["circuits"][1]["route"], "partner");
    assert_eq!(json["circuits"][1]["state"], "open");
    assert_eq!(json["circuits"][1]["failures"], 5);
    assert_eq!(json["circuits"][1]["next_probe_at"], "2026-12-02T01:00:30Z");
    assert_eq!(json["circuits"][2]["state"], "closed");
    let samples = parsed_by_prometheus(
        &stdout(&["status", "--format", "prometheus"]),
        "replaysafe_outbox_circuit_test",
    );
    let by_route =
        |name: &str, route: &str| sample(&samples, name, &[&format!("route=\"{route}\"")]);
    let open = |route: &str| by_route("replaysafe_outbox_circuit_open", route);
    assert_eq!(
        (open("partner"), open("reports")),
        (Some(1.0), Some(0.0)),
        "{samples:?}"
    );
    let failures = |route: &str| by_route("replaysafe_outbox_circuit_consecutive_failures", route);
    assert_eq!(
        (failures("orders"), failures("partner"), failures("reports")),
        (Some(2.0), Some(5.0), Some(0.0)),
        "{samples:?}"
    );
}
