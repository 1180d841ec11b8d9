//! Building the guarded clients, once, for the default mode (everything local) or for
//! `--real` (the loopback servers `cargo xtask demo --real` starts).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use replaysafe::alert::AlertmanagerClient;
use replaysafe::email::{EmailClient, TlsMode};
use replaysafe::metrics::PushgatewayClient;
use replaysafe::outbox::Route;
use replaysafe::sftp::SftpClient;
use replaysafe::webhook::{SigningSecret, SsrfPolicy, TriggerClient, WebhookClient};
use replaysafe::{Guard, Journal, JsonlJournal};
use secrecy::SecretString;

use crate::folder_drop::FolderDropClient;
use crate::publish::{PartnerDrop, Publishers};
use crate::receiver::{Receiver, WEBHOOK_PATH};
use crate::usage::{CountingRecorder, UsageMeter};

/// Where the effects go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// No server needed: `.eml` files, a local partner inbox, an in-process receiver and recorder.
    Local,
    /// The loopback servers: aiosmtpd, sshd, Alertmanager, Pushgateway.
    Real,
}

/// The clients, the receiver they (partly) talk to, and where deliveries can be seen.
#[derive(Debug)]
pub(crate) struct Setup {
    /// Every guarded client.
    pub(crate) publishers: Publishers,
    /// The in-process receiver (webhook, Airflow trigger, and alerts in the local mode).
    pub(crate) receiver: Receiver,
    /// The in-process usage recorder, in the local mode.
    pub(crate) recorder: Option<Arc<CountingRecorder>>,
    /// Where to look: a label and a path or URL.
    pub(crate) places: Vec<(&'static str, String)>,
    /// The partner's inbox folder, or the SFTP server's upload directory (on this machine).
    pub(crate) partner_dir: PathBuf,
    /// The `.eml` folder (local mode).
    pub(crate) mail_dir: Option<PathBuf>,
    /// Alertmanager's URL (`--real`).
    pub(crate) alertmanager: Option<String>,
    /// The SMTP server's Maildir (`--real`).
    pub(crate) maildir: Option<PathBuf>,
}

/// The value of a variable `--real` needs, or an error naming it.
fn required(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| {
        format!("--real needs {name}; `cargo xtask demo --real` starts the servers and sets it")
    })
}

/// A fresh Standard Webhooks secret for the partner: `whsec_` and 32 random bytes in base64.
/// It lives only in this process; it is never printed or journaled.
fn fresh_signing_secret() -> anyhow::Result<SecretString> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .context("reading /dev/urandom for the webhook secret")?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    Ok(SecretString::from(format!("whsec_{encoded}")))
}

/// The clients that differ between the modes, and where their deliveries land.
#[derive(Debug)]
struct ModeClients {
    mail: Guard<EmailClient>,
    partner_drop: PartnerDrop,
    usage: UsageMeter,
    alertmanager_url: String,
    recorder: Option<Arc<CountingRecorder>>,
    partner_dir: PathBuf,
    mail_dir: Option<PathBuf>,
    maildir: Option<PathBuf>,
    places: Vec<(&'static str, String)>,
}

/// The outbox route of the partner's webhook.
pub(crate) const PARTNER_ROUTE: &str = "partner_webhook";

/// Builds every client for `mode`, journaling to `journal`; local deliveries go under `dir`.
pub(crate) async fn build(
    mode: Mode,
    dir: &Path,
    journal: &Arc<JsonlJournal>,
) -> anyhow::Result<Setup> {
    let secret = fresh_signing_secret()?;
    let receiver = Receiver::start(SigningSecret::new(secret.clone())?).await?;
    let base = receiver.base_url().to_owned();
    // The receiver is on loopback, which the SSRF guard refuses unless allowed by name.
    let loopback = SsrfPolicy::default().allow_host("127.0.0.1");
    let partner_endpoint = format!("{base}{WEBHOOK_PATH}");
    // The partner webhook goes through the outbox: staged with the day's totals in one
    // transaction, delivered by a worker through this route.
    let partner_webhook = Route::new(
        PARTNER_ROUTE,
        WebhookClient::builder(&partner_endpoint)
            .signing_secret(secret)
            .ssrf_policy(loopback.clone())
            .build(Arc::clone(journal))?,
    )?;
    let downstream = TriggerClient::airflow(&base)
        .ssrf_policy(loopback.clone())
        .build(Arc::clone(journal))?;

    let clients = match mode {
        Mode::Local => local_clients(dir, journal, &base)?,
        Mode::Real => real_clients(journal)?,
    };
    let alerts = AlertmanagerClient::builder(&clients.alertmanager_url)
        .ssrf_policy(loopback)
        .build(Arc::clone(journal))?;
    let mut places = vec![("partner webhook, Airflow API", base)];
    places.extend(clients.places);
    Ok(Setup {
        alertmanager: (mode == Mode::Real).then(|| clients.alertmanager_url.clone()),
        publishers: Publishers {
            mail: clients.mail,
            partner_webhook,
            partner_endpoint,
            partner_drop: clients.partner_drop,
            downstream,
            usage: clients.usage,
            alerts,
            alertmanager_url: clients.alertmanager_url,
        },
        receiver,
        recorder: clients.recorder,
        places,
        partner_dir: clients.partner_dir,
        mail_dir: clients.mail_dir,
        maildir: clients.maildir,
    })
}

/// `.eml` files, a folder for the partner, the in-process recorder, alerts to the receiver.
fn local_clients(
    dir: &Path,
    journal: &Arc<JsonlJournal>,
    receiver_url: &str,
) -> anyhow::Result<ModeClients> {
    let mail_dir = dir.join("mail");
    let inbox = dir.join("partner-inbox");
    let shared: Arc<dyn Journal> = journal.clone();
    let recorder = Arc::new(CountingRecorder::default());
    Ok(ModeClients {
        mail: EmailClient::folder(&mail_dir).build(Arc::clone(journal))?,
        partner_drop: PartnerDrop::Folder(Guard::with_shared_journal(
            FolderDropClient::new(&inbox)?,
            Arc::clone(&shared),
        )),
        usage: UsageMeter::InProcess {
            recorder: Arc::clone(&recorder),
            journal: shared,
        },
        alertmanager_url: receiver_url.to_owned(),
        recorder: Some(recorder),
        places: vec![
            ("emails (.eml)", mail_dir.display().to_string()),
            ("partner file drops", inbox.display().to_string()),
            ("alerts (Alertmanager API)", receiver_url.to_owned()),
        ],
        partner_dir: inbox,
        mail_dir: Some(mail_dir),
        maildir: None,
    })
}

/// aiosmtpd, sshd, Alertmanager and the Pushgateway on loopback, found through the
/// variables `cargo xtask services` exports.
fn real_clients(journal: &Arc<JsonlJournal>) -> anyhow::Result<ModeClients> {
    let port = |name: &str| -> anyhow::Result<u16> {
        required(name)?
            .parse()
            .with_context(|| format!("{name} is not a port"))
    };
    let smtp_port = port("REPLAYSAFE_TEST_SMTP_PORT")?;
    let sshd_port = port("REPLAYSAFE_TEST_SSHD_PORT")?;
    let upload = required("REPLAYSAFE_TEST_SSHD_UPLOAD")?;
    let alertmanager_url = required("REPLAYSAFE_TEST_ALERTMANAGER_URL")?;
    let pushgateway = required("REPLAYSAFE_TEST_PUSHGATEWAY_URL")?;
    let maildir = required("REPLAYSAFE_TEST_SMTP_MAILDIR")?;
    // Plain SMTP is allowed to a loopback host only.
    let mail = EmailClient::smtp("127.0.0.1", smtp_port)
        .tls(TlsMode::Plaintext)
        .build(Arc::clone(journal))?;
    let sftp = SftpClient::builder("127.0.0.1", required("REPLAYSAFE_TEST_SSHD_USER")?)
        .port(sshd_port)
        .private_key(PathBuf::from(required("REPLAYSAFE_TEST_SSHD_KEY")?))
        .known_hosts(PathBuf::from(required("REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS")?))
        .remote_dir(&upload)
        .build(Arc::clone(journal))?;
    let gateway = PushgatewayClient::builder(&pushgateway)
        .ssrf_policy(SsrfPolicy::default().allow_host("127.0.0.1"))
        .build(Arc::clone(journal))?;
    Ok(ModeClients {
        mail,
        partner_drop: PartnerDrop::Sftp {
            client: sftp,
            server: format!("sftp://127.0.0.1:{sshd_port}"),
        },
        usage: UsageMeter::Pushgateway {
            gateway: Box::new(gateway),
            base_url: pushgateway.clone(),
        },
        recorder: None,
        places: vec![
            (
                "emails (aiosmtpd Maildir)",
                required("REPLAYSAFE_TEST_SMTP_MAILDIR")?,
            ),
            ("partner file drops (sshd upload dir)", upload.clone()),
            ("alerts (Alertmanager)", alertmanager_url.clone()),
            ("billed usage (Pushgateway)", pushgateway),
        ],
        alertmanager_url,
        partner_dir: PathBuf::from(upload),
        mail_dir: None,
        maildir: Some(PathBuf::from(maildir)),
    })
}
