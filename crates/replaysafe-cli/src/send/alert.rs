//! `replaysafe send alert`: Alertmanager, PagerDuty Events v2 or a Slack incoming webhook.

use anyhow::{anyhow, bail};
use replaysafe_alert::{
    Alert, AlertmanagerConfig, PagerDutyConfig, Severity, SlackConfig, SlackMessage,
};

use super::{
    AllowHosts, Common, Ended, EnvVar, Utf8Text, config_error, context_and_journal, flag_for,
    layer, parse_pair, send_one,
};

/// The flags of `send alert`.
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("receiver")
        .required(true)
        .args(["alertmanager", "pagerduty_routing_key_env", "slack_url_env"])
))]
pub struct AlertArgs {
    /// Alertmanager base URL (API v2).
    #[arg(long, value_name = "BASE_URL", value_parser = Utf8Text)]
    pub alertmanager: Option<String>,
    /// Environment variable holding a PagerDuty Events v2 routing key: its name, never the key.
    #[arg(long, value_name = "VARIABLE", value_parser = EnvVar)]
    pub pagerduty_routing_key_env: Option<replaysafe_core::EnvVarName>,
    /// PagerDuty Events API base URL (default https://events.pagerduty.com).
    #[arg(long, value_name = "BASE_URL", value_parser = Utf8Text, requires = "pagerduty_routing_key_env")]
    pub pagerduty_url: Option<String>,
    /// The name the journal shows for the routing key (default events-v2).
    #[arg(long, value_name = "LABEL", value_parser = Utf8Text, requires = "pagerduty_routing_key_env")]
    pub service: Option<String>,
    /// Environment variable holding a Slack incoming-webhook URL (the whole URL is a secret): its name, never the URL.
    #[arg(long, value_name = "VARIABLE", value_parser = EnvVar)]
    pub slack_url_env: Option<replaysafe_core::EnvVarName>,
    /// The name the journal shows for the Slack webhook, such as data-alerts.
    #[arg(long, value_name = "LABEL", value_parser = Utf8Text, requires = "slack_url_env")]
    pub channel: Option<String>,
    /// Alert name ([a-zA-Z0-9_.-]): the message type, shared by a trigger and its resolve. Required for Alertmanager and PagerDuty; for Slack the default is notification.
    #[arg(long, value_parser = Utf8Text)]
    pub alertname: Option<String>,
    /// What is wrong, one line: required for PagerDuty; for Alertmanager the default is the alert name.
    #[arg(long, value_parser = Utf8Text)]
    pub summary: Option<String>,
    /// The Slack message's text.
    #[arg(long, value_parser = Utf8Text, requires = "slack_url_env")]
    pub text: Option<String>,
    /// Severity, default error: Alertmanager's label severity, PagerDuty's severity (a Slack message has none). --label severity=X says the same.
    #[arg(long, value_enum, conflicts_with = "slack_url_env")]
    pub severity: Option<SeverityArg>,
    /// A label, NAME=VALUE (repeatable; Alertmanager and PagerDuty); severity=X is taken as --severity X.
    #[arg(long = "label", value_name = "NAME=VALUE", value_parser = Utf8Text, conflicts_with = "slack_url_env")]
    pub labels: Vec<String>,
    /// An annotation (PagerDuty: a custom detail), NAME=VALUE (repeatable; not for Slack).
    #[arg(long = "annotation", value_name = "NAME=VALUE", value_parser = Utf8Text, conflicts_with = "slack_url_env")]
    pub annotations: Vec<String>,
    /// Send the alert's resolve instead of its trigger (same name and labels).
    #[arg(long)]
    pub resolve: bool,
    #[command(flatten)]
    #[allow(missing_docs, reason = "flattened: its fields carry the help")]
    pub ssrf: AllowHosts,
    #[command(flatten)]
    #[allow(missing_docs, reason = "flattened: its fields carry the help")]
    pub common: Common,
}

/// `--severity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SeverityArg {
    /// Wake someone up.
    Critical,
    /// Needs attention soon.
    Error,
    /// Worth a look.
    Warning,
    /// For the record.
    Info,
}

impl From<SeverityArg> for Severity {
    fn from(severity: SeverityArg) -> Self {
        match severity {
            SeverityArg::Critical => Severity::Critical,
            SeverityArg::Error => Severity::Error,
            SeverityArg::Warning => Severity::Warning,
            SeverityArg::Info => Severity::Info,
        }
    }
}

/// Adapter fields and the flags behind them.
const FLAGS: [(&str, &str); 11] = [
    ("allow_hosts", "--allow-host"),
    ("routing_key_env", "--pagerduty-routing-key-env"),
    ("service", "--service"),
    ("channel", "--channel"),
    ("url_env", "--slack-url-env"),
    ("alert name", "--alertname"),
    ("message name", "--alertname"),
    ("summary", "--summary"),
    ("text", "--text"),
    ("label name", "--label"),
    ("detail name", "--annotation"),
];

fn flag(error: &replaysafe_alert::Error, args: &AlertArgs) -> String {
    // The configurations' `url` is --alertmanager, or PagerDuty's --pagerduty-url.
    if error.field() == Some("url") {
        return if args.alertmanager.is_some() {
            "--alertmanager"
        } else {
            "--pagerduty-url"
        }
        .to_owned();
    }
    flag_for(error.field(), &FLAGS, "send alert").to_owned()
}

/// The alert the flags describe (Alertmanager and PagerDuty).
fn alert(args: &AlertArgs, receiver: &str) -> anyhow::Result<Alert> {
    let name = args
        .alertname
        .as_deref()
        .ok_or_else(|| anyhow!("--alertname is required with {receiver}"))?;
    let summary = match (&args.summary, args.alertmanager.is_some()) {
        (Some(summary), _) => summary.as_str(),
        (None, true) => name,
        (None, false) => bail!("--summary is required with {receiver}"),
    };
    let mut alert = Alert::trigger(name, summary);
    // Alertmanager users write the severity as a label: it is --severity by another name.
    let mut labelled: Option<SeverityArg> = None;
    for text in &args.labels {
        let (name, value) = parse_pair("--label", text)?;
        if name != "severity" {
            alert = alert.with_label(name, value);
            continue;
        }
        let severity = <SeverityArg as clap::ValueEnum>::from_str(&value, false).map_err(|_| {
            anyhow!("--label: severity must be critical, error, warning or info (it is --severity)")
        })?;
        if labelled.is_some_and(|earlier| earlier != severity) {
            bail!("--label: severity is given twice, with different values");
        }
        labelled = Some(severity);
    }
    let severity = match (args.severity, labelled) {
        (Some(flag), Some(label)) if flag != label => bail!(
            "--severity {} and --label severity={} disagree: give the severity once",
            Severity::from(flag),
            Severity::from(label)
        ),
        (flag, label) => flag.or(label).unwrap_or(SeverityArg::Error),
    };
    alert = alert.with_severity(severity.into());
    for text in &args.annotations {
        let (name, value) = parse_pair("--annotation", text)?;
        alert = alert.with_detail(name, value);
    }
    Ok(if args.resolve {
        alert.resolved()
    } else {
        alert
    })
}

/// `replaysafe send alert`.
pub async fn send(args: AlertArgs) -> anyhow::Result<Ended> {
    let built = |e: replaysafe_alert::Error| config_error(flag(&e, &args), e.field(), &e);
    let flag_of = |e: &replaysafe_alert::Error| flag(e, &args);
    if let Some(base) = &args.alertmanager {
        let alert = alert(&args, "--alertmanager")?;
        let mut config = AlertmanagerConfig::new(base);
        config.allow_hosts = args.ssrf.allow_hosts.clone();
        let (cx, journal) = context_and_journal(&args.common)?;
        let guard = config.build(layer(&args.common, &journal)).map_err(built)?;
        let what = format!("alert {}", alert.name());
        return send_one(&guard, &cx, &alert, &what, flag_of, &journal).await;
    }
    if let Some(variable) = &args.pagerduty_routing_key_env {
        let alert = alert(&args, "--pagerduty-routing-key-env")?;
        let mut config = PagerDutyConfig::new(variable.clone());
        config.url = args.pagerduty_url.clone();
        config.service = args.service.clone();
        config.allow_hosts = args.ssrf.allow_hosts.clone();
        let (cx, journal) = context_and_journal(&args.common)?;
        let guard = config.build(layer(&args.common, &journal)).map_err(built)?;
        let what = format!("alert {}", alert.name());
        return send_one(&guard, &cx, &alert, &what, flag_of, &journal).await;
    }
    let Some(variable) = &args.slack_url_env else {
        bail!("one of --alertmanager, --pagerduty-routing-key-env and --slack-url-env is required");
    };
    let text = args
        .text
        .as_deref()
        .or(args.summary.as_deref())
        .ok_or_else(|| anyhow!("--text is required with --slack-url-env"))?;
    let name = args.alertname.as_deref().unwrap_or("notification");
    let message = SlackMessage::new(name, text);
    let mut config = SlackConfig::new(variable.clone());
    config.channel = args.channel.clone();
    config.allow_hosts = args.ssrf.allow_hosts.clone();
    let (cx, journal) = context_and_journal(&args.common)?;
    let guard = config.build(layer(&args.common, &journal)).map_err(built)?;
    let what = format!("slack message {name}");
    send_one(&guard, &cx, &message, &what, flag_of, &journal).await
}
