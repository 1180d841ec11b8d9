//! The outbox's memory: a row is the key's memory, and a row claimed again after its
//! lease ran out follows the in-doubt rule of its route's kind.

use std::time::Duration;

use chrono::TimeDelta;
use replaysafe_core::journal::{JournalDecision, JournalRecord, RecordEffect, RecordWindow};
use replaysafe_core::{Guard, Journal, MemoryJournal};
use replaysafe_outbox::{ClaimRequest, OperatorAction, OutboxStore, Route};
use replaysafe_test::contexts;

use crate::support::{Fixture, Note, NoteClient};

/// Claims every due row and abandons the claim, as a worker killed mid-batch does; when
/// `began`, the killed worker's guard had journaled the attempt of each (with
/// `delivered` after it when `finished`).
async fn abandon(fx: &Fixture, journal: &dyn Journal, began: bool, finished: bool) -> Vec<String> {
    let claimed = fx
        .store()
        .claim(&ClaimRequest {
            routes: vec!["partner_webhook".into()],
            limit: 10,
            lease: Duration::from_secs(60),
            now: contexts::now(),
        })
        .await
        .unwrap();
    let steps: &[JournalDecision] = match (began, finished) {
        (false, _) => &[],
        (true, false) => &[JournalDecision::Attempting],
        (true, true) => &[JournalDecision::Attempting, JournalDecision::Delivered],
    };
    for row in &claimed {
        for decision in steps {
            let window = contexts::current_window();
            let record = JournalRecord::new(
                contexts::now(),
                *decision,
                "daily_orders",
                "scheduled__killed",
                "scheduled",
                RecordWindow::new(window.start(), window.end()),
                RecordEffect::new("webhook", "daily_total", "t", row.key(), "00", 2),
            )
            .with_attempt(1);
            journal.append(&record.entry()).unwrap();
        }
    }
    fx.clock.advance(TimeDelta::seconds(61));
    claimed.iter().map(|row| row.key().to_owned()).collect()
}

#[tokio::test]
async fn a_row_whose_attempt_began_is_in_doubt_and_only_an_audited_resend_sends_it() {
    let fx = Fixture::new();
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let keys = abandon(&fx, &*fx.journal, true, false).await;
    let worker = fx.worker().build().unwrap();

    let stats = worker.drain().await.unwrap();
    assert_eq!(
        (stats.claimed, stats.suppressed, stats.delivered),
        (1, 1, 0)
    );
    assert!(
        fx.client.received().is_empty(),
        "a receiver that cannot drop a repeat"
    );
    assert_eq!(fx.column::<String>(&keys[0], "status"), "suppressed");
    assert_eq!(fx.column::<String>(&keys[0], "reasons"), "in_doubt");
    let record = fx.journal.records().pop().unwrap();
    assert_eq!(record.decision, JournalDecision::Suppressed);
    assert_eq!(record.reasons, ["in_doubt"]);
    assert!(
        record
            .note
            .as_deref()
            .unwrap()
            .contains("scheduled__killed"),
        "{:?}",
        record.note
    );

    // A re-run staging the same effect, or a corrected one, does not reopen it.
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    fx.stage(&fx.live(), &Note::new("daily_total", "43"));
    assert_eq!(fx.column::<String>(&keys[0], "status"), "suppressed");
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
    assert!(fx.client.received().is_empty());

    // An audited resend does, once.
    let action = OperatorAction::new("the partner confirmed it never arrived", "jane@ops").unwrap();
    let reopened = fx
        .store()
        .resend(&keys, &action, contexts::now() + TimeDelta::seconds(61))
        .await
        .unwrap();
    assert_eq!(reopened.len(), 1);
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    assert_eq!(fx.client.received().len(), 1);
    assert_eq!(fx.client.received()[0].1.body, "43");
    assert_eq!(worker.drain().await.unwrap().claimed, 0);
}

#[tokio::test]
async fn a_row_the_journal_saw_delivered_completes_delivered_without_sending() {
    let fx = Fixture::new();
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let keys = abandon(&fx, &*fx.journal, true, true).await;
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!((stats.claimed, stats.delivered), (1, 1));
    assert!(fx.client.received().is_empty(), "sent again");
    assert_eq!(fx.column::<String>(&keys[0], "status"), "delivered");
    assert_eq!(
        fx.journal.records().pop().unwrap().reasons,
        ["already_delivered"]
    );
}

#[tokio::test]
async fn a_row_never_attempted_before_its_worker_died_is_sent() {
    let fx = Fixture::new();
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let keys = abandon(&fx, &*fx.journal, false, false).await;
    let stats = fx.worker().build().unwrap().drain().await.unwrap();
    assert_eq!(stats.delivered, 1);
    assert_eq!(fx.client.received().len(), 1);
    assert_eq!(fx.column::<String>(&keys[0], "status"), "delivered");
}

#[tokio::test]
async fn a_receiver_that_drops_repeats_gets_an_in_doubt_row_again_under_its_key() {
    let fx = Fixture::new();
    let client = NoteClient {
        dedupes: true,
        ..NoteClient::default()
    };
    let route = Route::new(
        "partner_webhook",
        Guard::with_shared_journal(client.clone(), fx.journal.clone()),
    )
    .unwrap();
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let keys = abandon(&fx, &*fx.journal, true, false).await;
    let worker = replaysafe_outbox::Worker::builder(fx.store())
        .add_route(route)
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    assert_eq!(worker.drain().await.unwrap().delivered, 1);
    assert_eq!(client.received()[0].0, keys[0]);
}

#[tokio::test]
async fn without_the_journals_memory_a_reclaimed_row_is_in_doubt() {
    let fx = Fixture::new();
    let route = Route::new(
        "partner_webhook",
        Guard::with_shared_journal(fx.client.clone(), fx.journal.clone()).with_ledger(false),
    )
    .unwrap();
    fx.stage(&fx.live(), &Note::new("daily_total", "42"));
    let keys = abandon(&fx, &MemoryJournal::new(), true, false).await;
    let worker = replaysafe_outbox::Worker::builder(fx.store())
        .add_route(route)
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    assert_eq!(worker.drain().await.unwrap().suppressed, 1);
    assert!(fx.client.received().is_empty());
    assert_eq!(fx.column::<String>(&keys[0], "reasons"), "in_doubt");
    let note = fx.journal.records().pop().unwrap().note.unwrap();
    assert!(note.contains("keeps no memory"), "{note}");
}
