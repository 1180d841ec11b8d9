//! Group commit: the file journal writes the records of deliveries in flight together,
//! and what it remembers of keys stays what its file says.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use chrono::Utc;
use replaysafe_core::journal::{
    GroupCommit, JournalDecision, JournalReader, JournalRecord, Ledger, Memory, RecordEffect,
    RecordWindow,
};
use replaysafe_core::{Guard, Journal, JsonlJournal, Outcome, Reason};
use replaysafe_test::{RecordingClient, TestEffect, contexts};

/// A record of `decision` about `key`, made by `run`.
fn record(decision: JournalDecision, key: &str, run: &str) -> JournalRecord {
    record_at(Utc::now(), decision, key, run)
}

/// [`record`] made at `now`.
fn record_at(
    now: chrono::DateTime<Utc>,
    decision: JournalDecision,
    key: &str,
    run: &str,
) -> JournalRecord {
    JournalRecord::new(
        now,
        decision,
        "group",
        run,
        "scheduled",
        RecordWindow::new(now - chrono::TimeDelta::hours(1), now),
        RecordEffect::new(
            "webhook",
            "orders",
            "https://partner.example/hooks",
            key,
            "00",
            1,
        ),
    )
    .with_attempt(1)
}

fn key(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn decisions(path: &std::path::Path) -> Vec<(JournalDecision, String)> {
    JournalReader::open(path)
        .unwrap()
        .map(|record| {
            let record = record.unwrap();
            (record.decision, record.effect.idempotency_key)
        })
        .collect()
}

/// Polls `future` once, with a waker that does nothing.
fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test(flavor = "current_thread")]
async fn deliveries_in_flight_together_are_each_journaled_and_a_key_is_claimed_once() {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let client = RecordingClient::new().answering_after(std::time::Duration::from_millis(1));
    // Records always wait for others here, however idle the runtime, so they are written
    // together.
    let journal = JsonlJournal::options()
        .group_commit(GroupCommit::Always)
        .open(&path)
        .unwrap();
    assert_eq!(journal.group_commit(), GroupCommit::Always);
    let guard = Guard::new(client.clone(), Arc::new(journal));
    let cx = contexts::live();
    // 40 effects, each sent twice at once: 16 sends in flight.
    let outcomes: Vec<Outcome<_>> = futures_util::stream::iter(0..80)
        .map(|i| {
            let (guard, cx) = (&guard, &cx);
            async move {
                let effect = TestEffect::email(format!("user{}@shop.example", i / 2));
                guard.send(cx, &effect).await.unwrap()
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let delivered = outcomes.iter().filter(|o| o.is_delivered()).count();
    assert_eq!(delivered, 40, "each key delivered once");
    assert_eq!(client.delivered().len(), 40);
    for outcome in outcomes.iter().filter(|o| o.is_suppressed()) {
        let Outcome::Suppressed(suppressed) = outcome else {
            unreachable!()
        };
        assert!(
            suppressed.reasons == [Reason::InDoubt]
                || suppressed.reasons == [Reason::AlreadyDelivered],
            "the second send of a key is stopped by the memory: {:?}",
            suppressed.reasons
        );
    }
    // Every delivery's `attempting` line comes before its `delivered` line, one of each.
    let lines = decisions(&path);
    let mut seen = std::collections::HashMap::<&str, Vec<JournalDecision>>::new();
    for (decision, key) in &lines {
        seen.entry(key).or_default().push(*decision);
    }
    assert_eq!(seen.len(), 40);
    for (key, decisions) in &seen {
        let attempting = decisions
            .iter()
            .position(|d| *d == JournalDecision::Attempting);
        let delivered = decisions
            .iter()
            .position(|d| *d == JournalDecision::Delivered);
        assert!(
            matches!((attempting, delivered), (Some(a), Some(d)) if a < d),
            "{key}: {decisions:?}"
        );
        assert_eq!(
            decisions
                .iter()
                .filter(|d| **d == JournalDecision::Attempting)
                .count(),
            1,
            "{key}: {decisions:?}"
        );
    }
    // A fresh reader of the file remembers what this journal did.
    let again = JsonlJournal::open(&path).unwrap();
    for key in seen.keys() {
        let claim = again
            .begin(
                &record(JournalDecision::Attempting, key, "later").entry(),
                true,
            )
            .unwrap();
        assert!(
            matches!(claim.memory, Memory::Delivered { .. }),
            "{claim:?}"
        );
        assert!(!claim.claimed);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn what_another_process_appends_between_this_journals_own_writes_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    // Two opens of one file: two processes, each with its own lock and its own memory.
    let this = JsonlJournal::open(&path).unwrap();
    let other = JsonlJournal::open(&path).unwrap();
    let (one, two, three) = (key(1), key(2), key(3));
    let claim = this
        .begin_grouped(
            &record(JournalDecision::Attempting, &one, "a").entry(),
            false,
        )
        .await
        .unwrap();
    assert!(claim.claimed);
    this.append_grouped(&record(JournalDecision::Delivered, &one, "a").entry())
        .await
        .unwrap();
    // The other claims key 2, and appends a fragment without a newline (a cut write).
    assert!(
        other
            .begin(
                &record(JournalDecision::Attempting, &two, "b").entry(),
                false
            )
            .unwrap()
            .claimed
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, b"{\"v\":1,\"ts\""))
        .unwrap();
    // This journal's memory has its own lines without reading them back, and reads the
    // other's: key 2 is in doubt, key 1 delivered, key 3 clear.
    let claim = this
        .begin_grouped(
            &record(JournalDecision::Attempting, &two, "a").entry(),
            false,
        )
        .await
        .unwrap();
    assert!(
        matches!(&claim.memory, Memory::InDoubt { run_id, .. } if run_id == "b"),
        "{claim:?}"
    );
    assert!(!claim.claimed);
    let claim = this
        .begin_grouped(
            &record(JournalDecision::Attempting, &one, "a").entry(),
            true,
        )
        .await
        .unwrap();
    assert!(matches!(&claim.memory, Memory::Delivered { run_id, .. } if run_id == "a"));
    let claim = this
        .begin_grouped(
            &record(JournalDecision::Attempting, &three, "a").entry(),
            false,
        )
        .await
        .unwrap();
    assert!(claim.claimed && claim.memory == Memory::Clear);
    // And the other sees this one's claim of key 3, written after the fragment.
    let claim = other
        .begin(
            &record(JournalDecision::Attempting, &three, "b").entry(),
            false,
        )
        .unwrap();
    assert!(
        matches!(&claim.memory, Memory::InDoubt { run_id, .. } if run_id == "a"),
        "{claim:?}"
    );
    let lines = std::fs::read_to_string(&path).unwrap();
    assert!(
        lines.contains("\n{\"v\":1,\"ts\"\n{"),
        "the fragment is a line of its own"
    );
}

#[test]
fn a_record_that_joined_others_is_written_when_the_leader_is_cancelled_or_another_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let journal = JsonlJournal::open(&path).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    // One delivery in flight, so the next records wait for others.
    let first = record(JournalDecision::Attempting, &key(1), "r");
    assert!(poll_once(pin!(journal.begin_grouped(&first.entry(), false))).is_ready());

    let (two, three, four) = (
        record(JournalDecision::Attempting, &key(2), "r"),
        record(JournalDecision::Attempting, &key(3), "r"),
        record(JournalDecision::Attempting, &key(4), "r"),
    );
    let (two, three) = (two.entry(), three.entry());
    let mut leader = Box::pin(journal.begin_grouped(&two, false));
    let mut follower = Box::pin(journal.begin_grouped(&three, false));
    assert!(
        poll_once(leader.as_mut()).is_pending(),
        "the first to join waits for others"
    );
    assert!(poll_once(follower.as_mut()).is_pending());
    assert_eq!(decisions(&path).len(), 1, "nothing written while they wait");
    // The leader's send is cancelled: what joined is written all the same.
    drop(leader);
    let Poll::Ready(claim) = poll_once(follower.as_mut()) else {
        panic!("the follower's record was not written when the leader was dropped");
    };
    assert!(claim.unwrap().claimed);
    assert_eq!(
        decisions(&path).len(),
        3,
        "the leader's own claim is written too (in doubt)"
    );

    // A record waiting when a synchronous claim comes is written with it.
    let five = record(JournalDecision::Attempting, &key(5), "r");
    let five = five.entry();
    let mut leader = Box::pin(journal.begin_grouped(&five, false));
    assert!(poll_once(leader.as_mut()).is_pending());
    assert!(journal.begin(&four.entry(), false).unwrap().claimed);
    assert_eq!(decisions(&path).len(), 5);
    let Poll::Ready(claim) = poll_once(leader.as_mut()) else {
        panic!("the waiting record was not written with the synchronous claim");
    };
    assert!(claim.unwrap().claimed);
    // The same key claimed twice in one write: the second finds the first.
    let six = record(JournalDecision::Attempting, &key(6), "r");
    let six = six.entry();
    let mut a = Box::pin(journal.begin_grouped(&six, false));
    let mut b = Box::pin(journal.begin_grouped(&six, false));
    assert!(poll_once(a.as_mut()).is_pending() && poll_once(b.as_mut()).is_pending());
    drop(a);
    let Poll::Ready(claim) = poll_once(b.as_mut()) else {
        panic!("not written");
    };
    let claim = claim.unwrap();
    assert!(
        !claim.claimed && matches!(claim.memory, Memory::InDoubt { .. }),
        "{claim:?}"
    );
    assert_eq!(decisions(&path).len(), 6);
}

/// Polls `future` until it is ready, letting the runtime run between polls.
async fn finish<F: Future>(mut future: std::pin::Pin<&mut F>) -> F::Output {
    loop {
        if let Poll::Ready(output) = poll_once(future.as_mut()) {
            return output;
        }
        tokio::task::yield_now().await;
    }
}

/// Keeps the runtime busy for 10 ms without parking.
async fn spin() {
    let busy = std::time::Instant::now();
    while busy.elapsed() < std::time::Duration::from_millis(10) {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_record_waits_for_others_as_the_journals_group_commit_says() {
    let dir = tempfile::tempdir().unwrap();
    let claim = |n: u8| record(JournalDecision::Attempting, &key(n), "r");
    // Whether a claim waits for others: before any look at the runtime, after the
    // runtime idled (as while deliveries wait for answers), and while it is busy.
    let paces = ["first", "after idling", "while busy"];
    for (group_commit, waits) in [
        (GroupCommit::WhenBusy, [true, false, true]),
        (GroupCommit::Always, [true; 3]),
        (GroupCommit::Never, [false; 3]),
    ] {
        let path = dir.path().join(format!("{group_commit:?}.jsonl"));
        let journal = JsonlJournal::options()
            .group_commit(group_commit)
            .open(&path)
            .unwrap();
        // One delivery in flight, so the next records may wait for others.
        assert!(poll_once(pin!(journal.begin_grouped(&claim(1).entry(), false))).is_ready());
        for ((n, pace), waits) in (2..).zip(paces).zip(waits) {
            match pace {
                "after idling" => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                "while busy" => spin().await,
                _ => {}
            }
            let record = claim(n);
            let entry = record.entry();
            let mut claimed = Box::pin(journal.begin_grouped(&entry, false));
            let claim = match poll_once(claimed.as_mut()) {
                Poll::Ready(claim) => {
                    assert!(!waits, "{group_commit:?}, {pace}: written alone");
                    claim
                }
                Poll::Pending => {
                    assert!(waits, "{group_commit:?}, {pace}: waited for others");
                    assert_eq!(
                        decisions(&path).len(),
                        usize::from(n) - 1,
                        "nothing written while it waits"
                    );
                    finish(claimed.as_mut()).await
                }
            };
            assert!(claim.unwrap().claimed);
            assert_eq!(decisions(&path).len(), usize::from(n));
        }
    }
}

/// Set in the child process of `a_write_that_fails_fails_each_record_in_it_and_nothing_is_lost`.
const CHILD_JOURNAL: &str = "REPLAYSAFE_TEST_GROUP_CUT_JOURNAL";

/// The three claims of that test, each line the same length.
fn claims() -> [JournalRecord; 3] {
    let at = chrono::DateTime::from_timestamp(1_780_000_000, 0).unwrap();
    [1, 2, 3].map(|n| record_at(at, JournalDecision::Attempting, &key(n), "r"))
}

#[test]
fn a_write_that_fails_fails_each_record_in_it_and_nothing_is_lost() {
    let [first, second, third] = claims();
    if let Some(path) = std::env::var_os(CHILD_JOURNAL) {
        // Under a file-size limit that leaves room for two lines and part of a third.
        let journal = JsonlJournal::open(&path).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        assert!(poll_once(pin!(journal.begin_grouped(&first.entry(), false))).is_ready());
        let (second, third) = (second.entry(), third.entry());
        let mut leader = Box::pin(journal.begin_grouped(&second, false));
        let mut follower = Box::pin(journal.begin_grouped(&third, false));
        assert!(poll_once(leader.as_mut()).is_pending());
        assert!(poll_once(follower.as_mut()).is_pending());
        drop(leader);
        let Poll::Ready(Err(error)) = poll_once(follower.as_mut()) else {
            panic!("the follower's record was cut short, yet it may go ahead");
        };
        // Its own error: its decision and key.
        assert_eq!(error.decision(), Some(JournalDecision::Attempting));
        assert_eq!(error.idempotency_key(), Some(key(3).as_str()));
        // The memory was read again from the file: the second claim landed whole, the
        // third did not, so it is not remembered as claimed.
        let again = journal.begin(
            &record(JournalDecision::Attempting, &key(2), "s").entry(),
            false,
        );
        assert!(
            matches!(again, Ok(claim) if !claim.claimed),
            "the second claim is in the file"
        );
        // The third is clear, so claiming it again tries to write (and fails at the limit)
        // rather than find a claim that never landed.
        let again = journal.begin(
            &record(JournalDecision::Attempting, &key(3), "s").entry(),
            false,
        );
        assert!(
            again.is_err(),
            "the memory kept a claim the file does not hold: {again:?}"
        );
        return;
    }
    let mut line = Vec::new();
    first.entry().write_json(&mut line);
    let limit = 2 * (line.len() + 1) + 40;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let status = crate::support::run_under_file_size_limit(
        "group::a_write_that_fails_fails_each_record_in_it_and_nothing_is_lost",
        CHILD_JOURNAL,
        &path,
        limit,
    );
    assert!(status.success(), "the child's checks failed: {status:?}");
    assert_eq!(
        std::fs::read(&path).unwrap().len(),
        limit,
        "the limit did not cut the write"
    );
    // Without the limit: the cut line is a line of its own, the third key is clear.
    let journal = JsonlJournal::open(&path).unwrap();
    let claim = journal.begin(&third.entry(), false).unwrap();
    assert!(claim.claimed && claim.memory == Memory::Clear, "{claim:?}");
    let read: Vec<_> = JournalReader::open(&path).unwrap().collect();
    assert_eq!(read.len(), 4);
    assert!(read[2].is_err(), "the cut line reads as invalid");
}
