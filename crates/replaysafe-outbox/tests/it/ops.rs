//! Operations: counts, oldest pending age, dead rows, retry, purge.

use std::time::Duration;

use chrono::TimeDelta;
use replaysafe_outbox::{OperatorAction, OutboxError, OutboxStore, Status, StatusCount};
use replaysafe_test::{TestError, contexts};

use crate::support::{Fixture, Note};

#[tokio::test]
async fn counts_list_retry_and_purge() {
    let fx = Fixture::new();
    let store = fx.store();
    let delivered = fx.stage(&fx.live(), &Note::new("a", "1"));
    let dead = fx.stage(&fx.live(), &Note::new("b", "1"));
    fx.stage(&fx.backfill(), &Note::new("c", "1"));
    fx.client.fail_with(TestError::Permanent);
    let worker = fx.worker().batch_size(1).build().unwrap();
    // Rows are claimed oldest first; both were staged at the same instant, so order by key does not matter: one fails.
    worker.drain().await.unwrap();
    let failed_key = if fx.column::<String>(&dead.key, "status") == "dead" {
        dead.key.clone()
    } else {
        delivered.key.clone()
    };

    let counts = store.counts().await.unwrap();
    let count = |status| {
        counts
            .iter()
            .filter(|c: &&StatusCount| c.status == status)
            .map(|c| c.rows)
            .sum::<u64>()
    };
    assert_eq!(
        (
            count(Status::Delivered),
            count(Status::Dead),
            count(Status::Suppressed)
        ),
        (1, 1, 1)
    );
    assert!(
        counts
            .iter()
            .all(|c| c.route == "partner_webhook" && c.pipeline == "daily_orders")
    );

    let listed = store.list(Status::Dead, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, failed_key);
    assert_eq!(
        listed[0].last_error.as_deref(),
        Some("permanent test failure")
    );

    let action = OperatorAction::new("partner fixed their endpoint", "jane@ops").unwrap();
    let retried = store
        .retry_dead(None, &action, contexts::now())
        .await
        .unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].key, failed_key);
    assert_eq!(retried[0].status, Status::Pending);
    assert_eq!(retried[0].run_kind, "scheduled");
    assert_eq!(
        store
            .oldest_pending_age(contexts::now() + TimeDelta::seconds(5))
            .await
            .unwrap(),
        Some(Duration::from_secs(5))
    );
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    assert_eq!(
        store.oldest_pending_age(contexts::now()).await.unwrap(),
        None
    );
    let audited: i64 = fx
        .connection()
        .query_row("SELECT COUNT(*) FROM replaysafe_outbox_audit WHERE action = 'retry' AND reason = 'partner fixed their endpoint'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(audited, 1);

    // A purged key could be staged again and sent twice: not sooner than the longest
    // max age (6 h) plus clock skew of the delivered rows.
    let hour = Duration::from_secs(3600);
    let too_soon = store
        .purge_delivered(6 * hour, contexts::now() + TimeDelta::days(30))
        .await
        .unwrap_err();
    assert!(
        matches!(
            too_soon,
            OutboxError::Invalid {
                field: "older_than",
                ..
            }
        ),
        "{too_soon}"
    );
    assert_eq!(fx.row_count(), 3, "a refused purge deletes nothing");
    let week = 7 * 24 * hour;
    assert_eq!(
        store
            .purge_delivered(week, contexts::now() + TimeDelta::days(7))
            .await
            .unwrap(),
        0,
        "delivered exactly a week before, not more"
    );
    assert_eq!(
        store
            .purge_delivered(week, contexts::now() + TimeDelta::days(8))
            .await
            .unwrap(),
        2
    );
    assert_eq!(fx.row_count(), 1, "the suppressed row stays");
}

#[test]
fn an_operator_action_needs_a_reason_and_an_operator() {
    let reason = OperatorAction::new(" ", "jane").unwrap_err();
    assert_eq!(reason.to_string(), "invalid reason: must not be empty");
    let approver = OperatorAction::new("why", "").unwrap_err();
    assert_eq!(
        approver.to_string(),
        "invalid approved_by: must not be empty"
    );
    let control = OperatorAction::new("why\u{1b}[2J", "jane").unwrap_err();
    assert!(control.to_string().contains("control"), "{control}");
}

#[test]
fn an_operator_action_stores_only_a_whole_approval_document() {
    let unscoped = replaysafe_core::OptIn::new("why", "jane", contexts::now())
        .unwrap()
        .for_kind(replaysafe_core::EffectKind::Webhook);
    let error = OperatorAction::new("why", "jane")
        .unwrap()
        .with_opt_in(unscoped)
        .unwrap_err();
    assert!(
        matches!(
            error,
            OutboxError::Invalid {
                field: "opt_in",
                ..
            }
        ),
        "{error}"
    );
}
