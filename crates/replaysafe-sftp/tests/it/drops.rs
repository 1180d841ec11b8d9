//! Live drops against the real sshd: bytes, atomic rename, idempotency, conflicts.

use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Classify, Outcome, Reason, SendError};
use replaysafe_sftp::{DropStatus, FileDrop};
use replaysafe_test::contexts;

use crate::support::{guard_from, payload, server, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_drop_lands_with_exactly_the_bytes_under_the_final_name() {
    let server = server();
    let (guard, journal) = server.guard();
    let prefix = unique("live");
    let bytes = payload(&prefix, 300_000);
    let drop = FileDrop::from_bytes(
        "orders_export",
        format!("{prefix}_{{window_start:%Y%m%d}}.csv"),
        bytes.clone(),
    );

    let outcome = guard.send(&contexts::live(), &drop).await.unwrap();

    let name = format!("{prefix}_20260805.csv");
    let receipt = outcome.receipt().expect("delivered");
    assert_eq!(receipt.status, DropStatus::Uploaded);
    assert_eq!(receipt.bytes, 300_000);
    assert_eq!(
        receipt.remote_path,
        server.upload.join(&name).display().to_string()
    );
    assert_eq!(server.read(&name).as_deref(), Some(&bytes[..]));
    assert_eq!(server.entries_containing(&prefix), vec![name.clone()]);

    let records = journal.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].decision, JournalDecision::Attempting);
    let record = &records[1];
    assert_eq!(record.decision, JournalDecision::Delivered);
    assert_eq!(record.effect.kind, "file_drop");
    assert_eq!(record.effect.message_type, "orders_export");
    assert_eq!(
        record.effect.target,
        format!(
            "sftp://127.0.0.1:{}{}/{name}",
            server.port,
            server.upload.display()
        )
    );
    assert_eq!(
        record.effect.summary.as_deref(),
        Some(format!("{name} (300000 bytes)").as_str())
    );
    assert_eq!(record.effect.payload_bytes, 300_000);
    assert_eq!(
        record.effect.payload_sha256,
        drop.digest().sha256_hex(),
        "the journal keeps the digest of what was sent"
    );
    assert!(!record.effect.target.contains(&server.user));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_drop_uploads_nothing_and_says_already_present() {
    let server = server();
    let (guard, journal) = server.guard();
    let name = format!("{}.csv", unique("repeat"));
    let drop = FileDrop::from_bytes("orders_export", &name, payload(&name, 70_000));

    let first = guard.send(&contexts::live(), &drop).await.unwrap();
    assert_eq!(first.receipt().unwrap().status, DropStatus::Uploaded);
    let modified = std::fs::metadata(server.upload.join(&name))
        .unwrap()
        .modified()
        .unwrap();
    let inode = inode(&server.upload.join(&name));

    // The journal remembers the drop: the repeat opens no session at all.
    let remembered = guard.send(&contexts::live(), &drop).await.unwrap();
    let Outcome::Suppressed(remembered) = remembered else {
        panic!("a drop the journal knows was sent again");
    };
    assert_eq!(remembered.reasons, [Reason::AlreadyDelivered]);

    // Without the ledger (a process with another journal), the server's own check.
    let guard = guard.with_ledger(false);
    let second = guard.send(&contexts::live(), &drop).await.unwrap();
    let receipt = second.receipt().unwrap();
    assert_eq!(receipt.status, DropStatus::AlreadyPresent);
    assert!(receipt.is_already_present());
    assert_eq!(receipt.bytes, 70_000);
    assert_eq!(
        inode,
        inode_now(&server.upload.join(&name)),
        "the file was not replaced"
    );
    assert_eq!(
        modified,
        std::fs::metadata(server.upload.join(&name))
            .unwrap()
            .modified()
            .unwrap()
    );
    assert!(server.temporary_files_of(&name).is_empty());
    assert_eq!(
        journal.len(),
        5,
        "both deliveries are journaled, each after its attempting record, and the suppression"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_content_under_the_same_name_is_a_permanent_conflict() {
    let server = server();
    let (guard, journal) = server.guard();
    // The server's own check, as a process with another journal meets it.
    let guard = guard.with_ledger(false);
    let name = format!("{}.csv", unique("conflict"));
    let original = payload("original", 50_000);
    guard
        .send(
            &contexts::live(),
            &FileDrop::from_bytes("orders_export", &name, original.clone()),
        )
        .await
        .unwrap();

    for other in [payload("same size, other bytes", 50_000), b"short".to_vec()] {
        let error = guard
            .send(
                &contexts::live(),
                &FileDrop::from_bytes("orders_export", &name, other),
            )
            .await
            .unwrap_err();
        let SendError::Failed { attempts, source } = &error else {
            panic!("expected a failed delivery, got {error:?}");
        };
        assert_eq!(*attempts, 1, "a conflict is not retried");
        assert!(source.is_conflict() && source.is_permanent(), "{source}");
        assert!(source.to_string().contains("conflicting file"), "{source}");
    }
    assert_eq!(
        server.read(&name),
        Some(original),
        "nothing was overwritten"
    );
    assert!(server.temporary_files_of(&name).is_empty());
    let failed = journal
        .records()
        .iter()
        .filter(|r| r.decision == JournalDecision::Failed)
        .count();
    assert_eq!(failed, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_replaces_a_different_file_only_when_enabled() {
    let server = server();
    let (guard, _journal) = guard_from(server.builder().overwrite(true));
    // The server's own check, as a process with another journal meets it.
    let guard = guard.with_ledger(false);
    assert!(guard.unguarded_ref().overwrites());
    let name = format!("{}.csv", unique("overwrite"));
    guard
        .send(
            &contexts::live(),
            &FileDrop::from_bytes("orders_export", &name, payload("first", 40_000)),
        )
        .await
        .unwrap();

    let second = payload("second", 90_000);
    let outcome = guard
        .send(
            &contexts::live(),
            &FileDrop::from_bytes("orders_export", &name, second.clone()),
        )
        .await
        .unwrap();
    assert_eq!(outcome.receipt().unwrap().status, DropStatus::Uploaded);
    assert_eq!(server.read(&name), Some(second.clone()));

    let again = guard
        .send(
            &contexts::live(),
            &FileDrop::from_bytes("orders_export", &name, second),
        )
        .await
        .unwrap();
    assert_eq!(again.receipt().unwrap().status, DropStatus::AlreadyPresent);
    assert!(server.temporary_files_of(&name).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_file_is_streamed_whole() {
    let server = server();
    let (guard, _journal) = server.guard();
    let local = tempfile::NamedTempFile::new().unwrap();
    let name = format!("{}.bin", unique("from_file"));
    let bytes = payload(&name, 3 * 1024 * 1024 + 17);
    std::fs::write(local.path(), &bytes).unwrap();

    let drop = FileDrop::from_file("ledger_export", &name, local.path()).unwrap();
    assert_eq!(drop.len(), bytes.len() as u64);
    assert_eq!(drop.path(), Some(local.path()));
    let outcome = guard.send(&contexts::live(), &drop).await.unwrap();

    assert_eq!(outcome.receipt().unwrap().status, DropStatus::Uploaded);
    assert_eq!(server.read(&name), Some(bytes));
    assert!(server.temporary_files_of(&name).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_file_changed_after_the_drop_was_made_is_not_renamed_into_place() {
    let server = server();
    let (guard, _journal) = server.guard();
    let local = tempfile::NamedTempFile::new().unwrap();
    let name = format!("{}.csv", unique("changed"));
    std::fs::write(local.path(), payload("before", 100_000)).unwrap();
    let drop = FileDrop::from_file("orders_export", &name, local.path()).unwrap();
    std::fs::write(local.path(), payload("after", 100_000)).unwrap();

    let error = guard.send(&contexts::live(), &drop).await.unwrap_err();
    let SendError::Failed { source, attempts } = &error else {
        panic!("{error:?}");
    };
    assert!(source.is_local_file() && source.is_permanent(), "{source}");
    assert_eq!(*attempts, 1);
    assert_eq!(server.read(&name), None);
    assert!(
        server.temporary_files_of(&name).is_empty(),
        "the temporary file was removed: {:?}",
        server.temporary_files_of(&name)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_drops_of_different_files_all_land_whole() {
    let server = server();
    let (guard, journal) = server.guard();
    let guard = std::sync::Arc::new(guard);
    let prefix = unique("concurrent");
    let mut tasks = Vec::new();
    for index in 0..8 {
        let guard = std::sync::Arc::clone(&guard);
        let name = format!("{prefix}_{index}.bin");
        let bytes = payload(&name, 512 * 1024 + index * 1000);
        tasks.push(tokio::spawn(async move {
            let drop = FileDrop::from_bytes("orders_export", &name, bytes.clone());
            let outcome = guard.send(&contexts::live(), &drop).await.unwrap();
            assert_eq!(outcome.receipt().unwrap().status, DropStatus::Uploaded);
            (name, bytes)
        }));
    }
    for task in tasks {
        let (name, bytes) = task.await.unwrap();
        assert_eq!(server.read(&name), Some(bytes), "{name} landed whole");
    }
    assert_eq!(
        server.entries_containing(&prefix).len(),
        8,
        "no temporary files left: {:?}",
        server.entries_containing(&prefix)
    );
    assert_eq!(journal.len(), 16, "attempting and delivered for each drop");
    assert!(guard.unguarded_ref().idle_sessions() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_authenticated_session_serves_successive_drops() {
    let server = server();
    let (guard, _journal) = server.guard();
    let prefix = unique("reuse");
    for index in 0..3 {
        let name = format!("{prefix}_{index}.csv");
        guard
            .send(
                &contexts::live(),
                &FileDrop::from_bytes("orders_export", &name, payload(&name, 1000)),
            )
            .await
            .unwrap();
        assert_eq!(guard.unguarded_ref().idle_sessions(), 1);
    }
    guard.unguarded_ref().close_idle_sessions();
    assert_eq!(guard.unguarded_ref().idle_sessions(), 0);
    assert_eq!(server.entries_containing(&prefix).len(), 3);
}

fn inode(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

fn inode_now(path: &std::path::Path) -> u64 {
    inode(path)
}
