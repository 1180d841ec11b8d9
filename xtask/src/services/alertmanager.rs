//! Prometheus Alertmanager (Debian's prometheus-alertmanager) on 127.0.0.1 with gossip
//! off (`--cluster.listen-address=` empty) and its storage in the scratch folder, routing
//! every alert to a "null" receiver: the tests read alerts and silences back through
//! API v2, nothing is notified.
//!
//! Variable: `REPLAYSAFE_TEST_ALERTMANAGER_URL` (`http://127.0.0.1:PORT`).

use std::path::Path;
use std::process::Command;

use super::{Process, Started, free_port, http_ok, wait_until};

const CONFIG: &str = "route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n";

pub(crate) fn start(dir: &Path) -> anyhow::Result<Started> {
    let config = dir.join("alertmanager.yml");
    std::fs::write(&config, CONFIG)?;
    let port = free_port()?;
    let log = dir.join("alertmanager.log");
    let mut process = Process::spawn(
        "alertmanager",
        Command::new("prometheus-alertmanager")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address="),
        &log,
        "TERM",
    )?;
    wait_until("alertmanager", &mut process, &log, || {
        http_ok(port, "/-/ready")
    })?;
    Ok(Started {
        processes: vec![process],
        env: vec![(
            "REPLAYSAFE_TEST_ALERTMANAGER_URL".into(),
            format!("http://127.0.0.1:{port}"),
        )],
    })
}
