//! `replaysafe approve`: opt-in files a reviewer writes (and signs) after seeing what they
//! cover, approver keys, and the `--opt-in` files of `send`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use chrono::{DateTime, TimeDelta, Utc};
use replaysafe_core::{ApproverKey, EffectKind, OptIn, ReplayContext, Window};

use crate::plan;
use crate::render::Format;

/// Which runs an approval covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runs {
    /// The runs of one backfill (`REPLAYSAFE_BACKFILL_ID`).
    Backfill(String),
    /// Runs whose id matches a pattern with `*`.
    Pattern(String),
}

/// The backfill whose plan is shown before the approval is written.
#[derive(Clone, Debug)]
pub struct Range {
    /// The whole range.
    pub range: Window,
    /// Window length.
    pub every: TimeDelta,
    /// Each run is an instant.
    pub instants: bool,
}

/// An approval to write.
#[derive(Debug)]
pub struct Request {
    /// Pipeline.
    pub pipeline: String,
    /// The runs it covers.
    pub runs: Runs,
    /// Effect kinds.
    pub kinds: Vec<EffectKind>,
    /// Exact targets, or none for every target.
    pub targets: Vec<String>,
    /// Why.
    pub reason: String,
    /// Who approves.
    pub approved_by: String,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// The secret key to sign with.
    pub key: Option<PathBuf>,
    /// Where to write the file.
    pub out: PathBuf,
    /// Replace a file already at `out`.
    pub force: bool,
    /// Write an approval that [`broadness`] finds broad.
    pub broad: bool,
    /// The backfill to plan, when given.
    pub range: Option<Range>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// How long an approval may last before it is broad: 30 days.
pub const LONGEST_NARROW: TimeDelta = TimeDelta::days(30);

/// What makes an approval broad, in words, one item per reason; empty when it is not.
///
/// An approval is broad when its run-id pattern matches every run (`*`, or any pattern of
/// stars only: scheduled runs included), or when it lasts longer than [`LONGEST_NARROW`].
/// Kinds are not a reason: each is named by its own `--kind`, and there is no shorthand
/// for all of them.
pub fn broadness(request: &Request) -> Vec<String> {
    let mut broad = Vec::new();
    if let Runs::Pattern(pattern) = &request.runs
        && replaysafe_core::approval::matches_every_run_id(pattern)
    {
        broad.push(format!(
            "--run-id-pattern {pattern:?} matches every run of the pipeline, scheduled ones included"
        ));
    }
    let lasts = request.expires_at - request.now;
    if lasts > LONGEST_NARROW {
        broad.push(format!(
            "--expires {} is {} days from now, more than {}",
            replaysafe_core::rfc3339(request.expires_at),
            lasts.num_days(),
            crate::duration::format(LONGEST_NARROW)
        ));
    }
    broad
}

/// `--expires`: a duration from now (`2h`, `1d`) or an RFC 3339 time (not a leap second);
/// it must lie ahead, and within what the clock can hold.
pub fn parse_expiry(text: &str, now: DateTime<Utc>) -> anyhow::Result<DateTime<Utc>> {
    let text = text.trim();
    let expires_at = if DateTime::parse_from_rfc3339(text).is_ok() {
        replaysafe_core::parse_rfc3339("--expires", text)?
    } else {
        let duration = crate::duration::parse(text).map_err(|problem| {
            if problem.contains("not a duration") {
                anyhow::anyhow!(
                    "--expires: {text:?} is neither a duration (2h, 1d) nor an RFC 3339 time"
                )
            } else {
                anyhow::anyhow!("--expires: {problem}")
            }
        })?;
        now.checked_add_signed(duration).ok_or_else(|| {
            anyhow::anyhow!(
                "--expires: {text} from now is beyond the latest time the clock can hold"
            )
        })?
    };
    if expires_at <= now {
        bail!(
            "--expires: {} is not in the future",
            replaysafe_core::rfc3339(expires_at)
        );
    }
    Ok(expires_at)
}

/// Builds the opt-in, prints what it covers (the backfill's plan for its kinds, when a
/// range is given) and writes the file; returns what was printed.
pub fn approve(request: &Request) -> anyhow::Result<String> {
    anyhow::ensure!(
        !request.kinds.is_empty(),
        "--kind: name at least one effect kind"
    );
    let mut opt_in = OptIn::new(&request.reason, &request.approved_by, request.expires_at)
        .context("--reason and --approved-by")?
        .for_pipeline(&request.pipeline);
    opt_in = match &request.runs {
        Runs::Backfill(id) => opt_in.for_backfill(id),
        Runs::Pattern(pattern) => opt_in.for_run_ids(pattern),
    };
    for kind in &request.kinds {
        opt_in = opt_in.for_kind(kind.clone());
    }
    for target in &request.targets {
        opt_in = opt_in.for_target(target);
    }
    let broad = broadness(request);
    if !broad.is_empty() && !request.broad {
        eprint!("{}", describe(&opt_in));
        bail!(
            "this approval is broad: {}; check the scope above and pass --broad to write it anyway",
            broad.join("; and ")
        );
    }
    if let Some(path) = &request.key {
        let key = ApproverKey::read_file(path).context("--key")?;
        opt_in = opt_in.signed_with(&key)?;
    }
    let text = opt_in.to_file_json()?;
    // What is written must read back as it was meant: a blank target or a control
    // character in a name fails here, not in the backfill's first task.
    let read_back = OptIn::from_file_json(&text).context("checking the opt-in file")?;
    anyhow::ensure!(
        read_back == opt_in,
        "the opt-in file would not read back as written"
    );

    let mut shown = describe(&opt_in);
    for reason in &broad {
        let _ = writeln!(shown, "  {:<12} {reason} (--broad)", "broad");
    }
    match &request.range {
        Some(range) => shown.push_str(&plan_text(request, range)?),
        None => shown.push_str(
            "\n(pass --start, --end and --every to see the backfill's plan for these kinds)\n",
        ),
    }
    write_new(&request.out, text.as_bytes(), request.force, None).context("--out")?;
    let _ = writeln!(shown, "\nwrote {}", request.out.display());
    Ok(shown)
}

/// What an opt-in covers, in words.
pub fn describe(opt_in: &OptIn) -> String {
    let mut out = String::from("this approval lets these effects be delivered from a replay:\n");
    let kinds: Vec<&str> = opt_in.kinds().iter().map(EffectKind::as_str).collect();
    let mut line = |label: &str, value: String| {
        let _ = writeln!(out, "  {label:<12} {value}");
    };
    line("pipeline", opt_in.pipeline().unwrap_or("any").to_owned());
    if let Some(id) = opt_in.backfill_id() {
        line("backfill id", id.to_owned());
    }
    if let Some(pattern) = opt_in.run_id_pattern() {
        line("run ids", pattern.to_owned());
    }
    line("kinds", kinds.join(", "));
    line(
        "targets",
        opt_in.targets().map_or_else(
            || "every target".to_owned(),
            |t| t.iter().cloned().collect::<Vec<_>>().join(", "),
        ),
    );
    line("reason", opt_in.reason().to_owned());
    line("approved by", opt_in.approved_by().to_owned());
    line("expires", replaysafe_core::rfc3339(opt_in.expires_at()));
    line(
        "signed",
        opt_in
            .signer_fingerprint()
            .map_or_else(|| "no".to_owned(), |fp| format!("by key {fp}")),
    );
    out
}

/// The plan of the backfill for the approval's kinds, and what the approval lifts in it.
fn plan_text(request: &Request, range: &Range) -> anyhow::Result<String> {
    let plan = plan::build(&plan::Request {
        pipeline: request.pipeline.clone(),
        range: range.range,
        every: range.every,
        instants: range.instants,
        kind: replaysafe_core::RunKind::Backfill,
        now: request.now,
        max_age: Vec::new(),
        effects: request.kinds.clone(),
    })?;
    let (mut lifted, mut stays) = (0u64, 0u64);
    for cell in plan.windows.iter().flat_map(|w| &w.effects) {
        let liftable = cell
            .reasons
            .iter()
            .all(|r| matches!(r.as_str(), "replay_run" | "replay_flag" | "stale_window"));
        if !cell.deliver && liftable {
            lifted += 1;
        } else if !cell.deliver {
            stays += 1;
        }
    }
    let mut out = String::from("\nthe backfill without this approval:\n");
    out.push_str(&plan::render(&plan, Format::Table));
    let _ = writeln!(
        out,
        "\nwith it, {lifted} window-kind pair(s) may deliver (up to every covered target in each); \
         {stays} stay suppressed for reasons no approval lifts"
    );
    Ok(out)
}

/// Writes `bytes` to a new file at `path` (with `mode` on Unix, when given); a file already
/// there is an error unless `force`, and is then replaced by a new file (so `mode` holds).
fn write_new(path: &Path, bytes: &[u8], force: bool, mode: Option<u32>) -> anyhow::Result<()> {
    if force && std::fs::symlink_metadata(path).is_ok() {
        std::fs::remove_file(path).with_context(|| format!("replacing {}", path.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if let Some(mode) = mode {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = match options.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists; pass --force to replace it",
            path.display()
        ),
        opened => opened.with_context(|| format!("writing {}", path.display()))?,
    };
    file.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// Refuses a `keygen --name` that is not a plain name: it names the files `DIR/NAME.key`
/// and `DIR/NAME.pub`, so it may not hold `/` or `\\`, be or hold `..`, start with `.`, or
/// hold a control character. The error does not repeat the name.
fn plain_name(name: &str) -> anyhow::Result<()> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains("..")
        && !name
            .chars()
            .any(|c| matches!(c, '/' | '\\') || c.is_control());
    anyhow::ensure!(
        plain,
        "--name: not a plain name (no /, \\, .., leading . or control characters): \
         it names the key files DIR/NAME.key and DIR/NAME.pub"
    );
    Ok(())
}

/// `replaysafe approve keygen`: writes `DIR/NAME.key` (mode 0600) and `DIR/NAME.pub`
/// (`NAME KEY`), neither over an existing file unless `force`; returns what to tell the
/// approver.
pub fn keygen(name: &str, dir: &Path, force: bool) -> anyhow::Result<String> {
    plain_name(name)?;
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("drawing a random key: {e}"))?;
    let key = ApproverKey::from_seed(name, seed).context("--name")?;
    std::fs::create_dir_all(dir).with_context(|| format!("--out: creating {}", dir.display()))?;
    let secret_path = dir.join(format!("{name}.key"));
    let public_path = dir.join(format!("{name}.pub"));
    if !force {
        for path in [&secret_path, &public_path] {
            if path.exists() {
                bail!(
                    "{} already exists; keys are never overwritten unless --force is given",
                    path.display()
                );
            }
        }
    }
    write_new(
        &secret_path,
        key.to_secret_file().as_bytes(),
        force,
        Some(0o600),
    )?;
    write_new(&public_path, key.public_line().as_bytes(), force, None)?;
    Ok(format!(
        "wrote {} (secret: keep it to yourself) and {}\nfingerprint {}\nadd {} to REPLAYSAFE_TRUSTED_APPROVERS to trust it\n",
        secret_path.display(),
        public_path.display(),
        key.fingerprint(),
        public_path.display(),
    ))
}

/// The context of a `send`: the environment (`REPLAYSAFE_OPT_IN` and
/// `REPLAYSAFE_TRUSTED_APPROVERS` included) and every `--opt-in` file.
pub fn send_context(opt_in_files: &[PathBuf]) -> anyhow::Result<ReplayContext> {
    let mut cx = ReplayContext::from_env().context("resolving the context from the environment")?;
    for path in opt_in_files {
        cx = cx.with_opt_in(OptIn::read_file(path).context("--opt-in")?);
    }
    Ok(cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_a_duration_or_a_time_ahead() {
        let now = "2026-08-06T01:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(parse_expiry("2h", now).unwrap(), now + TimeDelta::hours(2));
        assert_eq!(
            parse_expiry("2026-08-07T00:00:00Z", now).unwrap(),
            "2026-08-07T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(parse_expiry("2026-08-05T00:00:00Z", now).is_err());
        assert!(
            parse_expiry("soon", now)
                .unwrap_err()
                .to_string()
                .contains("--expires")
        );
        for beyond in [
            "99999999999d",
            "9999999999999s",
            "15250000000w",
            "99999999999999999999d",
        ] {
            let error = parse_expiry(beyond, now).unwrap_err().to_string();
            assert!(error.starts_with("--expires: "), "{beyond}: {error}");
        }
        let error = format!(
            "{:#}",
            parse_expiry("2026-12-31T23:59:60Z", now).unwrap_err()
        );
        assert!(
            error.contains("--expires") && error.contains("leap second"),
            "{error}"
        );
    }

    #[test]
    fn key_names_are_plain_file_names() {
        for good in ["jane", "jane.doe", "ops-2026", "j_1"] {
            assert!(plain_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "../jane",
            "a/b",
            "a\\b",
            "..",
            "a..b",
            ".hidden",
            "ja\nne",
            "ja\u{7f}ne",
        ] {
            assert!(plain_name(bad).is_err(), "{bad:?}");
        }
    }
}
