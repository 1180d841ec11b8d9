//! `replaysafe plan --airflow` against the running deployment: the downstream graph of a
//! backfill of `replaysafe_producer` (A) over the last three days, read from Airflow's own
//! API. A updates the asset `replaysafe_orders`, on which `replaysafe_consumer` (B) is
//! scheduled; B's TriggerDagRunOperator `start_report` starts `replaysafe_report` (C).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use anyhow::Context;
use chrono::{TimeDelta, Utc};
use serde_json::Value;

use super::Checks;
use super::rest::Api;

/// The variable the password travels in: its name is on the command line, never the password.
const PASSWORD_VAR: &str = "XTASK_AIRFLOW_PLAN_PASSWORD";
const PRODUCER: &str = "replaysafe_producer";
const CONSUMER: &str = "replaysafe_consumer";
const REPORT: &str = "replaysafe_report";

/// Runs the plan and checks the chain A → B (asset) → C (trigger), the runs each would
/// get, which tasks the policy gates, that no password is printed, and that an unknown
/// `--dag-id` exits 2 naming it.
pub(super) fn case_plan(api: &Api, replaysafe: &Path, checks: &mut Checks) -> anyhow::Result<()> {
    let case = "(i)";
    let today = Utc::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .context("today's midnight")?
        .and_utc();
    let start = (today - TimeDelta::days(3)).to_rfc3339();
    let end = today.to_rfc3339();
    let base = format!("http://127.0.0.1:{}", api.port);
    let plan = |dag_id: &str, password: &str, extra: &[&str]| -> anyhow::Result<Output> {
        let mut command = Command::new(replaysafe);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("AIRFLOW") || key.starts_with("REPLAYSAFE_") {
                command.env_remove(&*key);
            }
        }
        command
            .args(["plan", "--airflow", &base, "--dag-id", dag_id])
            .args(["--start", &start, "--end", &end])
            .args(["--user", &api.user, "--password-env", PASSWORD_VAR])
            // The API server is on loopback, which the SSRF guard lets through only so.
            .args(["--allow-host", "127.0.0.1"])
            .args(["--format", "json"])
            .args(extra)
            .env(PASSWORD_VAR, password)
            .stdin(Stdio::null())
            .output()
            .context("running replaysafe plan --airflow")
    };
    let leaks = |output: &Output, password: &str| {
        String::from_utf8_lossy(&output.stdout).contains(password)
            || String::from_utf8_lossy(&output.stderr).contains(password)
    };

    // Runs an earlier case may have made in these days do not count against the plan:
    // Airflow's dry run counts the completed ones again with reprocess_behavior completed.
    let output = plan(
        PRODUCER,
        api.password(),
        &["--reprocess-behavior", "completed"],
    )?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !stderr.trim().is_empty() {
        eprintln!("xtask airflow: plan --airflow: {}", stderr.trim());
    }
    checks.record(
        &format!("{case} replaysafe plan --airflow exits 0"),
        output.status.success(),
        format!("{}: {}", output.status, stderr.trim()),
    );
    checks.record(
        &format!("{case} the password is printed nowhere"),
        !leaks(&output, api.password()),
        "the password is in the output",
    );
    let plan_json: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let dag = |dag_id: &str| -> Value {
        plan_json["dags"]
            .as_array()
            .and_then(|dags| dags.iter().find(|dag| dag["dag_id"] == dag_id))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let (a, b, c) = (dag(PRODUCER), dag(CONSUMER), dag(REPORT));
    let started_by = |dag: &Value, from: &str, via: &str, what: (&str, &str)| {
        dag["started_by"].as_array().is_some_and(|links| {
            links
                .iter()
                .any(|link| link["dag_id"] == from && link["via"] == via && link[what.0] == what.1)
        })
    };
    checks.record(
        &format!("{case} the chain {PRODUCER} → {CONSUMER} (asset) → {REPORT} (trigger)"),
        a["depth"] == 0
            && b["depth"] == 1
            && c["depth"] == 2
            && started_by(&b, PRODUCER, "asset", ("asset", "replaysafe_orders"))
            && started_by(&c, CONSUMER, "trigger", ("task_id", "start_report")),
        format!("dags {}", plan_json["dags"]),
    );
    let runs = |dag: &Value| (dag["runs"].as_u64(), dag["up_to"].as_bool());
    checks.record(
        &format!(
            "{case} Airflow's dry run gives {PRODUCER} 3 runs, {CONSUMER} up to 3, {REPORT} 3"
        ),
        plan_json["runs_source"] == "airflow_dry_run"
            && plan_json["runs"] == 3
            && runs(&a) == (Some(3), Some(false))
            && runs(&b) == (Some(3), Some(true))
            && runs(&c).0 == Some(3)
            // With the policy, the consumer's trigger starts nothing.
            && c["runs_with_policy"] == 0
            && b["runs_with_policy"] == 3,
        format!(
            "runs {} ({}), {PRODUCER} {:?}, {CONSUMER} {:?}, {REPORT} {:?}",
            plan_json["runs"],
            plan_json["run_dates"],
            runs(&a),
            runs(&b),
            runs(&c)
        ),
    );
    let gated = |dag: &Value, task: &str| {
        dag["tasks"]
            .as_array()
            .and_then(|tasks| tasks.iter().find(|t| t["task_id"] == task))
            .and_then(|task| task["gated"].as_bool())
    };
    let expected = [
        (&b, CONSUMER, "start_report", true),
        (&b, CONSUMER, "notify_cli", false),
        (&b, CONSUMER, "notify_python", false),
        (&c, REPORT, "mail_report", true),
        (&c, REPORT, "assemble", false),
    ];
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(dag, _, task, want)| gated(dag, task) != Some(*want))
        .map(|(dag, dag_id, task, want)| {
            format!("{dag_id}.{task}: gated {:?}, want {want}", gated(dag, task))
        })
        .collect();
    checks.record(
        &format!(
            "{case} start_report and mail_report are gated; notify_cli, notify_python and assemble are not"
        ),
        wrong.is_empty(),
        wrong.join("; "),
    );

    let unknown = "replaysafe_no_such_dag";
    let output = plan(unknown, api.password(), &[])?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    checks.record(
        &format!("{case} an unknown --dag-id exits 2 naming it"),
        output.status.code() == Some(2)
            && stderr.contains(&format!("Airflow has no DAG {unknown}"))
            && !leaks(&output, api.password()),
        format!("{}: {}", output.status, stderr.trim()),
    );

    let wrong_password = format!("not-the-password-{}", std::process::id());
    let output = plan(PRODUCER, &wrong_password, &[])?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    checks.record(
        &format!("{case} a wrong password exits 2 naming the login flags, and is not printed"),
        output.status.code() == Some(2)
            && stderr.contains("--user and --password-env")
            && stderr.contains("/auth/token: 401")
            && !leaks(&output, &wrong_password),
        format!("{}: {}", output.status, stderr.trim()),
    );
    Ok(())
}
