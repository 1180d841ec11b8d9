//! A throwaway PostgreSQL 15 cluster (Debian's postgresql-15) on 127.0.0.1: `initdb`
//! into the service's folder, then a foreground postmaster, so the pid held is the
//! server's and SIGINT (a fast shutdown) stops it.
//!
//! Root may not run the server: as root, the folder goes to the `postgres` user and the
//! server runs as it (`runuser` for initdb, `setpriv`, which execs, for the postmaster).
//! Durability is off (`fsync=off`): the cluster lives for one run.
//!
//! Variables: `REPLAYSAFE_TEST_POSTGRES_URL`
//! (`postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`; tests create a database each),
//! and `REPLAYSAFE_TEST_PSYCOPG_PYTHONPATH`, a folder under `target/pydeps` holding
//! psycopg from PyPI, for the test of the documented Python staging recipe.

use std::path::Path;
use std::process::Command;

use anyhow::Context;

use super::{Process, Started, free_port, wait_until};

const BIN: &str = "/usr/lib/postgresql/15/bin";
const TEST_PASSWORD: &str = "postgres-test-password-7d2a";
/// The psycopg checked against; bump deliberately.
const PSYCOPG: &str = "3.3.9";

/// Installs psycopg (with its bundled libpq) under `target/pydeps` once.
fn psycopg() -> anyhow::Result<std::path::PathBuf> {
    let folder = crate::system::target_dir()
        .join("pydeps")
        .join(format!("psycopg-{PSYCOPG}"));
    crate::system::pip_install_into(
        &folder,
        "psycopg",
        &[
            format!("psycopg=={PSYCOPG}"),
            format!("psycopg-binary=={PSYCOPG}"),
        ],
    )?;
    Ok(folder)
}

/// Creates the database `name` on the server `admin_url` names (a `postgres://` URL of
/// this service) and returns that URL with `name` as its database. Errors never quote
/// the URL, which holds the server's password.
pub(crate) fn create_database(admin_url: &str, name: &str) -> anyhow::Result<String> {
    let (server, _) = admin_url
        .rsplit_once('/')
        .context("the server's URL names no database")?;
    // libpq's tools take a connection URL where they take a database name; `output`
    // names only the program when it fails, not the URL with its password.
    crate::system::output(
        Command::new(format!("{BIN}/createdb"))
            .arg(format!("--maintenance-db={admin_url}"))
            .arg(name),
    )
    .with_context(|| format!("creating the database {name}"))?;
    Ok(format!("{server}/{name}"))
}

pub(crate) fn start(dir: &Path) -> anyhow::Result<Started> {
    let root = crate::system::is_root();
    let data = dir.join("data");
    let password_file = dir.join("pwfile");
    std::fs::write(&password_file, format!("{TEST_PASSWORD}\n"))?;
    if root {
        crate::system::exec(
            Command::new("chown")
                .arg("-R")
                .arg("postgres:postgres")
                .arg(dir),
        )?;
    }
    let mut initdb = if root {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(format!("{BIN}/initdb"));
        command
    } else {
        Command::new(format!("{BIN}/initdb"))
    };
    let initdb_log = dir.join("initdb.log");
    let status = initdb
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ])
        .arg(format!("--pwfile={}", password_file.display()))
        .args(["-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
        .stdout(std::fs::File::create(&initdb_log)?)
        .stderr(std::fs::File::create(dir.join("initdb.err"))?)
        .status()
        .context("running initdb")?;
    anyhow::ensure!(
        status.success(),
        "initdb failed ({status}); see {}",
        dir.join("initdb.err").display()
    );

    let port = free_port()?;
    let log = dir.join("postgres.log");
    let mut server = if root {
        let mut command = Command::new("setpriv");
        command
            .args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ])
            .arg(format!("{BIN}/postgres"));
        command
    } else {
        Command::new(format!("{BIN}/postgres"))
    };
    server
        .arg("-D")
        .arg(&data)
        .args(["-c", "listen_addresses=127.0.0.1", "-p", &port.to_string()])
        .arg("-k")
        .arg(dir)
        .args([
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=300",
        ]);
    // SIGINT is PostgreSQL's fast shutdown; SIGTERM would wait for every client.
    let mut process = Process::spawn("postgres", &mut server, &log, "INT")?;
    wait_until("postgres", &mut process, &log, || {
        Command::new("pg_isready")
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .status()
            .is_ok_and(|status| status.success())
    })?;
    Ok(Started {
        processes: vec![process],
        env: vec![
            (
                "REPLAYSAFE_TEST_POSTGRES_URL".into(),
                format!("postgres://postgres:{TEST_PASSWORD}@127.0.0.1:{port}/postgres"),
            ),
            (
                "REPLAYSAFE_TEST_PSYCOPG_PYTHONPATH".into(),
                psycopg()?.display().to_string(),
            ),
        ],
    })
}
