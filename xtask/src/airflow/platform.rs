//! The platform integration under the real Airflow: `replaysafe.airflow` installed by its
//! one line in `airflow_local_settings.py`, checked on the DAGs of
//! `xtask/airflow/dags/replaysafe_platform.py` against the loopback receiver, the SMTP
//! server and sshd the Rust tests use.
//!
//! - (f) without the integration, an asset consumer of a current producer run delivers
//!   nothing and journals `unknown_window` (Airflow 3 gives it no logical date), while
//!   Airflow's own TriggerDagRunOperator starts its downstream DAG ungated;
//! - (g) with it, a consumer of a backfill delivers nothing (`upstream_replay`), a consumer
//!   of the scheduled run delivers once per task and starts the report DAG with lineage in
//!   its conf, and clearing that consumer run sends nothing again;
//! - (h) the cluster policy gates EmailOperator, HttpOperator, SlackWebhookOperator,
//!   SFTPOperator, TriggerDagRunOperator and an SmtpNotifier: a three-day backfill sends
//!   nothing and journals each effect as it would have been sent, the scheduled run sends
//!   each once, and a cleared run sends nothing again.

use std::collections::BTreeMap;

use super::*;

/// The DAGs of `replaysafe_platform.py`.
pub(super) const DAGS: [&str; 6] = [
    PRODUCER,
    CONSUMER,
    REPORT,
    POLICY,
    "replaysafe_producer_plain",
    "replaysafe_consumer_plain",
];
const PRODUCER: &str = "replaysafe_producer";
const CONSUMER: &str = "replaysafe_consumer";
const REPORT: &str = "replaysafe_report";
const POLICY: &str = "replaysafe_policy";

/// What a platform team writes in `airflow_local_settings.py`: the whole installation.
pub(super) const INSTALL_LINE: &str =
    "from replaysafe.airflow import get_airflow_context_vars, task_policy\n";

/// The max ages the platform gives its workers: the daily DAGs' latest tick is up to a
/// day old when the check runs.
const MAX_AGES: &str = "email=2d,webhook=2d,alert=2d,file_drop=2d,trigger=2d";

/// The servers the policy's operators send to, and how to read what they got; and the
/// PostgreSQL server that holds Airflow's metadata database.
#[derive(Debug)]
pub(super) struct Servers {
    maildir: PathBuf,
    upload: PathBuf,
    env: Vec<(String, String)>,
    database: String,
    _running: crate::services::Running,
}

impl Servers {
    /// Starts aiosmtpd and sshd (as the Rust tests do) and describes them to Airflow as
    /// connections, with the receiver's; starts PostgreSQL and creates Airflow's
    /// metadata database in it.
    pub(super) fn start(receiver: &str, out: &Path) -> anyhow::Result<Servers> {
        let running =
            crate::services::start(&["smtp".to_owned(), "sshd".to_owned(), "postgres".to_owned()])?;
        let vars: BTreeMap<String, String> = running.env().into_iter().collect();
        let var = |name: &str| {
            vars.get(name)
                .cloned()
                .with_context(|| format!("the test servers did not set {name}"))
        };
        let smtp = json!({
            "conn_type": "smtp",
            "host": "127.0.0.1",
            "port": var("REPLAYSAFE_TEST_SMTP_PORT")?.parse::<u16>()?,
            "extra": {"from_email": "airflow@shop.example", "disable_tls": true, "disable_ssl": true},
        });
        let sftp = json!({
            "conn_type": "sftp",
            "host": "127.0.0.1",
            "port": var("REPLAYSAFE_TEST_SSHD_PORT")?.parse::<u16>()?,
            "login": var("REPLAYSAFE_TEST_SSHD_USER")?,
            "extra": {"key_file": var("REPLAYSAFE_TEST_SSHD_KEY")?, "no_host_key_check": true},
        });
        // The Slack webhook's token is its path: the policy never journals it.
        let slack = json!({
            "conn_type": "slackwebhook",
            "host": format!("{receiver}/hooks/{POLICY}"),
            "password": "slack",
        });
        let upload = PathBuf::from(var("REPLAYSAFE_TEST_SSHD_UPLOAD")?);
        std::fs::write(out.join("policy-drop.csv"), "order,amount\n1,10\n")?;
        let env = vec![
            ("AIRFLOW_CONN_SMTP_DEFAULT".to_owned(), smtp.to_string()),
            ("AIRFLOW_CONN_REPLAYSAFE_SFTP".to_owned(), sftp.to_string()),
            (
                "AIRFLOW_CONN_REPLAYSAFE_SLACK".to_owned(),
                slack.to_string(),
            ),
            (
                "AIRFLOW_CONN_REPLAYSAFE_RECEIVER".to_owned(),
                receiver.to_owned(),
            ),
            (
                "XTASK_AIRFLOW_SFTP_DIR".to_owned(),
                upload.display().to_string(),
            ),
            // The platform's journal: every task of the deployment writes to it.
            (
                "REPLAYSAFE_JOURNAL".to_owned(),
                out.join("platform.jsonl").display().to_string(),
            ),
        ];
        let database = crate::services::postgres::create_database(
            &var("REPLAYSAFE_TEST_POSTGRES_URL")?,
            "airflow",
        )?;
        Ok(Servers {
            maildir: PathBuf::from(var("REPLAYSAFE_TEST_SMTP_MAILDIR")?),
            upload,
            env,
            database,
            _running: running,
        })
    }

    pub(super) fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The `postgres://` URL of Airflow's metadata database.
    pub(super) fn database(&self) -> &str {
        &self.database
    }

    /// The messages aiosmtpd stored that contain `needle`.
    fn messages_with(&self, needle: &str) -> anyhow::Result<usize> {
        let mut found = 0;
        let mut dirs = vec![self.maildir.clone()];
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if std::fs::read_to_string(&path)?.contains(needle) {
                    found += 1;
                }
            }
        }
        Ok(found)
    }

    /// The files named `name` in sshd's upload directory.
    fn uploaded(&self, name: &str) -> bool {
        self.upload.join(name).is_file()
    }
}

/// Installs the integration: the one line, in `$AIRFLOW_HOME/config/airflow_local_settings.py`,
/// and the platform's max ages in the workers' environment.
pub(super) fn install(airflow: &mut Airflow, home: &Path) -> anyhow::Result<()> {
    let config = home.join("config");
    std::fs::create_dir_all(&config)?;
    std::fs::write(config.join("airflow_local_settings.py"), INSTALL_LINE)?;
    airflow
        .env
        .push(("REPLAYSAFE_MAX_AGE".to_owned(), MAX_AGES.to_owned()));
    Ok(())
}

/// A DAG run as the API gives it (asset-triggered runs have no logical date).
#[derive(Debug, Clone)]
struct AnyRun {
    id: String,
    run_type: String,
    state: String,
    logical_date: Option<DateTime<Utc>>,
    data_interval_start: Option<DateTime<Utc>>,
    conf: Value,
}

impl AnyRun {
    fn finished(&self) -> bool {
        self.state == "success" || self.state == "failed"
    }
}

fn time(value: &Value) -> Option<DateTime<Utc>> {
    value
        .as_str()
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|time| time.with_timezone(&Utc))
}

fn dag_runs(api: &Api, dag: &str) -> anyhow::Result<Vec<AnyRun>> {
    let answer = api.get(&format!("/api/v2/dags/{dag}/dagRuns?limit=100"))?;
    let mut runs = Vec::new();
    for run in answer["dag_runs"].as_array().context("dag_runs")? {
        runs.push(AnyRun {
            id: run["dag_run_id"].as_str().context("dag_run_id")?.to_owned(),
            run_type: run["run_type"].as_str().unwrap_or_default().to_owned(),
            state: run["state"].as_str().unwrap_or_default().to_owned(),
            logical_date: time(&run["logical_date"]),
            data_interval_start: time(&run["data_interval_start"]),
            conf: run["conf"].clone(),
        });
    }
    runs.sort_by_key(|run| run.logical_date);
    Ok(runs)
}

/// Task id → (state, try number) of the run's task instances.
fn tasks(api: &Api, dag: &str, run: &str) -> anyhow::Result<BTreeMap<String, (String, u64)>> {
    let answer = api.get(&format!(
        "/api/v2/dags/{dag}/dagRuns/{}/taskInstances",
        segment(run)
    ))?;
    Ok(answer["task_instances"]
        .as_array()
        .context("task_instances")?
        .iter()
        .map(|task| {
            (
                task["task_id"].as_str().unwrap_or_default().to_owned(),
                (
                    task["state"].as_str().unwrap_or("none").to_owned(),
                    task["try_number"].as_u64().unwrap_or(0),
                ),
            )
        })
        .collect())
}

/// How many asset events the run consumed.
fn consumed_events(api: &Api, dag: &str, run: &str) -> anyhow::Result<usize> {
    let answer = api.get(&format!(
        "/api/v2/dags/{dag}/dagRuns/{}/upstreamAssetEvents",
        segment(run)
    ))?;
    Ok(answer["asset_events"].as_array().map_or(0, Vec::len))
}

/// How many asset events wait to start a run of `dag`.
fn queued_events(api: &Api, dag: &str) -> anyhow::Result<usize> {
    let (status, text) = api.request(
        "GET",
        &format!("/api/v2/dags/{dag}/assets/queuedEvents"),
        None,
    )?;
    match status {
        404 => Ok(0),
        200 => {
            let answer: Value = serde_json::from_str(&text)?;
            Ok(answer["queued_events"].as_array().map_or(0, Vec::len))
        }
        _ => bail!("queued events of {dag}: status {status}: {text}"),
    }
}

/// The platform journal's records of one run.
fn journaled(out: &Path, dag: &str, run: &str) -> anyhow::Result<Vec<Value>> {
    let path = out.join("platform.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut records = Vec::new();
    for line in text.lines() {
        let record: Value = serde_json::from_str(line)
            .with_context(|| format!("{}: not JSON: {line}", path.display()))?;
        if record["pipeline"] == dag && record["run_id"] == run {
            records.push(record);
        }
    }
    Ok(records)
}

/// The outcome records (not `attempting`) of one message type in a run's journal.
fn outcomes<'a>(records: &'a [Value], message_type: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["effect"]["message_type"] == message_type && r["decision"] != "attempting")
        .collect()
}

/// Whether one of `records` is `decision` with `reason` among its reasons.
fn has(records: &[&Value], decision: &str, reason: &str) -> bool {
    records.iter().any(|record| {
        record["decision"] == decision
            && (reason.is_empty()
                || record["reasons"]
                    .as_array()
                    .is_some_and(|all| all.iter().any(|r| r == reason)))
    })
}

/// The requests on `path` whose body names `run`.
fn requests_naming(world: &World<'_>, path: &str, run: &str) -> anyhow::Result<usize> {
    Ok(world
        .receiver
        .requests()?
        .iter()
        .filter(|request| request.path == path && request.body.contains(run))
        .count())
}

/// The webhooks a consumer run sent through the command and the Python API.
fn consumer_requests(world: &World<'_>, consumer: &str, run: &str) -> anyhow::Result<usize> {
    let mut sent = 0;
    for path in ["cli", "python"] {
        sent += requests_naming(world, &format!("/hooks/{consumer}/{path}"), run)?;
    }
    Ok(sent)
}

/// Records whether the run and every task of it succeeded.
fn check_succeeded(
    checks: &mut Checks,
    api: &Api,
    dag: &str,
    run: &AnyRun,
    name: &str,
) -> anyhow::Result<()> {
    let states = tasks(api, dag, &run.id)?;
    checks.record(
        name,
        run.state == "success" && states.values().all(|(s, _)| s == "success"),
        format!("run {}, tasks {states:?}", run.state),
    );
    Ok(())
}

/// The report DAG's runs started from `dag` (by the conf each trigger passes).
fn report_runs_from(api: &Api, dag: &str) -> anyhow::Result<Vec<AnyRun>> {
    Ok(dag_runs(api, REPORT)?
        .into_iter()
        .filter(|run| run.conf["from"] == dag)
        .collect())
}

/// Waits until `dag` has a run not in `known` that `pick` accepts, finished; returns the
/// new finished runs.
fn new_runs(
    deployment: &mut Deployment,
    api: &Api,
    dag: &str,
    known: &[String],
    what: &str,
    mut done: impl FnMut(&[AnyRun]) -> anyhow::Result<bool>,
) -> anyhow::Result<Vec<AnyRun>> {
    deployment.wait(what, RUN_TIMEOUT, || {
        let fresh: Vec<AnyRun> = dag_runs(api, dag)?
            .into_iter()
            .filter(|run| !known.contains(&run.id))
            .collect();
        let finished = !fresh.is_empty() && fresh.iter().all(AnyRun::finished);
        Ok((finished && done(&fresh)?).then_some(fresh))
    })
}

fn ids(runs: &[AnyRun]) -> Vec<String> {
    runs.iter().map(|run| run.id.clone()).collect()
}

/// Clears every task of `run` and waits until each ran again and the run finished.
fn clear_and_wait(
    deployment: &mut Deployment,
    api: &Api,
    dag: &str,
    run: &str,
) -> anyhow::Result<()> {
    let before = tasks(api, dag, run)?;
    let (status, text) = api.request(
        "POST",
        &format!("/api/v2/dags/{dag}/clearTaskInstances"),
        Some(&json!({"dry_run": false, "only_failed": false, "dag_run_id": run})),
    )?;
    if status != 200 {
        bail!("clearing {dag} {run}: status {status}: {text}");
    }
    deployment.wait(
        &format!("the cleared run {run} of {dag} to finish again"),
        RUN_TIMEOUT,
        || {
            let now = tasks(api, dag, run)?;
            let again = now.iter().all(|(task, (state, tries))| {
                let before = before.get(task).map_or(0, |(_, t)| *t);
                *tries > before && matches!(state.as_str(), "success" | "failed")
            });
            let state = dag_runs(api, dag)?
                .into_iter()
                .find(|r| r.id == run)
                .map(|r| r.state)
                .unwrap_or_default();
            Ok((again && matches!(state.as_str(), "success" | "failed")).then_some(()))
        },
    )
}

/// `airflow backfill create` of the daily ticks of the three days before today.
fn backfill_three_days(airflow: &Airflow, dag: &str, logs: &Path) -> anyhow::Result<()> {
    let today = Utc::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .context("midnight")?
        .and_utc();
    let from = (today - TimeDelta::days(3)).to_rfc3339();
    let to = (today - TimeDelta::days(1)).to_rfc3339();
    airflow.backfill_create(dag, &from, &to, logs)?;
    Ok(())
}

/// (f) Without the integration: the plain pair's consumer run delivers nothing.
pub(super) fn case_plain(
    deployment: &mut Deployment,
    world: &World<'_>,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let case = "(f)";
    let (producer, consumer) = ("replaysafe_producer_plain", "replaysafe_consumer_plain");
    world.unpause(consumer)?;
    world.unpause(producer)?;
    let api = &world.api;
    new_runs(
        deployment,
        api,
        producer,
        &[],
        "the plain producer's scheduled run",
        |_| Ok(true),
    )?;
    let runs = new_runs(
        deployment,
        api,
        consumer,
        &[],
        "the plain consumer's run",
        |_| Ok(true),
    )?;
    let run = &runs[0];
    check_succeeded(
        checks,
        api,
        consumer,
        run,
        &format!(
            "{case} without the integration the consumer run {} succeeded",
            run.id
        ),
    )?;
    let delivered = consumer_requests(world, consumer, &run.id)?;
    checks.record(
        &format!("{case} without the integration the consumer sent nothing"),
        delivered == 0,
        format!("{delivered} request(s)"),
    );
    let records = journaled(world.out, consumer, &run.id)?;
    let unknown = records
        .iter()
        .filter(|r| {
            r["decision"] == "suppressed"
                && r["reasons"]
                    .as_array()
                    .is_some_and(|all| all.iter().any(|x| x == "unknown_window"))
        })
        .count();
    checks.record(
        &format!("{case} both notifications journaled unknown_window (no logical date)"),
        unknown == 2,
        format!("{records:?}"),
    );
    let started = report_runs_from(api, consumer)?.len();
    checks.record(
        &format!(
            "{case} without the policy Airflow's TriggerDagRunOperator started the report (ungated)"
        ),
        started == 1,
        format!("{started} run(s)"),
    );
    Ok(())
}

/// (g) With the integration: consumers of a backfill send nothing, of a scheduled run once.
pub(super) fn case_assets(
    deployment: &mut Deployment,
    airflow: &Airflow,
    world: &World<'_>,
    logs: &Path,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let case = "(g)";
    let api = &world.api;
    world.unpause(CONSUMER)?;
    world.unpause(PRODUCER)?;
    new_runs(
        deployment,
        api,
        PRODUCER,
        &[],
        "the producer's scheduled run",
        |_| Ok(true),
    )?;
    let scheduled = new_runs(deployment, api, CONSUMER, &[], "the consumer's run", |_| {
        Ok(true)
    })?;
    let run = scheduled[0].clone();
    let check_current = |checks: &mut Checks, when: &str| -> anyhow::Result<()> {
        for path in ["cli", "python"] {
            let got = requests_naming(world, &format!("/hooks/{CONSUMER}/{path}"), &run.id)?;
            checks.record(
                &format!(
                    "{case} {when}: the consumer of the scheduled run sent its {path} webhook once"
                ),
                got == 1,
                format!("{got} request(s)"),
            );
        }
        let started = report_runs_from(api, CONSUMER)?;
        let lineage = started
            .first()
            .map(|r| r.conf["replaysafe"]["upstream"][0].clone())
            .unwrap_or_default();
        checks.record(
            &format!("{case} {when}: the report was started once, its conf carrying lineage"),
            started.len() == 1 && lineage["pipeline"] == CONSUMER && lineage["run_id"] == run.id,
            format!("{} run(s), lineage {lineage}", started.len()),
        );
        Ok(())
    };
    check_succeeded(
        checks,
        api,
        CONSUMER,
        &run,
        &format!(
            "{case} the consumer run {} of the scheduled producer run succeeded",
            run.id
        ),
    )?;
    check_current(checks, "scheduled")?;

    // A three-day backfill of the producer.
    backfill_three_days(airflow, PRODUCER, logs)?;
    let backfill = new_runs(
        deployment,
        api,
        PRODUCER,
        &[],
        "the producer's three backfill runs",
        |runs| Ok(runs.iter().filter(|r| r.run_type == "backfill").count() == 3),
    )?;
    checks.record(
        &format!("{case} the backfill made three producer runs"),
        backfill.iter().filter(|r| r.run_type == "backfill").count() == 3,
        format!("{backfill:?}"),
    );
    // Airflow batches the events that arrive while a consumer run is being created, and
    // may leave one for the consumer's next run: the backfill makes one to three runs.
    let known = ids(&scheduled);
    let consumers = new_runs(
        deployment,
        api,
        CONSUMER,
        &known,
        "the consumer runs of the backfill's asset events, and none queued",
        |_| Ok(queued_events(api, CONSUMER)? == 0),
    )?;
    let mut consumed = 0;
    for run in &consumers {
        consumed += consumed_events(api, CONSUMER, &run.id)?;
    }
    checks.record(
        &format!("{case} the backfill's asset events made consumer runs"),
        (1..=3).contains(&consumers.len()) && consumed >= consumers.len(),
        format!("{} run(s) consuming {consumed} event(s)", consumers.len()),
    );
    for run in &consumers {
        check_succeeded(
            checks,
            api,
            CONSUMER,
            run,
            &format!(
                "{case} the consumer run {} of the backfill succeeded",
                run.id
            ),
        )?;
        let sent = consumer_requests(world, CONSUMER, &run.id)?;
        let records = journaled(world.out, CONSUMER, &run.id)?;
        let replayed: Vec<&Value> = records
            .iter()
            .filter(|r| r["decision"] != "attempting")
            .collect();
        checks.record(
            &format!(
                "{case} the consumer run {} sent nothing and journaled upstream_replay",
                run.id
            ),
            sent == 0
                && replayed.len() == 3
                && replayed.iter().all(|r| {
                    r["decision"] == "suppressed"
                        && r["reasons"]
                            .as_array()
                            .is_some_and(|all| all.iter().any(|x| x == "upstream_replay"))
                }),
            format!("{sent} request(s), records {records:?}"),
        );
    }
    check_current(checks, "after the backfill")?;

    // Clearing the consumer run of the scheduled producer run sends nothing again.
    clear_and_wait(deployment, api, CONSUMER, &run.id)?;
    check_current(checks, "cleared")?;
    let records = journaled(world.out, CONSUMER, &run.id)?;
    let again = records
        .iter()
        .filter(|r| {
            r["decision"] == "suppressed"
                && r["reasons"]
                    .as_array()
                    .is_some_and(|all| all.iter().any(|x| x == "already_delivered"))
        })
        .count();
    checks.record(
        &format!("{case} cleared: the three effects journaled already_delivered"),
        again == 3,
        format!("{records:?}"),
    );
    Ok(())
}

/// How many times a run's effect reached its server.
type Count<'a> = Box<dyn Fn(&AnyRun) -> anyhow::Result<usize> + 'a>;

/// What one task of the policy DAG sent, per run.
struct Sent<'a> {
    task: &'a str,
    kind: &'a str,
    count: Count<'a>,
}

/// (h) The cluster policy gates Airflow's own sending operators and a notifier.
pub(super) fn case_policy(
    deployment: &mut Deployment,
    airflow: &Airflow,
    world: &World<'_>,
    servers: &Servers,
    logs: &Path,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let case = "(h)";
    let api = &world.api;
    world.unpause(POLICY)?;
    backfill_three_days(airflow, POLICY, logs)?;
    let runs = new_runs(
        deployment,
        api,
        POLICY,
        &[],
        "the policy DAG's scheduled run and three backfill runs",
        |runs| {
            Ok(
                runs.iter().filter(|r| r.run_type == "backfill").count() == 3
                    && runs.iter().any(|r| r.run_type == "scheduled"),
            )
        },
    )?;
    let scheduled = runs
        .iter()
        .find(|r| r.run_type == "scheduled")
        .context("the scheduled run")?
        .clone();
    let backfill: Vec<AnyRun> = runs
        .iter()
        .filter(|r| r.run_type == "backfill")
        .cloned()
        .collect();

    let sent = [
        Sent {
            task: "email",
            kind: "email",
            count: Box::new(|run: &AnyRun| {
                servers.messages_with(&format!("Subject: Orders {}", run.id))
            }),
        },
        Sent {
            task: "http",
            kind: "webhook",
            count: Box::new(|run: &AnyRun| {
                requests_naming(world, &format!("/hooks/{POLICY}/http"), &run.id)
            }),
        },
        Sent {
            task: "slack",
            kind: "alert",
            count: Box::new(|run: &AnyRun| {
                requests_naming(world, &format!("/hooks/{POLICY}/slack"), &run.id)
            }),
        },
        Sent {
            task: "sftp",
            kind: "file_drop",
            count: Box::new(|run: &AnyRun| {
                // The file is named by `{{ data_interval_start | ds }}`.
                let day = run
                    .data_interval_start
                    .map(|t| t.format("%Y-%m-%d").to_string())
                    .unwrap_or_default();
                Ok(usize::from(servers.uploaded(&format!("orders-{day}.csv"))))
            }),
        },
        Sent {
            task: "trigger",
            kind: "trigger",
            count: Box::new(|run: &AnyRun| {
                Ok(report_runs_from(api, POLICY)?
                    .iter()
                    .filter(|r| r.conf["replaysafe"]["upstream"][0]["run_id"] == run.id)
                    .count())
            }),
        },
        Sent {
            task: "fail.on_failure_callback",
            kind: "email",
            count: Box::new(|run: &AnyRun| {
                servers.messages_with(&format!("Subject: Failed {}", run.id))
            }),
        },
    ];

    let check_tasks = |checks: &mut Checks, run: &AnyRun, when: &str| -> anyhow::Result<()> {
        let states = tasks(api, POLICY, &run.id)?;
        let ok = states
            .iter()
            .all(|(task, (state, _))| state == if task == "fail" { "failed" } else { "success" });
        checks.record(
            &format!(
                "{case} {when} run {}: the sending tasks succeeded (fail failed on purpose)",
                run.id
            ),
            ok && states.len() == 6,
            format!("tasks {states:?}"),
        );
        Ok(())
    };
    for run in &backfill {
        check_tasks(checks, run, "backfill")?;
        let records = journaled(world.out, POLICY, &run.id)?;
        for effect in &sent {
            let got = (effect.count)(run)?;
            let shown = outcomes(&records, effect.task);
            checks.record(
                &format!(
                    "{case} backfill {}: {} sent nothing, journaled as suppressed {}",
                    run.id, effect.task, effect.kind
                ),
                got == 0
                    && has(&shown, "suppressed", "replay_run")
                    && shown.iter().all(|r| r["effect"]["kind"] == effect.kind),
                format!("{got} sent, records {shown:?}"),
            );
        }
        let email = outcomes(&records, "email");
        checks.record(
            &format!(
                "{case} backfill {}: the email's recipients are journaled as *@domain",
                run.id
            ),
            !email.is_empty()
                && email.iter().all(|r| {
                    r["effect"]["target"]
                        .as_str()
                        .is_some_and(|t| t.split(',').all(|one| one == "*@shop.example"))
                })
                && !records.iter().any(|r| r.to_string().contains("ana@")),
            format!("{email:?}"),
        );
    }
    let check_scheduled = |checks: &mut Checks, when: &str| -> anyhow::Result<()> {
        let records = journaled(world.out, POLICY, &scheduled.id)?;
        for effect in &sent {
            let got = (effect.count)(&scheduled)?;
            let shown = outcomes(&records, effect.task);
            checks.record(
                &format!(
                    "{case} {when} {}: {} sent once and journaled delivered",
                    scheduled.id, effect.task
                ),
                got == 1 && has(&shown, "delivered", ""),
                format!("{got} sent, records {shown:?}"),
            );
        }
        Ok(())
    };
    check_tasks(checks, &scheduled, "scheduled")?;
    check_scheduled(checks, "scheduled")?;
    let lineage = report_runs_from(api, POLICY)?
        .first()
        .map(|r| r.conf["replaysafe"]["upstream"][0].clone())
        .unwrap_or_default();
    checks.record(
        &format!("{case} the triggered run's conf carries the scheduled run's lineage"),
        lineage["pipeline"] == POLICY
            && lineage["run_id"] == scheduled.id
            && lineage["run_kind"] == "scheduled",
        format!("{lineage}"),
    );

    clear_and_wait(deployment, api, POLICY, &scheduled.id)?;
    check_scheduled(checks, "cleared")?;
    let records = journaled(world.out, POLICY, &scheduled.id)?;
    for effect in &sent {
        let shown = outcomes(&records, effect.task);
        checks.record(
            &format!(
                "{case} cleared {}: {} journaled already_delivered",
                scheduled.id, effect.task
            ),
            has(&shown, "suppressed", "already_delivered"),
            format!("{shown:?}"),
        );
    }
    Ok(())
}

/// (g) With the hook, a manual run for a past date keeps its logical date's instant as its
/// window (Airflow infers its data interval from the trigger time, which the hook does not
/// export): it is stale, not conflicting, and its key is its date's.
pub(super) fn case_manual_past(
    deployment: &mut Deployment,
    world: &World<'_>,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let case = "(g)";
    let now = Utc::now().timestamp();
    let past = DateTime::from_timestamp(now - now % 600 - 3 * 86_400, 0).context("the date")?;
    let run_id = format!("manual__past_{}", past.timestamp());
    let (status, text) = world.api.request(
        "POST",
        &format!("/api/v2/dags/{PROBE}/dagRuns"),
        Some(&json!({"dag_run_id": run_id, "logical_date": past.to_rfc3339()})),
    )?;
    if status != 200 {
        bail!("triggering {PROBE} for {past}: status {status}: {text}");
    }
    let runs = deployment.wait(
        "the manual run for a past date to finish",
        RUN_TIMEOUT,
        || {
            let runs = world.runs(PROBE, "manual")?;
            Ok(runs
                .iter()
                .any(|run| run.id == run_id && (run.state == "success" || run.state == "failed"))
                .then_some(runs))
        },
    )?;
    let run = runs
        .into_iter()
        .find(|run| run.id == run_id)
        .context("the manual run")?;
    world.check_run(checks, case, PROBE, &run, 0)?;
    world.check_journal(checks, case, PROBE, &run, "suppressed", &["stale_window"]);
    let conflicting = world
        .journal(PROBE, &run)
        .unwrap_or_default()
        .iter()
        .any(|record| record.to_string().contains("conflicting_context"));
    checks.record(
        &format!("{case} the manual run for {past} is not conflicting_context"),
        !conflicting,
        "the hook moved its window",
    );
    Ok(())
}
