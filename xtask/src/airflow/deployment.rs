//! Deploying Airflow for the checks: the virtualenv, `AIRFLOW_HOME`, the API server, DAG
//! processor and scheduler, each in its own process group, stopped by pid.

use super::*;

/// Builds the `replaysafe` binary and returns its path.
pub(super) fn build_replaysafe() -> anyhow::Result<PathBuf> {
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

/// The providers whose operators the platform checks run, pinned with Airflow.
const PROVIDERS: [(&str, &str); 3] = [
    ("apache-airflow-providers-http", "6.3.0"),
    ("apache-airflow-providers-sftp", "7.0.0"),
    ("apache-airflow-providers-slack", "9.11.1"),
];

/// The drivers of Airflow's metadata database on PostgreSQL: psycopg2 for its engine,
/// as Airflow's database guide recommends, and asyncpg for the async engine, whose URL
/// Airflow derives from the engine's (`postgresql+asyncpg://`). (With psycopg 3 as the
/// engine's driver, `/ui/dependencies` answers 500: Airflow's query binds a JSON path
/// for `#>` as a `VARCHAR` parameter, which psycopg 3 sends typed and PostgreSQL refuses.)
const DRIVERS: [(&str, &str); 2] = [("psycopg2-binary", "2.9.13"), ("asyncpg", "0.32.0")];

/// Makes `venv` a virtualenv holding apache-airflow [`VERSION`], [`PROVIDERS`] (smtp and
/// standard come with Airflow) and [`DRIVERS`], reusing it when it does.
///
/// Airflow publishes constraint files on GitHub, not on PyPI, so the install is plain pip.
pub(super) fn ensure_venv(venv: &Path) -> anyhow::Result<()> {
    let python = venv.join("bin/python");
    let wanted: Vec<(&str, &str)> = std::iter::once(("apache-airflow", VERSION))
        .chain(PROVIDERS)
        .chain(DRIVERS)
        .collect();
    let names: Vec<String> = wanted.iter().map(|(name, _)| format!("{name:?}")).collect();
    let probe = format!(
        "import importlib.metadata as m\nfor n in [{}]:\n    print(n, m.version(n))",
        names.join(", ")
    );
    let installed = Command::new(&python)
        .args(["-c", &probe])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    let expected: Vec<String> = wanted
        .iter()
        .map(|(name, version)| format!("{name} {version}"))
        .collect();
    if installed.as_deref() == Some(expected.join("\n").as_str()) {
        eprintln!(
            "xtask airflow: reusing {} (apache-airflow {VERSION} and its providers)",
            venv.display()
        );
        return Ok(());
    }
    if !venv.join("bin/python").exists() {
        exec(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    }
    exec(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-input"])
            .args(
                wanted
                    .iter()
                    .map(|(name, version)| format!("{name}=={version}")),
            ),
    )
}

/// Empties (or creates) `dir`.
pub(super) fn fresh_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir.to_path_buf())
}

/// How to run `airflow` against this deployment.
#[derive(Debug)]
pub(super) struct Airflow {
    pub(super) program: PathBuf,
    pub(super) env: Vec<(String, String)>,
    pub(super) api: Api,
}

impl Airflow {
    /// A deployment in `home` whose metadata database is `database` (a `postgres://` URL).
    pub(super) fn new(
        venv: &Path,
        home: &Path,
        out: &Path,
        replaysafe: &Path,
        receiver: &str,
        database: &str,
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
            // PostgreSQL, as in production: on SQLite, the scheduler, the DAG processor, the
            // API server and the task processes all write to one file, and on a loaded
            // 2-core machine one of them waited out SQLite's lock and failed ("database is
            // locked"; a longer lock wait helped, WAL mode made `backfill create` fail).
            (
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                database.replacen("postgres://", "postgresql+psycopg2://", 1),
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
    pub(super) fn command(&self) -> Command {
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
    pub(super) fn run_logged(&self, args: &[&str], log: &Path) -> anyhow::Result<String> {
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

impl Airflow {
    /// `airflow backfill create` of `dag`'s runs due from `from` to `to` (inclusive), its
    /// output in `logs/backfill-DAG.log`.
    pub(super) fn backfill_create(
        &self,
        dag: &str,
        from: &str,
        to: &str,
        logs: &Path,
    ) -> anyhow::Result<()> {
        let args = [
            "backfill",
            "create",
            "--dag-id",
            dag,
            "--from-date",
            from,
            "--to-date",
            to,
        ];
        self.run_logged(&args, &logs.join(format!("backfill-{dag}.log")))?;
        Ok(())
    }
}

/// `bytes` random bytes from the kernel, as hex.
pub(super) fn random_hex(bytes: usize) -> anyhow::Result<String> {
    use std::io::Read;
    let mut buffer = vec![0; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut buffer))
        .context("reading /dev/urandom")?;
    Ok(buffer.iter().map(|b| format!("{b:02x}")).collect())
}

/// The last `lines` lines of `text`.
pub(super) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The three long-running Airflow processes; dropping it stops them by their pids.
#[derive(Debug)]
pub(super) struct Deployment {
    /// In stop order: scheduler, dag-processor, api-server.
    pub(super) processes: Vec<(Process, PathBuf)>,
    pub(super) api: Api,
}

impl Deployment {
    pub(super) fn start(airflow: &Airflow, logs: &Path) -> anyhow::Result<Self> {
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
            "the deployment to be healthy with every DAG parsed",
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
                    && [PROBE, CATCHUP, DOWNSTREAM]
                        .iter()
                        .chain(&super::platform::DAGS)
                        .all(|dag| parsed(dag)))
                .then_some(()))
            },
        )?;
        Ok(deployment)
    }

    /// Polls `probe` every second until it gives a value, a process dies, or `timeout` passes.
    pub(super) fn wait<T>(
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
    pub(super) fn stop(&mut self) {
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
