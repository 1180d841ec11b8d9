//! OpenSSH sshd serving SFTP only (`internal-sftp`), with host and client keys
//! generated for the run; root logs in with a key, nothing else is accepted.
//!
//! Variables: `REPLAYSAFE_TEST_SSHD_PORT`, `REPLAYSAFE_TEST_SSHD_USER` (root),
//! `REPLAYSAFE_TEST_SSHD_UPLOAD` (the upload directory, absolute, where SFTP sessions
//! start), `REPLAYSAFE_TEST_SSHD_KEY` (client key without passphrase),
//! `REPLAYSAFE_TEST_SSHD_KEY_PASSPHRASED` and `REPLAYSAFE_TEST_SSHD_KEY_PASSPHRASE`
//! (a second authorized client key and its passphrase), `REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS`
//! (the server's real key), `REPLAYSAFE_TEST_SSHD_BAD_KNOWN_HOSTS` (another key for the
//! same host and port) and `REPLAYSAFE_TEST_SSHD_EMPTY_KNOWN_HOSTS` (an empty file).
//!
//! As root it also gives a system user, `replaysafe-sftp`, a fresh random password and
//! lets it log in with it (and nothing else) into a directory of its own:
//! `REPLAYSAFE_TEST_SSHD_PASSWORD_USER`, `REPLAYSAFE_TEST_SSHD_PASSWORD` and
//! `REPLAYSAFE_TEST_SSHD_PASSWORD_UPLOAD`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use super::{Process, Started, banner_starts_with, free_port, wait_until};

/// sshd re-executes itself, so it must be started by its absolute path.
const SSHD: &str = "/usr/sbin/sshd";
/// Passphrase of the second client key; a canary the tests look for in journals and logs.
const KEY_PASSPHRASE: &str = "sshd-key-passphrase-7d41e0";
/// The system user that logs in with a password.
const PASSWORD_USER: &str = "replaysafe-sftp";

pub(crate) fn start(dir: &Path) -> anyhow::Result<Started> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let upload = dir.join("upload");
    std::fs::create_dir_all(&upload)?;

    let host_key = keygen(&dir, "host_ed25519", "", "replaysafe-test-host")?;
    let other_host_key = keygen(&dir, "other_host_ed25519", "", "replaysafe-test-other")?;
    let client_key = keygen(&dir, "client_ed25519", "", "replaysafe-test-client")?;
    let passphrased_key = keygen(
        &dir,
        "client_passphrased_ed25519",
        KEY_PASSPHRASE,
        "replaysafe-test-client-passphrased",
    )?;
    let authorized_keys = dir.join("authorized_keys");
    std::fs::write(
        &authorized_keys,
        [public_key(&client_key)?, public_key(&passphrased_key)?].concat(),
    )?;

    let port = free_port()?;
    let known_hosts = dir.join("known_hosts");
    let bad_known_hosts = dir.join("bad_known_hosts");
    let empty_known_hosts = dir.join("empty_known_hosts");
    std::fs::write(&known_hosts, known_hosts_line(port, &host_key)?)?;
    std::fs::write(&bad_known_hosts, known_hosts_line(port, &other_host_key)?)?;
    std::fs::write(&empty_known_hosts, "")?;

    // The privilege-separation directory is mandatory for sshd as root; a container without
    // systemd has none.
    if !Path::new("/run/sshd").is_dir() {
        crate::system::exec(Command::new("install").args([
            "-d",
            "-m",
            "0755",
            "-o",
            "root",
            "-g",
            "root",
            "/run/sshd",
        ]))?;
    }

    let password_login = if crate::system::is_root() {
        Some(password_user(&dir)?)
    } else {
        None
    };

    let config = dir.join("sshd_config");
    let settings = Settings {
        port,
        host_key: &host_key,
        pid_file: &dir.join("sshd.pid"),
        authorized_keys: &authorized_keys,
        upload: &upload,
        password_upload: password_login.as_ref().map(|(_, upload)| upload.as_path()),
    };
    // OpenSSH 9.8 added per-source penalties, which would lock the tests out after the
    // refused connections the negative tests make on purpose; older versions reject the word.
    std::fs::write(&config, settings.render(true))?;
    if check_config(&config)?.is_err() {
        std::fs::write(&config, settings.render(false))?;
        if let Err(complaint) = check_config(&config)? {
            bail!(
                "sshd rejected its configuration {}: {complaint}",
                config.display()
            );
        }
    }

    let log = dir.join("sshd.log");
    let mut sshd = Process::spawn(
        "sshd",
        Command::new(SSHD)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config),
        &log,
        "TERM",
    )?;
    wait_until("sshd", &mut sshd, &log, || {
        banner_starts_with(port, b"SSH-2.0")
    })?;

    let path = |p: &Path| p.display().to_string();
    let mut env = Vec::new();
    if let Some((password, password_upload)) = &password_login {
        env.push((
            "REPLAYSAFE_TEST_SSHD_PASSWORD_USER".into(),
            PASSWORD_USER.into(),
        ));
        env.push(("REPLAYSAFE_TEST_SSHD_PASSWORD".into(), password.clone()));
        env.push((
            "REPLAYSAFE_TEST_SSHD_PASSWORD_UPLOAD".into(),
            path(password_upload),
        ));
    }
    Ok(Started {
        processes: vec![sshd],
        env: env
            .into_iter()
            .chain([
                ("REPLAYSAFE_TEST_SSHD_PORT".into(), port.to_string()),
                ("REPLAYSAFE_TEST_SSHD_USER".into(), "root".into()),
                ("REPLAYSAFE_TEST_SSHD_UPLOAD".into(), path(&upload)),
                ("REPLAYSAFE_TEST_SSHD_KEY".into(), path(&client_key)),
                (
                    "REPLAYSAFE_TEST_SSHD_KEY_PASSPHRASED".into(),
                    path(&passphrased_key),
                ),
                (
                    "REPLAYSAFE_TEST_SSHD_KEY_PASSPHRASE".into(),
                    KEY_PASSPHRASE.into(),
                ),
                (
                    "REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS".into(),
                    path(&known_hosts),
                ),
                (
                    "REPLAYSAFE_TEST_SSHD_BAD_KNOWN_HOSTS".into(),
                    path(&bad_known_hosts),
                ),
                (
                    "REPLAYSAFE_TEST_SSHD_EMPTY_KNOWN_HOSTS".into(),
                    path(&empty_known_hosts),
                ),
            ])
            .collect(),
    })
}

/// Makes sure [`PASSWORD_USER`] exists (a system user without a home or a shell), gives
/// it a fresh random password and an upload directory of its own under `dir`; returns
/// the password and the directory.
fn password_user(dir: &Path) -> anyhow::Result<(String, PathBuf)> {
    let exists = Command::new("id")
        .arg("-u")
        .arg(PASSWORD_USER)
        .output()
        .is_ok_and(|output| output.status.success());
    if !exists {
        crate::system::exec(Command::new("useradd").args([
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            PASSWORD_USER,
        ]))?;
    }
    let mut random = [0u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").context("opening /dev/urandom")?,
        &mut random,
    )?;
    let password: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let mut chpasswd = Command::new("chpasswd")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("running chpasswd")?;
    if let Some(stdin) = chpasswd.stdin.as_mut() {
        std::io::Write::write_all(stdin, format!("{PASSWORD_USER}:{password}\n").as_bytes())?;
    }
    if !chpasswd.wait()?.success() {
        bail!("chpasswd could not set the password of {PASSWORD_USER}");
    }
    let upload = dir.join("upload-password");
    std::fs::create_dir_all(&upload)?;
    crate::system::exec(Command::new("chown").arg(PASSWORD_USER).arg(&upload))?;
    // The user must be able to reach its directory through ours.
    for folder in [dir, dir.parent().unwrap_or(dir)] {
        crate::system::exec(Command::new("chmod").arg("755").arg(folder))?;
    }
    Ok((password, upload))
}

struct Settings<'a> {
    port: u16,
    host_key: &'a Path,
    pid_file: &'a Path,
    authorized_keys: &'a Path,
    upload: &'a Path,
    /// Where the password user's sessions start, when there is one.
    password_upload: Option<&'a Path>,
}

impl Settings<'_> {
    fn render(&self, with_penalties_off: bool) -> String {
        let Settings {
            port,
            host_key,
            pid_file,
            authorized_keys,
            upload,
            password_upload,
        } = self;
        let penalties = if with_penalties_off {
            "PerSourcePenalties no\n"
        } else {
            ""
        };
        // Root logs in with a key only (prohibit-password); the password user with its
        // password only, into its own directory.
        let (password_auth, users, password_match) = match password_upload {
            Some(folder) => (
                "yes",
                format!("root {PASSWORD_USER}"),
                format!(
                    "Match User {PASSWORD_USER}\n    PubkeyAuthentication no\n    ForceCommand internal-sftp -d {}\n",
                    folder.display()
                ),
            ),
            None => ("no", "root".to_owned(), String::new()),
        };
        format!(
            "ListenAddress 127.0.0.1:{port}\n\
             HostKey {host_key}\n\
             PidFile {pid_file}\n\
             AuthorizedKeysFile {authorized_keys}\n\
             # The keys live under /tmp (mode 1777), which fails sshd's ownership check.\n\
             StrictModes no\n\
             PermitRootLogin prohibit-password\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication {password_auth}\n\
             KbdInteractiveAuthentication no\n\
             UsePAM no\n\
             AllowUsers {users}\n\
             Subsystem sftp internal-sftp\n\
             ForceCommand internal-sftp -d {upload}\n\
             AllowTcpForwarding no\n\
             X11Forwarding no\n\
             # Tests open many sessions at once; the default starts dropping at 10.\n\
             MaxStartups 200\n\
             {penalties}\
             LogLevel VERBOSE\n\
             {password_match}",
            host_key = host_key.display(),
            pid_file = pid_file.display(),
            authorized_keys = authorized_keys.display(),
            upload = upload.display(),
        )
    }
}

/// Generates an ed25519 key pair `dir/name` (and `.pub`) and returns the private key's path.
fn keygen(dir: &Path, name: &str, passphrase: &str, comment: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    let output = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f"])
        .arg(&path)
        .output()
        .context("running ssh-keygen")?;
    if !output.status.success() {
        bail!(
            "ssh-keygen for {name} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(path)
}

/// The `.pub` file of `private_key`, with its trailing newline.
fn public_key(private_key: &Path) -> anyhow::Result<String> {
    let path = private_key.with_extension("pub");
    let mut text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// `[127.0.0.1]:PORT TYPE KEY`: ports other than 22 take the bracketed form.
fn known_hosts_line(port: u16, host_key: &Path) -> anyhow::Result<String> {
    let public = public_key(host_key)?;
    let mut fields = public.split_whitespace();
    let (Some(kind), Some(key)) = (fields.next(), fields.next()) else {
        bail!("unexpected public key format in {}.pub", host_key.display());
    };
    Ok(format!("[127.0.0.1]:{port} {kind} {key}\n"))
}

/// `sshd -t`: `Ok(Err(stderr))` when sshd refuses the configuration.
fn check_config(config: &Path) -> anyhow::Result<Result<(), String>> {
    let output = Command::new(SSHD)
        .arg("-t")
        .arg("-f")
        .arg(config)
        .output()
        .context("running sshd -t")?;
    if output.status.success() {
        Ok(Ok(()))
    } else {
        Ok(Err(String::from_utf8_lossy(&output.stderr).into_owned()))
    }
}
