//! The alert model shared by the Alertmanager and PagerDuty clients.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};

use crate::Error;

/// Whether an alert starts firing or ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertAction {
    /// Raise (or re-raise) the alert.
    Trigger,
    /// End the alert.
    Resolve,
}

impl AlertAction {
    /// `trigger` or `resolve`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertAction::Trigger => "trigger",
            AlertAction::Resolve => "resolve",
        }
    }
}

/// How bad it is; PagerDuty's four levels, also sent to Alertmanager as label `severity`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Wake someone up.
    Critical,
    /// Needs attention soon.
    #[default]
    Error,
    /// Worth a look.
    Warning,
    /// For the record.
    Info,
}

impl Severity {
    /// `critical`, `error`, `warning` or `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a data-pipeline alert is about. Freshness, volume and data-quality alerts are
/// the ones a replayed window raises by mistake; every category is gated alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AlertCategory {
    /// Data arrived late, or not at all.
    Freshness,
    /// Row counts or sizes out of their usual range.
    Volume,
    /// A check on the data's content failed.
    DataQuality,
    /// The pipeline itself failed.
    Failure,
}

impl AlertCategory {
    /// `freshness`, `volume`, `data_quality` or `failure`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertCategory::Freshness => "freshness",
            AlertCategory::Volume => "volume",
            AlertCategory::DataQuality => "data_quality",
            AlertCategory::Failure => "failure",
        }
    }
}

/// One alert about a pipeline's window, raised or resolved.
///
/// Its name is the message type in the journal, so a trigger and the resolve of the same
/// alert share one idempotency key (PagerDuty's `dedup_key`).
///
/// ```
/// use replaysafe_alert::{Alert, AlertCategory, Severity};
/// let late = Alert::trigger("orders_freshness", "orders for the window are 3 h late")
///     .with_severity(Severity::Critical)
///     .with_category(AlertCategory::Freshness)
///     .with_label("table", "orders")
///     .with_detail("runbook", "https://wiki.example/runbooks/orders");
/// let resolved = late.resolved();
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Alert {
    pub(crate) name: String,
    pub(crate) action: AlertAction,
    pub(crate) severity: Severity,
    pub(crate) summary: String,
    pub(crate) category: Option<AlertCategory>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) details: BTreeMap<String, String>,
    pub(crate) starts_at: Option<DateTime<Utc>>,
    pub(crate) ends_at: Option<DateTime<Utc>>,
    pub(crate) generator_url: Option<String>,
    pub(crate) source: Option<String>,
}

/// Labels the clients set themselves.
pub(crate) const RESERVED_LABELS: [&str; 5] =
    ["alertname", "severity", "pipeline", "window", "category"];

impl Alert {
    /// An alert named `name` (`[a-zA-Z0-9_.-]`, such as `orders_freshness`) starting to fire.
    pub fn trigger(name: impl Into<String>, summary: impl Into<String>) -> Self {
        Alert {
            name: name.into(),
            action: AlertAction::Trigger,
            severity: Severity::default(),
            summary: summary.into(),
            category: None,
            labels: BTreeMap::new(),
            details: BTreeMap::new(),
            starts_at: None,
            ends_at: None,
            generator_url: None,
            source: None,
        }
    }

    /// The same alert, resolved: same name and labels, so the receiver ends the one it has.
    pub fn resolved(&self) -> Self {
        Alert {
            action: AlertAction::Resolve,
            ..self.clone()
        }
    }

    /// The severity (default [`Severity::Error`]).
    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    /// The category, sent as label `category` (Alertmanager) or `class` (PagerDuty).
    pub fn with_category(mut self, category: AlertCategory) -> Self {
        self.category = Some(category);
        self
    }

    /// A label: part of the alert's identity in Alertmanager, a custom detail in PagerDuty.
    /// `alertname`, `severity`, `pipeline`, `window` and `category` are set by the clients.
    pub fn with_label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(name.into(), value.into());
        self
    }

    /// A detail: an annotation in Alertmanager, a custom detail in PagerDuty.
    pub fn with_detail(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.details.insert(name.into(), value.into());
        self
    }

    /// When it started (default: now, by the context's clock).
    pub fn with_starts_at(mut self, at: DateTime<Utc>) -> Self {
        self.starts_at = Some(at);
        self
    }

    /// When a triggered alert should end by itself (Alertmanager `endsAt`).
    pub fn with_ends_at(mut self, at: DateTime<Utc>) -> Self {
        self.ends_at = Some(at);
        self
    }

    /// A link back to what raised it (Alertmanager `generatorURL`, a PagerDuty link).
    pub fn with_generator_url(mut self, url: impl Into<String>) -> Self {
        self.generator_url = Some(url.into());
        self
    }

    /// PagerDuty's `payload.source` (default: the pipeline name).
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Trigger or resolve.
    pub fn action(&self) -> AlertAction {
        self.action
    }

    /// The summary.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// The labels given (without the ones the clients add).
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// Checks what every receiver needs.
    pub(crate) fn check(&self) -> Result<(), Error> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 128
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !name_ok {
            return Err(Error::invalid(
                "alert name",
                format!(
                    "{:?} must be 1 to 128 characters of a-z, A-Z, 0-9, _, . and -",
                    self.name
                ),
            ));
        }
        if self.action == AlertAction::Trigger && self.summary.trim().is_empty() {
            return Err(Error::invalid(
                "summary",
                "a triggered alert needs a summary",
            ));
        }
        if self.summary.chars().count() > 1024 {
            return Err(Error::invalid("summary", "must be at most 1024 characters"));
        }
        for name in self.labels.keys() {
            check_label_name("label name", name)?;
            if RESERVED_LABELS.contains(&name.as_str()) {
                return Err(Error::invalid(
                    "label name",
                    format!("{name:?} is set by replaysafe"),
                ));
            }
        }
        for name in self.details.keys() {
            check_label_name("detail name", name)?;
            if name == "summary" {
                return Err(Error::invalid(
                    "detail name",
                    format!("{name:?} is set by replaysafe"),
                ));
            }
        }
        if let (Some(start), Some(end)) = (self.starts_at, self.ends_at)
            && end < start
        {
            return Err(Error::invalid("ends_at", "must not be before starts_at"));
        }
        if let Some(url) = &self.generator_url {
            url::Url::parse(url).map_err(|e| Error::invalid("generator_url", e))?;
        }
        Ok(())
    }

    /// The journal summary: `trigger: <summary>` or `resolve`.
    pub(crate) fn journal_summary(&self) -> String {
        match self.action {
            AlertAction::Trigger => format!("trigger {}: {}", self.severity, self.summary),
            AlertAction::Resolve => "resolve".to_owned(),
        }
    }
}

/// Prometheus label names: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub(crate) fn check_label_name(field: &'static str, name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("{name:?} must match [a-zA-Z_][a-zA-Z0-9_]*"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alert_round_trips_through_json() {
        let alert = Alert::trigger("orders_freshness", "3 h late")
            .with_severity(Severity::Critical)
            .with_label("team", "data");
        let json = serde_json::to_string(&alert).unwrap();
        assert!(json.contains(r#""severity":"critical""#), "{json}");
        assert_eq!(serde_json::from_str::<Alert>(&json).unwrap(), alert);
    }

    #[test]
    fn bad_alerts_name_the_field() {
        let cases = [
            (Alert::trigger("", "x"), "alert name"),
            (Alert::trigger("has space", "x"), "alert name"),
            (Alert::trigger("ok", " "), "summary"),
            (Alert::trigger("ok", "x".repeat(1025)), "summary"),
            (
                Alert::trigger("ok", "x").with_label("pipeline", "y"),
                "label name",
            ),
            (
                Alert::trigger("ok", "x").with_label("1bad", "y"),
                "label name",
            ),
            (
                Alert::trigger("ok", "x").with_detail("summary", "y"),
                "detail name",
            ),
            (
                Alert::trigger("ok", "x").with_generator_url("not a url"),
                "generator_url",
            ),
            (
                Alert::trigger("ok", "x")
                    .with_starts_at(DateTime::from_timestamp(10, 0).unwrap())
                    .with_ends_at(DateTime::from_timestamp(5, 0).unwrap()),
                "ends_at",
            ),
        ];
        for (alert, field) in cases {
            assert_eq!(alert.check().unwrap_err().field(), Some(field), "{alert:?}");
        }
        assert!(Alert::trigger("ok", "x").resolved().check().is_ok());
        assert!(Alert::trigger("ok", "").resolved().check().is_ok());
    }
}
