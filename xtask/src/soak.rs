//! `cargo xtask soak outbox [--kills N] [--workers W] [--backend sqlite|postgres]`: the
//! outbox's crash test with real processes (`examples/src/outbox_soak.rs`); its figures
//! are merged into `target/bench/summary.json`. On PostgreSQL it uses the server of
//! `REPLAYSAFE_TEST_POSTGRES_URL`, or starts one (`cargo xtask services postgres`).
//!
//! `cargo xtask soak ledger [--kills N] [--processes P] [--effects E]`: the ledger's crash
//! test on PostgreSQL (`examples/src/ledger_soak.rs`), the same way.

use std::collections::BTreeMap;

use anyhow::{Context, bail};

use crate::system::{cargo, exec, target_dir};

/// The crash test `cargo xtask ci` runs: short, well under a minute.
pub(crate) const CI_KILLS: u32 = 30;

/// The ledger crash test `cargo xtask ci` runs: [`CI_KILLS`] kills of this many
/// processes, each sending [`CI_LEDGER_EFFECTS`] (about 10 s on 2 cores).
pub(crate) const CI_LEDGER_PROCESSES: u32 = 4;

/// How many effects each process of the ledger crash test in `cargo xtask ci` sends.
pub(crate) const CI_LEDGER_EFFECTS: u32 = 200;

/// The outbox's database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    match args.split_first() {
        Some((what, rest)) if what == "outbox" => run_outbox(rest),
        Some((what, rest)) if what == "ledger" => run_ledger(rest),
        _ => bail!("{USAGE}"),
    }
}

fn run_outbox(args: &[String]) -> anyhow::Result<()> {
    let mut kills = 1000;
    let mut workers = 3;
    let mut backend = Backend::Sqlite;
    for (flag, value) in flags(args)? {
        match flag {
            "--kills" => kills = value.parse().context("--kills")?,
            "--workers" => workers = value.parse().context("--workers")?,
            "--backend" => {
                backend = match value {
                    "sqlite" => Backend::Sqlite,
                    "postgres" => Backend::Postgres,
                    other => bail!("--backend: expected sqlite or postgres, not {other:?}"),
                }
            }
            other => bail!("unknown flag {other:?}\n\n{USAGE}"),
        }
    }
    with_postgres(backend == Backend::Postgres, |env| {
        outbox(kills, workers, backend, env)
    })
}

fn run_ledger(args: &[String]) -> anyhow::Result<()> {
    let mut kills = 200;
    let mut processes = 8;
    let mut effects = 1000;
    for (flag, value) in flags(args)? {
        match flag {
            "--kills" => kills = value.parse().context("--kills")?,
            "--processes" => processes = value.parse().context("--processes")?,
            "--effects" => effects = value.parse().context("--effects")?,
            other => bail!("unknown flag {other:?}\n\n{USAGE}"),
        }
    }
    with_postgres(true, |env| ledger(kills, processes, effects, env))
}

/// The `--flag value` pairs of `args`.
fn flags(args: &[String]) -> anyhow::Result<Vec<(&str, &str)>> {
    let mut pairs = Vec::new();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        pairs.push((flag.as_str(), value.as_str()));
    }
    Ok(pairs)
}

/// Runs `body` with the PostgreSQL server's variables when `postgres` is asked for: none
/// when `REPLAYSAFE_TEST_POSTGRES_URL` names one already, else those of a server started
/// for the run (`cargo xtask services postgres`) and stopped after it.
fn with_postgres(
    postgres: bool,
    body: impl FnOnce(&[(String, String)]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut services = None;
    let mut env = Vec::new();
    if postgres && std::env::var_os("REPLAYSAFE_TEST_POSTGRES_URL").is_none() {
        let running = crate::services::start(&["postgres".to_owned()])?;
        env = running.env();
        services = Some(running);
    }
    let result = body(&env);
    drop(services);
    result
}

const USAGE: &str = "\
usage: cargo xtask soak outbox [--kills N] [--workers W] [--backend sqlite|postgres]
       cargo xtask soak ledger [--kills N] [--processes P] [--effects E]";

/// Runs the outbox crash test (with `env` for the PostgreSQL server's variables) and
/// merges its figures into `target/bench/summary.json`.
pub(crate) fn outbox(
    kills: u32,
    workers: u32,
    backend: Backend,
    env: &[(String, String)],
) -> anyhow::Result<()> {
    let (figures, backend_name) = match backend {
        Backend::Sqlite => ("outbox-soak.json", "sqlite"),
        Backend::Postgres => ("outbox-soak-postgres.json", "postgres"),
    };
    let workers = workers.to_string();
    soak(
        "outbox",
        figures,
        &[
            ("--kills", &kills.to_string()),
            ("--workers", &workers),
            ("--backend", backend_name),
        ],
        env,
    )
}

/// Runs the ledger crash test on PostgreSQL (with `env` for the server's variables) and
/// merges its figures into `target/bench/summary.json`.
pub(crate) fn ledger(
    kills: u32,
    processes: u32,
    effects: u32,
    env: &[(String, String)],
) -> anyhow::Result<()> {
    soak(
        "ledger",
        "ledger-soak.json",
        &[
            ("--kills", &kills.to_string()),
            ("--processes", &processes.to_string()),
            ("--effects", &effects.to_string()),
        ],
        env,
    )
}

/// Runs the example `<what>_soak` with `flags`, its figures written to `figures` under
/// `target/bench/`, then merges them into `target/bench/summary.json`.
fn soak(
    what: &str,
    figures: &str,
    flags: &[(&str, &str)],
    env: &[(String, String)],
) -> anyhow::Result<()> {
    let bench = target_dir().join("bench");
    std::fs::create_dir_all(&bench)?;
    let figures = bench.join(figures);
    let mut command = cargo();
    command
        .args([
            "run",
            "--quiet",
            "--package",
            "replaysafe-examples",
            "--bin",
        ])
        .arg(format!("{what}_soak"))
        .arg("--");
    for (flag, value) in flags {
        command.args([flag, value]);
    }
    exec(command.arg("--out").arg(&figures).envs(env.iter().cloned()))?;
    merge(&figures, what)
}

/// Merges the figures in the file `figures` into `target/bench/summary.json`.
fn merge(figures: &std::path::Path, what: &str) -> anyhow::Result<()> {
    let bench = target_dir().join("bench");
    let summary_path = bench.join("summary.json");
    let mut summary: BTreeMap<String, serde_json::Value> =
        match std::fs::read_to_string(&summary_path) {
            Ok(text) => serde_json::from_str(&text)
                .with_context(|| format!("reading {}", summary_path.display()))?,
            Err(_) => BTreeMap::new(),
        };
    let text = std::fs::read_to_string(figures)?;
    let soak: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(&text).with_context(|| format!("reading {}", figures.display()))?;
    summary.extend(soak);
    std::fs::write(
        &summary_path,
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    println!("{what} soak figures merged into {}", summary_path.display());
    Ok(())
}
