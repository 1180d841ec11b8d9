//! `cargo xtask airflow`: replaysafe under a real Airflow 3.3.2, scheduler and backfill.
//!
//! Installs `apache-airflow` from PyPI into `target/airflow/venv` (reused while it holds the
//! pinned version), sets up a fresh `target/airflow/home` (SQLite, LocalExecutor, every port
//! on 127.0.0.1), starts the API server, the DAG processor and the scheduler, and drives the
//! DAGs of `xtask/airflow/dags/replaysafe_probe.py` through three cases:
//!
//! - (a) the scheduled run of the latest tick delivers: one request at the receiver;
//! - (b) `airflow backfill create` of three past ticks: every task succeeds, nothing arrives,
//!   each journal says suppressed with `replay_run`;
//! - (c) a catch-up run three days late: the task succeeds, suppressed with `stale_window`;
//! - (d) `replaysafe send trigger --airflow` against the API server, logged in with a
//!   username and password (SimpleAuthManager's JWT; basic auth is refused): a backfill
//!   triggers nothing, a current run creates exactly one run of `replaysafe_downstream` with
//!   its conf, a retry creates no second run, and another pipeline's trigger at the same
//!   logical date fails (exit 1) instead of passing for delivered.
//!
//! Each case is checked against the receiver's log, the tasks' journals and Airflow's own
//! task states, with bounded waits. The tasks run with no `airflow_local_settings.py` and no
//! `REPLAYSAFE_*` variable but the journal: what a default Airflow 3 deployment gives them.
//! The run ends with `airflow: N passed, M failed` and fails on any failed check.

pub(crate) mod receiver;
mod rest;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use crate::services::{Process, free_port};
use crate::system::{cargo, exec, root, target_dir};
use receiver::{Receiver, Request};
use rest::{Api, segment};

/// The Airflow release checked against; bump deliberately.
const VERSION: &str = "3.3.2";
/// The DAG that runs every ten minutes without catch-up.
const PROBE: &str = "replaysafe_probe";
/// The DAG whose only tick is three days back, caught up.
const CATCHUP: &str = "replaysafe_probe_catchup";
/// The DAG `replaysafe send trigger` starts (unscheduled, paused: its runs are only counted).
const DOWNSTREAM: &str = "replaysafe_downstream";
/// The admin user the checks log in as.
const ADMIN: &str = "xtask";
/// The task both DAGs run.
const TASK: &str = "notify";
/// How long the deployment may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the runs of one case may take to finish.
const RUN_TIMEOUT: Duration = Duration::from_secs(240);

/// Set by Ctrl-C or SIGTERM.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Fails once Ctrl-C or SIGTERM arrived.
fn not_interrupted() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    if let Some(unknown) = args.first() {
        bail!("cargo xtask airflow takes no arguments (got {unknown:?})");
    }
    check()
}

/// Runs the whole check; fails when any check failed or the setup broke.
pub(crate) fn check() -> anyhow::Result<()> {
    // Ctrl-C or SIGTERM ends the check through its normal path, which stops Airflow.
    // (When a handler is already installed, the check runs without this one.)
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst));
    let started = Instant::now();
    let mut steps = Steps::default();
    let mut checks = Checks::default();
    let result = drive(&mut steps, &mut checks);
    if let Err(error) = &result {
        checks.record("setup and teardown", false, format!("{error:#}"));
    } else if checks.passed == 0 {
        checks.record("the check checked something", false, "no check ran");
    }
    eprintln!("\nxtask airflow: step times");
    for (name, took) in &steps.0 {
        eprintln!("  {:<48} {:>7.1} s", name, took.as_secs_f64());
    }
    eprintln!(
        "  {:<48} {:>7.1} s",
        "total",
        started.elapsed().as_secs_f64()
    );
    for failure in &checks.failures {
        eprintln!("xtask airflow: FAILED {failure}");
    }
    println!(
        "airflow: {} passed, {} failed",
        checks.passed,
        checks.failures.len()
    );
    if !checks.failures.is_empty() {
        bail!("{} airflow check(s) failed", checks.failures.len());
    }
    Ok(())
}

/// Step names and how long each took.
#[derive(Debug, Default)]
struct Steps(Vec<(String, Duration)>);

impl Steps {
    fn time<T>(
        &mut self,
        name: &str,
        body: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        eprintln!("\nxtask airflow: == {name} ==");
        let started = Instant::now();
        let result = body();
        let took = started.elapsed();
        eprintln!("xtask airflow: {name}: {:.1} s", took.as_secs_f64());
        self.0.push((name.to_owned(), took));
        result.with_context(|| format!("step {name}"))
    }
}

/// Counted checks; each failure keeps its message.
#[derive(Debug, Default)]
struct Checks {
    passed: usize,
    failures: Vec<String>,
}

impl Checks {
    fn record(&mut self, name: &str, ok: bool, detail: impl std::fmt::Display) {
        if ok {
            self.passed += 1;
            eprintln!("xtask airflow: ok     {name}");
        } else {
            eprintln!("xtask airflow: FAILED {name}: {detail}");
            self.failures.push(format!("{name}: {detail}"));
        }
    }
}

fn drive(steps: &mut Steps, checks: &mut Checks) -> anyhow::Result<()> {
    let base = target_dir().join("airflow");
    let replaysafe = steps.time("build replaysafe", build_replaysafe)?;
    let venv = base.join("venv");
    steps.time("install apache-airflow", || ensure_venv(&venv))?;

    let home = fresh_dir(&base.join("home"))?;
    let out = fresh_dir(&base.join("out"))?;
    let logs = fresh_dir(&base.join("logs"))?;
    std::fs::create_dir_all(home.join("dags"))?;
    std::fs::copy(
        root().join("xtask/airflow/dags/replaysafe_probe.py"),
        home.join("dags/replaysafe_probe.py"),
    )
    .context("copying the probe DAG")?;
    let receiver = Receiver::start(&out.join("received.jsonl"))?;
    let airflow = Airflow::new(&venv, &home, &out, &replaysafe, &receiver.url())?;
    eprintln!(
        "xtask airflow: AIRFLOW_HOME {}, API server 127.0.0.1:{}, receiver {}",
        home.display(),
        airflow.api.port,
        receiver.url()
    );

    steps.time("airflow db migrate", || {
        airflow.run_logged(&["db", "migrate"], &logs.join("migrate.log"))
    })?;
    let mut deployment = steps.time("start api-server, dag-processor, scheduler", || {
        Deployment::start(&airflow, &logs)
    })?;
    let world = World {
        api: airflow.api.clone(),
        receiver: &receiver,
        out: &out,
    };

    let latest = steps
        .time("case (a) scheduled run of the latest tick", || {
            case_scheduled(&mut deployment, &world, checks)
        })
        .unwrap_or_else(|error| {
            checks.record(
                "(a) the scheduled run finished",
                false,
                format!("{error:#}"),
            );
            None
        });
    not_interrupted()?;
    let result = steps.time("case (b) airflow backfill create of three ticks", || {
        case_backfill(&mut deployment, &airflow, &world, &logs, latest, checks)
    });
    if let Err(error) = result {
        checks.record("(b) the backfill finished", false, format!("{error:#}"));
    }
    not_interrupted()?;
    let result = steps.time("case (c) catch-up run three days late", || {
        case_catchup(&mut deployment, &world, checks)
    });
    if let Err(error) = result {
        checks.record("(c) the catch-up run finished", false, format!("{error:#}"));
    }
    not_interrupted()?;
    let result = steps.time("case (d) replaysafe send trigger", || {
        case_trigger(&world, &replaysafe, checks)
    });
    if let Err(error) = result {
        checks.record("(d) the trigger checks ran", false, format!("{error:#}"));
    }
    steps.time("stop", || {
        deployment.stop();
        Ok(())
    })?;
    print_shapes(&out)?;
    Ok(())
}

/// Builds the `replaysafe` binary and returns its path.
fn build_replaysafe() -> anyhow::Result<PathBuf> {
    exec(cargo().args([
        "build",
        "--quiet",
        "--package",
        "replaysafe-cli",
        "--bin",
        "replaysafe",
    ]))?;
    let binary = target_dir().join("debug/replaysafe");
    if !binary.is_file() {
        bail!("cargo build did not leave {}", binary.display());
    }
    Ok(binary)
}

/// Makes `venv` a virtualenv holding apache-airflow [`VERSION`], reusing it when it does.
///
/// Airflow publishes constraint files on GitHub, not on PyPI, so the install is plain pip.
fn ensure_venv(venv: &Path) -> anyhow::Result<()> {
    let python = venv.join("bin/python");
    let installed = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('apache-airflow'))",
        ])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    if installed.as_deref() == Some(VERSION) {
        eprintln!(
            "xtask airflow: reusing {} (apache-airflow {VERSION})",
            venv.display()
        );
        return Ok(());
    }
    if venv.exists() {
        std::fs::remove_dir_all(venv).with_context(|| format!("removing {}", venv.display()))?;
    }
    exec(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    exec(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-input"])
            .arg(format!("apache-airflow=={VERSION}")),
    )
}

/// Empties (or creates) `dir`.
fn fresh_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir.to_path_buf())
}

/// How to run `airflow` against this deployment.
#[derive(Debug)]
struct Airflow {
    program: PathBuf,
    env: Vec<(String, String)>,
    api: Api,
}

impl Airflow {
    fn new(
        venv: &Path,
        home: &Path,
        out: &Path,
        replaysafe: &Path,
        receiver: &str,
    ) -> anyhow::Result<Self> {
        let api = Api::new(free_port()?, ADMIN, &random_hex(16)?);
        // SimpleAuthManager's users and their passwords: one admin, whose password xtask knows.
        let passwords = home.join("simple_auth_manager_passwords.json");
        std::fs::write(&passwords, json!({ ADMIN: api.password() }).to_string())
            .with_context(|| format!("writing {}", passwords.display()))?;
        let path = |p: &Path| p.display().to_string();
        let env = [
            ("AIRFLOW_HOME", path(home)),
            ("AIRFLOW__CORE__DAGS_FOLDER", path(&home.join("dags"))),
            ("AIRFLOW__CORE__LOAD_EXAMPLES", "False".into()),
            ("AIRFLOW__CORE__EXECUTOR", "LocalExecutor".into()),
            ("AIRFLOW__CORE__PARALLELISM", "4".into()),
            ("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "True".into()),
            (
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                format!("sqlite:///{}", path(&home.join("airflow.db"))),
            ),
            ("AIRFLOW__API__HOST", "127.0.0.1".into()),
            ("AIRFLOW__API__PORT", api.port.to_string()),
            ("AIRFLOW__API__WORKERS", "1".into()),
            (
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
                format!("http://127.0.0.1:{}/execution/", api.port),
            ),
            (
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT",
                free_port()?.to_string(),
            ),
            (
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT",
                free_port()?.to_string(),
            ),
            // Airflow 3's default auth manager with a known admin: API requests need a JWT
            // from POST /auth/token, as in a real deployment.
            (
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS",
                format!("{ADMIN}:admin"),
            ),
            (
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
                path(&passwords),
            ),
            // The scheduler signs task tokens that the API server checks: one key for both.
            ("AIRFLOW__API_AUTH__JWT_SECRET", random_hex(32)?),
            ("PYTHONDONTWRITEBYTECODE", "1".into()),
            ("XTASK_AIRFLOW_REPLAYSAFE", path(replaysafe)),
            ("XTASK_AIRFLOW_RECEIVER", receiver.to_owned()),
            ("XTASK_AIRFLOW_OUT", path(out)),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
        Ok(Airflow {
            program: venv.join("bin/airflow"),
            env,
            api,
        })
    }

    /// An `airflow` command with this deployment's environment and no inherited
    /// `AIRFLOW*` or `REPLAYSAFE_*` variable.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("AIRFLOW") || key.starts_with("REPLAYSAFE_") {
                command.env_remove(&*key);
            }
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command.current_dir(root());
        command
    }

    /// Runs `airflow ARGS` to completion with its output in `log`; returns the output.
    fn run_logged(&self, args: &[&str], log: &Path) -> anyhow::Result<String> {
        let output = self
            .command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("starting airflow {}", args.join(" ")))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::write(log, &text).with_context(|| format!("writing {}", log.display()))?;
        if !output.status.success() {
            bail!(
                "airflow {} failed ({}); log {}:\n{}",
                args.join(" "),
                output.status,
                log.display(),
                tail(&text, 20)
            );
        }
        Ok(text)
    }
}

/// `bytes` random bytes from the kernel, as hex.
fn random_hex(bytes: usize) -> anyhow::Result<String> {
    use std::io::Read;
    let mut buffer = vec![0; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut buffer))
        .context("reading /dev/urandom")?;
    Ok(buffer.iter().map(|b| format!("{b:02x}")).collect())
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The three long-running Airflow processes; dropping it stops them by their pids.
#[derive(Debug)]
struct Deployment {
    /// In stop order: scheduler, dag-processor, api-server.
    processes: Vec<(Process, PathBuf)>,
    api: Api,
}

impl Deployment {
    fn start(airflow: &Airflow, logs: &Path) -> anyhow::Result<Self> {
        let mut deployment = Deployment {
            processes: Vec::new(),
            api: airflow.api.clone(),
        };
        for name in ["api-server", "dag-processor", "scheduler"] {
            let log = logs.join(format!("{name}.log"));
            // Each in its own process group: a stop also ends the workers and log servers
            // they fork, and Ctrl-C reaches xtask alone, which then stops them in order.
            let process = Process::spawn_group(name, airflow.command().arg(name), &log, "TERM")?
                .with_grace(Duration::from_secs(15));
            eprintln!("xtask airflow: started {name} (pid {})", process.id());
            deployment.processes.insert(0, (process, log));
        }
        let api = deployment.api.clone();
        deployment.wait(
            "the deployment to be healthy with both DAGs parsed",
            START_TIMEOUT,
            || {
                let Ok(health) = api.get("/api/v2/monitor/health") else {
                    return Ok(None);
                };
                let healthy = |part: &str| health[part]["status"] == "healthy";
                let parsed = |dag: &str| {
                    api.request("GET", &format!("/api/v2/dags/{dag}"), None)
                        .is_ok_and(|(status, _)| status == 200)
                };
                Ok((healthy("scheduler")
                    && healthy("dag_processor")
                    && parsed(PROBE)
                    && parsed(CATCHUP)
                    && parsed(DOWNSTREAM))
                .then_some(()))
            },
        )?;
        Ok(deployment)
    }

    /// Polls `probe` every second until it gives a value, a process dies, or `timeout` passes.
    fn wait<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut() -> anyhow::Result<Option<T>>,
    ) -> anyhow::Result<T> {
        let started = Instant::now();
        loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                bail!("interrupted while waiting for {what}");
            }
            if let Some(value) = probe()? {
                eprintln!(
                    "xtask airflow: {what}: after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return Ok(value);
            }
            for (process, log) in &mut self.processes {
                process.ensure_running(log)?;
            }
            if started.elapsed() > timeout {
                bail!("timed out after {} s waiting for {what}", timeout.as_secs());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Stops the processes by their pids, scheduler first.
    ///
    /// The scheduler's LocalExecutor can wait for its idle workers after the first SIGTERM
    /// ("Signal again if you don't want to wait"), so a process still running after five
    /// seconds gets a second one; dropping it then kills whatever is left of its group.
    fn stop(&mut self) {
        for (mut process, log) in self.processes.drain(..) {
            let started = Instant::now();
            process.signal_stop();
            if !process.exited_within(Duration::from_secs(5)) {
                process.signal_stop();
            }
            let pid = process.id();
            drop(process);
            let name = log.file_stem().unwrap_or_default().to_string_lossy();
            eprintln!(
                "xtask airflow: stopped {name} (pid {pid}) in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
    }
}

/// What the cases read: Airflow's API, the receiver and the tasks' records.
#[derive(Debug)]
struct World<'a> {
    api: Api,
    receiver: &'a Receiver,
    out: &'a Path,
}

/// A DAG run as the API reports it.
#[derive(Debug, Clone)]
struct Run {
    id: String,
    run_type: String,
    state: String,
    logical_date: DateTime<Utc>,
}

impl World<'_> {
    fn unpause(&self, dag: &str) -> anyhow::Result<()> {
        let answer = self
            .api
            .patch(&format!("/api/v2/dags/{dag}"), &json!({"is_paused": false}))?;
        if answer["is_paused"] != false {
            bail!("{dag} is still paused: {answer}");
        }
        Ok(())
    }

    /// The DAG's runs of one type, oldest logical date first.
    fn runs(&self, dag: &str, run_type: &str) -> anyhow::Result<Vec<Run>> {
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
    fn task_states(&self, dag: &str, run: &Run) -> anyhow::Result<Vec<String>> {
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
    fn requests_from(&self, dag: &str, run: &Run) -> anyhow::Result<Vec<Request>> {
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
    fn task_dir(&self, dag: &str, run: &Run) -> PathBuf {
        self.out.join(dag).join(&run.id)
    }

    /// The records of the run's journal.
    fn journal(&self, dag: &str, run: &Run) -> anyhow::Result<Vec<Value>> {
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
    fn check_run(
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
    fn check_journal(
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
fn is_instant_at(window: &Value, at: DateTime<Utc>) -> bool {
    let parse = |field: &str| {
        window[field]
            .as_str()
            .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
            .map(|time| time.with_timezone(&Utc))
    };
    parse("start") == Some(at) && parse("end") == Some(at)
}

/// Waits until the DAG has `count` runs of `run_type` (oldest first), all finished.
fn finished_runs(
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
fn case_scheduled(
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
fn case_backfill(
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
    let args = [
        "backfill",
        "create",
        "--dag-id",
        PROBE,
        "--from-date",
        &from,
        "--to-date",
        &to,
    ];
    // The scheduler writes to the same SQLite file; a busy database is retried.
    let mut attempt = 1;
    loop {
        let log = logs.join(format!("backfill-create-{attempt}.log"));
        match airflow.run_logged(&args, &log) {
            Ok(_) => break,
            Err(error) if attempt < 5 && format!("{error:#}").contains("database is locked") => {
                eprintln!(
                    "xtask airflow: backfill create attempt {attempt}: database is locked, retrying"
                );
                attempt += 1;
                std::thread::sleep(Duration::from_secs(2));
            }
            Err(error) => return Err(error),
        }
    }
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
fn case_catchup(
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
struct Sent {
    code: Option<i32>,
    stderr: String,
    journal: Vec<Value>,
}

/// (d) `replaysafe send trigger --airflow` from an upstream pipeline's shell task, against
/// the real API server; the environments are what an Airflow task of the upstream DAG gets.
fn case_trigger(world: &World<'_>, replaysafe: &Path, checks: &mut Checks) -> anyhow::Result<()> {
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
        && all[0]["conf"] == json!({"source": "xtask"})
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

/// Prints what each task saw: its `AIRFLOW_CTX_*` variables and `replaysafe context --json`.
fn print_shapes(out: &Path) -> anyhow::Result<()> {
    println!(
        "\nxtask airflow: what the tasks saw (also under {})",
        out.display()
    );
    let mut dirs = Vec::new();
    for dag in [PROBE, CATCHUP] {
        let Ok(entries) = std::fs::read_dir(out.join(dag)) else {
            continue;
        };
        dirs.extend(entries.flatten().map(|entry| entry.path()));
    }
    dirs.sort();
    for dir in dirs {
        println!("--- {}", dir.strip_prefix(out).unwrap_or(&dir).display());
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        print!("{}", read("env.txt"));
        let status = read("context.rc");
        let context = read("context.json");
        // One line, without the per-kind decisions: the shape is what matters here.
        let shown = match serde_json::from_str::<Value>(&context) {
            Ok(Value::Object(mut fields)) => {
                fields.remove("decisions");
                Value::Object(fields).to_string()
            }
            _ => context,
        };
        println!(
            "replaysafe context --json (exit {}): {shown}",
            status.trim()
        );
        print!("{}", read("context.err"));
    }
    Ok(())
}
