use replaysafe_core::{EffectKind, Error, Mode, Reason, ReplayContext, RunKind};

use crate::support::at;

const WINDOW: [(&str, &str); 2] = [
    ("REPLAYSAFE_WINDOW_START", "2026-08-05T00:00:00Z"),
    ("REPLAYSAFE_WINDOW_END", "2026-08-06T00:00:00Z"),
];

fn resolve(vars: &[(&str, &str)]) -> Result<ReplayContext, Error> {
    ReplayContext::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

fn airflow(run_id: &str, extra: &[(&'static str, &'static str)]) -> Result<ReplayContext, Error> {
    let mut vars = vec![
        ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
        ("AIRFLOW_CTX_DAG_RUN_ID", run_id),
        (
            "AIRFLOW_CTX_DATA_INTERVAL_START",
            "2026-08-05T00:00:00+00:00",
        ),
        ("AIRFLOW_CTX_DATA_INTERVAL_END", "2026-08-06T00:00:00+00:00"),
    ];
    vars.extend_from_slice(extra);
    resolve(&vars)
}

#[test]
fn every_replaysafe_variable_is_read() {
    let cx = resolve(&[
        ("REPLAYSAFE_PIPELINE", "daily_orders"),
        ("REPLAYSAFE_RUN_ID", "bf-2026-08__0001"),
        ("REPLAYSAFE_RUN_KIND", "backfill"),
        ("REPLAYSAFE_REPLAY", "true"),
        WINDOW[0],
        WINDOW[1],
        ("REPLAYSAFE_BACKFILL_ID", "bf-2026-08"),
        ("REPLAYSAFE_MODE", "dry-run"),
        ("REPLAYSAFE_JOURNAL", "/tmp/journal.jsonl"),
    ])
    .unwrap();
    assert_eq!(cx.pipeline(), "daily_orders");
    assert_eq!(cx.run_id().as_str(), "bf-2026-08__0001");
    assert_eq!(cx.run_kind(), RunKind::Backfill);
    assert_eq!(cx.replay_flag(), Some(true));
    assert_eq!(cx.window().start(), at(2026, 8, 5, 0));
    assert_eq!(cx.window().end(), at(2026, 8, 6, 0));
    assert_eq!(cx.backfill_id(), Some("bf-2026-08"));
    assert_eq!(cx.mode(), Mode::DryRun);
    assert_eq!(
        cx.journal_path().unwrap().to_str(),
        Some("/tmp/journal.jsonl")
    );
}

#[test]
fn max_ages_come_from_the_environment_and_gate_staleness() {
    let base = [
        ("REPLAYSAFE_PIPELINE", "p"),
        ("REPLAYSAFE_RUN_ID", "r"),
        ("REPLAYSAFE_RUN_KIND", "scheduled"),
        WINDOW[0],
        WINDOW[1],
    ];
    let mut vars = base.to_vec();
    vars.push(("REPLAYSAFE_MAX_AGE", "email=2h, alert=30m,file_drop=1d"));
    let cx = resolve(&vars).unwrap();
    let recency = cx.recency();
    assert_eq!(
        recency.max_age(&EffectKind::Email),
        chrono::TimeDelta::hours(2)
    );
    assert_eq!(
        recency.max_age(&EffectKind::Alert),
        chrono::TimeDelta::minutes(30)
    );
    assert_eq!(
        recency.max_age(&EffectKind::FileDrop),
        chrono::TimeDelta::days(1)
    );
    assert_eq!(
        recency.max_age(&EffectKind::Webhook),
        chrono::TimeDelta::hours(6)
    );

    // Three hours after the window: email (2 h) is stale, a webhook (6 h default) is not.
    let late = cx.with_clock(std::sync::Arc::new(replaysafe_core::FixedClock::new(at(
        2026, 8, 6, 3,
    ))));
    assert!(late.decide(&EffectKind::Webhook, "t").delivers());
    let email = late.decide(&EffectKind::Email, "t");
    assert!(!email.delivers());
    assert_eq!(email.reasons(), [Reason::StaleWindow]);
}

#[test]
fn every_explicit_run_kind_parses() {
    for kind in RunKind::ALL {
        let cx = resolve(&[
            ("REPLAYSAFE_PIPELINE", "p"),
            ("REPLAYSAFE_RUN_ID", "r"),
            ("REPLAYSAFE_RUN_KIND", kind.as_str()),
            WINDOW[0],
            WINDOW[1],
        ])
        .unwrap();
        assert_eq!(cx.run_kind(), kind);
    }
}

#[test]
fn airflow_prefixes_give_the_run_kind() {
    let cases = [
        ("scheduled__2026-08-06T01:00:00+00:00", RunKind::Scheduled),
        ("manual__2026-11-29T14:11:54.836492+00:00", RunKind::Manual),
        ("backfill__2026-08-05T00:00:00+00:00", RunKind::Backfill),
        (
            "asset_triggered__2026-08-06T01:00:00+00:00",
            RunKind::Scheduled,
        ),
    ];
    for (run_id, kind) in cases {
        let cx = airflow(run_id, &[]).unwrap();
        assert_eq!(cx.run_kind(), kind, "{run_id}");
        assert_eq!(cx.run_id().as_str(), run_id);
        assert_eq!(cx.pipeline(), "daily_orders");
    }
}

#[test]
fn unknown_airflow_prefix_is_unknown_and_suppresses() {
    for run_id in ["custom__2026-08-06", "2026-08-06", "Scheduled__2026-08-06"] {
        let cx = airflow(run_id, &[]).unwrap();
        assert_eq!(cx.run_kind(), RunKind::Unknown, "{run_id}");
        let decision = cx.decide(&EffectKind::Email, "a@b.example");
        assert!(decision.suppresses());
        assert!(decision.reasons().contains(&Reason::UnknownContext));
    }
}

#[test]
fn no_run_kind_information_is_unknown() {
    let cx = resolve(&[
        ("REPLAYSAFE_PIPELINE", "p"),
        ("REPLAYSAFE_RUN_ID", "r"),
        WINDOW[0],
        WINDOW[1],
    ])
    .unwrap();
    assert_eq!(cx.run_kind(), RunKind::Unknown);
}

#[test]
fn try_number_above_one_is_a_retry_but_not_for_backfills() {
    let scheduled = airflow(
        "scheduled__2026-08-06T01:00:00+00:00",
        &[("AIRFLOW_CTX_TRY_NUMBER", "2")],
    )
    .unwrap();
    assert_eq!(scheduled.run_kind(), RunKind::Retry);
    let first = airflow(
        "scheduled__2026-08-06T01:00:00+00:00",
        &[("AIRFLOW_CTX_TRY_NUMBER", "1")],
    )
    .unwrap();
    assert_eq!(first.run_kind(), RunKind::Scheduled);
    let backfill = airflow(
        "backfill__2026-08-05T00:00:00+00:00",
        &[("AIRFLOW_CTX_TRY_NUMBER", "3")],
    )
    .unwrap();
    assert_eq!(backfill.run_kind(), RunKind::Backfill);
    let err = airflow("scheduled__x", &[("AIRFLOW_CTX_TRY_NUMBER", "two")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("AIRFLOW_CTX_TRY_NUMBER") && err.contains("two"),
        "{err}"
    );
}

#[test]
fn run_type_and_prefix_disagreeing_suppresses() {
    let cx = airflow(
        "scheduled__2026-08-06T01:00:00+00:00",
        &[("AIRFLOW_CTX_RUN_TYPE", "backfill")],
    )
    .unwrap();
    assert_eq!(cx.run_kind(), RunKind::Backfill);
    assert!(cx.conflict().unwrap().contains("AIRFLOW_CTX_RUN_TYPE"));

    let cx = airflow(
        "backfill__2026-08-05T00:00:00+00:00",
        &[("AIRFLOW_CTX_RUN_TYPE", "manual")],
    )
    .unwrap();
    assert_eq!(cx.run_kind(), RunKind::Backfill);

    let cx = airflow(
        "manual__2026-08-05T00:00:00+00:00",
        &[("AIRFLOW_CTX_RUN_TYPE", "scheduled")],
    )
    .unwrap();
    let decision = cx.decide(&EffectKind::Email, "a@b.example");
    assert!(decision.reasons().contains(&Reason::ConflictingContext));
    assert!(decision.suppresses());

    let agreed = airflow(
        "manual__2026-08-05T00:00:00+00:00",
        &[("AIRFLOW_CTX_RUN_TYPE", "manual")],
    )
    .unwrap();
    assert_eq!(agreed.run_kind(), RunKind::Manual);
    assert!(agreed.conflict().is_none());
}

#[test]
fn explicit_values_win_over_airflow() {
    let cx = airflow(
        "scheduled__2026-08-06T01:00:00+00:00",
        &[
            ("REPLAYSAFE_RUN_KIND", "backfill"),
            ("REPLAYSAFE_PIPELINE", "orders_v2"),
            ("REPLAYSAFE_WINDOW_START", "2026-07-01T00:00:00Z"),
            ("REPLAYSAFE_WINDOW_END", "2026-07-02T00:00:00Z"),
        ],
    )
    .unwrap();
    assert_eq!(cx.run_kind(), RunKind::Backfill);
    assert_eq!(cx.pipeline(), "orders_v2");
    assert_eq!(cx.window().start(), at(2026, 7, 1, 0));
}

#[test]
fn malformed_values_are_typed_errors_naming_the_variable() {
    let base = [("REPLAYSAFE_PIPELINE", "p"), ("REPLAYSAFE_RUN_ID", "r")];
    let cases: [(&[(&str, &str)], &str); 9] = [
        (
            &[("REPLAYSAFE_WINDOW_START", "yesterday"), WINDOW[1]],
            "REPLAYSAFE_WINDOW_START",
        ),
        (
            &[WINDOW[0], ("REPLAYSAFE_WINDOW_END", "2026-08-06")],
            "REPLAYSAFE_WINDOW_END",
        ),
        (
            &[WINDOW[0], WINDOW[1], ("REPLAYSAFE_RUN_KIND", "Backfill")],
            "REPLAYSAFE_RUN_KIND",
        ),
        (
            &[WINDOW[0], WINDOW[1], ("REPLAYSAFE_REPLAY", "maybe")],
            "REPLAYSAFE_REPLAY",
        ),
        (
            &[WINDOW[0], WINDOW[1], ("REPLAYSAFE_MODE", "quiet")],
            "REPLAYSAFE_MODE",
        ),
        (&[WINDOW[0]], "REPLAYSAFE_WINDOW_END"),
        (
            &[WINDOW[0], WINDOW[1], ("REPLAYSAFE_MAX_AGE", "email")],
            "REPLAYSAFE_MAX_AGE",
        ),
        (
            &[
                WINDOW[0],
                WINDOW[1],
                ("REPLAYSAFE_MAX_AGE", "email=2 hours"),
            ],
            "REPLAYSAFE_MAX_AGE",
        ),
        (
            &[WINDOW[0], WINDOW[1], ("REPLAYSAFE_MAX_AGE", "Email=2h")],
            "REPLAYSAFE_MAX_AGE",
        ),
    ];
    for (extra, variable) in cases {
        let mut vars = base.to_vec();
        vars.extend_from_slice(extra);
        let err = resolve(&vars).unwrap_err();
        assert!(
            matches!(err, Error::Invalid { .. } | Error::Missing { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(variable), "{variable}: {err}");
    }
}

#[test]
fn inverted_window_is_a_typed_error_and_an_empty_one_an_instant() {
    let err = resolve(&[
        ("REPLAYSAFE_PIPELINE", "p"),
        ("REPLAYSAFE_RUN_ID", "r"),
        ("REPLAYSAFE_WINDOW_START", "2026-08-06T00:00:00Z"),
        ("REPLAYSAFE_WINDOW_END", "2026-08-05T00:00:00Z"),
    ])
    .unwrap_err();
    assert!(matches!(err, Error::InvertedWindow { .. }), "{err:?}");
    assert!(
        err.to_string().contains("REPLAYSAFE_WINDOW_START/_END"),
        "{err}"
    );

    // What a real Airflow 3 manual run exports through the hook: start equal to end.
    let cx = resolve(&[
        ("AIRFLOW_CTX_DAG_ID", "daily_orders"),
        (
            "AIRFLOW_CTX_DAG_RUN_ID",
            "manual__2026-11-29T14:11:54.836492+00:00",
        ),
        (
            "AIRFLOW_CTX_DATA_INTERVAL_START",
            "2026-11-28T00:00:00+00:00",
        ),
        ("AIRFLOW_CTX_DATA_INTERVAL_END", "2026-11-28T00:00:00+00:00"),
    ])
    .unwrap();
    assert!(cx.window().is_instant());
    assert_eq!(cx.window().start(), at(2026, 11, 28, 0));
}

#[test]
fn missing_pipeline_run_id_and_window_are_named() {
    let err = resolve(&[("REPLAYSAFE_RUN_ID", "r"), WINDOW[0], WINDOW[1]])
        .unwrap_err()
        .to_string();
    assert!(err.contains("REPLAYSAFE_PIPELINE"), "{err}");
    let err = resolve(&[("REPLAYSAFE_PIPELINE", "p"), WINDOW[0], WINDOW[1]])
        .unwrap_err()
        .to_string();
    assert!(err.contains("REPLAYSAFE_RUN_ID"), "{err}");
    // No window is not an error: the context suppresses everything and says what to set.
    let cx = resolve(&[("REPLAYSAFE_PIPELINE", "p"), ("REPLAYSAFE_RUN_ID", "r")]).unwrap();
    assert!(!cx.has_window());
    assert!(
        cx.window_note()
            .unwrap()
            .contains("REPLAYSAFE_WINDOW_START")
    );
}

#[test]
fn replay_flag_values() {
    for (value, expected) in [("true", true), ("false", false), ("1", true), ("0", false)] {
        let cx = resolve(&[
            ("REPLAYSAFE_PIPELINE", "p"),
            ("REPLAYSAFE_RUN_ID", "r"),
            ("REPLAYSAFE_REPLAY", value),
            WINDOW[0],
            WINDOW[1],
        ])
        .unwrap();
        assert_eq!(cx.replay_flag(), Some(expected));
        assert_eq!(cx.is_replay(), expected);
    }
}

#[test]
fn trusted_approvers_set_but_blank_is_an_error_naming_it() {
    let base = [
        ("REPLAYSAFE_PIPELINE", "p"),
        ("REPLAYSAFE_RUN_ID", "r"),
        ("REPLAYSAFE_RUN_KIND", "backfill"),
        WINDOW[0],
        WINDOW[1],
    ];
    // Unset, the check is off.
    let cx = resolve(&base).unwrap();
    assert!(cx.trusted_approvers().is_none());
    for blank in ["", " ", "\t\n"] {
        let mut vars = base.to_vec();
        vars.push(("REPLAYSAFE_TRUSTED_APPROVERS", blank));
        let err = resolve(&vars).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{blank:?}: {err:?}");
        let text = err.to_string();
        assert!(
            text.contains("REPLAYSAFE_TRUSTED_APPROVERS") && text.contains("blank"),
            "{text}"
        );
        // The same from the operating system's variables.
        let os = vars
            .iter()
            .map(|(k, v)| (std::ffi::OsString::from(k), std::ffi::OsString::from(v)));
        let err = ReplayContext::from_vars_os(os).unwrap_err().to_string();
        assert!(err.contains("REPLAYSAFE_TRUSTED_APPROVERS"), "{err}");
    }
    // Other blank variables still count as unset.
    let mut vars = base.to_vec();
    vars.extend([("REPLAYSAFE_OPT_IN", " "), ("REPLAYSAFE_MODE", "")]);
    assert!(resolve(&vars).is_ok());
}

#[test]
fn the_airflow_hooks_clear_number_backfill_id_and_lineage_are_read() {
    // A cleared scheduled run is a retry (keyed like the first try); a cleared backfill
    // run stays a backfill.
    let cleared = airflow(
        "scheduled__2026-08-06T01:00:00+00:00",
        &[("AIRFLOW_CTX_CLEAR_NUMBER", "1")],
    )
    .unwrap();
    assert_eq!(cleared.run_kind(), RunKind::Retry);
    let backfill = airflow(
        "backfill__2026-08-05T00:00:00+00:00",
        &[("AIRFLOW_CTX_CLEAR_NUMBER", "2")],
    )
    .unwrap();
    assert_eq!(backfill.run_kind(), RunKind::Backfill);
    let err = airflow("scheduled__x", &[("AIRFLOW_CTX_CLEAR_NUMBER", "-1")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("AIRFLOW_CTX_CLEAR_NUMBER"), "{err}");

    // Airflow's backfill id groups the runs; a different explicit one conflicts.
    let grouped = airflow(
        "backfill__2026-08-05T00:00:00+00:00",
        &[("AIRFLOW_CTX_BACKFILL_ID", "7")],
    )
    .unwrap();
    assert_eq!(grouped.backfill_id(), Some("7"));
    let disagreeing = airflow(
        "backfill__2026-08-05T00:00:00+00:00",
        &[
            ("AIRFLOW_CTX_BACKFILL_ID", "7"),
            ("REPLAYSAFE_BACKFILL_ID", "8"),
        ],
    )
    .unwrap();
    assert!(disagreeing.is_conflicting());
    // A scheduled run that claims a backfill conflicts, as with REPLAYSAFE_BACKFILL_ID.
    let claimed = airflow(
        "scheduled__2026-08-06T01:00:00+00:00",
        &[("AIRFLOW_CTX_BACKFILL_ID", "7")],
    )
    .unwrap();
    assert!(claimed.is_conflicting());

    // The hook's lineage joins REPLAYSAFE_UPSTREAM's; an upstream backfill suppresses.
    let consumer = resolve(&[
        ("AIRFLOW_CTX_DAG_ID", "consumer"),
        ("AIRFLOW_CTX_DAG_RUN_ID", "asset_triggered__2026-08-06T01:00:00+00:00"),
        (
            "AIRFLOW_CTX_REPLAYSAFE_UPSTREAM",
            r#"[{"pipeline": "producer", "run_id": "backfill__2026-08-05T00:00:00+00:00", "logical_date": "2026-08-05T00:00:00+00:00"}]"#,
        ),
        (
            "REPLAYSAFE_UPSTREAM",
            r#"[{"pipeline": "other", "run_id": "scheduled__2026-08-05T00:00:00+00:00", "logical_date": "2026-08-05T00:00:00+00:00"}]"#,
        ),
    ])
    .unwrap();
    assert_eq!(consumer.upstream().len(), 2);
    assert!(consumer.is_upstream_replay());
    assert!(!consumer.decide(&EffectKind::Webhook, "").delivers());
    let err = resolve(&[
        ("AIRFLOW_CTX_DAG_ID", "consumer"),
        ("AIRFLOW_CTX_DAG_RUN_ID", "asset_triggered__x"),
        ("AIRFLOW_CTX_REPLAYSAFE_UPSTREAM", "[{\"pipeline\": 1}]"),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("AIRFLOW_CTX_REPLAYSAFE_UPSTREAM"), "{err}");
}

/// `DAGSTER_PIPES_CONTEXT` as Dagster's Pipes clients encode it: base64 of zlib of JSON.
fn pipes(data: serde_json::Value) -> String {
    use base64::Engine;
    use std::io::Write;
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(serde_json::json!({ "data": data }).to_string().as_bytes())
        .unwrap();
    base64::engine::general_purpose::STANDARD.encode(encoder.finish().unwrap())
}

fn dagster_partition(extras: serde_json::Value, retry_number: u32) -> String {
    // Yesterday's daily partition: current under a 2-day max age.
    let today = chrono::Utc::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let start = today - chrono::TimeDelta::days(1);
    pipes(serde_json::json!({
        "run_id": "6c1e7b8a-run", "job_name": "__ASSET_JOB", "retry_number": retry_number,
        "asset_keys": ["daily_orders"], "partition_key": start.format("%Y-%m-%d").to_string(),
        "partition_time_window": {"start": start.to_rfc3339(), "end": today.to_rfc3339()},
        "extras": extras,
    }))
}

#[test]
fn a_dagster_pipes_context_gives_pipeline_run_kind_and_window() {
    let context = |value: String, extra: &[(&str, &str)]| {
        let mut vars = vec![
            ("DAGSTER_PIPES_CONTEXT", value.as_str()),
            ("REPLAYSAFE_MAX_AGE", "webhook=2d"),
        ];
        vars.extend_from_slice(extra);
        resolve(&vars)
    };
    let latest = context(
        dagster_partition(serde_json::json!({"dagster/backfill": null}), 0),
        &[],
    )
    .unwrap();
    assert_eq!(latest.pipeline(), "daily_orders");
    assert_eq!(latest.run_kind(), RunKind::Scheduled);
    assert!(latest.decide(&EffectKind::Webhook, "").delivers());

    // A retry keeps the key: the same pipeline, window and effect.
    let retried = context(
        dagster_partition(serde_json::json!({"dagster/backfill": null}), 1),
        &[],
    )
    .unwrap();
    assert_eq!(retried.run_kind(), RunKind::Retry);
    assert_eq!(retried.window(), latest.window());

    // A backfill is known from the extras the helper passes, and suppresses.
    let backfill = context(
        dagster_partition(serde_json::json!({"dagster/backfill": "bkf_7"}), 0),
        &[],
    )
    .unwrap();
    assert_eq!(backfill.backfill_id(), Some("bkf_7"));
    let decision = backfill.decide(&EffectKind::Webhook, "");
    assert!(!decision.delivers() && decision.reasons().contains(&Reason::ReplayRun));

    // Extras that do not say whether the run is a backfill's: unknown, not current.
    let untold = context(dagster_partition(serde_json::json!({}), 0), &[]).unwrap();
    assert_eq!(untold.run_kind(), RunKind::Unknown);
    assert!(!untold.decide(&EffectKind::Webhook, "").delivers());

    // No window and no partition (a single-run range backfill): unknown, not current.
    let bare = context(
        pipes(serde_json::json!({"run_id": "r", "asset_keys": ["daily_orders"], "extras": {"dagster/backfill": null}})),
        &[],
    )
    .unwrap();
    assert!(
        bare.decide(&EffectKind::Webhook, "")
            .reasons()
            .contains(&Reason::UnknownWindow)
    );

    // Sources that disagree conflict: an explicit kind, window or backfill id, or Airflow.
    let value = dagster_partition(serde_json::json!({"dagster/backfill": "bkf_7"}), 0);
    for extra in [
        &[("REPLAYSAFE_RUN_KIND", "scheduled")][..],
        &[("REPLAYSAFE_BACKFILL_ID", "other")][..],
        &[
            ("REPLAYSAFE_WINDOW_START", "2026-08-05T00:00:00Z"),
            ("REPLAYSAFE_WINDOW_END", "2026-08-06T00:00:00Z"),
        ][..],
        &[(
            "AIRFLOW_CTX_DAG_RUN_ID",
            "scheduled__2026-08-05T00:00:00+00:00",
        )][..],
    ] {
        let cx = context(value.clone(), extra).unwrap();
        assert!(cx.is_conflicting(), "{extra:?}");
        assert!(!cx.decide(&EffectKind::Webhook, "").delivers());
    }
    let err = context("bm90IHpsaWI=".to_owned(), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("DAGSTER_PIPES_CONTEXT"), "{err}");
}
