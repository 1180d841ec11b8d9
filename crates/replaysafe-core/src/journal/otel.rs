//! [`OtelJournal`]: every decision as an OpenTelemetry log record (feature `otel`).

use std::fmt;

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger, Severity};

use super::{Journal, JournalDecision, JournalEntry, JournalError, JournalFuture, Ledger};

/// A journal that also emits one OpenTelemetry log record per decision (`delivered`,
/// `suppressed`, `failed`; not `attempting`), correlated with the span active when the
/// decision is made (log-based events, which OpenTelemetry prefers to span events).
///
/// The record's event name is `replaysafe.decision`; its attributes are
/// `replaysafe.decision`, `replaysafe.reasons`, `replaysafe.effect.kind`,
/// `replaysafe.idempotency_key`, `replaysafe.window.start`/`.end`, `replaysafe.run.kind`,
/// `replaysafe.pipeline`, `replaysafe.run.id`, the target as `url.full` when it is a URL
/// (as the journal redacts it) and `error.type` on a failure (the class the client's error
/// gives, [`Classify::error_type`](crate::Classify::error_type): the receiver's status
/// code, `timeout` or `connect` without an answer, else `_OTHER`). Nothing else of the
/// effect: no payload, header or secret reaches the record. The records go to `inner`
/// first; the log record is emitted after the journal took it.
pub struct OtelJournal<J, L> {
    inner: J,
    logger: L,
}

impl<J, L> OtelJournal<J, L> {
    /// `inner`, with each decision also emitted through `logger`.
    pub fn new(inner: J, logger: L) -> Self {
        OtelJournal { inner, logger }
    }
}

impl<J: fmt::Debug, L> fmt::Debug for OtelJournal<J, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtelJournal")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<J, L> Journal for OtelJournal<J, L>
where
    J: Journal,
    L: Logger + Send + Sync,
{
    fn append(&self, entry: &JournalEntry<'_>) -> Result<(), JournalError> {
        self.inner.append(entry)?;
        if entry.decision != JournalDecision::Attempting {
            self.emit(entry);
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), JournalError> {
        self.inner.flush()
    }

    fn ledger(&self) -> Option<&dyn Ledger> {
        self.inner.ledger()
    }

    fn append_grouped<'a>(&'a self, entry: &'a JournalEntry<'_>) -> JournalFuture<'a, ()> {
        Box::pin(async move {
            self.inner.append_grouped(entry).await?;
            if entry.decision != JournalDecision::Attempting {
                self.emit(entry);
            }
            Ok(())
        })
    }
}

impl<J, L: Logger> OtelJournal<J, L> {
    fn emit(&self, entry: &JournalEntry<'_>) {
        let mut record = self.logger.create_log_record();
        record.set_event_name("replaysafe.decision");
        let failed = entry.decision == JournalDecision::Failed;
        record.set_severity_number(if failed {
            Severity::Error
        } else {
            Severity::Info
        });
        record.set_severity_text(if failed { "ERROR" } else { "INFO" });
        record.set_body(AnyValue::from(format!(
            "{} {} to {}",
            entry.decision.as_str(),
            entry.kind,
            entry.target
        )));
        let reasons: Vec<AnyValue> = entry
            .reasons
            .to_strings()
            .into_iter()
            .map(AnyValue::from)
            .collect();
        record.add_attribute("replaysafe.decision", entry.decision.as_str());
        record.add_attribute("replaysafe.reasons", AnyValue::ListAny(Box::new(reasons)));
        record.add_attribute("replaysafe.effect.kind", entry.kind.to_owned());
        record.add_attribute(
            "replaysafe.idempotency_key",
            entry.idempotency_key.to_owned(),
        );
        record.add_attribute("replaysafe.window.start", entry.window_start.to_text());
        record.add_attribute("replaysafe.window.end", entry.window_end.to_text());
        record.add_attribute("replaysafe.run.kind", entry.run_kind.to_owned());
        record.add_attribute("replaysafe.pipeline", entry.pipeline.to_owned());
        record.add_attribute("replaysafe.run.id", entry.run_id.to_owned());
        if entry.target.contains("://") {
            record.add_attribute("url.full", entry.target.to_owned());
        }
        if failed {
            let error_type = entry.error_type.unwrap_or(crate::ERROR_TYPE_OTHER);
            record.add_attribute("error.type", error_type.to_owned());
        }
        self.logger.emit(record);
    }
}
