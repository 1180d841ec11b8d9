//! aiosmtpd (Debian's python3-aiosmtpd): one plain server and one that requires
//! STARTTLS and AUTH, with certificates generated for the run.
//!
//! Variables: `REPLAYSAFE_TEST_SMTP_PORT`, `REPLAYSAFE_TEST_SMTP_MAILDIR` (plain);
//! `REPLAYSAFE_TEST_SMTPS_PORT`, `REPLAYSAFE_TEST_SMTPS_MAILDIR`, `REPLAYSAFE_TEST_SMTPS_CA`
//! (PEM of the CA that signed the server's certificate for `localhost`),
//! `REPLAYSAFE_TEST_SMTPS_USER`, `REPLAYSAFE_TEST_SMTPS_PASSWORD` (TLS + AUTH).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use super::{Process, Started, banner_starts_with, free_port, wait_until};

const PYTHON: &str = "/usr/bin/python3";
const SCRIPT: &str = include_str!("../../assets/smtp_server.py");
const TEST_USER: &str = "replaysafe-tester";
const TEST_PASSWORD: &str = "smtp-test-password-3c1f";

pub(crate) fn start(dir: &Path) -> anyhow::Result<Started> {
    let script = dir.join("smtp_server.py");
    std::fs::write(&script, SCRIPT)?;
    make_certificates(dir)?;
    let password_file = dir.join("password");
    std::fs::write(&password_file, TEST_PASSWORD)?;

    let plain_port = free_port()?;
    let plain_maildir = dir.join("maildir");
    let plain_log = dir.join("smtp.log");
    let mut plain = Process::spawn(
        "aiosmtpd",
        Command::new(PYTHON)
            .arg(&script)
            .arg(&plain_maildir)
            .args(["--port", &plain_port.to_string()]),
        &plain_log,
        "TERM",
    )?;
    wait_until("aiosmtpd", &mut plain, &plain_log, || {
        banner_starts_with(plain_port, b"220")
    })?;

    let tls_port = free_port()?;
    let tls_maildir = dir.join("maildir-tls");
    let tls_log = dir.join("smtps.log");
    let mut tls = Process::spawn(
        "aiosmtpd (STARTTLS, AUTH)",
        Command::new(PYTHON)
            .arg(&script)
            .arg(&tls_maildir)
            .args([
                "--port",
                &tls_port.to_string(),
                "--require-starttls",
                "--user",
                TEST_USER,
            ])
            .arg("--tls-cert")
            .arg(dir.join("server.pem"))
            .arg("--tls-key")
            .arg(dir.join("server.key"))
            .arg("--password-file")
            .arg(&password_file),
        &tls_log,
        "TERM",
    )?;
    wait_until("aiosmtpd (STARTTLS, AUTH)", &mut tls, &tls_log, || {
        banner_starts_with(tls_port, b"220")
    })?;

    let path = |p: &Path| p.display().to_string();
    Ok(Started {
        processes: vec![plain, tls],
        env: vec![
            ("REPLAYSAFE_TEST_SMTP_PORT".into(), plain_port.to_string()),
            ("REPLAYSAFE_TEST_SMTP_MAILDIR".into(), path(&plain_maildir)),
            ("REPLAYSAFE_TEST_SMTPS_PORT".into(), tls_port.to_string()),
            ("REPLAYSAFE_TEST_SMTPS_MAILDIR".into(), path(&tls_maildir)),
            ("REPLAYSAFE_TEST_SMTPS_CA".into(), path(&dir.join("ca.pem"))),
            ("REPLAYSAFE_TEST_SMTPS_USER".into(), TEST_USER.into()),
            (
                "REPLAYSAFE_TEST_SMTPS_PASSWORD".into(),
                TEST_PASSWORD.into(),
            ),
        ],
    })
}

/// A CA and a leaf for `localhost`/127.0.0.1 with `CA:FALSE` (rustls refuses a CA used as end entity).
fn make_certificates(dir: &Path) -> anyhow::Result<()> {
    let openssl = |args: &[&str]| -> anyhow::Result<()> {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .context("running openssl")?;
        if !output.status.success() {
            bail!(
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "2",
                "-subj",
                "/CN=replaysafe-test-ca",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ],
        ]
        .concat(),
    )?;
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-subj",
                "/CN=localhost",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        ]
        .concat(),
    )?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ])
}
