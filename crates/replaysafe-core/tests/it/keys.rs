use chrono::TimeDelta;
use proptest::prelude::*;
use replaysafe_core::{EffectKind, IdempotencyKey, RunKind, Window};

use crate::support::{at, context, day};

/// Test vectors documented in docs/reference/idempotency-key.md, computed independently in Python.
#[test]
fn documented_test_vectors() {
    let window = day(at(2026, 8, 5, 0));
    let cases = [
        (
            IdempotencyKey::derive(
                "daily_orders",
                &EffectKind::Email,
                "daily_summary",
                "ana@shop.example",
                &window,
            ),
            "31fdfa224fdfb54dbdef67ff96669357106469229fb813924e4a52da7c74a51c",
        ),
        (
            IdempotencyKey::derive(
                "daily_orders",
                &EffectKind::Webhook,
                "orders.published",
                "https://partner.example/hooks/orders",
                &window,
            ),
            "64c3d5a6137676deb7463d265e3663f5578e6c1ad9d13c7d04f1054e214764ee",
        ),
        (
            IdempotencyKey::derive(
                "billing",
                &EffectKind::FileDrop,
                "usage_csv",
                "sftp://files.partner.example/in/usage_20260805.csv",
                &Window::new(at(2026, 8, 5, 0), at(2026, 8, 5, 1)).unwrap(),
            ),
            "ada99a0d95b8d34f2644834a26d2e7f53e1007787efa8d8dbb9358a7cf6f2783",
        ),
        (
            IdempotencyKey::derive(
                "café",
                &EffectKind::Email,
                "résumé",
                "zoë@exämple.org",
                &Window::new(
                    at(2026, 8, 5, 0) + TimeDelta::milliseconds(500),
                    at(2026, 8, 6, 0),
                )
                .unwrap(),
            ),
            "9ce4f391250ee126037010c9cb63597b2b9b872e6b855389121c73b8156a1453",
        ),
    ];
    for (key, expected) in cases {
        assert_eq!(key.as_str(), expected);
    }
}

#[test]
fn key_is_not_the_run_id() {
    let window = day(at(2026, 8, 5, 0));
    let first = context(RunKind::Scheduled, window, at(2026, 8, 6, 1));
    let retry =
        first.with_run_id(replaysafe_core::RunId::new("scheduled__2026-08-06__attempt_2").unwrap());
    let derive = |cx: &replaysafe_core::ReplayContext| {
        IdempotencyKey::derive(
            cx.pipeline(),
            &EffectKind::Email,
            "daily_summary",
            "ana@shop.example",
            cx.window(),
        )
    };
    assert_eq!(derive(&first), derive(&retry));
    assert_eq!(
        derive(&first),
        derive(&first.with_run_kind(RunKind::Backfill))
    );
}

#[test]
fn parse_accepts_hex_only() {
    assert!(IdempotencyKey::parse("abc123").is_ok());
    assert!(IdempotencyKey::parse("ABC").is_err());
    assert!(IdempotencyKey::parse("").is_err());
    assert!(IdempotencyKey::parse(&"a".repeat(65)).is_err());
}

fn field() -> impl Strategy<Value = String> {
    "[a-z@._:/ é]{1,24}"
}

proptest! {
    #[test]
    fn keys_differ_when_any_field_differs(
        fields in proptest::collection::vec(field(), 4),
        other in field(),
        which in 0usize..6,
        start_hours in 0i64..10_000,
        length_hours in 1i64..1_000,
    ) {
        let start = at(2026, 1, 1, 0) + TimeDelta::hours(start_hours);
        let window = Window::new(start, start + TimeDelta::hours(length_hours)).unwrap();
        let kind = EffectKind::custom(format!("k{}", fields[1].len())).unwrap();
        let base = IdempotencyKey::derive(&fields[0], &kind, &fields[2], &fields[3], &window);
        prop_assert!(base.as_str().len() <= 64);
        prop_assert!(base.as_str().bytes().all(|b| b.is_ascii_hexdigit()));

        let mut changed = fields.clone();
        let mut changed_window = window;
        let mut changed_kind = kind.clone();
        match which {
            0 => { prop_assume!(other != fields[0]); changed[0] = other }
            1 => changed_kind = EffectKind::Alert,
            2 => { prop_assume!(other != fields[2]); changed[2] = other }
            3 => { prop_assume!(other != fields[3]); changed[3] = other }
            4 => changed_window = Window::new(window.start() - TimeDelta::hours(1), window.end()).unwrap(),
            _ => changed_window = Window::new(window.start(), window.end() + TimeDelta::hours(1)).unwrap(),
        }
        let moved = IdempotencyKey::derive(&changed[0], &changed_kind, &changed[2], &changed[3], &changed_window);
        prop_assert_ne!(base, moved);
    }

    #[test]
    fn fields_cannot_be_shifted_into_each_other(a in field(), b in field(), split in 1usize..4) {
        // Moving bytes from one field to the next must change the key (netstring framing).
        let joined = format!("{a}{b}");
        prop_assume!(split < joined.len() && joined.is_char_boundary(split) && split != a.len());
        let window = day(at(2026, 8, 5, 0));
        let left = IdempotencyKey::derive("p", &EffectKind::Email, &a, &b, &window);
        let right = IdempotencyKey::derive("p", &EffectKind::Email, &joined[..split], &joined[split..], &window);
        prop_assert_ne!(left, right);
    }
}

#[test]
fn documented_vectors_are_the_tested_ones() {
    let docs = include_str!("../../../../docs/reference/idempotency-key.md");
    for key in [
        "31fdfa224fdfb54dbdef67ff96669357106469229fb813924e4a52da7c74a51c",
        "64c3d5a6137676deb7463d265e3663f5578e6c1ad9d13c7d04f1054e214764ee",
        "ada99a0d95b8d34f2644834a26d2e7f53e1007787efa8d8dbb9358a7cf6f2783",
        "9ce4f391250ee126037010c9cb63597b2b9b872e6b855389121c73b8156a1453",
    ] {
        assert!(
            docs.contains(key),
            "docs/reference/idempotency-key.md lacks {key}"
        );
    }
}
