//! `replaysafe send`: the gate for shell scripts and Airflow BashOperator tasks.
//!
//! The context comes from the environment exactly as in the SDK, the journal from
//! `REPLAYSAFE_JOURNAL` or `--journal`; secrets only from environment variables or files.
//! The journal must be a regular file: `/dev/null`, a device or a FIFO is refused, naming
//! the flag or the variable it came from.
//!
//! Exit codes: 0 delivered or suppressed; 1 a delivery was attempted and failed; 2 bad
//! input, or a journal that cannot be opened or cannot record the attempt (nothing was
//! sent); 3 ([`EXIT_OUTCOME_NOT_JOURNALED`]) an attempt was made and its outcome could not
//! be journaled, the message naming the effect, the journal and the key.
//!
//! Nothing secret or personal reaches stdout or stderr: an error names the flag and what
//! was wrong without repeating the value, a URL is shown as the journal shows it (scheme,
//! host, port and path at most, through the redaction policy chosen with `--redact`), and
//! an email address as `*@domain` unless `--redact full` is asked for.
//!
//! One module per subcommand; what they share (the context and journal, `--max-age`,
//! `--allow-host`, secrets from the environment, the stderr line per effect) is here.

pub mod alert;
pub mod email;
pub mod metric;
pub mod pipes;
pub mod sftp;
pub mod trigger;
pub mod webhook;

pub use email::{EmailRequest, email};
pub use webhook::{UrlSource, WebhookRequest, webhook};

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use chrono::TimeDelta;
use replaysafe_core::{
    Classify, EffectClient, EffectKind, EnvVarName, Guard, Journal, Outcome, RedactionPolicy,
    ReplayContext, SendError, TargetRedaction,
};

/// What every `send` takes besides its effect.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Common {
    /// Journal path (default: REPLAYSAFE_JOURNAL).
    #[arg(long)]
    pub journal: Option<PathBuf>,
    /// Override a kind's max age for this send, KIND=DURATION such as email=2h (repeatable; REPLAYSAFE_MAX_AGE sets them from the environment, and the flag wins).
    #[arg(long = "max-age", value_name = "KIND=DURATION", value_parser = crate::duration::parse_kind_age)]
    pub max_age: Vec<(EffectKind, TimeDelta)>,
    /// An opt-in file (replaysafe approve) to add to the context, as REPLAYSAFE_OPT_IN does (repeatable).
    #[arg(long = "opt-in", value_name = "FILE")]
    pub opt_in: Vec<PathBuf>,
    /// Deliver whatever the journal knows of the key: for an effect meant to repeat (a heartbeat, a counter that counts every run). Without it, a key the journal saw delivered is not sent again (already_delivered), nor one in doubt to a receiver that cannot drop repeats (in_doubt).
    #[arg(long = "no-ledger")]
    pub no_ledger: bool,
    /// Export each decision as an OpenTelemetry log record and each HTTP delivery as a client span, over OTLP/HTTP (configured by the OTEL_EXPORTER_OTLP_* variables); REPLAYSAFE_OTEL=1 does the same.
    #[arg(long)]
    pub otel: bool,
}

/// How a send ended, for the exit code.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Every effect was delivered or suppressed.
    Done,
    /// A delivery was attempted and failed.
    Failed,
}

/// How a target appears on stderr and in the journal (`--redact`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Redact {
    /// A URL as scheme, host, port and path; an email address in full.
    Full,
    /// A URL as scheme, host and port; an email address as `*@domain`.
    Origin,
    /// `sha256:` and 16 hex characters of the target: joinable across journals, not readable.
    Hashed,
}

impl Redact {
    /// The journal's redaction policy for this choice.
    pub fn policy(self) -> RedactionPolicy {
        RedactionPolicy::new(match self {
            Redact::Full => TargetRedaction::Full,
            Redact::Origin => TargetRedaction::DomainOnly,
            Redact::Hashed => TargetRedaction::Hashed,
        })
    }
}

/// The flag `argument` is, as errors name it: `--secret-env`.
fn flag_of(argument: Option<&clap::Arg>) -> String {
    argument
        .and_then(clap::Arg::get_long)
        .map_or_else(|| "a flag".to_owned(), |long| format!("--{long}"))
}

/// A clap error for `command` whose message is `message`, never the value given.
fn value_error(
    command: &clap::Command,
    kind: clap::error::ErrorKind,
    message: String,
) -> clap::Error {
    clap::Error::raw(kind, format!("{message}\n")).with_cmd(command)
}

/// A clap value parser for text flags: the value must be UTF-8. The error names the flag
/// and does not repeat the value, which may be a secret.
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8Text;

impl clap::builder::TypedValueParser for Utf8Text {
    type Value = String;

    fn parse_ref(
        &self,
        command: &clap::Command,
        argument: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        value.to_str().map(str::to_owned).ok_or_else(|| {
            value_error(
                command,
                clap::error::ErrorKind::InvalidUtf8,
                format!("{}: the value is not valid UTF-8", flag_of(argument)),
            )
        })
    }
}

/// A clap value parser for the `--…-env VARIABLE` flags: the value must be a variable name
/// ([`EnvVarName`]); anything else, most likely the secret itself pasted in its place, is
/// refused as "not a variable name", naming the flag and never repeating the value.
#[derive(Clone, Copy, Debug, Default)]
pub struct EnvVar;

impl clap::builder::TypedValueParser for EnvVar {
    type Value = EnvVarName;

    fn parse_ref(
        &self,
        command: &clap::Command,
        argument: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<EnvVarName, clap::Error> {
        EnvVarName::parse(flag_of(argument), value.to_str().unwrap_or_default()).map_err(|e| {
            value_error(
                command,
                clap::error::ErrorKind::ValueValidation,
                e.to_string(),
            )
        })
    }
}

/// A clap value parser for `--secret-header-env NAME=VARIABLE`: the header's name and the
/// variable holding its value, a [`EnvVarName`]. Errors never repeat the value.
#[derive(Clone, Copy, Debug, Default)]
pub struct SecretHeaderEnv;

impl clap::builder::TypedValueParser for SecretHeaderEnv {
    type Value = (String, EnvVarName);

    fn parse_ref(
        &self,
        command: &clap::Command,
        argument: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<(String, EnvVarName), clap::Error> {
        let flag = flag_of(argument);
        let invalid = |message: String| {
            value_error(command, clap::error::ErrorKind::ValueValidation, message)
        };
        let (name, variable) = value
            .to_str()
            .and_then(|text| text.split_once('='))
            .ok_or_else(|| invalid(format!("{flag}: expected NAME=VARIABLE")))?;
        let variable =
            EnvVarName::parse(flag.clone(), variable.trim()).map_err(|e| invalid(e.to_string()))?;
        Ok((name.trim().to_owned(), variable))
    }
}

/// Reads `@FILE` as the file's contents, anything else as itself.
pub fn text_or_file(flag: &str, value: &str) -> anyhow::Result<String> {
    match value.strip_prefix('@') {
        Some(path) => {
            let bytes = std::fs::read(path).with_context(|| format!("{flag}: reading {path}"))?;
            String::from_utf8(bytes).map_err(|_| anyhow!("{flag}: {path} is not valid UTF-8"))
        }
        None => Ok(value.to_owned()),
    }
}

/// `--allow-host`, for the subcommands that send over HTTP.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct AllowHosts {
    /// Host, IP address or CIDR network (127.0.0.0/8, ::1/128) the SSRF guard lets through even if internal (repeatable).
    #[arg(long = "allow-host", value_name = "HOST|CIDR", value_parser = Utf8Text)]
    pub allow_hosts: Vec<String>,
}

/// `K=V` for `flag`; the error names the flag and does not repeat the text.
fn parse_pair(flag: &str, text: &str) -> anyhow::Result<(String, String)> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| anyhow!("{flag}: expected NAME=VALUE"))?;
    let key = key.trim();
    if key.is_empty() {
        bail!("{flag}: expected NAME=VALUE (the name is empty)");
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

/// An adapter configuration's error as the command line says it, `PLACE: problem`: PLACE
/// is where the configuration field came from (a flag, a routes file's route and field),
/// and the adapter's own "invalid configuration FIELD:" is not repeated after it.
pub(crate) fn config_error(
    place: impl std::fmt::Display,
    field: Option<&str>,
    error: &(dyn std::error::Error + 'static),
) -> anyhow::Error {
    let chain = replaysafe_core::error_chain(error);
    let problem = field
        .filter(|_| chain.starts_with("invalid "))
        .and_then(|field| {
            let marker = format!(" {field}: ");
            chain.find(&marker).map(|at| &chain[at + marker.len()..])
        })
        .unwrap_or(&chain);
    anyhow!("{place}: {problem}")
}

/// The flag behind an adapter's field: `flags` maps field names to flags; anything else
/// is the subcommand itself.
fn flag_for(
    field: Option<&str>,
    flags: &[(&str, &'static str)],
    command: &'static str,
) -> &'static str {
    field
        .and_then(|field| flags.iter().find(|(name, _)| *name == field))
        .map_or(command, |(_, flag)| flag)
}

/// The guard layer every send builds its client on: the journal, consulted as the key's
/// memory unless `--no-ledger`.
fn layer(common: &Common, journal: &Arc<dyn Journal>) -> replaysafe_core::GuardLayer {
    replaysafe_core::GuardLayer::new(journal.clone()).with_ledger(!common.no_ledger)
}

/// The context from the environment, with `--max-age` applied, and the journal.
fn context_and_journal(common: &Common) -> anyhow::Result<(ReplayContext, Arc<dyn Journal>)> {
    let cx = crate::approve::send_context(&common.opt_in)?;
    let mut recency = cx.recency().clone();
    for (kind, age) in &common.max_age {
        recency = recency
            .with_max_age(kind.clone(), *age)
            .map_err(|e| anyhow!("--max-age: {e}"))?;
    }
    let cx = cx.with_recency(recency);
    let (path, named_by) = match (&common.journal, cx.journal_path()) {
        (Some(path), _) => (path.clone(), "--journal"),
        (None, Some(path)) => (path.to_path_buf(), "REPLAYSAFE_JOURNAL"),
        (None, None) => bail!(
            "no journal: set REPLAYSAFE_JOURNAL or pass --journal (every decision is journaled)"
        ),
    };
    // A path that is not a regular file (/dev/null, a FIFO) is refused: it keeps nothing.
    let journal = crate::journals::open(&path, named_by)?;
    Ok((cx, crate::telemetry::journal(journal)))
}

/// `send`'s exit code when an attempt was made and its outcome (`delivered` or `failed`)
/// could not be journaled: the journal shows the effect in doubt. Ask the receiver by the
/// key the message names before sending again.
pub const EXIT_OUTCOME_NOT_JOURNALED: u8 = 3;

/// An attempt was made and its outcome could not be journaled; `send` exits
/// [`EXIT_OUTCOME_NOT_JOURNALED`]. The message names the effect, whether it was
/// delivered, the journal and the key.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OutcomeNotJournaled(String);

/// Whether a send whose journal failed leaves its effect in doubt: an attempt was made
/// and its outcome (`delivered` or `failed`) is not in the journal.
fn left_in_doubt(delivered: bool, source: &replaysafe_core::journal::JournalError) -> bool {
    use replaysafe_core::journal::JournalDecision;
    delivered
        || matches!(
            source.decision(),
            Some(JournalDecision::Delivered | JournalDecision::Failed)
        )
}

/// The error of a send whose journal failed: what the journal lacks, and so what the
/// receiver may hold.
fn journal_failure(
    what: &str,
    target: &str,
    delivered: bool,
    source: &replaysafe_core::journal::JournalError,
    chain: String,
) -> anyhow::Error {
    use replaysafe_core::journal::JournalDecision;
    let key = source.idempotency_key().unwrap_or("unknown");
    match source.decision() {
        Some(JournalDecision::Delivered) | Some(JournalDecision::Failed) => {
            let done = if delivered {
                "was delivered"
            } else {
                "was attempted and the attempt failed"
            };
            anyhow::Error::new(OutcomeNotJournaled(format!(
                "{what} to {target} {done}, but the journal lacks the outcome: {chain}; the journal shows the effect in doubt: ask the receiver by key {key} before sending it again"
            )))
        }
        Some(JournalDecision::Attempting) => {
            anyhow!("{what} to {target}: nothing was sent: {chain}")
        }
        _ if delivered => anyhow::Error::new(OutcomeNotJournaled(format!(
            "{what} to {target} was delivered, but the journal lacks the outcome: {chain}"
        ))),
        _ => anyhow!("{what} to {target}: {chain}"),
    }
}

/// One line on stderr saying what happened to one effect; returns whether it failed.
fn announce<R, E: std::error::Error + Classify + 'static>(
    what: &str,
    target: &str,
    result: &Result<Outcome<R>, SendError<E>>,
    scrub: impl Fn(String) -> String,
) -> anyhow::Result<bool> {
    match result {
        Ok(Outcome::Delivered(delivered)) => {
            pipes::count(pipes::Counted::Delivered);
            eprintln!(
                "replaysafe: delivered {what} to {target} (attempts {}, key {})",
                delivered.attempts, delivered.key
            );
            Ok(false)
        }
        Ok(Outcome::Suppressed(suppressed)) => {
            pipes::count(pipes::Counted::Suppressed);
            let reasons: Vec<&str> = suppressed.reasons.iter().map(|r| r.as_str()).collect();
            // A run without a window says, on the same line, what to set.
            let note = if suppressed
                .reasons
                .contains(&replaysafe_core::Reason::UnknownWindow)
            {
                format!("; {}", replaysafe_core::NO_WINDOW_NOTE)
            } else {
                String::new()
            };
            eprintln!(
                "replaysafe: suppressed {what} to {target}: {} (key {}){note}",
                reasons.join(", "),
                suppressed.key
            );
            Ok(false)
        }
        Err(SendError::Failed { attempts, source }) => {
            pipes::count(pipes::Counted::Failed);
            eprintln!(
                "replaysafe: failed {what} to {target} after {attempts} attempt(s): {}",
                scrub(replaysafe_core::error_chain(source))
            );
            Ok(true)
        }
        Err(error @ SendError::Journal { delivered, source }) => {
            if left_in_doubt(*delivered, source) {
                pipes::count(pipes::Counted::InDoubt);
            }
            Err(journal_failure(
                what,
                target,
                *delivered,
                source,
                scrub(replaysafe_core::error_chain(error)),
            ))
        }
        Err(error) => Err(anyhow::Error::msg(format!(
            "{what} to {target}: {}",
            scrub(replaysafe_core::error_chain(error))
        ))),
    }
}

/// Flushes the journal and says how the send ended.
fn finish(journal: &dyn Journal, failed: anyhow::Result<bool>) -> anyhow::Result<Ended> {
    journal.flush()?;
    Ok(if failed? { Ended::Failed } else { Ended::Done })
}

/// Where `effect` goes, as the journal shows it; an invalid effect is an error naming the
/// flag `flag_of` gives for the adapter's error. Nothing is sent or journaled.
fn target_of<C>(
    guard: &Guard<C>,
    cx: &ReplayContext,
    effect: &C::Effect,
    flag_of: impl Fn(&C::Error) -> String,
) -> anyhow::Result<String>
where
    C: EffectClient,
    C::Error: std::error::Error + Classify + 'static,
{
    let preview = guard.preview(cx, effect).map_err(|e| match &e {
        SendError::Invalid(invalid) => anyhow!(
            "{}: {}",
            flag_of(invalid),
            replaysafe_core::error_chain(invalid)
        ),
        other => anyhow!("{}", replaysafe_core::error_chain(other)),
    })?;
    Ok(guard
        .redaction()
        .target()
        .apply(preview.description.target())
        .into_owned())
}

/// Sends one effect through `guard`, says on stderr what became of it (`what` to the
/// target as the journal shows it), and flushes the journal.
async fn send_one<C>(
    guard: &Guard<C>,
    cx: &ReplayContext,
    effect: &C::Effect,
    what: &str,
    flag_of: impl Fn(&C::Error) -> String,
    journal: &dyn Journal,
) -> anyhow::Result<Ended>
where
    C: EffectClient,
    C::Error: std::error::Error + Classify + 'static,
{
    let target = target_of(guard, cx, effect, flag_of)?;
    let result = guard.send(cx, effect).await;
    finish(journal, announce(what, &target, &result, |text| text))
}

/// Reads `@FILE` or the text itself as JSON; errors name `flag`.
pub fn json_value(flag: &str, value: &str) -> anyhow::Result<serde_json::Value> {
    let text = text_or_file(flag, value)?;
    serde_json::from_str(&text).map_err(|e| anyhow!("{flag}: not valid JSON ({e})"))
}
