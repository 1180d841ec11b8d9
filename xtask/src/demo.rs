//! `cargo xtask demo [--real]`: runs the flagship pipeline (`examples/src/demo.rs`).
//!
//! Without arguments it needs no server. With `--real` it starts the loopback servers
//! the tests use and delivers to them; they stop when the demo ends.

use anyhow::bail;

use crate::system::{cargo, exec};

/// The servers `--real` delivers to.
const REAL_SERVICES: [&str; 4] = ["smtp", "sshd", "alertmanager", "pushgateway"];

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    match args {
        [] => run_demo(&[], Vec::new()),
        [flag] if flag == "--real" => {
            let names = REAL_SERVICES.map(String::from);
            let services = crate::services::start(&names)?;
            run_real(services.env())
        }
        other => bail!("usage: cargo xtask demo [--real] (got {other:?})"),
    }
}

/// Runs the demo with `--real` against servers already started, found through `env`.
pub(crate) fn run_real(env: Vec<(String, String)>) -> anyhow::Result<()> {
    run_demo(&["--real"], env)
}

fn run_demo(args: &[&str], env: Vec<(String, String)>) -> anyhow::Result<()> {
    exec(
        cargo()
            .args([
                "run",
                "--quiet",
                "--package",
                "replaysafe-examples",
                "--bin",
                "demo",
                "--",
            ])
            .args(args)
            .envs(env),
    )
}
