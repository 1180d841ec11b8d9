//! The Prometheus text exposition format (version 0.0.4), as far as a push needs it:
//! counters, gauges and untyped samples with labels and help text, no timestamps
//! (the Pushgateway refuses them).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::Error;

/// The type of a pushed metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SampleKind {
    /// A monotonic total; never negative.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A value of no declared type.
    Untyped,
}

impl SampleKind {
    fn as_str(self) -> &'static str {
        match self {
            SampleKind::Counter => "counter",
            SampleKind::Gauge => "gauge",
            SampleKind::Untyped => "untyped",
        }
    }
}

/// One sample of a push: a metric name, labels and a value.
///
/// ```
/// use replaysafe_metrics::Sample;
/// let sample = Sample::counter("orders_total", 42.0).with_label("region", "eu");
/// assert_eq!(sample.name(), "orders_total");
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    name: String,
    kind: SampleKind,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    /// A counter sample (a total, not an increment: the Pushgateway stores what it is given).
    pub fn counter(name: impl Into<String>, value: f64) -> Self {
        Sample::new(name, SampleKind::Counter, value)
    }

    /// A gauge sample.
    pub fn gauge(name: impl Into<String>, value: f64) -> Self {
        Sample::new(name, SampleKind::Gauge, value)
    }

    /// An untyped sample.
    pub fn untyped(name: impl Into<String>, value: f64) -> Self {
        Sample::new(name, SampleKind::Untyped, value)
    }

    fn new(name: impl Into<String>, kind: SampleKind, value: f64) -> Self {
        Sample {
            name: name.into(),
            kind,
            labels: Vec::new(),
            value,
        }
    }

    /// Adds a label.
    pub fn with_label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.push((name.into(), value.into()));
        self
    }

    /// The metric name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The metric type.
    pub fn kind(&self) -> SampleKind {
        self.kind
    }

    /// The labels, in the order given.
    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    /// The value.
    pub fn value(&self) -> f64 {
        self.value
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub(crate) fn check_metric_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let well_formed = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if well_formed {
        Ok(())
    } else {
        Err(Error::invalid(
            "metric name",
            format!("{:?} must match [a-zA-Z_:][a-zA-Z0-9_:]*", name),
        ))
    }
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__` (reserved by Prometheus).
pub(crate) fn check_label_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let well_formed = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__");
    if well_formed {
        Ok(())
    } else {
        Err(Error::invalid(
            "label name",
            format!("{name:?} must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __"),
        ))
    }
}

/// Renders samples as one text exposition, checking names, types and duplicates.
/// Samples of one name are grouped under one `# TYPE` line, in order of first appearance.
pub(crate) fn render(
    samples: &[Sample],
    help: &BTreeMap<String, String>,
    reserved_labels: &BTreeSet<&str>,
) -> Result<String, Error> {
    let mut order: Vec<&str> = Vec::new();
    let mut kinds: BTreeMap<&str, SampleKind> = BTreeMap::new();
    let mut series: BTreeSet<(String, Vec<(String, String)>)> = BTreeSet::new();
    for sample in samples {
        check_metric_name(&sample.name)?;
        match kinds.get(sample.name.as_str()) {
            None => {
                kinds.insert(&sample.name, sample.kind);
                order.push(&sample.name);
            }
            Some(kind) if *kind != sample.kind => {
                return Err(Error::invalid(
                    "sample",
                    format!(
                        "{} is pushed both as a {} and as a {}",
                        sample.name,
                        kind.as_str(),
                        sample.kind.as_str()
                    ),
                ));
            }
            Some(_) => {}
        }
        if sample.kind == SampleKind::Counter && (sample.value.is_nan() || sample.value < 0.0) {
            return Err(Error::invalid(
                "sample",
                format!(
                    "counter {} must be zero or more, not {}",
                    sample.name, sample.value
                ),
            ));
        }
        let mut names = BTreeSet::new();
        for (name, _) in &sample.labels {
            check_label_name(name)?;
            if reserved_labels.contains(name.as_str()) {
                return Err(Error::invalid(
                    "label name",
                    format!(
                        "{name:?} of {} is a grouping label; the gateway adds it",
                        sample.name
                    ),
                ));
            }
            if !names.insert(name.as_str()) {
                return Err(Error::invalid(
                    "label name",
                    format!("{name:?} appears twice on {}", sample.name),
                ));
            }
        }
        let mut labels = sample.labels.clone();
        labels.sort();
        if !series.insert((sample.name.clone(), labels)) {
            return Err(Error::invalid(
                "sample",
                format!("{} is pushed twice with the same labels", sample.name),
            ));
        }
    }
    for name in help.keys() {
        if !kinds.contains_key(name.as_str()) {
            return Err(Error::invalid(
                "help",
                format!("help text for {name:?}, which is not pushed"),
            ));
        }
    }

    let mut out = String::new();
    for name in order {
        if let Some(text) = help.get(name) {
            let text = text.replace('\\', r"\\").replace('\n', r"\n");
            let _ = writeln!(out, "# HELP {name} {text}");
        }
        let _ = writeln!(out, "# TYPE {name} {}", kinds[name].as_str());
        for sample in samples.iter().filter(|s| s.name == name) {
            out.push_str(name);
            if !sample.labels.is_empty() {
                out.push('{');
                for (index, (label, value)) in sample.labels.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    let value = value
                        .replace('\\', r"\\")
                        .replace('"', "\\\"")
                        .replace('\n', r"\n");
                    let _ = write!(out, "{label}=\"{value}\"");
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", format_value(sample.value));
        }
    }
    Ok(out)
}

/// Go's `ParseFloat` reads Rust's shortest round-trip form; infinities are `+Inf`/`-Inf`.
pub(crate) fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_types_help_and_escaped_labels() {
        let samples = [
            Sample::counter("orders_total", 42.0).with_label("region", "eu \"west\"\n"),
            Sample::gauge("lag_seconds", 1.5),
            Sample::counter("orders_total", 7.0).with_label("region", "us"),
        ];
        let help = BTreeMap::from([("orders_total".to_owned(), "Orders\\seen\nso far".to_owned())]);
        let text = render(&samples, &help, &BTreeSet::new()).unwrap();
        assert_eq!(
            text,
            "# HELP orders_total Orders\\\\seen\\nso far\n\
             # TYPE orders_total counter\n\
             orders_total{region=\"eu \\\"west\\\"\\n\"} 42\n\
             orders_total{region=\"us\"} 7\n\
             # TYPE lag_seconds gauge\n\
             lag_seconds 1.5\n"
        );
    }

    #[test]
    fn refuses_what_the_gateway_would_refuse() {
        let none = BTreeMap::new();
        let reserved = BTreeSet::from(["instance"]);
        let cases = [
            (vec![Sample::gauge("9lives", 1.0)], "metric name"),
            (
                vec![Sample::gauge("ok", 1.0).with_label("__x", "v")],
                "label name",
            ),
            (
                vec![Sample::gauge("ok", 1.0).with_label("instance", "v")],
                "label name",
            ),
            (
                vec![
                    Sample::gauge("ok", 1.0)
                        .with_label("a", "1")
                        .with_label("a", "2"),
                ],
                "label name",
            ),
            (vec![Sample::counter("ok", -1.0)], "sample"),
            (vec![Sample::counter("ok", f64::NAN)], "sample"),
            (
                vec![Sample::counter("ok", 1.0), Sample::gauge("ok", 1.0)],
                "sample",
            ),
            (
                vec![Sample::gauge("ok", 1.0), Sample::gauge("ok", 2.0)],
                "sample",
            ),
        ];
        for (samples, field) in cases {
            let error = render(&samples, &none, &reserved).unwrap_err();
            assert_eq!(error.field(), Some(field), "{error}");
        }
        let help = BTreeMap::from([("absent".to_owned(), "x".to_owned())]);
        assert_eq!(
            render(&[Sample::gauge("ok", 1.0)], &help, &reserved)
                .unwrap_err()
                .field(),
            Some("help")
        );
    }

    #[test]
    fn values_use_prometheus_spelling() {
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(3.0), "3");
    }
}
