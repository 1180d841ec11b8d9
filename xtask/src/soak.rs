//! `cargo xtask soak outbox [--kills N] [--workers W] [--backend sqlite|postgres]`: the
//! outbox's crash test with real processes (`examples/src/outbox_soak.rs`); its figures
//! are merged into `target/bench/summary.json`. On PostgreSQL it uses the server of
//! `REPLAYSAFE_TEST_POSTGRES_URL`, or starts one (`cargo xtask services postgres`).

use std::collections::BTreeMap;

use anyhow::{Context, bail};

use crate::system::{cargo, exec, target_dir};

/// The crash test `cargo xtask ci` runs: short, well under a minute.
pub(crate) const CI_KILLS: u32 = 30;

/// The outbox's database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let mut kills = 1000;
    let mut workers = 3;
    let mut backend = Backend::Sqlite;
    match args.split_first() {
        Some((what, rest)) if what == "outbox" => {
            let mut rest = rest.iter();
            while let Some(flag) = rest.next() {
                let value = rest
                    .next()
                    .with_context(|| format!("{flag} needs a value"))?;
                match flag.as_str() {
                    "--kills" => kills = value.parse().context("--kills")?,
                    "--workers" => workers = value.parse().context("--workers")?,
                    "--backend" => {
                        backend = match value.as_str() {
                            "sqlite" => Backend::Sqlite,
                            "postgres" => Backend::Postgres,
                            other => bail!("--backend: expected sqlite or postgres, not {other:?}"),
                        }
                    }
                    other => bail!("unknown flag {other:?}\n\n{USAGE}"),
                }
            }
        }
        _ => bail!("{USAGE}"),
    }
    let mut services = None;
    let mut env = Vec::new();
    if backend == Backend::Postgres && std::env::var_os("REPLAYSAFE_TEST_POSTGRES_URL").is_none() {
        let running = crate::services::start(&["postgres".to_owned()])?;
        env = running.env();
        services = Some(running);
    }
    let result = outbox(kills, workers, backend, &env);
    drop(services);
    result
}

const USAGE: &str =
    "usage: cargo xtask soak outbox [--kills N] [--workers W] [--backend sqlite|postgres]";

/// Runs the outbox crash test (with `env` for the PostgreSQL server's variables) and
/// merges its figures into `target/bench/summary.json`.
pub(crate) fn outbox(
    kills: u32,
    workers: u32,
    backend: Backend,
    env: &[(String, String)],
) -> anyhow::Result<()> {
    let bench = target_dir().join("bench");
    std::fs::create_dir_all(&bench)?;
    let (figures, backend_name) = match backend {
        Backend::Sqlite => (bench.join("outbox-soak.json"), "sqlite"),
        Backend::Postgres => (bench.join("outbox-soak-postgres.json"), "postgres"),
    };
    exec(
        cargo()
            .args([
                "run",
                "--quiet",
                "--package",
                "replaysafe-examples",
                "--bin",
                "outbox_soak",
                "--",
            ])
            .args(["--kills", &kills.to_string()])
            .args(["--workers", &workers.to_string()])
            .args(["--backend", backend_name])
            .arg("--out")
            .arg(&figures)
            .envs(env.iter().cloned()),
    )?;
    let summary_path = bench.join("summary.json");
    let mut summary: BTreeMap<String, serde_json::Value> =
        match std::fs::read_to_string(&summary_path) {
            Ok(text) => serde_json::from_str(&text)
                .with_context(|| format!("reading {}", summary_path.display()))?,
            Err(_) => BTreeMap::new(),
        };
    let text = std::fs::read_to_string(&figures)?;
    let soak: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(&text).with_context(|| format!("reading {}", figures.display()))?;
    summary.extend(soak);
    std::fs::write(
        &summary_path,
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    println!("outbox soak figures merged into {}", summary_path.display());
    Ok(())
}
