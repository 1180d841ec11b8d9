//! The Standard Webhooks reference verifier (`standardwebhooks` from PyPI), installed into
//! `target/` once, so tests can check that replaysafe's signatures verify with it.
//!
//! Variable: `REPLAYSAFE_TEST_STANDARDWEBHOOKS_PYTHONPATH` (a folder to put on `PYTHONPATH`
//! for `python3`).

use std::path::Path;

use super::Started;

/// The version checked against; bump deliberately.
const VERSION: &str = "1.1.0";

pub(crate) fn start(_dir: &Path) -> anyhow::Result<Started> {
    let folder = crate::system::target_dir()
        .join("pydeps")
        .join(format!("standardwebhooks-{VERSION}"));
    crate::system::pip_install_into(
        &folder,
        "standardwebhooks",
        &[format!("standardwebhooks=={VERSION}")],
    )?;
    Ok(Started {
        processes: Vec::new(),
        env: vec![(
            "REPLAYSAFE_TEST_STANDARDWEBHOOKS_PYTHONPATH".into(),
            folder.display().to_string(),
        )],
    })
}
