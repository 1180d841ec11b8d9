//! `cargo xtask dagster`: replaysafe under real Dagster Pipes.
//!
//! Installs `dagster` and `dagster-pipes` ([`VERSION`]) from PyPI into
//! `target/dagster/venv` (reused while it holds that version) with this checkout's wheel,
//! and runs `xtask/dagster/check_pipes.py`: a daily-partitioned asset whose
//! PipesSubprocessClient runs `replaysafe send webhook` with
//! `replaysafe.dagster.extras(context)`, against a loopback receiver (see the script for
//! the cases). Fails on any failed check.

use std::process::Command;

use anyhow::{Context, bail};

use crate::system::{exec, root, target_dir};

/// The Dagster release checked against; bump deliberately.
const VERSION: &str = "1.13.29";

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    if let Some(unknown) = args.first() {
        bail!("cargo xtask dagster takes no arguments (got {unknown:?})");
    }
    check()
}

/// Runs the Dagster Pipes checks.
pub(crate) fn check() -> anyhow::Result<()> {
    let base = target_dir().join("dagster");
    let venv = base.join("venv");
    let python = venv.join("bin/python");
    let installed = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('dagster'), m.version('dagster-pipes'))",
        ])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    if installed.as_deref() != Some(format!("{VERSION} {VERSION}").as_str()) {
        if !python.exists() {
            exec(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        }
        exec(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--no-input"])
                .arg(format!("dagster=={VERSION}"))
                .arg(format!("dagster-pipes=={VERSION}")),
        )?;
    }
    crate::dist::install_wheel(&venv, &crate::dist::build_wheel("dev")?)?;
    let out = base.join("out");
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(&out)?;
    let replaysafe = target_dir().join("debug/replaysafe");
    let mut command = Command::new(&python);
    // The tasks' context is Dagster's alone: no REPLAYSAFE_* from the caller.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("REPLAYSAFE_") {
            command.env_remove(&key);
        }
    }
    let status = command
        .arg(root().join("xtask/dagster/check_pipes.py"))
        .arg(&replaysafe)
        .arg(&out)
        .env("DAGSTER_HOME", &out)
        .env_remove("DAGSTER_PIPES_CONTEXT")
        .env_remove("DAGSTER_PIPES_MESSAGES")
        .current_dir(&out)
        .status()
        .context("running xtask/dagster/check_pipes.py")?;
    if !status.success() {
        bail!(
            "the Dagster Pipes checks failed ({status}); records under {}",
            out.display()
        );
    }
    Ok(())
}
