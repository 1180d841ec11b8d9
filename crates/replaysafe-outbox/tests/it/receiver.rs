//! A webhook receiver on 127.0.0.1 that records every request and answers with queued
//! statuses first, then 200.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) idempotency_key: Option<String>,
    pub(crate) body: String,
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Request>>,
    answers: Mutex<VecDeque<(StatusCode, Option<&'static str>)>>,
}

pub(crate) struct Receiver {
    address: SocketAddr,
    shared: Arc<Shared>,
}

async fn hook(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let idempotency_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_matches('"').to_owned());
    shared.requests.lock().unwrap().push(Request {
        idempotency_key,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    match shared.answers.lock().unwrap().pop_front() {
        Some((status, Some(retry_after))) => {
            (status, [("retry-after", retry_after)]).into_response()
        }
        Some((status, None)) => status.into_response(),
        None => StatusCode::OK.into_response(),
    }
}

impl Receiver {
    pub(crate) async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/hooks", post(hook))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { address, shared }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/hooks", self.address)
    }

    pub(crate) fn answer(&self, status: StatusCode, retry_after: Option<&'static str>) {
        self.shared
            .answers
            .lock()
            .unwrap()
            .push_back((status, retry_after));
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }
}
