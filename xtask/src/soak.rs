//! `cargo xtask soak outbox [--kills N] [--workers W] [--backend sqlite|postgres]`: the
//! outbox's crash test with real processes (`examples/src/outbox_soak.rs`); its figures
//! are merged into `target/bench/summary.json`. On PostgreSQL it uses the server of
//! `REPLAYSAFE_TEST_POSTGRES_URL`, or starts one (`cargo xtask services postgres`).
//!
//! `cargo xtask soak ledger [--kills N] [--processes P] [--effects E] [--journal
//! postgres|jsonl] [--in-flight F]`: the ledger's crash test (`examples/src/ledger_soak.rs`),
//! the same way: on PostgreSQL, or on one JSON Lines file shared by every process, each
//! sending F effects at a time (group commit).

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
    let mut ledger = Ledger {
        kills: 200,
        processes: 8,
        effects: 1000,
        journal: Journal::Postgres,
        in_flight: 1,
    };
    for (flag, value) in flags(args)? {
        match flag {
            "--kills" => ledger.kills = value.parse().context("--kills")?,
            "--processes" => ledger.processes = value.parse().context("--processes")?,
            "--effects" => ledger.effects = value.parse().context("--effects")?,
            "--in-flight" => ledger.in_flight = value.parse().context("--in-flight")?,
            "--journal" => {
                ledger.journal = match value {
                    "postgres" => Journal::Postgres,
                    "jsonl" => Journal::Jsonl,
                    other => bail!("--journal: expected postgres or jsonl, not {other:?}"),
                }
            }
            other => bail!("unknown flag {other:?}\n\n{USAGE}"),
        }
    }
    with_postgres(ledger.journal == Journal::Postgres, |env| {
        self::ledger(&ledger, env)
    })
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
       cargo xtask soak ledger [--kills N] [--processes P] [--effects E] [--journal postgres|jsonl] [--in-flight F]";

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

/// The ledger's journal in its crash test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Journal {
    Postgres,
    /// One JSON Lines file shared by every process.
    Jsonl,
}

/// One run of the ledger crash test.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ledger {
    pub(crate) kills: u32,
    pub(crate) processes: u32,
    pub(crate) effects: u32,
    pub(crate) journal: Journal,
    /// Effects each process sends at a time.
    pub(crate) in_flight: u32,
}

/// Runs the ledger crash test (with `env` for the PostgreSQL server's variables) and
/// merges its figures into `target/bench/summary.json`.
pub(crate) fn ledger(run: &Ledger, env: &[(String, String)]) -> anyhow::Result<()> {
    let (journal, figures) = match run.journal {
        Journal::Postgres => ("postgres", "ledger-soak.json"),
        Journal::Jsonl => ("jsonl", "ledger-soak-jsonl.json"),
    };
    soak(
        "ledger",
        figures,
        &[
            ("--kills", &run.kills.to_string()),
            ("--processes", &run.processes.to_string()),
            ("--effects", &run.effects.to_string()),
            ("--journal", journal),
            ("--in-flight", &run.in_flight.to_string()),
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
