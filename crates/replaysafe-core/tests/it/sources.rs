//! Contexts from several sources: Airflow 3's default exports, explicit `REPLAYSAFE_*`
//! values beside Airflow's, instants, future windows and raw (non-UTF-8) environments.
//!
//! The environment shapes are the ones a real Airflow 3.3.2 gave its tasks under its
//! default configuration (`cargo xtask airflow`, the last phase of `cargo xtask ci`, runs that Airflow).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use proptest::prelude::*;
use replaysafe_core::{
    EffectKind, Error, FixedClock, IdempotencyKey, OptIn, Reason, ReplayContext, RunKind, Window,
};

use crate::support::at;

fn resolve_at(vars: &[(&str, &str)], now: DateTime<Utc>) -> Result<ReplayContext, Error> {
    ReplayContext::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .map(|cx| cx.with_clock(Arc::new(FixedClock::new(now))))
}

fn email(cx: &ReplayContext) -> replaysafe_core::Decision {
    cx.decide(&EffectKind::Email, "ana@shop.example")
}

/// Exactly what a scheduled task of a default Airflow 3.3.2 got (no hook installed).
fn airflow3(run_id: &str, logical_date: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AIRFLOW_CTX_DAG_ID", "replaysafe_probe".into()),
        ("AIRFLOW_CTX_DAG_OWNER", "airflow".into()),
        ("AIRFLOW_CTX_DAG_RUN_ID", run_id.into()),
        ("AIRFLOW_CTX_LOGICAL_DATE", logical_date.into()),
        ("AIRFLOW_CTX_TASK_ID", "notify".into()),
        ("AIRFLOW_CTX_TRY_NUMBER", "1".into()),
    ]
}

fn with_clock(
    vars: Vec<(&'static str, String)>,
    now: DateTime<Utc>,
) -> Result<ReplayContext, Error> {
    ReplayContext::from_vars(vars).map(|cx| cx.with_clock(Arc::new(FixedClock::new(now))))
}

fn tick() -> DateTime<Utc> {
    at(2026, 12, 1, 2) + TimeDelta::minutes(10)
}

#[test]
fn airflow3_scheduled_run_of_the_latest_tick_delivers_as_an_instant() {
    let vars = airflow3(
        "scheduled__2026-12-01T02:10:00+00:00",
        "2026-12-01T02:10:00+00:00",
    );
    let cx = with_clock(vars, tick() + TimeDelta::seconds(40)).unwrap();
    assert_eq!(cx.run_kind(), RunKind::Scheduled);
    assert_eq!(cx.pipeline(), "replaysafe_probe");
    assert_eq!(cx.window(), &Window::instant(tick()));
    assert_eq!(cx.logical_date(), Some(tick()));
    let decision = email(&cx);
    assert!(decision.delivers(), "{:?}", decision.reasons());
    assert_eq!(decision.reasons(), [Reason::CurrentWindow]);
}

#[test]
fn airflow3_backfill_suppresses_and_resolves() {
    let vars = airflow3(
        "backfill__2026-12-01T00:10:00+00:00",
        "2026-12-01T00:10:00+00:00",
    );
    let cx = with_clock(vars, tick()).unwrap();
    assert_eq!(cx.run_kind(), RunKind::Backfill);
    let decision = email(&cx);
    assert!(decision.suppresses());
    assert!(decision.reasons().contains(&Reason::ReplayRun));
}

#[test]
fn airflow3_catch_up_run_three_days_late_is_stale() {
    let vars = airflow3(
        "scheduled__2026-11-28T02:10:00+00:00",
        "2026-11-28T02:10:00+00:00",
    );
    let cx = with_clock(vars, tick()).unwrap();
    assert_eq!(cx.run_kind(), RunKind::Scheduled);
    let decision = email(&cx);
    assert!(decision.suppresses());
    assert_eq!(decision.reasons(), [Reason::StaleWindow]);
}

#[test]
fn airflow3_manual_run_without_a_logical_date_suppresses_and_names_the_variables_to_set() {
    for logical in [None, Some(""), Some("None")] {
        let mut vars = airflow3("manual__2026-12-01T02:11:54.836492+00:00", "");
        vars.retain(|(name, _)| *name != "AIRFLOW_CTX_LOGICAL_DATE");
        if let Some(value) = logical {
            vars.push(("AIRFLOW_CTX_LOGICAL_DATE", value.into()));
        }
        let cx = with_clock(vars, tick()).unwrap();
        let decision = email(&cx);
        assert!(decision.suppresses());
        assert_eq!(decision.reasons(), [Reason::UnknownWindow]);
        let note = cx.window_note().unwrap();
        assert!(
            note.contains("REPLAYSAFE_WINDOW_START")
                && note.contains("REPLAYSAFE_WINDOW_END")
                && note.contains("AIRFLOW_CTX_LOGICAL_DATE"),
            "{note}"
        );
    }
}

#[test]
fn an_instant_keys_its_time_as_start_and_end() {
    let cx = with_clock(
        airflow3(
            "scheduled__2026-12-01T02:10:00+00:00",
            "2026-12-01T02:10:00+00:00",
        ),
        tick(),
    )
    .unwrap();
    let by_instant = IdempotencyKey::derive(
        "replaysafe_probe",
        &EffectKind::Email,
        "daily_summary",
        "ana@shop.example",
        cx.window(),
    );
    // The documented derivation with the instant hashed as both start and end.
    let mut message = b"replaysafe.idempotency.v1".to_vec();
    for field in [
        "replaysafe_probe",
        "email",
        "daily_summary",
        "ana@shop.example",
        "2026-12-01T02:10:00Z",
        "2026-12-01T02:10:00Z",
    ] {
        message.extend_from_slice(format!("{}:{field},", field.len()).as_bytes());
    }
    use sha2::Digest as _;
    let expected: String = sha2::Sha256::digest(&message)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(by_instant.as_str(), expected);
}

#[test]
fn explicit_scheduled_beside_an_airflow_backfill_conflicts() {
    // The observed bug: REPLAYSAFE_RUN_KIND=scheduled delivered an Airflow backfill's webhook.
    let now = at(2026, 8, 5, 12);
    let cx = resolve_at(
        &[
            ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
            (
                "AIRFLOW_CTX_DAG_RUN_ID",
                "backfill__2026-08-05T00:00:00+00:00",
            ),
            ("AIRFLOW_CTX_RUN_TYPE", "backfill"),
            ("REPLAYSAFE_RUN_KIND", "scheduled"),
            ("REPLAYSAFE_WINDOW_START", "2026-08-05T06:00:00Z"),
            ("REPLAYSAFE_WINDOW_END", "2026-08-05T12:00:00Z"),
        ],
        now,
    )
    .unwrap();
    assert_eq!(cx.run_kind(), RunKind::Backfill);
    assert!(cx.conflict().unwrap().contains("REPLAYSAFE_RUN_KIND"));
    let decision = email(&cx);
    assert!(decision.suppresses());
    assert!(decision.reasons().contains(&Reason::ConflictingContext));

    // Not liftable: an opt-in for the kind changes nothing.
    let opt_in = OptIn::new("resend", "jane", now + TimeDelta::days(1))
        .unwrap()
        .for_kind(EffectKind::Email);
    assert!(email(&cx.with_opt_in(opt_in)).suppresses());

    // The other way round conflicts too.
    let cx = resolve_at(
        &[
            ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
            (
                "AIRFLOW_CTX_DAG_RUN_ID",
                "scheduled__2026-08-05T00:00:00+00:00",
            ),
            ("REPLAYSAFE_RUN_KIND", "backfill"),
            ("REPLAYSAFE_WINDOW_START", "2026-08-05T06:00:00Z"),
            ("REPLAYSAFE_WINDOW_END", "2026-08-05T12:00:00Z"),
        ],
        now,
    )
    .unwrap();
    assert_eq!(cx.run_kind(), RunKind::Backfill);
    assert!(email(&cx).reasons().contains(&Reason::ConflictingContext));
}

#[test]
fn explicit_values_refine_without_conflict() {
    let now = at(2026, 8, 5, 12);
    let base = [
        ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
        (
            "AIRFLOW_CTX_DAG_RUN_ID",
            "scheduled__2026-08-05T12:00:00+00:00",
        ),
        ("REPLAYSAFE_WINDOW_START", "2026-08-05T06:00:00Z"),
        ("REPLAYSAFE_WINDOW_END", "2026-08-05T12:00:00Z"),
    ];
    let mut vars = base.to_vec();
    vars.push(("REPLAYSAFE_RUN_KIND", "retry"));
    let cx = resolve_at(&vars, now).unwrap();
    assert_eq!(cx.run_kind(), RunKind::Retry);
    assert!(cx.conflict().is_none());
    assert!(email(&cx).delivers());

    let mut vars = base.to_vec();
    vars[1].1 = "backfill__2026-08-05T12:00:00+00:00";
    vars.push(("REPLAYSAFE_RUN_KIND", "rebuild"));
    let cx = resolve_at(&vars, now).unwrap();
    assert_eq!(cx.run_kind(), RunKind::Rebuild);
    assert!(cx.conflict().is_none());

    // An unknown Airflow run stays unknown, whatever the explicit kind says.
    let mut vars = base.to_vec();
    vars[1].1 = "custom__2026-08-05T12:00:00+00:00";
    vars.push(("REPLAYSAFE_RUN_KIND", "scheduled"));
    let cx = resolve_at(&vars, now).unwrap();
    assert_eq!(cx.run_kind(), RunKind::Unknown);
    let decision = email(&cx);
    assert!(decision.reasons().contains(&Reason::UnknownContext));
    assert!(decision.reasons().contains(&Reason::ConflictingContext));
}

#[test]
fn a_current_explicit_window_beside_a_week_old_airflow_interval_is_stale() {
    let now = at(2026, 8, 12, 12);
    let cx = resolve_at(
        &[
            ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
            (
                "AIRFLOW_CTX_DAG_RUN_ID",
                "scheduled__2026-08-05T00:00:00+00:00",
            ),
            (
                "AIRFLOW_CTX_DATA_INTERVAL_START",
                "2026-08-04T00:00:00+00:00",
            ),
            ("AIRFLOW_CTX_DATA_INTERVAL_END", "2026-08-05T00:00:00+00:00"),
            ("REPLAYSAFE_WINDOW_START", "2026-08-12T06:00:00Z"),
            ("REPLAYSAFE_WINDOW_END", "2026-08-12T12:00:00Z"),
        ],
        now,
    )
    .unwrap();
    // The explicit window names (and keys) the effect; the older end decides recency.
    assert_eq!(cx.window().start(), at(2026, 8, 12, 6));
    assert_eq!(cx.recency_end(), at(2026, 8, 5, 0));
    assert_eq!(email(&cx).reasons(), [Reason::StaleWindow]);
}

#[test]
fn an_explicit_window_from_the_runs_future_conflicts() {
    // A run due three days ago that computes "the last hour" from the wall clock.
    let now = at(2026, 12, 4, 2);
    let mut vars = airflow3(
        "scheduled__2026-12-01T02:10:00+00:00",
        "2026-12-01T02:10:00+00:00",
    );
    vars.push(("REPLAYSAFE_WINDOW_START", "2026-12-04T01:00:00Z".into()));
    vars.push(("REPLAYSAFE_WINDOW_END", "2026-12-04T02:00:00Z".into()));
    let cx = with_clock(vars, now).unwrap();
    assert!(cx.is_window_after_logical_date());
    assert!(cx.conflict().unwrap().contains("logical date"));
    let decision = email(&cx);
    assert!(decision.suppresses());
    assert!(decision.reasons().contains(&Reason::ConflictingContext));

    // Within the clock-skew allowance it is fine.
    let mut vars = airflow3(
        "scheduled__2026-12-01T02:10:00+00:00",
        "2026-12-01T02:10:00+00:00",
    );
    vars.push(("REPLAYSAFE_WINDOW_START", "2026-12-01T02:14:00Z".into()));
    vars.push(("REPLAYSAFE_WINDOW_END", "2026-12-01T02:15:00Z".into()));
    let cx = with_clock(vars, tick() + TimeDelta::minutes(6)).unwrap();
    assert!(email(&cx).delivers(), "{:?}", email(&cx).reasons());
}

#[test]
fn a_logical_date_after_the_window_neither_conflicts_nor_makes_it_stale() {
    // CronTriggerTimetable: the run is due at 02:00 and reports on yesterday.
    let mut vars = airflow3(
        "scheduled__2026-12-01T02:00:00+00:00",
        "2026-12-01T02:00:00+00:00",
    );
    vars.push(("REPLAYSAFE_WINDOW_START", "2026-11-30T00:00:00Z".into()));
    vars.push(("REPLAYSAFE_WINDOW_END", "2026-12-01T00:00:00Z".into()));
    let cx = with_clock(vars, at(2026, 12, 1, 2) + TimeDelta::minutes(3)).unwrap();
    assert!(email(&cx).delivers(), "{:?}", email(&cx).reasons());

    // Legacy CronDataIntervalTimetable with the hook: the logical date is the interval's
    // start, a whole period before the run.
    let mut vars = airflow3(
        "scheduled__2026-11-30T00:00:00+00:00",
        "2026-11-30T00:00:00+00:00",
    );
    vars.push((
        "AIRFLOW_CTX_DATA_INTERVAL_START",
        "2026-11-30T00:00:00+00:00".into(),
    ));
    vars.push((
        "AIRFLOW_CTX_DATA_INTERVAL_END",
        "2026-12-01T00:00:00+00:00".into(),
    ));
    let cx = with_clock(vars.clone(), at(2026, 12, 1, 0) + TimeDelta::minutes(5)).unwrap();
    assert_eq!(cx.window().end(), at(2026, 12, 1, 0));
    assert!(email(&cx).delivers(), "{:?}", email(&cx).reasons());

    // The same run without the hook is the instant of its logical date: a day old, stale.
    vars.retain(|(name, _)| !name.starts_with("AIRFLOW_CTX_DATA_INTERVAL"));
    let cx = with_clock(vars, at(2026, 12, 1, 0) + TimeDelta::minutes(5)).unwrap();
    assert_eq!(email(&cx).reasons(), [Reason::StaleWindow]);
}

#[test]
fn a_window_ending_in_the_future_suppresses_and_no_opt_in_lifts_it() {
    let now = at(2026, 8, 5, 12);
    let cx = resolve_at(
        &[
            ("REPLAYSAFE_PIPELINE", "daily_orders"),
            ("REPLAYSAFE_RUN_ID", "scheduled__x"),
            ("REPLAYSAFE_RUN_KIND", "scheduled"),
            ("REPLAYSAFE_WINDOW_START", "2099-01-01T00:00:00Z"),
            ("REPLAYSAFE_WINDOW_END", "2099-01-02T00:00:00Z"),
        ],
        now,
    )
    .unwrap();
    assert_eq!(email(&cx).reasons(), [Reason::FutureWindow]);
    let opt_in = OptIn::new("resend", "jane", now + TimeDelta::days(1))
        .unwrap()
        .for_kind(EffectKind::Email);
    assert!(email(&cx.with_opt_in(opt_in)).suppresses());

    // Up to the clock-skew allowance is not the future; the allowance is configurable.
    let window = Window::new(now - TimeDelta::hours(1), now + TimeDelta::minutes(5)).unwrap();
    assert!(email(&cx.with_window(window)).delivers());
    let strict = cx
        .recency()
        .clone()
        .with_clock_skew(TimeDelta::minutes(1))
        .unwrap();
    assert_eq!(
        email(&cx.with_window(window).with_recency(strict)).reasons(),
        [Reason::FutureWindow]
    );
}

#[test]
fn control_characters_are_refused_in_names() {
    let base = [
        ("REPLAYSAFE_PIPELINE", "p"),
        ("REPLAYSAFE_RUN_ID", "r"),
        ("REPLAYSAFE_WINDOW_START", "2026-08-05T00:00:00Z"),
        ("REPLAYSAFE_WINDOW_END", "2026-08-06T00:00:00Z"),
    ];
    for (name, value, field) in [
        ("REPLAYSAFE_PIPELINE", "orders\u{1b}[31m", "pipeline"),
        ("REPLAYSAFE_RUN_ID", "run\r\n1", "run_id"),
        ("REPLAYSAFE_BACKFILL_ID", "bf\u{7}", "backfill_id"),
        // Bidirectional overrides and isolates reorder what a reviewer reads.
        ("REPLAYSAFE_PIPELINE", "orders\u{202E}lanif", "pipeline"),
        (
            "REPLAYSAFE_RUN_ID",
            "scheduled__\u{2066}x\u{2069}",
            "run_id",
        ),
        ("REPLAYSAFE_BACKFILL_ID", "bf-\u{202A}2026", "backfill_id"),
        ("AIRFLOW_CTX_DAG_ID", "dag\u{2067}", "pipeline"),
        ("AIRFLOW_CTX_DAG_RUN_ID", "backfill__\u{202D}x", "run_id"),
    ] {
        let mut vars = base.to_vec();
        let replaces = match name {
            "AIRFLOW_CTX_DAG_ID" => "REPLAYSAFE_PIPELINE",
            "AIRFLOW_CTX_DAG_RUN_ID" => "REPLAYSAFE_RUN_ID",
            other => other,
        };
        vars.retain(|(n, _)| *n != replaces);
        vars.push((name, value));
        let err = resolve_at(&vars, at(2026, 8, 6, 0))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field) && err.contains("control"), "{err}");
        let hidden = |c: char| {
            c.is_control()
                || ('\u{202A}'..='\u{202E}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        };
        assert!(!err.chars().any(hidden), "{err:?}");
    }
    // Other format characters are not refused: only those that reorder or hide text.
    let mut vars = base.to_vec();
    vars.retain(|(n, _)| *n != "REPLAYSAFE_PIPELINE");
    vars.push(("REPLAYSAFE_PIPELINE", "orders\u{2065}\u{202F}"));
    assert!(resolve_at(&vars, at(2026, 8, 6, 0)).is_ok());
}

#[test]
fn a_current_run_that_carries_a_backfill_id_conflicts() {
    let now = at(2026, 8, 5, 12);
    let window = [
        ("REPLAYSAFE_WINDOW_START", "2026-08-05T06:00:00Z"),
        ("REPLAYSAFE_WINDOW_END", "2026-08-05T12:00:00Z"),
    ];
    let explicit = |kind: &'static str| {
        vec![
            ("REPLAYSAFE_PIPELINE", "daily_orders"),
            ("REPLAYSAFE_RUN_ID", "r1"),
            ("REPLAYSAFE_RUN_KIND", kind),
            window[0],
            window[1],
        ]
    };
    let airflow = |run_id: &'static str, try_number: &'static str| {
        vec![
            ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
            ("AIRFLOW_CTX_DAG_RUN_ID", run_id),
            ("AIRFLOW_CTX_TRY_NUMBER", try_number),
            window[0],
            window[1],
        ]
    };
    let current = [
        explicit("scheduled"),
        explicit("manual"),
        explicit("retry"),
        explicit("resume"),
        airflow("scheduled__2026-08-05T06:00:00+00:00", "1"),
        airflow("manual__2026-08-05T06:00:00+00:00", "1"),
        airflow("scheduled__2026-08-05T06:00:00+00:00", "2"),
        airflow("asset_triggered__2026-08-05T06:00:00+00:00", "1"),
    ];
    for vars in current {
        // Without a backfill id the run delivers: the positive control.
        let cx = resolve_at(&vars, now).unwrap();
        assert!(
            email(&cx).delivers(),
            "{vars:?}: {:?}",
            email(&cx).reasons()
        );
        let mut vars = vars.clone();
        vars.push(("REPLAYSAFE_BACKFILL_ID", "bf-2026-08"));
        let cx = resolve_at(&vars, now).unwrap();
        let decision = email(&cx);
        assert_eq!(decision.reasons(), [Reason::ConflictingContext], "{vars:?}");
        let note = cx.conflict().unwrap();
        assert!(
            note.contains("REPLAYSAFE_BACKFILL_ID") && note.contains(cx.run_kind().as_str()),
            "{note}"
        );
        // Not liftable.
        let opt_in = OptIn::new("resend", "jane", now + TimeDelta::days(1))
            .unwrap()
            .for_kind(EffectKind::Email);
        assert!(email(&cx.with_opt_in(opt_in)).suppresses());
    }
    // A backfill, replay or rebuild carries its backfill id rightly: suppressed as a replay,
    // not conflicting.
    for kind in ["backfill", "replay", "rebuild"] {
        let mut vars = explicit(kind);
        vars.push(("REPLAYSAFE_BACKFILL_ID", "bf-2026-08"));
        let cx = resolve_at(&vars, now).unwrap();
        assert!(!cx.is_conflicting() && cx.conflict().is_none(), "{kind}");
        assert_eq!(email(&cx).reasons(), [Reason::ReplayRun], "{kind}");
    }
    let mut vars = airflow("backfill__2026-08-05T06:00:00+00:00", "2");
    vars.push(("REPLAYSAFE_BACKFILL_ID", "bf-2026-08"));
    assert!(!resolve_at(&vars, now).unwrap().is_conflicting());
    // The same holds for a context built in code.
    let built = ReplayContext::builder()
        .pipeline("daily_orders")
        .run_id("r1")
        .run_kind(RunKind::Scheduled)
        .window(Window::new(at(2026, 8, 5, 6), at(2026, 8, 5, 12)).unwrap())
        .backfill_id("bf-2026-08")
        .clock(Arc::new(FixedClock::new(now)))
        .build()
        .unwrap();
    assert!(
        email(&built)
            .reasons()
            .contains(&Reason::ConflictingContext)
    );
    assert!(
        !email(&built.with_run_kind(RunKind::Backfill))
            .reasons()
            .contains(&Reason::ConflictingContext)
    );
}

#[test]
fn a_leap_second_is_refused_in_every_time_variable() {
    let explicit = [
        ("REPLAYSAFE_PIPELINE", "p"),
        ("REPLAYSAFE_RUN_ID", "r"),
        ("REPLAYSAFE_WINDOW_START", "2016-12-31T00:00:00Z"),
        ("REPLAYSAFE_WINDOW_END", "2017-01-01T00:00:00Z"),
    ];
    let airflow = [
        ("AIRFLOW_CTX_DAG_ID", "p"),
        (
            "AIRFLOW_CTX_DAG_RUN_ID",
            "scheduled__2016-12-31T00:00:00+00:00",
        ),
        (
            "AIRFLOW_CTX_DATA_INTERVAL_START",
            "2016-12-31T00:00:00+00:00",
        ),
        ("AIRFLOW_CTX_DATA_INTERVAL_END", "2017-01-01T00:00:00+00:00"),
        ("AIRFLOW_CTX_LOGICAL_DATE", "2016-12-31T00:00:00+00:00"),
    ];
    let now = at(2017, 1, 1, 1);
    assert!(resolve_at(&explicit, now).is_ok());
    assert!(resolve_at(&airflow, now).is_ok());
    for (base, variable, leap) in [
        (
            &explicit[..],
            "REPLAYSAFE_WINDOW_START",
            "2016-12-31T23:59:60Z",
        ),
        (
            &explicit[..],
            "REPLAYSAFE_WINDOW_END",
            "2016-12-31T23:59:60.5Z",
        ),
        (
            &airflow[..],
            "AIRFLOW_CTX_DATA_INTERVAL_START",
            "2016-12-31T23:59:60+00:00",
        ),
        (
            &airflow[..],
            "AIRFLOW_CTX_DATA_INTERVAL_END",
            "2016-12-31T23:59:60+00:00",
        ),
        (
            &airflow[..],
            "AIRFLOW_CTX_LOGICAL_DATE",
            "2016-12-31T18:59:60-05:00",
        ),
    ] {
        let mut vars = base.to_vec();
        vars.retain(|(name, _)| *name != variable);
        vars.push((variable, leap));
        let err = resolve_at(&vars, now).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(variable) && text.contains("leap second"),
            "{text}"
        );
    }
}

fn os(name: &str, value: &[u8]) -> (OsString, OsString) {
    (OsString::from(name), OsString::from_vec(value.to_vec()))
}

#[test]
fn non_utf8_variables_are_ignored_unless_read() {
    let good = [
        os("REPLAYSAFE_PIPELINE", b"p"),
        os("REPLAYSAFE_RUN_ID", b"r"),
        os("REPLAYSAFE_RUN_KIND", b"scheduled"),
        os("REPLAYSAFE_WINDOW_START", b"2026-08-05T00:00:00Z"),
        os("REPLAYSAFE_WINDOW_END", b"2026-08-06T00:00:00Z"),
    ];
    let mut vars = good.to_vec();
    vars.push(os("LANG_SOMETHING", b"\xff\xfe"));
    vars.push((OsString::from_vec(b"\xffODD".to_vec()), OsString::from("x")));
    let cx = ReplayContext::from_vars_os(vars).unwrap();
    assert_eq!(cx.pipeline(), "p");

    for name in [
        "REPLAYSAFE_PIPELINE",
        "AIRFLOW_CTX_DAG_RUN_ID",
        "REPLAYSAFE_JOURNAL",
    ] {
        let mut vars = good.to_vec();
        vars.retain(|(n, _)| n != name);
        vars.push(os(name, b"bad\xffvalue"));
        let err = ReplayContext::from_vars_os(vars).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(name) && text.contains("UTF-8"), "{text}");
    }
}

// ---- property: the gate delivers only when every source that speaks agrees on a current,
// ---- non-replay run.

const NOW: &str = "2026-12-01T12:00:00Z";

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(NOW)
        .unwrap()
        .with_timezone(&Utc)
}

/// A time `minutes` from now, as text; `None` for a malformed value.
fn time_text(minutes: Option<i64>) -> String {
    match minutes {
        Some(m) => replaysafe_core::rfc3339(now() + TimeDelta::minutes(m)),
        None => "yesterday".to_owned(),
    }
}

fn offsets() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        8 => prop::sample::select(vec![
            -20_000i64, -4_000, -400, -361, -359, -300, -60, -10, -6, -1, 0, 1, 4, 6, 10, 60, 600_000,
        ])
        .prop_map(Some),
        1 => Just(None),
    ]
}

fn words(options: &'static [&'static str]) -> impl Strategy<Value = Option<&'static str>> {
    prop::option::weighted(0.6, prop::sample::select(options))
}

const EXPLICIT_KINDS: &[&str] = &[
    "scheduled",
    "manual",
    "retry",
    "resume",
    "replay",
    "backfill",
    "rebuild",
    "unknown",
    " scheduled ",
    "Backfill",
    "SCHEDULED",
    "",
    "   ",
];
const AIRFLOW_TYPES: &[&str] = &[
    "scheduled",
    "manual",
    "backfill",
    "asset_triggered",
    "dataset_triggered",
    "custom",
    "Backfill",
    "",
];
const FLAGS: &[&str] = &[
    "true", "false", "TRUE", "False", "1", "0", "yes", "no", "", " ",
];
const MODES: &[&str] = &["live", "dry-run", "Live", ""];

#[derive(Clone, Debug)]
struct Sources {
    explicit_kind: Option<&'static str>,
    replay: Option<&'static str>,
    mode: Option<&'static str>,
    prefix: Option<&'static str>,
    run_type: Option<&'static str>,
    try_number: Option<&'static str>,
    backfill_id: Option<&'static str>,
    explicit_window: Option<(Option<i64>, Option<i64>)>,
    interval: Option<(Option<i64>, Option<i64>)>,
    logical: Option<Option<i64>>,
    upstream: Vec<Upstream>,
}

/// One run of `REPLAYSAFE_UPSTREAM`: its run id's prefix (or an id without one), its
/// explicit kind and replay flag, and its window (start and end offsets, a logical date
/// when both are the same).
#[derive(Clone, Debug)]
struct Upstream {
    prefix: Option<&'static str>,
    run_kind: Option<&'static str>,
    replay: Option<bool>,
    window: Option<(i64, i64)>,
}

const UPSTREAM_PREFIXES: &[&str] = &["scheduled", "backfill", "manual", "asset_triggered", "odd"];
const UPSTREAM_KINDS: &[&str] = &[
    "scheduled",
    "manual",
    "retry",
    "backfill",
    "replay",
    "rebuild",
];

fn upstream() -> impl Strategy<Value = Upstream> {
    let ends = prop::sample::select(vec![-20_000i64, -400, -300, -10, 0]);
    (
        words(UPSTREAM_PREFIXES),
        words(UPSTREAM_KINDS),
        prop::option::of(any::<bool>()),
        prop::option::of((ends, prop::sample::select(vec![0i64, 60, 1440]))),
    )
        .prop_map(|(prefix, run_kind, replay, window)| Upstream {
            prefix,
            run_kind,
            replay,
            window: window.map(|(end, length)| (end - length, end)),
        })
}

impl Upstream {
    fn json(&self) -> serde_json::Value {
        let mut run = serde_json::json!({
            "pipeline": "up",
            "run_id": match self.prefix {
                Some(prefix) => format!("{prefix}__{NOW}"),
                None => "run-42".to_owned(),
            },
        });
        if let Some(kind) = self.run_kind {
            run["run_kind"] = kind.into();
        }
        if let Some(replay) = self.replay {
            run["replay"] = replay.into();
        }
        match self.window {
            Some((start, end)) if start == end => {
                run["logical_date"] = time_text(Some(start)).into();
            }
            Some((start, end)) => {
                run["window_start"] = time_text(Some(start)).into();
                run["window_end"] = time_text(Some(end)).into();
            }
            None => {}
        }
        run
    }

    /// Whether this upstream run is a current one, by the rules: its explicit kind and its
    /// run id's prefix are both current where given, one of them is given, no replay flag.
    fn is_current(&self) -> bool {
        let current = |k: &str| matches!(k, "scheduled" | "manual" | "retry" | "resume");
        let by_prefix = self.prefix.map(|p| match p {
            "asset_triggered" => "scheduled",
            other => other,
        });
        (self.run_kind.is_some() || by_prefix.is_some())
            && self.run_kind.is_none_or(current)
            && by_prefix.is_none_or(current)
            && self.replay != Some(true)
    }
}

fn sources() -> impl Strategy<Value = Sources> {
    let pair = || prop::option::of((offsets(), offsets()));
    (
        (
            words(EXPLICIT_KINDS),
            words(FLAGS),
            words(MODES),
            words(AIRFLOW_TYPES),
            words(AIRFLOW_TYPES),
            words(&["1", "2", "0", "x"]),
        ),
        (
            pair(),
            pair(),
            prop::option::of(offsets()),
            words(&["bf-2026-12", " ", ""]),
            prop::collection::vec(upstream(), 0..3),
        ),
    )
        .prop_map(
            |(
                (explicit_kind, replay, mode, prefix, run_type, try_number),
                (explicit_window, interval, logical, backfill_id, upstream),
            )| Sources {
                explicit_kind,
                replay,
                mode,
                prefix,
                run_type,
                try_number,
                backfill_id,
                explicit_window,
                interval,
                logical,
                upstream,
            },
        )
}

impl Sources {
    fn vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![("AIRFLOW_CTX_DAG_ID", "p".to_owned())];
        let mut set = |name, value: Option<String>| {
            if let Some(value) = value {
                vars.push((name, value));
            }
        };
        set("REPLAYSAFE_RUN_KIND", self.explicit_kind.map(str::to_owned));
        set("REPLAYSAFE_REPLAY", self.replay.map(str::to_owned));
        set("REPLAYSAFE_MODE", self.mode.map(str::to_owned));
        set(
            "AIRFLOW_CTX_DAG_RUN_ID",
            Some(match self.prefix {
                Some(prefix) => format!("{prefix}__{NOW}"),
                None => "no-prefix-run".to_owned(),
            }),
        );
        set("AIRFLOW_CTX_RUN_TYPE", self.run_type.map(str::to_owned));
        set("AIRFLOW_CTX_TRY_NUMBER", self.try_number.map(str::to_owned));
        set(
            "REPLAYSAFE_BACKFILL_ID",
            self.backfill_id.map(str::to_owned),
        );
        if let Some((start, end)) = self.explicit_window {
            set("REPLAYSAFE_WINDOW_START", Some(time_text(start)));
            set("REPLAYSAFE_WINDOW_END", Some(time_text(end)));
        }
        if let Some((start, end)) = self.interval {
            set("AIRFLOW_CTX_DATA_INTERVAL_START", Some(time_text(start)));
            set("AIRFLOW_CTX_DATA_INTERVAL_END", Some(time_text(end)));
        }
        if let Some(logical) = self.logical {
            set("AIRFLOW_CTX_LOGICAL_DATE", Some(time_text(logical)));
        }
        if !self.upstream.is_empty() {
            let runs: Vec<serde_json::Value> = self.upstream.iter().map(Upstream::json).collect();
            set(
                "REPLAYSAFE_UPSTREAM",
                Some(serde_json::Value::from(runs).to_string()),
            );
        }
        vars
    }

    /// The oracle, written from the rules rather than from the code: may an email deliver?
    fn all_agree_on_a_current_run(&self) -> bool {
        let blank = |v: Option<&str>| v.is_none_or(|v| v.trim().is_empty());
        let current_kind = |k: &str| matches!(k, "scheduled" | "manual" | "retry" | "resume");
        let airflow_current = |k: &str| {
            matches!(
                k,
                "scheduled" | "manual" | "asset_triggered" | "dataset_triggered"
            )
        };
        let mode_live = blank(self.mode) || self.mode == Some("live");
        let flag_clear =
            blank(self.replay) || matches!(self.replay, Some("false" | "False" | "0" | "no"));
        let explicit = (!blank(self.explicit_kind)).then(|| self.explicit_kind.unwrap().trim());
        // The run id always speaks: its prefix, or no prefix at all (unknown).
        let by_prefix = self.prefix.unwrap_or("");
        let by_type = (!blank(self.run_type)).then(|| self.run_type.unwrap());
        let kinds_ok = explicit.is_none_or(current_kind)
            && airflow_current(by_prefix)
            && by_type.is_none_or(|t| airflow_kind_class(t) == airflow_kind_class(by_prefix));

        let fresh = |end: i64| (-360..=5).contains(&end);
        let window_end = |pair: (Option<i64>, Option<i64>)| pair.1.unwrap();
        let (window, interval) = (self.explicit_window, self.interval);
        // No window of its own: the span of the upstream windows, so the latest upstream end.
        let upstream_end = self
            .upstream
            .iter()
            .filter_map(|run| run.window)
            .map(|w| w.1)
            .max();
        let effect_end = window
            .or(interval)
            .map(window_end)
            .or(self.logical.map(|l| l.unwrap()))
            .or(upstream_end);
        let windows_ok = effect_end.is_some_and(fresh)
            && interval.map(window_end).is_none_or(fresh)
            && match (window.or(interval), self.logical) {
                (Some((start, _)), Some(logical)) => start.unwrap() - logical.unwrap() <= 5,
                _ => true,
            };
        // A run that carries a backfill id is one of a backfill's: never current.
        let no_backfill = blank(self.backfill_id);
        // Every upstream run current: one replay, or one of unknown kind, suppresses.
        let upstream_ok = self.upstream.iter().all(Upstream::is_current);
        mode_live && flag_clear && kinds_ok && windows_ok && no_backfill && upstream_ok
    }
}

fn airflow_kind_class(word: &str) -> &str {
    match word {
        "asset_triggered" | "dataset_triggered" => "scheduled",
        other => other,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn the_gate_delivers_only_when_every_source_agrees_on_a_current_run(sources in sources()) {
        let vars = sources.vars();
        let Ok(cx) = with_clock(vars.clone(), now()) else {
            return Ok(());
        };
        let delivered = email(&cx).delivers();
        prop_assert_eq!(
            delivered,
            sources.all_agree_on_a_current_run(),
            "vars {:?} reasons {:?}",
            vars,
            email(&cx).reasons()
        );
    }
}
