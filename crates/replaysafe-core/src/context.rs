//! The replay context: what this run is, resolved once and passed explicitly.

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::{
    Clock, Error, Mode, OptIn, RecencyPolicy, RunId, RunKind, SystemClock, TrustedApprovers,
    UpstreamRun, Window,
};

/// Everything the gate needs to know about a run: pipeline, run id, run kind, data
/// window, explicit replay flag, backfill id, mode, recency policy, opt-ins and clock;
/// and, when an orchestrator gave them, the run's logical date and exported data interval.
///
/// Cheap to clone (one `Arc`); `with_*` methods return a changed copy.
/// Build it with [`ReplayContext::builder`], or from the environment with
/// [`ReplayContext::from_env`] (see the crate docs for the variables).
#[derive(Clone)]
pub struct ReplayContext {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    pipeline: String,
    run_id: RunId,
    run_kind: RunKind,
    replay_flag: Option<bool>,
    window: Window,
    window_text: (String, String),
    /// Whether any source gave the window; without one `window` is a placeholder (the
    /// Unix epoch's instant) and every effect is suppressed with `unknown_window`.
    window_known: bool,
    upstream: Vec<UpstreamRun>,
    logical_date: Option<DateTime<Utc>>,
    run_interval: Option<Window>,
    backfill_id: Option<String>,
    mode: Mode,
    recency: RecencyPolicy,
    opt_ins: Vec<OptIn>,
    trusted_approvers: Option<Arc<TrustedApprovers>>,
    clock: Arc<dyn Clock>,
    journal_path: Option<PathBuf>,
    conflict: Option<String>,
}

/// What to set when a run has no data window: the note journaled with every effect such a
/// run suppresses (`unknown_window`), and the line `replaysafe send` prints.
pub const NO_WINDOW_NOTE: &str = "no data window: set REPLAYSAFE_WINDOW_START and REPLAYSAFE_WINDOW_END \
    (RFC 3339; equal for an instant), or run under an orchestrator that exports one \
    (AIRFLOW_CTX_LOGICAL_DATE; REPLAYSAFE_UPSTREAM, which the replaysafe.airflow hook exports, for an asset-triggered run)";

/// A name people read and the journal records: non-empty, without control characters or
/// bidirectional overrides. The error names `field`.
pub(crate) fn checked_name(field: &'static str, value: String) -> Result<String, Error> {
    if value.trim().is_empty() {
        return Err(Error::Missing {
            field,
            hint: "must not be empty",
        });
    }
    if value.chars().any(crate::run::is_hidden_char) {
        return Err(Error::invalid(
            field,
            value.escape_debug().to_string(),
            crate::run::HIDDEN_CHARS,
        ));
    }
    Ok(value)
}

impl fmt::Debug for ReplayContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("ReplayContext")
            .field("pipeline", &inner.pipeline)
            .field("run_id", &inner.run_id)
            .field("run_kind", &inner.run_kind)
            .field("replay_flag", &inner.replay_flag)
            .field("window", &inner.window_known.then_some(&inner.window))
            .field("upstream", &inner.upstream)
            .field("logical_date", &inner.logical_date)
            .field("run_interval", &inner.run_interval)
            .field("backfill_id", &inner.backfill_id)
            .field("mode", &inner.mode)
            .field("recency", &inner.recency)
            .field("opt_ins", &inner.opt_ins)
            .field("trusted_approvers", &inner.trusted_approvers)
            .field("journal", &self.journal_shown())
            .field("conflict", &inner.conflict)
            .finish_non_exhaustive()
    }
}

impl ReplayContext {
    /// Starts a builder.
    ///
    /// ```
    /// use chrono::{TimeZone, Utc};
    /// use replaysafe_core::{ReplayContext, RunKind, Window};
    ///
    /// let cx = ReplayContext::builder()
    ///     .pipeline("daily_orders")
    ///     .run_id("backfill__2026-08-05")
    ///     .run_kind(RunKind::Backfill)
    ///     .window(Window::new(
    ///         Utc.with_ymd_and_hms(2026, 8, 5, 0, 0, 0).unwrap(),
    ///         Utc.with_ymd_and_hms(2026, 8, 6, 0, 0, 0).unwrap(),
    ///     )?)
    ///     .build()?;
    /// assert!(cx.is_replay());
    /// # Ok::<(), replaysafe_core::Error>(())
    /// ```
    pub fn builder() -> ReplayContextBuilder {
        ReplayContextBuilder::default()
    }

    /// Resolves the context from the process environment (`REPLAYSAFE_*` and `AIRFLOW_CTX_*`).
    ///
    /// Variables replaysafe does not read are ignored, even when they are not UTF-8; one it
    /// reads that is not UTF-8 is [`Error::Invalid`] naming it.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_vars_os(std::env::vars_os())
    }

    /// Resolves the context from the given variables, exactly as [`ReplayContext::from_env`] does.
    ///
    /// The rules, in short (`docs/reference/environment.md` has them whole):
    ///
    /// - Explicit `REPLAYSAFE_*` values name the effect and may refine Airflow's run
    ///   (scheduled → retry), but never make a replay look current: when both give a run
    ///   kind and only one of them suppresses (a replay kind, or unknown), the context is
    ///   conflicting and suppresses every effect.
    /// - The window is the explicit one, else Airflow's exported data interval, else the
    ///   instant of Airflow's logical date. An empty interval is an instant `[t, t]`.
    /// - Without any run kind information the kind is [`RunKind::Unknown`] (every effect
    ///   suppressed).
    ///
    /// Empty and all-blank values count as unset, except `REPLAYSAFE_TRUSTED_APPROVERS`,
    /// whose being set turns a check on: blank, it is [`Error::Invalid`]. A malformed value is [`Error::Invalid`]
    /// naming the variable; a missing pipeline, run id or window is [`Error::Missing`]; an
    /// inverted window is [`Error::InvertedWindow`].
    pub fn from_vars<I, K, V>(vars: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        crate::env::resolve(
            &vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .filter(|(k, v): &(String, String)| crate::env::keep(k, v))
                .collect(),
        )
    }

    /// [`ReplayContext::from_vars`] for variables as the operating system gives them.
    ///
    /// A variable replaysafe does not read is ignored, whatever its bytes; one it reads
    /// whose value is not UTF-8 is [`Error::Invalid`] naming it.
    pub fn from_vars_os<I>(vars: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        crate::env::resolve(&crate::env::read_os(vars)?)
    }

    /// The pipeline name.
    pub fn pipeline(&self) -> &str {
        &self.inner.pipeline
    }

    /// The execution attempt id.
    pub fn run_id(&self) -> &RunId {
        &self.inner.run_id
    }

    /// The run kind as resolved.
    pub fn run_kind(&self) -> RunKind {
        self.inner.run_kind
    }

    /// The explicit replay flag, when one was given.
    pub fn replay_flag(&self) -> Option<bool> {
        self.inner.replay_flag
    }

    /// The data window. When no source gave one ([`ReplayContext::has_window`] is false)
    /// it is a placeholder, the Unix epoch's instant, and every effect is suppressed with
    /// `unknown_window`.
    pub fn window(&self) -> &Window {
        &self.inner.window
    }

    /// Whether a source gave the data window: the explicit one, the orchestrator's, or the
    /// span of the upstream runs' windows.
    pub fn has_window(&self) -> bool {
        self.inner.window_known
    }

    /// Why the run has no window and what to set, when it has none; the journal records it
    /// as the note of every effect it suppresses.
    pub fn window_note(&self) -> Option<&'static str> {
        (!self.inner.window_known).then_some(NO_WINDOW_NOTE)
    }

    /// The runs that caused this one (`REPLAYSAFE_UPSTREAM`), if any.
    pub fn upstream(&self) -> &[UpstreamRun] {
        &self.inner.upstream
    }

    /// Whether a run that caused this one is a replay: every effect is then suppressed
    /// with `upstream_replay`, unless an opt-in naming this pipeline lifts it.
    pub fn is_upstream_replay(&self) -> bool {
        self.inner.upstream.iter().any(|run| run.kind().is_replay())
    }

    /// The run's logical date, when the orchestrator gave one (`AIRFLOW_CTX_LOGICAL_DATE`).
    pub fn logical_date(&self) -> Option<DateTime<Utc>> {
        self.inner.logical_date
    }

    /// The data interval the orchestrator exported for this run, when it did
    /// (`AIRFLOW_CTX_DATA_INTERVAL_START`/`_END`); it may differ from [`ReplayContext::window`]
    /// when an explicit window names the effect.
    pub fn run_interval(&self) -> Option<&Window> {
        self.inner.run_interval.as_ref()
    }

    /// The time recency is measured from: the window's end, or the end of the exported
    /// run interval when that is older (the older end wins).
    pub fn recency_end(&self) -> DateTime<Utc> {
        match &self.inner.run_interval {
            Some(interval) => interval.end().min(self.inner.window.end()),
            None => self.inner.window.end(),
        }
    }

    /// Whether the window or the exported run interval ends in the future at `now`, beyond
    /// the clock-skew allowance.
    pub fn is_future(&self, now: DateTime<Utc>) -> bool {
        let latest_end = match &self.inner.run_interval {
            Some(interval) => interval.end().max(self.inner.window.end()),
            None => self.inner.window.end(),
        };
        self.inner.recency.is_future(latest_end, now)
    }

    /// Whether the window starts after the run's logical date, beyond the clock-skew
    /// allowance: a window from the run's future, such as one computed from the wall clock
    /// in a run that is days late.
    pub fn is_window_after_logical_date(&self) -> bool {
        self.inner.window_known
            && self.inner.logical_date.is_some_and(|logical| {
                self.inner.window.start() - logical > self.inner.recency.clock_skew()
            })
    }

    /// Whether the run carries a backfill id while its kind says it is current (scheduled,
    /// manual, retry or resume): a run of a backfill is a replay, so one of the two is wrong.
    /// Backfill, replay and rebuild runs carry one rightly; an unknown run suppresses anyway.
    pub fn is_current_run_in_a_backfill(&self) -> bool {
        self.inner.backfill_id.is_some()
            && matches!(
                self.inner.run_kind,
                RunKind::Scheduled | RunKind::Manual | RunKind::Retry | RunKind::Resume
            )
    }

    /// Whether the context's sources disagree; a conflicting context suppresses every effect.
    pub fn is_conflicting(&self) -> bool {
        self.inner.conflict.is_some()
            || self.is_window_after_logical_date()
            || self.is_current_run_in_a_backfill()
    }

    /// The window's start and end as canonical RFC 3339, formatted once.
    pub(crate) fn window_text(&self) -> (&str, &str) {
        (&self.inner.window_text.0, &self.inner.window_text.1)
    }

    /// The backfill id grouping the runs of one backfill.
    pub fn backfill_id(&self) -> Option<&str> {
        self.inner.backfill_id.as_deref()
    }

    /// Live or dry-run.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// Max age per effect kind.
    pub fn recency(&self) -> &RecencyPolicy {
        &self.inner.recency
    }

    /// The opt-ins in force.
    pub fn opt_ins(&self) -> &[OptIn] {
        &self.inner.opt_ins
    }

    /// The approvers whose signed opt-ins alone may lift anything, when configured
    /// (`REPLAYSAFE_TRUSTED_APPROVERS`).
    pub fn trusted_approvers(&self) -> Option<&TrustedApprovers> {
        self.inner.trusted_approvers.as_deref()
    }

    /// Where the journal should go, from `REPLAYSAFE_JOURNAL`.
    pub fn journal_path(&self) -> Option<&Path> {
        self.inner.journal_path.as_deref()
    }

    /// [`ReplayContext::journal_path`] as people may see it: a database URL's password
    /// (`postgres://user:secret@host/db`) is shown as `…`.
    pub fn journal_shown(&self) -> Option<String> {
        self.journal_path()
            .map(|path| without_password(&path.to_string_lossy()))
    }

    /// Opens the journal at [`ReplayContext::journal_path`] (`REPLAYSAFE_JOURNAL`) for
    /// appending, durably (every record reaches the operating system before `append`
    /// returns), to share between the run's guards: pass it, or clones of it, to every
    /// adapter builder's `build`.
    ///
    /// Without a journal path this is [`Error::Missing`] naming `REPLAYSAFE_JOURNAL`; a
    /// file that cannot be opened, or a path that is not a regular file (`/dev/null`, a
    /// device, a FIFO: a journal that keeps nothing is not a journal), is [`Error::Journal`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("journal.jsonl").display().to_string();
    /// use replaysafe_core::ReplayContext;
    /// let cx = ReplayContext::from_vars([
    ///     ("REPLAYSAFE_PIPELINE", "daily_orders"), ("REPLAYSAFE_RUN_ID", "r1"),
    ///     ("REPLAYSAFE_WINDOW_START", "2026-08-05T00:00:00Z"), ("REPLAYSAFE_WINDOW_END", "2026-08-06T00:00:00Z"),
    ///     ("REPLAYSAFE_JOURNAL", &path),
    /// ])?;
    /// let journal = cx.open_journal()?;
    /// assert_eq!(journal.path().display().to_string(), path);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_journal(&self) -> Result<Arc<crate::JsonlJournal>, Error> {
        let path = self.journal_path().ok_or(Error::Missing {
            field: crate::env::vars::JOURNAL,
            hint: "set REPLAYSAFE_JOURNAL to the journal's path (or pass --journal on the command line)",
        })?;
        let text = path.to_string_lossy();
        if ["postgres://", "postgresql://", "sqlite:"]
            .iter()
            .any(|scheme| text.starts_with(scheme))
        {
            // The URL may hold a password: it is not repeated.
            return Err(Error::invalid(
                crate::env::vars::JOURNAL,
                "a database URL",
                "names a database journal, which this crate does not open: open it with replaysafe_outbox::postgres::PostgresJournal or replaysafe_outbox::sqlite::SqliteJournal (the replaysafe command line does)",
            ));
        }
        Ok(Arc::new(crate::JsonlJournal::open(path)?))
    }

    /// What disagreed, when the context's sources did; it suppresses every effect.
    pub fn conflict(&self) -> Option<Cow<'_, str>> {
        let future = self.is_window_after_logical_date().then(|| {
            format!(
                "the window starts at {} but the run's logical date is {}",
                crate::rfc3339(self.inner.window.start()),
                self.inner
                    .logical_date
                    .map(crate::rfc3339)
                    .unwrap_or_default()
            )
        });
        let backfill = self.is_current_run_in_a_backfill().then(|| {
            format!(
                "the run is {} but carries backfill id {:?} ({}): a run of a backfill is a replay",
                self.inner.run_kind,
                self.inner.backfill_id.as_deref().unwrap_or_default(),
                crate::env::vars::BACKFILL_ID
            )
        });
        let derived: Vec<String> = future.into_iter().chain(backfill).collect();
        match (&self.inner.conflict, derived.is_empty()) {
            (None, true) => None,
            (Some(note), true) => Some(Cow::Borrowed(note)),
            (None, false) => Some(Cow::Owned(derived.join("; "))),
            (Some(note), false) => Some(Cow::Owned(format!("{note}; {}", derived.join("; ")))),
        }
    }

    /// The injected clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Now, by the injected clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.inner.clock.now()
    }

    /// Whether this run is a replay: a replay run kind or an explicit replay flag.
    pub fn is_replay(&self) -> bool {
        self.inner.run_kind.is_replay() || self.inner.replay_flag == Some(true)
    }

    /// Whether effects are suppressed whatever else holds (dry-run mode).
    pub fn is_dry_run(&self) -> bool {
        self.inner.mode == Mode::DryRun
    }

    fn with(&self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = (*self.inner).clone();
        change(&mut inner);
        ReplayContext {
            inner: Arc::new(inner),
        }
    }

    /// A copy with another window (a backfill loop reuses one context per window).
    pub fn with_window(&self, window: Window) -> Self {
        self.with(|inner| {
            inner.window = window;
            inner.window_text = window_text(&window);
            inner.window_known = true;
        })
    }

    /// A copy with another run id.
    pub fn with_run_id(&self, run_id: RunId) -> Self {
        self.with(|inner| inner.run_id = run_id)
    }

    /// A copy with another run kind.
    pub fn with_run_kind(&self, run_kind: RunKind) -> Self {
        self.with(|inner| inner.run_kind = run_kind)
    }

    /// A copy with an opt-in added.
    pub fn with_opt_in(&self, opt_in: OptIn) -> Self {
        self.with(|inner| inner.opt_ins.push(opt_in))
    }

    /// A copy in which only opt-ins signed by one of `trusted` lift anything.
    pub fn with_trusted_approvers(&self, trusted: TrustedApprovers) -> Self {
        self.with(|inner| inner.trusted_approvers = Some(Arc::new(trusted)))
    }

    /// A copy in another mode.
    pub fn with_mode(&self, mode: Mode) -> Self {
        self.with(|inner| inner.mode = mode)
    }

    /// A copy with another recency policy.
    pub fn with_recency(&self, recency: RecencyPolicy) -> Self {
        self.with(|inner| inner.recency = recency)
    }

    /// A copy reading time from `clock`.
    pub fn with_clock(&self, clock: Arc<dyn Clock>) -> Self {
        self.with(|inner| inner.clock = clock)
    }
}

/// Builds a [`ReplayContext`]; pipeline, run id and window are required.
#[derive(Default)]
pub struct ReplayContextBuilder {
    pipeline: Option<String>,
    run_id: Option<String>,
    run_kind: Option<RunKind>,
    replay_flag: Option<bool>,
    window: Option<Window>,
    upstream: Vec<UpstreamRun>,
    logical_date: Option<DateTime<Utc>>,
    run_interval: Option<Window>,
    backfill_id: Option<String>,
    mode: Mode,
    recency: RecencyPolicy,
    opt_ins: Vec<OptIn>,
    trusted_approvers: Option<TrustedApprovers>,
    clock: Option<Arc<dyn Clock>>,
    journal_path: Option<PathBuf>,
    conflict: Option<String>,
}

impl fmt::Debug for ReplayContextBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayContextBuilder")
            .field("pipeline", &self.pipeline)
            .field("run_id", &self.run_id)
            .field("run_kind", &self.run_kind)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl ReplayContextBuilder {
    /// The pipeline name (required, non-empty).
    pub fn pipeline(mut self, pipeline: impl Into<String>) -> Self {
        self.pipeline = Some(pipeline.into());
        self
    }

    /// The execution attempt id (required).
    pub fn run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// The run kind; without one the kind is [`RunKind::Unknown`] and everything is suppressed.
    pub fn run_kind(mut self, run_kind: RunKind) -> Self {
        self.run_kind = Some(run_kind);
        self
    }

    /// The explicit replay flag.
    pub fn replay_flag(mut self, replay: bool) -> Self {
        self.replay_flag = Some(replay);
        self
    }

    /// The data window: `[start, end)`, or an instant. Without one the window is the
    /// span of the upstream runs' windows; without those, the context has no window and
    /// suppresses every effect (`unknown_window`).
    pub fn window(mut self, window: Window) -> Self {
        self.window = Some(window);
        self
    }

    /// The runs that caused this one: an upstream replay suppresses every effect
    /// (`upstream_replay`), an upstream run of unknown kind makes this run's kind unknown.
    pub fn upstream(mut self, upstream: Vec<UpstreamRun>) -> Self {
        self.upstream = upstream;
        self
    }

    /// The run's logical date, as the orchestrator gave it; a window that starts after it
    /// (beyond the clock-skew allowance) makes the context conflicting.
    pub fn logical_date(mut self, logical_date: DateTime<Utc>) -> Self {
        self.logical_date = Some(logical_date);
        self
    }

    /// The data interval the orchestrator exported for the run; the effect is stale when
    /// this interval's end is, even when the window's own end is recent.
    pub fn run_interval(mut self, interval: Window) -> Self {
        self.run_interval = Some(interval);
        self
    }

    /// The backfill id.
    pub fn backfill_id(mut self, backfill_id: impl Into<String>) -> Self {
        self.backfill_id = Some(backfill_id.into());
        self
    }

    /// Live (default) or dry-run.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The recency policy (default: [`RecencyPolicy::default`]).
    pub fn recency(mut self, recency: RecencyPolicy) -> Self {
        self.recency = recency;
        self
    }

    /// Adds an opt-in.
    pub fn opt_in(mut self, opt_in: OptIn) -> Self {
        self.opt_ins.push(opt_in);
        self
    }

    /// Trusts only opt-ins signed by one of these approvers' keys.
    pub fn trusted_approvers(mut self, trusted: TrustedApprovers) -> Self {
        self.trusted_approvers = Some(trusted);
        self
    }

    /// The clock (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Where the journal goes.
    pub fn journal_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.journal_path = Some(path.into());
        self
    }

    /// Records that the sources of this context disagreed; every effect is then suppressed.
    /// Resolution from the environment and [`crate::StoredContext::restore`] set it.
    pub(crate) fn conflict(mut self, description: impl Into<String>) -> Self {
        self.conflict = Some(description.into());
        self
    }

    /// Builds the context; a missing pipeline or run id is [`Error::Missing`], a name with
    /// control characters or bidirectional overrides [`Error::Invalid`].
    pub fn build(self) -> Result<ReplayContext, Error> {
        let pipeline = checked_name(
            "pipeline",
            self.pipeline.ok_or(Error::Missing {
                field: "pipeline",
                hint: "name the pipeline",
            })?,
        )?;
        let run_id = RunId::new(self.run_id.ok_or(Error::Missing {
            field: "run_id",
            hint: "name the execution attempt",
        })?)?;
        let window = self.window.or_else(|| crate::lineage::span(&self.upstream));
        let window_known = window.is_some();
        let window = window.unwrap_or(Window::instant(DateTime::<Utc>::UNIX_EPOCH));
        let backfill_id = self
            .backfill_id
            .filter(|id| !id.trim().is_empty())
            .map(|id| checked_name("backfill_id", id))
            .transpose()?;
        // An upstream run whose kind cannot be told makes this run's kind unknown.
        let run_kind = if self
            .upstream
            .iter()
            .any(|run| run.kind() == RunKind::Unknown)
        {
            RunKind::Unknown
        } else {
            self.run_kind.unwrap_or(RunKind::Unknown)
        };
        Ok(ReplayContext {
            inner: Arc::new(Inner {
                pipeline,
                run_id,
                run_kind,
                replay_flag: self.replay_flag,
                window,
                window_text: window_text(&window),
                window_known,
                upstream: self.upstream,
                logical_date: self.logical_date,
                run_interval: self.run_interval,
                backfill_id,
                mode: self.mode,
                recency: self.recency,
                opt_ins: self.opt_ins,
                trusted_approvers: self.trusted_approvers.map(Arc::new),
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
                journal_path: self.journal_path,
                conflict: self.conflict,
            }),
        })
    }
}

fn window_text(window: &Window) -> (String, String) {
    (crate::rfc3339(window.start()), crate::rfc3339(window.end()))
}

/// `text` with the password of a URL's user information (`scheme://user:password@host`)
/// replaced by `…`; any other text as it is.
fn without_password(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) if user_info.contains(':') => {
            let user = user_info
                .split_once(':')
                .map_or(user_info, |(user, _)| user);
            format!("{scheme}://{user}:…@{host}{tail}")
        }
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod journal_shown_tests {
    use super::without_password;

    #[test]
    fn a_database_urls_password_is_not_shown() {
        assert_eq!(
            without_password("postgres://jane:s3cr3t@db:5432/pipelines?sslmode=disable"),
            "postgres://jane:…@db:5432/pipelines?sslmode=disable"
        );
        assert_eq!(
            without_password("postgres://jane@db/pipelines"),
            "postgres://jane@db/pipelines"
        );
        assert_eq!(
            without_password("/var/log/journal.jsonl"),
            "/var/log/journal.jsonl"
        );
        assert_eq!(without_password("sqlite:journal.db"), "sqlite:journal.db");
        // A password holding '@' or ':' is hidden whole.
        assert_eq!(
            without_password("postgres://u:a@b:c@h/d"),
            "postgres://u:…@h/d"
        );
    }
}
