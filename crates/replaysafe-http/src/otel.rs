//! A client span per HTTP request (feature `otel`), through OpenTelemetry's global tracer,
//! with the standard HTTP attributes; the URL as the journal shows it.

use opentelemetry::KeyValue;
use opentelemetry::global::{self, BoxedSpan};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};

/// The span of one request; ends when dropped.
pub(crate) struct ClientSpan(BoxedSpan);

impl ClientSpan {
    /// Starts the span of `request`, a child of the current context's span, named by its
    /// method as the HTTP conventions name client spans. `shown` is the target as the
    /// journal shows it: `url.full`, `server.address` and `server.port` come from it when it
    /// is a URL (never the query or a credential), and are left out when it is not.
    pub(crate) fn start(request: &reqwest::Request, shown: &str) -> Self {
        let tracer = global::tracer("replaysafe");
        let mut attributes = vec![KeyValue::new(
            "http.request.method",
            request.method().as_str().to_owned(),
        )];
        // The URL, host and port as the journal shows them: nothing of a target redacted
        // to a hash, or to a name that is no URL, is added back.
        if let Ok(url) = url::Url::parse(shown) {
            attributes.push(KeyValue::new("url.full", shown.to_owned()));
            if let Some(host) = url.host_str() {
                attributes.push(KeyValue::new("server.address", host.to_owned()));
            }
            if let Some(port) = url.port_or_known_default() {
                attributes.push(KeyValue::new("server.port", i64::from(port)));
            }
        }
        let span = tracer
            .span_builder(request.method().as_str().to_owned())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start(&tracer);
        ClientSpan(span)
    }

    /// Records the answer's status; 4xx and 5xx are errors.
    pub(crate) fn answered(&mut self, status: u16) {
        self.0.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 400 {
            self.0
                .set_attribute(KeyValue::new("error.type", status.to_string()));
            self.0.set_status(Status::error(""));
        }
    }

    /// Records a request that got no answer, of the class `error_type` (the error's
    /// [`Classify::error_type`](replaysafe_core::Classify::error_type), as the decision's
    /// log record has it).
    pub(crate) fn unanswered(&mut self, error_type: &str) {
        self.0
            .set_attribute(KeyValue::new("error.type", error_type.to_owned()));
        self.0.set_status(Status::error(""));
    }
}

impl Drop for ClientSpan {
    fn drop(&mut self) {
        self.0.end();
    }
}
