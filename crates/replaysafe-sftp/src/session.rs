//! Opening authenticated SFTP sessions (blocking): TCP, handshake, host key check
//! against known_hosts, then key authentication. Runs on the blocking pool only.

use std::net::{TcpStream, ToSocketAddrs};

use base64::Engine as _;
use secrecy::ExposeSecret;
use ssh2::{CheckResult, HashType, KnownHostFileKind, MethodType, Session, Sftp};

use crate::Error;
use crate::config::{Config, Login};
use crate::error::Kind;

/// An authenticated session with its SFTP channel.
pub(crate) struct Connection {
    // Declared first so it is dropped before the session it runs on.
    pub(crate) sftp: Sftp,
    pub(crate) session: Session,
}

/// Opens a session: connect, handshake, verify the host key, authenticate, start SFTP.
pub(crate) fn connect(config: &Config) -> Result<Connection, Error> {
    let endpoint = format!("{}:{}", config.host, config.port);
    let tcp = tcp_connect(config)
        .map_err(|error| error.while_doing(format!("connecting to {endpoint}")))?;
    let _ = tcp.set_nodelay(true);

    let timeout_ms = u32::try_from(config.timeout.as_millis()).unwrap_or(u32::MAX);
    let mut session =
        Session::new().map_err(|error| Error::from_ssh("creating an ssh session", error))?;
    session.set_timeout(timeout_ms);
    if let Some(algorithms) = &config.host_key_algorithms {
        session
            .method_pref(MethodType::HostKey, algorithms)
            .map_err(|error| Error::invalid("host_key_algorithms", error.message().to_owned()))?;
    }
    session.set_tcp_stream(tcp);
    session
        .handshake()
        .map_err(|error| Error::from_ssh(format!("ssh handshake with {endpoint}"), error))?;

    // **Before** authentication: a server we do not know never sees our key.
    verify_host_key(config, &session)?;

    let (attempt, how) = match &config.login {
        Login::Key { path, passphrase } => (
            session.userauth_pubkey_file(
                &config.user,
                None,
                path,
                passphrase.as_ref().map(|secret| secret.expose_secret()),
            ),
            format!("with key {}", path.display()),
        ),
        Login::Password(password) => (
            session.userauth_password(&config.user, password.expose_secret()),
            "with a password".to_owned(),
        ),
    };
    attempt.map_err(|error| {
        let mut error = Error::from_ssh(
            format!("authenticating as {} on {endpoint} {how}", config.user),
            error,
        );
        if error.kind() == (Kind::Remote { transient: false }) {
            error = error.reclassified(Kind::Authentication);
        }
        error
    })?;
    if !session.authenticated() {
        return Err(Error::new(
            Kind::Authentication,
            format!("authenticating as {} on {endpoint}", config.user),
            "the server did not accept the credentials",
        ));
    }
    let sftp = session
        .sftp()
        .map_err(|error| Error::from_ssh(format!("starting sftp on {endpoint}"), error))?;
    tracing::debug!(
        target: "replaysafe_sftp",
        host = %config.host,
        port = config.port,
        user = %config.user,
        "sftp session opened"
    );
    Ok(Connection { sftp, session })
}

fn tcp_connect(config: &Config) -> Result<TcpStream, Error> {
    let addresses = (config.host.as_str(), config.port)
        .to_socket_addrs()
        .map_err(|error| Error::from_io("resolving the host", error))?;
    let mut last = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, config.connect_timeout) {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(match last {
        Some(error) => Error::from_io("tcp connect", error),
        None => Error::new(Kind::Connection, "resolving the host", "no address found"),
    })
}

fn verify_host_key(config: &Config, session: &Session) -> Result<(), Error> {
    let shown_host = if config.port == 22 {
        config.host.clone()
    } else {
        format!("[{}]:{}", config.host, config.port)
    };
    let context = format!("verifying the host key of {shown_host}");
    let Some((key, _kind)) = session.host_key() else {
        return Err(Error::new(
            Kind::HostKey,
            context,
            "the server sent no host key",
        ));
    };
    let fingerprint = session
        .host_key_hash(HashType::Sha256)
        .map(|hash| {
            format!(
                "SHA256:{}",
                base64::engine::general_purpose::STANDARD_NO_PAD.encode(hash)
            )
        })
        .unwrap_or_else(|| "unknown fingerprint".to_owned());
    let mut known_hosts = session
        .known_hosts()
        .map_err(|error| Error::from_ssh(context.clone(), error).reclassified(Kind::HostKey))?;
    known_hosts
        .read_file(&config.known_hosts, KnownHostFileKind::OpenSSH)
        .map_err(|error| {
            Error::new(
                Kind::HostKey,
                context.clone(),
                format!(
                    "reading {}: {}",
                    config.known_hosts.display(),
                    error.message()
                ),
            )
        })?;
    let problem = match known_hosts.check_port(&config.host, config.port, key) {
        CheckResult::Match => return Ok(()),
        CheckResult::NotFound => format!(
            "no key for {shown_host} in {}; the server presented {fingerprint}. \
             Add its line to known_hosts after checking the fingerprint with the partner",
            config.known_hosts.display()
        ),
        CheckResult::Mismatch => format!(
            "the server presented {fingerprint}, which does not match {}: \
             the host key changed or someone is in between",
            config.known_hosts.display()
        ),
        CheckResult::Failure => format!(
            "checking {fingerprint} against {} failed",
            config.known_hosts.display()
        ),
    };
    Err(Error::new(Kind::HostKey, context, problem))
}
