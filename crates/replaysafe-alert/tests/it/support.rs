//! Shared test support: journals, contexts on the real clock, log capture, and a local
//! HTTP receiver with scripted answers.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use chrono::{TimeDelta, Utc};
use replaysafe_core::{Mode, ReplayContext, RunKind, SystemClock, Window};
use replaysafe_test::contexts;
use serde_json::Value;

/// A JSON Lines journal in a fresh temporary folder.
pub(crate) use replaysafe_test::TempJournal as FileJournal;

/// A name unique to this test process and `test`, for the shared Alertmanager.
/// The SSRF policy the tests use: the real servers and receivers are on loopback.
pub(crate) fn loopback() -> replaysafe_alert::SsrfPolicy {
    replaysafe_alert::SsrfPolicy::default()
        .allow("127.0.0.0/8")
        .unwrap()
}

pub(crate) fn unique(test: &str) -> String {
    format!("rs_{test}_{}", std::process::id())
}

/// A scheduled run of `pipeline` over the hour that just ended, on the system clock
/// (Alertmanager and its silences live in real time).
pub(crate) fn live_now(pipeline: &str) -> ReplayContext {
    let now = Utc::now();
    let window = Window::new(now - TimeDelta::hours(1), now).unwrap();
    contexts::builder(RunKind::Scheduled, window)
        .pipeline(pipeline)
        .clock(Arc::new(SystemClock))
        .build()
        .unwrap()
}

/// A backfill of `pipeline` over a day of last month, on the system clock.
pub(crate) fn backfill_now(pipeline: &str, backfill_id: &str) -> ReplayContext {
    let start = Utc::now() - TimeDelta::days(31);
    let window = Window::new(start, start + TimeDelta::days(1)).unwrap();
    contexts::builder(RunKind::Backfill, window)
        .pipeline(pipeline)
        .backfill_id(backfill_id)
        .clock(Arc::new(SystemClock))
        .build()
        .unwrap()
}

/// Every context in which the gate must suppress, for `pipeline`.
pub(crate) fn suppressing_contexts(pipeline: &str) -> Vec<(&'static str, ReplayContext)> {
    let rename = |cx: ReplayContext| {
        contexts::builder(cx.run_kind(), *cx.window())
            .pipeline(pipeline)
            .replay_flag(cx.replay_flag().unwrap_or(false))
            .mode(cx.mode())
            .build()
            .unwrap()
    };
    vec![
        ("backfill", rename(contexts::backfill())),
        ("replay", rename(contexts::replay())),
        ("stale", rename(contexts::stale())),
        ("unknown", rename(contexts::unknown())),
        ("dry-run", rename(contexts::live().with_mode(Mode::DryRun))),
    ]
}

/// An answer of the local receiver.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<&'static str>,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn new(status: u16, body: impl Into<String>) -> Self {
        Reply {
            status,
            retry_after: None,
            body: body.into(),
        }
    }

    pub(crate) fn retry_after(mut self, value: &'static str) -> Self {
        self.retry_after = Some(value);
        self
    }
}

/// A request the receiver got.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) path: String,
    pub(crate) body: Value,
}

/// How a receiver answers a request its scripted replies do not cover.
pub(crate) type Contract = fn(&Method, &str, &Value) -> Reply;

#[derive(Clone)]
struct ReceiverState {
    requests: Arc<Mutex<Vec<Request>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    contract: Contract,
}

/// An HTTP server on 127.0.0.1:0 that records requests and answers by its contract,
/// unless a scripted reply is queued.
pub(crate) struct Receiver {
    pub(crate) address: SocketAddr,
    state: ReceiverState,
}

impl Receiver {
    pub(crate) async fn start(contract: Contract) -> Self {
        let state = ReceiverState {
            requests: Arc::default(),
            script: Arc::default(),
            contract,
        };
        let router = Router::new().fallback(answer).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Receiver { address, state }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Queues replies for the next requests, in order.
    pub(crate) fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.script.lock().unwrap().extend(replies);
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }
}

async fn answer(
    State(state): State<ReceiverState>,
    method: Method,
    uri: Uri,
    _headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state.requests.lock().unwrap().push(Request {
        path: uri.path().to_owned(),
        body: body.clone(),
    });
    let scripted = state.script.lock().unwrap().pop_front();
    let reply = scripted.unwrap_or_else(|| (state.contract)(&method, uri.path(), &body));
    let mut response = (StatusCode::from_u16(reply.status).unwrap(), reply.body).into_response();
    if let Some(value) = reply.retry_after {
        response
            .headers_mut()
            .insert("retry-after", value.parse().unwrap());
    }
    response
}

/// PagerDuty Events API v2 as documented: `POST /v2/enqueue`; 202 with the dedup key
/// for a well-formed event, 400 "invalid event" otherwise.
pub(crate) fn pagerduty_contract(method: &Method, path: &str, event: &Value) -> Reply {
    if method != Method::POST || path != "/v2/enqueue" {
        return Reply::new(404, "not found");
    }
    let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str).unwrap_or("");
    let mut errors = Vec::new();
    if text("/routing_key").len() != 32 {
        errors.push("Length of 'routing_key' is incorrect (should be 32 characters)");
    }
    if text("/dedup_key").is_empty() || text("/dedup_key").len() > 255 {
        errors.push("'dedup_key' is missing or too long");
    }
    match text("/event_action") {
        "trigger" => {
            if text("/payload/summary").is_empty() {
                errors.push("'payload.summary' is missing");
            }
            if text("/payload/source").is_empty() {
                errors.push("'payload.source' is missing");
            }
            if !["critical", "error", "warning", "info"].contains(&text("/payload/severity")) {
                errors.push("'payload.severity' is invalid");
            }
        }
        "acknowledge" | "resolve" => {}
        _ => errors.push("'event_action' is invalid"),
    }
    if errors.is_empty() {
        Reply::new(
            202,
            serde_json::json!({"status": "success", "message": "Event processed", "dedup_key": text("/dedup_key")}).to_string(),
        )
    } else {
        Reply::new(
            400,
            serde_json::json!({"status": "invalid event", "message": "Event object is invalid", "errors": errors}).to_string(),
        )
    }
}

/// The secret path of the test's Slack webhook.
pub(crate) const SLACK_PATH: &str = "/services/T0TEST/B0TEST/slack-canary-7f3a91c2";

/// A Slack incoming webhook as documented: 200 `ok`; 400 `invalid_payload` without
/// text; 404 `no_service` on another path.
pub(crate) fn slack_contract(method: &Method, path: &str, body: &Value) -> Reply {
    if method != Method::POST || path != SLACK_PATH {
        return Reply::new(404, "no_service");
    }
    match body.get("text").and_then(Value::as_str) {
        Some(text) if !text.is_empty() => Reply::new(200, "ok"),
        _ => Reply::new(400, "invalid_payload"),
    }
}
