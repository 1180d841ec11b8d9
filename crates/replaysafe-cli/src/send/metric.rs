//! `replaysafe send metric`: a Pushgateway push, or StatsD lines.

use std::time::Duration;

use anyhow::{anyhow, bail};
use replaysafe_metrics::{
    Push, PushgatewayConfig, Sample, StatsdConfig, StatsdMetric, StatsdValue,
};

use super::{
    AllowHosts, Common, Ended, Utf8Text, announce, config_error, context_and_journal, finish,
    flag_for, layer, parse_pair, send_one, target_of,
};

/// The flags of `send metric`.
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("receiver").required(true).args(["pushgateway", "statsd"])
))]
pub struct MetricArgs {
    /// Pushgateway base URL: the metrics replace the group of --job (PUT).
    #[arg(long, value_name = "BASE_URL", value_parser = Utf8Text, requires = "job")]
    pub pushgateway: Option<String>,
    /// Pushgateway job (the group's name and the effect's message type).
    #[arg(long, value_parser = Utf8Text, requires = "pushgateway")]
    pub job: Option<String>,
    /// A grouping label of the Pushgateway group, NAME=VALUE (repeatable).
    #[arg(long = "grouping-label", value_name = "NAME=VALUE", value_parser = Utf8Text, requires = "pushgateway")]
    pub grouping_labels: Vec<String>,
    /// Type of the pushed metrics.
    #[arg(
        long = "type",
        value_enum,
        default_value = "untyped",
        requires = "pushgateway"
    )]
    pub kind: SampleType,
    /// StatsD server, HOST:PORT (UDP).
    #[arg(long, value_name = "HOST:PORT", value_parser = Utf8Text)]
    pub statsd: Option<String>,
    /// A DogStatsD tag on every StatsD line, NAME=VALUE (repeatable).
    #[arg(long = "tag", value_name = "NAME=VALUE", value_parser = Utf8Text, requires = "statsd")]
    pub tags: Vec<String>,
    /// A metric (repeatable): NAME=VALUE for the Pushgateway; NAME:VALUE|TYPE for StatsD, TYPE one of c, g, ms, h, d.
    #[arg(long = "metric", required = true, value_parser = Utf8Text)]
    pub metrics: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs, reason = "flattened: its fields carry the help")]
    pub ssrf: AllowHosts,
    #[command(flatten)]
    #[allow(missing_docs, reason = "flattened: its fields carry the help")]
    pub common: Common,
}

/// `--type` of pushed samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SampleType {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// No type line.
    Untyped,
}

const FLAGS: [(&str, &str); 8] = [
    ("url", "--pushgateway"),
    ("allow_hosts", "--allow-host"),
    ("port", "--statsd"),
    ("job", "--job"),
    ("label name", "--grouping-label"),
    ("metric name", "--metric"),
    ("sample", "--metric"),
    ("tag key", "--tag"),
];

fn flag(error: &replaysafe_metrics::Error) -> String {
    flag_for(error.field(), &FLAGS, "send metric").to_owned()
}

/// `NAME=VALUE` of a pushed sample.
fn sample(text: &str, kind: SampleType) -> anyhow::Result<Sample> {
    let (name, value) = parse_pair("--metric", text)?;
    let value: f64 = value
        .parse()
        .map_err(|_| anyhow!("--metric: the value of {name} is not a number"))?;
    Ok(match kind {
        SampleType::Counter => Sample::counter(name, value),
        SampleType::Gauge => Sample::gauge(name, value),
        SampleType::Untyped => Sample::untyped(name, value),
    })
}

/// `NAME:VALUE|TYPE`, the StatsD line format.
fn statsd_metric(text: &str) -> anyhow::Result<StatsdMetric> {
    const EXPECTED: &str = "--metric: expected NAME:VALUE|TYPE with TYPE one of c, g, ms, h, d";
    let (line, kind) = text.rsplit_once('|').ok_or_else(|| anyhow!(EXPECTED))?;
    let (name, value) = line.rsplit_once(':').ok_or_else(|| anyhow!(EXPECTED))?;
    let number = |value: &str| -> anyhow::Result<f64> {
        value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| anyhow!("--metric: the value of {name} is not a number"))
    };
    let value = match kind.trim() {
        "c" => StatsdValue::Counter(
            value
                .trim()
                .parse()
                .map_err(|_| anyhow!("--metric: a counter's value is a whole number ({name})"))?,
        ),
        "g" => StatsdValue::Gauge(number(value)?),
        "h" => StatsdValue::Histogram(number(value)?),
        "d" => StatsdValue::Distribution(number(value)?),
        "ms" => {
            let millis = number(value)?;
            if millis < 0.0 {
                bail!("--metric: a timing is not negative ({name})");
            }
            StatsdValue::Timing(Duration::from_secs_f64(millis / 1000.0))
        }
        _ => bail!(EXPECTED),
    };
    Ok(StatsdMetric::new(name.trim(), value))
}

/// `HOST:PORT` (`[::1]:8125` for an IPv6 address).
fn statsd_server(text: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) = text
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("--statsd: expected HOST:PORT"))?;
    let port = port
        .parse()
        .map_err(|_| anyhow!("--statsd: expected HOST:PORT (the port is not a number)"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        bail!("--statsd: expected HOST:PORT (no host)");
    }
    Ok((host.to_owned(), port))
}

/// `replaysafe send metric`.
pub async fn send(args: MetricArgs) -> anyhow::Result<Ended> {
    if let Some(base) = &args.pushgateway {
        let job = args
            .job
            .as_deref()
            .ok_or_else(|| anyhow!("--job is required with --pushgateway"))?;
        let mut push = Push::replace(job);
        for text in &args.grouping_labels {
            let (name, value) = parse_pair("--grouping-label", text)?;
            push = push.with_grouping_label(name, value);
        }
        for text in &args.metrics {
            push = push.with_sample(sample(text, args.kind)?);
        }
        let mut config = PushgatewayConfig::new(base);
        config.allow_hosts = args.ssrf.allow_hosts.clone();
        let (cx, journal) = context_and_journal(&args.common)?;
        let guard = config
            .build(layer(&args.common, &journal))
            .map_err(|e| config_error(flag(&e), e.field(), &e))?;
        let what = format!("metric push {job}");
        return send_one(&guard, &cx, &push, &what, flag, &journal).await;
    }
    let Some(server) = &args.statsd else {
        bail!("--pushgateway or --statsd is required");
    };
    if !args.ssrf.allow_hosts.is_empty() {
        bail!("--allow-host: StatsD is not sent over HTTP and has no SSRF guard");
    }
    let (host, port) = statsd_server(server)?;
    let mut metrics = Vec::new();
    for text in &args.metrics {
        let mut metric = statsd_metric(text)?;
        for tag in &args.tags {
            let (name, value) = parse_pair("--tag", tag)?;
            metric = metric.with_tag(name, value);
        }
        metrics.push(metric);
    }
    let (cx, journal) = context_and_journal(&args.common)?;
    let guard = StatsdConfig::new(host, port)
        .build(layer(&args.common, &journal))
        .map_err(|e| config_error("--statsd", e.field(), &e))?;
    // Every line is checked before the first is sent.
    let targets = metrics
        .iter()
        .map(|metric| target_of(&guard, &cx, metric, flag))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut failed = false;
    for (metric, target) in metrics.iter().zip(&targets) {
        let result = guard.send(&cx, metric).await;
        failed |= announce(&format!("metric {}", metric.name()), target, &result, |t| t)?;
    }
    finish(&journal, Ok(failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statsd_lines_parse_and_errors_name_the_flag() {
        assert_eq!(
            statsd_metric("orders.sent:3|c").unwrap().line().unwrap(),
            "orders.sent:3|c"
        );
        assert_eq!(
            statsd_metric("lag:1.5|g").unwrap().value(),
            StatsdValue::Gauge(1.5)
        );
        assert_eq!(
            statsd_metric("export:250|ms").unwrap().value(),
            StatsdValue::Timing(Duration::from_millis(250))
        );
        for bad in [
            "orders",
            "orders:3",
            "orders:x|c",
            "orders:1.5|c",
            "o:1|q",
            "o:NaN|g",
        ] {
            let error = statsd_metric(bad).unwrap_err().to_string();
            assert!(error.starts_with("--metric:"), "{bad}: {error}");
        }
        assert_eq!(
            statsd_server("[::1]:8125").unwrap(),
            ("::1".to_owned(), 8125)
        );
        assert!(statsd_server("statsd").is_err());
    }
}
