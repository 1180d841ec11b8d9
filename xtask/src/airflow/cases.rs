//! The cases the checks drive against a running deployment, each recording its checks.

use super::*;

/// What the cases read: Airflow's API, the receiver and the tasks' records.
#[derive(Debug)]
pub(super) struct World<'a> {
    pub(super) api: Api,
    pub(super) receiver: &'a Receiver,
    pub(super) out: &'a Path,
}

/// A DAG run as the API reports it.
#[derive(Debug, Clone)]
pub(super) struct Run {
    pub(super) id: String,
    pub(super) run_type: String,
    pub(super) state: String,
    pub(super) logical_date: DateTime<Utc>,
}

impl World<'_> {
    pub(super) fn unpause(&self, dag: &str) -> anyhow::Result<()> {
        let answer = self
            .api
            .patch(&format!("/api/v2/dags/{dag}"), &json!({"is_paused": false}))?;
        if answer["is_paused"] != false {
            bail!("{dag} is still paused: {answer}");
        }
        Ok(())
    }

    /// The DAG's runs of one type, oldest logical date first.
    pub(super) fn runs(&self, dag: &str, run_type: &str) -> anyhow::Result<Vec<Run>> {
        let answer = self
            .api
            .get(&format!("/api/v2/dags/{dag}/dagRuns?limit=100"))?;
        let mut runs = Vec::new();
        for run in answer["dag_runs"].as_array().context("dag_runs")? {
            if run["run_type"] != run_type {
                continue;
            }
            let logical_date = run["logical_date"]
                .as_str()
                .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
                .with_context(|| format!("logical_date of {run}"))?;
            runs.push(Run {
                id: run["dag_run_id"].as_str().context("dag_run_id")?.to_owned(),
                run_type: run_type.to_owned(),
                state: run["state"].as_str().unwrap_or_default().to_owned(),
                logical_date: logical_date.with_timezone(&Utc),
            });
        }
        runs.sort_by_key(|run| run.logical_date);
        Ok(runs)
    }

    /// The states of the run's task instances.
    pub(super) fn task_states(&self, dag: &str, run: &Run) -> anyhow::Result<Vec<String>> {
        let answer = self.api.get(&format!(
            "/api/v2/dags/{dag}/dagRuns/{}/taskInstances",
            segment(&run.id)
        ))?;
        Ok(answer["task_instances"]
            .as_array()
            .context("task_instances")?
            .iter()
            .filter(|task| task["task_id"] == TASK)
            .map(|task| task["state"].as_str().unwrap_or("none").to_owned())
            .collect())
    }

    /// The requests the receiver got from this run (on the DAG's path, naming the run).
    pub(super) fn requests_from(&self, dag: &str, run: &Run) -> anyhow::Result<Vec<Request>> {
        let path = format!("/hooks/{dag}");
        let needle = format!("\"{}\"", run.id);
        Ok(self
            .receiver
            .requests()?
            .into_iter()
            .filter(|request| request.path == path && request.body.contains(&needle))
            .collect())
    }

    /// The run's task folder (journal, context, environment).
    pub(super) fn task_dir(&self, dag: &str, run: &Run) -> PathBuf {
        self.out.join(dag).join(&run.id)
    }

    /// The records of the run's journal.
    pub(super) fn journal(&self, dag: &str, run: &Run) -> anyhow::Result<Vec<Value>> {
        let path = self.task_dir(dag, run).join("journal.jsonl");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        text.lines()
            .map(|line| {
                serde_json::from_str(line)
                    .with_context(|| format!("{}: not JSON: {line}", path.display()))
            })
            .collect()
    }

    /// Checks that the run succeeded, its task succeeded, and the receiver got `expected`
    /// requests from it.
    pub(super) fn check_run(
        &self,
        checks: &mut Checks,
        case: &str,
        dag: &str,
        run: &Run,
        expected_requests: usize,
    ) -> anyhow::Result<()> {
        checks.record(
            &format!("{case} {} run {} succeeded", run.run_type, run.id),
            run.state == "success",
            format!("state {}", run.state),
        );
        let states = self.task_states(dag, run)?;
        checks.record(
            &format!("{case} task {TASK} of {} succeeded", run.id),
            states == ["success"],
            format!("task states {states:?}"),
        );
        let requests = self.requests_from(dag, run)?.len();
        checks.record(
            &format!(
                "{case} receiver got {expected_requests} request(s) from {}",
                run.id
            ),
            requests == expected_requests,
            format!("got {requests}"),
        );
        Ok(())
    }

    /// Checks the run's journal: every record has `decision`, at least one exists, the
    /// reasons include each of `reasons` (and `replay_run` only if listed), and the window
    /// is the instant of the run's logical date.
    pub(super) fn check_journal(
        &self,
        checks: &mut Checks,
        case: &str,
        dag: &str,
        run: &Run,
        decision: &str,
        reasons: &[&str],
    ) {
        let name = format!("{case} journal of {}: {decision} {reasons:?}", run.id);
        let records = match self.journal(dag, run) {
            Ok(records) => records,
            Err(error) => return checks.record(&name, false, format!("{error:#}")),
        };
        let outcomes: Vec<&Value> = records
            .iter()
            .filter(|record| record["decision"] != "attempting")
            .collect();
        let attempts = records.len() - outcomes.len();
        let problem = if decision == "suppressed" && attempts > 0 {
            Some(format!(
                "{attempts} attempting record(s) for a suppressed effect: {records:?}"
            ))
        } else if outcomes.len() != 1 {
            Some(format!("{} outcome records: {records:?}", outcomes.len()))
        } else {
            let record = outcomes[0];
            let found: Vec<&str> = record["reasons"]
                .as_array()
                .map(|all| all.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if record["decision"] != decision {
                Some(format!("decision {} in {record}", record["decision"]))
            } else if let Some(missing) = reasons.iter().find(|r| !found.contains(r)) {
                Some(format!("reason {missing} missing in {record}"))
            } else if !reasons.contains(&"replay_run") && found.contains(&"replay_run") {
                Some(format!("unexpected replay_run in {record}"))
            } else if !is_instant_at(&record["window"], run.logical_date) {
                Some(format!(
                    "window is not the instant {} in {record}",
                    run.logical_date.to_rfc3339()
                ))
            } else {
                None
            }
        };
        checks.record(&name, problem.is_none(), problem.unwrap_or_default());
    }
}

/// Whether a journal window is `{start: t, end: t}`.
pub(super) fn is_instant_at(window: &Value, at: DateTime<Utc>) -> bool {
    let parse = |field: &str| {
        window[field]
            .as_str()
            .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
            .map(|time| time.with_timezone(&Utc))
    };
    parse("start") == Some(at) && parse("end") == Some(at)
}

/// Waits until the DAG has `count` runs of `run_type` (oldest first), all finished.
pub(super) fn finished_runs(
    deployment: &mut Deployment,
    world: &World<'_>,
    dag: &str,
    run_type: &str,
    count: usize,
) -> anyhow::Result<Vec<Run>> {
    deployment.wait(
        &format!("{count} {run_type} run(s) of {dag} to finish"),
        RUN_TIMEOUT,
        || {
            let runs = world.runs(dag, run_type)?;
            let done = runs.len() >= count
                && runs
                    .iter()
                    .all(|run| run.state == "success" || run.state == "failed");
            Ok(done.then_some(runs))
        },
    )
}

/// (a) Unpausing the ten-minute DAG makes the scheduler run the latest tick, which delivers.
/// Returns that tick.
pub(super) fn case_scheduled(
    deployment: &mut Deployment,
    world: &World<'_>,
    checks: &mut Checks,
) -> anyhow::Result<Option<DateTime<Utc>>> {
    let case = "(a)";
    world.unpause(PROBE)?;
    let runs = finished_runs(deployment, world, PROBE, "scheduled", 1)?;
    // A tick passing during the check adds a later run; the first is the one unpausing made.
    let run = &runs[0];
    let age = Utc::now() - run.logical_date;
    checks.record(
        &format!(
            "{case} the first scheduled run is the latest tick, {}",
            run.logical_date
        ),
        age >= TimeDelta::zero() && age < TimeDelta::minutes(20),
        format!("it is {} s old", age.num_seconds()),
    );
    world.check_run(checks, case, PROBE, run, 1)?;
    world.check_journal(checks, case, PROBE, run, "delivered", &[]);
    // The receiver can drop a repeat: the request carries the key the journal recorded.
    let journaled: Vec<String> = world
        .journal(PROBE, run)
        .unwrap_or_default()
        .iter()
        .filter(|record| record["decision"] == "delivered")
        .map(|record| {
            format!(
                "\"{}\"",
                record["effect"]["idempotency_key"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let sent: Vec<String> = world
        .requests_from(PROBE, run)?
        .iter()
        .map(|request| {
            request.headers["idempotency-key"]
                .as_str()
                .unwrap_or("none")
                .to_owned()
        })
        .collect();
    checks.record(
        &format!("{case} the request's Idempotency-Key is the journaled key"),
        !sent.is_empty() && sent == journaled,
        format!("sent {sent:?}, journaled {journaled:?}"),
    );
    Ok(Some(run.logical_date))
}

/// (b) A backfill of the three ticks before the latest runs and succeeds, and suppresses.
pub(super) fn case_backfill(
    deployment: &mut Deployment,
    airflow: &Airflow,
    world: &World<'_>,
    logs: &Path,
    latest: Option<DateTime<Utc>>,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let case = "(b)";
    let latest = latest.unwrap_or_else(|| {
        let now = Utc::now().timestamp();
        DateTime::from_timestamp(now - now % 600, 0).unwrap_or_default()
    });
    let ticks: Vec<DateTime<Utc>> = (1..=3)
        .rev()
        .map(|back| latest - TimeDelta::minutes(10 * back))
        .collect();
    let (from, to) = (ticks[0].to_rfc3339(), ticks[2].to_rfc3339());
    airflow.backfill_create(PROBE, &from, &to, logs)?;
    let runs = finished_runs(deployment, world, PROBE, "backfill", 3)?;
    let dates: Vec<DateTime<Utc>> = runs.iter().map(|run| run.logical_date).collect();
    checks.record(
        &format!("{case} the backfill made runs for exactly {from} .. {to}"),
        dates == ticks,
        format!("logical dates {dates:?}"),
    );
    for run in &runs {
        world.check_run(checks, case, PROBE, run, 0)?;
        world.check_journal(checks, case, PROBE, run, "suppressed", &["replay_run"]);
    }
    Ok(())
}

/// (c) The catch-up DAG's only tick, three days back, runs as a scheduled run now: stale.
pub(super) fn case_catchup(
    deployment: &mut Deployment,
    world: &World<'_>,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let case = "(c)";
    world.unpause(CATCHUP)?;
    let runs = finished_runs(deployment, world, CATCHUP, "scheduled", 1)?;
    checks.record(
        &format!("{case} the catch-up DAG made one scheduled run"),
        runs.len() == 1,
        format!("{} runs", runs.len()),
    );
    let run = &runs[0];
    let late = Utc::now() - run.logical_date;
    checks.record(
        &format!("{case} the run of {} is three days late", run.logical_date),
        late >= TimeDelta::days(3),
        format!("it is {} h late", late.num_hours()),
    );
    world.check_run(checks, case, CATCHUP, run, 0)?;
    world.check_journal(checks, case, CATCHUP, run, "suppressed", &["stale_window"]);
    Ok(())
}

/// What one `replaysafe send trigger` gave.
pub(super) struct Sent {
    pub(super) code: Option<i32>,
    pub(super) stderr: String,
    pub(super) journal: Vec<Value>,
}

/// (d) `replaysafe send trigger --airflow` from an upstream pipeline's shell task, against
/// the real API server; the environments are what an Airflow task of the upstream DAG gets.
pub(super) fn case_trigger(
    world: &World<'_>,
    replaysafe: &Path,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let case = "(d)";
    let api = &world.api;
    let dir = world.out.join("trigger");
    std::fs::create_dir_all(&dir)?;
    // The upstream run: an instant a minute ago, well within the trigger's max age.
    let now = Utc::now().timestamp();
    let tick = DateTime::from_timestamp(now - now % 60 - 60, 0).context("the tick")?;
    let tick_text = tick.to_rfc3339();
    let runs = || -> anyhow::Result<Vec<Value>> {
        let answer = api.get(&format!("/api/v2/dags/{DOWNSTREAM}/dagRuns?limit=100"))?;
        Ok(answer["dag_runs"].as_array().cloned().unwrap_or_default())
    };
    let base = format!("http://127.0.0.1:{}", api.port);
    let send = |name: &str, env: &[(&str, &str)], password: &str| -> anyhow::Result<Sent> {
        let journal = dir.join(format!("{name}.jsonl"));
        let mut command = Command::new(replaysafe);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("AIRFLOW") || key.starts_with("REPLAYSAFE_") {
                command.env_remove(&*key);
            }
        }
        let output = command
            .args([
                "send",
                "trigger",
                "--airflow",
                &base,
                "--dag-id",
                DOWNSTREAM,
            ])
            .args([
                "--conf",
                r#"{"source": "xtask"}"#,
                "--allow-host",
                "127.0.0.1",
            ])
            .args(["--user", ADMIN, "--password-env", "XTASK_AIRFLOW_PASSWORD"])
            .envs(env.iter().copied())
            .env("XTASK_AIRFLOW_PASSWORD", password)
            .env("REPLAYSAFE_JOURNAL", &journal)
            .stdin(Stdio::null())
            .output()
            .context("running replaysafe send trigger")?;
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        eprintln!("xtask airflow: send trigger ({name}): {}", stderr.trim());
        let journal = std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        Ok(Sent {
            code: output.status.code(),
            stderr,
            journal,
        })
    };
    let upstream = |dag: &'static str, run_id: &str, try_number: &'static str| {
        vec![
            ("AIRFLOW_CTX_DAG_ID", dag),
            ("AIRFLOW_CTX_DAG_RUN_ID", run_id),
            ("AIRFLOW_CTX_LOGICAL_DATE", tick_text.as_str()),
            ("AIRFLOW_CTX_TRY_NUMBER", try_number),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect::<Vec<(&str, String)>>()
    };
    let run = |env: Vec<(&'static str, String)>, name: &str, password: &str| {
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        send(name, &pairs, password)
    };

    // Basic auth is refused; a login with the password gives a token.
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{ADMIN}:{}", api.password()))
    );
    let (status, _) = api.exchange(
        "GET",
        &format!("/api/v2/dags/{DOWNSTREAM}"),
        None,
        Some(&basic),
    )?;
    checks.record(
        &format!("{case} basic auth is refused (401)"),
        status == 401,
        format!("status {status}"),
    );

    let backfill_id = format!("backfill__{tick_text}");
    let sent = run(
        upstream("upstream_a", &backfill_id, "1"),
        "backfill",
        api.password(),
    )?;
    let count = runs()?.len();
    checks.record(
        &format!("{case} a backfill triggers nothing (exit 0, suppressed, no run)"),
        sent.code == Some(0)
            && sent.stderr.contains("suppressed trigger")
            && sent.journal.len() == 1
            && sent.journal[0]["decision"] == "suppressed"
            && count == 0,
        format!("exit {:?}, {count} runs, {}", sent.code, sent.stderr.trim()),
    );

    let scheduled = format!("scheduled__{tick_text}");
    let wrong = run(
        upstream("upstream_a", &scheduled, "1"),
        "wrong-password",
        "not-the-password",
    )?;
    let count = runs()?.len();
    checks.record(
        &format!("{case} a wrong password fails (exit 1, 401 at /auth/token) and triggers nothing"),
        wrong.code == Some(1) && wrong.stderr.contains("/auth/token: 401") && count == 0,
        format!(
            "exit {:?}, {count} runs, {}",
            wrong.code,
            wrong.stderr.trim()
        ),
    );

    let scheduled = format!("scheduled__{tick_text}");
    let sent = run(
        upstream("upstream_a", &scheduled, "1"),
        "current",
        api.password(),
    )?;
    let all = runs()?;
    let key = sent
        .journal
        .iter()
        .find(|record| record["decision"] == "delivered")
        .and_then(|record| record["effect"]["idempotency_key"].as_str())
        .unwrap_or("?")
        .to_owned();
    let one = all.len() == 1
        && all[0]["conf"]["source"] == "xtask"
        && all[0]["conf"]["replaysafe"]["upstream"][0]["pipeline"] == "upstream_a"
        && all[0]["conf"]["replaysafe"]["upstream"][0]["run_kind"] == "scheduled"
        && all[0]["run_type"] == "manual"
        && all[0]["dag_run_id"]
            .as_str()
            .is_some_and(|id| id.ends_with(&format!("replaysafe-{key}")));
    checks.record(
        &format!(
            "{case} a current run creates exactly one run with its conf, keyed by the journal's key"
        ),
        sent.code == Some(0) && sent.stderr.contains("delivered trigger") && one,
        format!("exit {:?}, runs {all:?}, {}", sent.code, sent.stderr.trim()),
    );

    let sent = run(
        upstream("upstream_a", &scheduled, "2"),
        "retry",
        api.password(),
    )?;
    let count = runs()?.len();
    checks.record(
        &format!("{case} a retry is delivered (the run exists) and creates no second run"),
        sent.code == Some(0) && sent.stderr.contains("delivered trigger") && count == 1,
        format!("exit {:?}, {count} runs, {}", sent.code, sent.stderr.trim()),
    );

    let sent = run(
        upstream("upstream_b", &scheduled, "1"),
        "other-pipeline",
        api.password(),
    )?;
    let count = runs()?.len();
    let failed = sent
        .journal
        .iter()
        .any(|record| record["decision"] == "failed");
    checks.record(
        &format!("{case} another pipeline at the same logical date fails, not a false success"),
        sent.code == Some(1)
            && sent.stderr.contains(&format!(
                "a different run of {DOWNSTREAM} already holds logical date"
            ))
            && failed
            && count == 1,
        format!("exit {:?}, {count} runs, {}", sent.code, sent.stderr.trim()),
    );
    Ok(())
}

/// (e) The Python API's `TriggerClient` against the same API server, from the wheel
/// installed into a fresh virtualenv: a backfill's trigger creates nothing; a current
/// run's creates one run with its conf and lineage; the same trigger again (a cleared
/// task) is suppressed by the journal's memory and creates no second run.
pub(super) fn case_python_trigger(
    world: &World<'_>,
    venv: &Path,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let case = "(e)";
    let api = &world.api;
    let dir = world.out.join("python-trigger");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    // Airflow's virtualenv holds this checkout's wheel (installed before Airflow started).
    let python = venv.join("bin/python");
    // Another instant than case (d)'s, so the downstream's logical dates do not collide:
    // (d)'s is on a whole minute, this one half a minute off it, however long (d) took.
    let now = Utc::now().timestamp();
    let tick = DateTime::from_timestamp(now - now % 60 - 150, 0).context("the tick")?;
    let tick_text = tick.to_rfc3339();
    let script = r#"
import json, os, sys
import replaysafe
base, downstream, journal = sys.argv[1:4]
def context(run_id):
    return replaysafe.context(env={
        "AIRFLOW_CTX_DAG_ID": "upstream_py",
        "AIRFLOW_CTX_DAG_RUN_ID": run_id,
        "AIRFLOW_CTX_LOGICAL_DATE": os.environ["TICK"],
        "AIRFLOW_CTX_TRY_NUMBER": "1",
    })
trigger = replaysafe.TriggerClient(airflow=base, user=os.environ["ADMIN"],
                                   password_env="XTASK_AIRFLOW_PASSWORD",
                                   allow_hosts=["127.0.0.1"], journal=journal)
outs = [
    trigger.send(context("backfill__" + os.environ["TICK"]), name=downstream, conf={"source": "python"}),
    trigger.send(context("scheduled__" + os.environ["TICK"]), name=downstream, conf={"source": "python"}),
    trigger.send(context("scheduled__" + os.environ["TICK"]), name=downstream, conf={"source": "python"}),
]
print(json.dumps([[o.decision, o.reasons, o.idempotency_key, o.error] for o in outs]))
"#;
    let base = format!("http://127.0.0.1:{}", api.port);
    let count_python_runs = || -> anyhow::Result<Vec<Value>> {
        let answer = api.get(&format!("/api/v2/dags/{DOWNSTREAM}/dagRuns?limit=100"))?;
        Ok(answer["dag_runs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|run| run["conf"]["source"] == "python")
            .collect())
    };
    let output = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(&base)
        .arg(DOWNSTREAM)
        .arg(dir.join("journal.jsonl"))
        .env("TICK", &tick_text)
        .env("ADMIN", ADMIN)
        .env("XTASK_AIRFLOW_PASSWORD", api.password())
        .stdin(Stdio::null())
        .output()
        .context("running the Python trigger")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let outs: Vec<Value> = serde_json::from_str(stdout.trim()).unwrap_or_default();
    let runs = count_python_runs()?;
    let decision = |n: usize| outs.get(n).and_then(|o| o[0].as_str()).unwrap_or("?");
    let key = outs.get(1).and_then(|o| o[2].as_str()).unwrap_or("?");
    checks.record(
        &format!("{case} Python: a backfill's trigger creates no run"),
        output.status.success() && decision(0) == "suppressed",
        format!("exit {:?}, {stdout} {stderr}", output.status.code()),
    );
    checks.record(
        &format!(
            "{case} Python: a current run's trigger creates one run with its conf and lineage, keyed by the journal's key"
        ),
        decision(1) == "delivered"
            && runs.len() == 1
            && runs[0]["conf"]["replaysafe"]["upstream"][0]["pipeline"] == "upstream_py"
            && runs[0]["dag_run_id"]
                .as_str()
                .is_some_and(|id| id.ends_with(&format!("replaysafe-{key}"))),
        format!("{stdout} runs {runs:?}"),
    );
    checks.record(
        &format!("{case} Python: the same trigger again is suppressed as already delivered"),
        decision(2) == "suppressed"
            && outs
                .get(2)
                .is_some_and(|o| o[1].to_string().contains("already_delivered"))
            && runs.len() == 1,
        format!("{stdout}"),
    );
    Ok(())
}
