//! An in-process HTTP receiver on 127.0.0.1 that stands in for the partner's webhook
//! endpoint, Airflow's REST API and (in the default mode) Alertmanager, and records
//! every request it gets.
//!
//! - `POST /hooks/partner/orders`: checks the Standard Webhooks signature with the
//!   partner's copy of the secret, answers 204.
//! - `POST /api/v2/dags/{dag_id}/dagRuns`: answers like Airflow 3, 200 with the DAG run
//!   as JSON, or 409 when that `dag_run_id` already exists.
//! - `POST /api/v2/alerts`: answers like Alertmanager, 200.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use replaysafe::webhook::SigningSecret;
use serde_json::{Value, json};

/// The path of the partner's webhook endpoint.
pub(crate) const WEBHOOK_PATH: &str = "/hooks/partner/orders";

/// What the receiver stands in for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Route {
    /// The partner's webhook endpoint.
    Webhook,
    /// Airflow's "trigger a DAG run".
    Trigger,
    /// Alertmanager's "post alerts".
    Alert,
}

/// One request the receiver got.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Received {
    /// Which endpoint.
    pub(crate) route: Route,
    /// The request path.
    pub(crate) path: String,
    /// The status answered.
    pub(crate) status: u16,
    /// The `Idempotency-Key` header, if any.
    pub(crate) idempotency_key: Option<String>,
    /// For webhooks: whether the signature matched the partner's secret.
    pub(crate) signature_valid: Option<bool>,
    /// The JSON body.
    pub(crate) body: Value,
}

#[derive(Debug)]
struct Shared {
    secret: SigningSecret,
    requests: Mutex<Vec<Received>>,
    dag_runs: Mutex<BTreeSet<String>>,
}

impl Shared {
    fn record(&self, received: Received) {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(received);
    }
}

/// A running receiver; it stops when dropped.
#[derive(Debug)]
pub(crate) struct Receiver {
    base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts on a free port of 127.0.0.1; webhooks are checked against `secret`.
    pub(crate) async fn start(secret: SigningSecret) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared {
            secret,
            requests: Mutex::default(),
            dag_runs: Mutex::default(),
        });
        let app = Router::new()
            .route(WEBHOOK_PATH, post(webhook))
            .route("/api/v2/dags/{dag_id}/dagRuns", post(dag_run))
            .route("/api/v2/alerts", post(alerts))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .await
            .context("binding the receiver to 127.0.0.1:0")?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("receiver stopped: {error}");
            }
        });
        Ok(Receiver {
            base_url,
            shared,
            task,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every request so far, in arrival order.
    pub(crate) fn requests(&self) -> Vec<Received> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

fn json_body(body: &Bytes) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

async fn webhook(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    // What a partner does: recompute `v1,<base64>` over `id.timestamp.body` and compare.
    // (A production receiver also bounds the timestamp's age and compares in constant time.)
    let signature_valid = match (
        header(&headers, "webhook-id"),
        header(&headers, "webhook-timestamp").and_then(|t| t.parse::<i64>().ok()),
        header(&headers, "webhook-signature"),
    ) {
        (Some(id), Some(timestamp), Some(signatures)) => {
            let expected = shared.secret.sign(&id, timestamp, &body);
            signatures
                .split_whitespace()
                .any(|signature| signature == expected)
        }
        _ => false,
    };
    let status = if signature_valid {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::UNAUTHORIZED
    };
    shared.record(Received {
        route: Route::Webhook,
        path: WEBHOOK_PATH.to_owned(),
        status: status.as_u16(),
        idempotency_key: header(&headers, "idempotency-key"),
        signature_valid: Some(signature_valid),
        body: json_body(&body),
    });
    status
}

async fn dag_run(
    State(shared): State<Arc<Shared>>,
    Path(dag_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = json_body(&body);
    let run_id = request["dag_run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let first = shared
        .dag_runs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(format!("{dag_id}/{run_id}"));
    let (status, answer) = if first {
        let mut run = json!({"dag_id": dag_id, "state": "queued", "run_type": "manual"});
        for field in [
            "dag_run_id",
            "logical_date",
            "data_interval_start",
            "data_interval_end",
            "conf",
        ] {
            run[field] = request[field].clone();
        }
        (StatusCode::OK, run)
    } else {
        (
            StatusCode::CONFLICT,
            json!({"detail": format!("DAG run {run_id} already exists")}),
        )
    };
    shared.record(Received {
        route: Route::Trigger,
        path: format!("/api/v2/dags/{dag_id}/dagRuns"),
        status: status.as_u16(),
        idempotency_key: header(&headers, "idempotency-key"),
        signature_valid: None,
        body: request,
    });
    (status, axum::Json(answer)).into_response()
}

async fn alerts(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    shared.record(Received {
        route: Route::Alert,
        path: "/api/v2/alerts".to_owned(),
        status: 200,
        idempotency_key: header(&headers, "idempotency-key"),
        signature_valid: None,
        body: json_body(&body),
    });
    StatusCode::OK
}
