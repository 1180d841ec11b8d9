//! `replaysafe send trigger`: an Airflow DAG run, or a call to a generic trigger URL.

use anyhow::{anyhow, bail};
use replaysafe_webhook::{Trigger, TriggerConfig};

use super::{
    AllowHosts, Common, Ended, EnvVar, Redact, Utf8Text, config_error, context_and_journal,
    flag_for, json_value, layer, send_one,
};

/// The flags of `send trigger`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("downstream").required(true).args(["airflow", "url"])))]
pub struct TriggerArgs {
    /// Airflow 3 API server base URL: triggers a run of --dag-id through its REST API.
    #[arg(long, value_name = "BASE_URL", value_parser = Utf8Text, requires = "dag_id")]
    pub airflow: Option<String>,
    /// The DAG to trigger.
    #[arg(long, value_parser = Utf8Text, requires = "airflow")]
    pub dag_id: Option<String>,
    /// The run's conf: a JSON object, or @FILE.
    #[arg(long, value_parser = Utf8Text, requires = "airflow")]
    pub conf: Option<String>,
    /// Airflow user to log in as: the password (--password-env) is exchanged for a JWT at BASE_URL/auth/token.
    #[arg(long, value_parser = Utf8Text, requires_all = ["airflow", "password_env"])]
    pub user: Option<String>,
    /// Environment variable holding the Airflow user's password: its name, never the password.
    #[arg(long, value_name = "VARIABLE", value_parser = EnvVar, requires = "user")]
    pub password_env: Option<replaysafe_core::EnvVarName>,
    /// Trigger URL: posts the trigger, the pipeline, the window and --data as JSON.
    #[arg(long, value_parser = Utf8Text)]
    pub url: Option<String>,
    /// The conf sent to the trigger URL: a JSON object, or @FILE.
    #[arg(long, value_parser = Utf8Text, requires = "url")]
    pub data: Option<String>,
    /// Trigger name: the message type (default trigger).
    #[arg(long, value_parser = Utf8Text, requires = "url")]
    pub message_type: Option<String>,
    /// Environment variable holding a bearer token (instead of --user and --password-env): its name, never the token.
    #[arg(long, value_name = "VARIABLE", value_parser = EnvVar, conflicts_with = "user")]
    pub token_env: Option<replaysafe_core::EnvVarName>,
    #[command(flatten)]
    #[allow(missing_docs, reason = "flattened: its fields carry the help")]
    pub ssrf: AllowHosts,
    /// How the endpoint appears on stderr and in the journal: full, origin or hashed.
    #[arg(long, value_enum, default_value = "full")]
    pub redact: Redact,
    #[command(flatten)]
    #[allow(missing_docs, reason = "flattened: its fields carry the help")]
    pub common: Common,
}

fn flag(args: &TriggerArgs, field: Option<&str>) -> String {
    let conf = if args.airflow.is_some() {
        "--conf"
    } else {
        "--data"
    };
    let flags = [
        ("airflow", "--airflow"),
        ("url", "--url"),
        ("dag_id", "--dag-id"),
        ("trigger name", "--message-type"),
        ("conf", conf),
        ("user", "--user"),
        ("password_env", "--password-env"),
        ("token_env", "--token-env"),
        ("allow_hosts", "--allow-host"),
    ];
    flag_for(field, &flags, "send trigger").to_owned()
}

/// `replaysafe send trigger`.
pub async fn send(args: TriggerArgs) -> anyhow::Result<Ended> {
    let (mut config, trigger, conf) = match (&args.airflow, &args.url) {
        (Some(base), _) => {
            let dag_id = args
                .dag_id
                .as_deref()
                .ok_or_else(|| anyhow!("--dag-id is required with --airflow"))?;
            let conf = args.conf.as_deref().map(|conf| json_value("--conf", conf));
            (TriggerConfig::airflow(base), Trigger::new(dag_id), conf)
        }
        (None, Some(url)) => {
            let name = args.message_type.as_deref().unwrap_or("trigger");
            let conf = args.data.as_deref().map(|data| json_value("--data", data));
            (TriggerConfig::url(url), Trigger::new(name), conf)
        }
        (None, None) => bail!("--airflow or --url is required"),
    };
    let trigger = match conf {
        Some(conf) => trigger.with_conf(conf?),
        None => trigger,
    };
    config.token_env = args.token_env.clone();
    config.user = args.user.clone();
    config.password_env = args.password_env.clone();
    config.allow_hosts = args.ssrf.allow_hosts.clone();
    let (cx, journal) = context_and_journal(&args.common)?;
    let guard = config
        .build_with(layer(&args.common, &journal), Some(args.redact.policy()))
        .map_err(|e| config_error(flag(&args, e.field()), e.field(), &e))?;
    let what = format!("trigger {}", trigger.name());
    let flag_of = |e: &replaysafe_webhook::Error| flag(&args, e.field());
    send_one(&guard, &cx, &trigger, &what, flag_of, &journal).await
}
