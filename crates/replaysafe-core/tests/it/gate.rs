use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use proptest::prelude::*;
use replaysafe_core::{
    EffectKind, FixedClock, Mode, OptIn, Reason, ReplayContext, RunKind, Window,
};

use crate::support::{at, context, day};

fn any_kind() -> impl Strategy<Value = RunKind> {
    proptest::sample::select(RunKind::ALL.to_vec())
}

fn any_effect_kind() -> impl Strategy<Value = EffectKind> {
    proptest::sample::select(EffectKind::BUILT_IN.to_vec())
}

/// A window ending `age_minutes` before now, and now.
fn window_aged(age_minutes: i64) -> (Window, DateTime<Utc>) {
    let now = at(2026, 8, 6, 1);
    let end = now - TimeDelta::minutes(age_minutes);
    (Window::new(end - TimeDelta::days(1), end).unwrap(), now)
}

proptest! {
    #[test]
    fn replay_kinds_without_opt_in_always_suppress(
        kind in proptest::sample::select(vec![RunKind::Backfill, RunKind::Replay, RunKind::Rebuild]),
        effect in any_effect_kind(),
        age in -600i64..100_000,
    ) {
        let (window, now) = window_aged(age);
        let decision = context(kind, window, now).decide(&effect, "t");
        prop_assert!(decision.suppresses());
        prop_assert!(decision.reasons().contains(&Reason::ReplayRun));
    }

    #[test]
    fn replay_flag_suppresses_any_kind(kind in any_kind(), effect in any_effect_kind(), age in -600i64..100_000) {
        let (window, now) = window_aged(age);
        let cx = ReplayContext::builder()
            .pipeline("p").run_id("r").run_kind(kind).replay_flag(true).window(window)
            .clock(Arc::new(FixedClock::new(now))).build().unwrap();
        let decision = cx.decide(&effect, "t");
        prop_assert!(decision.suppresses());
        prop_assert!(decision.reasons().contains(&Reason::ReplayFlag));
    }

    #[test]
    fn unknown_always_suppresses_even_with_opt_in(effect in any_effect_kind(), age in -600i64..100_000) {
        let (window, now) = window_aged(age);
        let opt_in = OptIn::new("why", "who", now + TimeDelta::days(1)).unwrap().for_kind(effect.clone());
        let decision = context(RunKind::Unknown, window, now).with_opt_in(opt_in).decide(&effect, "t");
        prop_assert!(decision.suppresses());
        prop_assert!(decision.reasons().contains(&Reason::UnknownContext));
        prop_assert!(decision.opt_in().is_none());
    }

    #[test]
    fn stale_window_suppresses_whatever_the_kind(kind in any_kind(), effect in any_effect_kind(), extra in 1i64..100_000) {
        let max_age = replaysafe_core::RecencyPolicy::default().max_age(&effect).num_minutes();
        let (window, now) = window_aged(max_age + extra);
        let decision = context(kind, window, now).decide(&effect, "t");
        prop_assert!(decision.suppresses());
        prop_assert!(decision.reasons().contains(&Reason::StaleWindow));
    }

    #[test]
    fn fresh_current_runs_deliver(
        kind in proptest::sample::select(vec![RunKind::Scheduled, RunKind::Manual, RunKind::Retry, RunKind::Resume]),
        effect in any_effect_kind(),
        age_fraction in 0.0f64..=1.0,
    ) {
        let max_age = replaysafe_core::RecencyPolicy::default().max_age(&effect).num_minutes();
        let (window, now) = window_aged((max_age as f64 * age_fraction) as i64);
        let decision = context(kind, window, now).decide(&effect, "t");
        prop_assert!(decision.delivers());
        prop_assert_eq!(decision.reasons(), &[Reason::CurrentWindow]);
    }

    #[test]
    fn opt_in_covers_exactly_its_kinds_targets_and_time(
        covered in any_effect_kind(),
        asked in any_effect_kind(),
        restrict in any::<bool>(),
        same_target in any::<bool>(),
        expires_in_minutes in -120i64..120,
    ) {
        let (window, now) = window_aged(60 * 24 * 30);
        let mut opt_in = OptIn::new("re-send corrected invoices", "jane", now + TimeDelta::minutes(expires_in_minutes))
            .unwrap()
            .for_kind(covered.clone());
        if restrict {
            opt_in = opt_in.for_target("ana@shop.example");
        }
        let target = if same_target { "ana@shop.example" } else { "bob@shop.example" };
        let decision = context(RunKind::Backfill, window, now).with_opt_in(opt_in).decide(&asked, target);

        let covers = covered == asked && (!restrict || same_target);
        let alive = expires_in_minutes > 0;
        prop_assert_eq!(decision.delivers(), covers && alive);
        prop_assert_eq!(decision.reasons().contains(&Reason::OptIn), covers && alive);
        prop_assert_eq!(decision.reasons().contains(&Reason::OptInExpired), covers && !alive);
        prop_assert_eq!(decision.opt_in().is_some(), covers);
    }

    #[test]
    fn flag_and_kind_conflict_resolves_to_suppression(
        kind in proptest::sample::select(vec![RunKind::Backfill, RunKind::Replay, RunKind::Rebuild]),
        effect in any_effect_kind(),
    ) {
        // Explicit "not a replay" flag against a replay kind: still suppressed.
        let (window, now) = window_aged(0);
        let cx = ReplayContext::builder()
            .pipeline("p").run_id("r").run_kind(kind).replay_flag(false).window(window)
            .clock(Arc::new(FixedClock::new(now))).build().unwrap();
        prop_assert!(cx.decide(&effect, "t").suppresses());
    }

    #[test]
    fn dry_run_suppresses_even_opted_in(kind in any_kind(), effect in any_effect_kind()) {
        let (window, now) = window_aged(0);
        let opt_in = OptIn::new("why", "who", now + TimeDelta::days(1)).unwrap().for_kind(effect.clone());
        let cx = context(kind, window, now).with_mode(Mode::DryRun).with_opt_in(opt_in);
        let decision = cx.decide(&effect, "t");
        prop_assert!(decision.suppresses());
        prop_assert!(decision.reasons().contains(&Reason::DryRun));
    }
}

#[test]
fn decide_returns_every_reason() {
    let now = at(2026, 8, 6, 1);
    let cx = ReplayContext::builder()
        .pipeline("p")
        .run_id("r")
        .run_kind(RunKind::Backfill)
        .replay_flag(true)
        .mode(Mode::DryRun)
        .window(day(at(2026, 7, 1, 0)))
        .clock(Arc::new(FixedClock::new(now)))
        .build()
        .unwrap();
    assert_eq!(
        cx.decide(&EffectKind::Email, "t").reasons(),
        &[
            Reason::DryRun,
            Reason::ReplayRun,
            Reason::ReplayFlag,
            Reason::StaleWindow
        ]
    );
}

#[test]
fn max_age_is_per_kind_and_configurable() {
    // A window that ended 2 hours ago: fresh for email (6 h), stale for alerts (1 h).
    let (window, now) = window_aged(120);
    let cx = context(RunKind::Scheduled, window, now);
    assert!(cx.decide(&EffectKind::Email, "t").delivers());
    assert!(cx.decide(&EffectKind::Alert, "t").suppresses());

    let strict = cx
        .recency()
        .clone()
        .with_max_age(EffectKind::Email, TimeDelta::minutes(30))
        .unwrap();
    assert!(
        cx.with_recency(strict)
            .decide(&EffectKind::Email, "t")
            .suppresses()
    );
    assert!(
        cx.recency()
            .clone()
            .with_max_age(EffectKind::Email, TimeDelta::minutes(-1))
            .is_err()
    );
}

#[test]
fn a_queued_scheduled_run_is_stale() {
    // The seeds' case: a scheduled run that sat two days in a queue.
    let (window, now) = window_aged(60 * 48);
    let decision = context(RunKind::Scheduled, window, now).decide(&EffectKind::Email, "t");
    assert_eq!(decision.reasons(), &[Reason::StaleWindow]);
}
