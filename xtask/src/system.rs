//! Running commands and installing Debian packages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context, bail};

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The shared target directory.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Runs `command` to completion, failing with its name when it fails.
pub(crate) fn exec(command: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{command:?}");
    let status = command
        .current_dir(root())
        .status()
        .with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed: {status}");
    }
    Ok(())
}

/// Runs `command` and returns its stdout, failing with its stderr when it fails.
pub(crate) fn output(command: &mut Command) -> anyhow::Result<String> {
    let shown = format!("{:?}", command.get_program());
    let output = command
        .output()
        .with_context(|| format!("starting {shown}"))?;
    if !output.status.success() {
        bail!(
            "{shown} {:?} failed: {}",
            command.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A `cargo` command.
pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Whether the Debian package is installed.
fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
}

/// Installs missing Debian packages (as root, through apt-get), making sure their
/// maintainer scripts start no daemon on the default ports.
pub(crate) fn ensure_packages(packages: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages {missing:?}; install them (apt-get install {}) or run as root",
            missing.join(" ")
        );
    }
    static UPDATED: OnceLock<()> = OnceLock::new();
    let started = Instant::now();
    let policy = Path::new("/usr/sbin/policy-rc.d");
    if !policy.exists() {
        // Exit 101 = "action not allowed": packaged daemons are not started on 0.0.0.0.
        std::fs::write(policy, "#!/bin/sh\nexit 101\n").context("writing /usr/sbin/policy-rc.d")?;
        exec(Command::new("chmod").args(["755", "/usr/sbin/policy-rc.d"]))?;
    }
    if UPDATED.get().is_none() {
        exec(Command::new("apt-get").args(["update", "-q"]))?;
        let _ = UPDATED.set(());
    }
    exec(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    eprintln!(
        "xtask: installed {} in {:.1}s",
        missing.join(" "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Installs Python `packages` (pip requirement strings) into `folder` with
/// `python3 -m pip install --target`, unless `folder` already holds `marker` (the
/// package's import directory): for tests that import a reference library from PyPI.
pub(crate) fn pip_install_into(
    folder: &std::path::Path,
    marker: &str,
    packages: &[String],
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if folder.join(marker).is_dir() {
        return Ok(());
    }
    let output = std::process::Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--target",
        ])
        .arg(folder)
        .args(packages)
        .output()
        .context("running python3 -m pip")?;
    if !output.status.success() {
        anyhow::bail!(
            "installing {} failed: {}",
            packages.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
