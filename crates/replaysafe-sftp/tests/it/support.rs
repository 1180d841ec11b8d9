//! The real sshd started by `cargo xtask services sshd`, found through its variables;
//! unique names per test (tests run in parallel and share one upload directory); a TCP
//! proxy that cuts a connection mid-upload.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use replaysafe_core::{Guard, MemoryJournal, RetryPolicy};
use replaysafe_sftp::{SftpClient, SftpClientBuilder};
use replaysafe_test::services::require;
use secrecy::SecretString;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Where the test server is and what it trusts.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) upload: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) passphrased_key: PathBuf,
    pub(crate) passphrase: String,
    pub(crate) known_hosts: PathBuf,
    pub(crate) bad_known_hosts: PathBuf,
    pub(crate) empty_known_hosts: PathBuf,
}

pub(crate) fn server() -> Server {
    let path = |variable: &str| PathBuf::from(require(variable));
    Server {
        port: require("REPLAYSAFE_TEST_SSHD_PORT")
            .parse()
            .expect("REPLAYSAFE_TEST_SSHD_PORT is a port"),
        user: require("REPLAYSAFE_TEST_SSHD_USER"),
        upload: path("REPLAYSAFE_TEST_SSHD_UPLOAD"),
        key: path("REPLAYSAFE_TEST_SSHD_KEY"),
        passphrased_key: path("REPLAYSAFE_TEST_SSHD_KEY_PASSPHRASED"),
        passphrase: require("REPLAYSAFE_TEST_SSHD_KEY_PASSPHRASE"),
        known_hosts: path("REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS"),
        bad_known_hosts: path("REPLAYSAFE_TEST_SSHD_BAD_KNOWN_HOSTS"),
        empty_known_hosts: path("REPLAYSAFE_TEST_SSHD_EMPTY_KNOWN_HOSTS"),
    }
}

impl Server {
    /// A builder for the server's upload directory with the plain key.
    pub(crate) fn builder(&self) -> SftpClientBuilder {
        self.builder_on_port(self.port)
    }

    pub(crate) fn builder_on_port(&self, port: u16) -> SftpClientBuilder {
        SftpClient::builder("127.0.0.1", &self.user)
            .port(port)
            .private_key(&self.key)
            .known_hosts(&self.known_hosts)
            .remote_dir(self.upload.display().to_string())
            .timeout(Duration::from_secs(20))
    }

    /// A guarded client with a memory journal and quick retries.
    pub(crate) fn guard(&self) -> (Guard<SftpClient>, Arc<MemoryJournal>) {
        guard_from(self.builder())
    }

    pub(crate) fn passphrase(&self) -> SecretString {
        SecretString::from(self.passphrase.clone())
    }

    /// The content of `name` in the upload directory, if it exists.
    pub(crate) fn read(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.upload.join(name)).ok()
    }

    /// Every entry of the upload directory whose name contains `needle` (temporary files included).
    pub(crate) fn entries_containing(&self, needle: &str) -> Vec<String> {
        let mut found: Vec<String> = std::fs::read_dir(&self.upload)
            .expect("the upload directory is readable")
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains(needle))
            .collect();
        found.sort();
        found
    }

    /// The temporary files of drops to `name`.
    pub(crate) fn temporary_files_of(&self, name: &str) -> Vec<String> {
        self.entries_containing(&format!(".{name}.replaysafe-"))
    }

    /// A known_hosts file in `dir` that vouches for the server's key on `port` (a proxy's).
    pub(crate) fn known_hosts_for_port(&self, dir: &Path, port: u16) -> PathBuf {
        let line = std::fs::read_to_string(&self.known_hosts).unwrap();
        let (_, key) = line.trim().split_once(' ').unwrap();
        let path = dir.join(format!("known_hosts_{port}"));
        std::fs::write(&path, format!("[127.0.0.1]:{port} {key}\n")).unwrap();
        path
    }
}

pub(crate) fn guard_from(builder: SftpClientBuilder) -> (Guard<SftpClient>, Arc<MemoryJournal>) {
    let journal = Arc::new(MemoryJournal::new());
    let guard = builder
        .build(Arc::clone(&journal))
        .expect("valid test configuration")
        .with_retry(quick_retries());
    (guard, journal)
}

pub(crate) fn quick_retries() -> RetryPolicy {
    RetryPolicy::default()
        .with_base_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_millis(50))
}

/// A name prefix no other test (nor an earlier run against the same server) uses.
pub(crate) fn unique(test: &str) -> String {
    format!("{test}_{:08x}", fastrand::u32(..))
}

/// `len` bytes that differ with `seed`, not compressible into anything shorter.
pub(crate) fn payload(seed: &str, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 32);
    let mut block = Sha256::digest(seed.as_bytes());
    while out.len() < len {
        out.extend_from_slice(&block);
        block = Sha256::digest(block);
    }
    out.truncate(len);
    out
}

/// A TCP proxy on 127.0.0.1 to the sshd: the first connection is cut after `cut_after`
/// bytes from the client; later ones pass untouched.
#[derive(Debug)]
pub(crate) struct CuttingProxy {
    pub(crate) port: u16,
    connections: Arc<AtomicUsize>,
}

impl CuttingProxy {
    pub(crate) async fn start(upstream_port: u16, cut_after: usize) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let number = counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let Ok(upstream) = TcpStream::connect(("127.0.0.1", upstream_port)).await
                    else {
                        return;
                    };
                    if number == 0 {
                        cut(client, upstream, cut_after).await;
                    } else {
                        let (mut client, mut upstream) = (client, upstream);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        CuttingProxy { port, connections }
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn cut(client: TcpStream, upstream: TcpStream, cut_after: usize) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let downstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut upstream_read, &mut client_write).await;
        client_write
    });
    let mut buffer = vec![0; 16 * 1024];
    let mut passed = 0;
    while passed < cut_after {
        let Ok(read) = client_read.read(&mut buffer).await else {
            break;
        };
        if read == 0 {
            break;
        }
        let allowed = read.min(cut_after - passed);
        if upstream_write.write_all(&buffer[..allowed]).await.is_err() {
            break;
        }
        passed += allowed;
    }
    // Close both sides at once: the client sees its connection reset mid-upload.
    downstream.abort();
    let _ = downstream.await;
    drop(upstream_write);
    drop(client_read);
}

/// Whether anything connected to `listener` (non-blocking check).
pub(crate) fn was_contacted(listener: &std::net::TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    listener.accept().is_ok()
}
