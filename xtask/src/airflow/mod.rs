//! `cargo xtask airflow`: replaysafe under a real Airflow 3.3.2, scheduler and backfill.
//!
//! Installs `apache-airflow` and the http, sftp and slack providers from PyPI into
//! `target/airflow/venv` (reused while it holds the pinned versions) with this checkout's
//! wheel, starts aiosmtpd, sshd and PostgreSQL as the Rust tests do, sets up a fresh
//! `target/airflow/home` (its metadata database in that PostgreSQL, LocalExecutor, every
//! port on 127.0.0.1), starts the API server, the DAG processor and the scheduler, and
//! drives the DAGs of
//! `xtask/airflow/dags/replaysafe_probe.py` through these cases:
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
//! - (e) the Python API's TriggerClient from the wheel, the same three ways.
//!
//! These run with no `airflow_local_settings.py` and no `REPLAYSAFE_*` variable but the
//! journal: what a default Airflow 3 deployment gives them. Then, on the DAGs of
//! `replaysafe_platform.py` (see [`platform`]): (f) an asset consumer without the
//! integration; the deployment is restarted with the integration's one line in
//! `airflow_local_settings.py`, and (g) assets and consumers and (h) the cluster policy on
//! Airflow's own sending operators are checked with it.
//!
//! Each case is checked against the receiver's log, aiosmtpd's maildir, sshd's upload
//! directory, the journals and Airflow's own run and task states, with bounded waits.
//! The run ends with `airflow: N passed, M failed` and fails on any failed check.

mod cases;
mod deployment;
mod plan;
mod platform;
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

use cases::*;
use deployment::*;

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

    steps.time(
        "install the replaysafe wheel into Airflow's virtualenv",
        || crate::dist::install_wheel(&venv, &crate::dist::build_wheel("dev")?),
    )?;

    let home = fresh_dir(&base.join("home"))?;
    let out = fresh_dir(&base.join("out"))?;
    let logs = fresh_dir(&base.join("logs"))?;
    std::fs::create_dir_all(home.join("dags"))?;
    for dags in ["replaysafe_probe.py", "replaysafe_platform.py"] {
        std::fs::copy(
            root().join("xtask/airflow/dags").join(dags),
            home.join("dags").join(dags),
        )
        .with_context(|| format!("copying {dags}"))?;
    }
    let receiver = Receiver::start(&out.join("received.jsonl"))?;
    let servers = steps.time("start aiosmtpd, sshd and PostgreSQL", || {
        platform::Servers::start(&receiver.url(), &out)
    })?;
    let mut airflow = Airflow::new(
        &venv,
        &home,
        &out,
        &replaysafe,
        &receiver.url(),
        servers.database(),
    )?;
    airflow.env.extend(servers.env().iter().cloned());
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
    not_interrupted()?;
    let result = steps.time("case (e) the Python API's TriggerClient", || {
        case_python_trigger(&world, &venv, checks)
    });
    if let Err(error) = result {
        checks.record(
            "(e) the Python trigger checks ran",
            false,
            format!("{error:#}"),
        );
    }
    not_interrupted()?;
    let result = steps.time("case (f) an asset consumer without the integration", || {
        platform::case_plain(&mut deployment, &world, checks)
    });
    if let Err(error) = result {
        checks.record(
            "(f) the plain asset checks ran",
            false,
            format!("{error:#}"),
        );
    }
    steps.time("stop before installing the integration", || {
        deployment.stop();
        Ok(())
    })?;
    print_shapes(&out)?;
    not_interrupted()?;

    // The platform team installs the integration: one line, and a restart.
    platform::install(&mut airflow, &home)?;
    let mut deployment = steps.time("restart with replaysafe.airflow installed", || {
        Deployment::start(&airflow, &logs)
    })?;
    let result = steps.time(
        "case (g) a manual run for a past date with the hook",
        || platform::case_manual_past(&mut deployment, &world, checks),
    );
    if let Err(error) = result {
        checks.record("(g) the manual-run check ran", false, format!("{error:#}"));
    }
    not_interrupted()?;
    let result = steps.time("case (g) assets and consumers with the integration", || {
        platform::case_assets(&mut deployment, &airflow, &world, &logs, checks)
    });
    if let Err(error) = result {
        checks.record("(g) the asset checks ran", false, format!("{error:#}"));
    }
    not_interrupted()?;
    let result = steps.time("case (h) the cluster policy on Airflow's operators", || {
        platform::case_policy(&mut deployment, &airflow, &world, &servers, &logs, checks)
    });
    if let Err(error) = result {
        checks.record("(h) the policy checks ran", false, format!("{error:#}"));
    }
    not_interrupted()?;
    let result = steps.time("case (i) replaysafe plan --airflow", || {
        plan::case_plan(&airflow.api, &replaysafe, checks)
    });
    if let Err(error) = result {
        checks.record("(i) the plan checks ran", false, format!("{error:#}"));
    }
    steps.time("stop", || {
        deployment.stop();
        Ok(())
    })?;
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
