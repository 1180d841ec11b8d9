//! Real test servers on 127.0.0.1: started on free ports, found by the tests through
//! environment variables, stopped by their own process ids on exit and on panic.
//!
//! Each server has a module with a `start(dir)` function returning a [`Started`]; add
//! new ones to [`CATALOGUE`].

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

mod alertmanager;
pub(crate) mod postgres;
mod pushgateway;
mod smtp;
mod sshd;
mod standardwebhooks;

/// A server definition: its name, the Debian packages it needs, and how to start it.
pub(crate) struct Definition {
    pub(crate) name: &'static str,
    pub(crate) packages: &'static [&'static str],
    pub(crate) start: fn(&Path) -> anyhow::Result<Started>,
}

/// Every server the test suite uses. Later adapters add theirs here.
pub(crate) const CATALOGUE: &[Definition] = &[
    Definition {
        name: "standardwebhooks",
        packages: &[],
        start: standardwebhooks::start,
    },
    Definition {
        name: "smtp",
        packages: &["python3-aiosmtpd", "openssl"],
        start: smtp::start,
    },
    Definition {
        name: "alertmanager",
        packages: &["prometheus-alertmanager"],
        start: alertmanager::start,
    },
    Definition {
        name: "pushgateway",
        packages: &["prometheus-pushgateway"],
        start: pushgateway::start,
    },
    Definition {
        name: "postgres",
        packages: &["postgresql-15"],
        start: postgres::start,
    },
    Definition {
        name: "sshd",
        packages: &["openssh-server", "openssh-client"],
        start: sshd::start,
    },
];

/// A running server process, stopped (signal, then wait) when dropped.
#[derive(Debug)]
pub(crate) struct Process {
    name: String,
    child: Child,
    stop_signal: &'static str,
    grace: Duration,
    /// Whether the process leads its own process group (see [`Process::spawn_group`]).
    group: bool,
}

impl Process {
    /// Spawns `command` with output to `log`; `stop_signal` is `TERM` or `INT`.
    pub(crate) fn spawn(
        name: &str,
        command: &mut Command,
        log: &Path,
        stop_signal: &'static str,
    ) -> anyhow::Result<Self> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}: {command:?}"))?;
        Ok(Process {
            name: name.to_owned(),
            child,
            stop_signal,
            grace: Duration::from_secs(10),
            group: false,
        })
    }

    /// Like [`Process::spawn`], but the process leads a new process group (whose id is its
    /// pid), so a stop can also end the children it leaves behind: the signal goes to the
    /// process, and whatever of its group is still alive after it exited, or after the grace
    /// period, is killed through the group id.
    pub(crate) fn spawn_group(
        name: &str,
        command: &mut Command,
        log: &Path,
        stop_signal: &'static str,
    ) -> anyhow::Result<Self> {
        use std::os::unix::process::CommandExt;
        let mut process = Process::spawn(name, command.process_group(0), log, stop_signal)?;
        process.group = true;
        Ok(process)
    }

    /// How long a stop waits after the signal before killing (10 s unless changed).
    pub(crate) fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the process has already exited.
    pub(crate) fn ensure_running(&mut self, log: &Path) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            bail!(
                "{} exited early ({status}); log {}:\n{}",
                self.name,
                log.display(),
                tail
            );
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
        if self.group {
            // The group's id is the leader's pid; while a member lives, no new process gets it.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Process {
    /// Sends the stop signal to the process (not its group), if it still runs.
    pub(crate) fn signal_stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args([
                    &format!("-{}", self.stop_signal),
                    &self.child.id().to_string(),
                ])
                .status();
        }
    }

    /// Waits up to `timeout` for the process to exit; says whether it did.
    pub(crate) fn exited_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Signals the process and waits out the grace period, then kills it.
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal_stop();
            if !self.exited_within(self.grace) {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A started server: its processes and the variables that tell the tests where it is.
#[derive(Debug, Default)]
pub(crate) struct Started {
    #[allow(dead_code, reason = "held, not read: dropping it stops the servers")]
    pub(crate) processes: Vec<Process>,
    pub(crate) env: Vec<(String, String)>,
}

/// All started servers; dropping it stops them.
#[derive(Debug, Default)]
pub(crate) struct Running {
    started: Vec<(&'static str, Started)>,
    _scratch: Option<Scratch>,
}

impl Running {
    /// Every variable the tests need.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        self.started
            .iter()
            .flat_map(|(_, s)| s.env.iter().cloned())
            .collect()
    }
}

/// A scratch folder under /tmp removed on drop.
#[derive(Debug)]
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts the named servers (all when `names` is empty), installing missing packages.
pub(crate) fn start(names: &[String]) -> anyhow::Result<Running> {
    let chosen: Vec<&Definition> = if names.is_empty() {
        CATALOGUE.iter().collect()
    } else {
        names
            .iter()
            .map(|name| {
                CATALOGUE.iter().find(|d| d.name == name).with_context(|| {
                    let known: Vec<_> = CATALOGUE.iter().map(|d| d.name).collect();
                    format!("unknown service {name:?}; known: {known:?}")
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let packages: Vec<&str> = chosen
        .iter()
        .flat_map(|d| d.packages.iter().copied())
        .collect();
    crate::system::ensure_packages(&packages)?;

    let scratch = std::env::temp_dir().join(format!("replaysafe-services-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut running = Running {
        started: Vec::new(),
        _scratch: None,
    };
    for definition in chosen {
        let dir = scratch.join(definition.name);
        std::fs::create_dir_all(&dir)?;
        let started_at = Instant::now();
        let started = (definition.start)(&dir)
            .with_context(|| format!("starting service {}", definition.name))?;
        eprintln!(
            "xtask: {} ready in {} ms",
            definition.name,
            started_at.elapsed().as_millis()
        );
        running.started.push((definition.name, started));
    }
    running._scratch = Some(Scratch(scratch));
    Ok(running)
}

/// `cargo xtask services [NAME...]`: start, print `export` lines, wait for Ctrl-C or SIGTERM,
/// then stop every server by its pid.
pub(crate) fn run_foreground(names: &[String]) -> anyhow::Result<()> {
    let (stop, stopped) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = stop.send(());
    })
    .context("installing the SIGINT/SIGTERM handler")?;
    let running = start(names)?;
    for (key, value) in running.env() {
        println!("export {key}={}", shell_quote(&value));
    }
    println!("# servers running; Ctrl-C or SIGTERM stops them");
    let _ = std::io::stdout().flush();
    let _ = stopped.recv();
    eprintln!("xtask: stopping services");
    drop(running);
    Ok(())
}

fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Polls every 20 ms until `ready` says yes, the process dies, or 30 s pass.
pub(crate) fn wait_until(
    name: &str,
    process: &mut Process,
    log: &Path,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if ready() {
            return Ok(());
        }
        process.ensure_running(log)?;
        if Instant::now() > deadline {
            bail!("{name} not ready after 30 s; log {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a TCP server on 127.0.0.1:`port` greets with `prefix`.
pub(crate) fn banner_starts_with(port: u16, prefix: &[u8]) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buffer = vec![0; prefix.len()];
    stream.read_exact(&mut buffer).is_ok() && buffer == prefix
}

/// Whether `GET path` on 127.0.0.1:`port` answers 200.
pub(crate) fn http_ok(port: u16, path: &str) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut status = [0u8; 12];
    stream.read_exact(&mut status).is_ok() && status.ends_with(b" 200")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_started_probed_and_stopped_by_pid() {
        let dir = std::env::temp_dir().join(format!("xtask-services-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port().unwrap();
        let log = dir.join("http.log");
        let mut process = Process::spawn(
            "http.server",
            Command::new("python3")
                .args([
                    "-m",
                    "http.server",
                    "--bind",
                    "127.0.0.1",
                    &port.to_string(),
                ])
                .current_dir(&dir),
            &log,
            "TERM",
        )
        .unwrap();
        wait_until("http.server", &mut process, &log, || http_ok(port, "/")).unwrap();
        assert!(!banner_starts_with(port, b"SSH-2.0"));
        let pid = process.child.id();
        drop(process);
        assert!(!http_ok(port, "/"), "still serving after drop");
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}/status")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .unwrap()
                    .contains("zombie")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_group_leader_is_stopped_with_the_children_it_leaves_behind() {
        let dir = std::env::temp_dir().join(format!("xtask-group-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("sh.log");
        let child_pid = dir.join("child.pid");
        // sh exits on TERM; the sleep it started would outlive it.
        let script = format!("sleep 600 & echo $! > {}; wait", child_pid.display());
        let mut process =
            Process::spawn_group("sh", Command::new("sh").args(["-c", &script]), &log, "TERM")
                .unwrap();
        wait_until("sh", &mut process, &log, || {
            std::fs::read_to_string(&child_pid).is_ok_and(|text| text.ends_with('\n'))
        })
        .unwrap();
        let sleeper = std::fs::read_to_string(&child_pid)
            .unwrap()
            .trim()
            .to_owned();
        let alive = |pid: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .is_ok_and(|status| !status.contains("zombie"))
        };
        assert!(alive(&sleeper));
        drop(process);
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(&sleeper) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !alive(&sleeper),
            "the group's sleep {sleeper} survived the stop"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_service_names_are_refused() {
        let err = start(&["nope".to_owned()]).unwrap_err().to_string();
        assert!(err.contains("unknown service \"nope\""), "{err}");
    }
}
