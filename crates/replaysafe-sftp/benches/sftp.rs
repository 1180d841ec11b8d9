//! Guarded SFTP drops against the same uploads made with raw ssh2, in one process, on
//! the real sshd of `cargo xtask services sshd`; and the cost of the idempotent
//! "already present" check.
//!
//! 200 files of 1 MiB per side, in rounds of 20 that alternate between the sides; each
//! side's fastest round counts (the machine is shared, so slow rounds are other work).
//!
//! - raw: one ssh2 session writing each file straight under its final name.
//! - guarded: `FileDrop::from_bytes` (SHA-256 of the content, for the journal and the
//!   idempotency check), gate, journal (a JSONL file), blocking-pool hand-off, stat of the
//!   final name, upload to a temporary name, rename.
//! - guarded, prebuilt: the same with the drops made (and hashed) before the clock starts,
//!   which isolates the cost of the guard and the atomic protocol.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use replaysafe_bench::{Report, per_second};
use replaysafe_core::{Guard, JsonlJournal, ReplayContext};
use replaysafe_sftp::{DropStatus, FileDrop, SftpClient};
use replaysafe_test::contexts;
use replaysafe_test::services::require;
use ssh2::{CheckResult, KnownHostFileKind, Session};
use tokio::runtime::Runtime;

const FILES: usize = 200;
const FILES_PER_ROUND: usize = 20;
const FILE_BYTES: usize = 1024 * 1024;
const CHECK_ROUNDS: usize = 10;
const CHECKS_PER_ROUND: usize = 5;

struct Server {
    port: u16,
    user: String,
    upload: PathBuf,
    key: PathBuf,
    known_hosts: PathBuf,
}

fn main() {
    let server = Server {
        port: require("REPLAYSAFE_TEST_SSHD_PORT")
            .parse()
            .expect("a port"),
        user: require("REPLAYSAFE_TEST_SSHD_USER"),
        upload: PathBuf::from(require("REPLAYSAFE_TEST_SSHD_UPLOAD")),
        key: PathBuf::from(require("REPLAYSAFE_TEST_SSHD_KEY")),
        known_hosts: PathBuf::from(require("REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS")),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let guard = SftpClient::builder("127.0.0.1", &server.user)
        .port(server.port)
        .private_key(&server.key)
        .known_hosts(&server.known_hosts)
        .remote_dir(server.upload.display().to_string())
        .build(JsonlJournal::open(scratch.path().join("journal.jsonl")).expect("journal"))
        .expect("a valid configuration");
    let raw = raw_session(&server);
    let cx = contexts::live();
    let content: Vec<u8> = (0..FILE_BYTES).map(|i| (i * 31 % 251) as u8).collect();
    let run = format!("{:08x}", fastrand::u32(..));

    // Warm up both paths (sessions, page cache).
    let warm = format!("bench_{run}_warm");
    raw_drop(&raw, &server.upload.join(format!("{warm}.raw")), &content);
    guarded_drops(
        &runtime,
        &guard,
        &cx,
        &[drop_of(&content, &format!("{warm}.guarded"))],
    );

    let mut raw_best = Duration::MAX;
    let mut guarded_best = Duration::MAX;
    let mut prebuilt_best = Duration::MAX;
    for round in 0..FILES / FILES_PER_ROUND {
        let names: Vec<String> = (0..FILES_PER_ROUND)
            .map(|i| format!("bench_{run}_{round}_{i}"))
            .collect();

        let started = Instant::now();
        for name in &names {
            raw_drop(&raw, &server.upload.join(format!("{name}.raw")), &content);
        }
        raw_best = raw_best.min(started.elapsed());

        let started = Instant::now();
        let drops: Vec<FileDrop> = names
            .iter()
            .map(|name| drop_of(&content, &format!("{name}.guarded")))
            .collect();
        guarded_drops(&runtime, &guard, &cx, &drops);
        guarded_best = guarded_best.min(started.elapsed());

        let drops: Vec<FileDrop> = names
            .iter()
            .map(|name| drop_of(&content, &format!("{name}.prebuilt")))
            .collect();
        let started = Instant::now();
        guarded_drops(&runtime, &guard, &cx, &drops);
        prebuilt_best = prebuilt_best.min(started.elapsed());

        remove_matching(&server.upload, &format!("bench_{run}_{round}_"));
    }

    // The idempotent check: a repeat of a drop already in place (stat, read back, hash).
    let present = drop_of(&content, &format!("{warm}.guarded"));
    let mut check_best = Duration::MAX;
    for _ in 0..CHECK_ROUNDS {
        let started = Instant::now();
        for _ in 0..CHECKS_PER_ROUND {
            let outcome = runtime
                .block_on(guard.send(&cx, &present))
                .expect("repeat drop");
            assert_eq!(
                outcome.receipt().unwrap().status,
                DropStatus::AlreadyPresent
            );
        }
        check_best = check_best.min(started.elapsed());
    }
    remove_matching(&server.upload, &warm);

    let started = Instant::now();
    for _ in 0..20 {
        std::hint::black_box(drop_of(&content, "hash.bin"));
    }
    let hash = started.elapsed() / 20;

    let per_file = |round: Duration| round.as_secs_f64() * 1e3 / FILES_PER_ROUND as f64;
    let throughput = |round: Duration| {
        (FILES_PER_ROUND * FILE_BYTES) as f64 / (1024.0 * 1024.0) / round.as_secs_f64()
    };
    let baseline = format!(
        "raw ssh2 writes of the same 1 MiB files on one session \
         ({FILES} files per side, best round of {FILES_PER_ROUND})"
    );
    let mut report = Report::new("sftp");
    report
        .figure("sftp.raw.drop_1mib", per_file(raw_best), "ms/file")
        .figure("sftp.guarded.drop_1mib", per_file(guarded_best), "ms/file")
        .figure(
            "sftp.guarded_prebuilt.drop_1mib",
            per_file(prebuilt_best),
            "ms/file",
        )
        .figure("sftp.raw.throughput", throughput(raw_best), "MiB/s")
        .figure("sftp.guarded.throughput", throughput(guarded_best), "MiB/s")
        .ratio(
            "sftp.guarded_vs_raw.throughput",
            per_second(FILES_PER_ROUND, guarded_best) / per_second(FILES_PER_ROUND, raw_best),
            baseline.clone(),
        )
        .ratio(
            "sftp.guarded_prebuilt_vs_raw.throughput",
            per_second(FILES_PER_ROUND, prebuilt_best) / per_second(FILES_PER_ROUND, raw_best),
            baseline,
        )
        .figure(
            "sftp.effect.from_bytes_1mib",
            hash.as_secs_f64() * 1e3,
            "ms/file",
        )
        .figure(
            "sftp.already_present.check_1mib",
            check_best.as_secs_f64() * 1e3 / CHECKS_PER_ROUND as f64,
            "ms/check",
        )
        .ratio(
            "sftp.already_present_vs_upload",
            (check_best.as_secs_f64() / CHECKS_PER_ROUND as f64)
                / (prebuilt_best.as_secs_f64() / FILES_PER_ROUND as f64),
            "a guarded upload of a 1 MiB file (prebuilt)",
        );
    let path = report.write().expect("writing the report");
    println!("report: {}", path.display());
}

fn drop_of(content: &[u8], name: &str) -> FileDrop {
    FileDrop::from_bytes("bench_export", name, content.to_vec())
}

fn guarded_drops(
    runtime: &Runtime,
    guard: &Guard<SftpClient>,
    cx: &ReplayContext,
    drops: &[FileDrop],
) {
    runtime.block_on(async {
        for drop in drops {
            let outcome = guard.send(cx, drop).await.expect("guarded drop");
            assert_eq!(outcome.receipt().unwrap().status, DropStatus::Uploaded);
        }
    });
}

/// What a pipeline would do without replaysafe: one session, host key checked once.
fn raw_session(server: &Server) -> ssh2::Sftp {
    let tcp = TcpStream::connect(("127.0.0.1", server.port)).expect("connecting");
    let mut session = Session::new().expect("a session");
    session.set_tcp_stream(tcp);
    session.handshake().expect("handshake");
    let mut known = session.known_hosts().expect("known hosts");
    known
        .read_file(&server.known_hosts, KnownHostFileKind::OpenSSH)
        .expect("reading known_hosts");
    let (key, _) = session.host_key().expect("a host key");
    assert!(matches!(
        known.check_port("127.0.0.1", server.port, key),
        CheckResult::Match
    ));
    session
        .userauth_pubkey_file(&server.user, None, &server.key, None)
        .expect("authenticating");
    // The Sftp handle keeps the session alive.
    session.sftp().expect("sftp")
}

fn raw_drop(sftp: &ssh2::Sftp, path: &Path, content: &[u8]) {
    let mut file = sftp.create(path).expect("creating");
    file.write_all(content).expect("writing");
    file.close().expect("closing");
}

fn remove_matching(dir: &Path, prefix: &str) {
    for entry in std::fs::read_dir(dir)
        .expect("reading the upload directory")
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
