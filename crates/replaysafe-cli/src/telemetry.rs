//! `send --otel` (or `REPLAYSAFE_OTEL=1`): every decision as an OpenTelemetry log record,
//! and a client span per HTTP delivery, exported over OTLP/HTTP.
//!
//! The exporters read the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (and the
//! `_LOGS_`/`_TRACES_` forms), `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`,
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `http/json`; gRPC is
//! not built in) and `OTEL_SERVICE_NAME`. The send runs inside a span named after it; its
//! log records and client spans carry that span's trace. The exporters are flushed when
//! the send ends, on every path; an exporter that cannot reach its collector says so on
//! stderr and the send's exit code stands.

use std::sync::Arc;

use replaysafe_core::Journal;

/// The variable that turns telemetry on, as `--otel` does.
pub const VARIABLE: &str = "REPLAYSAFE_OTEL";

/// Whether telemetry is asked for: `--otel`, or `REPLAYSAFE_OTEL` set to `1` or `true`
/// (`0`, `false` or empty leave it off; anything else is an error naming the variable).
pub fn requested(flag: bool) -> anyhow::Result<bool> {
    if flag {
        return Ok(true);
    }
    match std::env::var(VARIABLE).as_deref().map(str::trim) {
        Err(_) | Ok("" | "0" | "false") => Ok(false),
        Ok("1" | "true") => Ok(true),
        Ok(_) => anyhow::bail!("{VARIABLE}: expected 1, true, 0 or false"),
    }
}

#[cfg(feature = "otel")]
mod active {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use anyhow::{anyhow, bail};
    use opentelemetry::trace::{TraceContextExt, Tracer as _, TracerProvider as _};
    use opentelemetry::{Context, ContextGuard, KeyValue};
    use opentelemetry_otlp::{LogExporter, Protocol, SpanExporter, WithExportConfig};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
    use opentelemetry_sdk::logs::{LogBatch, SdkLogger, SdkLoggerProvider};
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};

    pub(super) struct Providers {
        pub(super) logs: SdkLoggerProvider,
        pub(super) traces: SdkTracerProvider,
        pub(super) logger: SdkLogger,
        unexported: Arc<Unexported>,
    }

    /// What the exporters could not hand to the collector: the SDK's batch processors
    /// drop a batch whose export failed and tell no one, so the exporters are wrapped
    /// ([`Counted`]) and [`finish`] says what was lost.
    #[derive(Debug, Default)]
    struct Unexported {
        log_records: AtomicU64,
        spans: AtomicU64,
        /// Whether a failure was the export's timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`).
        timed_out: AtomicBool,
    }

    impl Unexported {
        fn count(&self, of: &AtomicU64, items: usize, result: &OTelSdkResult) {
            if let Err(error) = result {
                of.fetch_add(items as u64, Ordering::Relaxed);
                if matches!(error, OTelSdkError::Timeout(_)) {
                    self.timed_out.store(true, Ordering::Relaxed);
                }
            }
        }

        /// What was lost, for stderr: counts and the kind of failure, never the
        /// exporter's own message, which may quote the endpoint and a credential in it.
        fn told(&self) -> Option<String> {
            let (records, spans) = (
                self.log_records.load(Ordering::Relaxed),
                self.spans.load(Ordering::Relaxed),
            );
            if records == 0 && spans == 0 {
                return None;
            }
            let why = if self.timed_out.load(Ordering::Relaxed) {
                "did not answer within OTEL_EXPORTER_OTLP_TIMEOUT"
            } else {
                "could not be reached or refused them"
            };
            Some(format!(
                "replaysafe: --otel: {records} log record(s) and {spans} span(s) were not exported: the collector the OTEL_EXPORTER_OTLP_* variables name {why}; the journal holds every decision, and the send's outcome stands"
            ))
        }
    }

    /// An exporter whose failed exports are counted in [`Unexported`].
    #[derive(Debug)]
    struct Counted<E> {
        inner: E,
        unexported: Arc<Unexported>,
    }

    impl<E: opentelemetry_sdk::logs::LogExporter> opentelemetry_sdk::logs::LogExporter for Counted<E> {
        async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
            let records = batch.iter().count();
            let result = self.inner.export(batch).await;
            self.unexported
                .count(&self.unexported.log_records, records, &result);
            result
        }

        fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
            self.inner.shutdown_with_timeout(timeout)
        }

        fn event_enabled(
            &self,
            level: opentelemetry::logs::Severity,
            target: &str,
            name: Option<&str>,
        ) -> bool {
            self.inner.event_enabled(level, target, name)
        }

        fn set_resource(&mut self, resource: &Resource) {
            self.inner.set_resource(resource);
        }
    }

    impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
        for Counted<E>
    {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            let spans = batch.len();
            let result = self.inner.export(batch).await;
            self.unexported
                .count(&self.unexported.spans, spans, &result);
            result
        }

        fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
            self.inner.shutdown_with_timeout(timeout)
        }

        fn force_flush(&self) -> OTelSdkResult {
            self.inner.force_flush()
        }

        fn set_resource(&mut self, resource: &Resource) {
            self.inner.set_resource(resource);
        }
    }

    /// A shutdown's failure by its kind alone (see [`Unexported::told`]).
    fn kind(error: &OTelSdkError) -> &'static str {
        match error {
            OTelSdkError::AlreadyShutdown => "already shut down",
            OTelSdkError::Timeout(_) => "timed out",
            _ => "failed",
        }
    }

    pub(super) static PROVIDERS: OnceLock<Providers> = OnceLock::new();

    thread_local! {
        /// The send's context (holding its span), current on the thread that runs the send.
        static ROOT: RefCell<Option<(Context, ContextGuard)>> = const { RefCell::new(None) };
    }

    fn protocol() -> anyhow::Result<Protocol> {
        match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
            .ok()
            .as_deref()
            .map(str::trim)
        {
            None | Some("" | "http/protobuf") => Ok(Protocol::HttpBinary),
            Some("http/json") => Ok(Protocol::HttpJson),
            Some(other) => bail!(
                "OTEL_EXPORTER_OTLP_PROTOCOL: {other:?} is not built in; use http/protobuf or http/json"
            ),
        }
    }

    /// Starts the exporters and the send's span, named `name`.
    pub(super) fn start(name: &str) -> anyhow::Result<()> {
        let protocol = protocol()?;
        // The exporters' own errors quote the endpoint, which may hold a credential or a
        // token in its query: they are not shown.
        let refused = |what: &str| {
            anyhow!(
                "--otel: the OTLP {what} exporter cannot be built from the OTEL_EXPORTER_OTLP_* variables (an endpoint that is not an http(s) URL, or a header that is not NAME=VALUE)"
            )
        };
        let logs = LogExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .map_err(|_| refused("log"))?;
        let spans = SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .map_err(|_| refused("span"))?;
        // OTEL_SERVICE_NAME (read by the SDK) names the service when set.
        let resource = match std::env::var("OTEL_SERVICE_NAME") {
            Ok(name) if !name.trim().is_empty() => Resource::builder().build(),
            _ => Resource::builder().with_service_name("replaysafe").build(),
        };
        let unexported = Arc::new(Unexported::default());
        let logs = SdkLoggerProvider::builder()
            .with_resource(resource.clone())
            .with_batch_exporter(Counted {
                inner: logs,
                unexported: unexported.clone(),
            })
            .build();
        let traces = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_batch_exporter(Counted {
                inner: spans,
                unexported: unexported.clone(),
            })
            .build();
        opentelemetry::global::set_tracer_provider(traces.clone());
        let logger = opentelemetry::logs::LoggerProvider::logger(&logs, "replaysafe");
        let tracer = traces.tracer("replaysafe");
        let span = tracer
            .span_builder(name.to_owned())
            .with_attributes([KeyValue::new("replaysafe.command", name.to_owned())])
            .start(&tracer);
        let cx = Context::current_with_span(span);
        let guard = cx.clone().attach();
        ROOT.with(|root| *root.borrow_mut() = Some((cx, guard)));
        let _ = PROVIDERS.set(Providers {
            logs,
            traces,
            logger,
            unexported,
        });
        Ok(())
    }

    /// Ends the send's span and flushes both exporters.
    pub(super) fn finish() {
        ROOT.with(|root| {
            if let Some((cx, guard)) = root.borrow_mut().take() {
                // The send's own span, whatever else is current.
                cx.span().end();
                drop(guard);
            }
        });
        if let Some(providers) = PROVIDERS.get() {
            for (what, result) in [
                ("spans", providers.traces.shutdown()),
                ("log records", providers.logs.shutdown()),
            ] {
                if let Err(error) = result {
                    eprintln!(
                        "replaysafe: --otel: the {what} exporter's shutdown {}",
                        kind(&error)
                    );
                }
            }
            if let Some(told) = providers.unexported.told() {
                eprintln!("{told}");
            }
        }
    }
}

/// Starts telemetry for a send named `name` when [`requested`].
pub fn start(flag: bool, name: &str) -> anyhow::Result<()> {
    if !requested(flag)? {
        return Ok(());
    }
    #[cfg(feature = "otel")]
    return active::start(name);
    #[cfg(not(feature = "otel"))]
    {
        let _ = name;
        anyhow::bail!("--otel: this replaysafe was built without its otel feature")
    }
}

/// The journal, emitting each decision as a log record too when telemetry is on.
pub fn journal(journal: Arc<dyn Journal>) -> Arc<dyn Journal> {
    #[cfg(feature = "otel")]
    if let Some(providers) = active::PROVIDERS.get() {
        return Arc::new(replaysafe_core::journal::OtelJournal::new(
            journal,
            providers.logger.clone(),
        ));
    }
    journal
}

/// Ends the send's span and exports what is left; a no-op when telemetry is off.
pub fn finish() {
    #[cfg(feature = "otel")]
    active::finish();
}
