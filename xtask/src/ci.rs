//! `cargo xtask ci [--no-airflow]`: every check, in order, with the time each phase took.
//!
//! After the Python wheel it runs `cargo xtask dagster` (real Dagster Pipes from PyPI), and
//! it ends with `cargo xtask airflow` (a real Airflow 3.3.2 with its providers: scheduler,
//! backfills, assets, the `replaysafe.airflow` integration and the API server, its
//! metadata in PostgreSQL; about 170 s with the install); `--no-airflow` leaves that out for a quicker
//! local run.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::system::{cargo, exec};

/// Crates that must never enter replaysafe-core's normal dependency tree.
const FORBIDDEN_IN_CORE: &[&str] = &[
    "lettre",
    "reqwest",
    "ssh2",
    "rusqlite",
    "tokio-postgres",
    "deadpool-postgres",
    "sqlx",
    "hyper",
    "axum",
    "metrics",
];

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let airflow = match args {
        [] => true,
        [flag] if flag == "--no-airflow" => false,
        other => bail!("usage: cargo xtask ci [--no-airflow] (got {other:?})"),
    };
    let mut phases: Vec<(&str, Duration, bool)> = Vec::new();
    let started = Instant::now();
    let mut result = run_phases(&mut phases);
    if airflow && result.is_ok() {
        result = phase(&mut phases, "airflow", crate::airflow::check);
    }
    eprintln!("\nxtask ci: phase times");
    for (name, took, ok) in &phases {
        eprintln!(
            "  {:<28} {:>8.1} s  {}",
            name,
            took.as_secs_f64(),
            if *ok { "ok" } else { "FAILED" }
        );
    }
    eprintln!(
        "  {:<28} {:>8.1} s",
        "total",
        started.elapsed().as_secs_f64()
    );
    result
}

fn phase(
    phases: &mut Vec<(&'static str, Duration, bool)>,
    name: &'static str,
    body: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    eprintln!("\nxtask ci: == {name} ==");
    let started = Instant::now();
    let result = body();
    phases.push((name, started.elapsed(), result.is_ok()));
    result.with_context(|| format!("phase {name}"))
}

fn run_phases(phases: &mut Vec<(&'static str, Duration, bool)>) -> anyhow::Result<()> {
    phase(phases, "fmt", || {
        exec(cargo().args(["fmt", "--all", "--", "--check"]))
    })?;
    phase(phases, "dependency boundary", check_core_boundary)?;
    phase(phases, "clippy", || {
        exec(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    phase(phases, "build tests", || {
        exec(cargo().args(["test", "--workspace", "--all-features", "--no-run"]))
    })?;
    let mut services = None;
    phase(phases, "start services", || {
        services = Some(crate::services::start(&[])?);
        Ok(())
    })?;
    let env = services.as_ref().map(|s| s.env()).unwrap_or_default();
    phase(phases, "tests", || {
        exec(
            cargo()
                .args(["test", "--workspace", "--all-features"])
                .envs(env.clone()),
        )
    })?;
    phase(phases, "demo", || crate::demo::run_real(env.clone()))?;
    phase(phases, "outbox crash test", || {
        crate::soak::outbox(crate::soak::CI_KILLS, 3, crate::soak::Backend::Sqlite, &[])
    })?;
    phase(phases, "outbox crash test (postgres)", || {
        crate::soak::outbox(
            crate::soak::CI_KILLS,
            3,
            crate::soak::Backend::Postgres,
            &env,
        )
    })?;
    let ledger = crate::soak::Ledger {
        kills: crate::soak::CI_KILLS,
        processes: crate::soak::CI_LEDGER_PROCESSES,
        effects: crate::soak::CI_LEDGER_EFFECTS,
        journal: crate::soak::Journal::Postgres,
        in_flight: 1,
    };
    phase(phases, "ledger crash test (postgres)", || {
        crate::soak::ledger(&ledger, &env)
    })?;
    phase(phases, "ledger crash test (jsonl, 8 in flight)", || {
        let jsonl = crate::soak::Ledger {
            journal: crate::soak::Journal::Jsonl,
            in_flight: 8,
            ..ledger
        };
        crate::soak::ledger(&jsonl, &env)
    })?;
    phase(phases, "report page in chromium", crate::browser::check)?;
    phase(phases, "python wheel", || crate::dist::check(&env))?;
    phase(phases, "dagster pipes", crate::dagster::check)?;
    phase(phases, "stop services", || {
        drop(services.take());
        Ok(())
    })?;
    phase(phases, "public API", || crate::public_api::check(false))?;
    phase(phases, "package", package)?;
    phase(phases, "docs", || {
        exec(
            cargo()
                .args(["doc", "--workspace", "--all-features", "--no-deps"])
                .env(
                    "RUSTDOCFLAGS",
                    "-D warnings -D rustdoc::broken_intra_doc_links",
                ),
        )
    })?;
    Ok(())
}

/// `cargo package` of every published crate, in dependency order, each built from its
/// package as crates.io would build it (dev-dependencies inside the workspace are path-only,
/// so no cycle blocks publishing).
pub(crate) fn package() -> anyhow::Result<()> {
    let mut command = cargo();
    command.args(["package", "--workspace", "--allow-dirty"]);
    for unpublished in UNPUBLISHED {
        command.args(["--exclude", unpublished]);
    }
    exec(&mut command)
}

/// Workspace members with `publish = false` (a tidy test holds this list to the manifests).
pub(crate) const UNPUBLISHED: [&str; 5] = [
    "replaysafe-bench",
    "replaysafe-cli",
    "replaysafe-examples",
    "replaysafe-python",
    "xtask",
];

/// Fails if a network backend or database driver is in replaysafe-core's normal dependencies.
fn check_core_boundary() -> anyhow::Result<()> {
    let output = cargo()
        .args([
            "tree",
            "--package",
            "replaysafe-core",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(crate::system::root())
        .output()
        .context("running cargo tree")?;
    if !output.status.success() {
        bail!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let tree = String::from_utf8(output.stdout)?;
    let offenders = forbidden_in(&tree);
    if !offenders.is_empty() {
        bail!(
            "replaysafe-core must not depend on {offenders:?}: adapters and drivers stay out of the core"
        );
    }
    eprintln!(
        "replaysafe-core's {} normal dependencies include none of {FORBIDDEN_IN_CORE:?}",
        tree.lines().count()
    );
    Ok(())
}

fn forbidden_in(tree: &str) -> Vec<String> {
    let mut offenders: Vec<String> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| FORBIDDEN_IN_CORE.contains(name))
        .map(str::to_owned)
        .collect();
    offenders.sort();
    offenders.dedup();
    offenders
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_check_spots_backends() {
        let tree = "replaysafe-core v0.1.0\nserde v1.0.0\nreqwest v0.13.5\nlettre v0.11.0\nreqwest v0.13.5\n";
        assert_eq!(forbidden_in(tree), ["lettre", "reqwest"]);
        assert!(forbidden_in("replaysafe-core v0.1.0\nsha2 v0.10.9\nmetrics-util v1\n").is_empty());
    }

    #[test]
    fn core_boundary_holds_now() {
        check_core_boundary().unwrap();
    }
}
