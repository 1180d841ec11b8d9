//! Memory: a key once delivered is not delivered again, a key in doubt is sent again only
//! to a receiver that drops repeats, and an audited opt-in lifts either.

use std::path::Path;
use std::sync::Arc;

use chrono::TimeDelta;
use replaysafe_core::journal::{
    JournalDecision, JournalReader, JournalRecord, RecordEffect, RecordWindow,
};
use replaysafe_core::{
    EffectKind, Guard, Journal, JsonlJournal, OptIn, Outcome, Reason, ReplayContext, RunId,
};
use replaysafe_test::{RecordingClient, TestEffect, contexts};

fn effect() -> TestEffect {
    TestEffect::email("ana@shop.example")
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

fn send(
    path: &Path,
    client: &RecordingClient,
    cx: &ReplayContext,
) -> Outcome<replaysafe_core::IdempotencyKey> {
    let guard = Guard::new(client.clone(), JsonlJournal::open(path).unwrap());
    block_on(guard.send(cx, &effect())).unwrap()
}

fn reasons(outcome: &Outcome<replaysafe_core::IdempotencyKey>) -> Vec<Reason> {
    match outcome {
        Outcome::Delivered(delivered) => delivered.reasons.clone(),
        Outcome::Suppressed(suppressed) => suppressed.reasons.clone(),
    }
}

fn records(path: &Path) -> Vec<JournalRecord> {
    JournalReader::open(path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// An `attempting` record of `effect()` in `cx`, with no outcome after it: what a process
/// killed in the middle of a delivery leaves.
fn leave_in_doubt(path: &Path, cx: &ReplayContext) {
    let guard = Guard::new(
        RecordingClient::new(),
        replaysafe_core::MemoryJournal::new(),
    );
    let key = guard.preview(cx, &effect()).unwrap().key;
    let window = cx.window();
    let record = JournalRecord::new(
        cx.now(),
        JournalDecision::Attempting,
        cx.pipeline(),
        "scheduled__killed",
        "scheduled",
        RecordWindow::new(window.start(), window.end()),
        RecordEffect::new(
            "email",
            "daily_summary",
            "*@shop.example",
            key.as_str(),
            "00",
            1,
        ),
    )
    .with_attempt(1);
    JsonlJournal::open(path)
        .unwrap()
        .append(&record.entry())
        .unwrap();
}

#[test]
fn a_retry_a_rerun_and_another_process_do_not_deliver_a_key_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let client = RecordingClient::new();
    let first = contexts::live();
    assert!(send(&path, &client, &first).is_delivered());
    // A retry of the task, a cleared task, a re-run of the window: other run ids, other
    // journal handles on the same file (another process).
    for run_id in ["scheduled__2026-08-05__try_2", "manual__rerun"] {
        let again = first.with_run_id(RunId::new(run_id).unwrap());
        let outcome = send(&path, &client, &again);
        assert_eq!(reasons(&outcome), [Reason::AlreadyDelivered], "{run_id}");
    }
    assert_eq!(client.delivered().len(), 1);
    let suppressed = records(&path).pop().unwrap();
    assert_eq!(suppressed.decision, JournalDecision::Suppressed);
    assert_eq!(suppressed.reasons, ["already_delivered"]);
    let note = suppressed.note.unwrap();
    assert!(note.contains(first.run_id().as_str()), "{note}");
}

#[test]
fn a_key_in_doubt_is_sent_again_only_to_a_receiver_that_drops_repeats() {
    let cx = contexts::live();
    // An SMTP-like receiver: not again.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    leave_in_doubt(&path, &cx);
    let smtp = RecordingClient::new();
    let outcome = send(&path, &smtp, &cx);
    assert_eq!(reasons(&outcome), [Reason::InDoubt]);
    assert!(smtp.delivered().is_empty());
    let note = records(&path).pop().unwrap().note.unwrap();
    assert!(note.contains("scheduled__killed"), "{note}");

    // A webhook-like receiver: again, under the same key.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    leave_in_doubt(&path, &cx);
    let webhook = RecordingClient::deduplicating();
    assert!(send(&path, &webhook, &cx).is_delivered());
    let key = Guard::new(
        RecordingClient::new(),
        replaysafe_core::MemoryJournal::new(),
    )
    .preview(&cx, &effect())
    .unwrap()
    .key;
    assert_eq!(webhook.delivered()[0].key, key);
}

#[test]
fn an_audited_opt_in_lifts_the_memory_and_is_journaled_with_the_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let client = RecordingClient::new();
    let cx = contexts::live();
    assert!(send(&path, &client, &cx).is_delivered());
    let opt_in = OptIn::new(
        "the customer lost the summary (CHG-11)",
        "jane@ops",
        cx.now() + TimeDelta::hours(1),
    )
    .unwrap()
    .for_kind(EffectKind::Email);
    let outcome = send(&path, &client, &cx.with_opt_in(opt_in));
    assert_eq!(reasons(&outcome), [Reason::AlreadyDelivered, Reason::OptIn]);
    assert_eq!(client.delivered().len(), 2);
    let delivered = records(&path).pop().unwrap();
    assert_eq!(delivered.decision, JournalDecision::Delivered);
    assert_eq!(delivered.opt_in.unwrap().approved_by, "jane@ops");
}

#[test]
fn a_client_without_the_ledger_delivers_again_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let client = RecordingClient::new();
    let journal = Arc::new(JsonlJournal::open(&path).unwrap());
    let guard = Guard::with_shared_journal(client.clone(), journal).with_ledger(false);
    for _ in 0..2 {
        assert!(
            block_on(guard.send(&contexts::live(), &effect()))
                .unwrap()
                .is_delivered()
        );
    }
    assert_eq!(client.delivered().len(), 2);
    assert!(records(&path).iter().all(|r| {
        r.note
            .as_deref()
            .is_some_and(|n| n.starts_with("ledger off"))
    }));
}

/// Set in the child processes of `processes_racing_on_one_key_deliver_it_once`.
const RACE_JOURNAL: &str = "REPLAYSAFE_TEST_RACE_JOURNAL";
const RACERS: usize = 6;
const RACE_KEYS: usize = 200;

#[test]
fn processes_racing_on_one_key_deliver_it_once() {
    if let Some(path) = std::env::var_os(RACE_JOURNAL) {
        // A child: send every one of the shared effects once, as fast as it can.
        let guard = Guard::new(RecordingClient::new(), JsonlJournal::open(&path).unwrap());
        block_on(async {
            for i in 0..RACE_KEYS {
                let effect = TestEffect::email(format!("user{i}@shop.example"));
                guard.send(&contexts::live(), &effect).await.unwrap();
            }
        });
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.jsonl");
    let children: Vec<_> = (0..RACERS)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "memory::processes_racing_on_one_key_deliver_it_once",
                    "--exact",
                    "--quiet",
                    "--test-threads=1",
                ])
                .env(RACE_JOURNAL, &path)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a child failed");
    }
    let all = records(&path);
    let mut delivered = std::collections::BTreeMap::<String, usize>::new();
    for record in &all {
        if record.decision == JournalDecision::Delivered {
            *delivered
                .entry(record.effect.idempotency_key.clone())
                .or_default() += 1;
        }
    }
    assert_eq!(delivered.len(), RACE_KEYS, "every key delivered");
    assert!(
        delivered.values().all(|count| *count == 1),
        "a key delivered twice: {:?}",
        delivered.values().filter(|c| **c > 1).count()
    );
    let stopped = all
        .iter()
        .filter(|r| r.reasons == ["already_delivered"] || r.reasons == ["in_doubt"])
        .count();
    assert_eq!(stopped, RACE_KEYS * (RACERS - 1));
}

#[test]
fn a_pair_of_journals_remembers_and_both_get_the_claim() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let client = RecordingClient::new();
    let memory = Arc::new(replaysafe_core::MemoryJournal::new());
    let pair = (JsonlJournal::open(&path).unwrap(), memory.clone());
    let guard = Guard::new(client.clone(), pair);
    for _ in 0..2 {
        block_on(guard.send(&contexts::live(), &effect())).unwrap();
    }
    assert_eq!(
        client.delivered().len(),
        1,
        "the pair kept the file's memory"
    );
    let decisions = |records: Vec<JournalRecord>| -> Vec<JournalDecision> {
        records.iter().map(|r| r.decision).collect()
    };
    let expected = [
        JournalDecision::Attempting,
        JournalDecision::Delivered,
        JournalDecision::Suppressed,
    ];
    assert_eq!(decisions(records(&path)), expected);
    assert_eq!(
        decisions(memory.records()),
        expected,
        "the claim reached the second"
    );
}

#[test]
fn each_action_of_a_key_is_remembered_apart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let client = RecordingClient::new();
    let guard = Guard::new(client.clone(), JsonlJournal::open(&path).unwrap());
    let cx = contexts::live();
    let trigger =
        TestEffect::new(EffectKind::Alert, "pagerduty:data-oncall").with_action("trigger");
    let resolve =
        TestEffect::new(EffectKind::Alert, "pagerduty:data-oncall").with_action("resolve");
    let outcomes: Vec<_> = [&trigger, &resolve, &trigger, &resolve]
        .into_iter()
        .map(|effect| block_on(guard.send(&cx, effect)).unwrap())
        .collect();
    assert_eq!(
        outcomes[0].key(),
        outcomes[1].key(),
        "one key for both actions"
    );
    assert!(outcomes[0].is_delivered() && outcomes[1].is_delivered());
    assert_eq!(reasons(&outcomes[2]), [Reason::AlreadyDelivered]);
    assert_eq!(reasons(&outcomes[3]), [Reason::AlreadyDelivered]);
    assert_eq!(client.delivered().len(), 2);
    let actions: Vec<_> = records(&path)
        .into_iter()
        .map(|r| r.effect.action.unwrap_or_default())
        .collect();
    assert_eq!(
        actions,
        [
            "trigger", "trigger", "resolve", "resolve", "trigger", "resolve"
        ]
    );
}
