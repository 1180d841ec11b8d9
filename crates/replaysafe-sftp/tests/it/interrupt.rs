//! A connection cut mid-upload: no file under the final name, and a retry delivers it whole.

use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Classify, RetryPolicy, SendError};
use replaysafe_sftp::{DropStatus, FileDrop};
use replaysafe_test::contexts;

use crate::support::{CuttingProxy, guard_from, payload, server, unique};

const PAYLOAD: usize = 4 * 1024 * 1024;
const CUT_AFTER: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_leaves_no_final_file_and_the_retry_delivers_it_whole() {
    let server = server();
    let proxy = CuttingProxy::start(server.port, CUT_AFTER).await;
    let dir = tempfile::tempdir().unwrap();
    let (guard, journal) = guard_from(
        server
            .builder_on_port(proxy.port)
            .known_hosts(server.known_hosts_for_port(dir.path(), proxy.port)),
    );
    let guard = guard.with_retry(RetryPolicy::none());
    let name = format!("{}.bin", unique("interrupted"));
    let bytes = payload(&name, PAYLOAD);
    let drop = FileDrop::from_bytes("orders_export", &name, bytes.clone());

    let error = guard.send(&contexts::live(), &drop).await.unwrap_err();
    let SendError::Failed { source, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(source.is_transient() && source.is_connection(), "{source}");
    assert_eq!(server.read(&name), None, "nothing under the final name");
    let leftovers = server.temporary_files_of(&name);
    assert_eq!(leftovers.len(), 1, "the cut came mid-upload: {leftovers:?}");
    let partial = std::fs::metadata(server.upload.join(&leftovers[0]))
        .unwrap()
        .len();
    assert!(partial < PAYLOAD as u64, "{partial}");

    let outcome = guard.send(&contexts::live(), &drop).await.unwrap();
    assert_eq!(outcome.receipt().unwrap().status, DropStatus::Uploaded);
    assert_eq!(server.read(&name), Some(bytes), "delivered whole");
    assert!(
        server.temporary_files_of(&name).is_empty(),
        "the interrupted upload's temporary file was removed"
    );
    assert_eq!(proxy.connections(), 2);
    let decisions: Vec<_> = journal.records().iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [
            JournalDecision::Attempting,
            JournalDecision::Failed,
            JournalDecision::Attempting,
            JournalDecision::Delivered
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_retries_a_cut_upload_within_one_send() {
    let server = server();
    let proxy = CuttingProxy::start(server.port, CUT_AFTER).await;
    let dir = tempfile::tempdir().unwrap();
    let (guard, journal) = guard_from(
        server
            .builder_on_port(proxy.port)
            .known_hosts(server.known_hosts_for_port(dir.path(), proxy.port)),
    );
    let name = format!("{}.bin", unique("retried"));
    let bytes = payload(&name, PAYLOAD);

    let outcome = guard
        .send(
            &contexts::live(),
            &FileDrop::from_bytes("orders_export", &name, bytes.clone()),
        )
        .await
        .unwrap();

    let replaysafe_core::Outcome::Delivered(delivered) = outcome else {
        panic!("not delivered");
    };
    assert_eq!(delivered.attempts, 2);
    assert_eq!(server.read(&name), Some(bytes));
    assert!(server.temporary_files_of(&name).is_empty());
    let records = journal.records();
    assert_eq!(records[0].decision, JournalDecision::Attempting);
    assert_eq!(records[1].decision, JournalDecision::Failed);
    assert!(
        records[1]
            .error
            .as_deref()
            .unwrap()
            .contains("dropping sftp://127.0.0.1:")
    );
    assert_eq!(records[2].decision, JournalDecision::Attempting);
    assert_eq!(records[3].decision, JournalDecision::Delivered);
    assert_eq!(records[3].attempt, 2);
}

/// An idle session that died is replaced within the same attempt: the first drop leaves
/// its session idle, the second drop's upload on it is cut, a fresh session finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_idle_session_is_replaced_within_the_same_attempt() {
    let server = server();
    let proxy = CuttingProxy::start(server.port, CUT_AFTER).await;
    let dir = tempfile::tempdir().unwrap();
    let (guard, _journal) = guard_from(
        server
            .builder_on_port(proxy.port)
            .known_hosts(server.known_hosts_for_port(dir.path(), proxy.port)),
    );
    let guard = guard.with_retry(RetryPolicy::none());
    let prefix = unique("revived");
    let small = format!("{prefix}_small.csv");
    guard
        .send(
            &contexts::live(),
            &FileDrop::from_bytes("orders_export", &small, "a,b\n"),
        )
        .await
        .unwrap();
    assert_eq!(guard.unguarded_ref().idle_sessions(), 1);

    let large = format!("{prefix}_large.bin");
    let bytes = payload(&large, PAYLOAD);
    let outcome = guard
        .send(
            &contexts::live(),
            &FileDrop::from_bytes("orders_export", &large, bytes.clone()),
        )
        .await
        .unwrap();

    let replaysafe_core::Outcome::Delivered(delivered) = outcome else {
        panic!("not delivered");
    };
    assert_eq!(delivered.attempts, 1);
    assert_eq!(server.read(&large), Some(bytes));
    assert!(server.temporary_files_of(&large).is_empty());
    assert_eq!(proxy.connections(), 2);
}
