//! Plans that are refused, and what a context is described as.

use chrono::{TimeDelta, TimeZone, Utc};
use replaysafe_core::{EffectKind, Window};
use replaysafe_review::context;
use replaysafe_review::plan::{self, MAX_WINDOWS};
use replaysafe_test::contexts;

#[test]
fn a_plan_of_too_many_windows_is_refused_naming_the_step() {
    let start = Utc.with_ymd_and_hms(2026, 8, 1, 0, 0, 0).unwrap();
    let day = Window::new(start, start + TimeDelta::days(2)).unwrap();
    let error = plan::Request::new("daily_orders", day, TimeDelta::seconds(1))
        .build()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "invalid every 1s: it splits the range into more than {MAX_WINDOWS} windows; choose a longer step"
        )
    );
    // A minute a window is 2,880 of them: planned.
    let planned = plan::Request::new("daily_orders", day, TimeDelta::minutes(1))
        .with_effects([EffectKind::Email])
        .with_now(start)
        .build()
        .unwrap();
    assert_eq!(planned.windows.len(), 2_880);
    assert_eq!(planned.run_kind, "backfill");
    assert_eq!(planned.deliver_counts, [("email".to_owned(), 0)]);

    let error = plan::Request::new("daily_orders", day, TimeDelta::days(1))
        .with_max_age(EffectKind::Email, TimeDelta::hours(-1))
        .build()
        .unwrap_err();
    assert!(
        error.to_string().starts_with("invalid max_age ")
            && error.to_string().ends_with(": must not be negative"),
        "{error}"
    );
    let error = plan::Request::new("daily_orders", day, TimeDelta::zero())
        .build()
        .unwrap_err();
    assert!(
        error.to_string().contains("a window step must be positive"),
        "{error}"
    );
}

#[test]
fn a_backfill_context_is_described_with_the_gates_answer_per_kind() {
    let described = context::describe(&contexts::backfill());
    assert_eq!(
        (
            described.pipeline.as_str(),
            described.run_kind.as_str(),
            described.backfill_id.as_deref(),
            described.window_start.as_deref(),
            described.now.as_str(),
        ),
        (
            "daily_orders",
            "backfill",
            Some("bf-test"),
            Some("2026-07-05T00:00:00Z"),
            "2026-08-06T01:00:00Z"
        )
    );
    let email = described
        .decisions
        .iter()
        .find(|decision| decision.kind == "email")
        .unwrap();
    assert_eq!(
        (email.decision.as_str(), email.max_age.as_str()),
        ("suppress", "6h")
    );
    assert_eq!(email.reasons, ["replay_run", "stale_window"]);
    let text = described.to_string();
    assert!(
        text.contains("window       [2026-07-05T00:00:00Z, 2026-07-06T00:00:00Z)"),
        "{text}"
    );
    assert!(
        text.contains("  email      suppress  max age 6h   replay_run, stale_window"),
        "{text}"
    );
    let json = serde_json::to_value(&described).unwrap();
    assert_eq!(json["decisions"][0]["kind"], "email");

    let live = context::describe(&contexts::live());
    assert!(
        live.decisions
            .iter()
            .all(|decision| decision.decision == "deliver")
    );
}
