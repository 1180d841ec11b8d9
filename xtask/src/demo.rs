//! `cargo xtask demo`: runs the example pipeline.

use crate::system::{cargo, exec};

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
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
            .args(args),
    )
}
