//! Staging: the upsert rules, the gate at staging, transactions, schema versions.

use chrono::TimeDelta;
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{EffectKind, OptIn, ReplayContext, RunKind};
use replaysafe_outbox::{OutboxError, SourceVersion, Status, sqlite};
use replaysafe_test::contexts;

use crate::support::{Fixture, Note};

#[test]
fn a_current_run_stages_a_pending_row_that_commits_with_the_data() {
    let fx = Fixture::new();
    let mut conn = fx.connection();
    let tx = conn.transaction().unwrap();
    tx.execute_batch("CREATE TABLE orders_daily (day TEXT, total INTEGER); INSERT INTO orders_daily VALUES ('2026-08-05', 42)")
        .unwrap();
    let staged =
        sqlite::stage(&tx, &fx.live(), &fx.route, &Note::new("daily_total", "42")).unwrap();
    tx.commit().unwrap();

    assert_eq!(staged.status, Status::Pending);
    assert_eq!(staged.reasons, ["current_window"]);
    assert!(staged.changed);
    assert_eq!(fx.row_count(), 1);
    assert_eq!(fx.column::<String>(&staged.key, "route"), "partner_webhook");
    assert_eq!(fx.column::<String>(&staged.key, "run_kind"), "scheduled");
    assert!(
        fx.journal.is_empty(),
        "a pending row is journaled when it is delivered"
    );
}

#[test]
fn a_rolled_back_transaction_leaves_no_row() {
    let fx = Fixture::new();
    let mut conn = fx.connection();
    let tx = conn.transaction().unwrap();
    sqlite::stage(&tx, &fx.live(), &fx.route, &Note::new("daily_total", "42")).unwrap();
    tx.rollback().unwrap();
    assert_eq!(fx.row_count(), 0);

    // Positive control: the same staging, committed, leaves one.
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    assert_eq!(fx.row_count(), 1);
}

#[test]
fn a_dropped_transaction_leaves_no_row() {
    let fx = Fixture::new();
    let mut conn = fx.connection();
    {
        let tx = conn.transaction().unwrap();
        sqlite::stage(&tx, &fx.live(), &fx.route, &Note::new("daily_total", "42")).unwrap();
    }
    assert_eq!(fx.row_count(), 0);
}

#[test]
fn a_backfill_stages_a_suppressed_row_and_journals_would_have_sent() {
    let fx = Fixture::new();
    let staged = fx.stage(&fx.backfill(), &Note::new("daily_total", "41"));
    assert_eq!(staged.status, Status::Suppressed);
    assert!(staged.reasons.contains(&"replay_run".to_owned()));

    let records = fx.journal.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].decision, JournalDecision::Suppressed);
    assert_eq!(records[0].effect.idempotency_key.as_str(), staged.key);
    assert_eq!(records[0].backfill_id.as_deref(), Some("bf-test"));
    assert_eq!(fx.column::<String>(&staged.key, "backfill_id"), "bf-test");
}

#[test]
fn every_replay_context_stages_suppressed() {
    let fx = Fixture::new();
    let window = contexts::current_window();
    let flagged = contexts::builder(RunKind::Scheduled, window)
        .replay_flag(true)
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    let unknown = fx.context(RunKind::Unknown, window);
    // Sources that disagree: the explicit kind says scheduled, Airflow's run a backfill.
    let conflicting = ReplayContext::from_vars([
        ("REPLAYSAFE_RUN_KIND", "scheduled".to_owned()),
        ("AIRFLOW_CTX_DAG_ID", "daily_orders".to_owned()),
        ("AIRFLOW_CTX_DAG_RUN_ID", "backfill__2026-08-05".to_owned()),
        (
            "REPLAYSAFE_WINDOW_START",
            replaysafe_core::rfc3339(window.start()),
        ),
        (
            "REPLAYSAFE_WINDOW_END",
            replaysafe_core::rfc3339(window.end()),
        ),
    ])
    .unwrap()
    .with_clock(fx.clock.clone());
    for (cx, reason) in [
        (flagged, "replay_flag"),
        (unknown, "unknown_context"),
        (conflicting, "conflicting_context"),
    ] {
        let staged = fx.stage(&cx, &Note::new(reason, "1"));
        assert_eq!(staged.status, Status::Suppressed, "{reason}");
        assert!(staged.reasons.contains(&reason.to_owned()), "{reason}");
    }
}

#[test]
fn a_replay_restages_the_same_row_and_never_adds_one() {
    let fx = Fixture::new();
    let first = fx.stage(&fx.backfill(), &Note::new("daily_total", "41"));
    let again = fx
        .backfill()
        .with_run_id(replaysafe_core::RunId::new("backfill__again").unwrap());
    let second = fx.stage(&again, &Note::new("daily_total", "41"));
    assert_eq!(first.key, second.key);
    assert_eq!(fx.row_count(), 1);
    assert!(!second.changed, "the same effect again writes nothing");
    assert_eq!(
        fx.column::<String>(&first.key, "run_id"),
        fx.backfill().run_id().as_str()
    );

    // Changed data restages the row, still one, with the newer staging's context.
    let third = fx.stage(&again, &Note::new("daily_total", "40"));
    assert!(third.changed);
    assert_eq!(fx.row_count(), 1);
    assert_eq!(fx.column::<String>(&first.key, "run_id"), "backfill__again");
    assert!(fx.column::<String>(&first.key, "effect").contains("\"40\""));
}

#[test]
fn a_replay_never_demotes_a_row_a_current_run_staged() {
    let fx = Fixture::new();
    let live = fx.live();
    let first = fx.stage(&live, &Note::new("daily_total", "42"));
    let replay = live.with_run_kind(RunKind::Replay);
    let second = fx.stage(&replay, &Note::new("daily_total", "43"));
    assert_eq!(first.key, second.key);
    assert_eq!(
        second.status,
        Status::Suppressed,
        "the gate's verdict on the replay"
    );
    assert!(second.changed, "the newer payload is taken");
    assert_eq!(fx.column::<String>(&first.key, "status"), "pending");
    assert_eq!(fx.column::<String>(&first.key, "run_kind"), "scheduled");
    assert_eq!(fx.row_count(), 1);
}

#[test]
fn a_current_run_promotes_a_suppressed_row() {
    let fx = Fixture::new();
    let live = fx.live();
    let dry = live.with_mode(replaysafe_core::Mode::DryRun);
    assert_eq!(
        fx.stage(&dry, &Note::new("daily_total", "42")).status,
        Status::Suppressed
    );
    assert_eq!(
        fx.stage(&live, &Note::new("daily_total", "42")).status,
        Status::Pending
    );
    assert_eq!(fx.row_count(), 1);
}

#[test]
fn an_older_source_version_never_overwrites_a_newer_one() {
    let fx = Fixture::new();
    let cx = fx.live();
    let mut conn = fx.connection();
    let tx = conn.transaction().unwrap();
    let newer = sqlite::stage_versioned(
        &tx,
        &cx,
        &fx.route,
        &Note::new("t", "new"),
        SourceVersion(20),
    )
    .unwrap();
    let older = sqlite::stage_versioned(
        &tx,
        &cx,
        &fx.route,
        &Note::new("t", "old"),
        SourceVersion(10),
    )
    .unwrap();
    tx.commit().unwrap();
    assert!(newer.changed);
    assert!(!older.changed);
    let effect: String = fx.column(&newer.key, "effect");
    assert!(effect.contains("\"new\""), "{effect}");
    assert_eq!(fx.column::<i64>(&newer.key, "source_version"), 20);

    // Positive control: an equal or newer version does overwrite.
    let tx = conn.transaction().unwrap();
    let same = sqlite::stage_versioned(
        &tx,
        &cx,
        &fx.route,
        &Note::new("t", "newest"),
        SourceVersion(20),
    )
    .unwrap();
    tx.commit().unwrap();
    assert!(same.changed);
    assert!(fx.column::<String>(&newer.key, "effect").contains("newest"));
}

#[test]
fn a_source_version_from_a_time_orders_by_time() {
    let earlier = SourceVersion::from(contexts::now());
    let later = SourceVersion::from(contexts::now() + TimeDelta::seconds(1));
    assert!(earlier < later);
}

#[test]
fn an_invalid_effect_is_refused_and_stages_nothing() {
    let fx = Fixture::new();
    let mut conn = fx.connection();
    let tx = conn.transaction().unwrap();
    let error = sqlite::stage(&tx, &fx.live(), &fx.route, &Note::new("t", "")).unwrap_err();
    tx.commit().unwrap();
    assert!(
        matches!(error, OutboxError::InvalidEffect { ref route, .. } if route == "partner_webhook")
    );
    assert_eq!(
        replaysafe_core::error_chain(&error),
        "invalid effect for route partner_webhook: invalid test effect: body: must not be empty"
    );
    assert_eq!(fx.row_count(), 0);
}

#[test]
fn an_opt_in_at_staging_makes_a_replay_row_pending_and_is_stored_with_it() {
    let fx = Fixture::new();
    let opt_in = OptIn::new(
        "partner lost July",
        "jane@ops",
        contexts::now() + TimeDelta::hours(1),
    )
    .unwrap()
    .for_kind(EffectKind::Webhook)
    .for_pipeline("daily_orders")
    .for_backfill("bf-test");
    let cx = fx.backfill().with_opt_in(opt_in.clone());
    let staged = fx.stage(&cx, &Note::new("daily_total", "41"));
    assert_eq!(staged.status, Status::Pending);
    assert!(staged.reasons.contains(&"opt_in".to_owned()));
    // The whole approval document, which reads back as the same opt-in.
    let document: String = fx.column(&staged.key, "opt_in");
    assert_eq!(OptIn::from_file_json(&document).unwrap(), opt_in);
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let fx = Fixture::new();
    let conn = fx.connection();
    conn.execute("UPDATE replaysafe_outbox_schema SET version = 99", [])
        .unwrap();
    let error = sqlite::SqliteOutbox::open(&fx.path).unwrap_err();
    assert!(
        matches!(
            error,
            OutboxError::SchemaTooNew {
                found: 99,
                supported: sqlite::SCHEMA_VERSION
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("upgrade replaysafe"), "{error}");
    assert_eq!(sqlite::schema_version(&conn).unwrap(), 99);
}

#[test]
fn migrating_twice_changes_nothing() {
    let fx = Fixture::new();
    fx.stage(&fx.live(), &Note::new("t", "1"));
    let mut conn = fx.connection();
    sqlite::migrate(&mut conn).unwrap();
    assert_eq!(
        sqlite::schema_version(&conn).unwrap(),
        sqlite::SCHEMA_VERSION
    );
    assert_eq!(fx.row_count(), 1);
}

#[test]
fn staging_without_the_tables_is_a_store_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn =
        replaysafe_outbox::rusqlite::Connection::open(dir.path().join("bare.db")).unwrap();
    let fx = Fixture::new();
    let tx = conn.transaction().unwrap();
    let error = sqlite::stage(&tx, &fx.live(), &fx.route, &Note::new("t", "1")).unwrap_err();
    assert!(matches!(error, OutboxError::Store { .. }), "{error:?}");
}

/// The parameters another language's driver binds to STAGE_SQL make the row `stage` makes.
#[test]
fn stage_params_bound_to_the_statement_make_the_row_stage_makes() {
    use replaysafe_outbox::StageParam;
    use replaysafe_outbox::rusqlite::types::Value;

    let bound = |params: &[StageParam]| -> Vec<Value> {
        params
            .iter()
            .map(|param| match param {
                StageParam::Null => Value::Null,
                StageParam::Bool(b) => Value::Integer(i64::from(*b)),
                StageParam::Integer(i) => Value::Integer(*i),
                StageParam::Text(t) => Value::Text(t.clone()),
                other => panic!("a parameter this test does not know: {other:?}"),
            })
            .collect()
    };
    let columns = "route, pipeline, effect_kind, message_type, target, window_start, window_end, \
                   run_id, run_kind, replay_flag, backfill_id, mode, max_age_ms, opt_in, \
                   window_known, upstream, effect, payload_sha256, payload_bytes, status, reasons";
    let row_of = |fx: &Fixture, key: &str| -> Vec<Value> {
        fx.connection()
            .query_row(
                &format!("SELECT {columns} FROM replaysafe_outbox WHERE idempotency_key = ?1"),
                [key],
                |row| (0..21).map(|i| row.get::<_, Value>(i)).collect(),
            )
            .unwrap()
    };
    for (name, current) in [("live", true), ("backfill", false)] {
        let (by_stage, by_params) = (Fixture::new(), Fixture::new());
        let note = Note::new("daily_total", "42");
        let cx = |fx: &Fixture| if current { fx.live() } else { fx.backfill() };
        let staged = by_stage.stage(&cx(&by_stage), &note);

        let (params, prepared) = replaysafe_outbox::stage_params(
            &cx(&by_params),
            &by_params.route,
            &note,
            SourceVersion::default(),
        )
        .unwrap();
        assert_eq!(params.len(), 31, "{name}");
        assert_eq!(prepared.key, staged.key, "{name}");
        assert_eq!(prepared.status, staged.status, "{name}");
        let conn = by_params.connection();
        let changed = conn
            .execute(
                sqlite::STAGE_SQL,
                replaysafe_outbox::rusqlite::params_from_iter(bound(&params)),
            )
            .unwrap();
        assert_eq!(changed, 1, "{name}");
        assert_eq!(
            row_of(&by_params, &staged.key),
            row_of(&by_stage, &staged.key),
            "{name}"
        );
        // A suppressed staging is journaled through the route's journal either way.
        assert_eq!(
            by_params.journal.is_empty(),
            by_stage.journal.is_empty(),
            "{name}"
        );
    }
}
