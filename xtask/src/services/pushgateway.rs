//! Prometheus Pushgateway (Debian's prometheus-pushgateway) on 127.0.0.1 with
//! persistence off (`--persistence.file=` empty; Debian's default writes under /var/lib).
//!
//! Variable: `REPLAYSAFE_TEST_PUSHGATEWAY_URL` (`http://127.0.0.1:PORT`).

use std::path::Path;
use std::process::Command;

use super::{Process, Started, free_port, http_ok, wait_until};

pub(crate) fn start(dir: &Path) -> anyhow::Result<Started> {
    let port = free_port()?;
    let log = dir.join("pushgateway.log");
    let mut process = Process::spawn(
        "pushgateway",
        Command::new("prometheus-pushgateway")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--persistence.file="),
        &log,
        "TERM",
    )?;
    wait_until("pushgateway", &mut process, &log, || {
        http_ok(port, "/-/ready")
    })?;
    Ok(Started {
        processes: vec![process],
        env: vec![(
            "REPLAYSAFE_TEST_PUSHGATEWAY_URL".into(),
            format!("http://127.0.0.1:{port}"),
        )],
    })
}
