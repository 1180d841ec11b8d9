//! The `metrics` facade bridge: live pass-through, suppressed aggregation in replays.

use chrono::{TimeDelta, Utc};
use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{EffectKind, OptIn, RunKind, Window};
use replaysafe_metrics::ReplaySafeRecorder;
use replaysafe_test::contexts;

use crate::support::{CountingRecorder, FileJournal, suppressing_contexts};

/// 10,000 increments of one counter over four customers, a gauge and a histogram.
fn hot_loop() {
    for index in 0..10_000u32 {
        let customer = format!("c-{}", index % 4);
        metrics::counter!("orders_total", "customer" => customer, "region" => "eu").increment(1);
    }
    metrics::gauge!("queue_depth").set(12.0);
    metrics::gauge!("queue_depth").increment(3.0);
    metrics::histogram!("batch_seconds").record(0.25);
    metrics::histogram!("batch_seconds").record(0.75);
}

#[test]
fn backfill_increments_never_reach_the_inner_recorder_and_journal_one_line_per_metric() {
    let inner = CountingRecorder::default();
    let journal = FileJournal::new();
    let recorder = ReplaySafeRecorder::new(
        inner.clone(),
        &contexts::backfill(),
        journal.journal.clone(),
    );
    assert!(!recorder.is_pass_through());

    metrics::with_local_recorder(&recorder, hot_loop);
    assert_eq!(recorder.flush().unwrap(), 3);
    drop(recorder);

    assert_eq!(inner.calls(), 0, "the inner recorder was reached");
    assert_eq!(inner.increments(), 0);
    assert_eq!(inner.updates(), 0);
    let lines = journal.lines();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines.iter().all(|line| !line.contains("c-1")),
        "a label value reached the journal"
    );
    let records = journal.records();
    let by_target = |target: &str| {
        records
            .iter()
            .find(|record| record.effect.target == target)
            .unwrap_or_else(|| panic!("no record for {target}: {records:#?}"))
    };
    let orders = by_target("orders_total{customer,region}");
    assert_eq!(orders.decision, JournalDecision::Suppressed);
    assert_eq!(orders.effect.kind, "metric");
    assert_eq!(orders.effect.message_type, "counter");
    assert_eq!(
        orders.effect.summary.as_deref(),
        Some("+10000 over 10000 increments across 4 series")
    );
    assert_eq!(orders.reasons, ["replay_run", "stale_window"]);
    assert_eq!(orders.backfill_id.as_deref(), Some("bf-test"));
    let depth = by_target("queue_depth");
    assert_eq!(
        depth.effect.summary.as_deref(),
        Some("= 15 after 2 updates")
    );
    let batch = by_target("batch_seconds");
    assert_eq!(batch.effect.summary.as_deref(), Some("2 values, sum 1"));
}

#[test]
fn in_a_live_run_all_ten_thousand_increments_arrive_and_nothing_is_journaled() {
    let inner = CountingRecorder::default();
    let journal = FileJournal::new();
    let recorder =
        ReplaySafeRecorder::new(inner.clone(), &contexts::live(), journal.journal.clone());
    assert!(recorder.is_pass_through());

    metrics::with_local_recorder(&recorder, hot_loop);
    assert_eq!(recorder.flush().unwrap(), 0);
    drop(recorder);

    assert_eq!(inner.increments(), 10_000);
    assert_eq!(inner.updates(), 4);
    assert!(journal.lines().is_empty());
}

#[test]
fn every_suppressing_context_keeps_the_inner_recorder_untouched() {
    for (name, cx) in suppressing_contexts() {
        let inner = CountingRecorder::default();
        let journal = FileJournal::new();
        let recorder = ReplaySafeRecorder::new(inner.clone(), &cx, journal.journal.clone());
        metrics::with_local_recorder(&recorder, || {
            metrics::describe_counter!("orders_total", "Orders");
            metrics::counter!("orders_total").increment(5);
        });
        drop(recorder);
        assert_eq!(inner.calls(), 0, "{name}");
        let records = journal.records();
        assert_eq!(records.len(), 1, "{name}");
        assert_eq!(records[0].decision, JournalDecision::Suppressed, "{name}");
        assert_eq!(
            records[0].effect.summary.as_deref(),
            Some("+5 over 1 increment"),
            "{name}"
        );
    }
}

#[test]
fn a_ninety_window_backfill_of_a_hot_counter_writes_ninety_lines() {
    let journal = FileJournal::new();
    let inner = CountingRecorder::default();
    let first = contexts::last_month_window();
    for day in 0..90 {
        let start = first.start() - TimeDelta::days(day);
        let window = Window::new(start, start + TimeDelta::days(1)).unwrap();
        let cx = contexts::builder(RunKind::Backfill, window)
            .backfill_id("bf-90")
            .build()
            .unwrap();
        let recorder = ReplaySafeRecorder::new(inner.clone(), &cx, journal.journal.clone());
        metrics::with_local_recorder(&recorder, || {
            for _ in 0..1_000 {
                metrics::counter!("orders_total", "region" => "eu").increment(1);
            }
        });
        // Dropped here: the window's aggregate is journaled.
    }

    assert_eq!(inner.calls(), 0);
    let records = journal.records();
    assert_eq!(records.len(), 90);
    let mut windows: Vec<_> = records.iter().map(|r| r.window.start).collect();
    windows.dedup();
    assert_eq!(windows.len(), 90, "one line per window");
    assert!(
        records
            .iter()
            .all(|r| r.effect.summary.as_deref() == Some("+1000 over 1000 increments"))
    );
}

#[test]
fn only_what_changed_since_the_last_flush_is_journaled_again() {
    let journal = FileJournal::new();
    let recorder = ReplaySafeRecorder::new(
        CountingRecorder::default(),
        &contexts::backfill(),
        journal.journal.clone(),
    );
    let handle = recorder.flush_handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::counter!("a_total").increment(2);
        metrics::counter!("b_total").increment(2);
    });
    assert_eq!(handle.flush().unwrap(), 2);
    assert_eq!(handle.flush().unwrap(), 0);
    metrics::with_local_recorder(&recorder, || metrics::counter!("a_total").increment(1));
    drop(recorder);

    let records = journal.records();
    assert_eq!(records.len(), 3);
    assert_eq!(records[2].effect.target, "a_total");
    assert_eq!(
        records[2].effect.summary.as_deref(),
        Some("+1 over 1 increment")
    );
}

#[test]
fn an_opt_in_forwards_the_metrics_it_covers_and_journals_them_as_delivered() {
    let opt_in = OptIn::new(
        "re-count corrected orders",
        "jane@ops",
        Utc::now() + TimeDelta::days(365),
    )
    .unwrap()
    .for_kind(EffectKind::Metric)
    .for_target("orders_total{region}");
    let cx = contexts::backfill().with_opt_in(opt_in);
    let inner = CountingRecorder::default();
    let journal = FileJournal::new();
    let recorder = ReplaySafeRecorder::new(inner.clone(), &cx, journal.journal.clone());

    metrics::with_local_recorder(&recorder, || {
        for _ in 0..100 {
            metrics::counter!("orders_total", "region" => "eu").increment(1);
            metrics::counter!("refunds_total", "region" => "eu").increment(1);
        }
    });
    drop(recorder);

    assert_eq!(
        inner.increments(),
        100,
        "only the covered counter is forwarded"
    );
    let records = journal.records();
    assert_eq!(records.len(), 2);
    let orders = records
        .iter()
        .find(|r| r.effect.target == "orders_total{region}")
        .unwrap();
    assert_eq!(orders.decision, JournalDecision::Delivered);
    assert_eq!(orders.opt_in.as_ref().unwrap().approved_by, "jane@ops");
    assert!(orders.reasons.contains(&"opt_in".to_owned()));
    let refunds = records
        .iter()
        .find(|r| r.effect.target == "refunds_total{region}")
        .unwrap();
    assert_eq!(refunds.decision, JournalDecision::Suppressed);
}
