//! A real HTTP receiver on 127.0.0.1, journal helpers, and a Standard Webhooks verifier
//! written from the spec, independent of the crate's signer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use replaysafe_core::{JsonlJournal, RetryPolicy};
use replaysafe_webhook::{IpNetwork, SsrfPolicy};
use sha2::Sha256;

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) query: Option<String>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
    /// Arrival time on tokio's clock (paused in some tests).
    pub(crate) at: tokio::time::Instant,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }
}

/// What the receiver answers to the next request.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    delay: Duration,
    body: Option<String>,
}

impl Reply {
    pub(crate) fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            delay: Duration::ZERO,
            body: None,
        }
    }

    /// Answers `body` (JSON) instead of `{"ok":true}`.
    pub(crate) fn body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub(crate) fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub(crate) fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Recorded>>,
    replies: Mutex<VecDeque<Reply>>,
    connections: AtomicUsize,
}

/// An axum server on 127.0.0.1:0 that records every request and connection, answering
/// the queued replies in order and 200 after them.
pub(crate) struct Receiver {
    address: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.requests.lock().unwrap().push(Recorded {
        method,
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body: body.to_vec(),
        at: tokio::time::Instant::now(),
    });
    let reply = shared
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| Reply::status(200));
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let body = reply.body.unwrap_or_else(|| "{\"ok\":true}".to_owned());
    let mut response = (StatusCode::from_u16(reply.status).unwrap(), body).into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

impl Receiver {
    pub(crate) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let counted = Arc::clone(&shared);
        let listener = listener.tap_io(move |_| {
            counted.connections.fetch_add(1, Ordering::SeqCst);
        });
        let app = axum::Router::new()
            .fallback(record)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            address,
            shared,
            task,
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.address.port()
    }

    /// `http://127.0.0.1:<port><path>`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub(crate) fn reply(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.replies.lock().unwrap().extend(replies);
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// TCP connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

/// The receiver lives on loopback: the tests open exactly 127.0.0.1 and nothing else.
pub(crate) fn loopback_only() -> SsrfPolicy {
    SsrfPolicy::default().allow_network("127.0.0.1/32".parse::<IpNetwork>().unwrap())
}

/// Retries quickly, so tests of retrying do not wait for the default backoff.
pub(crate) fn quick_retries() -> RetryPolicy {
    RetryPolicy::default()
        .with_base_delay(Duration::from_millis(2))
        .with_max_delay(Duration::from_millis(10))
}

/// A JSON Lines journal in a temporary folder.
pub(crate) struct JournalFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl JournalFile {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        JournalFile { _dir: dir, path }
    }

    pub(crate) fn open(&self) -> Arc<JsonlJournal> {
        Arc::new(JsonlJournal::open(&self.path).unwrap())
    }

    pub(crate) fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }

    pub(crate) fn records(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a journal line is JSON"))
            .collect()
    }
}

/// Verifies a Standard Webhooks delivery as a receiver would, from the spec alone:
/// `webhook-signature` holds space-separated `v1,<base64>` entries, one of which must
/// equal base64(HMAC-SHA256(secret, "{webhook-id}.{webhook-timestamp}.{body}")), where the
/// secret is the base64 after `whsec_`, and the timestamp must be within `tolerance` of `now`.
pub(crate) fn verify_standard_webhook(
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: i64,
    tolerance: i64,
) -> Result<(), String> {
    let text = |name: &str| {
        headers
            .get(name)
            .ok_or(format!("missing {name}"))?
            .to_str()
            .map_err(|_| format!("{name} is not text"))
    };
    let id = text("webhook-id")?;
    let timestamp = text("webhook-timestamp")?;
    let signatures = text("webhook-signature")?;
    let sent_at: i64 = timestamp
        .parse()
        .map_err(|_| "timestamp is not an integer".to_owned())?;
    if (now_unix - sent_at).abs() > tolerance {
        return Err(format!(
            "timestamp {sent_at} is outside the tolerance around {now_unix}"
        ));
    }
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
        .map_err(|_| "secret is not base64".to_owned())?;
    let mut signed = Vec::new();
    signed.extend_from_slice(format!("{id}.{timestamp}.").as_bytes());
    signed.extend_from_slice(body);
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(&signed);
    let expected = BASE64.encode(mac.finalize().into_bytes());
    let matched = signatures
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .any(|(version, signature)| version == "v1" && signature == expected);
    if matched {
        Ok(())
    } else {
        Err("no v1 signature matches".to_owned())
    }
}

pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Lets every ready task run, `rounds` times over, without letting paused time advance.
pub(crate) async fn settle(rounds: usize) {
    for _ in 0..rounds {
        tokio::task::yield_now().await;
    }
}

/// Yields until `condition` holds. Yielding keeps the runtime busy, so a paused clock
/// never advances on its own while the test waits.
pub(crate) async fn yield_until(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..200_000 {
        if condition() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("gave up waiting until {what}");
}
