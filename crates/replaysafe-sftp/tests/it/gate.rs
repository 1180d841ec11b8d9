//! Backfill, replay, stale and unknown runs: nothing reaches the server, the journal
//! has the suppressed record.

use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{ReplayContext, SendError};
use replaysafe_sftp::FileDrop;
use replaysafe_test::contexts;

use crate::support::{guard_from, payload, server, unique, was_contacted};

fn suppressing_contexts() -> [(&'static str, ReplayContext, &'static str); 4] {
    [
        ("backfill", contexts::backfill(), "replay_run"),
        ("replay", contexts::replay(), "replay_flag"),
        ("stale", contexts::stale(), "stale_window"),
        ("unknown", contexts::unknown(), "unknown_context"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suppressed_runs_drop_no_file_and_journal_the_decision() {
    let server = server();
    for (label, cx, reason) in suppressing_contexts() {
        let (guard, journal) = server.guard();
        let prefix = unique(&format!("gate_{label}"));
        let drop = FileDrop::from_bytes(
            "orders_export",
            format!("{prefix}_{{window_start:%Y%m%d}}.csv"),
            payload(&prefix, 10_000),
        );

        let outcome = guard.send(&cx, &drop).await.unwrap();

        assert!(outcome.is_suppressed(), "{label}");
        assert!(
            server.entries_containing(&prefix).is_empty(),
            "{label}: no file and no temporary file"
        );
        let records = journal.records();
        assert_eq!(records.len(), 1, "{label}");
        let record = &records[0];
        assert_eq!(record.decision, JournalDecision::Suppressed, "{label}");
        assert!(
            record.reasons.iter().any(|r| r == reason),
            "{label}: {:?}",
            record.reasons
        );
        let expected_name = format!("{prefix}_{}.csv", cx.window().start().format("%Y%m%d"));
        assert!(
            record.effect.target.ends_with(&format!("/{expected_name}")),
            "{label}: {}",
            record.effect.target
        );
        assert_eq!(record.effect.payload_bytes, 10_000);
        assert_eq!(record.attempt, 0);
        assert_eq!(
            guard.unguarded_ref().idle_sessions(),
            0,
            "{label}: no session"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suppressed_drop_opens_no_connection() {
    let server = server();
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (guard, journal) = guard_from(server.builder_on_port(port));
    for (label, cx, _) in suppressing_contexts() {
        let drop = FileDrop::from_bytes("orders_export", "quiet.csv", "x");
        assert!(
            guard.send(&cx, &drop).await.unwrap().is_suppressed(),
            "{label}"
        );
    }
    assert!(
        !was_contacted(&listener),
        "the gate runs before any connection"
    );
    assert_eq!(journal.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traversal_and_malformed_names_are_refused_before_anything_is_sent() {
    let server = server();
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (guard, journal) = guard_from(server.builder_on_port(port));
    let corpus = [
        "../x",
        "a/../../x",
        "/etc/x",
        "a\\b",
        "x\0y",
        "",
        ".",
        "..",
        "sub/x",
        "{pipeline}/../x",
        "x{nope}",
    ];
    for name in corpus {
        for cx in [contexts::live(), contexts::backfill()] {
            let drop = FileDrop::from_bytes("orders_export", name, "payload");
            let error = guard.send(&cx, &drop).await.unwrap_err();
            let SendError::Invalid(source) = &error else {
                panic!("{name:?}: expected an invalid effect, got {error:?}");
            };
            assert!(source.is_invalid(), "{name:?}");
            assert_eq!(source.field(), Some("name"), "{name:?}: {source}");
        }
    }
    assert!(journal.is_empty(), "invalid effects are not journaled");
    assert!(!was_contacted(&listener), "nothing was sent");
    assert!(!std::path::Path::new("/etc/x").exists());
    assert!(!server.upload.parent().unwrap().join("x").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_name_cannot_smuggle_a_path_into_the_template() {
    let server = server();
    let (guard, journal) = server.guard();
    let cx = replaysafe_test::contexts::builder(
        replaysafe_core::RunKind::Scheduled,
        contexts::current_window(),
    )
    .pipeline("../../etc")
    .build()
    .unwrap();
    let drop = FileDrop::from_bytes("orders_export", "{pipeline}.csv", "x");
    let error = guard.send(&cx, &drop).await.unwrap_err();
    assert!(matches!(&error, SendError::Invalid(source) if source.field() == Some("name")));
    assert!(journal.is_empty());
}
