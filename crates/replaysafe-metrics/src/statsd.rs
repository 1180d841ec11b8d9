//! A StatsD / DogStatsD client over UDP: one metric line (one datagram) per effect.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, ReplayContext,
};
use tokio::net::UdpSocket;
use tokio::sync::OnceCell;

use crate::Error;

/// What a StatsD line records.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StatsdValue {
    /// `|c`: added to a total at the server. The classic additive effect.
    Counter(i64),
    /// `|g`: the current value.
    Gauge(f64),
    /// `|ms`: a duration, sent in milliseconds.
    Timing(Duration),
    /// `|h`: a value for a histogram.
    Histogram(f64),
    /// `|d`: a value for a distribution (DogStatsD).
    Distribution(f64),
}

impl StatsdValue {
    fn type_name(self) -> &'static str {
        match self {
            StatsdValue::Counter(_) => "counter",
            StatsdValue::Gauge(_) => "gauge",
            StatsdValue::Timing(_) => "timing",
            StatsdValue::Histogram(_) => "histogram",
            StatsdValue::Distribution(_) => "distribution",
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            StatsdValue::Counter(_) => "c",
            StatsdValue::Gauge(_) => "g",
            StatsdValue::Timing(_) => "ms",
            StatsdValue::Histogram(_) => "h",
            StatsdValue::Distribution(_) => "d",
        }
    }

    fn text(self) -> String {
        match self {
            StatsdValue::Counter(n) => n.to_string(),
            StatsdValue::Gauge(v) | StatsdValue::Histogram(v) | StatsdValue::Distribution(v) => {
                v.to_string()
            }
            StatsdValue::Timing(d) => (d.as_secs_f64() * 1000.0).to_string(),
        }
    }
}

/// One StatsD metric: a name, a value and DogStatsD tags (`|#key:value,...`).
///
/// The journal target is the name and the tag *keys* (`orders{region}`); the summary
/// is the value (`counter +3`). Tag values reach the journal only through the payload digest.
///
/// ```
/// use replaysafe_metrics::StatsdMetric;
/// let metric = StatsdMetric::counter("orders", 3).with_tag("region", "eu");
/// assert_eq!(metric.line().unwrap(), "orders:3|c|#region:eu");
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StatsdMetric {
    name: String,
    value: StatsdValue,
    tags: Vec<(String, String)>,
}

impl StatsdMetric {
    /// A counter increment (negative to decrement).
    pub fn counter(name: impl Into<String>, increment: i64) -> Self {
        StatsdMetric::new(name, StatsdValue::Counter(increment))
    }

    /// A gauge value. A negative value is sent as `0` then the value, since StatsD reads
    /// a leading sign as a change.
    pub fn gauge(name: impl Into<String>, value: f64) -> Self {
        StatsdMetric::new(name, StatsdValue::Gauge(value))
    }

    /// A timing.
    pub fn timing(name: impl Into<String>, duration: Duration) -> Self {
        StatsdMetric::new(name, StatsdValue::Timing(duration))
    }

    /// A histogram value.
    pub fn histogram(name: impl Into<String>, value: f64) -> Self {
        StatsdMetric::new(name, StatsdValue::Histogram(value))
    }

    /// A distribution value (DogStatsD).
    pub fn distribution(name: impl Into<String>, value: f64) -> Self {
        StatsdMetric::new(name, StatsdValue::Distribution(value))
    }

    /// A metric with any value.
    pub fn new(name: impl Into<String>, value: StatsdValue) -> Self {
        StatsdMetric {
            name: name.into(),
            value,
            tags: Vec::new(),
        }
    }

    /// Adds a DogStatsD tag `key:value`.
    pub fn with_tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.push((key.into(), value.into()));
        self
    }

    /// The metric name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value.
    pub fn value(&self) -> StatsdValue {
        self.value
    }

    /// The datagram this metric is sent as, after checking every part.
    pub fn line(&self) -> Result<String, Error> {
        self.line_with_prefix("")
    }

    fn line_with_prefix(&self, prefix: &str) -> Result<String, Error> {
        check_part("metric name", &self.name, ":|@#,")?;
        match self.value {
            StatsdValue::Gauge(v) | StatsdValue::Histogram(v) | StatsdValue::Distribution(v)
                if !v.is_finite() =>
            {
                return Err(Error::invalid(
                    "value",
                    format!("{} must be finite", self.name),
                ));
            }
            _ => {}
        }
        let mut tags = String::new();
        for (index, (key, value)) in self.tags.iter().enumerate() {
            check_part("tag key", key, ":|@#,")?;
            check_part("tag value", value, "|@#,")?;
            if self.tags[..index].iter().any(|(k, _)| k == key) {
                return Err(Error::invalid("tag key", format!("{key:?} appears twice")));
            }
            tags.push(if index == 0 { '#' } else { ',' });
            let _ = write!(tags, "{key}:{value}");
        }
        let tail = if tags.is_empty() {
            String::new()
        } else {
            format!("|{tags}")
        };
        let name = format!("{prefix}{}", self.name);
        let suffix = self.value.suffix();
        Ok(match self.value {
            StatsdValue::Gauge(v) if v < 0.0 => {
                format!("{name}:0|g{tail}\n{name}:{}|g{tail}", self.value.text())
            }
            _ => format!("{name}:{}|{suffix}{tail}", self.value.text()),
        })
    }

    /// `name{tag keys}`, keys sorted: no tag value.
    fn target(&self, prefix: &str) -> String {
        let name = format!("{prefix}{}", self.name);
        if self.tags.is_empty() {
            return name;
        }
        let mut keys: Vec<&str> = self.tags.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        format!("{name}{{{}}}", keys.join(","))
    }

    fn summary(&self) -> String {
        match self.value {
            StatsdValue::Counter(n) => format!("counter {n:+}"),
            other => format!("{} {}", other.type_name(), other.text()),
        }
    }
}

fn check_part(field: &'static str, text: &str, forbidden: &str) -> Result<(), Error> {
    if text.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || forbidden.contains(*c))
    {
        return Err(Error::invalid(
            field,
            format!("{:?} must not contain {:?}", text, c),
        ));
    }
    Ok(())
}

/// A StatsD client sending UDP datagrams to one explicitly configured host and port.
///
/// The socket is bound on the first delivery, never when an effect is suppressed; it is
/// bound on loopback when the target is on loopback. UDP has no reply: `Ok` means the
/// datagram left, not that it arrived. The receipt is the number of bytes sent.
/// StatsD takes no idempotency key, and a counter adds up: nothing here makes a repeat
/// harmless but the gate.
#[derive(Debug)]
pub struct StatsdClient {
    host: String,
    port: u16,
    prefix: String,
    socket: OnceCell<UdpSocket>,
}

/// Configures a [`StatsdClient`].
#[derive(Debug)]
pub struct StatsdClientBuilder {
    host: String,
    port: u16,
    prefix: String,
}

impl StatsdClient {
    /// A builder for a client of the StatsD server at `host:port`; there is no default host.
    pub fn builder(host: impl Into<String>, port: u16) -> StatsdClientBuilder {
        StatsdClientBuilder {
            host: host.into(),
            port,
            prefix: String::new(),
        }
    }

    async fn socket(&self) -> Result<&UdpSocket, Error> {
        self.socket
            .get_or_try_init(|| async {
                let what = format!("udp://{}:{}", self.host, self.port);
                let target = tokio::net::lookup_host((self.host.as_str(), self.port))
                    .await
                    .map_err(|e| io_error(&what, e))?
                    .next()
                    .ok_or_else(|| {
                        io_error(
                            &what,
                            std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
                        )
                    })?;
                let local: IpAddr = match target.ip() {
                    IpAddr::V4(ip) if ip.is_loopback() => Ipv4Addr::LOCALHOST.into(),
                    IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
                    IpAddr::V6(ip) if ip.is_loopback() => Ipv6Addr::LOCALHOST.into(),
                    IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
                };
                let socket = UdpSocket::bind(SocketAddr::new(local, 0))
                    .await
                    .map_err(|e| io_error(&what, e))?;
                socket
                    .connect(target)
                    .await
                    .map_err(|e| io_error(&what, e))?;
                Ok(socket)
            })
            .await
    }
}

/// A network failure sending to `target` (`udp://host:port`): transient.
fn io_error(target: &str, error: std::io::Error) -> Error {
    replaysafe_http::Error::network("sending statsd datagram to", target, error).into()
}

impl StatsdClientBuilder {
    /// A prefix put before every metric name (`myapp.`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    fn build_unguarded(self) -> Result<StatsdClient, Error> {
        if self.host.trim().is_empty() || self.host.chars().any(char::is_whitespace) {
            return Err(Error::invalid(
                "host",
                "must be a host name or an IP address",
            ));
        }
        if self.port == 0 {
            return Err(Error::invalid("port", "must not be 0"));
        }
        if !self.prefix.is_empty() {
            check_part("prefix", &self.prefix, ":|@#,")?;
        }
        Ok(StatsdClient {
            host: self.host,
            port: self.port,
            prefix: self.prefix,
            socket: OnceCell::new(),
        })
    }

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<StatsdClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }
}

#[async_trait]
impl EffectClient for StatsdClient {
    type Effect = StatsdMetric;
    type Receipt = usize;
    type Error = Error;

    fn describe(
        &self,
        _cx: &ReplayContext,
        metric: &StatsdMetric,
    ) -> Result<EffectDescription, Error> {
        let line = metric.line_with_prefix(&self.prefix)?;
        Ok(EffectDescription::new(
            EffectKind::Metric,
            format!("statsd_{}", metric.value.type_name()),
            metric.target(&self.prefix),
        )
        .map_err(|e| Error::invalid("metric name", e))?
        .with_summary(metric.summary())
        .with_payload(line.as_bytes()))
    }

    async fn deliver(
        &self,
        _delivery: &Delivery<'_>,
        metric: &StatsdMetric,
    ) -> Result<usize, Error> {
        let line = metric.line_with_prefix(&self.prefix)?;
        let socket = self.socket().await?;
        socket
            .send(line.as_bytes())
            .await
            .map_err(|e| io_error(&format!("udp://{}:{}", self.host, self.port), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_dogstatsd() {
        let cases = [
            (StatsdMetric::counter("orders", 3), "orders:3|c"),
            (StatsdMetric::counter("orders", -2), "orders:-2|c"),
            (StatsdMetric::gauge("depth", 2.5), "depth:2.5|g"),
            (StatsdMetric::gauge("temp", -4.0), "temp:0|g\ntemp:-4|g"),
            (
                StatsdMetric::timing("export", Duration::from_micros(1500)),
                "export:1.5|ms",
            ),
            (StatsdMetric::histogram("size", 10.0), "size:10|h"),
            (StatsdMetric::distribution("size", 0.5), "size:0.5|d"),
            (
                StatsdMetric::counter("orders", 1)
                    .with_tag("region", "eu")
                    .with_tag("env", "prod:1"),
                "orders:1|c|#region:eu,env:prod:1",
            ),
        ];
        for (metric, line) in cases {
            assert_eq!(metric.line().unwrap(), line);
        }
    }

    #[test]
    fn bad_parts_are_refused_by_field() {
        let cases = [
            (StatsdMetric::counter("", 1), "metric name"),
            (StatsdMetric::counter("a:b", 1), "metric name"),
            (StatsdMetric::counter("a\nb", 1), "metric name"),
            (StatsdMetric::counter("a", 1).with_tag("k|", "v"), "tag key"),
            (
                StatsdMetric::counter("a", 1).with_tag("k", "v,w"),
                "tag value",
            ),
            (
                StatsdMetric::counter("a", 1)
                    .with_tag("k", "v")
                    .with_tag("k", "w"),
                "tag key",
            ),
            (StatsdMetric::gauge("a", f64::NAN), "value"),
        ];
        for (metric, field) in cases {
            assert_eq!(
                metric.line().unwrap_err().field(),
                Some(field),
                "{metric:?}"
            );
        }
        assert_eq!(
            StatsdClient::builder("", 8125)
                .build_unguarded()
                .unwrap_err()
                .field(),
            Some("host")
        );
        assert_eq!(
            StatsdClient::builder("127.0.0.1", 0)
                .build_unguarded()
                .unwrap_err()
                .field(),
            Some("port")
        );
    }

    #[test]
    fn targets_and_summaries_hide_tag_values() {
        let metric = StatsdMetric::counter("orders", 3)
            .with_tag("region", "eu")
            .with_tag("customer", "c-42");
        assert_eq!(metric.target("app."), "app.orders{customer,region}");
        assert_eq!(metric.summary(), "counter +3");
        assert_eq!(StatsdMetric::gauge("g", 1.5).summary(), "gauge 1.5");
    }
}
