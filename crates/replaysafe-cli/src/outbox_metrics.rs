//! The outbox's queue metrics in the Prometheus text format: `outbox status --format
//! prometheus`, and `outbox work --metrics-addr ADDR` serving them at `/metrics` while the
//! worker runs (read from the database at each scrape, so every worker of one outbox shows
//! the same queue).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

use chrono::Utc;
use replaysafe_outbox::{CircuitRecord, OutboxStore, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The queue as one scrape sees it.
#[derive(Debug)]
pub struct Queue {
    /// Rows by (status, route).
    rows: BTreeMap<(&'static str, String), u64>,
    oldest_pending_seconds: Option<u64>,
    in_doubt: u64,
    stale_completions: u64,
    reclaimed: u64,
    /// The circuits of routes with a breaker, as the workers recorded them.
    circuits: Vec<CircuitRecord>,
    /// Pending rows behind an earlier row of their ordering key.
    in_key_order: u64,
}

impl Queue {
    /// Reads the queue from `store`.
    pub async fn read(store: &dyn OutboxStore) -> anyhow::Result<Queue> {
        let now = Utc::now();
        let chain = |e: replaysafe_outbox::OutboxError| {
            anyhow::anyhow!("{}", replaysafe_core::error_chain(&e))
        };
        let mut rows = BTreeMap::new();
        for count in store.counts().await.map_err(chain)? {
            *rows
                .entry((count.status.as_str(), count.route))
                .or_default() += count.rows;
        }
        let oldest = store.oldest_pending_age(now).await.map_err(chain)?;
        let in_doubt = store.in_doubt(now).await.map_err(chain)?;
        let counters = store.counters().await.map_err(chain)?;
        let circuits = store.circuits().await.map_err(chain)?;
        let in_key_order = store.waiting_in_key_order().await.map_err(chain)?;
        Ok(Queue {
            in_key_order,
            rows,
            oldest_pending_seconds: oldest.map(|age| age.as_secs()),
            in_doubt,
            stale_completions: counters.stale_completions,
            reclaimed: counters.reclaimed,
            circuits,
        })
    }

    /// The Prometheus text exposition (version 0.0.4) of the queue.
    pub fn exposition(&self) -> String {
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            name.to_owned()
        };
        let rows = family(
            "replaysafe_outbox_rows",
            "gauge",
            "Rows of the outbox by status and route (delivered and dead: deliveries and failures by route).",
        );
        let routes: std::collections::BTreeSet<&str> =
            self.rows.keys().map(|(_, route)| route.as_str()).collect();
        for route in &routes {
            // Every status of every route, zeros included, so a series does not vanish.
            for status in Status::ALL {
                let value = self
                    .rows
                    .get(&(status.as_str(), (*route).to_owned()))
                    .copied()
                    .unwrap_or(0);
                let _ = writeln!(
                    out,
                    "{rows}{{status=\"{}\",route=\"{}\"}} {value}",
                    status.as_str(),
                    label(route)
                );
            }
        }
        let total = |status: Status| -> u64 {
            self.rows
                .iter()
                .filter(|((s, _), _)| *s == status.as_str())
                .map(|(_, rows)| rows)
                .sum()
        };
        let mut gauge = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        };
        gauge(
            "replaysafe_outbox_pending_rows",
            "Rows waiting for a worker.",
            total(Status::Pending),
        );
        gauge(
            "replaysafe_outbox_dead_letters",
            "Rows dead-lettered: failed for good or out of attempts.",
            total(Status::Dead),
        );
        gauge(
            "replaysafe_outbox_waiting_in_key_order_rows",
            "Pending rows behind an earlier row of their ordering key (not claimable until it is done).",
            self.in_key_order,
        );
        gauge(
            "replaysafe_outbox_in_doubt_rows",
            "Rows claimed whose lease is over: a delivery may have been made.",
            self.in_doubt,
        );
        if let Some(age) = self.oldest_pending_seconds {
            gauge(
                "replaysafe_outbox_oldest_pending_age_seconds",
                "How long the oldest pending row has waited since it was staged.",
                age,
            );
        }
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        counter(
            "replaysafe_outbox_stale_completions_total",
            "Completions refused because another claim had taken the row over.",
            self.stale_completions,
        );
        counter(
            "replaysafe_outbox_reclaimed_total",
            "Rows claimed again after their lease ended.",
            self.reclaimed,
        );
        if !self.circuits.is_empty() {
            let mut by_route = |name: &str, help: &str, value: fn(&CircuitRecord) -> u32| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
                for circuit in &self.circuits {
                    let _ = writeln!(
                        out,
                        "{name}{{route=\"{}\"}} {}",
                        label(&circuit.route),
                        value(circuit)
                    );
                }
            };
            by_route(
                "replaysafe_outbox_circuit_open",
                "Whether the route's circuit is open (its rows wait), as the outbox's workers recorded it.",
                |circuit| u32::from(circuit.open),
            );
            by_route(
                "replaysafe_outbox_circuit_consecutive_failures",
                "The route's consecutive transient failures, counted by all the outbox's workers (0 after an answer; the breaker opens the circuit at its threshold).",
                |circuit| circuit.failures,
            );
        }
        out
    }

    /// Adds the routes of `worker` with a breaker that no worker recorded yet, as closed,
    /// so that each has its series from the start.
    pub fn with_breakers(mut self, worker: &replaysafe_outbox::Worker) -> Self {
        let now = Utc::now();
        for (route, _) in worker.circuits() {
            if !self.circuits.iter().any(|c| c.route == route) {
                self.circuits.push(CircuitRecord::closed(route, now));
            }
        }
        self.circuits.sort_by(|a, b| a.route.cmp(&b.route));
        self
    }
}

/// A label value escaped as the text format wants it.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Serves `/metrics` on `address` until the process ends: each scrape (GET or HEAD, with
/// or without query parameters) reads the queue. Any other path is 404, another method
/// 405; a failed read is 500, its error on the worker's stderr (naming no secret).
pub async fn serve(
    address: SocketAddr,
    store: std::sync::Arc<dyn OutboxStore>,
    worker: std::sync::Arc<replaysafe_outbox::Worker>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("--metrics-addr {address}: {e}"))?;
    eprintln!(
        "replaysafe: queue metrics on http://{}/metrics",
        listener.local_addr()?
    );
    tokio::spawn(async move {
        loop {
            let mut stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of descriptors, say: wait rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let store = store.clone();
            let worker = worker.clone();
            tokio::spawn(async move {
                let head = read_head(&mut stream).await;
                let request = String::from_utf8_lossy(&head);
                let mut words = request.split_whitespace();
                let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                // A scrape may carry query parameters (a scrape config's `params`).
                let path = target.split('?').next().unwrap_or("");
                let (status, kind, body) = if !matches!(method, "GET" | "HEAD") {
                    (
                        "405 Method Not Allowed",
                        "text/plain",
                        "only GET and HEAD are served\n".to_owned(),
                    )
                } else if path == "/metrics" {
                    match Queue::read(store.as_ref()).await {
                        Ok(queue) => (
                            "200 OK",
                            "text/plain; version=0.0.4",
                            queue.with_breakers(&worker).exposition(),
                        ),
                        Err(error) => {
                            // The listener answers anyone who reaches it: the error goes
                            // to the worker's stderr, the answer says only that it failed.
                            eprintln!("replaysafe: --metrics-addr: {error:#}");
                            (
                                "500 Internal Server Error",
                                "text/plain",
                                "the outbox could not be read; the worker's log says why\n"
                                    .to_owned(),
                            )
                        }
                    }
                } else {
                    (
                        "404 Not Found",
                        "text/plain",
                        "only /metrics is served\n".to_owned(),
                    )
                };
                let allow = if status.starts_with("405") {
                    "Allow: GET, HEAD\r\n"
                } else {
                    ""
                };
                let mut answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
                    body.len()
                );
                if method != "HEAD" {
                    answer.push_str(&body);
                }
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(())
}

/// Reads a request's head (up to its blank line, 8 KiB at most), however the client
/// splits it; a client that sends nothing more is let go after 5 seconds, with what it
/// sent.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    const MOST: usize = 8 * 1024;
    let mut head = Vec::with_capacity(1024);
    let mut piece = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while head.len() < MOST && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, stream.read(&mut piece)).await {
            Ok(Ok(read)) if read > 0 => head.extend_from_slice(&piece[..read]),
            _ => break,
        }
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(label("x\ny"), "x\\ny");
    }

    #[test]
    fn every_status_of_every_route_is_a_series() {
        let queue = Queue {
            rows: BTreeMap::from([
                (("pending", "partner".to_owned()), 2),
                (("dead", "partner".to_owned()), 1),
            ]),
            oldest_pending_seconds: Some(7),
            in_doubt: 0,
            stale_completions: 0,
            reclaimed: 0,
            circuits: Vec::new(),
            in_key_order: 0,
        };
        let text = queue.exposition();
        assert!(text.contains("replaysafe_outbox_rows{status=\"pending\",route=\"partner\"} 2"));
        assert!(text.contains("replaysafe_outbox_rows{status=\"delivered\",route=\"partner\"} 0"));
        assert!(text.contains("replaysafe_outbox_dead_letters 1"));
        assert!(text.contains("replaysafe_outbox_oldest_pending_age_seconds 7"));
    }
}
